//! Leader election on a Lease: the controllers run only while this replica holds it and has
//! renewed it within the renew deadline.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use ::http::{Method, Request, Response};
use k8s_openapi::api::coordination::v1::Lease;
use kube::client::{Body, ClientBuilder};
use kube::{Api, Client, Config};
use kube_lease_manager::LeaseManagerBuilder;
use kubesteer_api::runtime::Health;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::metrics::Metrics;
use super::{stopped, STARTING};
use crate::args::Args;
use crate::Result;

/// A holder that stops renewing loses the Lease after this long, so a standby takes over within it.
pub const LEASE_DURATION_SECONDS: u64 = 10;
/// Renewal starts this long before expiry: with 10 s leases the holder renews every 3 s.
pub const LEASE_GRACE_SECONDS: u64 = 7;
/// The controllers stop when the Lease was last renewed this long ago: after two missed
/// renewals, and 3 s before it can expire and another replica take over (controller-runtime's
/// RenewDeadline).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(7);

/// When this replica last wrote its Lease successfully, as the instant the request was sent;
/// the Lease's `renewTime` is no later than that, so it expires no later than that plus its
/// duration.
#[derive(Clone)]
pub struct Renewals {
    last: Arc<watch::Sender<Option<Instant>>>,
}

impl Default for Renewals {
    fn default() -> Self {
        Self {
            last: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl Renewals {
    pub fn record(&self, sent: Instant) {
        self.last.send_if_modified(|last| {
            let newer = last.is_none_or(|l| l < sent);
            if newer {
                *last = Some(sent);
            }
            newer
        });
    }

    /// Resolves once the last renewal is older than [`RENEW_DEADLINE`] (at once without one).
    pub async fn overdue(&self) {
        let mut last = self.last.subscribe();
        loop {
            let Some(at) = *last.borrow_and_update() else {
                return;
            };
            tokio::select! {
                _ = tokio::time::sleep_until(at + RENEW_DEADLINE) => return,
                _ = last.changed() => {}
            }
        }
    }

    /// Resolves with the last renewal once it is younger than [`RENEW_DEADLINE`] and newer
    /// than `seen`.
    pub async fn fresh_after(&self, seen: Option<Instant>) -> Instant {
        let mut last = self.last.subscribe();
        loop {
            if let Some(at) = *last.borrow_and_update() {
                if seen.is_none_or(|s| at > s) && at.elapsed() < RENEW_DEADLINE {
                    return at;
                }
            }
            if last.changed().await.is_err() {
                // Cannot happen while `self` holds the sender; never resolve rather than spin.
                std::future::pending::<()>().await;
            }
        }
    }

    /// A layer for the lease manager's client that records each successful write of `lease`.
    pub fn layer(&self, namespace: &str, lease: &str) -> RenewalsLayer {
        RenewalsLayer {
            renewals: self.clone(),
            path: format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}"),
        }
    }
}

/// See [`Renewals::layer`].
#[derive(Clone)]
pub struct RenewalsLayer {
    renewals: Renewals,
    path: String,
}

impl<S> tower::Layer<S> for RenewalsLayer {
    type Service = RecordRenewals<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RecordRenewals {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`RenewalsLayer`].
#[derive(Clone)]
pub struct RecordRenewals<S> {
    inner: S,
    layer: RenewalsLayer,
}

impl<S, B> tower::Service<Request<Body>> for RecordRenewals<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The lease manager writes its Lease only by PATCH: to acquire, renew and release it.
        let renewal = (request.method() == Method::PATCH
            && request.uri().path() == self.layer.path)
            .then(|| self.layer.renewals.clone());
        let sent = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            if let Some(renewals) = renewal.filter(|_| response.status().is_success()) {
                renewals.record(sent);
            }
            Ok(response)
        })
    }
}

/// Resolves once this replica leads: the lease manager says so, it renewed the Lease recently,
/// and the Lease names it as the holder. The last check is one GET per takeover: a renewal
/// held up in a partition may land after another replica took the Lease, and succeed, before
/// the lease manager reads that it lost it. False when the lease manager is gone.
async fn lead(
    leading: &mut watch::Receiver<bool>,
    renewals: &Renewals,
    lease: &Api<Lease>,
    name: &str,
    identity: &str,
) -> bool {
    let mut checked = None;
    loop {
        if leading.wait_for(|&l| l).await.is_err() {
            return false;
        }
        let renewed = tokio::select! {
            at = renewals.fresh_after(checked) => Some(at),
            r = leading.wait_for(|&l| !l) => match r {
                Ok(_) => None,
                Err(_) => return false,
            },
        };
        match renewed {
            Some(at) => {
                let still = *leading.borrow();
                if still && holds(lease, name, identity).await {
                    return true;
                }
                checked = Some(at);
            }
            None => info!(%identity, "another replica holds the leader lease; standing by"),
        }
    }
}

/// Whether the Lease `name` names `identity` as its holder now.
async fn holds(lease: &Api<Lease>, name: &str, identity: &str) -> bool {
    match tokio::time::timeout(RENEW_DEADLINE, lease.get(name)).await {
        Ok(Ok(l)) => l.spec.and_then(|s| s.holder_identity).as_deref() == Some(identity),
        Ok(Err(e)) => {
            warn!(error = %e, "could not read the leader lease");
            false
        }
        Err(_) => false,
    }
}

/// Why this replica stopped running the controllers.
enum Stop {
    Shutdown,
    Lost,
    Overdue,
}

/// Waits for the Lease, runs `while_leading` while holding it (until the stop channel it is given turns
/// true, or dropping its future when the Lease is lost), and releases the Lease on shutdown.
/// `health` is ready once the Lease is contested, as a standby runs no watches.
pub async fn run_while_leading<F, Fut>(
    config: Config,
    args: &Args,
    identity: String,
    metrics: Arc<Metrics>,
    health: &Health,
    mut shutdown: watch::Receiver<bool>,
    while_leading: F,
) -> Result<()>
where
    F: Fn(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()>,
{
    let renewals = Renewals::default();
    // Only PATCHes of the Lease count as renewals, so the holder check may GET through it too.
    let client: Client = ClientBuilder::try_from(config)?
        .with_layer(&renewals.layer(&args.lease_namespace, &args.lease_name))
        .build();
    let lease: Api<Lease> = Api::namespaced(client.clone(), &args.lease_namespace);
    let manager = LeaseManagerBuilder::new(client, &args.lease_name)
        .with_namespace(&args.lease_namespace)
        .with_identity(&identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await?;
    health.release(STARTING);
    let (mut leading, task) = manager.watch().await;
    info!(lease = %args.lease_name, namespace = %args.lease_namespace, %identity, "waiting for the leader lease");
    loop {
        tokio::select! {
            led = lead(&mut leading, &renewals, &lease, &args.lease_name, &identity) => if !led { break },
            _ = shutdown.wait_for(|&s| s) => break,
        }
        info!(%identity, "leading");
        metrics.set_leading(true);
        let (stop_tx, stop_rx) = watch::channel(false);
        let running = while_leading(stop_rx);
        tokio::pin!(running);
        let stop = tokio::select! {
            _ = &mut running => Stop::Shutdown,
            _ = leading.wait_for(|&l| !l) => Stop::Lost,
            _ = renewals.overdue() => Stop::Overdue,
            _ = stopped(shutdown.clone()) => Stop::Shutdown,
        };
        metrics.set_leading(false);
        match stop {
            Stop::Shutdown => {
                let _ = stop_tx.send(true);
                running.await;
                break;
            }
            // Another replica may lead now or soon: reconciles in flight are dropped, not
            // finished, so none of them writes after it.
            Stop::Lost => warn!(%identity, "lost the leader lease; standing by"),
            Stop::Overdue => warn!(
                %identity,
                deadline = ?RENEW_DEADLINE,
                "could not renew the leader lease in time; stopped reconciling until it is renewed"
            ),
        }
    }
    // Closing the channel makes the manager release the Lease, so a standby need not wait it out.
    drop(leading);
    match task.await {
        Ok(Ok(_)) => info!("released the leader lease"),
        Ok(Err(e)) => warn!(error = %e, "could not release the leader lease"),
        Err(e) => warn!(error = %e, "leader election task failed"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn renewals_turn_overdue_at_the_deadline_and_fresh_again_on_a_renewal() {
        let renewals = Renewals::default();
        tokio::time::timeout(Duration::from_millis(1), renewals.overdue())
            .await
            .expect("overdue without any renewal");

        let start = Instant::now();
        renewals.record(start);
        let fresh = tokio::time::timeout(Duration::from_millis(1), renewals.fresh_after(None));
        assert_eq!(fresh.await.expect("fresh right after a renewal"), start);
        // Renewals every 3 s keep it from being overdue.
        let watcher = tokio::spawn({
            let renewals = renewals.clone();
            async move {
                renewals.overdue().await;
                Instant::now()
            }
        });
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            renewals.record(Instant::now());
        }
        let last = Instant::now();
        assert_eq!(watcher.await.unwrap() - last, RENEW_DEADLINE);
        assert!(
            RENEW_DEADLINE < Duration::from_secs(LEASE_DURATION_SECONDS),
            "stops before the Lease can expire"
        );
        // An older write answered late does not move the deadline back.
        renewals.record(start);
        assert_eq!(*renewals.last.borrow(), Some(last));
        // Once overdue, only a newer renewal makes it fresh again.
        let stale = tokio::time::timeout(Duration::from_secs(5), renewals.fresh_after(None));
        assert!(stale.await.is_err(), "overdue stays overdue");
        let again = tokio::spawn({
            let renewals = renewals.clone();
            async move { renewals.fresh_after(Some(last)).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let renewed = Instant::now();
        renewals.record(renewed);
        assert_eq!(again.await.unwrap(), renewed);
    }
}
