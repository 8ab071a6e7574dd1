//! Sleep by a declared patch: a kind without `/scale` (a CloudNativePG Cluster, an Argo CD
//! Application, any custom resource) is put to sleep by a patch the Scaler declares for its
//! group and kind, as kube-green's `SleepInfo.patches`, and given back exactly.
//!
//! A patch is written as kube-green's users write it, in YAML or JSON: a list of RFC 6902
//! operations (`add`, `replace`, `remove`) or a JSON merge patch (a map). Either becomes a list
//! of [`Edit`]s, one per path it touches. Putting an object to sleep records, for every path,
//! the value it had (or that it had none) and the value set, in the annotation
//! [`crate::keys::annotation::ASLEEP_PATCH`] on the object, in the same write.
//! Waking it puts back each recorded value (removing a path that was absent), except where the
//! value is no longer the one set: someone else changed it while asleep, and it is theirs.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::field::{FieldError, FieldErrors};
use crate::keys::annotation::ASLEEP_PATCH;
use crate::rules::scaler::{MAX_KIND, MAX_PATCHES, MAX_PATCH_BYTES, MAX_PATCH_EDITS};
use crate::rules::MAX_SUBDOMAIN;

/// Whether the Scaler scales or suspends the kind `group`/`kind` through the object's own spec
/// (the apps/v1 workloads, and the batch/v1 kinds it suspends): one patch writes its replicas and
/// the record together, and a declared sleep patch cannot replace that.
pub fn replicas_in_spec_kind(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        (
            "apps",
            "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet"
        ) | ("batch", "CronJob" | "Job")
    )
}

/// A patch that puts every target of one kind to sleep while its replicas would be 0.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct SleepPatch {
    /// The kind the patch applies to, by API group and kind (any version).
    pub target: PatchTarget,
    /// The patch, in YAML or JSON: a list of RFC 6902 operations (add, replace, remove) or a JSON merge patch (a map). It may touch spec and metadata.labels or metadata.annotations. Applied while the target's replicas would be 0, and taken back after: every path it touches is recorded before and restored exactly (a path that was absent is removed again); a value someone else changed while asleep is left as they set it.
    #[schemars(length(min = 1, max = MAX_PATCH_BYTES))]
    pub patch: String,
}

/// The group and kind a [`SleepPatch`] applies to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct PatchTarget {
    /// API group of the kind, e.g. "postgresql.cnpg.io"; empty for the core group.
    #[serde(default)]
    #[schemars(length(max = MAX_SUBDOMAIN))]
    pub group: String,
    /// Kind, e.g. "Cluster".
    #[schemars(length(min = 1, max = MAX_KIND))]
    pub kind: String,
}

/// One path a patch touches, and what it puts there.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// A JSON pointer (RFC 6901), e.g. `/metadata/annotations/cnpg.io~1hibernation`.
    pub path: String,
    /// The value set; None when the patch removes the path.
    pub value: Option<Value>,
}

/// What the annotation [`ASLEEP_PATCH`] holds: who put the object to sleep, and each path as
/// it was and as set.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SleepRecord {
    /// The Scaler, as `namespace/name`.
    pub owner: String,
    pub paths: Vec<RecordedPath>,
}

/// One path of a [`SleepRecord`]. An absent value is a missing field (a present `null` is a
/// value).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RecordedPath {
    pub path: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub before: Option<Value>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub set: Option<Value>,
    /// The outermost map made on the way to the path (it was absent), removed again on waking
    /// if it is empty then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made: Option<String>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl SleepPatch {
    /// Whether this patch is for `group`/`kind`.
    pub fn is_for(&self, group: &str, kind: &str) -> bool {
        self.target.group == group && self.target.kind == kind
    }

    /// The patch's paths and values, or why it cannot be one.
    pub fn edits(&self) -> Result<Vec<Edit>, String> {
        let parsed: Value = serde_yaml::from_str(&self.patch)
            .map_err(|e| format!("is neither YAML nor JSON: {e}"))?;
        let edits = match parsed {
            Value::Array(ops) => ops
                .iter()
                .enumerate()
                .map(|(i, op)| operation(op).map_err(|e| format!("operation {i}: {e}")))
                .collect::<Result<Vec<_>, _>>()?,
            Value::Object(map) => {
                let mut edits = Vec::new();
                merge_edits(&mut String::new(), &map, &mut edits);
                edits
            }
            _ => {
                return Err(
                    "must be a list of JSON patch operations or a JSON merge patch (a map)".into(),
                )
            }
        };
        if edits.is_empty() {
            return Err("changes nothing".into());
        }
        if edits.len() > MAX_PATCH_EDITS {
            return Err(format!(
                "touches {} paths, at most {MAX_PATCH_EDITS} are allowed",
                edits.len()
            ));
        }
        for (i, edit) in edits.iter().enumerate() {
            allowed_path(&edit.path)?;
            // One path inside another could not be recorded and restored apart.
            if let Some(other) = edits[..i].iter().find(|o| nested(&o.path, &edit.path)) {
                return Err(format!(
                    "touches {:?} and {:?}, one inside the other",
                    other.path, edit.path
                ));
            }
        }
        Ok(edits)
    }
}

/// Checks `spec.patches`: each entry parses, touches only what may be touched, and no two are
/// for the same kind.
pub fn validate(errors: &mut FieldErrors, patches: &[SleepPatch]) {
    if patches.len() > MAX_PATCHES {
        errors.push(FieldError::too_many(
            "spec.patches",
            patches.len(),
            MAX_PATCHES,
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in patches.iter().enumerate() {
        let path = format!("spec.patches[{i}]");
        if p.target.kind.is_empty() {
            errors.push(FieldError::required(
                format!("{path}.target.kind"),
                "must name the kind the patch puts to sleep",
            ));
        }
        if replicas_in_spec_kind(&p.target.group, &p.target.kind) {
            errors.push(FieldError::invalid(
                format!("{path}.target.kind"),
                p.target.kind.as_str(),
                "the Scaler scales or suspends this kind itself; a declared patch is for other kinds",
            ));
        }
        if !seen.insert((&p.target.group, &p.target.kind)) {
            errors.push(FieldError::duplicate(
                format!("{path}.target"),
                serde_json::to_value(&p.target).unwrap_or_default(),
            ));
        }
        if let Err(why) = p.edits() {
            errors.push(FieldError::invalid(
                format!("{path}.patch"),
                p.patch.as_str(),
                why,
            ));
        }
    }
}

/// One RFC 6902 operation as an edit: add and replace set, remove removes; the others cannot be
/// taken back path by path.
fn operation(op: &Value) -> Result<Edit, String> {
    let name = op["op"].as_str().ok_or("needs an \"op\"")?;
    let path = op["path"]
        .as_str()
        .ok_or("needs a \"path\", a JSON pointer such as /spec/suspend")?
        .to_string();
    let value = match name {
        "add" | "replace" => Some(
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("{name} needs a \"value\""))?,
        ),
        "remove" => None,
        other => {
            return Err(format!(
                "op {other:?} is not supported: use add, replace or remove, which can be taken back exactly"
            ))
        }
    };
    Ok(Edit { path, value })
}

/// The leaves of a merge patch as edits: a null removes, a map goes deeper, anything else is set.
fn merge_edits(prefix: &mut String, map: &Map<String, Value>, edits: &mut Vec<Edit>) {
    for (key, value) in map {
        let len = prefix.len();
        prefix.push('/');
        prefix.push_str(&escape(key));
        match value {
            Value::Object(inner) if !inner.is_empty() => merge_edits(prefix, inner, edits),
            Value::Null => edits.push(Edit {
                path: prefix.clone(),
                value: None,
            }),
            other => edits.push(Edit {
                path: prefix.clone(),
                value: Some(other.clone()),
            }),
        }
        prefix.truncate(len);
    }
}

/// Only the spec and the object's labels and annotations, and never kubesteer's own
/// annotations (its records) nor a path that appends to an array (not taken back exactly).
fn allowed_path(path: &str) -> Result<(), String> {
    let tokens = tokens(path)
        .ok_or_else(|| format!("path {path:?} is not a JSON pointer: it must start with \"/\""))?;
    let refuse = |why: &str| Err(format!("path {path:?} {why}"));
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    match tokens.as_slice() {
        ["", ..] => refuse("has an empty segment"),
        ["spec", rest @ ..] if !rest.is_empty() => {
            if rest.contains(&"-") {
                return refuse("appends to an array, which cannot be taken back exactly");
            }
            Ok(())
        }
        ["metadata", "labels" | "annotations", key] if key.starts_with("kubesteer.io/") => {
            refuse("is one of kubesteer's own keys")
        }
        ["metadata", "labels" | "annotations", key] if !key.is_empty() => Ok(()),
        _ => refuse(
            "is outside what a patch may touch: spec, metadata.labels and metadata.annotations",
        ),
    }
}

/// Whether one of two pointers is the other or lies inside it.
fn nested(a: &str, b: &str) -> bool {
    let inside = |outer: &str, inner: &str| {
        inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|r| r.starts_with('/'))
    };
    inside(a, b) || inside(b, a)
}

/// A pointer's segments, unescaped; None when it does not start with "/".
fn tokens(path: &str) -> Option<Vec<String>> {
    let rest = path.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Whether the object carries a sleep record (any Scaler's).
pub fn is_asleep(object: &Value) -> bool {
    record_of(object).is_some()
}

/// The sleep record on an object, None when it has none or it cannot be read.
pub fn record_of(object: &Value) -> Option<SleepRecord> {
    let text = object["metadata"]["annotations"][ASLEEP_PATCH].as_str()?;
    serde_json::from_str(text).ok()
}

/// The object put to sleep by `edits` on behalf of `owner`, with its record; unchanged when it
/// is asleep already. Err when a path cannot be set (through an array that is too short, or a
/// value that is no map).
pub fn put_to_sleep(object: &Value, edits: &[Edit], owner: &str) -> Result<Value, String> {
    if is_asleep(object) {
        return Ok(object.clone());
    }
    let mut asleep = object.clone();
    let mut paths = Vec::with_capacity(edits.len());
    for edit in edits {
        let before = asleep.pointer(&edit.path).cloned();
        let made = edit
            .value
            .as_ref()
            .and_then(|_| outermost_absent(&asleep, &edit.path));
        write(&mut asleep, &edit.path, edit.value.clone())?;
        paths.push(RecordedPath {
            path: edit.path.clone(),
            before,
            set: edit.value.clone(),
            made,
        });
    }
    let record_path = format!("/metadata/annotations/{}", escape(ASLEEP_PATCH));
    let made_for_record = outermost_absent(&asleep, &record_path);
    let record = SleepRecord {
        owner: owner.to_string(),
        paths,
    };
    let text = serde_json::to_string(&record).map_err(|e| e.to_string())?;
    write(&mut asleep, &record_path, Some(Value::String(text)))?;
    if let Some(made) = made_for_record {
        // Marked on the object itself, so that waking removes the map it made for the record.
        write(
            &mut asleep,
            &format!("/metadata/annotations/{}", escape(MADE_FOR_RECORD)),
            Some(Value::String(made)),
        )?;
    }
    Ok(asleep)
}

/// Set beside the record when the object had no annotations: the outermost map made for the
/// record, removed again on waking if empty then.
const MADE_FOR_RECORD: &str = "kubesteer.io/asleep-patch-made-annotations";

/// The outermost map on the way to `path` that the object lacks, as a pointer; None when
/// every parent is there.
fn outermost_absent(object: &Value, path: &str) -> Option<String> {
    let mut at = String::new();
    let parents = path.rsplit_once('/').map(|(p, _)| p).unwrap_or_default();
    for segment in parents.split('/').skip(1) {
        at.push('/');
        at.push_str(segment);
        if object.pointer(&at).is_none() {
            return Some(at);
        }
    }
    None
}

/// An object woken from its record.
#[derive(Debug, Clone, PartialEq)]
pub struct Woken {
    pub object: Value,
    /// The paths left as someone else set them while it slept.
    pub kept: Vec<String>,
}

/// The object given back as its record says, its record removed; the paths whose value is no
/// longer the one set are left alone and listed. An object without a readable record is
/// returned unchanged (with a record that cannot be read, only the record is removed).
pub fn wake(object: &Value) -> Woken {
    let mut woken = object.clone();
    let mut kept = Vec::new();
    let mut made = None;
    if let Some(annotations) = woken["metadata"]["annotations"].as_object_mut() {
        annotations.remove(ASLEEP_PATCH);
        made = annotations
            .remove(MADE_FOR_RECORD)
            .and_then(|v| v.as_str().map(str::to_string));
    }
    if let Some(record) = record_of(object) {
        for p in &record.paths {
            if woken.pointer(&p.path) != p.set.as_ref() {
                kept.push(p.path.clone());
                continue;
            }
            // The path existed when it was set, so putting back what was there cannot fail.
            if write(&mut woken, &p.path, p.before.clone()).is_err() {
                kept.push(p.path.clone());
            }
            remove_if_empty(&mut woken, p.made.as_deref());
        }
    }
    if let Some(made) = made {
        remove_if_empty(&mut woken, Some("/metadata/annotations"));
        remove_if_empty(&mut woken, Some(&made));
    }
    Woken {
        object: woken,
        kept,
    }
}

/// Removes the map at `path` if it is there and empty.
fn remove_if_empty(object: &mut Value, path: Option<&str>) {
    let Some(path) = path else { return };
    if object
        .pointer(path)
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        let _ = write(object, path, None);
    }
}

/// The RFC 6902 operations that turn `before` into `after`, conditional on `before`'s
/// resourceVersion (the apiserver refuses them with a conflict if the object changed since);
/// None when there is nothing to change.
pub fn write_ops(before: &Value, after: &Value) -> Option<Value> {
    let diff = json_patch::diff(before, after);
    if diff.0.is_empty() {
        return None;
    }
    let mut ops = serde_json::to_value(diff).ok()?;
    let condition = serde_json::json!({
        "op": "replace",
        "path": "/metadata/resourceVersion",
        "value": before["metadata"]["resourceVersion"],
    });
    if let Value::Array(list) = &mut ops {
        list.insert(0, condition);
    }
    Some(ops)
}

/// Sets (`Some`) or removes (`None`) the value at `path`, making missing maps on the way.
fn write(object: &mut Value, path: &str, value: Option<Value>) -> Result<(), String> {
    let tokens = tokens(path).ok_or_else(|| format!("{path:?} is not a JSON pointer"))?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err("the empty path".into());
    };
    let mut at = object;
    for token in parents {
        // A null on the way is a missing map: made when setting, nothing to remove otherwise.
        if at.is_null() && value.is_some() {
            *at = Value::Object(Map::new());
        }
        at = match at {
            Value::Object(map) => map
                .entry(token.clone())
                .or_insert_with(|| Value::Object(Map::new())),
            Value::Array(items) => {
                let i = index(token, items.len())?;
                &mut items[i]
            }
            Value::Null => return Ok(()),
            _ => return Err(format!("{path:?} goes through a value that is not a map")),
        };
    }
    match (at, value) {
        (Value::Object(map), Some(v)) => {
            map.insert(last.clone(), v);
        }
        (Value::Object(map), None) => {
            map.remove(last);
        }
        (Value::Array(items), Some(v)) => {
            let i = index(last, items.len())?;
            items[i] = v;
        }
        (Value::Array(_), None) => {
            return Err(format!(
                "{path:?} removes an array element, which cannot be taken back exactly"
            ))
        }
        (_, _) => return Err(format!("{path:?} goes through a value that is not a map")),
    }
    Ok(())
}

fn index(token: &str, len: usize) -> Result<usize, String> {
    token
        .parse::<usize>()
        .ok()
        .filter(|i| *i < len)
        .ok_or_else(|| format!("array index {token:?} is not one of the {len} elements"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(group: &str, kind: &str, text: &str) -> SleepPatch {
        SleepPatch {
            target: PatchTarget {
                group: group.into(),
                kind: kind.into(),
            },
            patch: text.into(),
        }
    }

    /// CloudNativePG's hibernation, as docs/scaler.md gives it.
    fn cnpg() -> SleepPatch {
        patch(
            "postgresql.cnpg.io",
            "Cluster",
            "metadata:\n  annotations:\n    cnpg.io/hibernation: \"on\"\n",
        )
    }

    /// Argo CD auto-sync off, as docs/scaler.md gives it.
    fn argo() -> SleepPatch {
        patch(
            "argoproj.io",
            "Application",
            "- op: remove\n  path: /spec/syncPolicy/automated\n",
        )
    }

    #[test]
    fn a_merge_patch_and_json_patch_operations_become_the_paths_they_touch() {
        assert_eq!(
            cnpg().edits().unwrap(),
            vec![Edit {
                path: "/metadata/annotations/cnpg.io~1hibernation".into(),
                value: Some(json!("on")),
            }]
        );
        assert_eq!(
            argo().edits().unwrap(),
            vec![Edit {
                path: "/spec/syncPolicy/automated".into(),
                value: None,
            }]
        );
        let merge = patch("x", "Y", r#"{"spec": {"a": {"b": 1}, "c": null}}"#);
        assert_eq!(merge.edits().unwrap().len(), 2);
    }

    #[test]
    fn a_patch_that_cannot_be_taken_back_or_reaches_too_far_is_refused_with_its_reason() {
        for (text, why) in [
            (
                "- op: move\n  from: /spec/a\n  path: /spec/b\n",
                "not supported",
            ),
            ("- op: add\n  path: /spec/list/-\n  value: 1\n", "appends"),
            ("- op: add\n  path: spec/a\n  value: 1\n", "JSON pointer"),
            ("- op: replace\n  path: /spec/a\n", "needs a \"value\""),
            ("{status: {phase: x}}", "outside what a patch may touch"),
            (
                "{metadata: {name: other}}",
                "outside what a patch may touch",
            ),
            (
                "{metadata: {annotations: {kubesteer.io/original-replicas: \"1\"}}}",
                "kubesteer's own",
            ),
            (
                "[{op: remove, path: /spec/a}, {op: add, path: /spec/a/b, value: 1}]",
                "one inside the other",
            ),
            ("just text", "must be a list"),
            ("{}", "changes nothing"),
            ("[: x", "neither YAML nor JSON"),
        ] {
            let err = patch("g", "K", text).edits().unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
        let mut errors = FieldErrors::default();
        validate(
            &mut errors,
            &[
                cnpg(),
                cnpg(),
                patch("g", "K", "{}"),
                patch("apps", "Deployment", "{spec: {paused: true}}"),
            ],
        );
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            messages[0].starts_with("spec.patches[1].target: Duplicate value"),
            "{messages:?}"
        );
        assert!(
            messages[1].starts_with("spec.patches[2].patch: Invalid value"),
            "{messages:?}"
        );
        assert!(
            messages[2].starts_with("spec.patches[3].target.kind: Invalid value: \"Deployment\""),
            "{messages:?}"
        );
    }

    fn cluster() -> Value {
        json!({
            "apiVersion": "postgresql.cnpg.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "pg", "annotations": {"team": "data"}},
            "spec": {"instances": 3}
        })
    }

    #[test]
    fn an_absent_path_is_recorded_as_absent_and_removed_again_on_waking() {
        let edits = cnpg().edits().unwrap();
        let asleep = put_to_sleep(&cluster(), &edits, "team/nights").unwrap();
        assert_eq!(
            asleep["metadata"]["annotations"]["cnpg.io/hibernation"],
            "on"
        );
        assert!(is_asleep(&asleep));
        let record = record_of(&asleep).unwrap();
        assert_eq!(record.owner, "team/nights");
        assert_eq!(record.paths[0].before, None);
        // Asleep already: the record is not written over with the asleep values.
        assert_eq!(
            put_to_sleep(&asleep, &edits, "team/nights").unwrap(),
            asleep
        );
        let woken = wake(&asleep);
        assert_eq!(woken.object, cluster(), "given back exactly");
        assert!(woken.kept.is_empty());
    }

    #[test]
    fn a_removed_value_and_a_present_null_come_back_as_they_were() {
        let app = json!({
            "metadata": {"name": "shop"},
            "spec": {"syncPolicy": {"automated": {"prune": true, "selfHeal": true}}, "x": null}
        });
        let edits = [
            argo().edits().unwrap(),
            vec![Edit {
                path: "/spec/x".into(),
                value: Some(json!(1)),
            }],
        ]
        .concat();
        let asleep = put_to_sleep(&app, &edits, "team/nights").unwrap();
        assert!(asleep["spec"]["syncPolicy"].get("automated").is_none());
        let record = record_of(&asleep).unwrap();
        assert_eq!(
            record.paths[1].before,
            Some(Value::Null),
            "a null is a value"
        );
        assert_eq!(wake(&asleep).object, app);
        // Missing maps on the way are made.
        let bare = json!({"metadata": {"name": "pg"}, "spec": {}});
        let asleep = put_to_sleep(&bare, &cnpg().edits().unwrap(), "a/b").unwrap();
        assert_eq!(
            asleep["metadata"]["annotations"]["cnpg.io/hibernation"],
            "on"
        );
        assert_eq!(
            wake(&asleep).object,
            bare,
            "the maps it made are gone again"
        );
        // A map made for a value that someone else then fills stays.
        let edits = patch("g", "K", "{spec: {a: {b: 1}}}").edits().unwrap();
        let mut asleep = put_to_sleep(&bare, &edits, "a/b").unwrap();
        asleep["spec"]["a"]["c"] = json!(2);
        assert_eq!(wake(&asleep).object["spec"]["a"], json!({"c": 2}));
    }

    #[test]
    fn a_value_changed_while_asleep_is_left_as_its_author_set_it() {
        let edits = patch("g", "K", "{spec: {paused: true, replicas: 0}}")
            .edits()
            .unwrap();
        let object = json!({"metadata": {}, "spec": {"paused": false, "replicas": 3}});
        let mut asleep = put_to_sleep(&object, &edits, "a/b").unwrap();
        // Someone sets replicas while it sleeps.
        asleep["spec"]["replicas"] = json!(5);
        let woken = wake(&asleep);
        assert_eq!(woken.object["spec"]["replicas"], 5, "theirs");
        assert_eq!(woken.object["spec"]["paused"], false, "restored");
        assert_eq!(woken.kept, vec!["/spec/replicas".to_string()]);
        assert!(!is_asleep(&woken.object));
    }

    #[test]
    fn a_scaler_deleted_while_asleep_gives_back_from_the_record_alone() {
        // Giving back needs only the object: the record carries everything, so a Scaler that is
        // gone (its spec and patch with it) still restores it as it was.
        let edits = cnpg().edits().unwrap();
        let asleep = put_to_sleep(&cluster(), &edits, "team/gone").unwrap();
        let text = serde_json::to_string(&asleep).unwrap();
        let reread: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(wake(&reread).object, cluster());
        // An unreadable record: nothing restored, the record removed.
        let mut broken = asleep.clone();
        broken["metadata"]["annotations"][ASLEEP_PATCH] = json!("{not json");
        let woken = wake(&broken);
        assert!(!is_asleep(&woken.object));
        assert!(woken.object["metadata"]["annotations"]
            .get(ASLEEP_PATCH)
            .is_none());
    }

    #[test]
    fn a_path_through_a_short_array_is_an_error_not_a_guess() {
        let edits = [Edit {
            path: "/spec/containers/2/image".into(),
            value: Some(json!("x")),
        }];
        let object = json!({"spec": {"containers": [{"image": "a"}]}});
        assert!(put_to_sleep(&object, &edits, "a/b").is_err());
        let edits = [Edit {
            path: "/spec/containers/0/image".into(),
            value: Some(json!("x")),
        }];
        let asleep = put_to_sleep(&object, &edits, "a/b").unwrap();
        assert_eq!(asleep["spec"]["containers"][0]["image"], "x");
        assert_eq!(wake(&asleep).object, object);
    }
}
