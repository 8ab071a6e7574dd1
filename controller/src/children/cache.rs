//! Caching: what the watches keep of the children (packed, without managed fields or pod
//! template, which stays as a fingerprint), and the per-kind stores a reconcile reads.
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::reflector::{Lookup, ObjectRef};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::store::{packed_store, PackedStore, PackedWriter};
use super::*;
use crate::context::{lock, Swept};
use crate::{Error, Result};

/// A cached object kept as its compact JSON, without what no reconcile reads: its managed fields
/// and its pod template (most of a Deployment), of which only a fingerprint stays, for drift.
/// The JSON is compressed (LZ4) against the objects of its kind seen before (`Dictionaries`):
/// children of one kind come from one builder and differ in little but names, uids and times, so
/// a Deployment takes a few hundred bytes where its JSON takes 1.4 KiB and the parsed object 10
/// or more, which matters with tens of thousands of children. Reconciles unpack the one they
/// read.
pub struct Packed<K> {
    pub(super) name: String,
    pub(super) namespace: Option<String>,
    /// The JSON, compressed against one of the kind's [`Dictionaries`].
    json: Box<[u8]>,
    /// The fingerprint of `spec.template` as the apiserver holds it, if the object has one.
    template: Option<u64>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Packed<K> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            json: self.json.clone(),
            template: self.template,
            kind: PhantomData,
        }
    }
}

/// LZ4 refers back at most this far, so a dictionary is at most this long.
const WINDOW: usize = 64 * 1024;
/// How many dictionaries a kind may have.
const MAX_DICTIONARIES: usize = 8;

/// The dictionaries one kind's objects are compressed against. The first is the JSON of the
/// first object packed. Objects change as they live: a child is first seen without a status and
/// then with one, an owner gains its conditions, and their words were not in the first. So when
/// an object packs to half again as much as the kind's objects do (a running average), its JSON
/// is appended to the newest dictionary to make the next one: each holds what the one before
/// held, and the objects packed after it find those words too. Objects packed before keep
/// theirs; the first byte of a packed object says which. None is ever dropped.
#[derive(Default)]
struct Dictionaries {
    all: Vec<Arc<[u8]>>,
    /// A running average of the packed sizes, of the objects that did not make a dictionary.
    typical: f64,
}

impl Dictionaries {
    /// The newest dictionary and its index, if there is one.
    fn newest(&self) -> Option<(u8, Arc<[u8]>)> {
        let index = self.all.len().checked_sub(1)?;
        Some((index as u8, self.all[index].clone()))
    }

    /// Makes `json` the first dictionary.
    fn first(&mut self, json: &[u8]) -> (u8, Arc<[u8]>) {
        let first: Arc<[u8]> = json[json.len().saturating_sub(WINDOW)..].into();
        self.all.push(first.clone());
        (0, first)
    }

    /// Notes that `json` packed to `len` bytes against dictionary `index`; returns the next
    /// dictionary (and its index) if `json` made one, to pack it against that instead.
    fn packed(&mut self, json: &[u8], index: u8, len: usize) -> Option<(u8, Arc<[u8]>)> {
        let newest = self.all.len().checked_sub(1)?;
        let (len, typical) = (len as f64, self.typical);
        let unlike = typical > 0.0 && len > typical * 1.5 && len > typical + 64.0;
        if unlike && usize::from(index) == newest && self.all.len() < MAX_DICTIONARIES {
            let mut next = self.all[newest].to_vec();
            next.extend_from_slice(json);
            let next: Arc<[u8]> = next[next.len().saturating_sub(WINDOW)..].into();
            self.all.push(next.clone());
            return Some((newest as u8 + 1, next));
        }
        self.typical = match typical > 0.0 {
            true => typical + (len - typical) / 64.0,
            false => len,
        };
        None
    }
}

/// Dictionaries by kind.
type Table = Mutex<HashMap<String, Dictionaries>>;

/// The dictionaries of every kind, for the life of the process, so every packed object can be
/// read.
fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

/// `json` of `kind` packed against its dictionaries in `table`: the index of the dictionary, then
/// the LZ4 block.
fn compress_in(table: &Table, kind: &str, json: &[u8]) -> Box<[u8]> {
    let pack = |index: u8, dictionary: &[u8]| {
        let mut out = vec![index];
        out.extend(lz4_flex::block::compress_prepend_size_with_dict(
            json, dictionary,
        ));
        out.into_boxed_slice()
    };
    let newest = {
        let mut table = lock(table);
        let dictionaries = table.entry(kind.into()).or_default();
        match dictionaries.newest() {
            Some(newest) => newest,
            // The first object of its kind is packed against itself, and says nothing of how
            // large the others pack.
            None => {
                let (index, dictionary) = dictionaries.first(json);
                return pack(index, &dictionary);
            }
        }
    };
    let (index, dictionary) = newest;
    let packed = pack(index, &dictionary);
    let next = lock(table)
        .get_mut(kind)
        .and_then(|d| d.packed(json, index, packed.len()));
    match next {
        Some((index, dictionary)) => pack(index, &dictionary),
        None => packed,
    }
}

/// What [`compress_in`] made of a JSON of `kind`, back.
fn decompress_in(table: &Table, kind: &str, packed: &[u8]) -> Result<Vec<u8>> {
    let unpack = || -> std::result::Result<Vec<u8>, String> {
        let (&index, block) = packed.split_first().ok_or("nothing packed")?;
        let dictionary = lock(table)
            .get(kind)
            .and_then(|d| d.all.get(usize::from(index)).cloned())
            .ok_or_else(|| format!("no dictionary {index}"))?;
        lz4_flex::block::decompress_size_prepended_with_dict(block, &dictionary)
            .map_err(|e| e.to_string())
    };
    unpack().map_err(|e| Error::Cache(format!("a cached {kind} cannot be unpacked: {e}")))
}

/// `json` compressed against the dictionaries of `K`'s kind.
fn compress<K: Resource<DynamicType = ()>>(json: &[u8]) -> Box<[u8]> {
    compress_in(table(), &K::kind(&()), json)
}

/// What [`compress`] made of a JSON of `K`, back.
fn decompress<K: Resource<DynamicType = ()>>(packed: &[u8]) -> Result<Vec<u8>> {
    decompress_in(table(), &K::kind(&()), packed)
}

/// The kind, group, version and plural of `K`, for a type that stands for a `K` in a store.
macro_rules! names_of_kind {
    ($k:ident) => {
        fn kind(_: &()) -> Cow<'_, str> {
            <$k as Resource>::kind(&())
        }
        fn group(_: &()) -> Cow<'_, str> {
            <$k as Resource>::group(&())
        }
        fn version(_: &()) -> Cow<'_, str> {
            <$k as Resource>::version(&())
        }
        fn plural(_: &()) -> Cow<'_, str> {
            <$k as Resource>::plural(&())
        }
    };
}

impl<K: Resource<DynamicType = ()> + Serialize + DeserializeOwned> Packed<K> {
    /// Packs `obj` without its managed fields, and its pod template as a fingerprint.
    pub fn pack(obj: &K) -> Result<Self> {
        let mut value = serde_json::to_value(obj)?;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        let template = take_template(&mut value)?;
        Ok(Self {
            name: obj.name_any(),
            namespace: ResourceExt::namespace(obj),
            json: compress::<K>(&serde_json::to_vec(&value)?),
            template,
            kind: PhantomData,
        })
    }

    /// Packs `obj` whole, pod template and all: an owner or a Scaler, which its reconcile reads
    /// in full (its watch has taken the managed fields off already).
    pub fn whole(obj: &K) -> Result<Self> {
        Ok(Self {
            name: obj.name_any(),
            namespace: ResourceExt::namespace(obj),
            json: compress::<K>(&serde_json::to_vec(obj)?),
            template: None,
            kind: PhantomData,
        })
    }

    /// The JSON, uncompressed.
    fn json(&self) -> Result<Vec<u8>> {
        decompress::<K>(&self.json)
    }

    /// The object as JSON, without managed fields and pod template.
    pub fn value(&self) -> Result<Value> {
        Ok(serde_json::from_slice(&self.json()?)?)
    }

    /// The object, without managed fields and with an empty pod template.
    pub fn object(&self) -> Result<K> {
        Ok(serde_json::from_slice(&self.json()?)?)
    }

    /// How many bytes the object takes packed (its JSON compressed).
    pub fn packed_len(&self) -> usize {
        self.json.len()
    }

    /// The fingerprint of the object's pod template, if it has one.
    pub fn template(&self) -> Option<u64> {
        self.template
    }

    /// The key of `name` in `namespace`, to look one up in a store.
    pub fn key(name: &str, namespace: &str) -> ObjectRef<Self> {
        ObjectRef::new(name).within(namespace)
    }
}

/// Removes `spec.template` from an object's JSON and returns its fingerprint, if it had one.
pub(super) fn take_template(value: &mut Value) -> Result<Option<u64>> {
    let template = value
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .and_then(|spec| spec.remove("template"));
    Ok(match template {
        Some(t) => Some(fingerprint_u64(&serde_json::to_vec(&t)?)),
        None => None,
    })
}

impl<K: Resource<DynamicType = ()>> Lookup for Packed<K> {
    type DynamicType = ();

    names_of_kind!(K);
    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }
    fn namespace(&self) -> Option<Cow<'_, str>> {
        self.namespace.as_deref().map(Cow::Borrowed)
    }
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }
    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

/// The same watcher event about the object packed by `pack` ([`Packed::pack`] or
/// [`Packed::whole`]).
pub fn pack_event<K>(
    event: &watcher::Event<K>,
    pack: fn(&K) -> Result<Packed<K>>,
) -> Result<watcher::Event<Packed<K>>> {
    use watcher::Event;
    Ok(match event {
        Event::Apply(o) => Event::Apply(pack(o)?),
        Event::Delete(o) => Event::Delete(pack(o)?),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(pack(o)?),
        Event::InitDone => Event::InitDone,
    })
}

/// Which pod templates were checked against which wanted ones. As the cache keeps only a
/// template's fingerprint, a child whose live template is new to this map is read once in full;
/// after that, a template that a hand edit changed shows as a fingerprint that was never checked.
/// Checks of deleted children are dropped whenever the map has doubled, so it stays within about
/// twice the live children. A check missing from the cache is dropped only at the second sweep
/// that misses it: a child just created is checked from the create's answer before its watch
/// event reaches the cache, and dropping its check then would cost a read of it.
#[derive(Default)]
pub struct CheckedTemplates(Mutex<CheckedInner>);

#[derive(Default)]
struct CheckedInner {
    /// By [`CheckedTemplates::key`]: 24 bytes an entry, where names would take a hundred more.
    map: Swept<u64, Checked>,
    /// The checks the last sweep kept though the cache did not hold their child.
    unseen: HashSet<u64>,
}

/// The fingerprints of a wanted template and of the live one found to contain it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Checked {
    pub(super) wanted: u64,
    pub(super) live: u64,
}

impl CheckedTemplates {
    /// The key of the child `namespace`/`name`: a fingerprint of both. Two children sharing one
    /// would only share a record, and a record says nothing of a child whose wanted and live
    /// templates are not the two it holds.
    pub(super) fn key(namespace: &str, name: &str) -> u64 {
        fingerprint_u64(format!("{namespace}/{name}").as_bytes())
    }

    pub(super) fn is_checked(&self, key: u64, wanted: u64, live: u64) -> bool {
        lock(&self.0)
            .map
            .get(&key)
            .is_some_and(|c| *c == Checked { wanted, live })
    }

    pub(super) fn record<K>(&self, key: u64, checked: Checked, cache: &PackedStore<K>)
    where
        K: Resource<DynamicType = ()>,
    {
        let mut inner = lock(&self.0);
        let CheckedInner { map, unseen } = &mut *inner;
        let mut live: Option<HashSet<u64>> = None;
        let mut missed = HashSet::new();
        map.insert(key, checked, |k, _| {
            let live = live.get_or_insert_with(|| {
                cache
                    .state()
                    .iter()
                    .map(|p| Self::key(p.namespace.as_deref().unwrap_or_default(), &p.name))
                    .collect()
            });
            if live.contains(k) {
                return true;
            }
            // Missed by this sweep: kept if the last one did not miss it too.
            let keep = !unseen.contains(k);
            if keep {
                missed.insert(*k);
            }
            keep
        });
        // Only a sweep looked at the cache; it leaves the checks it missed for the next one.
        if live.is_some() {
            *unseen = missed;
        }
    }

    /// Records that the live template of `live` contains the wanted one of `desired`, as a
    /// check by `ensure` would have.
    #[cfg(test)]
    pub fn assume_checked(&self, desired: &Deployment, live: &Deployment) {
        let template = |d: &Deployment| {
            take_template(&mut serde_json::to_value(d).unwrap())
                .unwrap()
                .unwrap()
        };
        let namespace = ResourceExt::namespace(live).unwrap_or_default();
        let checked = Checked {
            wanted: template(desired),
            live: template(live),
        };
        lock(&self.0)
            .map
            .insert(Self::key(&namespace, &live.name_any()), checked, |_, _| {
                true
            });
    }

    /// How many checks are kept.
    pub fn len(&self) -> usize {
        lock(&self.0).map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How long after their watches start a reconcile waits for the caches' first lists. A watch
/// that cannot list (its error shows on /readyz) does not hold reconciles up beyond it: they
/// then read what they miss from the apiserver.
pub const SYNC_WAIT: Duration = Duration::from_secs(30);

/// The cached children of one owner kind's app (`memcached`, `welcome`, ...).
#[derive(Clone)]
pub struct Children {
    pub deployments: PackedStore<Deployment>,
    pub services: PackedStore<Service>,
    /// The app's Ingresses, for kinds that own one; empty otherwise.
    pub ingresses: PackedStore<Ingress>,
    /// The app's pods: a rollout counts them, and a Memcached's status names them.
    pub pods: PodsCache,
    pub notes: Arc<Notes>,
    /// Until when a reconcile waits for the caches' first lists (`synced`).
    pub sync_deadline: tokio::time::Instant,
}

impl Children {
    /// Caches that stay empty.
    pub fn empty() -> Self {
        Self {
            deployments: packed_store().0,
            services: packed_store().0,
            ingresses: packed_store().0,
            pods: pods_cache("").0,
            notes: Arc::default(),
            sync_deadline: tokio::time::Instant::now(),
        }
    }

    /// Returns once every cache that a watch fills has had its first full list, or at the
    /// sync deadline, as controller-runtime waits for its informers before the first reconcile:
    /// a reconcile right after a start then finds the children in the caches instead of
    /// reading each from the apiserver. A cache without a watch (the Ingresses of a kind that
    /// owns none, empty caches) counts as synced.
    pub async fn synced(&self) {
        let lists = async {
            // An error only says the cache has no watch (its writer is gone): nothing to wait for.
            let _ = tokio::join!(
                self.deployments.wait_until_ready(),
                self.services.wait_until_ready(),
                self.ingresses.wait_until_ready(),
                self.pods.wait_until_ready(),
            );
        };
        let _ = tokio::time::timeout_at(self.sync_deadline, lists).await;
    }
}

/// The writing ends of one app's caches, for the reflectors.
pub struct Writers {
    pub deployments: PackedWriter<Deployment>,
    pub services: PackedWriter<Service>,
    pub ingresses: PackedWriter<Ingress>,
    pub pods: PodsWriter,
    pub notes: Arc<Notes>,
}

/// What a reconcile learnt of an app's children beyond what their caches hold.
#[derive(Default)]
pub struct Notes {
    pub templates: CheckedTemplates,
    pub unseen: Unseen,
}

/// Every cache a reconcile reads, by app. An app's stores fill from the watches that its
/// registration starts; until then (and in tests) they are empty, which only means more applies.
#[derive(Clone, Default)]
pub struct Caches(Arc<Mutex<HashMap<&'static str, Children>>>);

impl Caches {
    /// Caches that stay empty until an app registers.
    pub fn empty() -> Self {
        Self::default()
    }

    /// New caches of `app`'s children, replacing any before; their writers go to its watches.
    pub fn register(&self, app: &'static str) -> Writers {
        let (deployments, dw) = packed_store();
        let (services, sw) = packed_store();
        let (ingresses, iw) = packed_store();
        let (pods, pw) = pods_cache(app);
        let notes = Arc::new(Notes::default());
        lock(&self.0).insert(
            app,
            Children {
                deployments,
                services,
                ingresses,
                pods,
                notes: notes.clone(),
                sync_deadline: tokio::time::Instant::now() + SYNC_WAIT,
            },
        );
        Writers {
            deployments: dw,
            services: sw,
            ingresses: iw,
            pods: pw,
            notes,
        }
    }

    /// The cached children of `app`: empty stores if it never registered.
    pub fn of(&self, app: &'static str) -> Children {
        lock(&self.0)
            .entry(app)
            .or_insert_with(Children::empty)
            .clone()
    }
}

/// What a cache keeps of an object: everything but the managed fields, which are most of its
/// size and which nothing here reads.
pub fn trim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// The watch config of one app's children, by label.
pub fn children_of(app: &str) -> watcher::Config {
    kubesteer_runtime::watch::config().labels(&owned_by_kubesteer(app))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::MIN_SWEEP;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    #[tokio::test]
    async fn a_reconcile_waits_for_the_first_lists_of_the_watched_caches() {
        let caches = Caches::empty();
        let Writers {
            deployments: mut dw,
            services: mut sw,
            ..
        } = caches.register("memcached");
        let children = caches.of("memcached");
        let mut synced = Box::pin(children.synced());
        assert!(
            futures::poll!(&mut synced).is_pending(),
            "synced before any list"
        );
        dw.apply_watcher_event(&watcher::Event::InitDone);
        assert!(
            futures::poll!(&mut synced).is_pending(),
            "synced with the Services not listed"
        );
        sw.apply_watcher_event(&watcher::Event::InitDone);
        tokio::time::timeout(Duration::from_secs(5), synced)
            .await
            .expect("synced once both watches listed (the others have none)");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_never_lists_holds_reconciles_up_only_until_the_deadline() {
        let caches = Caches::empty();
        let _writers = caches.register("memcached");
        let children = caches.of("memcached");
        let start = tokio::time::Instant::now();
        children.synced().await;
        assert!(start.elapsed() >= SYNC_WAIT, "{:?}", start.elapsed());
        // Past the deadline a reconcile no longer waits.
        let again = tokio::time::Instant::now();
        children.synced().await;
        assert_eq!(again.elapsed(), Duration::ZERO);
        // Caches that no watch fills never hold one up.
        let none = tokio::time::Instant::now();
        Children::empty().synced().await;
        assert_eq!(none.elapsed(), Duration::ZERO);
    }

    #[test]
    fn the_cache_keeps_neither_managed_fields_nor_pod_template_but_a_fingerprint_of_it() {
        let deployment = |image: &str| -> Deployment {
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "cache", "namespace": "team", "generation": 3,
                    "managedFields": [{"manager": "kubesteer-controller", "operation": "Apply"}]},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                    "template": {"spec": {"containers": [{"name": "m", "image": image}]}}},
                "status": {"readyReplicas": 1}
            }))
            .unwrap()
        };
        let packed = Packed::pack(&deployment("memcached:1")).unwrap();
        let value = packed.value().unwrap();
        assert_eq!(value["metadata"].get("managedFields"), None);
        assert_eq!(value["spec"].get("template"), None);
        assert_eq!(value["spec"]["replicas"], 2);
        assert_eq!(value["status"]["readyReplicas"], 1);
        assert_eq!(packed.object().unwrap().metadata.generation, Some(3));
        let fingerprint = packed.template();
        assert!(fingerprint.is_some());
        let edited = Packed::pack(&deployment("memcached:2")).unwrap();
        assert_ne!(edited.template(), fingerprint);
        let again = Packed::pack(&deployment("memcached:1")).unwrap();
        assert_eq!(again.template(), fingerprint);
        let service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "cache"},
            "spec": {"ports": [{"port": 80}]}
        }))
        .unwrap();
        assert_eq!(Packed::pack(&service).unwrap().template(), None);
    }

    #[test]
    fn children_of_one_kind_are_packed_small_against_the_first_and_read_back_whole() {
        // A Deployment under a kind of its own: the dictionary is the first object of a kind
        // packed in the process, and other tests pack small Deployments of their own, in any
        // order. Of this kind, this test packs the first.
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        struct PackedFirst(Deployment);
        impl k8s_openapi::Resource for PackedFirst {
            const API_VERSION: &'static str = "test.kubesteer.io/v1";
            const GROUP: &'static str = "test.kubesteer.io";
            const KIND: &'static str = "PackedFirst";
            const VERSION: &'static str = "v1";
            const URL_PATH_SEGMENT: &'static str = "packedfirsts";
            type Scope = k8s_openapi::NamespaceResourceScope;
        }
        impl k8s_openapi::Metadata for PackedFirst {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
        // As the apiserver returns a Memcached's Deployment (managedFields left out by packing).
        let deployment = |i: usize| -> PackedFirst {
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("cache-{i}"), "namespace": format!("team-{}", i % 7),
                    "uid": format!("5f0c1d2e-3a4b-4c5d-8e9f-{i:012}"),
                    "resourceVersion": format!("{}", 100_000 + 37 * i), "generation": 1,
                    "creationTimestamp": "2026-11-27T01:10:51Z",
                    "labels": {"app.kubernetes.io/name": "memcached",
                        "app.kubernetes.io/instance": format!("cache-{i}"),
                        "app.kubernetes.io/managed-by": "kubesteer"},
                    "annotations": {"kubesteer.io/applied": format!("{:016x}", i * 7919),
                        "deployment.kubernetes.io/revision": "1"},
                    "ownerReferences": [{"apiVersion": "cache.example.com/v1alpha1",
                        "kind": "Memcached", "name": format!("cache-{i}"),
                        "uid": format!("9a8b7c6d-5e4f-4a3b-9c2d-{i:012}"),
                        "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"replicas": i % 3, "revisionHistoryLimit": 10,
                    "progressDeadlineSeconds": 600,
                    "selector": {"matchLabels": {"app.kubernetes.io/name": "memcached",
                        "app.kubernetes.io/instance": format!("cache-{i}")}},
                    "strategy": {"type": "RollingUpdate",
                        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                    "template": {"spec": {"containers": [{"name": "memcached",
                        "image": "memcached:1.6"}]}}},
                "status": {"observedGeneration": 1, "replicas": i % 3, "readyReplicas": i % 3,
                    "conditions": [{"type": "Available", "status": "True",
                        "lastUpdateTime": "2026-11-27T01:10:53Z",
                        "lastTransitionTime": "2026-11-27T01:10:53Z",
                        "reason": "MinimumReplicasAvailable",
                        "message": "Deployment has minimum availability."}]}
            }))
            .unwrap()
        };
        let (mut json, mut packed) = (0, 0);
        for i in 0..200 {
            let d = deployment(i);
            let p = Packed::pack(&d).unwrap();
            let mut want = serde_json::to_value(&d).unwrap();
            want["spec"].as_object_mut().unwrap().remove("template");
            assert_eq!(p.value().unwrap(), want, "deployment {i}");
            assert_eq!(p.object().unwrap().0.metadata.name, d.0.metadata.name);
            json += serde_json::to_vec(&want).unwrap().len();
            packed += p.packed_len();
        }
        // The first of them is the dictionary; the others differ from it in names, uids,
        // versions and counts only.
        assert!(
            packed * 3 < json,
            "packed {packed} bytes of {json} bytes of JSON"
        );
    }

    /// A Deployment's JSON as the cache keeps it, `i`-th of its kind, created `i` seconds after
    /// the first; `status` as the controller-manager writes it once it has rolled out.
    fn deployment_json(i: usize, status: bool) -> Vec<u8> {
        let at = |s: usize| format!("2026-11-27T01:{:02}:{:02}Z", (10 + s / 60) % 60, s % 60);
        let mut d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("cache-{i}"), "namespace": format!("team-{}", i % 7),
                "uid": format!("5f0c1d2e-3a4b-4c5d-8e9f-{i:012}"),
                "resourceVersion": format!("{}", 100_000 + 37 * i), "generation": 1,
                "creationTimestamp": at(i),
                "labels": {"app.kubernetes.io/name": "memcached",
                    "app.kubernetes.io/instance": format!("cache-{i}")}},
            "spec": {"replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                "selector": {"matchLabels": {"app.kubernetes.io/instance": format!("cache-{i}")}}}
        });
        if status {
            let progressed = format!(
                "ReplicaSet \"cache-{i}-{:010x}\" has successfully progressed.",
                i * 2_654_435_761
            );
            d["status"] = json!({"observedGeneration": 1, "replicas": 1, "readyReplicas": 1,
                "availableReplicas": 1, "updatedReplicas": 1, "conditions": [
                    {"type": "Available", "status": "True", "lastUpdateTime": at(i + 2),
                     "lastTransitionTime": at(i + 2), "reason": "MinimumReplicasAvailable",
                     "message": "Deployment has minimum availability."},
                    {"type": "Progressing", "status": "True", "lastUpdateTime": at(i + 2),
                     "lastTransitionTime": at(i), "reason": "NewReplicaSetAvailable",
                     "message": progressed}]});
        }
        serde_json::to_vec(&d).unwrap()
    }

    #[test]
    fn objects_that_gain_a_status_pack_against_a_dictionary_that_has_one() {
        let table = Table::default();
        let jsons: Vec<Vec<u8>> = (0..300)
            .map(|i| deployment_json(i, false))
            .chain((0..300).map(|i| deployment_json(i, true)))
            .collect();
        let packed: Vec<Box<[u8]>> = jsons.iter().map(|j| compress_in(&table, "T", j)).collect();
        for (json, packed) in jsons.iter().zip(&packed) {
            assert_eq!(&decompress_in(&table, "T", packed).unwrap(), json);
        }
        let made = lock(&table)["T"].all.len();
        assert!(
            (2..=MAX_DICTIONARIES).contains(&made),
            "{made} dictionaries"
        );
        // Against the first alone (no status in it), as before there were more.
        let first = &jsons[0];
        let alone: usize = jsons[300..]
            .iter()
            .map(|j| lz4_flex::block::compress_prepend_size_with_dict(j, first).len() + 1)
            .sum();
        let now: usize = packed[300..].iter().map(|p| p.len()).sum();
        assert!(
            now * 10 < alone * 7,
            "with a status: {now} bytes, {alone} against the first"
        );
        // The objects without a status packed as small as before.
        let before: usize = jsons[1..300]
            .iter()
            .map(|j| lz4_flex::block::compress_prepend_size_with_dict(j, first).len() + 1)
            .sum();
        let unchanged: usize = packed[1..300].iter().map(|p| p.len()).sum();
        assert_eq!(unchanged, before);
    }

    #[test]
    fn a_kind_makes_at_most_its_share_of_dictionaries_and_every_object_reads_back() {
        let table = Table::default();
        // Each object twice the size of the last, unlike anything before it.
        let jsons: Vec<Vec<u8>> = (0..14)
            .map(|i| {
                let words: Vec<String> = (0..1usize << i).map(|w| format!("w{i}-{w}")).collect();
                serde_json::to_vec(&json!({"metadata": {"name": i}, "words": words})).unwrap()
            })
            .collect();
        let packed: Vec<Box<[u8]>> = jsons.iter().map(|j| compress_in(&table, "T", j)).collect();
        assert_eq!(lock(&table)["T"].all.len(), MAX_DICTIONARIES);
        assert!(lock(&table)["T"].all.iter().all(|d| d.len() <= WINDOW));
        for (json, packed) in jsons.iter().zip(&packed) {
            assert_eq!(&decompress_in(&table, "T", packed).unwrap(), json);
        }
        // A dictionary that is not there is an error naming the kind, never a panic.
        let err = decompress_in(&table, "T", &[200, 1, 0, 0, 0, 0]).unwrap_err();
        assert!(err.to_string().contains("cached T"), "{err}");
        assert!(decompress_in(&table, "T", &[]).is_err());
    }

    #[test]
    fn an_owner_is_packed_whole_and_found_by_its_key() {
        use kubesteer_api::Memcached;
        use kubesteer_runtime::queue::ObjectKey;
        let value = json!({
            "apiVersion": <Memcached as Resource>::api_version(&()), "kind": "Memcached",
            "metadata": {"name": "cache", "namespace": "team", "uid": "u-1",
                "resourceVersion": "42", "generation": 2, "finalizers": ["f"]},
            "spec": {"size": 3},
            "status": {"observedGeneration": 2, "readyReplicas": 3,
                "conditions": [{"type": "Ready", "status": "True", "reason": "AllPodsReady",
                    "message": "3 of 3 ready", "lastTransitionTime": "2026-11-27T01:10:53Z"}]}
        });
        let mc: Memcached = serde_json::from_value(value.clone()).unwrap();
        let (store, mut writer) = packed_store::<Memcached>();
        writer.apply_watcher_event(&pack_event(&watcher::Event::Apply(mc), Packed::whole).unwrap());
        // The controller's queue finds it by namespace and name, and reads it back whole.
        let found = store.get_key(&ObjectKey::new("team", "cache")).unwrap();
        assert_eq!(
            serde_json::to_value(found.object().unwrap()).unwrap(),
            value
        );
        assert!(store.get_key(&ObjectKey::new("other", "cache")).is_none());
        // Whole means whole: a pod template stays, where a child's cache keeps a fingerprint.
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "team"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "web"}]}}}
        }))
        .unwrap();
        let whole = Packed::whole(&d).unwrap();
        assert_eq!(whole.template(), None);
        assert_eq!(whole.object().unwrap().spec, d.spec);
        assert_ne!(Packed::pack(&d).unwrap().object().unwrap().spec, d.spec);
    }

    #[test]
    fn a_check_outlives_one_sweep_before_its_child_reaches_the_cache_but_not_two() {
        let caches = Caches::empty();
        let mut w = caches.register("memcached");
        let cache = w.deployments.as_reader();
        let templates = CheckedTemplates::default();
        let check = Checked { wanted: 1, live: 2 };
        let record = |i: usize| {
            let key = CheckedTemplates::key("team", &format!("cache-{i}"));
            templates.record(key, check, &cache);
            key
        };
        let cached = |w: &mut Writers, i: usize| {
            crate::fixtures::put(
                &mut w.deployments,
                json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": format!("cache-{i}"), "namespace": "team"}}),
            )
        };
        // Checked from the creates' answers, none cached yet: the first sweep (at 64) keeps them.
        let first: Vec<u64> = (0..MIN_SWEEP).map(record).collect();
        assert_eq!(templates.len(), MIN_SWEEP);
        assert!(first.iter().all(|k| templates.is_checked(*k, 1, 2)));
        // Their watch events come, but for child 0, deleted meanwhile.
        for i in 1..MIN_SWEEP {
            cached(&mut w, i);
        }
        // The next sweep (at twice 64) keeps every cached child's check and drops child 0's,
        // missed twice; the new checks, missed once, stay.
        let second: Vec<u64> = (MIN_SWEEP..2 * MIN_SWEEP).map(record).collect();
        assert!(
            !templates.is_checked(first[0], 1, 2),
            "a child missed by two sweeps"
        );
        assert!(first[1..].iter().all(|k| templates.is_checked(*k, 1, 2)));
        assert!(second.iter().all(|k| templates.is_checked(*k, 1, 2)));
        assert_eq!(templates.len(), 2 * MIN_SWEEP - 1);
    }
}
