//! The real KEDA operator on the e2e cluster's real node, for tests of kubesteer beside KEDA:
//! `hack/keda.sh` builds it (cached), packs it as an image, and deploys it; [`ensure_keda`] does
//! all of that once per cluster.
use anyhow::Result;

/// The namespace `hack/keda.sh deploy` installs KEDA in.
pub const NAMESPACE: &str = "keda";
/// KEDA's operator Deployment in [`NAMESPACE`].
pub const DEPLOYMENT: &str = "keda-operator";
/// The annotation that pauses a ScaledObject at a replica count: KEDA deletes its HPA and scales
/// the target to that count.
pub const PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";

/// The HPA KEDA makes for the ScaledObject `scaled_object` (owned by it, labelled
/// `scaledobject.keda.sh/name=<scaled_object>`).
pub fn hpa_name(scaled_object: &str) -> String {
    format!("keda-hpa-{scaled_object}")
}

/// Installs KEDA on the e2e cluster unless it already runs there ([`crate::addons::ensure`]).
pub fn ensure_keda() -> Result<()> {
    crate::addons::ensure(&crate::addons::KEDA)
}

/// A ScaledObject `name` scaling the Deployment `target` between `min` and `max` replicas, with
/// one cron trigger (UTC) that asks for `desired` replicas. Its window runs from 1 January 00:00
/// to 31 December 23:59, so the trigger is active at any time but the last minute of a year.
pub fn scaled_object_yaml(name: &str, target: &str, min: u32, max: u32, desired: u32) -> String {
    format!(
        r#"apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {name}
spec:
  scaleTargetRef:
    name: {target}
  minReplicaCount: {min}
  maxReplicaCount: {max}
  triggers:
    - type: cron
      metadata:
        timezone: UTC
        start: "0 0 1 1 *"
        end: "59 23 31 12 *"
        desiredReplicas: "{desired}"
"#
    )
}
