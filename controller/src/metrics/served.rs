//! The controller's metrics as served: the probes, both formats, and the token a scrape needs
//! under `--metrics-auth`, answered by a mock apiserver.
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::header;
use kubesteer_runtime::health::STARTING;
use kubesteer_runtime::metrics_auth::Authorizer;
use kubesteer_runtime::serve::{router, serve};
use kubesteer_runtime::Health;

use super::Metrics;
use crate::fixtures::{self, Call};

use axum::body::Body;
use serde_json::json;
use tower::ServiceExt;

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews?";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews?";

fn token_review(token: &'static str, user: Option<&str>) -> Call {
    let status = match user {
        Some(name) => json!({"authenticated": true,
            "user": {"username": name, "uid": "u1", "groups": ["readers"]}}),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    Call::post(TOKEN_REVIEWS)
        .body(move |b| assert_eq!(b["spec"]["token"], token))
        .respond(
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {}, "status": status}),
        )
}

fn access_review(user: &'static str, allowed: bool) -> Call {
    Call::post(ACCESS_REVIEWS)
        .body(move |b| {
            assert_eq!(b["spec"]["user"], user);
            assert_eq!(b["spec"]["groups"], json!(["readers"]));
            assert_eq!(b["spec"]["uid"], "u1");
            assert_eq!(
                b["spec"]["nonResourceAttributes"],
                json!({"path": "/metrics", "verb": "get"})
            );
        })
        .respond(json!({"apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview", "spec": {}, "status": {"allowed": allowed}}))
}

async fn get(app: &axum::Router, path: &str, token: Option<&str>) -> (u16, String) {
    let mut request = axum::http::Request::get(path);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn metrics_need_a_token_the_apiserver_accepts_and_allows() {
    let (ctx, verifier) = fixtures::context();
    let scenario = verifier.run(vec![
        token_review("made-up", None),
        token_review("nobody", Some("system:serviceaccount:ns:nobody")),
        access_review("system:serviceaccount:ns:nobody", false),
        token_review("prometheus", Some("system:serviceaccount:ns:prometheus")),
        access_review("system:serviceaccount:ns:prometheus", true),
    ]);
    let health = Health::default();
    health.hold(STARTING);
    let app = router(
        Arc::new(Metrics::default()),
        health,
        Some(Authorizer::new(ctx.client.clone())),
    );
    // The probes are the kubelet's, which has no token: /readyz answers why not ready.
    assert_eq!(get(&app, "/healthz", None).await.0, 200);
    assert_eq!(
        get(&app, "/readyz", None).await,
        (503, "waiting for the controller to start".into())
    );
    assert_eq!(
        get(&app, "/metrics", None).await,
        (401, "Unauthorized\n".into())
    );
    assert_eq!(get(&app, "/metrics", Some("made-up")).await.0, 401);
    assert_eq!(
        get(&app, "/metrics", Some("nobody")).await,
        (403, "Forbidden\n".into())
    );
    let (code, body) = get(&app, "/metrics", Some("prometheus")).await;
    assert_eq!(code, 200);
    assert!(body.contains("kubesteer_leading"), "{body}");
    // Each decision is remembered: no more reviews.
    assert_eq!(get(&app, "/metrics", Some("prometheus")).await.0, 200);
    assert_eq!(get(&app, "/metrics", Some("nobody")).await.0, 403);
    assert_eq!(get(&app, "/metrics", Some("made-up")).await.0, 401);
    drop(app);
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn an_unreachable_apiserver_is_a_503_and_is_not_remembered() {
    let (ctx, verifier) = fixtures::context();
    let scenario = verifier.run(vec![
        Call::post(TOKEN_REVIEWS).error(500, "etcd is gone"),
        token_review("prometheus", Some("system:serviceaccount:ns:prometheus")),
        access_review("system:serviceaccount:ns:prometheus", true),
    ]);
    let authorizer = Authorizer::new(ctx.client.clone());
    let app = router(
        Arc::new(Metrics::default()),
        Health::default(),
        Some(authorizer),
    );
    assert_eq!(get(&app, "/metrics", Some("prometheus")).await.0, 503);
    assert_eq!(get(&app, "/metrics", Some("prometheus")).await.0, 200);
    drop(app);
    scenario.finish(ctx).await;
}

async fn get_from(addr: SocketAddr, path: &str) -> (u16, String) {
    get_with(addr, path, "").await
}

async fn get_with(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    (code, out)
}

#[tokio::test]
async fn health_readiness_and_metrics_are_served() {
    let metrics = Arc::new(Metrics::default());
    drop(metrics.reconcile("Welcome"));
    let health = Health::default();
    health.hold(STARTING);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, task) = serve(
        "127.0.0.1:0".parse().unwrap(),
        router(metrics, health.clone(), None),
        async move {
            let _ = rx.await;
        },
    )
    .await
    .unwrap();
    assert_eq!(get_from(addr, "/healthz").await.0, 200);
    assert_eq!(get_from(addr, "/readyz").await.0, 503);
    health.release(STARTING);
    assert_eq!(get_from(addr, "/readyz").await.0, 200);
    let (code, body) = get_from(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        body.contains("kubesteer_reconciles_total{kind=\"Welcome\"} 1"),
        "{body}"
    );
    assert!(body.contains("application/openmetrics-text"), "{body}");
    // The text format to a client that asks for it alone (promtool check metrics).
    let (code, body) = get_with(addr, "/metrics", "Accept: text/plain;version=0.0.4\r\n").await;
    assert_eq!(code, 200);
    assert!(body.contains("text/plain; version=0.0.4"), "{body}");
    assert!(
        body.contains("# TYPE kubesteer_reconciles_total counter\n"),
        "{body}"
    );
    assert!(!body.contains("# EOF"), "{body}");
    tx.send(()).unwrap();
    task.await.unwrap().unwrap();
}
