//! The controller's run-time pieces, apart from the domain: the HTTP server for /metrics and the
//! probes ([`http`]), its metrics and their authorization ([`metrics`], [`metrics_auth`]), and
//! leader election ([`lease`]). Logging, the shutdown signal, readiness and tolerant watches are
//! shared with the webhook in `kubesteer_runtime`.
//!
//! Readiness (`/readyz`): not ready until the controller has started; then, while this replica
//! runs the controllers, until every watch has listed once, and again while one has been
//! failing for `--watch-stale-after`. The Scalers' watches that start on demand
//! ([`crate::scaler::inventory`]) are waited for only when they start while unready. Under `--leader-election` a standby replica runs no
//! watches, so it is ready once it reached the apiserver to contest the Lease: a rollout need
//! not wait for the leader to step down. A new leader is unready until its watches have listed.
use tokio::sync::watch;

pub mod http;
pub mod lease;
pub mod metrics_auth;
pub mod queue;

/// What `/readyz` waits for until the controllers run or, under leader election, the Lease is
/// contested.
pub const STARTING: &str = "the controller to start";

/// Resolves once `stop` turns true, or its sender is gone.
pub async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|&s| s).await;
}
