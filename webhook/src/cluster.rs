//! What the admission rules need from the cluster, behind a trait so handlers can be tested alone.
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{reflector::reflector, watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use kubesteer_api::access::Access;
use kubesteer_api::Scaler;

/// The cluster facts the Scaler rules depend on.
pub trait Cluster: Send + Sync + 'static {
    /// Whether `user` holds `access` (a SubjectAccessReview).
    fn permitted(
        &self,
        user: &UserInfo,
        access: &Access,
    ) -> impl Future<Output = Result<bool, String>> + Send;
    /// The other Scaler (`namespace/name`) that already targets this Deployment, if any.
    fn claimant(&self, target: (&str, &str), me: (&str, &str)) -> Option<String>;
    /// Whether the Deployment exists; None while the cache is not yet filled.
    fn deployment_exists(&self, namespace: &str, name: &str) -> Option<bool>;
    /// The HorizontalPodAutoscaler that also scales this Deployment, if any.
    fn hpa_for(&self, namespace: &str, name: &str) -> Option<String>;
    /// Whether every cache has been filled once.
    fn ready(&self) -> bool;
}

/// The real cluster: watch-backed caches, so a review never LISTs.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    scalers: Store<Scaler>,
    deployments: Store<PartialObjectMeta<Deployment>>,
    hpas: Store<HorizontalPodAutoscaler>,
    synced: Arc<AtomicBool>,
}

impl KubeCluster {
    /// Starts the watches; their tasks run until the process ends.
    pub fn start(client: Client) -> Self {
        let (scalers, w1) = reflector::store();
        let (deployments, w2) = reflector::store();
        let (hpas, w3) = reflector::store();
        let cfg = watcher::Config::default().any_semantic();
        tokio::spawn(
            reflector(
                w1,
                kubesteer_api::watch::watcher::<Scaler>(client.clone(), None, cfg.clone(), |o| {
                    tracing::warn!(kind = "Scaler", namespace = o.namespace.as_deref().unwrap_or_default(), name = %o.name, error = %o.error,
                        "cannot decode this object, so target overlaps with it are not checked; fix or delete it")
                }),
            )
                .default_backoff()
                .touched_objects()
                .for_each(|_| futures::future::ready(())),
        );
        tokio::spawn(
            reflector(
                w2,
                watcher(
                    Api::<PartialObjectMeta<Deployment>>::all(client.clone()),
                    cfg.clone(),
                ),
            )
            .default_backoff()
            .touched_objects()
            .for_each(|_| futures::future::ready(())),
        );
        tokio::spawn(
            reflector(
                w3,
                watcher(Api::<HorizontalPodAutoscaler>::all(client.clone()), cfg),
            )
            .default_backoff()
            .touched_objects()
            .for_each(|_| futures::future::ready(())),
        );
        let cluster = Self {
            client,
            scalers,
            deployments,
            hpas,
            synced: Arc::default(),
        };
        let waiting = cluster.clone();
        tokio::spawn(async move { waiting.wait_ready().await });
        cluster
    }

    /// Resolves once every cache holds its first full list.
    pub async fn wait_ready(&self) {
        let filled = self.scalers.wait_until_ready().await.is_ok()
            && self.deployments.wait_until_ready().await.is_ok()
            && self.hpas.wait_until_ready().await.is_ok();
        self.synced.store(filled, Ordering::Release);
    }
}

impl Cluster for KubeCluster {
    async fn permitted(&self, user: &UserInfo, access: &Access) -> Result<bool, String> {
        let optional = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(access.group.into()),
                    resource: Some(access.resource.into()),
                    subresource: optional(access.subresource),
                    verb: Some(access.verb.into()),
                    namespace: Some(access.namespace.clone()),
                    name: optional(&access.name),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer.status.map(|s| s.allowed).unwrap_or(false))
    }

    fn claimant(&self, target: (&str, &str), me: (&str, &str)) -> Option<String> {
        self.scalers.state().iter().find_map(|s| {
            let ns = s.namespace().unwrap_or_default();
            if (ns.as_str(), s.name_any().as_str()) == me {
                return None;
            }
            let claims = s.spec.targets(&ns).any(|t| t == target);
            claims.then(|| format!("{ns}/{}", s.name_any()))
        })
    }

    fn deployment_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        let key = reflector::ObjectRef::new(name).within(namespace);
        self.ready().then(|| self.deployments.get(&key).is_some())
    }

    fn hpa_for(&self, namespace: &str, name: &str) -> Option<String> {
        self.hpas.state().iter().find_map(|h| {
            let t = &h.spec.as_ref()?.scale_target_ref;
            (h.namespace().as_deref() == Some(namespace)
                && t.kind == "Deployment"
                && t.name == name)
                .then(|| h.name_any())
        })
    }

    fn ready(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}
