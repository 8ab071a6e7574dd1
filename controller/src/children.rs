//! Watch caches of what the controller owns, so a reconcile reads its children without a request
//! and writes a child only when it differs from what the controller wants.
use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{NamespaceResourceScope, PartialObjectMeta};
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::{reflector::store::Writer, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Debug;

use crate::objects::{self, Applied, INSTANCE_LABEL, NAME_LABEL};
use crate::{is_status, Context, Error, Result};

/// A cached object kept as its compact JSON: a few KiB where the parsed object takes 10 or more,
/// which matters with thousands of children. Reconciles parse the one they read.
pub struct Packed<K> {
    name: String,
    namespace: Option<String>,
    json: Box<[u8]>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Packed<K> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            json: self.json.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Resource<DynamicType = ()> + Serialize + DeserializeOwned> Packed<K> {
    /// Packs `obj` without its managed fields.
    pub fn pack(obj: &K) -> Result<Self> {
        let mut value = serde_json::to_value(obj)?;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        Ok(Self {
            name: obj.name_any(),
            namespace: ResourceExt::namespace(obj),
            json: serde_json::to_vec(&value)?.into_boxed_slice(),
            kind: PhantomData,
        })
    }

    /// The object as JSON.
    pub fn value(&self) -> Result<Value> {
        Ok(serde_json::from_slice(&self.json)?)
    }

    /// The object.
    pub fn object(&self) -> Result<K> {
        Ok(serde_json::from_slice(&self.json)?)
    }

    /// The key of `name` in `namespace`, to look one up in a store.
    pub fn key(name: &str, namespace: &str) -> ObjectRef<Self> {
        ObjectRef::new(name).within(namespace)
    }
}

impl<K: Resource<DynamicType = ()>> Lookup for Packed<K> {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }
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

/// The same watcher event about the packed object.
pub fn pack_event<K>(event: &watcher::Event<K>) -> Result<watcher::Event<Packed<K>>>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
{
    use watcher::Event;
    Ok(match event {
        Event::Apply(o) => Event::Apply(Packed::pack(o)?),
        Event::Delete(o) => Event::Delete(Packed::pack(o)?),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(Packed::pack(o)?),
        Event::InitDone => Event::InitDone,
    })
}

/// The cached Deployments and Services of one app (`memcached` or `welcome`).
#[derive(Clone)]
pub struct Children {
    pub deployments: Store<Packed<Deployment>>,
    pub services: Store<Packed<Service>>,
}

/// Every cache a reconcile reads. The stores fill from watches that `run` starts; until then
/// (and in tests) they are empty, which only means more applies.
#[derive(Clone)]
pub struct Caches {
    pub memcached: Children,
    /// The metadata of Memcached pods: their names make `status.nodes`.
    pub memcached_pods: Store<PartialObjectMeta<Pod>>,
    pub welcome: Children,
}

/// The writing ends of the caches, for the reflectors.
pub struct Writers {
    pub memcached_deployments: Writer<Packed<Deployment>>,
    pub memcached_services: Writer<Packed<Service>>,
    pub memcached_pods: Writer<PartialObjectMeta<Pod>>,
    pub welcome_deployments: Writer<Packed<Deployment>>,
    pub welcome_services: Writer<Packed<Service>>,
}

impl Caches {
    pub fn new() -> (Self, Writers) {
        let (md, mdw) = reflector::store();
        let (ms, msw) = reflector::store();
        let (mp, mpw) = reflector::store();
        let (wd, wdw) = reflector::store();
        let (ws, wsw) = reflector::store();
        let caches = Self {
            memcached: Children {
                deployments: md,
                services: ms,
            },
            memcached_pods: mp,
            welcome: Children {
                deployments: wd,
                services: ws,
            },
        };
        let writers = Writers {
            memcached_deployments: mdw,
            memcached_services: msw,
            memcached_pods: mpw,
            welcome_deployments: wdw,
            welcome_services: wsw,
        };
        (caches, writers)
    }

    /// Caches that stay empty.
    pub fn empty() -> Self {
        Self::new().0
    }
}

/// Sorted names of the live (not terminating) pods of `app` instance `instance` in `ns`.
pub fn pod_names(
    pods: &Store<PartialObjectMeta<Pod>>,
    ns: &str,
    app: &str,
    instance: &str,
) -> Vec<String> {
    let mut names: Vec<String> = pods
        .state()
        .iter()
        .filter(|p| {
            let labels = p.labels();
            p.metadata.namespace.as_deref() == Some(ns)
                && p.metadata.deletion_timestamp.is_none()
                && labels.get(NAME_LABEL).map(String::as_str) == Some(app)
                && labels.get(INSTANCE_LABEL).map(String::as_str) == Some(instance)
        })
        .map(|p| p.name_any())
        .collect();
    names.sort();
    names
}

/// What a cache keeps of an object: everything but the managed fields, which are most of its
/// size and which nothing here reads.
pub fn trim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// What the pod cache keeps: name, namespace, labels and deletion timestamp.
pub fn trim_pod(pod: &mut PartialObjectMeta<Pod>) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    meta.generate_name = None;
}

/// On every child: a fingerprint of what the controller last applied. A child that still
/// contains everything it was given may yet hold a field the controller no longer sets (which an
/// apply removes); the fingerprint tells, as it changes with any change of the applied object.
pub const APPLIED_ANNOTATION: &str = "kubesteer.io/applied";

/// FNV-1a, 64 bits, in hex: stable across builds and Rust versions.
pub fn fingerprint(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// `desired` with its fingerprint annotation, as it is applied.
pub fn stamped<K: Resource + Clone + Serialize>(desired: &K) -> Result<K> {
    let mut stamped = desired.clone();
    let hash = fingerprint(&serde_json::to_vec(desired)?);
    stamped
        .annotations_mut()
        .insert(APPLIED_ANNOTATION.into(), hash);
    Ok(stamped)
}

/// An object of a child's name that this owner does not control, so it is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameConflict {
    pub kind: String,
    pub name: String,
}

impl NameConflict {
    pub fn new(kind: &str, name: &str) -> Self {
        Self {
            kind: kind.to_string(),
            name: name.to_string(),
        }
    }

    /// What a user reads in the condition and the event.
    pub fn describe(&self, owner_kind: &str) -> String {
        format!(
            "{} {} exists and is not controlled by this {owner_kind}; it is left untouched",
            self.kind, self.name
        )
    }
}

/// What `ensure` made of a child: the controller's own, as wanted, or someone else's.
pub enum Ensured<K> {
    Ours(Applied<Arc<K>>),
    Foreign(NameConflict),
}

/// Whether `meta` has a controller owner reference with the uid `owner_uid`.
pub fn controlled_by(meta: &ObjectMeta, owner_uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

/// Makes `desired` so, writing only what differs and never an object its owner does not control.
pub async fn ensure<K>(ctx: &Context, cache: &Store<Packed<K>>, desired: &K) -> Result<Ensured<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let desired = stamped(desired)?;
    let name = desired.name_any();
    let kind = K::kind(&()).to_string();
    let owner_uid = desired
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
        .ok_or_else(|| Error::MissingField {
            kind: "child",
            name: name.clone(),
            what: "controller owner reference",
        })?;
    let namespace = ResourceExt::namespace(&desired).unwrap_or_default();
    let wanted = serde_json::to_value(&desired)?;
    let key = Packed::<K>::key(&name, &namespace);
    if let Some(cached) = cache.get(&key) {
        let actual = cached.value()?;
        let object: K = serde_json::from_value(actual.clone())?;
        if !controlled_by(object.meta(), &owner_uid) {
            return Ok(Ensured::Foreign(NameConflict::new(&kind, &name)));
        }
        if contains(&actual, &wanted) {
            ctx.metrics.child(&kind, false);
            return Ok(Ensured::Ours(Applied {
                object: Arc::new(object),
                created: false,
            }));
        }
        ctx.metrics.child(&kind, true);
        let applied = objects::apply(&ctx.client, &desired).await?;
        return Ok(Ensured::Ours(Applied {
            object: Arc::new(applied.object),
            created: applied.created,
        }));
    }
    ctx.metrics.child(&kind, true);
    // Not cached: the label-filtered watch misses a same-named object made by someone else.
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let live = match api.get_opt(&name).await? {
        Some(live) => live,
        None => match objects::create_by_apply(&ctx.client, &desired).await {
            Ok(applied) => {
                return Ok(Ensured::Ours(Applied {
                    object: Arc::new(applied.object),
                    created: applied.created,
                }))
            }
            // Made by someone else since the read: their fields conflict, nothing was written.
            Err(Error::Kube(e)) if is_status(&e, 409) => api.get_opt(&name).await?.ok_or(e)?,
            Err(e) => return Err(e),
        },
    };
    if !controlled_by(live.meta(), &owner_uid) {
        return Ok(Ensured::Foreign(NameConflict::new(&kind, &name)));
    }
    if contains(&serde_json::to_value(&live)?, &wanted) {
        return Ok(Ensured::Ours(Applied {
            object: Arc::new(live),
            created: false,
        }));
    }
    let applied = objects::apply(&ctx.client, &desired).await?;
    Ok(Ensured::Ours(Applied {
        object: Arc::new(applied.object),
        created: false,
    }))
}

/// Whether `actual` has every field of `desired` with an equal value. The apiserver only adds
/// to what was applied (defaults, status, metadata), so an object that still contains what was
/// applied needs no new apply. Lists must match in length, so a removed entry is noticed; an
/// empty list or map stands for an absent one, as the apiserver omits those.
pub fn contains(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => d.iter().all(|(k, dv)| match a.get(k) {
            Some(av) => contains(av, dv),
            None => is_empty(dv),
        }),
        (Value::Array(a), Value::Array(d)) => {
            a.len() == d.len() && a.iter().zip(d).all(|(av, dv)| contains(av, dv))
        }
        (Value::Null, d) => is_empty(d),
        (a, d) => a == d,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// The watch config of one app's children, by label.
pub fn children_of(app: &str) -> watcher::Config {
    watcher::Config::default().labels(&objects::owned_by_kubesteer(app))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_with_defaults_added_contains_what_was_applied() {
        let desired = json!({"spec": {"replicas": 2, "template": {"containers": [{"name": "m", "args": ["-m", "64"]}]}}, "metadata": {"labels": {}}});
        let actual = json!({"spec": {"replicas": 2, "progressDeadlineSeconds": 600,
            "template": {"containers": [{"name": "m", "args": ["-m", "64"], "imagePullPolicy": "IfNotPresent"}]}},
            "metadata": {"uid": "u"}, "status": {"readyReplicas": 1}});
        assert!(contains(&actual, &desired));
    }

    #[test]
    fn a_changed_value_a_missing_field_or_a_shorter_list_is_drift() {
        let desired =
            json!({"spec": {"replicas": 2, "args": ["-m", "64"], "selector": {"a": "b"}}});
        for actual in [
            json!({"spec": {"replicas": 3, "args": ["-m", "64"], "selector": {"a": "b"}}}),
            json!({"spec": {"replicas": 2, "args": ["-m"], "selector": {"a": "b"}}}),
            json!({"spec": {"replicas": 2, "args": ["-m", "64", "-v"], "selector": {"a": "b"}}}),
            json!({"spec": {"replicas": 2, "args": ["-m", "64"]}}),
            json!({"spec": {"replicas": 2, "args": ["-m", "64"], "selector": {"a": "c"}}}),
            json!({}),
        ] {
            assert!(!contains(&actual, &desired), "{actual}");
        }
    }

    #[test]
    fn pods_are_named_by_app_instance_and_namespace_and_terminating_ones_are_left_out() {
        let (store, mut writer) = reflector::store::<PartialObjectMeta<Pod>>();
        let pod = |ns: &str, name: &str, instance: &str, deleting: bool| {
            let mut p: PartialObjectMeta<Pod> = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns,
                    "labels": {NAME_LABEL: "memcached", INSTANCE_LABEL: instance}}
            }))
            .unwrap();
            if deleting {
                p.metadata.deletion_timestamp = Some(objects::time(chrono::Utc::now()));
            }
            p
        };
        for p in [
            pod("team", "cache-b", "cache", false),
            pod("team", "cache-a", "cache", false),
            pod("team", "cache-old", "cache", true),
            pod("team", "other-x", "other", false),
            pod("elsewhere", "cache-z", "cache", false),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        assert_eq!(
            pod_names(&store, "team", "memcached", "cache"),
            ["cache-a", "cache-b"]
        );
        assert!(pod_names(&store, "team", "welcome", "cache").is_empty());
    }
}
