//! `/convert`: the CRD conversion webhook (ConversionReview, `apiextensions.k8s.io/v1`).
//!
//! Every object of a review is converted by `kubesteer_api::convert`; when one cannot be, the
//! whole review fails with a message naming the object (its index and name) and the field, as
//! the apiserver requires all or nothing. A body that is no ConversionReview gets a 400.
use axum::body::Bytes;
use axum::Json;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::core::Status;
use kubesteer_api::convert::convert as convert_object;

use crate::error::ApiError;

/// The path the CRD's `conversion.webhook.clientConfig.service.path` names.
pub use kubesteer_api::convert::PATH;

/// The handler of [`PATH`].
pub async fn convert(body: Bytes) -> Result<Json<ConversionReview>, ApiError> {
    answer(&body).map(Json)
}

/// The whole conversion without HTTP: a raw body in, the answered review out.
pub fn answer(body: &[u8]) -> Result<ConversionReview, ApiError> {
    let review: ConversionReview =
        serde_json::from_slice(body).map_err(|e| ApiError::BadConversionReview(e.to_string()))?;
    let request = ConversionRequest::from_review(review)
        .map_err(|e| ApiError::BadConversionReview(e.to_string()))?;
    Ok(respond(request).into_review())
}

fn respond(request: ConversionRequest) -> ConversionResponse {
    let desired = request.desired_api_version.clone();
    let converted: Result<Vec<_>, String> = request
        .objects
        .iter()
        .enumerate()
        .map(|(i, object)| {
            convert_object(object, &desired).map_err(|e| format!("objects[{i}]: {e}"))
        })
        .collect();
    let uid = request.uid.clone();
    let response = ConversionResponse::for_request(request);
    match converted {
        Ok(objects) => response.success(objects),
        Err(message) => {
            tracing::warn!(uid, desired, message, "conversion failed");
            response.failure(Status::failure(&message, "ConversionFailed").with_code(422))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubesteer_api::convert::{V1ALPHA1, V1BETA1};
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
