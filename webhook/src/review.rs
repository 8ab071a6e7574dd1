//! The AdmissionReview wire format, read and written only as far as the rules need it.
//!
//! kube's `AdmissionReview<DynamicObject>` decodes the object through flattened maps and the
//! rules then need it back as JSON: a whole-object round trip per review (a third of the time
//! of a review in the profile). Here the object stays the JSON it came as, and the answer is
//! written as the apiserver reads it, the patch as base64 (`[]byte` in Go), not as an array of
//! numbers.
use base64::Engine as _;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::Operation;
use kube::core::GroupVersionKind;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

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
    #[serde(default)]
    pub user_info: UserInfo,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(default)]
    pub old_object: Option<Value>,
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

/// A string field of an object's metadata, if it is one.
pub fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// The answer: an AdmissionReview with the request's apiVersion and kind and a response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub api_version: String,
    pub kind: String,
    pub response: Response,
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

    /// Denies it as invalid (422), saying why.
    pub fn deny(self, message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            status: Some(Denial {
                status: "Failure",
                code: 422,
                reason: "Invalid",
                message: message.into(),
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
}
