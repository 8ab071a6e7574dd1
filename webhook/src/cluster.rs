//! What the admission rules need from the cluster, behind a trait so handlers can be tested alone.
use std::future::Future;
use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, reflector, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use kubesteer_api::access::Access;
use kubesteer_api::application::hosts::overlap;
use kubesteer_api::scaler::claims::{Claimant, Claims};
use kubesteer_api::scaler::target::Target;
use kubesteer_api::Scaler;
use kubesteer_runtime::scale::{Mapping, RestMapper};
use kubesteer_runtime::watch::{self as tolerant, Undecodable};
use kubesteer_runtime::{health, Health};

use crate::hosts::HostClaims;

/// The cluster facts the Scaler rules depend on. The lookups in the webhook's caches (claimant,
/// holder, target_exists, hpa_for, keda_scales, ingress_class_exists, ingresses_serving,
/// host_owner) answer by default as a cluster of which nothing is cached yet: nothing found,
/// existence unknown. [`KubeCluster`] answers them all from its caches.
pub trait Cluster: Send + Sync + 'static {
    /// Whether `user` holds `access` (a SubjectAccessReview).
    fn permitted(
        &self,
        user: &UserInfo,
        access: &Access,
    ) -> impl Future<Output = Result<bool, String>> + Send;
    /// The resource of a Scaler target's kind, or why it cannot be scaled (the RESTMapper); Err
    /// when discovery could not be asked.
    fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> impl Future<Output = Result<Mapping, String>> + Send;
    /// The other Scaler (`namespace/name`) that names this target in its spec and is older than
    /// `me`, so owns it, if any (`kubesteer_api::scaler::claims`: a Scaler under CREATE is the youngest).
    fn claimant(&self, _target: &Target, _me: &Claimant) -> Option<String> {
        None
    }
    /// The older Scaler that holds the target without naming it (by its selector, or until it
    /// has given it back), which lets it go to one that names it.
    fn holder(&self, _target: &Target, _me: &Claimant) -> Option<String> {
        None
    }
    /// Whether the target exists; None while the cache is not yet filled, or for a kind the
    /// webhook keeps no cache of (only Deployments are cached).
    fn target_exists(&self, _target: &Target) -> Option<bool> {
        None
    }
    /// The HorizontalPodAutoscaler that scales this target, if any.
    fn hpa_for(&self, _target: &Target) -> Option<String> {
        None
    }
    /// Whether the HPA that scales this target is a KEDA ScaledObject's.
    fn keda_scales(&self, _target: &Target) -> bool {
        false
    }
    /// Whether an IngressClass of this name exists; None while the cache is not yet filled.
    fn ingress_class_exists(&self, _name: &str) -> Option<bool> {
        None
    }
    /// The Ingresses (namespace, name), other than `me`, with a rule for `host` and `path`.
    fn ingresses_serving(
        &self,
        _host: &str,
        _path: &str,
        _me: (&str, &str),
    ) -> Vec<(String, String)> {
        Vec::new()
    }
    /// The Ingress (namespace, name) that serves `host` first (the oldest with a rule for it, or
    /// for a wildcard that covers it, or, for a wildcard, for a host it covers), when it is in
    /// another namespace than `namespace`: the host is that namespace's.
    fn host_owner(&self, _host: &str, _namespace: &str) -> Option<(String, String)> {
        None
    }
    /// Claims `host` for `namespace` ([`kubesteer_api::application::hosts`], through the
    /// apiserver): Ok(None) when it is that namespace's now, Ok(Some(by)) when another namespace
    /// holds `by` (the host, or a wildcard or host overlapping it); Err when the apiserver could
    /// not be asked. With `dry_run` nothing is written.
    fn claim_host(
        &self,
        _host: &str,
        _namespace: &str,
        _dry_run: bool,
    ) -> impl Future<Output = Result<Option<String>, String>> + Send {
        std::future::ready(Ok(None))
    }
}

/// The real cluster: watch-backed caches, so a review never LISTs.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    /// Which Scalers claim each target, kept from a watch: one lookup per target.
    claims: Claims,
    /// Which resource a target's kind is (discovery, cached).
    mapper: Arc<RestMapper>,
    deployments: Store<PartialObjectMeta<Deployment>>,
    hpas: Store<HorizontalPodAutoscaler>,
    ingresses: Store<Ingress>,
    ingress_classes: Store<PartialObjectMeta<IngressClass>>,
    /// The host claims, when the webhook keeps them ([`KubeCluster::with_host_claims`]).
    hosts: Option<HostClaims>,
}

impl KubeCluster {
    /// Starts the watches, each registered with `health` so that the webhook is not ready
    /// until all have listed, nor while one is down; their tasks run until the process ends.
    pub fn start(client: Client, health: &Health) -> Self {
        let claims = Claims::default();
        let (deployments, w2) = reflector::store();
        let (hpas, w3) = reflector::store();
        let cfg = kubesteer_runtime::watch::config().any_semantic();
        let skipped = |o: Undecodable| {
            tracing::warn!(
                kind = "Scaler",
                namespace = o.namespace.as_deref().unwrap_or_default(),
                name = %o.name,
                error = %o.error,
                "cannot decode this object, so target overlaps with it are not checked; fix or delete it"
            )
        };
        let scalers_api = tolerant::api::<Scaler>(client.clone(), None);
        let key = health::key(&scalers_api, &cfg);
        let scaler_watch = tolerant::watcher::<Scaler>(scalers_api, cfg.clone(), skipped);
        let mut follow = kubesteer_runtime::claims::follow(&claims);
        tokio::spawn(
            health
                .track("Scaler", key, scaler_watch)
                .backoff(tolerant::backoff())
                .for_each(move |event| {
                    if let Ok(event) = &event {
                        follow(event);
                    }
                    futures::future::ready(())
                }),
        );
        // Names are all the rules read of a Deployment: metadata-only requests.
        let deployments_api = Api::<PartialObjectMeta<Deployment>>::all(client.clone());
        let key = health::key(&deployments_api, &cfg);
        let deployment_watch = watcher(deployments_api, cfg.clone());
        spawn_cache(w2, health.track("Deployment", key, deployment_watch));
        let hpas_api = Api::<HorizontalPodAutoscaler>::all(client.clone());
        let key = health::key(&hpas_api, &cfg);
        let hpa_watch = watcher(hpas_api, cfg.clone());
        spawn_cache(w3, health.track("HorizontalPodAutoscaler", key, hpa_watch));
        // Hosts and paths are what the Application warnings read of an Ingress.
        let (ingresses, w4) = reflector::store();
        let ingresses_api = Api::<Ingress>::all(client.clone());
        let key = health::key(&ingresses_api, &cfg);
        let ingress_watch = watcher(ingresses_api, cfg.clone()).modify(trim_ingress);
        spawn_cache(w4, health.track("Ingress", key, ingress_watch));
        let (ingress_classes, w5) = reflector::store();
        let classes_api = Api::<PartialObjectMeta<IngressClass>>::all(client.clone());
        let key = health::key(&classes_api, &cfg);
        let class_watch = watcher(classes_api, cfg);
        spawn_cache(w5, health.track("IngressClass", key, class_watch));
        Self {
            mapper: Arc::new(RestMapper::new(client.clone())),
            client,
            claims,
            deployments,
            hpas,
            ingresses,
            ingress_classes,
            hosts: None,
        }
    }

    /// Claims hosts for Applications in [`kubesteer_api::application::hosts::HostClaim`]s.
    pub fn with_host_claims(mut self) -> Self {
        self.hosts = Some(HostClaims::new(self.client.clone()));
        self
    }
}

/// What the cache keeps of an Ingress: its name, age and its rules' hosts and paths.
fn trim_ingress(ingress: &mut Ingress) {
    ingress.metadata = kube::api::ObjectMeta {
        name: ingress.metadata.name.take(),
        namespace: ingress.metadata.namespace.take(),
        creation_timestamp: ingress.metadata.creation_timestamp.take(),
        ..Default::default()
    };
    ingress.status = None;
    if let Some(spec) = ingress.spec.as_mut() {
        spec.tls = None;
        spec.default_backend = None;
    }
}

/// Whether `ingress` has a rule for exactly `host` and `path`.
pub fn serves(ingress: &Ingress, host: &str, path: &str) -> bool {
    ingress
        .spec
        .iter()
        .flat_map(|s| s.rules.iter().flatten())
        .filter(|r| r.host.as_deref() == Some(host))
        .flat_map(|r| r.http.iter().flat_map(|h| &h.paths))
        .any(|p| p.path.as_deref().unwrap_or("/") == path)
}

/// Keeps `writer`'s cache filled from `events` in a task of its own.
fn spawn_cache<K>(
    writer: Writer<K>,
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    tokio::spawn(
        reflector(writer, events)
            .backoff(tolerant::backoff())
            .for_each(|_| futures::future::ready(())),
    );
}

impl Cluster for KubeCluster {
    async fn permitted(&self, user: &UserInfo, access: &Access) -> Result<bool, String> {
        kubesteer_runtime::access::permitted(&self.client, user, access)
            .await
            .map_err(|e| e.to_string())
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<Mapping, String> {
        self.mapper
            .resolve(api_version, kind)
            .await
            .map_err(|e| e.to_string())
    }

    fn claimant(&self, target: &Target, me: &Claimant) -> Option<String> {
        self.claims
            .read()
            .older_naming(target, me)
            .map(Claimant::id)
    }

    fn holder(&self, target: &Target, me: &Claimant) -> Option<String> {
        self.claims
            .read()
            .older_claimant(target, me)
            .map(Claimant::id)
    }

    fn target_exists(&self, target: &Target) -> Option<bool> {
        if *target != Target::deployment(&target.namespace, &target.name) {
            return None;
        }
        // The store is ready once its watch has listed; the check does not wait.
        self.deployments.wait_until_ready().now_or_never()?.ok()?;
        let key = reflector::ObjectRef::new(&target.name).within(&target.namespace);
        Some(self.deployments.get(&key).is_some())
    }

    fn ingress_class_exists(&self, name: &str) -> Option<bool> {
        self.ingress_classes
            .wait_until_ready()
            .now_or_never()?
            .ok()?;
        Some(
            self.ingress_classes
                .get(&reflector::ObjectRef::new(name))
                .is_some(),
        )
    }

    fn ingresses_serving(&self, host: &str, path: &str, me: (&str, &str)) -> Vec<(String, String)> {
        let mut found: Vec<(String, String)> = self
            .ingresses
            .state()
            .iter()
            .filter(|i| serves(i, host, path))
            .map(|i| (i.namespace().unwrap_or_default(), i.name_any()))
            .filter(|(ns, name)| (ns.as_str(), name.as_str()) != me)
            .collect();
        found.sort();
        found
    }

    async fn claim_host(
        &self,
        host: &str,
        namespace: &str,
        dry_run: bool,
    ) -> Result<Option<String>, String> {
        match &self.hosts {
            Some(hosts) => hosts.claim(host, namespace, dry_run).await,
            None => Ok(None),
        }
    }

    fn host_owner(&self, host: &str, namespace: &str) -> Option<(String, String)> {
        // The same host, or a wildcard and a host it covers, either way round.
        let serves_host = |i: &Ingress| {
            i.spec
                .iter()
                .flat_map(|s| s.rules.iter().flatten())
                .any(|r| r.host.as_deref().is_some_and(|h| overlap(h, host)))
        };
        let first = self
            .ingresses
            .state()
            .iter()
            .filter(|i| serves_host(i))
            .map(|i| {
                let age = i.metadata.creation_timestamp.clone().map(|t| t.0);
                (age, i.namespace().unwrap_or_default(), i.name_any())
            })
            .min()?;
        let (_, ns, name) = first;
        (ns != namespace).then_some((ns, name))
    }

    fn keda_scales(&self, target: &Target) -> bool {
        self.hpas.state().iter().any(|h| {
            let Some(t) = h.spec.as_ref().map(|s| &s.scale_target_ref) else {
                return false;
            };
            let scales = Target::new(
                t.api_version.as_deref().unwrap_or_default(),
                &t.kind,
                &h.namespace().unwrap_or_default(),
                &t.name,
            );
            scales == *target
                && kubesteer_api::scaler::v1beta1::keda_owner(h.owner_references()).is_some()
        })
    }

    fn hpa_for(&self, target: &Target) -> Option<String> {
        self.hpas.state().iter().find_map(|h| {
            let t = &h.spec.as_ref()?.scale_target_ref;
            let scales = Target::new(
                t.api_version.as_deref().unwrap_or_default(),
                &t.kind,
                &h.namespace().unwrap_or_default(),
                &t.name,
            );
            (scales == *target).then(|| h.name_any())
        })
    }
}
