//! The children caches' store: each packed object once, found by its namespace and name.
//!
//! kube-runtime's reflector store keys every object by an `ObjectRef` (96 bytes, with copies of
//! the name and namespace) in a table of `(ObjectRef, Arc)` slots, up to half empty after it
//! grows: about 250 bytes an object before the object itself. Here the table holds only the
//! `Arc` of each packed object, hashed by the name and namespace that object already carries:
//! 8 bytes a slot. The controller keeps every Deployment and Service of the apps it owns, tens of
//! thousands at scale, so that is most of a cache's overhead gone. Reads and writes behave as
//! kube-runtime's store does: a relist fills a buffer that replaces the whole store when it is
//! done, and the store counts as ready after its first full list.
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, RwLock};

use hashbrown::HashTable;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use kube::Resource;
use tokio::sync::watch;

use super::Packed;
use kubesteer_runtime::queue::ObjectKey;

/// The objects of one kind, packed; cheap to clone (one shared table).
pub struct PackedStore<K> {
    shared: Arc<Shared<K>>,
    ready: watch::Receiver<bool>,
}

struct Shared<K> {
    table: RwLock<HashTable<Arc<Packed<K>>>>,
    hasher: RandomState,
}

/// The writing end of a [`PackedStore`], for the watch that fills it.
pub struct PackedWriter<K> {
    shared: Arc<Shared<K>>,
    /// The objects of a relist in progress; they replace the table when it is done.
    buffer: Option<HashTable<Arc<Packed<K>>>>,
    ready: watch::Sender<bool>,
}

/// A store and its writer.
pub fn packed_store<K>() -> (PackedStore<K>, PackedWriter<K>) {
    let shared = Arc::new(Shared {
        table: RwLock::new(HashTable::new()),
        hasher: RandomState::new(),
    });
    let (ready_tx, ready) = watch::channel(false);
    let store = PackedStore {
        shared: shared.clone(),
        ready,
    };
    let writer = PackedWriter {
        shared,
        buffer: None,
        ready: ready_tx,
    };
    (store, writer)
}

impl<K> Clone for PackedStore<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<K> Shared<K> {
    fn hash(&self, namespace: Option<&str>, name: &str) -> u64 {
        self.hasher.hash_one((namespace, name))
    }

    fn hash_of(&self, packed: &Packed<K>) -> u64 {
        self.hash(packed.namespace.as_deref(), &packed.name)
    }

    fn is(packed: &Packed<K>, namespace: Option<&str>, name: &str) -> bool {
        packed.name == name && packed.namespace.as_deref() == namespace
    }

    /// Puts `packed` into `table`, in place of the one of the same name.
    fn insert(&self, table: &mut HashTable<Arc<Packed<K>>>, packed: Arc<Packed<K>>) {
        let hash = self.hash_of(&packed);
        let (namespace, name) = (packed.namespace.as_deref(), packed.name.as_str());
        match table.find_mut(hash, |p| Self::is(p, namespace, name)) {
            Some(slot) => *slot = packed,
            None => {
                table.insert_unique(hash, packed, |p| self.hash_of(p));
            }
        }
    }
}

impl<K: Resource<DynamicType = ()>> PackedStore<K> {
    /// The cached object `key` names, if any.
    pub fn get(&self, key: &ObjectRef<Packed<K>>) -> Option<Arc<Packed<K>>> {
        self.find(key.namespace.as_deref(), &key.name)
    }

    /// The cached object `key` names, if any.
    pub fn get_key(&self, key: &ObjectKey) -> Option<Arc<Packed<K>>> {
        self.find(Some(&key.namespace), &key.name)
    }

    fn find(&self, namespace: Option<&str>, name: &str) -> Option<Arc<Packed<K>>> {
        let hash = self.shared.hash(namespace, name);
        read(&self.shared.table)
            .find(hash, |p| Shared::is(p, namespace, name))
            .cloned()
    }

    /// Every cached object.
    pub fn state(&self) -> Vec<Arc<Packed<K>>> {
        read(&self.shared.table).iter().cloned().collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        read(&self.shared.table).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Returns once the store's watch has listed every object once; an error if its writer is
    /// gone first (nothing fills it).
    pub async fn wait_until_ready(&self) -> Result<(), watch::error::RecvError> {
        self.ready.clone().wait_for(|ready| *ready).await.map(drop)
    }
}

impl<K: Resource<DynamicType = ()>> PackedWriter<K> {
    /// A reader of this writer's store.
    pub fn as_reader(&self) -> PackedStore<K> {
        PackedStore {
            shared: self.shared.clone(),
            ready: self.ready.subscribe(),
        }
    }

    /// Applies one watch event, as kube-runtime's writer does.
    pub fn apply_watcher_event(&mut self, event: &Event<Packed<K>>) {
        let shared = &self.shared;
        match event {
            Event::Apply(packed) => {
                shared.insert(&mut write(&shared.table), Arc::new(packed.clone()))
            }
            Event::Delete(packed) => {
                let hash = shared.hash_of(packed);
                let namespace = packed.namespace.as_deref();
                if let Ok(entry) = write(&shared.table)
                    .find_entry(hash, |p| Shared::is(p, namespace, &packed.name))
                {
                    entry.remove();
                }
            }
            Event::Init => self.buffer = Some(HashTable::new()),
            Event::InitApply(packed) => {
                let buffer = self.buffer.get_or_insert_with(HashTable::new);
                shared.insert(buffer, Arc::new(packed.clone()));
            }
            Event::InitDone => {
                let mut buffer = self.buffer.take().unwrap_or_default();
                buffer.shrink_to_fit(|p| shared.hash_of(p));
                *write(&shared.table) = buffer;
                self.ready.send_replace(true);
            }
        }
    }
}

pub(super) fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use kube::api::ObjectMeta;

    fn service(ns: &str, name: &str, port: i32) -> Packed<Service> {
        let svc = Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                    port,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        Packed::pack(&svc).unwrap()
    }

    fn port(store: &PackedStore<Service>, ns: &str, name: &str) -> Option<i32> {
        let packed = store.get(&Packed::key(name, ns))?;
        let svc = packed.object().unwrap();
        Some(svc.spec?.ports?[0].port)
    }

    #[tokio::test]
    async fn applies_replace_deletes_remove_and_a_relist_replaces_everything() {
        let (store, mut writer) = packed_store::<Service>();
        writer.apply_watcher_event(&Event::Apply(service("a", "web", 80)));
        writer.apply_watcher_event(&Event::Apply(service("b", "web", 81)));
        writer.apply_watcher_event(&Event::Apply(service("a", "web", 8080)));
        assert_eq!(store.len(), 2);
        assert_eq!(port(&store, "a", "web"), Some(8080));
        assert_eq!(port(&store, "b", "web"), Some(81));
        assert_eq!(port(&store, "c", "web"), None);
        writer.apply_watcher_event(&Event::Delete(service("b", "web", 81)));
        assert_eq!(port(&store, "b", "web"), None);
        assert_eq!(store.len(), 1);

        // Not ready before the first full list; during a relist the old objects stay readable.
        let ready = tokio::time::timeout(Duration::from_millis(10), store.wait_until_ready());
        assert!(ready.await.is_err(), "ready before any list");
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(service("c", "db", 5432)));
        assert_eq!(port(&store, "a", "web"), Some(8080));
        assert_eq!(port(&store, "c", "db"), None);
        writer.apply_watcher_event(&Event::InitDone);
        assert_eq!(port(&store, "a", "web"), None, "gone in the relist");
        assert_eq!(port(&store, "c", "db"), Some(5432));
        assert_eq!(store.state().len(), 1);
        store.wait_until_ready().await.unwrap();
        writer.as_reader().wait_until_ready().await.unwrap();
    }

    #[tokio::test]
    async fn a_store_whose_writer_is_gone_is_never_ready() {
        let (store, writer) = packed_store::<Service>();
        drop(writer);
        assert!(store.wait_until_ready().await.is_err());
    }

    use std::time::Duration;
}
