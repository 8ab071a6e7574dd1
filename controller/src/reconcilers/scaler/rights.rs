//! The rights of a Scaler's author, asked again while the Scaler acts. The webhook checks them
//! when the spec is set and records who set it (api's `access::author`); a right taken away
//! after that would otherwise leave the controller scaling on the author's behalf for as long
//! as the Scaler exists. So every pass of a Scaler with a recorded author asks the apiserver
//! (SubjectAccessReviews, answers kept [`GRANT_TTL`]) whether the author still holds every right
//! the spec needs, the same list the webhook asks ([`ScalerSpec::required_access`]); one
//! missing stops the Scaler before it writes anything, and such a Scaler is looked at again
//! every [`RECHECK`], so that it stops within `RECHECK + GRANT_TTL` (50 s) of the right going
//! and resumes as soon after it comes back.
//!
//! A Scaler admitted before authors were recorded has none, and is not checked until its spec
//! next changes.
use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use kube::Client;
use kubesteer_api::access::{author, Access};
use kubesteer_api::scaler::target::Target;
use kubesteer_api::scaler::v1beta1::HpaCooperation;
use kubesteer_api::{Scaler, ScalerSpec};
use kubesteer_runtime::answer_cache::AnswerCache;
use kubesteer_runtime::scale::RestMapper;

pub use kubesteer_api::access::author::{DENIAL_TTL, GRANT_TTL, RECHECK};
/// Answers kept: authors times the rights their Scalers need.
const CAPACITY: u64 = 20_000;

/// What a pass finds of its author's rights.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    /// No author recorded: nothing to check.
    Unrecorded,
    /// The author holds every right the spec needs.
    Held,
    /// The author no longer holds this one (the first missing, with its field path), or the
    /// record cannot be read: the Scaler writes nothing.
    Missing(String),
}

/// The answers about authors' rights, kept briefly.
pub struct Rights {
    answers: AnswerCache<(String, Access), bool>,
}

impl Default for Rights {
    fn default() -> Self {
        Self {
            answers: AnswerCache::new(CAPACITY, GRANT_TTL, DENIAL_TTL),
        }
    }
}

impl Rights {
    /// Whether the recorded author of `scaler` (in namespace `ns`) still holds every right its
    /// spec needs; an error when the apiserver could not say. `keda_scales` tells the named
    /// targets a KEDA ScaledObject scales (the HPA watch's view), whose ScaledObjects the
    /// Scaler pauses: their author must still be allowed to patch those too.
    pub async fn standing(
        &self,
        client: &Client,
        mapper: &RestMapper,
        scaler: &Scaler,
        ns: &str,
        keda_scales: impl Fn(&Target) -> bool,
    ) -> crate::Result<Standing> {
        let record = scaler
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(kubesteer_api::keys::annotation::AUTHOR));
        let Some(record) = record else {
            return Ok(Standing::Unrecorded);
        };
        let user = match author::read(record) {
            Ok(user) => user,
            Err(why) => return Ok(Standing::Missing(why)),
        };
        let mut rights = required(mapper, &scaler.spec, ns).await;
        rights.extend(keda_rights(&scaler.spec, ns, keda_scales));
        for (path, access) in rights {
            let key = (record.clone(), access.clone());
            let held = self
                .answers
                .get_or_ask(key, ask(client, &user, &access))
                .await
                .map_err(|e| crate::Error::Rights(e.to_string()))?;
            if !held {
                return Ok(Standing::Missing(missing(&user, &path, &access)));
            }
        }
        Ok(Standing::Held)
    }
}

/// The rights `spec` needs, as the webhook asks them; kinds that discovery cannot map are
/// left out (the pass reports those targets as not scalable, and writes nothing to them).
async fn required(mapper: &RestMapper, spec: &ScalerSpec, ns: &str) -> Vec<(String, Access)> {
    let mut kinds: Vec<(String, String)> = spec
        .targets(ns)
        .map(|(t, _)| (t.api_version.clone(), t.kind.clone()))
        .collect();
    if let Some(selector) = &spec.selector {
        kinds.extend(selector.kinds());
    }
    let mut resources = BTreeMap::new();
    for (api_version, kind) in kinds {
        let mapping = mapper.resolve(&api_version, &kind).await.map(|m| {
            kubesteer_runtime::scale::or_patched(m, |g, k| spec.patch_for(g, k).is_some())
        });
        if let Ok(Ok(resource)) = mapping {
            resources.insert((api_version, kind), resource.plural);
        }
    }
    spec.required_access(ns, |api_version, kind| {
        resources
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
    })
}

/// `patch` on the ScaledObjects of each namespace where a named target is scaled by KEDA, as
/// the webhook asks it, while the Scaler cooperates with autoscalers.
fn keda_rights(
    spec: &ScalerSpec,
    ns: &str,
    keda_scales: impl Fn(&Target) -> bool,
) -> Vec<(String, Access)> {
    if spec.hpa_cooperation() != HpaCooperation::Enabled {
        return Vec::new();
    }
    let mut namespaces = BTreeMap::new();
    for (i, (target, target_ns)) in spec.targets(ns).enumerate() {
        if keda_scales(&target.target(target_ns)) {
            namespaces
                .entry(target_ns.to_string())
                .or_insert(format!("spec.scaleTargetRefs[{i}]"));
        }
    }
    namespaces
        .into_iter()
        .map(|(ns, path)| (path, Access::patch_scaled_objects(&ns)))
        .collect()
}

async fn ask(client: &Client, user: &UserInfo, access: &Access) -> kube::Result<bool> {
    kubesteer_runtime::access::permitted(client, user, access).await
}

/// Reads like the webhook's denial: `spec.scaleTargetRefs[0]: user "alice" may no longer
/// patch deployments/scale (apps) "web" in namespace "team"`.
fn missing(user: &UserInfo, path: &str, access: &Access) -> String {
    let who = user.username.as_deref().unwrap_or("(unnamed)");
    format!("{path}: the spec's author, user {who:?}, may no longer {access}; the Scaler writes nothing until they may again, or someone who may changes the spec")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_keda_scales_needs_patch_on_its_namespaces_scaled_objects() {
        let spec: ScalerSpec = serde_json::from_value(serde_json::json!({
            "scaleTargetRefs": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "db", "namespace": "data"}
            ],
            "windows": [{"start": 9, "end": 17}]
        }))
        .unwrap();
        let keda = |t: &Target| t.name != "db";
        let rights = keda_rights(&spec, "team", keda);
        assert_eq!(
            rights,
            vec![(
                "spec.scaleTargetRefs[0]".to_string(),
                Access::patch_scaled_objects("team")
            )],
            "once per namespace, at the first such target"
        );
        let off = ScalerSpec {
            hpa_cooperation: Some(HpaCooperation::Disabled),
            ..spec
        };
        assert!(keda_rights(&off, "team", keda).is_empty());
    }

    #[test]
    fn the_message_names_the_author_the_field_and_the_right() {
        let user = UserInfo {
            username: Some("alice".into()),
            ..Default::default()
        };
        let m = missing(
            &user,
            "spec.scaleTargetRefs[0]",
            &Access::scale_deployment("team", "web"),
        );
        assert!(
            m.starts_with("spec.scaleTargetRefs[0]: the spec's author, user \"alice\", may no longer patch deployments/scale (apps) \"web\" in namespace \"team\""),
            "{m}"
        );
    }
}
