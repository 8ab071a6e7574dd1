//! The limit line of the webhook benchmark: kubesteer's own server stack (rustls, hyper, axum,
//! the same connection limits and runtime) answering every POST with one fixed AdmissionReview,
//! without reading it beyond its bytes. Whatever throughput the real webhook has is this ceiling
//! minus the work of a review.
use std::ffi::OsString;
use std::future::Future;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::routing::{get, post};
use axum::Router;
use clap::Parser;
use kubesteer_webhook::args::Args;
use kubesteer_webhook::metrics::ConnectionsClosed;
use kubesteer_webhook::server;
use kubesteer_webhook::tls::{self, CertFiles, CertStore};

/// An allowed review for the bench bodies' uid: the size of kubesteer's answer to a valid object.
const ANSWER: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"0c2f4b7e-1111-2222-3333-444455556666","allowed":true}}"#;

/// Serves the fixed answer on `--addr` with `--tls-cert-file`/`--tls-key-file`, taking the
/// webhook's own flags (and defaults) for everything else, until `shutdown`.
pub async fn serve(flags: Vec<OsString>, shutdown: impl Future<Output = ()>) -> Result<()> {
    let args =
        Args::try_parse_from(std::iter::once(OsString::from("kubesteer-webhook")).chain(flags))?;
    let files = CertFiles {
        cert: args.tls_cert_file.clone(),
        key: args.tls_key_file.clone(),
    };
    let store = CertStore::new(files.load().context("loading the serving certificate")?);
    let answer = |_: Bytes| async { ([(CONTENT_TYPE, "application/json")], ANSWER) };
    let app = Router::new()
        .route("/validate/{kind}", post(answer))
        .route("/mutate/{kind}", post(answer))
        .route("/readyz", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("binding {}", args.addr))?;
    server::serve(
        listener,
        tls::server_config(Arc::clone(&store))?,
        app,
        args.limits(),
        args.runtime.health(),
        ConnectionsClosed::default(),
        shutdown,
    )
    .await;
    Ok(())
}
