//! Scaler targets of any kind: a RESTMapper (which resource an `apiVersion` and `kind` name, and
//! whether it has a `/scale` subresource), and reads and writes through that subresource.
//!
//! The webhook denies a target the mapper cannot scale, naming the field; the controller scales
//! what it maps. Answers are cached: a mapping for [`FOUND_TTL`], a refusal for [`MISSING_TTL`],
//! so a CRD installed after a Scaler that names it is picked up soon.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v1::Scale;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use kube::Client;

/// How long a found resource is trusted before discovery is asked again.
pub const FOUND_TTL: Duration = Duration::from_secs(600);
/// How long a kind that was not found, or found without `/scale`, stays refused.
pub const MISSING_TTL: Duration = Duration::from_secs(30);

/// Why a target cannot be scaled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unscalable {
    #[error("the cluster serves no kind {kind:?} in {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    #[error("{kind} ({api_version}) has no /scale subresource, so it cannot be scaled")]
    NoScaleSubresource { api_version: String, kind: String },
    #[error("{kind} ({api_version}) is cluster-scoped; a Scaler scales namespaced workloads")]
    ClusterScoped { api_version: String, kind: String },
}

/// A resolved target kind: the resource to address, and its `/scale` subresource.
pub type Mapping = Result<ApiResource, Unscalable>;

type Key = (String, String);

/// Discovery's answers by `(apiVersion, kind)`, with the time each was had.
#[derive(Default)]
struct Cache(Mutex<HashMap<Key, (Instant, Mapping)>>);

impl Cache {
    /// The answer for `key`, while it is fresh at `now`.
    fn get(&self, key: &Key, now: Instant) -> Option<Mapping> {
        let cache = self.lock();
        let (at, mapping) = cache.get(key)?;
        let ttl = if mapping.is_ok() {
            FOUND_TTL
        } else {
            MISSING_TTL
        };
        (now.duration_since(*at) < ttl).then(|| mapping.clone())
    }

    fn put(&self, key: Key, at: Instant, mapping: Mapping) {
        self.lock().insert(key, (at, mapping));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Instant, Mapping)>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Which resource a kind is, from the apiserver's discovery, with a cache.
pub struct RestMapper {
    client: Client,
    cache: Cache,
}

impl RestMapper {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Cache::default(),
        }
    }

    /// Takes `mapping` as the answer for `api_version`/`kind` for the usual time, as if
    /// discovery had given it (tests, and kinds known without asking).
    pub fn remember(&self, api_version: &str, kind: &str, mapping: Mapping) {
        let key = (api_version.to_string(), kind.to_string());
        self.cache.put(key, Instant::now(), mapping);
    }

    /// The resource of `api_version`/`kind`, or why it cannot be scaled; Err only when the
    /// apiserver could not be asked.
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<Mapping, kube::Error> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(cached) = self.cache.get(&key, Instant::now()) {
            return Ok(cached);
        }
        let mapping = self.discover(api_version, kind).await?;
        self.cache.put(key, Instant::now(), mapping.clone());
        Ok(mapping)
    }

    async fn discover(&self, api_version: &str, kind: &str) -> Result<Mapping, kube::Error> {
        let unknown = || Unscalable::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        };
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, caps)) => Ok(mapping_of(
                resource,
                caps.scope,
                caps.subresources.iter().any(|(s, _)| s.plural == "scale"),
            )),
            // An unknown group or version is a 404; an unknown kind in a known one, a discovery error.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Err(unknown())),
            Err(kube::Error::Discovery(_)) => Ok(Err(unknown())),
            Err(e) => Err(e),
        }
    }

    /// The `/scale` of `namespace/name`, None when it does not exist.
    pub async fn get_scale(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Scale>, kube::Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, resource);
        match api.get_scale(name).await {
            Ok(scale) => Ok(Some(scale)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets the replicas of `namespace/name` through `/scale`, conditional on the
    /// `resource_version` read when given (a concurrent change is a 409 to retry on a fresh read).
    pub async fn set_replicas(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        replicas: i32,
        resource_version: Option<&str>,
        params: &PatchParams,
    ) -> Result<Scale, kube::Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, resource);
        let mut patch = serde_json::json!({"spec": {"replicas": replicas}});
        if let Some(rv) = resource_version {
            patch["metadata"] = serde_json::json!({"resourceVersion": rv});
        }
        api.patch_scale(name, params, &Patch::Merge(&patch)).await
    }
}

/// What discovery's answer means for a Scaler target.
fn mapping_of(resource: ApiResource, scope: Scope, has_scale: bool) -> Mapping {
    let refuse = |r: &ApiResource| (r.api_version.clone(), r.kind.clone());
    match (scope, has_scale) {
        (Scope::Cluster, _) => {
            let (api_version, kind) = refuse(&resource);
            Err(Unscalable::ClusterScoped { api_version, kind })
        }
        (Scope::Namespaced, false)
            if kubesteer_api::scaler::v1beta1::suspended_instead(
                &resource.group,
                &resource.plural,
            ) =>
        {
            Ok(resource)
        }
        (Scope::Namespaced, false) => {
            let (api_version, kind) = refuse(&resource);
            Err(Unscalable::NoScaleSubresource { api_version, kind })
        }
        (Scope::Namespaced, true) => Ok(resource),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    #[test]
    fn only_a_namespaced_kind_with_scale_maps() {
        let sts = resource("StatefulSet", "statefulsets");
        assert_eq!(
            mapping_of(sts.clone(), Scope::Namespaced, true),
            Ok(sts.clone())
        );
        assert_eq!(
            mapping_of(
                resource("ConfigMap", "configmaps"),
                Scope::Namespaced,
                false
            )
            .unwrap_err()
            .to_string(),
            "ConfigMap (apps/v1) has no /scale subresource, so it cannot be scaled"
        );
        assert!(matches!(
            mapping_of(sts, Scope::Cluster, true),
            Err(Unscalable::ClusterScoped { .. })
        ));
        // A CronJob has no /scale, and is suspended instead.
        let cron = ApiResource {
            group: "batch".into(),
            version: "v1".into(),
            api_version: "batch/v1".into(),
            kind: "CronJob".into(),
            plural: "cronjobs".into(),
        };
        assert_eq!(mapping_of(cron.clone(), Scope::Namespaced, false), Ok(cron));
    }

    #[test]
    fn answers_are_cached_a_refusal_more_briefly() {
        let cache = Cache::default();
        let found = ("apps/v1".to_string(), "StatefulSet".to_string());
        let missing = ("example.com/v1".to_string(), "Widget".to_string());
        let t0 = Instant::now();
        cache.put(
            found.clone(),
            t0,
            Ok(resource("StatefulSet", "statefulsets")),
        );
        let unknown = Unscalable::UnknownKind {
            api_version: missing.0.clone(),
            kind: missing.1.clone(),
        };
        cache.put(missing.clone(), t0, Err(unknown));
        let later = t0 + MISSING_TTL + Duration::from_secs(1);
        assert!(cache.get(&found, later).is_some());
        assert!(cache.get(&missing, t0).is_some());
        assert!(cache.get(&missing, later).is_none(), "asked again");
        assert!(cache.get(&found, t0 + FOUND_TTL).is_none());
        assert_eq!(
            cache.get(&missing, t0).map(|m| m.unwrap_err().to_string()),
            Some("the cluster serves no kind \"Widget\" in \"example.com/v1\"".to_string())
        );
    }
}
