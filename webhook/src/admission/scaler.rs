//! The Scaler rules that need the cluster or the Scaler's namespace: targets that are one once
//! resolved, permission on every target, claims, and advice.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubesteer_api::access::Access;
use kubesteer_api::field::FieldError;
use kubesteer_api::scaler::claims::Claimant;
use kubesteer_api::scaler::v1beta1::HpaCooperation;
use kubesteer_api::ScalerSpec;
use kubesteer_runtime::scale::Unscalable;
use serde::Deserialize as _;

use super::{ask_all, permitted, Admitting, Rules};
use crate::cluster::Cluster;
use crate::review::meta;

impl Rules for ScalerSpec {
    async fn check<C: Cluster>(&self, on: &mut Admitting<'_, C>) {
        let (state, request, spec) = (on.state, on.request, self);
        let (errors, warnings) = (&mut *on.errors, &mut *on.warnings);
        // Who claims a shared target first: its age and uid decide.
        let me = &Claimant {
            namespace: on.namespace.to_string(),
            name: on.name.to_string(),
            uid: meta(on.object, "uid").unwrap_or_default().to_string(),
            created: on
                .object
                .get("metadata")
                .and_then(|m| m.get("creationTimestamp"))
                // A null one (a CREATE's) is no time: not read into an error.
                .filter(|t| !t.is_null())
                .and_then(|t| Time::deserialize(t).ok())
                .map(|t| t.0),
        };
        let duplicates = spec.duplicate_targets(&me.namespace);
        if !duplicates.is_empty() {
            errors.extend(duplicates);
            return;
        }
        if state.scalers_own_namespace_only {
            let outside = spec.beyond_own_namespace(&me.namespace);
            if !outside.is_empty() {
                errors.extend(outside);
                return;
            }
        }
        let cluster = &state.cluster;
        // Each target's and selected kind's kind through the RESTMapper: one the cluster cannot
        // scale is denied here.
        let selected = spec
            .selector
            .as_ref()
            .map(|s| s.kinds())
            .unwrap_or_default();
        let named = spec.scale_target_refs.iter().enumerate().map(|(i, t)| {
            (
                format!("spec.scaleTargetRefs[{i}].kind"),
                &t.api_version,
                &t.kind,
            )
        });
        // A declared patch for a kind no target is of does nothing: said, not refused (the kind
        // may come later, as kube-green's webhook warns of an unknown kind).
        for (i, p) in spec.patches.iter().flatten().enumerate() {
            let (group, kind) = (&p.target.group, &p.target.kind);
            if !spec
                .scale_target_refs
                .iter()
                .any(|t| t.group() == group && &t.kind == kind)
            {
                warnings.push(format!(
                    "spec.patches[{i}].target: no target in spec.scaleTargetRefs is a {kind} of group {group:?}; the patch puts only such targets to sleep"
                ));
            }
        }
        let patched = |path: &str, api_version: &str, kind: &str| {
            path.starts_with("spec.scaleTargetRefs")
                && spec
                    .patch_for(kubesteer_api::scaler::target::group_of(api_version), kind)
                    .is_some()
        };
        let chosen = selected.iter().enumerate().map(|(i, (v, k))| {
            let path = match spec.selector.as_ref().and_then(|s| s.kinds.as_ref()) {
                Some(_) => format!("spec.selector.kinds[{i}].kind"),
                None => "spec.selector".to_string(),
            };
            (path, v, k)
        });
        let mut resources = std::collections::BTreeMap::new();
        for (path, api_version, kind) in named.chain(chosen) {
            let mapping = cluster.resolve(api_version, kind).await.map(|m| {
                kubesteer_runtime::scale::or_patched(m, |_, _| patched(&path, api_version, kind))
            });
            match mapping {
                Ok(Ok(resource)) => {
                    resources.insert((api_version.clone(), kind.clone()), resource.plural);
                }
                Ok(Err(why)) => {
                    errors.push(FieldError::invalid(path, kind.as_str(), why.to_string()));
                }
                Err(e) => {
                    errors.push(FieldError::forbidden(
                        path,
                        format!(
                            "could not look the kind up in the cluster's discovery, try again: {e}"
                        ),
                    ));
                }
            }
        }
        if !errors.is_empty() {
            return;
        }
        let mut required = spec.required_access(&me.namespace, |api_version, kind| {
            resources
                .get(&(api_version.to_string(), kind.to_string()))
                .cloned()
        });
        // A target whose HPA is a KEDA ScaledObject's is paused through that ScaledObject, which
        // its author must be able to do too: a named one whose HPA is KEDA's now, and, where the
        // cluster serves KEDA, any a selector may pick.
        if spec.hpa_cooperation() == HpaCooperation::Enabled {
            let mut keda_namespaces = std::collections::BTreeMap::new();
            for (i, (target, ns)) in spec.targets(&me.namespace).enumerate() {
                if cluster.keda_scales(&target.target(ns)) {
                    keda_namespaces
                        .entry(ns.to_string())
                        .or_insert(format!("spec.scaleTargetRefs[{i}]"));
                }
            }
            if let Some(selector) = &spec.selector {
                let keda = cluster.resolve("keda.sh/v1alpha1", "ScaledObject").await;
                if matches!(
                    keda,
                    Ok(Err(Unscalable::NoScaleSubresource { .. })) | Ok(Ok(_))
                ) {
                    let searched: Vec<&str> = match selector.listed_namespaces(&me.namespace) {
                        Some(listed) => listed.into_iter().collect(),
                        None => vec![""],
                    };
                    for ns in searched {
                        keda_namespaces
                            .entry(ns.to_string())
                            .or_insert("spec.selector".to_string());
                    }
                }
            }
            required.extend(
                keda_namespaces
                    .into_iter()
                    .map(|(ns, path)| (path, Access::patch_scaled_objects(&ns))),
            );
        }
        // Targets are unique (checked above), so each SubjectAccessReview is asked once.
        let answers = ask_all(state, request, &required).await;
        let mut refused = std::collections::BTreeSet::new();
        for ((path, access), answer) in required.iter().zip(answers) {
            // Anything about a target the author may not scale would tell them whether it exists.
            if !permitted(request, path, access, answer, errors) {
                refused.insert(path.clone());
            }
        }
        let cooperate = spec.hpa_cooperation() == HpaCooperation::Enabled;
        for (i, (target, ns)) in spec.targets(&me.namespace).enumerate() {
            let path = format!("spec.scaleTargetRefs[{i}]");
            if refused.contains(&path) {
                continue;
            }
            let target = target.target(ns);
            if let Some(other) = cluster.claimant(&target, me) {
                errors.push(FieldError::forbidden(
                    path.clone(),
                    format!("{target} is already scaled by Scaler {other}"),
                ));
            } else if let Some(other) = cluster.holder(&target, me) {
                warnings.push(format!(
                "{path}: {target} is scaled now by Scaler {other}, which does not name it; it lets it go to this Scaler"
            ));
            }
            if cluster.target_exists(&target) == Some(false) {
                warnings.push(format!(
                    "{path}: {target} does not exist yet; it is scaled once it appears"
                ));
            }
            if let Some(hpa) = cluster.hpa_for(&target) {
                warnings.push(if cooperate {
                format!(
                    "{path}: {target} is scaled by HorizontalPodAutoscaler {hpa}; the Scaler sets that HPA's minReplicas (recording and restoring the original) instead of the replicas"
                )
            } else {
                format!(
                    "{path}: {target} is also scaled by HorizontalPodAutoscaler {hpa}; with hpaCooperation Disabled they will fight over replicas"
                )
            });
            }
        }
    }
}
