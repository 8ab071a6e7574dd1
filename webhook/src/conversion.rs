//! `/convert`: the CRD conversion webhook (ConversionReview, `apiextensions.k8s.io/v1`).
//!
//! Every object of a review is converted by `kubesteer_api::scaler::convert`; when one cannot be, the
//! whole review fails with a message naming the object (its index and name) and the field, as
//! the apiserver requires all or nothing. A body that is no ConversionReview gets a 400.
//!
//! The body is read within the webhook's memory budget (`budget.rs`), and its objects are kept
//! as the raw JSON they came as and read one at a time, each built of at most
//! [`MAX_OBJECT_VALUES`] values and written back as JSON before the next is read: a review holds
//! about twice its body, never a whole `serde_json::Value` of it.
use axum::Json;
use kube::core::Status;
use kubesteer_api::scaler::convert::convert as convert_object;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::budget::Received;
use crate::error::ApiError;
use crate::review::whole_object;

/// The path the CRD's `conversion.webhook.clientConfig.service.path` names.
pub use kubesteer_api::scaler::convert::PATH;

/// Values built of one object to convert. Unlike an admission review's, it is the whole stored
/// object (metadata with managedFields, status with a Scaler's targets): a Scaler with 100
/// targets holds a few thousand.
pub const MAX_OBJECT_VALUES: usize = 65_536;

/// Objects in one review. A Scaler as stored is over 300 bytes, so a body at the limit
/// (`budget::MAX_BODY_BYTES`) holds fewer than 25,000; each kept takes 16 bytes.
pub const MAX_OBJECTS: usize = 65_536;

/// A ConversionReview as the apiserver sends it (what is read of it).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: String,
    kind: String,
    #[serde(borrow)]
    request: Option<Request<'a>>,
}

#[derive(Debug, Deserialize)]
struct Request<'a> {
    uid: String,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: String,
    #[serde(borrow, deserialize_with = "objects")]
    objects: Vec<&'a RawValue>,
}

/// The answer: the review's apiVersion and kind, and the response.
pub type Answer = crate::review::Answer<Response>;

/// The converted objects in order, or why the review failed (and none).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    pub uid: String,
    pub result: Status,
    pub converted_objects: Vec<Box<RawValue>>,
}

/// The handler of [`PATH`].
pub async fn convert(body: Received) -> Result<Json<Answer>, ApiError> {
    crate::budget::apart(&body, answer).await.map(Json)
}

/// The whole conversion without HTTP: a raw body in, the answered review out.
pub fn answer(body: &[u8]) -> Result<Answer, ApiError> {
    let review: Review<'_> =
        serde_json::from_slice(body).map_err(|e| ApiError::BadConversionReview(e.to_string()))?;
    let request = review.request.ok_or_else(|| {
        ApiError::BadConversionReview("the review carries no request".to_string())
    })?;
    let response = match respond(&request) {
        Ok(converted_objects) => Response {
            uid: request.uid,
            result: Status::success(),
            converted_objects,
        },
        Err(message) => {
            tracing::warn!(
                uid = request.uid,
                desired = request.desired_api_version,
                message,
                "conversion failed"
            );
            Response {
                uid: request.uid,
                result: Status::failure(&message, "ConversionFailed").with_code(422),
                converted_objects: Vec::new(),
            }
        }
    };
    Ok(Answer {
        api_version: review.api_version,
        kind: review.kind,
        response,
    })
}

/// Every object converted and written as JSON, or the first failure naming its index.
fn respond(request: &Request<'_>) -> Result<Vec<Box<RawValue>>, String> {
    let desired = &request.desired_api_version;
    let mut converted = Vec::with_capacity(request.objects.len());
    for (i, raw) in request.objects.iter().enumerate() {
        let at = format!("objects[{i}]");
        let object = whole_object(raw.get(), &at, MAX_OBJECT_VALUES).map_err(|e| e.to_string())?;
        let object = convert_object(&object, desired).map_err(|e| format!("{at}: {e}"))?;
        converted.push(serde_json::value::to_raw_value(&object).map_err(|e| format!("{at}: {e}"))?);
    }
    Ok(converted)
}

/// The objects as raw JSON, at most [`MAX_OBJECTS`].
fn objects<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<&'de RawValue>, D::Error> {
    struct Objects;

    impl<'de> Visitor<'de> for Objects {
        type Value = Vec<&'de RawValue>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("request.objects to be a list")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut objects = Vec::new();
            while let Some(object) = seq.next_element()? {
                if objects.len() == MAX_OBJECTS {
                    return Err(de::Error::custom(format!(
                        "request.objects: more than {MAX_OBJECTS} objects"
                    )));
                }
                objects.push(object);
            }
            Ok(objects)
        }
    }

    d.deserialize_seq(Objects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubesteer_api::scaler::convert::{V1ALPHA1, V1BETA1};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn review(desired: &str, objects: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "desiredAPIVersion": desired, "objects": objects}
        }))
        .unwrap()
    }

    fn alpha(name: &str) -> Value {
        json!({
            "apiVersion": V1ALPHA1, "kind": "Scaler",
            "metadata": {"name": name, "namespace": "team", "uid": "u1", "resourceVersion": "7"},
            "spec": {"deployments": [{"name": "web"}], "start": 9, "end": 17, "replicas": 2}
        })
    }

    fn answered(body: &[u8]) -> Value {
        serde_json::to_value(answer(body).unwrap()).unwrap()
    }

    #[test]
    fn every_object_is_converted_in_order_with_the_uid_echoed() {
        let reply = answered(&review(V1BETA1, vec![alpha("a"), alpha("b")]));
        assert_eq!(reply["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(reply["kind"], "ConversionReview");
        let response = &reply["response"];
        assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(response["result"]["status"], "Success");
        let objects = response["convertedObjects"].as_array().unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0]["metadata"]["name"], "a");
        assert_eq!(objects[1]["metadata"]["name"], "b");
        assert_eq!(objects[0]["apiVersion"], V1BETA1);
        assert_eq!(objects[0]["metadata"]["resourceVersion"], "7");
        assert_eq!(
            objects[0]["spec"]["windows"],
            json!([{"start": 9, "end": 17, "replicas": 2}])
        );
        // And back: the v1alpha1 objects come back as they were.
        let back = answered(&review(V1ALPHA1, objects.clone()));
        assert_eq!(
            back["response"]["convertedObjects"],
            json!([alpha("a"), alpha("b")])
        );
    }

    #[test]
    fn one_bad_object_fails_the_review_with_its_index_and_field() {
        let mut bad = alpha("broken");
        bad["spec"]["deployments"] = json!("web");
        let reply = answered(&review(V1BETA1, vec![alpha("a"), bad]));
        let response = &reply["response"];
        assert_eq!(response["result"]["status"], "Failure");
        assert_eq!(response["result"]["code"], 422);
        assert_eq!(response["result"]["reason"], "ConversionFailed");
        let message = response["result"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "objects[1]: kubesteer.io/v1alpha1 Scaler \"broken\": spec.deployments: invalid type"
            ),
            "{message}"
        );
        assert_eq!(response["convertedObjects"], json!([]));
        let reply = answered(&review("kubesteer.io/v2", vec![alpha("a")]));
        assert!(
            reply["response"]["result"]["message"]
                .as_str()
                .unwrap()
                .starts_with(
                "objects[0]: cannot convert from \"kubesteer.io/v1alpha1\" to \"kubesteer.io/v2\""
            ),
            "{reply}"
        );
    }

    #[test]
    fn a_body_that_is_no_review_is_a_bad_request() {
        for body in [
            &b"not json"[..],
            br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}"#,
            br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {"uid": 1}}"#,
        ] {
            let e = answer(body).unwrap_err();
            assert!(
                e.to_string().starts_with("not a ConversionReview: "),
                "{e}"
            );
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_any_body(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = answer(&body);
        }

        #[test]
        fn never_panics_on_any_object(
            object in proptest::arbitrary::any::<(u8, String, i64)>().prop_map(|(n, s, i)| json!({
                "apiVersion": if n % 2 == 0 { V1ALPHA1 } else { V1BETA1 },
                "kind": "Scaler",
                "metadata": {"name": s.clone(), "annotations": {"kubesteer.io/v1beta1-fields": s.clone(), "kubesteer.io/v1alpha1-fields": s}},
                "spec": {"deployments": [{"name": "a"}], "scaleTargetRefs": [], "start": i, "end": n, "windows": [{"start": i, "end": "x"}]}
            }))
        ) {
            let _ = answer(&review(V1ALPHA1, vec![object.clone()]));
            let _ = answer(&review(V1BETA1, vec![object]));
        }
    }
}
