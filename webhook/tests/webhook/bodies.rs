//! Request bodies within the memory budget, through the router (no TLS, no cluster): a body over
//! the limit gets 413 unread, a body the budget has no room for gets 429 with Retry-After while
//! ordinary reviews are still read from the reserve, and a review whose object is no JSON object
//! is refused at once, naming the field. bench/scripts/webhook-memory.sh floods the real binary
//! (bench/results/webhook-memory.json).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use axum::body::{Body, Bytes};
use axum::http::{header, Request, StatusCode};
use futures::channel::mpsc;
use futures::SinkExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use kubesteer_webhook::budget::{Budget, MAX_BODY_BYTES, RESERVE_WAIT};
use kubesteer_webhook::{router, AppState};
use serde_json::json;
use tower::ServiceExt;

const MIB: usize = 1024 * 1024;

/// A state whose budget is `bytes`.
fn with_budget(bytes: usize) -> Arc<AppState<FakeCluster>> {
    let mut state = AppState::new(cluster());
    state.budget = Budget::new(bytes);
    Arc::new(state)
}

struct Answered {
    status: StatusCode,
    retry_after: Option<String>,
    body: String,
}

async fn post(state: &Arc<AppState<FakeCluster>>, path: &str, body: Body) -> Answered {
    let request = Request::post(path).body(body).unwrap();
    let response = router(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_string());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answered {
        status,
        retry_after,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn review() -> Vec<u8> {
    serde_json::to_vec(&fixture("memcached-create.json")).unwrap()
}

/// A body without a Content-Length whose chunks the test sends.
fn streamed() -> (mpsc::Sender<Result<Frame<Bytes>, Infallible>>, Body) {
    let (tx, rx) = mpsc::channel(1);
    (tx, Body::new(StreamBody::new(rx)))
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413_before_it_is_read() {
    let state = with_budget(16 * MIB);
    for path in ["/validate/memcacheds", "/mutate/scalers", "/convert"] {
        let reply = post(&state, path, Body::from(vec![b' '; MAX_BODY_BYTES + 1])).await;
        assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert_eq!(
            reply.body,
            format!("the request body of {} bytes is over the limit of {MAX_BODY_BYTES} bytes (two objects at the apiserver's 3 MiB request limit and the review around them)", MAX_BODY_BYTES + 1)
        );
    }
    // Without a Content-Length it is cut off where it passes the limit.
    let (mut tx, body) = streamed();
    let sending = tokio::spawn(async move {
        // Ends when the server drops the body.
        while tx
            .send(Ok(Frame::data(Bytes::from(vec![b' '; MIB]))))
            .await
            .is_ok()
        {}
    });
    let reply = post(&state, "/validate/memcacheds", body).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(reply.body.contains("over the limit"), "{}", reply.body);
    sending.await.unwrap();
    assert_eq!(state.budget.in_use(), 0);
}

#[tokio::test]
async fn a_body_the_budget_has_no_room_for_gets_429_and_ordinary_reviews_are_still_read() {
    // 4 MiB: 3.5 MiB shared, 512 KiB kept for bodies up to 64 KiB.
    let state = with_budget(4 * MIB);
    // A client without a Content-Length holds 3 MiB and sends no more for now.
    let (mut tx, body) = streamed();
    let slow = tokio::spawn({
        let state = state.clone();
        async move { post(&state, "/validate/memcacheds", body).await }
    });
    tx.send(Ok(Frame::data(Bytes::from(vec![b' '; 3 * MIB]))))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || state.budget.in_use() >= 3 * MIB).await,
        "the first body is held"
    );
    for path in ["/validate/memcacheds", "/convert"] {
        let reply = post(&state, path, Body::from(vec![b' '; MIB])).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{path}");
        assert_eq!(reply.retry_after.as_deref(), Some("1"));
        assert!(
            reply.body.contains("memory budget (--request-body-budget)"),
            "{}",
            reply.body
        );
    }
    // The apiserver's ordinary review is read from the reserve.
    let reply = post(&state, "/validate/memcacheds", Body::from(review())).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    // The slow body ends as a review after its leading spaces, and is answered.
    tx.send(Ok(Frame::data(Bytes::from(review()))))
        .await
        .unwrap();
    drop(tx);
    let reply = slow.await.unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(state.budget.in_use(), 0, "every permit is given back");
    let reply = post(&state, "/validate/memcacheds", Body::from(vec![b' '; MIB])).await;
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "read once there is room"
    );
}

#[tokio::test]
async fn a_small_body_that_finds_the_reserve_full_too_gets_429_after_a_short_wait() {
    let state = with_budget(16 * MIB);
    let held = futures::future::join_all(
        [7 * MIB, 7 * MIB]
            .into_iter()
            .chain(std::iter::repeat_n(state.budget.small(), 8))
            .map(|bytes| state.budget.admit(bytes)),
    )
    .await;
    assert!(held.iter().all(Result::is_ok));
    assert_eq!(state.budget.in_use(), 16 * MIB);
    let started = std::time::Instant::now();
    let reply = post(&state, "/validate/memcacheds", Body::from(review())).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.retry_after.as_deref(), Some("1"));
    assert!(started.elapsed() >= RESERVE_WAIT);
    drop(held);
    let reply = post(&state, "/validate/memcacheds", Body::from(review())).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
}

#[tokio::test]
async fn an_object_that_is_no_json_object_is_refused_naming_the_field() {
    let zeros = format!("[{}0]", "0,".repeat(2 * MIB));
    for field in ["object", "oldObject"] {
        let mut review = fixture("memcached-update.json");
        review["request"][field] = json!("PLACEHOLDER");
        let body = serde_json::to_string(&review)
            .unwrap()
            .replace("\"PLACEHOLDER\"", &zeros);
        assert!(body.len() > 4 * MIB);
        let reply = send_raw(cluster(), "/validate/memcacheds", body.into_bytes()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert!(
            reply.body.starts_with(&format!(
                "not an AdmissionReview: invalid type: sequence, expected request.{field} to be a JSON object"
            )),
            "{}",
            reply.body
        );
    }
    // The same for a ConversionReview's objects, in its failure.
    let body = format!(
        r#"{{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {{"uid": "u", "desiredAPIVersion": "kubesteer.io/v1beta1", "objects": [{zeros}]}}}}"#
    );
    let reply = send_raw(cluster(), "/convert", body.into_bytes()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let result = &reply.json()["response"]["result"];
    assert_eq!(result["status"], "Failure");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid type: sequence, expected objects[0] to be a JSON object"),
        "{result}"
    );
}

#[tokio::test]
async fn a_spec_of_more_values_than_any_valid_one_is_refused_naming_it() {
    let many = vec![0; kubesteer_webhook::review::MAX_OBJECT_VALUES];
    let review = with_spec("memcached-create.json", json!({"size": 1, "x": many}));
    let reply = send(cluster(), "/mutate/memcacheds", &review).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply.body.starts_with(&format!(
            "not an AdmissionReview: request.object.spec: more than {} values",
            kubesteer_webhook::review::MAX_OBJECT_VALUES
        )),
        "{}",
        reply.body
    );
}
