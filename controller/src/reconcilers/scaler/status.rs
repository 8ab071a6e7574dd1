//! Status: each target's entry, failures, and the status patch.
use super::*;

pub(super) fn target_status(target: &Target, seen: &Seen, me: &str) -> TargetStatus {
    let original_replicas = match seen
        .current
        .as_ref()
        .map(|c| Record::of(&c.annotations, me))
    {
        Some(Record::Mine { replicas, .. }) => replicas,
        _ => None,
    };
    TargetStatus {
        replicas: seen.current.as_ref().map(|c| c.replicas),
        original_replicas,
        horizontal_pod_autoscaler: seen.autoscaler.clone(),
        scaled_object: seen.scaled_object.clone(),
        ..TargetStatus::from(target)
    }
}

/// The error of a reconcile in which the changes to these targets failed, if any did.
pub(super) fn targets_failed(failed: Vec<(Target, Error)>) -> Option<Error> {
    let count = failed.len();
    let (target, first) = failed.into_iter().next()?;
    Some(Error::Targets {
        count,
        target: target.to_string(),
        first: Box::new(first),
    })
}

/// Whether the apiserver refused a write for good: a 4xx other than a conflict or throttling.
pub(super) fn refused(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(s))
        if (400..500).contains(&s.code) && s.code != 409 && s.code != 429)
}

/// The status entry of `target`: what the Scaler last worked through for it (an HPA, a KEDA
/// ScaledObject).
pub(super) fn recorded_entry<'a>(
    status: &'a ScalerStatus,
    target: &Target,
) -> Option<&'a TargetStatus> {
    status
        .targets
        .iter()
        .find(|t| named_in_status(t) == *target)
}

/// The status entry of a target whose change failed: as it was last seen, with why it failed.
pub(super) fn failed_entry(
    previous: &ScalerStatus,
    target: &Target,
    error: &Error,
) -> TargetStatus {
    let before = previous
        .targets
        .iter()
        .find(|t| named_in_status(t) == *target)
        .cloned()
        .unwrap_or_else(|| TargetStatus::from(target));
    TargetStatus {
        error: Some(error.to_string()),
        ..before
    }
}

pub(super) async fn patch_status(
    ctx: &ScalerContext,
    ns: &str,
    name: &str,
    status: &ScalerStatus,
) -> Result<()> {
    let api: Api<Scaler> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(name, &write_params(), &status_patch(status)?)
        .await?;
    Ok(())
}
