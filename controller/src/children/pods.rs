//! The pods cache: the names of each app instance's live pods, which its status names.
//!
//! kube-runtime's reflector store would keep every pod's metadata under an `ObjectRef`, and a
//! reconcile could only find its instance's pods by scanning all of them: one pass over every
//! pod of the app for each reconcile, so a relist of n owners with a pod each cost n² label
//! lookups (a tenth of the controller's CPU while 1,000 Memcacheds converged, in a profile).
//! Here the watch's events keep an index instead: by namespace and instance, the sorted names
//! of the live pods, and by pod, the instance it is listed under. A reconcile reads one entry.
//! Reads and writes behave as kube-runtime's store does: a relist fills a buffer that replaces
//! the whole index when it is done, and the cache counts as ready after its first full list.
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;
use kubesteer_api::keys::label;
use tokio::sync::watch;

use super::store::{read, write};

/// The live pods of one app's instances; cheap to clone (one shared index).
#[derive(Clone)]
pub struct PodNames {
    index: Arc<RwLock<Index>>,
    ready: watch::Receiver<bool>,
}

/// The writing end of a [`PodNames`], for the watch of the app's pods.
pub struct PodNamesWriter {
    app: &'static str,
    index: Arc<RwLock<Index>>,
    /// The index of a relist in progress; it replaces the live one when it is done.
    buffer: Option<Index>,
    ready: watch::Sender<bool>,
}

/// A pods cache of `app` and its writer.
pub fn pod_names_cache(app: &'static str) -> (PodNames, PodNamesWriter) {
    let index = Arc::new(RwLock::new(Index::default()));
    let (ready_tx, ready) = watch::channel(false);
    let reader = PodNames {
        index: index.clone(),
        ready,
    };
    let writer = PodNamesWriter {
        app,
        index,
        buffer: None,
        ready: ready_tx,
    };
    (reader, writer)
}

#[derive(Default)]
struct Index {
    /// The names of the live pods, by `namespace/instance`, sorted.
    names: HashMap<Box<str>, BTreeSet<Box<str>>>,
    /// The `namespace/instance` each listed pod is under, by `namespace/name`.
    listed_under: HashMap<Box<str>, Box<str>>,
}

/// A namespaced key; a namespace never holds a `/`, so it is one key of one pair.
fn key(namespace: &str, name: &str) -> Box<str> {
    format!("{namespace}/{name}").into_boxed_str()
}

impl Index {
    /// Lists `pod` under its instance when it is a live pod of `app`, in place of where it was.
    fn apply(&mut self, app: &str, pod: &PartialObjectMeta<Pod>) {
        let Some(pod_key) = pod_key(pod) else { return };
        self.remove(&pod_key);
        let meta = &pod.metadata;
        let labels = meta.labels.as_ref();
        let label_of = |l: &str| labels.and_then(|ls| ls.get(l)).map(String::as_str);
        let (Some(ns), Some(name), Some(instance)) = (
            meta.namespace.as_deref(),
            meta.name.as_deref(),
            label_of(label::INSTANCE),
        ) else {
            return;
        };
        if label_of(label::NAME) != Some(app) || meta.deletion_timestamp.is_some() {
            return;
        }
        let under = key(ns, instance);
        self.names
            .entry(under.clone())
            .or_default()
            .insert(name.into());
        self.listed_under.insert(pod_key, under);
    }

    /// Takes the pod `namespace/name` off the list it is on, if any.
    fn remove(&mut self, pod_key: &str) {
        let Some(under) = self.listed_under.remove(pod_key) else {
            return;
        };
        let name = pod_key.split_once('/').map_or(pod_key, |(_, n)| n);
        if let Some(names) = self.names.get_mut(&under) {
            names.remove(name);
            if names.is_empty() {
                self.names.remove(&under);
            }
        }
    }
}

fn pod_key(pod: &PartialObjectMeta<Pod>) -> Option<Box<str>> {
    let meta = &pod.metadata;
    Some(key(meta.namespace.as_deref()?, meta.name.as_deref()?))
}

impl PodNames {
    /// Sorted names of the live (not terminating) pods of instance `instance` in `ns`.
    pub fn of(&self, ns: &str, instance: &str) -> Vec<String> {
        read(&self.index)
            .names
            .get(&*key(ns, instance))
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }

    /// Returns once the cache's watch has listed every pod once; an error if its writer is
    /// gone first (nothing fills it).
    pub async fn wait_until_ready(&self) -> Result<(), watch::error::RecvError> {
        self.ready.clone().wait_for(|ready| *ready).await.map(drop)
    }
}

impl PodNamesWriter {
    /// Applies one watch event, as kube-runtime's writer does.
    pub fn apply_watcher_event(&mut self, event: &Event<PartialObjectMeta<Pod>>) {
        match event {
            Event::Apply(pod) => write(&self.index).apply(self.app, pod),
            Event::Delete(pod) => {
                if let Some(pod_key) = pod_key(pod) {
                    write(&self.index).remove(&pod_key);
                }
            }
            Event::Init => self.buffer = Some(Index::default()),
            Event::InitApply(pod) => self
                .buffer
                .get_or_insert_with(Index::default)
                .apply(self.app, pod),
            Event::InitDone => {
                let mut buffer = self.buffer.take().unwrap_or_default();
                buffer.names.shrink_to_fit();
                buffer.listed_under.shrink_to_fit();
                *write(&self.index) = buffer;
                self.ready.send_replace(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, app: &str, instance: &str) -> PartialObjectMeta<Pod> {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns,
                "labels": {label::NAME: app, label::INSTANCE: instance}}
        }))
        .unwrap()
    }

    /// A pod of the Memcached `team/cache`.
    fn cache_pod(name: &str) -> PartialObjectMeta<Pod> {
        pod("team", name, "memcached", "cache")
    }

    fn deleting(mut p: PartialObjectMeta<Pod>) -> PartialObjectMeta<Pod> {
        p.metadata.deletion_timestamp = Some(crate::reconcilers::time(chrono::Utc::now()));
        p
    }

    #[test]
    fn pods_are_named_by_instance_and_namespace_and_only_the_apps_live_ones() {
        let (names, mut w) = pod_names_cache("memcached");
        for p in [
            cache_pod("cache-b"),
            cache_pod("cache-a"),
            deleting(cache_pod("cache-old")),
            pod("team", "other-x", "memcached", "other"),
            pod("elsewhere", "cache-z", "memcached", "cache"),
            pod("team", "cache-w", "welcome", "cache"),
        ] {
            w.apply_watcher_event(&Event::Apply(p));
        }
        assert_eq!(names.of("team", "cache"), ["cache-a", "cache-b"]);
        assert_eq!(names.of("team", "other"), ["other-x"]);
        assert_eq!(names.of("elsewhere", "cache"), ["cache-z"]);
        assert!(names.of("team", "nothing").is_empty());
    }

    #[test]
    fn a_pod_that_terminates_is_relabelled_or_goes_leaves_its_list() {
        let (names, mut w) = pod_names_cache("memcached");
        for n in ["cache-a", "cache-b", "cache-c"] {
            w.apply_watcher_event(&Event::Apply(cache_pod(n)));
        }
        w.apply_watcher_event(&Event::Apply(deleting(cache_pod("cache-a"))));
        // Taken out of the instance by its label (a pod kept for debugging): listed elsewhere.
        w.apply_watcher_event(&Event::Apply(pod("team", "cache-b", "memcached", "debug")));
        assert_eq!(names.of("team", "cache"), ["cache-c"]);
        assert_eq!(names.of("team", "debug"), ["cache-b"]);
        w.apply_watcher_event(&Event::Delete(cache_pod("cache-c")));
        w.apply_watcher_event(&Event::Delete(pod("team", "cache-b", "memcached", "debug")));
        assert!(names.of("team", "cache").is_empty() && names.of("team", "debug").is_empty());
        let index = read(&names.index);
        assert!(index.names.is_empty() && index.listed_under.is_empty());
    }

    #[tokio::test]
    async fn a_relist_replaces_the_index_when_it_is_done_and_the_first_makes_it_ready() {
        let (names, mut w) = pod_names_cache("memcached");
        let mut ready = Box::pin(names.wait_until_ready());
        w.apply_watcher_event(&Event::Init);
        w.apply_watcher_event(&Event::InitApply(cache_pod("cache-a")));
        assert!(
            names.of("team", "cache").is_empty(),
            "not before the list is done"
        );
        assert!(futures::poll!(&mut ready).is_pending());
        w.apply_watcher_event(&Event::InitDone);
        assert!(ready.await.is_ok());
        assert_eq!(names.of("team", "cache"), ["cache-a"]);
        // A relist that no longer finds cache-a drops it; cache-b is new.
        w.apply_watcher_event(&Event::Init);
        w.apply_watcher_event(&Event::InitApply(cache_pod("cache-b")));
        assert_eq!(names.of("team", "cache"), ["cache-a"]);
        w.apply_watcher_event(&Event::InitDone);
        assert_eq!(names.of("team", "cache"), ["cache-b"]);
    }
}
