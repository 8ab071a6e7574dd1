//! Admission reviews only from the apiserver (`--apiserver-client-ca`). A review's `userInfo`
//! is whatever its sender wrote, so a pod that reaches port 9443 could post one as
//! `system:masters` and learn what the webhook checks for that user (which Deployments exist,
//! which Scaler claims them, which Ingress serves a host) and spend its SubjectAccessReviews.
//! With this on, `/mutate/*` and `/validate/*` answer only connections whose TLS handshake
//! verified a client certificate from the apiserver's client CA (and, with
//! `--apiserver-client-names`, one of those names); the apiserver presents it through the
//! kubeconfig of its AdmissionConfiguration. Probes, `/metrics` and `/convert` stay open: the
//! kubelet and scrapers carry no certificate, nor does the apiserver when it calls a CRD's
//! conversion webhook.
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::error::ApiError;
use crate::server::VerifiedClient;

/// The paths any client may call.
const OPEN: &[&str] = &[
    "/healthz",
    "/readyz",
    kubesteer_runtime::health::VERSION_PATH,
    "/metrics",
    crate::conversion::PATH,
];

/// `app` with every path but `OPEN` answered only for a verified client certificate whose
/// common name or DNS name is in `names` (any name when `names` is empty).
pub fn require(app: Router, names: Vec<String>) -> Router {
    app.layer(axum::middleware::from_fn_with_state(Arc::new(names), check))
}

async fn check(State(names): State<Arc<Vec<String>>>, request: Request, next: Next) -> Response {
    if OPEN.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    match request.extensions().get::<VerifiedClient>() {
        None => ApiError::NoClientCertificate.into_response(),
        Some(VerifiedClient(client)) if !names.is_empty() && !client.is_one_of(&names) => {
            ApiError::ClientNotAllowed(client.to_string()).into_response()
        }
        Some(_) => next.run(request).await,
    }
}
