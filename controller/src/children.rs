//! The children of an owner (its Deployment, Service, ...): how they are built, how they are
//! cached, and how they are made so: apply only what differs (drift), and never take over an object
//! this owner does not control (`NameConflict`).
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecurityContext,
    Service, ServicePort, ServiceSpec, TCPSocketAction,
};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Patch, PatchParams, PostParams};
use kube::client::Body;
use kube::core::{NamespaceResourceScope, PartialObjectMeta, Status};
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::{reflector::store::Writer, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use kubesteer_api::keys::{annotation, label, CONTROLLER_FIELD_MANAGER};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::context::lock;
use crate::{is_status, Context, Error, Result};

// ---- Building: labels, owner references, the pod template every owner kind shares. ----

/// The labels of every object owned by instance `instance` of app `app`.
pub fn labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    let mut l = selector_labels(app, instance);
    l.insert(label::MANAGED_BY.into(), label::MANAGED_BY_VALUE.into());
    l
}

/// The labels a Deployment selects its pods by; they never change, as a selector cannot.
pub fn selector_labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (label::NAME.to_string(), app.to_string()),
        (label::INSTANCE.to_string(), instance.to_string()),
    ])
}

/// `selector_labels` as a label selector string.
pub fn selector_string(app: &str, instance: &str) -> String {
    format!("{}={app},{}={instance}", label::NAME, label::INSTANCE)
}

/// The label selector of everything kubesteer owns of `app`, for watches.
pub fn owned_by_kubesteer(app: &str) -> String {
    format!(
        "{}={app},{}={}",
        label::NAME,
        label::MANAGED_BY,
        label::MANAGED_BY_VALUE
    )
}

/// The namespace and name of a namespaced custom resource.
pub fn namespace_and_name<K: Resource>(kind: &'static str, obj: &K) -> Result<(String, String)> {
    let name = obj.name_any();
    let ns = ResourceExt::namespace(obj).ok_or_else(|| Error::MissingField {
        kind,
        name: name.clone(),
        what: "namespace",
    })?;
    Ok((ns, name))
}

/// Metadata of a child named `name`, labelled, and controlled by `owner` so GC deletes it.
pub fn child_meta<K>(
    kind: &'static str,
    owner: &K,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta>
where
    K: Resource<DynamicType = ()>,
{
    let owner_ref = owner
        .controller_owner_ref(&())
        .ok_or_else(|| Error::MissingField {
            kind,
            name: owner.name_any(),
            what: "uid",
        })?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: ResourceExt::namespace(owner),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref]),
        ..ObjectMeta::default()
    })
}

/// The Service in front of an owner's pods: one TCP `port` named `port_name`, pointing at the
/// pods' port of that name; `shape` sets the rest (type, headless).
pub fn service<K>(
    kind: &'static str,
    owner: &K,
    app: &str,
    port: i32,
    port_name: &str,
    shape: ServiceSpec,
) -> Result<Service>
where
    K: Resource<DynamicType = ()>,
{
    let name = owner.meta().name.clone().unwrap_or_default();
    Ok(Service {
        metadata: child_meta(kind, owner, name.clone(), labels(app, &name))?,
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(app, &name)),
            ports: Some(vec![ServicePort {
                name: Some(port_name.into()),
                port,
                target_port: Some(IntOrString::String(port_name.into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..shape
        }),
        ..Service::default()
    })
}
/// A Deployment spec of `replicas` pods of one `container`, labelled for `app`/`instance`.
pub fn deployment_spec(
    app: &str,
    instance: &str,
    replicas: i32,
    container: Container,
) -> DeploymentSpec {
    DeploymentSpec {
        replicas: Some(replicas),
        selector: LabelSelector {
            match_labels: Some(selector_labels(app, instance)),
            ..LabelSelector::default()
        },
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels(app, instance)),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: vec![container],
                // Owned workloads never talk to the apiserver: no token for an image to steal.
                automount_service_account_token: Some(false),
                ..PodSpec::default()
            }),
        },
        ..DeploymentSpec::default()
    }
}

/// A probe that opens a TCP connection to the container port named `port`, every 10 s.
pub fn tcp_probe(port: &str) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::String(port.into()),
            ..TCPSocketAction::default()
        }),
        period_seconds: Some(10),
        ..Probe::default()
    }
}

/// The restricted Pod Security Standard for a container running as `user`.
pub fn restricted_security_context(user: i64) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(user),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..SecurityContext::default()
    }
}

/// Server-side apply under kubesteer's one field manager, taking over fields from hand edits.
pub fn apply_params() -> PatchParams {
    PatchParams::apply(CONTROLLER_FIELD_MANAGER).force()
}

/// A create under kubesteer's field manager: unlike an apply, it never touches an existing object.
/// Only for Secrets, which the controller may not read; other children are created by
/// `create_by_apply`, so that their fields belong to the manager's Apply entry and a later apply
/// can remove them (a POST's fields stay with an Update entry that no apply clears).
pub fn create_params() -> PostParams {
    PostParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

/// An object as the apiserver stored it after a server-side apply.
pub struct Applied<K> {
    pub object: K,
    /// Whether this apply created the object, rather than finding it there.
    pub created: bool,
}

/// Server-side applies the namespaced `obj`. Unlike `Api::patch` it keeps the answer's status
/// code, as 201 Created is the one exact sign that the object did not exist before.
pub async fn apply<K>(client: &Client, obj: &K) -> Result<Applied<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    apply_with(client, obj, &apply_params()).await
}

/// Server-side applies `obj`, which was just read as missing, without force: should someone else
/// have made an object of that name meanwhile, a field both set answers 409 Conflict instead of
/// being taken over.
pub async fn create_by_apply<K>(client: &Client, obj: &K) -> Result<Applied<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    apply_with(client, obj, &PatchParams::apply(CONTROLLER_FIELD_MANAGER)).await
}

async fn apply_with<K>(client: &Client, obj: &K, params: &PatchParams) -> Result<Applied<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    let missing = |what| Error::MissingField {
        kind: "child",
        name: obj.name_any(),
        what,
    };
    let ns = obj
        .meta()
        .namespace
        .as_deref()
        .ok_or_else(|| missing("namespace"))?;
    let name = obj.meta().name.as_deref().ok_or_else(|| missing("name"))?;
    let request = kube::core::Request::new(K::url_path(&(), Some(ns)))
        .patch(name, params, &Patch::Apply(obj))
        .map_err(kube::Error::BuildRequest)?;
    let response = client.send(request.map(Body::from)).await?;
    let code = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await?;
    if code >= 400 {
        // The same error `Api::patch` gives, so conflicts and the like are recognised alike.
        let status = serde_json::from_slice::<Status>(&bytes).unwrap_or_else(|_| {
            Status::failure(
                &String::from_utf8_lossy(&bytes),
                "Failed to parse error data",
            )
            .with_code(code)
        });
        return Err(kube::Error::Api(status.boxed()).into());
    }
    Ok(Applied {
        object: serde_json::from_slice(&bytes)?,
        created: code == 201,
    })
}

// ---- Caching: what the watches keep of the children. ----

/// A cached object kept as its compact JSON, without what no reconcile reads: its managed fields
/// and its pod template (most of a Deployment), of which only a fingerprint stays, for drift.
/// A few KiB where the parsed object takes 10 or more, which matters with thousands of children.
/// Reconciles parse the one they read.
pub struct Packed<K> {
    name: String,
    namespace: Option<String>,
    json: Box<[u8]>,
    /// The fingerprint of `spec.template` as the apiserver holds it, if the object has one.
    template: Option<String>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Packed<K> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            json: self.json.clone(),
            template: self.template.clone(),
            kind: PhantomData,
        }
    }
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
            json: serde_json::to_vec(&value)?.into_boxed_slice(),
            template,
            kind: PhantomData,
        })
    }

    /// The object as JSON, without managed fields and pod template.
    pub fn value(&self) -> Result<Value> {
        Ok(serde_json::from_slice(&self.json)?)
    }

    /// The object, without managed fields and with an empty pod template.
    pub fn object(&self) -> Result<K> {
        Ok(serde_json::from_slice(&self.json)?)
    }

    /// The fingerprint of the object's pod template, if it has one.
    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// The key of `name` in `namespace`, to look one up in a store.
    pub fn key(name: &str, namespace: &str) -> ObjectRef<Self> {
        ObjectRef::new(name).within(namespace)
    }
}

/// Removes `spec.template` from an object's JSON and returns its fingerprint, if it had one.
fn take_template(value: &mut Value) -> Result<Option<String>> {
    let template = value
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .and_then(|spec| spec.remove("template"));
    Ok(match template {
        Some(t) => Some(fingerprint(&serde_json::to_vec(&t)?)),
        None => None,
    })
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

/// Which pod templates were checked against which wanted ones. As the cache keeps only a
/// template's fingerprint, a child whose live template is new to this map is read once in full;
/// after that, a template that a hand edit changed shows as a fingerprint that was never checked.
/// Checks of deleted children are dropped whenever the map has doubled, so it stays within twice
/// the live children.
#[derive(Default)]
pub struct CheckedTemplates(Mutex<CheckedInner>);

#[derive(Default)]
struct CheckedInner {
    map: HashMap<ObjectRef<Deployment>, Checked>,
    sweep_at: usize,
}

/// The fingerprints of a wanted template and of the live one found to contain it.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Checked {
    wanted: String,
    live: String,
}

impl CheckedTemplates {
    fn is_checked(&self, key: &ObjectRef<Deployment>, wanted: &str, live: &str) -> bool {
        lock(&self.0)
            .map
            .get(key)
            .is_some_and(|c| c.wanted == wanted && c.live == live)
    }

    fn record<K>(&self, key: ObjectRef<Deployment>, checked: Checked, cache: &Store<Packed<K>>)
    where
        K: Resource<DynamicType = ()>,
    {
        let mut inner = lock(&self.0);
        inner.map.insert(key, checked);
        if inner.map.len() >= inner.sweep_at {
            inner.map.retain(|k, _| {
                let ns = k.namespace.as_deref().unwrap_or_default();
                cache.get(&ObjectRef::new(&k.name).within(ns)).is_some()
            });
            inner.sweep_at = (2 * inner.map.len()).max(64);
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
        let key = ObjectRef::new(&live.name_any()).within(&namespace);
        let checked = Checked {
            wanted: template(desired),
            live: template(live),
        };
        lock(&self.0).map.insert(key, checked);
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
    pub deployments: Store<Packed<Deployment>>,
    pub services: Store<Packed<Service>>,
    /// The app's Ingresses, for kinds that own one; empty otherwise.
    pub ingresses: Store<Packed<Ingress>>,
    /// The metadata of the app's pods, for kinds whose status names them; empty otherwise.
    pub pods: Store<PartialObjectMeta<Pod>>,
    pub templates: Arc<CheckedTemplates>,
    /// Until when a reconcile waits for the caches' first lists (`synced`).
    pub sync_deadline: tokio::time::Instant,
}

impl Children {
    /// Caches that stay empty.
    pub fn empty() -> Self {
        Self {
            deployments: reflector::store().0,
            services: reflector::store().0,
            ingresses: reflector::store().0,
            pods: reflector::store().0,
            templates: Arc::default(),
            sync_deadline: tokio::time::Instant::now(),
        }
    }

    /// Returns once every cache that a watch fills has had its first full list, or at the
    /// sync deadline, as controller-runtime waits for its informers before the first reconcile:
    /// a reconcile right after a start then finds the children in the caches instead of
    /// reading each from the apiserver. A cache without a watch (the Ingresses of a kind that
    /// owns none, the pods of one whose status names none, empty caches) counts as synced.
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
    pub deployments: Writer<Packed<Deployment>>,
    pub services: Writer<Packed<Service>>,
    pub ingresses: Writer<Packed<Ingress>>,
    pub pods: Writer<PartialObjectMeta<Pod>>,
    pub templates: Arc<CheckedTemplates>,
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
        let (deployments, dw) = reflector::store();
        let (services, sw) = reflector::store();
        let (ingresses, iw) = reflector::store();
        let (pods, pw) = reflector::store();
        let templates = Arc::new(CheckedTemplates::default());
        lock(&self.0).insert(
            app,
            Children {
                deployments,
                services,
                ingresses,
                pods,
                templates: templates.clone(),
                sync_deadline: tokio::time::Instant::now() + SYNC_WAIT,
            },
        );
        Writers {
            deployments: dw,
            services: sw,
            ingresses: iw,
            pods: pw,
            templates,
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
                && labels.get(label::NAME).map(String::as_str) == Some(app)
                && labels.get(label::INSTANCE).map(String::as_str) == Some(instance)
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

/// The watch config of one app's children, by label.
pub fn children_of(app: &str) -> watcher::Config {
    watcher::Config::default().labels(&owned_by_kubesteer(app))
}

// ---- Applying: only what differs, and never to an object this owner does not control. ----

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
        .insert(annotation::APPLIED.into(), hash);
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
/// `templates` remembers which cached pod templates were found as wanted (see [`Packed`]).
pub async fn ensure<K>(
    ctx: &Context,
    cache: &Store<Packed<K>>,
    templates: &CheckedTemplates,
    desired: &K,
) -> Result<Ensured<K>>
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
            what: "metadata.ownerReferences (controller)",
        })?;
    let namespace = ResourceExt::namespace(&desired).unwrap_or_default();
    let wanted = serde_json::to_value(&desired)?;
    let mut wanted_rest = wanted.clone();
    let wanted_template = take_template(&mut wanted_rest)?;
    let key = Packed::<K>::key(&name, &namespace);
    let template_key = ObjectRef::<Deployment>::new(&name).within(&namespace);
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let ours = |object: K, created| {
        Ok(Ensured::Ours(Applied {
            object: Arc::new(object),
            created,
        }))
    };
    // Records that the live template of `object` (as the apiserver answered) contains the wanted.
    let checked = |object: &K| -> Result<()> {
        if let Some(wanted) = &wanted_template {
            if let Some(live) = take_template(&mut serde_json::to_value(object)?)? {
                let checked = Checked {
                    wanted: wanted.clone(),
                    live,
                };
                templates.record(template_key.clone(), checked, cache);
            }
        }
        Ok(())
    };
    if let Some(cached) = cache.get(&key) {
        let object = cached.object()?;
        if !controlled_by(object.meta(), &owner_uid) {
            return Ok(Ensured::Foreign(NameConflict::new(&kind, &name)));
        }
        if contains(&cached.value()?, &wanted_rest) {
            let template_as_wanted = match (&wanted_template, cached.template()) {
                (None, _) => true,
                (Some(wanted), Some(live)) => templates.is_checked(&template_key, wanted, live),
                (Some(_), None) => false,
            };
            if template_as_wanted {
                ctx.metrics.child(&kind, false);
                return ours(object, false);
            }
            // A template not checked yet (a restart, or a hand edit): read it in full once.
            if let Some(live) = api.get_opt(&name).await? {
                if contains(&serde_json::to_value(&live)?, &wanted) {
                    checked(&live)?;
                    ctx.metrics.child(&kind, false);
                    return ours(object, false);
                }
            }
        }
        ctx.metrics.child(&kind, true);
        let applied = apply(&ctx.client, &desired).await?;
        checked(&applied.object)?;
        return ours(applied.object, applied.created);
    }
    // Not cached: the label-filtered watch misses a same-named object made by someone else.
    let live = match api.get_opt(&name).await? {
        Some(live) => live,
        None => match create_by_apply(&ctx.client, &desired).await {
            Ok(applied) => {
                ctx.metrics.child(&kind, true);
                checked(&applied.object)?;
                return ours(applied.object, applied.created);
            }
            // Made by someone else since the read: their fields conflict, nothing was written.
            Err(Error::Kube(e)) if is_status(&e, 409) => api.get_opt(&name).await?.ok_or(e)?,
            Err(e) => return Err(e),
        },
    };
    if !controlled_by(live.meta(), &owner_uid) {
        return Ok(Ensured::Foreign(NameConflict::new(&kind, &name)));
    }
    let drifted = !contains(&serde_json::to_value(&live)?, &wanted);
    ctx.metrics.child(&kind, drifted);
    if !drifted {
        checked(&live)?;
        return ours(live, false);
    }
    let applied = apply(&ctx.client, &desired).await?;
    checked(&applied.object)?;
    ours(applied.object, false)
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

#[cfg(test)]
mod tests {
    use super::*;
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
        let fingerprint = packed.template().map(str::to_string);
        assert!(fingerprint.is_some());
        let edited = Packed::pack(&deployment("memcached:2")).unwrap();
        assert_ne!(edited.template().map(str::to_string), fingerprint);
        let again = Packed::pack(&deployment("memcached:1")).unwrap();
        assert_eq!(again.template().map(str::to_string), fingerprint);
        let service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "cache"},
            "spec": {"ports": [{"port": 80}]}
        }))
        .unwrap();
        assert_eq!(Packed::pack(&service).unwrap().template(), None);
    }

    #[test]
    fn pods_are_named_by_app_instance_and_namespace_and_terminating_ones_are_left_out() {
        let (store, mut writer) = reflector::store::<PartialObjectMeta<Pod>>();
        let pod = |ns: &str, name: &str, instance: &str, deleting: bool| {
            let mut p: PartialObjectMeta<Pod> = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns,
                    "labels": {label::NAME: "memcached", label::INSTANCE: instance}}
            }))
            .unwrap();
            if deleting {
                p.metadata.deletion_timestamp = Some(crate::reconcilers::time(chrono::Utc::now()));
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
