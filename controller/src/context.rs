//! What every reconcile gets: the client, the event recorder, metrics, the clock and backoff.
use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use kubesteer_api::keys::{reason, CONTROLLER_FIELD_MANAGER};
use kubesteer_runtime::queue::Action;
use tracing::{debug, warn};

use crate::children::Caches;
use crate::metrics::Metrics;
use crate::{Error, Result};

/// The time source; tests inject a fixed clock to drive Scaler transitions.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

// Short enough that a conflicting writer is caught up with at once, long enough not to spin.
pub const CONFLICT_REQUEUE: Duration = Duration::from_millis(500);
const BACKOFF_BASE: Duration = Duration::from_secs(1);
// A broken object is retried at least every five minutes, like the built-in controllers.
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Shared state of all reconcilers.
pub struct Context {
    pub client: Client,
    /// Folds repeats of an event (same type, reason and object) into one series.
    pub recorder: Recorder,
    reporter: Reporter,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
    /// Watch caches of the owned objects.
    pub caches: Caches,
    /// Failed reconciles in a row of each object, for its backoff.
    failures: PerObject<u32>,
    /// Since when the status write of each object has been held back.
    held: PerObject<DateTime<Utc>>,
    /// Status writes that the owner's watch has not brought back yet.
    written: PerObject<WrittenStatus>,
}

/// A status this controller wrote, and the resourceVersion of the object it was written over.
/// While the cache still shows the object at that version, the write is what the object's
/// status is: a reconcile that runs before the write's watch event (the event of a child, or
/// a slow watch) then finds the status it would write already written, not the old one.
#[derive(Clone)]
struct WrittenStatus {
    over: Option<String>,
    status: Arc<dyn Any + Send + Sync>,
}

// Longer than any backoff, so a live object that keeps failing is seen again well before.
const FORGET_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(2 * 300);

/// State kept per object (kind, namespace, name). An entry goes when its object is deleted
/// ([`Context::forget`]); one whose deletion went unseen (a watch gap) goes once it was not
/// touched for `FORGET_AFTER`, swept whenever the map has doubled. The event recorder's own
/// map of event series needs none of this: kube-runtime drops series older than 6 minutes.
pub struct PerObject<V> {
    entries: Mutex<Swept<String, (V, DateTime<Utc>)>>,
}

impl<V> Default for PerObject<V> {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
        }
    }
}

/// A map whose stale entries are dropped once it has doubled since its last sweep, so that a
/// burst of inserts costs a sweep per doubling, not one per insert (the maps of [`PerObject`]
/// and of the children created and not seen yet). It reads as the `HashMap` it holds; every
/// insert goes through [`Swept::upsert`] or [`Swept::insert`], which sweep, so no caller can
/// grow it unswept.
pub(crate) struct Swept<K, V> {
    map: HashMap<K, V>,
    sweep_at: usize,
}

/// The fewest entries a [`Swept`] map keeps before its first sweep.
pub(crate) const MIN_SWEEP: usize = 64;

impl<K, V> Default for Swept<K, V> {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
            sweep_at: MIN_SWEEP,
        }
    }
}

impl<K: Eq + std::hash::Hash, V> Swept<K, V> {
    /// Runs `update` on the entry of `key` (made by `make` if there is none) and returns what it
    /// returns; then, if the map has doubled since the last sweep, keeps only the entries `fresh`
    /// keeps (the one just updated among them, if it is fresh).
    pub(crate) fn upsert<R>(
        &mut self,
        key: K,
        make: impl FnOnce() -> V,
        update: impl FnOnce(&mut V) -> R,
        fresh: impl FnMut(&K, &V) -> bool,
    ) -> R {
        let out = update(self.map.entry(key).or_insert_with(make));
        self.sweep_if_grown(fresh);
        out
    }

    /// Sets the entry of `key` to `value`, then sweeps as [`Swept::upsert`] does.
    pub(crate) fn insert(&mut self, key: K, value: V, fresh: impl FnMut(&K, &V) -> bool) {
        self.map.insert(key, value);
        self.sweep_if_grown(fresh);
    }

    fn sweep_if_grown(&mut self, mut fresh: impl FnMut(&K, &V) -> bool) {
        if self.map.len() >= self.sweep_at {
            self.map.retain(|k, v| fresh(k, v));
            self.sweep_at = (2 * self.map.len()).max(MIN_SWEEP);
        }
    }

    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + std::hash::Hash + ?Sized,
    {
        self.map.remove(key)
    }
}

impl<K, V> std::ops::Deref for Swept<K, V> {
    type Target = HashMap<K, V>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<V: Clone> PerObject<V> {
    /// The value of `key`, which `update` may change; `make` gives the value of a new entry.
    fn update(
        &self,
        key: String,
        now: DateTime<Utc>,
        make: impl FnOnce() -> V,
        update: impl FnOnce(&mut V),
    ) -> V {
        lock(&self.entries).upsert(
            key,
            || (make(), now),
            |entry| {
                update(&mut entry.0);
                entry.1 = now;
                entry.0.clone()
            },
            |_, (_, touched)| *touched + FORGET_AFTER > now,
        )
    }

    fn get(&self, key: &str) -> Option<V> {
        lock(&self.entries).get(key).map(|(v, _)| v.clone())
    }

    fn remove(&self, key: &str) {
        lock(&self.entries).remove(key);
    }

    /// How many objects have an entry.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Context {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        identity: Option<String>,
        caches: Caches,
    ) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_FIELD_MANAGER.to_string(),
            instance: identity,
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            reporter,
            client,
            metrics,
            clock,
            caches,
            failures: PerObject::default(),
            held: PerObject::default(),
            written: PerObject::default(),
        }
    }

    /// The same context with other caches, for a new run of the controllers.
    pub fn with_caches(&self, caches: Caches) -> Self {
        Self::new(
            self.client.clone(),
            self.metrics.clone(),
            self.clock.clone(),
            self.reporter.instance.clone(),
            caches,
        )
    }

    /// Runs one reconcile of `obj`: counts and times it, retries conflicts quietly, and tells
    /// the user about a failure with a Warning event.
    pub async fn reconcile<K>(
        &self,
        kind: &'static str,
        obj: &K,
        work: impl Future<Output = Result<Action>>,
    ) -> Result<Action>
    where
        K: Resource<DynamicType = ()> + serde::Serialize,
    {
        let _measure = self.metrics.reconcile(kind);
        let key = key_of(kind, obj);
        match work.await {
            Ok(action) => {
                self.failures.remove(&key);
                Ok(action)
            }
            Err(e) if e.is_conflict() => {
                debug!(%key, "conflict; retrying with a fresh read");
                Ok(Action::requeue(CONFLICT_REQUEUE))
            }
            Err(e) => {
                let denial = e.admission_denial().map(str::to_string);
                let (why, note) = match &denial {
                    Some(message) => (reason::ADMISSION_DENIED, message.clone()),
                    None => (reason::RECONCILE_FAILED, e.to_string()),
                };
                let event = Event {
                    type_: EventType::Warning,
                    reason: why.into(),
                    note: Some(truncate(&note, 1000)),
                    action: "Reconcile".into(),
                    secondary: None,
                };
                if let Err(pe) = self.recorder.publish(&event, &obj.object_ref(&())).await {
                    debug!(%key, error = %pe, "could not publish the failure event");
                }
                if let Some(message) = denial {
                    self.show_denial(obj, &message).await;
                }
                Err(e)
            }
        }
    }

    /// Shows on `obj` that an admission webhook denied one of the controller's writes:
    /// `Ready=False`, reason `AdmissionDenied`, the webhook's message. Written under a field
    /// manager of its own (the next status write takes the condition back), and only when the
    /// object does not show that message already, so that the write does not wake the
    /// reconcile again and again.
    async fn show_denial<K>(&self, obj: &K, message: &str)
    where
        K: Resource<DynamicType = ()> + serde::Serialize,
    {
        use kube::api::{Api, DynamicObject, Patch, PatchParams};
        use kubesteer_api::keys::{condition::READY, DENIAL_FIELD_MANAGER};
        let message = truncate(message, 1000);
        let current = serde_json::to_value(obj).unwrap_or_default();
        let shown = current["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == READY
                    && c["reason"] == reason::ADMISSION_DENIED
                    && c["message"] == message.as_str()
            });
        let Some(ns) = obj.namespace().filter(|_| !shown) else {
            return;
        };
        let condition = kubesteer_api::common::condition(
            READY,
            false,
            reason::ADMISSION_DENIED,
            message,
            obj.meta().generation,
            crate::reconcilers::time(self.clock.now()),
            &[],
        );
        let resource = kube::api::ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &resource);
        let patch = Patch::Apply(serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": {"conditions": [condition]},
        }));
        let params = PatchParams::apply(DENIAL_FIELD_MANAGER).force();
        if let Err(e) = api.patch_status(&obj.name_any(), &params, &patch).await {
            warn!(key = %key_of(K::kind(&()).as_ref(), obj), error = %e, "could not show the admission denial in the status");
        }
    }

    /// The error policy of every controller: count the error and requeue with exponential backoff.
    pub fn error_policy<K>(&self, kind: &'static str, obj: &K, error: &Error) -> Action
    where
        K: Resource<DynamicType = ()>,
    {
        self.error_policy_with(kind, obj, error, |delay| delay)
    }

    /// Like [`Context::error_policy`], with the backoff shortened by `adjust` for kinds that
    /// have a time to keep.
    pub fn error_policy_with<K>(
        &self,
        kind: &'static str,
        obj: &K,
        error: &Error,
        adjust: impl FnOnce(Duration) -> Duration,
    ) -> Action
    where
        K: Resource<DynamicType = ()>,
    {
        self.metrics.error(kind, error);
        let key = key_of(kind, obj);
        let attempts = self.failures.update(
            key.clone(),
            self.clock.now(),
            || 0,
            |n| *n = n.saturating_add(1),
        );
        let delay = adjust(backoff(attempts));
        warn!(%key, %error, attempts, retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }

    /// Publishes an event about `obj`; a failure to publish is logged, never fatal.
    pub async fn publish<K>(&self, obj: &K, type_: EventType, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(&note, 1000)),
            action: reason.into(),
            secondary: None,
        };
        // A Normal event reports one change, so it stands alone: a series keeps only the first
        // note, and would hide "scaled back to 5" behind "scaled to 5". Warnings repeat, and fold.
        let recorder = match type_ {
            EventType::Normal => Recorder::new(self.client.clone(), self.reporter.clone()),
            EventType::Warning => self.recorder.clone(),
        };
        if let Err(e) = recorder.publish(&event, &obj.object_ref(&())).await {
            warn!(reason, error = %e, "could not publish an event");
        }
    }

    /// How much longer the status write of `obj` may wait, counted from the first time it was
    /// held back; `None` once `grace` has passed, when it must be written.
    pub fn hold_status<K>(&self, kind: &str, obj: &K, grace: Duration) -> Option<Duration>
    where
        K: Resource<DynamicType = ()>,
    {
        let now = self.clock.now();
        let since = self.held.update(key_of(kind, obj), now, || now, |_| {});
        let waited = (now - since).to_std().unwrap_or_default();
        grace.checked_sub(waited).filter(|left| !left.is_zero())
    }

    /// Notes that `status` was written over `obj` as the cache showed it, so a write held back
    /// is no longer.
    pub fn status_written<K, S>(&self, kind: &str, obj: &K, status: S)
    where
        K: Resource<DynamicType = ()>,
        S: Send + Sync + 'static,
    {
        self.held.remove(&key_of(kind, obj));
        let written = WrittenStatus {
            over: obj.meta().resource_version.clone(),
            status: Arc::new(status),
        };
        let now = self.clock.now();
        self.written.update(
            key_of(kind, obj),
            now,
            || written.clone(),
            |w| *w = written.clone(),
        );
    }

    /// The status this controller wrote over `obj` as it is cached now, if the cache has not
    /// brought the write back yet. Once the cache shows `obj` at another version (the write, or
    /// anyone's later one), its status is the one to go by, and the note is dropped.
    pub fn written_status<K, S>(&self, kind: &str, obj: &K) -> Option<Arc<S>>
    where
        K: Resource<DynamicType = ()>,
        S: Send + Sync + 'static,
    {
        let key = key_of(kind, obj);
        let written = self.written.get(&key)?;
        if written.over != obj.meta().resource_version {
            self.written.remove(&key);
            return None;
        }
        written.status.downcast::<S>().ok()
    }

    /// Forgets everything kept about `obj`, which was deleted.
    pub fn forget<K>(&self, kind: &str, obj: &K)
    where
        K: Resource<DynamicType = ()>,
    {
        let key = key_of(kind, obj);
        self.failures.remove(&key);
        self.held.remove(&key);
        self.written.remove(&key);
    }

    /// How many objects the per-object maps (backoff, held status writes, status writes not
    /// seen yet) hold entries for.
    pub fn tracked(&self) -> (usize, usize, usize) {
        (self.failures.len(), self.held.len(), self.written.len())
    }
}

pub(crate) use kubesteer_runtime::lock;

fn key_of<K: Resource>(kind: &str, obj: &K) -> String {
    format!(
        "{kind}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// 1 s, 2 s, 4 s, ... up to five minutes: the delay after `attempts` failures in a row, from
/// backon's exponential backoff (the one the watches use, without their jitter: a reconcile's
/// retry is timed per object already).
pub fn backoff(attempts: u32) -> Duration {
    use backon::BackoffBuilder;
    let delays = backon::ExponentialBuilder::default()
        .with_min_delay(BACKOFF_BASE)
        .with_max_delay(BACKOFF_MAX)
        .with_factor(2.0)
        .without_max_times()
        .build();
    let nth = attempts.saturating_sub(1).min(32) as usize;
    delays.into_iter().nth(nth).unwrap_or(BACKOFF_MAX)
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::Caches;
    use crate::fixtures::{self, Call};
    use kubesteer_api::Memcached;
    use serde_json::json;

    #[tokio::test]
    async fn each_normal_event_stands_alone_with_its_own_note() {
        let mc: Memcached = serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1alpha1", "kind": "Memcached",
            "metadata": {"name": "cache", "namespace": "team", "uid": "mc-uid"}, "spec": {},
        }))
        .unwrap();
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::event("team")
                .body(|b| assert_eq!(b["note"], "Created Deployment cache, Service cache"))
                .respond_with_body(),
            Call::event("team")
                .body(|b| assert_eq!(b["note"], "Created Service cache"))
                .respond_with_body(),
        ]);
        for note in [
            "Created Deployment cache, Service cache",
            "Created Service cache",
        ] {
            ctx.publish(&mc, EventType::Normal, "Created", note.into())
                .await;
        }
        scenario.finish(ctx).await;
    }

    fn cache_named(name: &str) -> Memcached {
        serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1alpha1", "kind": "Memcached",
            "metadata": {"name": name, "namespace": "team", "uid": "mc-uid"}, "spec": {},
        }))
        .unwrap()
    }

    fn failed() -> Error {
        Error::MissingField {
            kind: "Memcached",
            name: "cache".into(),
            what: "metadata.namespace",
        }
    }

    #[tokio::test]
    async fn a_deleted_objects_backoff_and_held_status_write_are_forgotten() {
        let (ctx, _verifier) = fixtures::context();
        let (cache, other) = (cache_named("cache"), cache_named("other"));
        for mc in [&cache, &other] {
            ctx.error_policy("Memcached", mc, &failed());
            ctx.status_written("Memcached", mc, 1_u8);
            assert!(ctx
                .hold_status("Memcached", mc, Duration::from_secs(30))
                .is_some());
        }
        assert_eq!(ctx.tracked(), (2, 2, 2));
        ctx.forget("Memcached", &cache);
        assert_eq!(
            ctx.tracked(),
            (1, 1, 1),
            "only the deleted object's entries go"
        );
        // Its backoff starts over, the other's goes on.
        let action = ctx.error_policy("Memcached", &cache, &failed());
        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
        let action = ctx.error_policy("Memcached", &other, &failed());
        assert_eq!(action, Action::requeue(Duration::from_secs(2)));
    }

    #[tokio::test]
    async fn entries_of_objects_unseen_for_ten_minutes_are_swept_once_the_map_doubles() {
        let clock = fixtures::FixedClock::usual();
        let (ctx, _verifier) = fixtures::context_on(clock.clone(), Caches::empty());
        // Deleted while no watch saw it: nothing calls `forget` for these.
        for i in 0..62 {
            ctx.error_policy("Memcached", &cache_named(&format!("gone-{i}")), &failed());
        }
        *clock.0.lock().unwrap() += chrono::TimeDelta::minutes(9);
        ctx.error_policy("Memcached", &cache_named("recent"), &failed());
        assert_eq!(ctx.tracked().0, 63, "below the sweep's threshold of 64");
        *clock.0.lock().unwrap() += chrono::TimeDelta::minutes(2);
        ctx.error_policy("Memcached", &cache_named("new"), &failed());
        assert_eq!(
            ctx.tracked().0,
            2,
            "the 62 untouched for 11 minutes are gone, the recent one stays"
        );
    }

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(100), Duration::from_secs(300));
    }
}
