//! The AdmissionReview wire format, read and written only as far as the rules need it.
//!
//! kube's `AdmissionReview<DynamicObject>` decodes the object through flattened maps and the
//! rules then need it back as JSON: a whole-object round trip per review (a third of the time
//! of a review in the profile). Here the object stays the JSON it came as, and the answer is
//! written as the apiserver reads it, the patch as base64 (`[]byte` in Go), not as an array of
//! numbers.
//!
//! Any pod can send a review, so what is read of one is bounded: an object keeps only the fields
//! the rules read ([`KEPT_METADATA`] and `spec`), every other field is skipped without being
//! built, and the values built of an object or of `userInfo` are counted ([`MAX_OBJECT_VALUES`],
//! [`MAX_USER_VALUES`]). A whole `serde_json::Value` of a 4 MiB `[0,0,...]` takes over 64 MiB;
//! here an `object` that is no JSON object fails at its first byte, naming `request.object`.
use std::cell::Cell;
use std::fmt;

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::Operation;
use kube::core::GroupVersionKind;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Number, Value};

/// The fields of an object's metadata that the rules read; the others (labels, managedFields,
/// ...) are skipped unread, and of the annotations only [`KEPT_ANNOTATIONS`] are kept.
pub const KEPT_METADATA: [&str; 7] = [
    "name",
    "namespace",
    "generateName",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "annotations",
];

/// The annotations the rules read: a Scaler's author (api's `access::author`).
pub const KEPT_ANNOTATIONS: [&str; 1] = [kubesteer_api::keys::annotation::AUTHOR];

/// Values (each number, string, list, map and entry) built of one object's kept fields. A spec
/// with every list at its schema's `maxItems` holds a few thousand; this bounds what an object
/// built here takes to about 1 MiB beside its strings (at most 64 bytes a value: a `Value`, or a
/// map entry with its key).
pub const MAX_OBJECT_VALUES: usize = 16_384;

/// The longest string built of an object under review or of `userInfo`. No valid spec holds a
/// longer one: every string of the schemas but an env value has a `maxLength` of at most 1024,
/// and an environment string over 128 KiB fails the container's exec (Linux's
/// `MAX_ARG_STRLEN`). A longer one is refused before it is copied into the spec, its error and
/// the message quoting it.
pub const MAX_STRING_BYTES: usize = 128 * 1024;

/// Values built of `userInfo`: its groups and extra. Identity providers send at most a few
/// hundred groups.
pub const MAX_USER_VALUES: usize = 4_096;

/// An AdmissionReview as the apiserver sends it (what is read of it).
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub request: Option<Request>,
}

/// The request of a review: who asks to do what to which object.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default, deserialize_with = "user_info")]
    pub user_info: UserInfo,
    /// The object as far as the rules read it: `spec` and [`KEPT_METADATA`].
    #[serde(default, deserialize_with = "object")]
    pub object: Option<Value>,
    /// The stored object (UPDATE), kept as `object` is.
    #[serde(default, deserialize_with = "old_object")]
    pub old_object: Option<Value>,
    /// A dry run (`kubectl apply --dry-run=server`): nothing may be written for it (the
    /// configurations say `sideEffects: NoneOnDryRun` where a rule writes).
    #[serde(default)]
    pub dry_run: bool,
}

impl Request {
    /// The operation as the apiserver names it.
    pub fn operation_name(&self) -> &'static str {
        match self.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

fn object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    d.deserialize_option(Nullable(Object {
        path: "request.object",
        metadata: "request.object.metadata",
        spec: "request.object.spec",
    }))
}

fn old_object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    d.deserialize_option(Nullable(Object {
        path: "request.oldObject",
        metadata: "request.oldObject.metadata",
        spec: "request.oldObject.spec",
    }))
}

fn user_info<'de, D: Deserializer<'de>>(d: D) -> Result<UserInfo, D::Error> {
    let left = Cell::new(MAX_USER_VALUES);
    let value = Bounded {
        left: &left,
        path: "request.userInfo",
        max: MAX_USER_VALUES,
        object: false,
        max_string: MAX_STRING_BYTES,
    }
    .deserialize(d)?;
    if value.is_null() {
        return Ok(UserInfo::default());
    }
    UserInfo::deserialize(value).map_err(|e| de::Error::custom(format!("request.userInfo: {e}")))
}

/// `null` as `None`, anything else as the seed reads it.
struct Nullable<S>(S);

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Nullable<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or a value")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

/// An object under review (its field path, and its metadata's and spec's, given: not formatted
/// for every review), read as [`Request::object`] says.
#[derive(Clone, Copy)]
struct Object {
    path: &'static str,
    metadata: &'static str,
    spec: &'static str,
}

impl<'de> DeserializeSeed<'de> for Object {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        // Asks for a map, so anything else fails at its first byte.
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Object {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to be a JSON object", self.path)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let left = Cell::new(MAX_OBJECT_VALUES);
        let mut kept = Map::new();
        while let Some(key) = map.next_key_seed(Pick(&["metadata", "spec"]))? {
            match key {
                Some(0) => {
                    let metadata = map.next_value_seed(Metadata {
                        path: self.metadata,
                        left: &left,
                        keep: &KEPT_METADATA,
                    })?;
                    kept.insert("metadata".into(), metadata);
                }
                Some(_) => {
                    let spec = map.next_value_seed(Bounded {
                        left: &left,
                        path: self.spec,
                        max: MAX_OBJECT_VALUES,
                        object: false,
                        max_string: MAX_STRING_BYTES,
                    })?;
                    kept.insert("spec".into(), spec);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(kept))
    }
}

/// An object's metadata: the fields of `keep` ([`KEPT_METADATA`]; of its annotations
/// [`KEPT_ANNOTATIONS`]), counted against the object's values.
struct Metadata<'a> {
    path: &'a str,
    left: &'a Cell<usize>,
    keep: &'static [&'static str],
}

impl<'de> DeserializeSeed<'de> for Metadata<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Metadata<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to be a JSON object", self.path)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(key) = map.next_key_seed(Pick(self.keep))? {
            match key {
                Some(i) if self.keep[i] == "annotations" => {
                    let annotations = map.next_value_seed(Metadata {
                        path: self.path,
                        left: self.left,
                        keep: &KEPT_ANNOTATIONS,
                    })?;
                    kept.insert("annotations".into(), annotations);
                }
                Some(i) => {
                    let value = map.next_value_seed(Bounded {
                        left: self.left,
                        path: self.path,
                        max: MAX_OBJECT_VALUES,
                        object: false,
                        max_string: MAX_STRING_BYTES,
                    })?;
                    kept.insert(self.keep[i].into(), value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(kept))
    }
}

/// A map key, as its index among the wanted ones; `None` for any other.
struct Pick(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Pick {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Pick {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|k| *k == key))
    }
}

/// A whole object (as a ConversionReview carries them), built as a `Value` of at most `max`
/// values; anything but a JSON object fails at its first byte. Errors name `path`.
pub fn whole_object(json: &str, path: &str, max: usize) -> Result<Value, serde_json::Error> {
    let left = Cell::new(max);
    let mut d = serde_json::Deserializer::from_str(json);
    let object = Bounded {
        left: &left,
        path,
        max,
        object: true,
        // A stored object's annotations may hold 256 KiB (kubectl's last-applied-configuration).
        max_string: usize::MAX,
    }
    .deserialize(&mut d)?;
    d.end()?;
    Ok(object)
}

/// A JSON value (a JSON object if `object`), built as a `Value` while the count `left` lasts;
/// past it, an error naming `path`, the field the count is of.
#[derive(Clone, Copy)]
struct Bounded<'a> {
    left: &'a Cell<usize>,
    path: &'a str,
    max: usize,
    object: bool,
    /// The longest string built.
    max_string: usize,
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.left.get().checked_sub(1) {
            Some(left) => self.left.set(left),
            None => {
                return Err(de::Error::custom(format!(
                    "{}: more than {} values, more than any valid object holds",
                    self.path, self.max
                )));
            }
        }
        if self.object {
            d.deserialize_map(Bounded {
                object: false,
                ..self
            })
        } else {
            d.deserialize_any(self)
        }
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to be a JSON object", self.path)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        if v.len() > self.max_string {
            return Err(E::custom(format!(
                "{}: a string of {} bytes, longer than any valid object holds ({})",
                self.path,
                v.len(),
                self.max_string
            )));
        }
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.visit_str(&v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key.len() > self.max_string {
                return Err(de::Error::custom(format!(
                    "{}: a key of {} bytes, longer than any valid object holds ({})",
                    self.path,
                    key.len(),
                    self.max_string
                )));
            }
            let value = map.next_value_seed(self)?;
            entries.insert(key, value);
        }
        Ok(Value::Object(entries))
    }
}

/// The longest denial message. A message quotes the values it refuses, and a value may be
/// megabytes long (a 4 MiB image name); the answer and the log line stay this short. Room for a
/// hundred refused targets' reasons.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// `text` cut to at most `max` bytes (at a character boundary), saying how long it was.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut end = max.saturating_sub(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("... (cut at {end} of {total} bytes)"));
    text
}

/// A string field of an object's metadata, if it is one.
pub fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// The answer to a review: the request's apiVersion and kind and a response (an
/// AdmissionReview's by default; a ConversionReview's is [`crate::conversion::Answer`]).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer<R = Response> {
    pub api_version: String,
    pub kind: String,
    pub response: R,
}

/// Whether the request is admitted, and with what patch, warnings or reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    pub uid: String,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Denial>,
    /// A JSON patch (RFC 6902), written as base64.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "as_base64")]
    pub patch: Option<Vec<u8>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
}

/// Why a request is denied, as a `metav1.Status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Denial {
    pub status: &'static str,
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl Response {
    /// Admits the request with this uid, as it is.
    pub fn allow(uid: &str) -> Self {
        Self {
            uid: uid.to_string(),
            allowed: true,
            status: None,
            patch: None,
            patch_type: None,
            warnings: None,
        }
    }

    /// Denies it as invalid (422), saying why in at most [`MAX_MESSAGE_BYTES`].
    pub fn deny(self, message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            status: Some(Denial {
                status: "Failure",
                code: 422,
                reason: "Invalid",
                message: cut(message.into(), MAX_MESSAGE_BYTES),
            }),
            patch: None,
            patch_type: None,
            ..self
        }
    }

    /// Admits it with a JSON patch.
    pub fn with_patch(self, patch: &json_patch::Patch) -> Result<Self, serde_json::Error> {
        Ok(Self {
            patch: Some(serde_json::to_vec(patch)?),
            patch_type: Some("JSONPatch"),
            ..self
        })
    }

    /// The denial's message; empty when admitted.
    pub fn message(&self) -> &str {
        self.status.as_ref().map_or("", |d| d.message.as_str())
    }
}

fn as_base64<S: Serializer>(patch: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match patch {
        Some(bytes) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_patch_is_written_as_base64_with_its_type() {
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/spec/a", "value": 1}])).unwrap();
        let response = Response::allow("u").with_patch(&patch).unwrap();
        let json = serde_json::to_value(&response).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(json["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<json_patch::Patch>(&bytes).unwrap(),
            patch
        );
        assert_eq!(json["patchType"], "JSONPatch");
        assert_eq!(json["allowed"], true);
        assert!(json.get("status").is_none(), "{json}");
    }

    #[test]
    fn a_denial_is_a_failure_status_without_a_patch() {
        let response = Response::allow("u").deny("spec.size: must be at least 0");
        let json = serde_json::to_value(&response).unwrap();
        assert_eq!(
            json,
            json!({"uid": "u", "allowed": false, "status": {"status": "Failure", "code": 422,
                "reason": "Invalid", "message": "spec.size: must be at least 0"}})
        );
    }

    #[test]
    fn a_review_keeps_its_object_as_json_and_reads_null_as_absent() {
        let review: Review = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "kubesteer.io", "version": "v1alpha1",
                "kind": "Memcached"}, "operation": "CREATE", "userInfo": {"username": "alice"},
                "object": {"metadata": {"name": "m"}, "spec": {"size": 1}}, "oldObject": null}
        }))
        .unwrap();
        let request = review.request.unwrap();
        assert_eq!(request.operation_name(), "CREATE");
        let object = request.object.unwrap();
        assert_eq!(meta(&object, "name"), Some("m"));
        assert_eq!(object["spec"]["size"], 1);
        assert!(request.old_object.is_none());
    }

    /// A review on one line whose request has `field` set to the JSON `value`.
    fn review_with(field: &str, value: &str) -> String {
        format!(
            r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {{"uid": "u", "kind": {{"group": "kubesteer.io", "version": "v1beta1", "kind": "Scaler"}}, "operation": "UPDATE", "{field}": {value}}}}}"#
        )
    }

    #[test]
    fn an_object_that_is_no_json_object_fails_at_its_first_byte_naming_the_field() {
        let zeros = format!("[{}0]", "0,".repeat(2 * 1024 * 1024));
        for field in ["object", "oldObject"] {
            let body = review_with(field, &zeros);
            let e = serde_json::from_str::<Review>(&body).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!(
                    "invalid type: sequence, expected request.{field} to be a JSON object"
                )),
                "{e}"
            );
            // At the list's first byte (serde_json names the column before it): nothing of it
            // was read, let alone built.
            assert_eq!(e.column(), body.find('[').unwrap(), "{e}");
        }
        let e = serde_json::from_str::<Review>(&review_with("object", r#"{"metadata": 7}"#))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("expected request.object.metadata to be a JSON object"),
            "{e}"
        );
    }

    #[test]
    fn an_object_keeps_only_what_the_rules_read_and_counts_its_values() {
        let object = json!({
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"name": "s", "namespace": "team", "uid": "u1", "labels": {"a": "b"},
                "creationTimestamp": "2025-01-01T00:00:00Z", "managedFields": [{"manager": "kubectl"}]},
            "spec": {"suspend": true, "windows": [{"start": 9, "end": 17}]},
            "status": {"targets": [{"name": "web"}]}
        });
        let body = review_with("object", &object.to_string());
        let request = serde_json::from_str::<Review>(&body)
            .unwrap()
            .request
            .unwrap();
        assert_eq!(
            request.object.unwrap(),
            json!({
                "metadata": {"name": "s", "namespace": "team", "uid": "u1",
                    "creationTimestamp": "2025-01-01T00:00:00Z"},
                "spec": {"suspend": true, "windows": [{"start": 9, "end": 17}]}
            })
        );
        // A spec of more values than any valid one holds is refused, naming it, before it is
        // all built; the skipped status may be of any size.
        let many = json!({"spec": {"x": vec![0; MAX_OBJECT_VALUES]}, "status": vec![0; 100_000]});
        let e = serde_json::from_str::<Review>(&review_with("oldObject", &many.to_string()))
            .unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "request.oldObject.spec: more than {MAX_OBJECT_VALUES} values"
            )),
            "{e}"
        );
        let fits =
            json!({"spec": {"x": vec![0; MAX_OBJECT_VALUES - 3]}, "status": vec![0; 100_000]});
        assert!(serde_json::from_str::<Review>(&review_with("object", &fits.to_string())).is_ok());
    }

    #[test]
    fn user_info_is_bounded_too() {
        let user = |groups: usize| {
            review_with(
                "userInfo",
                &json!({"username": "a", "groups": vec!["g"; groups]}).to_string(),
            )
        };
        let request = serde_json::from_str::<Review>(&user(3))
            .unwrap()
            .request
            .unwrap();
        assert_eq!(request.user_info.groups.unwrap().len(), 3);
        let e = serde_json::from_str::<Review>(&user(MAX_USER_VALUES)).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "request.userInfo: more than {MAX_USER_VALUES} values"
            )),
            "{e}"
        );
    }

    #[test]
    fn a_whole_object_is_read_bounded_and_must_be_an_object() {
        let object = json!({"metadata": {"name": "s"}, "spec": [1, 2, {"a": null}]});
        assert_eq!(
            whole_object(&object.to_string(), "objects[0]", 10).unwrap(),
            object
        );
        let e = whole_object(&object.to_string(), "objects[0]", 6).unwrap_err();
        assert!(
            e.to_string().starts_with("objects[0]: more than 6 values"),
            "{e}"
        );
        let e = whole_object("[0, 0, 0]", "objects[3]", 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid type: sequence, expected objects[3] to be a JSON object at line 1 column 0"
        );
    }

    #[test]
    fn a_denial_quoting_a_huge_value_is_cut() {
        let huge = format!("spec.image: Invalid value: \"{}\"", "é".repeat(1 << 20));
        let response = Response::allow("u").deny(huge);
        let message = response.message();
        assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
        assert!(message.starts_with("spec.image: Invalid value: \"éé"));
        assert!(
            message.ends_with(&format!(
                "... (cut at {} of {} bytes)",
                MAX_MESSAGE_BYTES - 64,
                2 * (1 << 20) + 29
            )),
            "{}",
            &message[message.len() - 80..]
        );
        assert_eq!(Response::allow("u").deny("short").message(), "short");
    }

    #[test]
    fn a_string_longer_than_any_valid_object_holds_is_refused_naming_its_field() {
        let long = "a".repeat(MAX_STRING_BYTES + 1);
        for (field, value, path) in [
            (
                "object",
                json!({"spec": {"image": long}}),
                "request.object.spec",
            ),
            (
                "oldObject",
                json!({"metadata": {"name": long}}),
                "request.oldObject.metadata",
            ),
            ("userInfo", json!({"username": long}), "request.userInfo"),
            (
                "object",
                json!({"spec": {long.as_str(): 1}}),
                "request.object.spec",
            ),
        ] {
            let e = serde_json::from_str::<Review>(&review_with(field, &value.to_string()))
                .unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("{path}: a ")),
                "{field}: {e}"
            );
            assert!(
                e.to_string().contains("longer than any valid object holds"),
                "{e}"
            );
        }
        let fits = json!({"spec": {"env": [{"name": "A", "value": "a".repeat(MAX_STRING_BYTES)}]}});
        assert!(serde_json::from_str::<Review>(&review_with("object", &fits.to_string())).is_ok());
        // A converted object is stored already: its annotations may be long.
        let stored = json!({"metadata": {"annotations": {"a": "a".repeat(256 * 1024)}}});
        assert!(whole_object(&stored.to_string(), "objects[0]", 10).is_ok());
    }
}
