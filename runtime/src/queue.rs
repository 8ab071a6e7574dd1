//! The controllers' work queue, in place of kube-runtime's `Controller`.
//!
//! A `Controller` reconciles what it finds in a reflector store of whole `Resource`s, keyed by
//! `ObjectRef`s: at least 450 bytes and a 100-byte key for each Memcached before its JSON, and
//! 96 bytes more for each object it holds to requeue. Here the objects stay packed in the
//! controller's own store, and the queue holds an [`ObjectKey`] (32 bytes) per object waiting.
//!
//! It behaves as a `Controller` does: requests for one object are merged (the earliest wins),
//! each waits `debounce` for more, though never longer than `debounce_max` after the first of
//! them (kube-runtime's debounce has no bound: events closer than `debounce` put a reconcile off
//! for as long as they last, the whole rollout of a large Memcached); at most `concurrency`
//! reconciles run at once (0: no limit), never two of one object (a request for an object
//! being reconciled waits for it to finish); nothing runs until the store has listed once; a
//! reconcile's [`Action`] schedules the next; and on `stop` no new reconcile starts while the
//! running ones finish.
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::{poll_fn, Future};
use std::hash::{BuildHasher, RandomState};
use std::pin::pin;
use std::sync::Mutex;
use std::task::Poll;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::scheduler::{debounced_scheduler, ScheduleRequest};
use tokio::time::Instant;

use crate::lock;

/// What a reconcile asks for next: another reconcile after a while, or none until a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile again after `duration`, unless a change does it sooner.
    pub const fn requeue(duration: Duration) -> Self {
        Self {
            requeue_after: Some(duration),
        }
    }

    /// Reconcile again only when something changes.
    pub const fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// When the next reconcile is due, if one is.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// The furthest a requeue is put off: the scheduler's timer wheel takes no more than two years.
const MAX_REQUEUE: Duration = Duration::from_secs(180 * 24 * 3600);

/// The object a request is for: its namespace and name.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ObjectKey {
    pub namespace: Box<str>,
    pub name: Box<str>,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// How many reconciles run at once (0: no limit), how long a request waits for more, and how
/// long at most after the first of them (a `debounce_max` below `debounce` counts as `debounce`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
    pub concurrency: u16,
    pub debounce: Duration,
    pub debounce_max: Duration,
}

/// When each burst of requests began, by object, so that a burst's reconcile waits `debounce`
/// after its last request but no more than `debounce_max` after its first. The scheduler puts a
/// request off to its `run_at` plus `debounce`; so a request arrives with `run_at` now, or the
/// burst's deadline less `debounce` once that is earlier. Keyed by a hash of the object: 24 bytes
/// an entry, only while a request waits; two objects sharing one would only share a deadline.
struct Bursts {
    debounce: Duration,
    /// How long after a burst's first request its reconcile is due at the latest, less `debounce`.
    bound: Duration,
    first: Mutex<HashMap<u64, Instant>>,
    hasher: RandomState,
}

impl Bursts {
    fn new(settings: &Settings) -> Self {
        Self {
            debounce: settings.debounce,
            bound: settings.debounce_max.saturating_sub(settings.debounce),
            first: Mutex::default(),
            hasher: RandomState::new(),
        }
    }

    /// The `run_at` of a request for `key` made `now`.
    fn run_at(&self, key: &ObjectKey, now: Instant) -> Instant {
        if self.debounce.is_zero() {
            return now;
        }
        let hash = self.hasher.hash_one(key);
        let first = *lock(&self.first).entry(hash).or_insert(now);
        now.min(first + self.bound)
    }

    /// `key`'s reconcile starts: its burst is over.
    fn done(&self, key: &ObjectKey) {
        if self.debounce.is_zero() {
            return;
        }
        let mut first = lock(&self.first);
        first.remove(&self.hasher.hash_one(key));
        // A relist's burst (every object at once) leaves no table of its size behind.
        if first.is_empty() && first.capacity() > 1024 {
            first.shrink_to_fit();
        }
    }
}

/// Reconciles the objects `triggers` name with `reconcile` until `stop`, then waits for the
/// running reconciles. Nothing runs before `ready` (the store's first list), though `triggers`
/// is read, and what it asks for is kept, meanwhile.
pub async fn run<T, R, F>(
    triggers: T,
    settings: Settings,
    ready: impl Future<Output = ()>,
    stop: impl Future<Output = ()>,
    mut reconcile: R,
) where
    T: Stream<Item = ObjectKey>,
    R: FnMut(ObjectKey) -> F,
    F: Future<Output = Action>,
{
    let (requeue, requeued) = futures::channel::mpsc::unbounded();
    let bursts = Bursts::new(&settings);
    let now = |key| ScheduleRequest {
        run_at: bursts.run_at(&key, Instant::now()),
        message: key,
    };
    let requests = futures::stream::select(triggers.map(now), requeued).take_until(stop);
    let mut scheduler = pin!(debounced_scheduler(requests, settings.debounce));
    let mut ready = pin!(ready.fuse());
    let mut is_ready = false;
    let mut running = FuturesUnordered::new();
    let mut busy: HashSet<ObjectKey> = HashSet::new();
    let limit = match settings.concurrency {
        0 => usize::MAX,
        n => usize::from(n),
    };
    poll_fn(|cx| loop {
        while let Poll::Ready(Some((key, action))) = running.poll_next_unpin(cx) {
            busy.remove(&key);
            if let Some(after) = Action::requeue_after(&action) {
                let run_at = Instant::now() + after.min(MAX_REQUEUE);
                // Fails only once the queue has stopped, when nothing is scheduled any more.
                let _ = requeue.unbounded_send(ScheduleRequest {
                    message: key,
                    run_at,
                });
            }
        }
        if !is_ready {
            is_ready = ready.as_mut().poll(cx).is_ready();
        }
        // Full, or not ready: requests are still taken in, and those due kept for later.
        let next = match is_ready && running.len() < limit {
            true => scheduler
                .as_mut()
                .hold_unless(|key| !busy.contains(key))
                .poll_next_unpin(cx),
            false => scheduler.as_mut().hold().poll_next_unpin(cx),
        };
        match next {
            Poll::Ready(Some(key)) => {
                bursts.done(&key);
                busy.insert(key.clone());
                let work = reconcile(key.clone());
                running.push(work.map(move |action| (key, action)));
            }
            Poll::Ready(None) if running.is_empty() => return Poll::Ready(()),
            Poll::Ready(None) | Poll::Pending => return Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::sync::{mpsc, oneshot, watch};

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    /// What the reconciles saw: each start, with the time since the test began.
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<(String, Duration)>>>);

    impl Log {
        fn push(&self, what: String, since: Instant) {
            self.0.lock().unwrap().push((what, since.elapsed()));
        }
        fn names(&self) -> Vec<String> {
            self.0
                .lock()
                .unwrap()
                .iter()
                .map(|(n, _)| n.clone())
                .collect()
        }
    }

    struct Harness {
        triggers: mpsc::UnboundedSender<ObjectKey>,
        ready: Option<oneshot::Sender<()>>,
        stop: watch::Sender<bool>,
        queue: tokio::task::JoinHandle<()>,
    }

    /// A queue whose reconciles log their start and take `work`, then return `action`.
    fn start(settings: Settings, log: Log, work: Duration, action: Action) -> Harness {
        let (triggers, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = oneshot::channel::<()>();
        let (stop, stop_rx) = watch::channel(false);
        let began = Instant::now();
        let queue = tokio::spawn(run(
            tokio_stream_of(rx),
            settings,
            async move {
                let _ = ready_rx.await;
            },
            crate::signal::stopped(stop_rx),
            move |key: ObjectKey| {
                let log = log.clone();
                async move {
                    log.push(format!("start {}", key.name), began);
                    tokio::time::sleep(work).await;
                    log.push(format!("end {}", key.name), began);
                    action
                }
            },
        ));
        Harness {
            triggers,
            ready: Some(ready_tx),
            stop,
            queue,
        }
    }

    impl Harness {
        fn send(&self, names: &[&str]) {
            for name in names {
                self.triggers.send(key(name)).unwrap();
            }
        }

        /// Stops the queue and waits until it has.
        async fn stop(self) {
            self.stop.send_replace(true);
            self.queue.await.unwrap();
        }
    }

    /// A queue as [`start`] makes it, its store ready at once.
    fn ready(settings: Settings, work: Duration, action: Action) -> (Harness, Log) {
        let log = Log::default();
        let mut h = start(settings, log.clone(), work, action);
        h.ready.take().unwrap().send(()).unwrap();
        (h, log)
    }

    /// Reconciles that take 10 s and ask for nothing more.
    const TEN_SECONDS: Duration = Duration::from_secs(10);

    fn tokio_stream_of(
        mut rx: mpsc::UnboundedReceiver<ObjectKey>,
    ) -> impl Stream<Item = ObjectKey> {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    /// Lets the queue and its reconciles run until nothing is left to do before `by`.
    async fn settle(by: Duration) {
        tokio::time::sleep(by).await;
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_ready_then_merges_requests_for_one_object() {
        let log = Log::default();
        let settings = Settings {
            concurrency: 2,
            debounce: Duration::from_millis(100),
            ..Settings::default()
        };
        let mut h = start(
            settings,
            log.clone(),
            Duration::ZERO,
            Action::await_change(),
        );
        h.send(&["a", "a", "a"]);
        settle(Duration::from_secs(1)).await;
        assert!(log.names().is_empty(), "ran before the store was ready");
        h.ready.take().unwrap().send(()).unwrap();
        settle(Duration::from_secs(1)).await;
        assert_eq!(log.names(), ["start a", "end a"]);
        h.stop().await;
    }

    /// The start times of the reconciles, in seconds since the test began.
    fn starts(log: &Log) -> Vec<u64> {
        let log = log.0.lock().unwrap();
        let starts = log.iter().filter(|(n, _)| n.starts_with("start"));
        starts.map(|(_, t)| t.as_secs()).collect()
    }

    /// The start times of `name`'s reconciles, in milliseconds since the test began.
    fn starts_of(log: &Log, name: &str) -> Vec<u128> {
        let log = log.0.lock().unwrap();
        let starts = log.iter().filter(|(n, _)| *n == format!("start {name}"));
        starts.map(|(_, t)| t.as_millis()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_waits_for_quiet_but_never_past_debounce_max_after_its_first_request() {
        let settings = Settings {
            concurrency: 0,
            debounce: Duration::from_millis(300),
            debounce_max: Duration::from_secs(1),
        };
        let (h, log) = ready(settings, Duration::ZERO, Action::await_change());
        // "a" changes every 120 ms for 2.4 s, closer than the debounce all along: unbounded, it
        // would wait until 2.7 s. "b" changes twice, 240 ms apart, then is quiet.
        for i in 0..=20 {
            h.send(&["a"]);
            if i == 0 || i == 2 {
                h.send(&["b"]);
            }
            settle(Duration::from_millis(120)).await;
        }
        settle(Duration::from_secs(5)).await;
        // Bursts begin at 0, 1.08 and 2.16 s; the third ends at 2.4 s, before its bound.
        assert_eq!(starts_of(&log, "a"), [1000, 2080, 2700]);
        assert_eq!(starts_of(&log, "b"), [540]);
        h.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn never_runs_one_object_twice_at_once() {
        let (h, log) = ready(Settings::default(), TEN_SECONDS, Action::await_change());
        h.send(&["a"]);
        settle(Duration::from_secs(1)).await;
        // A change to "a" while it is reconciled waits for that reconcile to end; "b" does not.
        h.send(&["a", "b"]);
        settle(Duration::from_secs(60)).await;
        assert_eq!(
            log.names(),
            ["start a", "start b", "end a", "start a", "end b", "end a"]
        );
        assert_eq!(starts(&log), [0, 1, 10]);
        h.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn keeps_to_the_concurrency_limit() {
        let settings = Settings {
            concurrency: 2,
            debounce: Duration::ZERO,
            ..Settings::default()
        };
        let (h, log) = ready(settings, TEN_SECONDS, Action::await_change());
        h.send(&["a", "b", "c"]);
        settle(Duration::from_secs(60)).await;
        assert_eq!(starts(&log), [0, 0, 10]);
        h.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn requeues_after_what_the_reconcile_asks() {
        let action = Action::requeue(Duration::from_secs(30));
        let (h, log) = ready(Settings::default(), Duration::ZERO, action);
        h.send(&["a"]);
        settle(Duration::from_secs(100)).await;
        assert_eq!(starts(&log), [0, 30, 60, 90]);
        h.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn stop_lets_running_reconciles_finish_and_starts_none() {
        let settings = Settings {
            concurrency: 1,
            debounce: Duration::ZERO,
            ..Settings::default()
        };
        let (h, log) = ready(settings, TEN_SECONDS, Action::await_change());
        h.send(&["a", "b"]);
        settle(Duration::from_secs(1)).await;
        h.stop().await;
        // Which of the two came first is the scheduler's choice; the other never started.
        let names = log.names();
        let first = names
            .first()
            .and_then(|n| n.strip_prefix("start "))
            .unwrap();
        assert_eq!(names, [format!("start {first}"), format!("end {first}")]);
    }
}
