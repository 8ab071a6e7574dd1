//! Children this controller created that their watch has not brought back yet.
//!
//! A reconcile can run before the watch event of a child it created reaches the cache: the
//! owner's next change (the other child's event, its own status write) comes first, or the
//! apiserver is slow to send it. Without a note of the create, that reconcile finds no child,
//! creates it again (409 AlreadyExists) and reads it: two requests for nothing. controller-
//! runtime's ReplicaSet controller keeps "expectations" for the same reason. Here the create's
//! answer is kept until the watch brings any event about that child (added, changed or deleted,
//! so that a child deleted right after its create is not believed to live on), or for
//! [`UNSEEN_FOR`], after which a reconcile goes back to creating and reading.
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::fingerprint_u64;
use crate::context::{lock, Swept};

/// How long a create's answer stands in for its watch event. A watch brings an event within a
/// second or so; one that has not in this long is down or relisting, and the cache is not to
/// be second-guessed for longer than that.
pub const UNSEEN_FOR: Duration = Duration::from_secs(30);

/// The children of one app created and not seen by their watches yet, by kind, namespace and name.
#[derive(Default)]
pub struct Unseen {
    entries: Mutex<Swept<u64, Entry>>,
    /// How many entries there are, read without the lock by the watches (nearly always 0 when
    /// nothing is being created).
    len: AtomicUsize,
}

struct Entry {
    at: Instant,
    object: Arc<dyn Any + Send + Sync>,
}

impl Unseen {
    fn key(kind: &str, namespace: &str, name: &str) -> u64 {
        fingerprint_u64(format!("{kind}/{namespace}/{name}").as_bytes())
    }

    fn key_of<K: Resource<DynamicType = ()>>(obj: &K) -> u64 {
        Self::key(
            &K::kind(&()),
            obj.meta().namespace.as_deref().unwrap_or_default(),
            obj.meta().name.as_deref().unwrap_or_default(),
        )
    }

    /// Notes `created`, as the create's answer gave it, until its watch brings it. Entries
    /// older than [`UNSEEN_FOR`] are swept whenever the map has doubled.
    pub fn created<K>(&self, created: Arc<K>)
    where
        K: Resource<DynamicType = ()> + Send + Sync + 'static,
    {
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        let key = Self::key_of(created.as_ref());
        let object: Arc<dyn Any + Send + Sync> = created;
        entries.insert(key, Entry { at: now, object }, |_, e| {
            now.duration_since(e.at) < UNSEEN_FOR
        });
        self.len.store(entries.len(), Ordering::Relaxed);
    }

    /// The child `desired` names, created by this controller less than [`UNSEEN_FOR`] ago and
    /// not brought by its watch since.
    pub fn get<K>(&self, desired: &K) -> Option<Arc<K>>
    where
        K: Resource<DynamicType = ()> + Send + Sync + 'static,
    {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let entries = lock(&self.entries);
        let entry = entries.get(&Self::key_of(desired))?;
        if entry.at.elapsed() >= UNSEEN_FOR {
            return None;
        }
        let object = entry.object.clone().downcast::<K>().ok()?;
        // A fingerprint shared by two children would only make one miss its note.
        let same =
            object.name_any() == desired.name_any() && object.namespace() == desired.namespace();
        same.then_some(object)
    }

    /// The watch brought an event about `child`: the cache knows of it now, whatever became of it.
    pub fn seen<K: Resource<DynamicType = ()>>(&self, child: &K) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut entries = lock(&self.entries);
        entries.remove(&Self::key_of(child));
        self.len.store(entries.len(), Ordering::Relaxed);
    }

    /// How many children are noted.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::MIN_SWEEP;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    use kube::api::ObjectMeta;

    fn named<K: Resource<DynamicType = ()> + Default>(ns: &str, name: &str) -> K {
        let mut k = K::default();
        *k.meta_mut() = ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            uid: Some(format!("{name}-uid")),
            ..ObjectMeta::default()
        };
        k
    }

    #[tokio::test(start_paused = true)]
    async fn a_created_child_stands_until_its_watch_brings_it_or_for_a_while() {
        let unseen = Unseen::default();
        let d: Deployment = named("team", "cache");
        unseen.created(Arc::new(d.clone()));
        let found = unseen.get(&named::<Deployment>("team", "cache"));
        assert_eq!(found.as_deref(), Some(&d));
        // Another kind, namespace or name is another child.
        assert!(unseen.get(&named::<Service>("team", "cache")).is_none());
        assert!(unseen.get(&named::<Deployment>("other", "cache")).is_none());
        assert!(unseen.get(&named::<Deployment>("team", "web")).is_none());

        unseen.seen(&d);
        assert!(unseen.get(&d).is_none(), "the watch brought it");
        assert!(unseen.is_empty());

        unseen.created(Arc::new(d.clone()));
        tokio::time::advance(UNSEEN_FOR - Duration::from_millis(1)).await;
        assert!(unseen.get(&d).is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            unseen.get(&d).is_none(),
            "a note stands no longer than UNSEEN_FOR"
        );
        // Old notes are swept when the map has doubled, not at every create.
        for i in 0..MIN_SWEEP - 2 {
            unseen.created(Arc::new(named::<Service>("team", &format!("s{i}"))));
        }
        assert_eq!(unseen.len(), MIN_SWEEP - 1);
        unseen.created(Arc::new(named::<Service>("team", "last")));
        assert_eq!(
            unseen.len(),
            MIN_SWEEP - 1,
            "the expired Deployment was swept"
        );
    }
}
