//! `/convert` through the webhook's router (no TLS, no cluster): the route exists beside the
//! admission routes, answers a ConversionReview, and refuses a body that is none.

use crate::common::*;
use axum::http::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_review_is_converted_through_the_router() {
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u-1", "desiredAPIVersion": "kubesteer.io/v1alpha1", "objects": [{
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"name": "s", "namespace": "team"},
            "spec": {
                "scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}],
                "windows": [{"start": 9, "end": 17, "replicas": 3}]
            }
        }]}
    });
    let reply = send(cluster(), "/convert", &review).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let response = reply.response();
    assert_eq!(response["uid"], "u-1");
    assert_eq!(response["result"]["status"], "Success");
    let object = &response["convertedObjects"][0];
    assert_eq!(object["apiVersion"], "kubesteer.io/v1alpha1");
    assert_eq!(
        object["spec"],
        json!({"deployments": [], "start": 9, "end": 17, "replicas": 3})
    );
    assert!(
        object["metadata"]["annotations"]["kubesteer.io/v1beta1-fields"]
            .as_str()
            .is_some_and(|s| s.contains("StatefulSet"))
    );
}

#[tokio::test]
async fn a_body_that_is_no_review_gets_400_with_the_reason() {
    let reply = send_raw(cluster(), "/convert", b"{\"kind\": 1}".to_vec()).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply.body.starts_with("not a ConversionReview: "),
        "{}",
        reply.body
    );
}
