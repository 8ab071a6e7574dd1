//! Scaler targets of any kind: a RESTMapper (which resource an `apiVersion` and `kind` name, and
//! whether it has a `/scale` subresource), and reads and writes through that subresource.
//!
//! The webhook denies a target the mapper cannot scale, naming the field; the controller scales
//! what it maps. Answers are cached in an [`AnswerCache`] (moka): a mapping for [`FOUND_TTL`], a
//! refusal for [`MISSING_TTL`], so a CRD installed after a Scaler that names it is picked up
//! soon; the same kind asked at once is looked up once.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v1::Scale;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use kube::Client;

use crate::answer_cache::{AnswerCache, Verdict};

/// How long a found resource is trusted before discovery is asked again.
pub const FOUND_TTL: Duration = Duration::from_secs(600);
/// How long a kind that was not found, or found without `/scale`, stays refused.
pub const MISSING_TTL: Duration = Duration::from_secs(30);

/// Why a target cannot be scaled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unscalable {
    #[error("the cluster serves no kind {kind:?} in {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    #[error("{kind} ({api_version}) has no /scale subresource, so it cannot be scaled; declare a patch for it in spec.patches to put it to sleep")]
    NoScaleSubresource {
        api_version: String,
        kind: String,
        /// Its resource, for a Scaler that puts it to sleep by a declared patch.
        plural: String,
    },
    #[error("{kind} ({api_version}) is cluster-scoped; a Scaler scales namespaced workloads")]
    ClusterScoped { api_version: String, kind: String },
}

/// A resolved target kind: the resource to address, and its `/scale` subresource.
pub type Mapping = Result<ApiResource, Unscalable>;

/// `mapping`, with a namespaced kind without `/scale` taken as its resource when `patched`
/// says the Scaler declares a patch for its group and kind (`spec.patches`): such a target is
/// put to sleep by that patch instead of being scaled.
pub fn or_patched(mapping: Mapping, patched: impl FnOnce(&str, &str) -> bool) -> Mapping {
    match mapping {
        Err(Unscalable::NoScaleSubresource {
            api_version,
            kind,
            plural,
        }) => {
            let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
            if patched(group, &kind) {
                return Ok(ApiResource {
                    group: group.to_string(),
                    version: version.to_string(),
                    api_version: api_version.clone(),
                    kind,
                    plural,
                });
            }
            Err(Unscalable::NoScaleSubresource {
                api_version,
                kind,
                plural,
            })
        }
        other => other,
    }
}

type Key = (String, String);

/// How many kinds' answers are kept; a cluster serves a few hundred kinds.
const CAPACITY: u64 = 1024;

impl Verdict for Mapping {
    fn grants(&self) -> bool {
        self.is_ok()
    }
}

/// Which resource a kind is, from the apiserver's discovery, with a cache.
pub struct RestMapper {
    client: Client,
    cache: AnswerCache<Key, Mapping>,
}

impl RestMapper {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: AnswerCache::new(CAPACITY, FOUND_TTL, MISSING_TTL),
        }
    }

    /// Takes `mapping` as the answer for `api_version`/`kind` for the usual time, as if
    /// discovery had given it (tests, and kinds known without asking).
    pub async fn remember(&self, api_version: &str, kind: &str, mapping: Mapping) {
        let key = (api_version.to_string(), kind.to_string());
        self.cache.remember(key, mapping).await;
    }

    /// The resource of `api_version`/`kind`, or why it cannot be scaled; Err only when the
    /// apiserver could not be asked (a caller that waited on another's lookup gets its error as
    /// text).
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<Mapping, kube::Error> {
        let key = (api_version.to_string(), kind.to_string());
        self.cache
            .get_or_ask(key, self.discover(api_version, kind))
            .await
            .map_err(|shared| {
                Arc::try_unwrap(shared)
                    .unwrap_or_else(|e| kube::Error::Service(e.to_string().into()))
            })
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
        client: &Client,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        replicas: i32,
        resource_version: Option<&str>,
        params: &PatchParams,
    ) -> Result<Scale, kube::Error> {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
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
            Err(Unscalable::NoScaleSubresource {
                api_version,
                kind,
                plural: resource.plural,
            })
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
            "ConfigMap (apps/v1) has no /scale subresource, so it cannot be scaled; declare a patch for it in spec.patches to put it to sleep"
        );
        // Unless the Scaler declares a patch for it: then it is addressed as itself.
        let cm = resource("ConfigMap", "configmaps");
        let unscaled = || mapping_of(cm.clone(), Scope::Namespaced, false);
        assert_eq!(
            or_patched(unscaled(), |g, k| (g, k) == ("apps", "ConfigMap")),
            Ok(cm.clone())
        );
        assert!(or_patched(unscaled(), |_, _| false).is_err());
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
        assert_eq!(
            mapping_of(cron.clone(), Scope::Namespaced, false),
            Ok(cron.clone())
        );
        // A Job too.
        let job = ApiResource {
            kind: "Job".into(),
            plural: "jobs".into(),
            ..cron
        };
        assert_eq!(mapping_of(job.clone(), Scope::Namespaced, false), Ok(job));
    }

    #[tokio::test]
    async fn a_remembered_answer_is_used_without_asking_the_apiserver() {
        // Nothing listens on this address: a lookup would fail.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let mapper = RestMapper::new(Client::try_from(config).unwrap());
        let sts = resource("StatefulSet", "statefulsets");
        mapper
            .remember("apps/v1", "StatefulSet", Ok(sts.clone()))
            .await;
        let unknown = Unscalable::UnknownKind {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
        };
        mapper
            .remember("example.com/v1", "Widget", Err(unknown.clone()))
            .await;
        assert_eq!(
            mapper.resolve("apps/v1", "StatefulSet").await.unwrap(),
            Ok(sts)
        );
        assert_eq!(
            mapper.resolve("example.com/v1", "Widget").await.unwrap(),
            Err(unknown)
        );
        assert!(mapper.resolve("apps/v1", "Deployment").await.is_err());
    }
}
