//! Leader election on a Lease, as client-go's `leaderelection` does it. Every write of the Lease
//! carries the resourceVersion this replica last read or wrote, so a renewal held up in a
//! partition fails with 409 Conflict instead of overwriting another replica's acquisition. A
//! Lease another replica holds expires once its record has not changed for its
//! `leaseDurationSeconds`, counted on this replica's monotonic clock from when it saw the record
//! change, whatever the record's `renewTime` says: clocks of the replicas may disagree. The
//! controllers run only while this replica holds the Lease and renewed it within the renew
//! deadline.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::health::STARTING;
use crate::signal::stopped;
use crate::Health;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Config};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Told `true` when this replica starts leading, `false` when it stops (the `leading` gauge).
pub type OnLeading = Arc<dyn Fn(bool) + Send + Sync>;

/// A holder that stops renewing loses the Lease after this long, so a standby takes over within it.
pub const LEASE_DURATION_SECONDS: u64 = 10;
/// The holder renews the Lease, and a standby reads it, this often: three tries per duration.
pub const RETRY_PERIOD: Duration = Duration::from_secs(3);
/// The controllers stop when the Lease was last renewed this long ago: after two missed
/// renewals, and 3 s before it can expire and another replica take over (controller-runtime's
/// RenewDeadline).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(7);
/// Each request for the Lease gives up after this long, so a hung one never holds up the next
/// try; a renewal, and the read and write after a conflict, fit in the renew deadline.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// `leaseDurationSeconds` as this replica writes it.
const DURATION_FIELD: i32 = LEASE_DURATION_SECONDS as i32;

/// When this replica last wrote its Lease successfully, as the instant the request was sent;
/// the Lease's record changed no earlier than that, so no other replica can see it expire before
/// that plus its duration.
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
}

/// Why a request for the Lease failed.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error("no answer within {REQUEST_TIMEOUT:?}")]
    Timeout,
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

impl RequestError {
    /// Someone wrote the Lease since this replica read it (or it was created meanwhile).
    fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube(kube::Error::Api(s)) if s.is_conflict() || s.is_already_exists())
    }
}

async fn request<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, RequestError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(RequestError::Timeout),
    }
}

/// What one try to acquire or renew the Lease found.
#[derive(Debug, PartialEq)]
enum Attempt {
    /// This replica holds the Lease: it wrote it with a request sent at this instant.
    Holds(Instant),
    /// Another replica holds the Lease, until this instant at the earliest (`None`: a duration
    /// past any instant) unless its record changes meanwhile.
    Held {
        holder: String,
        until: Option<Instant>,
    },
    /// No answer, an error, or a write that lost a race: read again next time.
    Failed,
}

/// The Lease as this replica last read or wrote it.
struct Observed {
    lease: Lease,
    /// When this replica first saw the Lease's current record, on its own monotonic clock.
    since: Instant,
}

impl Observed {
    fn spec(&self) -> Option<&LeaseSpec> {
        self.lease.spec.as_ref()
    }

    fn holder(&self) -> &str {
        self.spec()
            .and_then(|s| s.holder_identity.as_deref())
            .unwrap_or_default()
    }

    /// When the Lease expires unless its record changes first: its duration after this replica
    /// saw the record, never its `renewTime`, which another replica's clock wrote.
    fn until(&self) -> Option<Instant> {
        let seconds = self
            .spec()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|d| u64::try_from(d).ok())
            .filter(|&d| d > 0)
            .unwrap_or(LEASE_DURATION_SECONDS);
        self.since.checked_add(Duration::from_secs(seconds))
    }
}

/// One replica's side of the election, as client-go's `LeaderElector` keeps it.
struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    observed: Option<Observed>,
}

impl Elector {
    fn new(api: Api<Lease>, name: &str, identity: String) -> Self {
        Self {
            api,
            name: name.to_string(),
            identity,
            observed: None,
        }
    }

    /// Notes `lease` as read or written at `now`; its record's age restarts only if it changed.
    fn observe(&mut self, lease: Lease, now: Instant) {
        match &mut self.observed {
            Some(o) if o.lease.spec == lease.spec => o.lease = lease,
            _ => self.observed = Some(Observed { lease, since: now }),
        }
    }

    /// The record this replica writes to acquire or renew the Lease after `old`.
    fn record_after(&self, old: &LeaseSpec) -> LeaseSpec {
        let now = Some(MicroTime(Timestamp::now()));
        let renewing = old.holder_identity.as_deref() == Some(self.identity.as_str());
        let transitions = old.lease_transitions.unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(DURATION_FIELD),
            acquire_time: if renewing {
                old.acquire_time.clone()
            } else {
                now.clone()
            },
            renew_time: now,
            lease_transitions: Some(if renewing {
                transitions
            } else {
                transitions.saturating_add(1)
            }),
            ..LeaseSpec::default()
        }
    }

    /// Replaces the Lease with `lease`, whose resourceVersion is the one this replica last saw:
    /// the apiserver refuses it with 409 if anyone wrote the Lease since. Answers when the request
    /// was sent.
    async fn write(&mut self, lease: Lease) -> Result<Instant, RequestError> {
        let sent = Instant::now();
        let written = request(self.api.replace(&self.name, &PostParams::default(), &lease)).await?;
        self.observe(written, Instant::now());
        Ok(sent)
    }

    /// client-go's `tryAcquireOrRenew`: renews the Lease this replica holds, creates it when
    /// there is none, takes it when it was released or its record stopped changing for its
    /// duration, and otherwise leaves it to its holder.
    async fn try_acquire_or_renew(&mut self) -> Attempt {
        // The holder renews what it wrote last, without reading first; a conflict means another
        // write came in between, so it reads what that was.
        let mine = self
            .observed
            .as_ref()
            .filter(|o| o.holder() == self.identity);
        if let Some(mut lease) = mine.map(|o| o.lease.clone()) {
            let old = lease.spec.take().unwrap_or_default();
            lease.spec = Some(self.record_after(&old));
            match self.write(lease).await {
                Ok(sent) => return Attempt::Holds(sent),
                Err(e) if e.is_conflict() => {
                    debug!("the leader lease changed since this replica renewed it; reading it")
                }
                Err(e) => warn!(error = %e, "could not renew the leader lease"),
            }
        }
        let read = match request(self.api.get_opt(&self.name)).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return self.create().await,
            Err(e) => {
                warn!(error = %e, "could not read the leader lease");
                return Attempt::Failed;
            }
        };
        let now = Instant::now();
        self.observe(read, now);
        let Some(observed) = self.observed.as_ref() else {
            return Attempt::Failed;
        };
        let holder = observed.holder();
        if !holder.is_empty() && holder != self.identity {
            let until = observed.until();
            if until.is_none_or(|u| now < u) {
                return Attempt::Held {
                    holder: holder.to_string(),
                    until,
                };
            }
            info!(%holder, "the leader lease did not change for its duration; taking it over");
        }
        let mut lease = observed.lease.clone();
        let old = lease.spec.take().unwrap_or_default();
        lease.spec = Some(self.record_after(&old));
        match self.write(lease).await {
            Ok(sent) => Attempt::Holds(sent),
            Err(e) if e.is_conflict() => {
                info!("another replica wrote the leader lease first");
                Attempt::Failed
            }
            Err(e) => {
                warn!(error = %e, "could not write the leader lease");
                Attempt::Failed
            }
        }
    }

    /// Creates the Lease, held by this replica; a 409 means another replica created it first.
    async fn create(&mut self) -> Attempt {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                lease_transitions: Some(0),
                ..self.record_after(&LeaseSpec::default())
            }),
        };
        let sent = Instant::now();
        match request(self.api.create(&PostParams::default(), &lease)).await {
            Ok(created) => {
                self.observe(created, Instant::now());
                Attempt::Holds(sent)
            }
            Err(e) if e.is_conflict() => {
                info!("another replica created the leader lease first");
                Attempt::Failed
            }
            Err(e) => {
                warn!(error = %e, "could not create the leader lease");
                Attempt::Failed
            }
        }
    }

    /// Empties the holder of the Lease this replica wrote last, so a standby need not wait it
    /// out; with its resourceVersion, so it never empties a Lease another replica took since.
    async fn release(&mut self) {
        let Some(observed) = self
            .observed
            .as_ref()
            .filter(|o| o.holder() == self.identity)
        else {
            return;
        };
        let mut lease = observed.lease.clone();
        let old = lease.spec.take().unwrap_or_default();
        let now = Some(MicroTime(Timestamp::now()));
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: now.clone(),
            renew_time: now,
            lease_transitions: old.lease_transitions,
            ..LeaseSpec::default()
        });
        match self.write(lease).await {
            Ok(_) => info!("released the leader lease"),
            Err(e) if e.is_conflict() => {
                info!("left the leader lease alone: it changed since this replica wrote it")
            }
            Err(e) => warn!(error = %e, "could not release the leader lease"),
        }
    }
}

/// Tries for the Lease every [`RETRY_PERIOD`] (a standby also at the instant it would expire)
/// until `release` turns true, then releases it if this replica holds it. Tells `leading`
/// whether the last answer named this replica: true after each write, false once a read shows
/// another holder; records each write in `renewals`.
async fn contest(
    mut elector: Elector,
    renewals: Renewals,
    leading: watch::Sender<bool>,
    health: Health,
    release: watch::Receiver<bool>,
) {
    let mut standing_by_for = None;
    loop {
        let started = Instant::now();
        let next = match elector.try_acquire_or_renew().await {
            Attempt::Holds(sent) => {
                renewals.record(sent);
                leading.send_replace(true);
                standing_by_for = None;
                health.release(STARTING);
                started + RETRY_PERIOD
            }
            Attempt::Held { holder, until } => {
                health.release(STARTING);
                leading.send_replace(false);
                if standing_by_for.as_ref() != Some(&holder) {
                    info!(%holder, "another replica holds the leader lease; standing by");
                    standing_by_for = Some(holder);
                }
                let next = started + RETRY_PERIOD;
                until.map_or(next, |u| u.min(next))
            }
            Attempt::Failed => started + RETRY_PERIOD,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = stopped(release.clone()) => break,
        }
    }
    elector.release().await;
}

/// Resolves with true once this replica leads: its last answer named it the holder, and it
/// renewed the Lease within the renew deadline. False when the election task is gone.
async fn lead(leading: &mut watch::Receiver<bool>, renewals: &Renewals) -> bool {
    loop {
        if leading.wait_for(|&l| l).await.is_err() {
            return false;
        }
        let fresh = tokio::select! {
            _ = renewals.fresh_after(None) => true,
            r = leading.wait_for(|&l| !l) => match r {
                Ok(_) => false,
                Err(_) => return false,
            },
        };
        if fresh && *leading.borrow() {
            return true;
        }
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
    (namespace, name): (&str, &str),
    identity: String,
    on_leading: OnLeading,
    health: &Health,
    shutdown: watch::Receiver<bool>,
    while_leading: F,
) -> Result<(), kube::Error>
where
    F: Fn(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()>,
{
    let lease = Api::namespaced(Client::try_from(config)?, namespace);
    info!(lease = %name, %namespace, %identity, "waiting for the leader lease");
    let elector = Elector::new(lease, name, identity);
    elect(elector, on_leading, health, shutdown, while_leading).await;
    Ok(())
}

/// [`run_while_leading`] on `elector`.
async fn elect<F, Fut>(
    elector: Elector,
    on_leading: OnLeading,
    health: &Health,
    mut shutdown: watch::Receiver<bool>,
    while_leading: F,
) where
    F: Fn(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()>,
{
    let identity = elector.identity.clone();
    let renewals = Renewals::default();
    let (leading_tx, mut leading) = watch::channel(false);
    let (release_tx, release) = watch::channel(false);
    let task = tokio::spawn(contest(
        elector,
        renewals.clone(),
        leading_tx,
        health.clone(),
        release,
    ));
    loop {
        tokio::select! {
            led = lead(&mut leading, &renewals) => if !led { break },
            _ = shutdown.wait_for(|&s| s) => break,
        }
        info!(%identity, "leading");
        on_leading(true);
        let (stop_tx, stop_rx) = watch::channel(false);
        let running = while_leading(stop_rx);
        tokio::pin!(running);
        let stop = tokio::select! {
            _ = &mut running => Stop::Shutdown,
            _ = leading.wait_for(|&l| !l) => Stop::Lost,
            _ = renewals.overdue() => Stop::Overdue,
            _ = stopped(shutdown.clone()) => Stop::Shutdown,
        };
        on_leading(false);
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
    // Only now that the controllers stopped may the Lease go to a standby.
    let _ = release_tx.send(true);
    if let Err(e) = task.await {
        warn!(error = %e, "leader election task failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::http::{Method, Request, Response, StatusCode};
    use kube::client::Body;
    use serde_json::{json, Value};
    use tokio::task::JoinHandle;
    use tower_test::mock;

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

    const NAMESPACE: &str = "kubesteer";
    const NAME: &str = "kubesteer-controller";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kubesteer/leases";

    /// One request as the fake apiserver answered it.
    #[derive(Clone, Debug)]
    struct Answered {
        at: Instant,
        by: &'static str,
        method: Method,
        status: u16,
        /// The holder the Lease names after it.
        holder: Option<String>,
    }

    impl Answered {
        fn wrote(&self) -> bool {
            self.method != Method::GET && self.status < 300
        }
    }

    #[derive(Default)]
    struct Stored {
        lease: Option<Lease>,
        version: u64,
        answered: Vec<Answered>,
    }

    impl Stored {
        fn holder(&self) -> Option<String> {
            self.lease
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.clone())
        }

        fn store(&mut self, mut lease: Lease) -> Value {
            self.version += 1;
            lease.metadata.name = Some(NAME.into());
            lease.metadata.namespace = Some(NAMESPACE.into());
            lease.metadata.resource_version = Some(self.version.to_string());
            let value = serde_json::to_value(&lease).unwrap();
            self.lease = Some(lease);
            value
        }

        /// Answers as the apiserver does for Leases: a PUT must carry the stored resourceVersion
        /// (Leases allow no unconditional update); a PATCH without one applies unconditionally.
        fn answer(&mut self, method: &Method, path: &str, body: &[u8]) -> (StatusCode, Value) {
            let named = path.strip_prefix(LEASES) == Some(&format!("/{NAME}"));
            let current = self
                .lease
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            match (method, named, path == LEASES) {
                (&Method::GET, true, _) => match &self.lease {
                    Some(lease) => (StatusCode::OK, serde_json::to_value(lease).unwrap()),
                    None => failure(404, "NotFound"),
                },
                (&Method::POST, _, true) if self.lease.is_some() => failure(409, "AlreadyExists"),
                (&Method::POST, _, true) => (
                    StatusCode::CREATED,
                    self.store(serde_json::from_slice(body).unwrap()),
                ),
                (&Method::PUT, true, _) => {
                    let lease: Lease = serde_json::from_slice(body).unwrap();
                    match (&current, &lease.metadata.resource_version) {
                        (None, _) => failure(404, "NotFound"),
                        (_, None) => failure(422, "Invalid"),
                        (Some(c), Some(v)) if c != v => failure(409, "Conflict"),
                        _ => (StatusCode::OK, self.store(lease)),
                    }
                }
                (&Method::PATCH, true, _) => {
                    let Some(lease) = &self.lease else {
                        return failure(404, "NotFound");
                    };
                    let mut value = serde_json::to_value(lease).unwrap();
                    let patch: Value = serde_json::from_slice(body).unwrap();
                    json_patch::merge(&mut value, &patch);
                    (
                        StatusCode::OK,
                        self.store(serde_json::from_value(value).unwrap()),
                    )
                }
                _ => failure(405, "MethodNotAllowed"),
            }
        }
    }

    fn failure(code: u16, reason: &str) -> (StatusCode, Value) {
        let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": reason, "reason": reason, "code": code});
        (StatusCode::from_u16(code).unwrap(), body)
    }

    /// An apiserver that keeps one Lease and enforces its resourceVersion on writes.
    #[derive(Clone)]
    struct Apiserver(Arc<watch::Sender<Stored>>);

    /// One replica's connection to the [`Apiserver`]: requests are answered in order; those
    /// `held` queue up unanswered, as in a partition, until it changes.
    struct Connection {
        held: watch::Sender<Hold>,
        received: watch::Sender<usize>,
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Hold {
        Nothing,
        Everything,
        Writes,
    }

    impl Hold {
        fn holds(self, method: &Method) -> bool {
            match self {
                Hold::Nothing => false,
                Hold::Everything => true,
                Hold::Writes => method != Method::GET,
            }
        }
    }

    impl Apiserver {
        fn new() -> Self {
            Self(Arc::new(watch::Sender::new(Stored::default())))
        }

        fn connect(&self, by: &'static str) -> (Api<Lease>, Connection) {
            let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
            let held = watch::Sender::new(Hold::Nothing);
            let received = watch::Sender::new(0);
            let (mut hold, count) = (held.subscribe(), received.clone());
            let apiserver = self.clone();
            tokio::spawn(async move {
                while let Some((request, send)) = handle.next_request().await {
                    count.send_modify(|n| *n += 1);
                    let method = request.method().clone();
                    let _ = hold.wait_for(|h| !h.holds(&method)).await;
                    send.send_response(apiserver.answer(by, request).await);
                }
            });
            let api = Api::namespaced(Client::new(service, NAMESPACE), NAMESPACE);
            (api, Connection { held, received })
        }

        async fn answer(&self, by: &'static str, request: Request<Body>) -> Response<Body> {
            let (parts, body) = request.into_parts();
            let body = body.collect_bytes().await.unwrap();
            let mut reply = failure(500, "InternalError");
            self.0.send_modify(|stored| {
                reply = stored.answer(&parts.method, parts.uri.path(), &body);
                let holder = stored.holder();
                stored.answered.push(Answered {
                    at: Instant::now(),
                    by,
                    method: parts.method.clone(),
                    status: reply.0.as_u16(),
                    holder,
                });
            });
            let body = Body::from(serde_json::to_vec(&reply.1).unwrap());
            Response::builder().status(reply.0).body(body).unwrap()
        }

        /// `holder` writes the Lease on a connection of its own, its renewTime from its own clock.
        fn write_as(&self, holder: &'static str, renew_time: Timestamp) {
            self.0.send_modify(|stored| {
                let mut lease = stored.lease.clone().unwrap_or_default();
                let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
                lease.spec = Some(LeaseSpec {
                    holder_identity: Some(holder.into()),
                    lease_duration_seconds: Some(DURATION_FIELD),
                    acquire_time: Some(MicroTime(renew_time)),
                    renew_time: Some(MicroTime(renew_time)),
                    lease_transitions: transitions,
                    ..LeaseSpec::default()
                });
                stored.store(lease);
                stored.answered.push(Answered {
                    at: Instant::now(),
                    by: holder,
                    method: Method::PUT,
                    status: 200,
                    holder: Some(holder.into()),
                });
            });
        }

        fn holder(&self) -> Option<String> {
            self.0.borrow().holder()
        }

        fn answered(&self) -> Vec<Answered> {
            self.0.borrow().answered.clone()
        }

        /// When `by` last wrote the Lease successfully.
        fn last_write_by(&self, by: &str) -> Instant {
            let answered = self.answered();
            let last = answered.iter().rev().find(|a| a.by == by && a.wrote());
            last.unwrap_or_else(|| panic!("{by} never wrote the Lease"))
                .at
        }

        async fn until(&self, what: &str, ready: impl FnMut(&Stored) -> bool) {
            until(&self.0, what, ready).await
        }
    }

    /// Waits, on the paused clock, until `ready` holds; fails naming `what` after 5 minutes.
    async fn until<T>(state: &watch::Sender<T>, what: &str, ready: impl FnMut(&T) -> bool) {
        let mut state = state.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(300), state.wait_for(ready));
        if !matches!(waited.await, Ok(Ok(_))) {
            panic!("{what}: not within 5 minutes");
        }
    }

    fn at(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    /// Starts and stops of a replica's controllers, in order (true: started).
    type Runs = Arc<watch::Sender<Vec<(Instant, bool)>>>;

    /// Records that the controllers stopped, whether they finished or were dropped.
    struct Running(Runs);

    impl Drop for Running {
        fn drop(&mut self) {
            self.0.send_modify(|r| r.push((Instant::now(), false)));
        }
    }

    /// A replica running [`elect`] on its own connection to the [`Apiserver`].
    struct Replica {
        runs: Runs,
        connection: Connection,
        shutdown: watch::Sender<bool>,
        task: JoinHandle<()>,
    }

    impl Replica {
        fn start(apiserver: &Apiserver, identity: &'static str) -> Self {
            let (api, connection) = apiserver.connect(identity);
            let runs: Runs = Arc::new(watch::Sender::new(Vec::new()));
            let (shutdown, shutdown_rx) = watch::channel(false);
            let elector = Elector::new(api, NAME, identity.into());
            let while_leading = {
                let runs = runs.clone();
                move |stop: watch::Receiver<bool>| {
                    let runs = runs.clone();
                    async move {
                        runs.send_modify(|r| r.push((Instant::now(), true)));
                        let _running = Running(runs);
                        stopped(stop).await;
                    }
                }
            };
            let task = tokio::spawn(async move {
                let health = Health::default();
                elect(
                    elector,
                    Arc::new(|_| {}),
                    &health,
                    shutdown_rx,
                    while_leading,
                )
                .await;
            });
            Self {
                runs,
                connection,
                shutdown,
                task,
            }
        }

        fn runs(&self) -> Vec<bool> {
            self.runs.borrow().iter().map(|r| r.1).collect()
        }

        async fn until_leading(&self, what: &str) {
            until(&self.runs, what, |r| r.last().is_some_and(|r| r.1)).await
        }

        fn hold(&self, hold: Hold) {
            self.connection.held.send_replace(hold);
        }

        fn pause(&self) {
            self.hold(Hold::Everything);
        }

        fn resume(&self) {
            self.hold(Hold::Nothing);
        }

        /// Waits until the replica has sent `n` requests in all.
        async fn sent(&self, n: usize) {
            let what = format!("request {n}");
            until(&self.connection.received, &what, |&r| r >= n).await
        }

        fn received(&self) -> usize {
            *self.connection.received.borrow()
        }

        async fn shut_down(self) {
            self.shutdown.send_replace(true);
            let done = tokio::time::timeout(Duration::from_secs(60), self.task);
            done.await.expect("shut down within a minute").unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_held_up_while_another_replica_took_the_lease_is_refused_and_the_leader_stands_by(
    ) {
        let apiserver = Apiserver::new();
        let a = Replica::start(&apiserver, "a");
        a.until_leading("a to lead").await;
        // a's next renewal is held up on its way...
        a.pause();
        a.sent(a.received() + 1).await;
        let held = Instant::now();
        // ...while b takes the Lease (say, its clock told it a's renewTime was long past) and
        // keeps renewing it.
        apiserver.write_as("b", Timestamp::now());
        let answered = apiserver.answered().len();
        let renewing = tokio::spawn({
            let apiserver = apiserver.clone();
            async move {
                loop {
                    tokio::time::sleep(RETRY_PERIOD).await;
                    apiserver.write_as("b", Timestamp::now());
                }
            }
        });
        a.resume();
        // The renewal reaches the apiserver after b's write: refused, and a stops at once.
        until(&a.runs, "a to stop", |r| r.len() == 2).await;
        let stopped_at = a.runs.borrow()[1].0;
        assert!(
            stopped_at - held < Duration::from_secs(1),
            "a stopped {:?} after its renewal was held up: for the lost Lease, not the deadline",
            stopped_at - held
        );
        let after = apiserver.answered().split_off(answered);
        assert_eq!((&after[0].method, after[0].status), (&Method::PUT, 409));
        assert_eq!(after[0].by, "a");
        // a stands by for good and never writes over b's Lease.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(apiserver.holder().as_deref(), Some("b"));
        assert_eq!(a.runs(), [true, false]);
        renewing.abort();
        let by_a: Vec<_> = apiserver
            .answered()
            .into_iter()
            .skip(answered)
            .filter(|x| x.by == "a")
            .collect();
        assert!(
            by_a.iter().all(|x| !x.wrote()),
            "a wrote the Lease after b took it: {by_a:?}"
        );
        assert!(by_a.iter().filter(|x| x.method == Method::GET).count() >= 15);
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_cut_off_stops_at_the_renew_deadline_and_its_late_renewals_are_refused() {
        let apiserver = Apiserver::new();
        let a = Replica::start(&apiserver, "a");
        a.until_leading("a to lead").await;
        tokio::time::sleep(Duration::from_secs(7)).await;
        a.pause();
        let renewed = apiserver.last_write_by("a");
        let b = Replica::start(&apiserver, "b");
        apiserver
            .until("b to take the Lease", |s| {
                s.holder().as_deref() == Some("b")
            })
            .await;
        let taken = Instant::now();
        let answered = apiserver.answered();
        let first_read = answered.iter().find(|x| x.by == "b").unwrap().at;
        // a stopped at its renew deadline; b took the Lease once a's record had not changed for
        // the lease duration since b first read it, and so after a stopped.
        let a_runs = a.runs.borrow().clone();
        assert_eq!(
            a_runs.iter().map(|r| r.1).collect::<Vec<_>>(),
            [true, false]
        );
        assert_eq!(a_runs[1].0 - renewed, RENEW_DEADLINE);
        assert_eq!(
            taken - first_read,
            Duration::from_secs(LEASE_DURATION_SECONDS)
        );
        b.until_leading("b to lead").await;

        // The partition heals: a's renewals held up in it reach the apiserver, and fail.
        a.resume();
        tokio::time::sleep(Duration::from_secs(60)).await;
        let after = apiserver.answered().split_off(answered.len());
        let by_a: Vec<_> = after.iter().filter(|x| x.by == "a").collect();
        assert_eq!(
            (&by_a[0].method, by_a[0].status),
            (&Method::PUT, 409),
            "{by_a:?}"
        );
        assert!(by_a.iter().all(|x| !x.wrote()), "{by_a:?}");
        assert_eq!(apiserver.holder().as_deref(), Some("b"));
        assert_eq!(a.runs(), [true, false]);
        assert_eq!(b.runs(), [true]);
    }

    /// renewTimes written by a clock 25 years slow and one 175 years fast.
    const SKEWED: [&str; 2] = ["2001-01-01T00:00:00Z", "2201-01-01T00:00:00Z"];

    #[tokio::test(start_paused = true)]
    async fn a_lease_whose_record_keeps_changing_is_never_taken_whatever_its_renew_time() {
        for skewed in SKEWED {
            let apiserver = Apiserver::new();
            apiserver.write_as("a", at(skewed));
            let b = Replica::start(&apiserver, "b");
            // a renews every 9 s, within the 10 s lease duration.
            for i in 1..=10 {
                tokio::time::sleep(Duration::from_secs(9)).await;
                let renew_time = at(skewed) + Duration::from_secs(9 * i);
                apiserver.write_as("a", renew_time);
            }
            assert_eq!(apiserver.holder().as_deref(), Some("a"), "{skewed}");
            assert!(b.runs().is_empty(), "{skewed}");
            let answered = apiserver.answered();
            let by_b: Vec<_> = answered.iter().filter(|x| x.by == "b").collect();
            assert!(by_b.iter().all(|x| !x.wrote()), "{skewed}: {by_b:?}");
            assert!(by_b.len() >= 30, "b read the Lease every 3 s: {by_b:?}");
            b.shut_down().await;
            assert_eq!(apiserver.holder().as_deref(), Some("a"), "{skewed}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_whose_record_stopped_changing_is_taken_after_its_duration_whatever_its_renew_time(
    ) {
        for skewed in SKEWED {
            let apiserver = Apiserver::new();
            apiserver.write_as("a", at(skewed));
            let b = Replica::start(&apiserver, "b");
            for i in 1..=3 {
                tokio::time::sleep(Duration::from_millis(3500)).await;
                apiserver.write_as("a", at(skewed) + Duration::from_secs(3 * i));
            }
            let changed = Instant::now();
            apiserver
                .until("b to take the Lease", |s| {
                    s.holder().as_deref() == Some("b")
                })
                .await;
            let waited = Instant::now() - changed;
            // b saw the last change at its next read, at most one retry period later.
            let duration = Duration::from_secs(LEASE_DURATION_SECONDS);
            assert!(
                duration <= waited && waited <= duration + RETRY_PERIOD,
                "{skewed}: taken {waited:?} after a's last renewal"
            );
            b.until_leading("b to lead").await;
            let lease = apiserver.0.borrow().lease.clone().unwrap();
            let spec = lease.spec.unwrap();
            assert_eq!(spec.lease_transitions, Some(1));
            assert_eq!(spec.lease_duration_seconds, Some(DURATION_FIELD));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_releases_the_lease_after_the_controllers_stopped_and_a_standby_takes_it_at_once(
    ) {
        let apiserver = Apiserver::new();
        let a = Replica::start(&apiserver, "a");
        a.until_leading("a to lead").await;
        let b = Replica::start(&apiserver, "b");
        b.sent(2).await;
        let a_runs = a.runs.clone();
        a.shut_down().await;
        let stopped_at = a_runs.borrow()[1].0;
        let released = apiserver
            .answered()
            .into_iter()
            .rfind(|x| x.by == "a")
            .unwrap();
        assert_eq!(
            (released.method, released.status, released.holder.as_deref()),
            (Method::PUT, 200, Some(""))
        );
        assert!(released.at >= stopped_at);
        apiserver
            .until("b to take the Lease", |s| {
                s.holder().as_deref() == Some("b")
            })
            .await;
        assert!(Instant::now() - released.at <= RETRY_PERIOD);
        b.until_leading("b to lead").await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_held_up_never_empties_a_lease_another_replica_took() {
        let apiserver = Apiserver::new();
        let a = Replica::start(&apiserver, "a");
        a.until_leading("a to lead").await;
        a.pause();
        apiserver.write_as("b", Timestamp::now());
        let answered = apiserver.answered().len();
        let (held, received) = (a.connection.held.clone(), a.connection.received.clone());
        // a shuts down while cut off: it still believes it holds the Lease, so it releases it.
        a.shut_down().await;
        held.send_replace(Hold::Nothing);
        let sent = *received.borrow();
        apiserver
            .until("a's requests to be answered", |s| {
                s.answered.iter().filter(|x| x.by == "a").count() == sent
            })
            .await;
        let after = apiserver.answered().split_off(answered);
        let last = after.last().unwrap();
        assert_eq!(
            (&last.method, last.status),
            (&Method::PUT, 409),
            "{after:?}"
        );
        assert!(after.iter().all(|x| !x.wrote()), "{after:?}");
        assert_eq!(apiserver.holder().as_deref(), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn of_two_replicas_creating_the_lease_at_once_one_leads_and_the_other_stands_by() {
        let apiserver = Apiserver::new();
        let (a, b) = (
            Replica::start(&apiserver, "a"),
            Replica::start(&apiserver, "b"),
        );
        // Both read that there is no Lease before either creates it.
        a.hold(Hold::Writes);
        b.hold(Hold::Writes);
        a.sent(2).await;
        b.sent(2).await;
        a.resume();
        b.resume();
        apiserver.until("a leader", |s| s.holder().is_some()).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        let holder = apiserver.holder().unwrap();
        let ((leader, _), (standby, loser)) = if holder == "a" {
            ((&a, "a"), (&b, "b"))
        } else {
            ((&b, "b"), (&a, "a"))
        };
        assert_eq!(leader.runs(), [true]);
        assert!(standby.runs().is_empty());
        let answered = apiserver.answered();
        let by_loser: Vec<_> = answered.iter().filter(|x| x.by == loser).collect();
        let created: Vec<_> = by_loser
            .iter()
            .map(|x| (&x.method, x.status))
            .take(2)
            .collect();
        assert_eq!(created, [(&Method::GET, 404), (&Method::POST, 409)]);
        assert!(by_loser.iter().all(|x| !x.wrote()), "{by_loser:?}");
    }
}
