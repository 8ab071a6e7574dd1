//! Liveness and readiness: `/healthz` answers while the process serves at all; `/readyz` tells
//! whether its answers are current.
//!
//! A process is ready when
//!
//! - it is not shutting down ([`Health::shut_down`]),
//! - nothing it waits for is still held ([`Health::hold`]), and
//! - every watch it registered ([`Health::watch`]) has listed once, and none has been failing
//!   for `stale_after` or longer: its cache would answer from a state that may be long gone. A
//!   watch started on demand while the process is ready ([`Health::track_on_demand`]) only
//!   counts for failing.
//!
//! A watch fails from the first error it reports until it is up again. A watch that reconnects
//! yields nothing until an object changes, so it is also up again once the apiserver accepted
//! a watch request of its resource and selectors after its last error: the client of
//! [`client`] tells [`Health`] so. Without that client (or for a watch registered without its
//! [`key`]), a watch also counts as up once it has reported no error for
//! [`RETRY_INTERVAL_MAX`], as a watch that keeps failing reports an error at least that often.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use futures::{Stream, StreamExt};
use kube::client::{Body, ClientBuilder};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Config};
use tokio::time::Instant;

/// `--watch-stale-after`'s default.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(30);

/// The longest a failing watch goes without reporting an error: its backoff
/// ([`super::watch::backoff`]) waits at most 10 s between attempts, and a connection attempt
/// gives up after the client's 30 s connect timeout.
pub const RETRY_INTERVAL_MAX: Duration = Duration::from_secs(45);

/// What `/readyz` waits for until a binary has started (the controller: until its controllers
/// run or, under leader election, the Lease is contested).
pub const STARTING: &str = "the controller to start";

/// The readiness state of a process; clones share it.
#[derive(Debug, Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    stale_after: Duration,
    state: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    next_id: u64,
    watches: BTreeMap<u64, Watch>,
    holds: BTreeSet<&'static str>,
    shutting_down: bool,
    /// When the apiserver last accepted a watch request, by [`key`].
    accepted: HashMap<String, Instant>,
    /// Whether [`Health::check`] last answered ready, to log when that changes.
    was_ready: Option<bool>,
}

#[derive(Debug)]
struct Watch {
    what: String,
    key: Option<String>,
    listed: bool,
    /// The first error of the current run of errors, and the last one.
    failing: Option<(Instant, Instant)>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new(DEFAULT_STALE_AFTER)
    }
}

impl Health {
    /// A process with nothing registered yet, so ready; watches failing for `stale_after` make
    /// it unready.
    pub fn new(stale_after: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                stale_after,
                state: Mutex::default(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, Registry> {
        // The state stays consistent under a panic: every change is a single assignment.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a watch named `what` (e.g. "Deployment"): not ready until it lists once. It
    /// is unregistered when the returned handle is dropped, with the watch that holds it.
    pub fn watch(&self, what: impl Into<String>) -> WatchHealth {
        self.register(what.into(), None, false)
    }

    /// Registers a watch; `listed` when its first list is not waited for.
    fn register(&self, what: String, key: Option<String>, listed: bool) -> WatchHealth {
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        state.watches.insert(
            id,
            Watch {
                what,
                key,
                listed,
                failing: None,
            },
        );
        WatchHealth {
            health: self.clone(),
            id,
        }
    }

    /// `stream`, a `kube::runtime::watcher` stream of the requests [`key`] names, with its
    /// events and errors recorded as the state of a watch named `what`, registered now.
    pub fn track<K, S>(
        &self,
        what: impl Into<String>,
        key: String,
        stream: S,
    ) -> impl Stream<Item = S::Item>
    where
        S: Stream<Item = Result<Event<K>, watcher::Error>>,
    {
        observed(self.register(what.into(), Some(key), false), stream)
    }

    /// Like [`Health::track`], for a watch started on demand (when something first needs it):
    /// its first list keeps the process unready only if it starts while the process is not
    /// ready anyway (starting, or a new leader catching up). One that starts while the
    /// process is ready does not make it unready until it lists, as the process's answers
    /// did not depend on it: whatever reads from it checks that it has listed. Failing for
    /// `stale_after` counts as for any watch.
    pub fn track_on_demand<K, S>(
        &self,
        what: impl Into<String>,
        key: String,
        stream: S,
    ) -> impl Stream<Item = S::Item>
    where
        S: Stream<Item = Result<Event<K>, watcher::Error>>,
    {
        observed(self.register_on_demand(what.into(), Some(key)), stream)
    }

    fn register_on_demand(&self, what: String, key: Option<String>) -> WatchHealth {
        let ready = self.check_at(Instant::now()).is_ok();
        self.register(what, key, ready)
    }

    /// A layer for the kube client that tells this state of every watch request the
    /// apiserver accepts; see [`client`].
    pub fn layer(&self) -> AcceptedLayer {
        AcceptedLayer {
            health: self.clone(),
        }
    }

    /// Not ready until [`Health::release`] of the same `what` (e.g. "leader election").
    pub fn hold(&self, what: &'static str) {
        self.state().holds.insert(what);
    }

    pub fn release(&self, what: &'static str) {
        self.state().holds.remove(what);
    }

    /// Not ready from now on: the process is going away.
    pub fn shut_down(&self) {
        self.state().shutting_down = true;
    }

    pub fn is_shutting_down(&self) -> bool {
        self.state().shutting_down
    }

    /// Ready, or why not; turning ready or unready is logged.
    pub fn check(&self) -> Result<(), String> {
        let verdict = self.check_at(Instant::now());
        let mut state = self.state();
        if state.was_ready != Some(verdict.is_ok()) {
            match &verdict {
                Ok(()) => tracing::info!("ready"),
                Err(why) => tracing::info!(reason = %why, "not ready"),
            }
            state.was_ready = Some(verdict.is_ok());
        }
        verdict
    }

    fn check_at(&self, now: Instant) -> Result<(), String> {
        let state = self.state();
        if state.shutting_down {
            return Err("shutting down".to_string());
        }
        if let Some(what) = state.holds.iter().next() {
            return Err(format!("waiting for {what}"));
        }
        for watch in state.watches.values() {
            if !watch.listed {
                return Err(format!("the {} watch has not listed yet", watch.what));
            }
            if let Some((first, last)) = watch.failing {
                let down = now.saturating_duration_since(first);
                let reconnected = watch
                    .key
                    .as_ref()
                    .and_then(|k| state.accepted.get(k))
                    .is_some_and(|&at| at > last);
                let still =
                    !reconnected && now.saturating_duration_since(last) < RETRY_INTERVAL_MAX;
                if still && down >= self.inner.stale_after {
                    return Err(format!(
                        "the {} watch has been failing for {}s",
                        watch.what,
                        down.as_secs()
                    ));
                }
            }
        }
        Ok(())
    }

    fn observe(&self, id: u64, ok: bool, now: Instant) {
        let mut state = self.state();
        let Some(watch) = state.watches.get_mut(&id) else {
            return;
        };
        if ok {
            watch.failing = None;
            return;
        }
        watch.failing = match watch.failing {
            // Errors further apart than a failing watch reports them are a new outage.
            Some((first, last)) if now.saturating_duration_since(last) < RETRY_INTERVAL_MAX => {
                Some((first, now))
            }
            _ => Some((now, now)),
        };
    }

    fn accepted(&self, key: String, at: Instant) {
        self.state().accepted.insert(key, at);
    }

    fn listed(&self, id: u64) {
        if let Some(watch) = self.state().watches.get_mut(&id) {
            watch.listed = true;
        }
    }
}

/// `stream`, its items recorded as the state of `watch`.
fn observed<K, S>(watch: WatchHealth, stream: S) -> impl Stream<Item = S::Item>
where
    S: Stream<Item = Result<Event<K>, watcher::Error>>,
{
    stream.inspect(move |item| watch.observe(item))
}

/// One registered watch; see [`Health::watch`].
#[derive(Debug)]
pub struct WatchHealth {
    health: Health,
    id: u64,
}

impl WatchHealth {
    /// Records what the watch yielded: an event means it is up (and `InitDone` that it has
    /// listed), an error that it is failing.
    pub fn observe<K>(&self, item: &Result<Event<K>, watcher::Error>) {
        let now = Instant::now();
        match item {
            Ok(Event::InitDone) => {
                self.health.observe(self.id, true, now);
                self.health.listed(self.id);
            }
            Ok(_) => self.health.observe(self.id, true, now),
            Err(_) => self.health.observe(self.id, false, now),
        }
    }
}

impl Drop for WatchHealth {
    fn drop(&mut self) {
        self.health.state().watches.remove(&self.id);
    }
}

/// What tells the watch requests of `api` with `config`'s selectors from others: its resource's
/// path, and its label and field selectors.
pub fn key<K: kube::Resource>(api: &Api<K>, config: &watcher::Config) -> String {
    key_of(
        api.resource_url(),
        config.label_selector.as_deref(),
        config.field_selector.as_deref(),
    )
}

fn key_of(path: &str, labels: Option<&str>, fields: Option<&str>) -> String {
    format!(
        "{path}?labelSelector={}&fieldSelector={}",
        labels.unwrap_or_default(),
        fields.unwrap_or_default()
    )
}

/// The [`key`] of a request, when it is a watch request.
fn request_key(uri: &http::Uri) -> Option<String> {
    let (mut watch, mut labels, mut fields) = (false, None, None);
    for (name, value) in form_urlencoded::parse(uri.query()?.as_bytes()) {
        match name.as_ref() {
            "watch" => watch = value == "true" || value == "1",
            "labelSelector" => labels = Some(value.into_owned()),
            "fieldSelector" => fields = Some(value.into_owned()),
            _ => {}
        }
    }
    watch.then(|| key_of(uri.path(), labels.as_deref(), fields.as_deref()))
}

/// A kube client for `config` that tells `health` of every watch request the apiserver
/// accepts, so that a watch that reconnected counts as up at once.
pub fn client(config: Config, health: &Health) -> Result<Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&health.layer())
        .build())
}

/// See [`Health::layer`].
#[derive(Debug, Clone)]
pub struct AcceptedLayer {
    health: Health,
}

impl<S> tower::Layer<S> for AcceptedLayer {
    type Service = RecordAccepted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RecordAccepted {
            inner,
            health: self.health.clone(),
        }
    }
}

/// The service of [`AcceptedLayer`].
#[derive(Debug, Clone)]
pub struct RecordAccepted<S> {
    inner: S,
    health: Health,
}

impl<S, B> tower::Service<http::Request<Body>> for RecordAccepted<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let watch = request_key(request.uri()).map(|key| (key, self.health.clone()));
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            if let Some((key, health)) = watch.filter(|_| response.status().is_success()) {
                // The head of a watch's answer: the apiserver serves this watch from now on.
                health.accepted(key, Instant::now());
            }
            Ok(response)
        })
    }
}

/// `/healthz`, always "ok" while the process serves, and `/readyz`: 200 "ok", or 503 and why
/// not ([`Health::check`]).
pub fn routes(health: Health) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route(VERSION_PATH, get(version))
        .with_state(health)
}

/// Where both binaries say which release they are, beside the probes.
pub const VERSION_PATH: &str = "/version";

/// `{"version":"<release>"}`, the workspace version ([`crate::VERSION`]).
async fn version() -> ([(axum::http::header::HeaderName, &'static str); 1], String) {
    let body = serde_json::json!({ "version": crate::VERSION }).to_string();
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
}

async fn readyz(extract::State(health): extract::State<Health>) -> (StatusCode, String) {
    match health.check() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    fn error() -> Result<Event<()>, watcher::Error> {
        Err(watcher::Error::NoResourceVersion)
    }

    const STALE: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn not_ready_until_every_watch_has_listed_once() {
        let health = Health::new(STALE);
        assert_eq!(health.check(), Ok(()), "nothing to wait for");
        let a = health.watch("Scaler");
        let b = health.watch("Deployment");
        assert_eq!(
            health.check(),
            Err("the Scaler watch has not listed yet".to_string())
        );
        a.observe(&Ok(Event::<()>::Init));
        a.observe(&Ok(Event::InitApply(())));
        assert!(health.check().is_err(), "listing is not listed");
        a.observe(&Ok(Event::<()>::InitDone));
        assert_eq!(
            health.check(),
            Err("the Deployment watch has not listed yet".to_string())
        );
        b.observe(&error());
        assert!(health.check().is_err(), "an error is not a list");
        b.observe(&Ok(Event::<()>::InitDone));
        assert_eq!(health.check(), Ok(()));
        // A watch that goes away stops counting, and a new one counts from the start.
        drop(b);
        let c = health.watch("Pod");
        assert!(health.check().is_err());
        drop(c);
        assert_eq!(health.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_started_on_demand_gates_readiness_only_when_it_starts_unready() {
        let health = Health::new(STALE);
        let scaler = health.watch("Scaler");
        // Started while the process is not ready yet (its Scalers listing): waited for.
        let early = health.register_on_demand("HorizontalPodAutoscaler".into(), None);
        scaler.observe(&Ok(Event::<()>::InitDone));
        assert_eq!(
            health.check(),
            Err("the HorizontalPodAutoscaler watch has not listed yet".to_string())
        );
        early.observe(&Ok(Event::<()>::InitDone));
        assert_eq!(health.check(), Ok(()));
        // Started while ready (the first Scaler created later): ready before it lists...
        let late = health.register_on_demand("Deployment".into(), None);
        assert_eq!(health.check(), Ok(()));
        late.observe(&Ok(Event::<()>::Init));
        assert_eq!(health.check(), Ok(()));
        // ...but not once it has been failing for the threshold.
        late.observe(&error());
        tokio::time::advance(STALE).await;
        late.observe(&error());
        assert_eq!(
            health.check(),
            Err("the Deployment watch has been failing for 30s".to_string())
        );
        late.observe(&Ok(Event::<()>::InitDone));
        assert_eq!(health.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_failing_for_the_threshold_makes_it_unready_until_it_recovers() {
        let health = Health::new(STALE);
        let w = health.watch("Deployment");
        w.observe(&Ok(Event::<()>::InitDone));
        // Errors, retried with backoff, shorter than the threshold: still ready.
        w.observe(&error());
        tokio::time::advance(Duration::from_secs(20)).await;
        w.observe(&error());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(health.check(), Ok(()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            health.check(),
            Err("the Deployment watch has been failing for 30s".to_string())
        );
        // Still failing: the next error comes within the longest retry interval.
        tokio::time::advance(Duration::from_secs(20)).await;
        w.observe(&error());
        assert!(health.check().is_err());
        // Any event means the watch is up again.
        w.observe(&Ok(Event::Apply(())));
        assert_eq!(health.check(), Ok(()));
        // A single error long after the last run starts a new run, not a stale one.
        w.observe(&error());
        tokio::time::advance(RETRY_INTERVAL_MAX).await;
        w.observe(&error());
        assert_eq!(health.check(), Ok(()));
        // A watch that resumed silently: no error for the longest retry interval.
        tokio::time::advance(STALE).await;
        assert!(health.check().is_err());
        tokio::time::advance(RETRY_INTERVAL_MAX - STALE).await;
        assert_eq!(health.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_is_up_again_once_the_apiserver_accepts_its_watch_request() {
        let health = Health::new(STALE);
        let config = watcher::Config::default().labels("app=memcached");
        let key = key_of(
            "/apis/apps/v1/namespaces/team/deployments",
            config.label_selector.as_deref(),
            None,
        );
        let mut tracked = Box::pin(health.track(
            "Deployment",
            key,
            futures::stream::iter([Ok(Event::InitDone), error()]),
        ));
        tracked.next().await;
        tracked.next().await;
        tokio::time::advance(STALE).await;
        assert!(health.check().is_err(), "failing since the error");
        // Other watches' requests, and lists, do not count.
        let layer = |uri: &str| {
            let uri: http::Uri = uri.parse().unwrap();
            request_key(&uri)
        };
        for other in [
            "/apis/apps/v1/namespaces/team/deployments?watch=true&labelSelector=app%3Dwelcome",
            "/apis/apps/v1/namespaces/team/deployments?labelSelector=app%3Dmemcached",
            "/apis/apps/v1/namespaces/other/deployments?watch=true&labelSelector=app%3Dmemcached",
        ] {
            if let Some(key) = layer(other) {
                health.accepted(key, Instant::now());
            }
        }
        assert!(health.check().is_err(), "only its own watch request counts");
        let own = "/apis/apps/v1/namespaces/team/deployments?allowWatchBookmarks=true&watch=true&labelSelector=app%3Dmemcached&resourceVersion=5";
        health.accepted(layer(own).unwrap(), Instant::now());
        assert_eq!(health.check(), Ok(()));
    }

    /// An apiserver that answers every request with one status.
    struct Answer(u16);

    impl tower::Service<http::Request<kube::client::Body>> for Answer {
        type Response = http::Response<()>;
        type Error = String;
        type Future = std::future::Ready<Result<Self::Response, String>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), String>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<kube::client::Body>) -> Self::Future {
            let response = http::Response::builder().status(self.0).body(());
            std::future::ready(response.map_err(|e| e.to_string()))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_client_layer_records_accepted_watch_requests_only() {
        use tower::{Layer, Service};

        let health = Health::default();
        for (status, uri) in [
            (200, "/api/v1/pods?watch=1"),
            (500, "/api/v1/services?watch=true"),
            (200, "/api/v1/secrets"),
        ] {
            let mut service = health.layer().layer(Answer(status));
            let request = http::Request::get(uri)
                .body(kube::client::Body::empty())
                .unwrap();
            let response = service.call(request).await.unwrap();
            assert_eq!(response.status().as_u16(), status);
        }
        let accepted: Vec<String> = health.state().accepted.keys().cloned().collect();
        assert_eq!(accepted, [key_of("/api/v1/pods", None, None)]);
    }

    #[tokio::test(start_paused = true)]
    async fn holds_and_shutdown_make_it_unready() {
        let health = Health::default();
        health.hold("leader election");
        assert_eq!(
            health.check(),
            Err("waiting for leader election".to_string())
        );
        health.release("leader election");
        assert_eq!(health.check(), Ok(()));
        assert!(!health.is_shutting_down());
        health.shut_down();
        assert!(health.is_shutting_down());
        assert_eq!(health.check(), Err("shutting down".to_string()));
    }

    #[tokio::test(start_paused = true)]
    async fn tracking_a_stream_records_its_items() {
        let health = Health::new(STALE);
        let items = futures::stream::iter([error(), Ok(Event::Init), Ok(Event::InitDone)]);
        let mut tracked = Box::pin(health.track("Scaler", "k".to_string(), items));
        assert!(tracked.next().await.is_some_and(|i| i.is_err()));
        assert!(health.check().is_err());
        tracked.next().await;
        tracked.next().await;
        assert_eq!(health.check(), Ok(()));
        drop(tracked);
        assert_eq!(
            health.state().watches.len(),
            0,
            "unregistered with its stream"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn readyz_answers_503_with_the_reason() {
        let health = Health::default();
        let get = |path: &'static str| {
            let app = routes(health.clone());
            async move {
                let res = app
                    .oneshot(Request::get(path).body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                let status = res.status();
                let body = axum::body::to_bytes(res.into_body(), 1024).await.unwrap();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
        };
        let watch = health.watch("HorizontalPodAutoscaler");
        assert_eq!(
            get("/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the HorizontalPodAutoscaler watch has not listed yet".to_string()
            )
        );
        assert_eq!(get("/healthz").await, (StatusCode::OK, "ok".to_string()));
        watch.observe(&Ok(Event::<()>::InitDone));
        assert_eq!(get("/readyz").await, (StatusCode::OK, "ok".to_string()));
        // Which release this is, ready or not.
        let (status, body) = get(VERSION_PATH).await;
        assert_eq!(status, StatusCode::OK);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    }
}
