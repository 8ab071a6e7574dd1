//! Status: each target's entry, failures, and the status patch.
use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

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

/// What one pass over the targets found and did, gathered for the status and the events.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) targets: Vec<TargetStatus>,
    missing: Vec<String>,
    unscalable: Vec<String>,
    claimed: Vec<String>,
    conflicts: Vec<String>,
    /// Each target on its own: one that fails is shown on its entry and retried, never holding
    /// up the others.
    pub(super) failed: Vec<(Target, Error)>,
    pub(super) hold_until: Option<DateTime<Utc>>,
    /// What was done to selected targets, told of in one event per reason.
    pub(super) told: Vec<(&'static str, String)>,
    /// What the targets do not run because of the Scaler, all added up.
    pub(super) saving: Rate,
}

impl Outcome {
    /// Adds what was seen of `target` (`owner`: the older Scaler that owns it, if one does).
    pub(super) fn add(
        &mut self,
        previous: &ScalerStatus,
        me: &str,
        target: &Target,
        owner: Option<String>,
        seen: Result<Seen>,
    ) {
        if let Some(owner) = &owner {
            self.conflicts.push(format!(
                "{target} is owned by Scaler {owner}, which is older; it is left alone until that one lets go"
            ));
        }
        let seen = match seen {
            Ok(seen) => seen,
            Err(e) => return self.failed_on(previous, target.clone(), e),
        };
        if let Some(why) = &seen.unscalable {
            self.unscalable.push(format!("{target}: {why}"));
        } else if seen.current.is_none() {
            self.missing.push(target.to_string());
        }
        if let Some(other) = &seen.claimed_by {
            self.claimed
                .push(format!("{target} is scaled by Scaler {other}"));
        }
        self.hold_until = earliest(self.hold_until, seen.hold_until);
        self.saving = self.saving + seen.saving;
        self.targets.push(target_status(target, &seen, me));
        self.told.extend(seen.told);
    }

    /// A target whose change failed: its entry says why, and the reconcile is retried.
    pub(super) fn failed_on(&mut self, previous: &ScalerStatus, target: Target, e: Error) {
        self.targets.push(failed_entry(previous, &target, &e));
        self.failed.push((target, e));
    }

    /// The Ready condition's (status, reason, message): the first problem found, in order of
    /// gravity, or the plan's.
    pub(super) fn readiness(&self, scaler: &Scaler, plan: &Plan) -> (bool, &'static str, String) {
        if !self.failed.is_empty() {
            let each: Vec<String> = self
                .failed
                .iter()
                .map(|(t, e)| format!("{t}: {e}"))
                .collect();
            (false, reason::TARGET_FAILED, listing(&each, "; "))
        } else if !self.conflicts.is_empty() {
            (false, reason::CONFLICT, listing(&self.conflicts, "; "))
        } else if !self.unscalable.is_empty() {
            let why = listing(&self.unscalable, "; ");
            (false, reason::TARGET_NOT_SCALABLE, why)
        } else if !self.missing.is_empty() {
            let which = listing(&self.missing, ", ");
            (
                false,
                reason::TARGET_NOT_FOUND,
                format!("{which} not found"),
            )
        } else if !self.claimed.is_empty() {
            (false, reason::TARGET_CLAIMED, listing(&self.claimed, "; "))
        } else if scaler.spec.suspend() {
            (true, reason::SUSPENDED, "scaling is suspended".into())
        } else if scaler.spec.dry_run() {
            let message = format!(
                "dry run, nothing is written to the targets: {}",
                plan.message
            );
            (true, reason::DRY_RUN, message)
        } else {
            (true, plan.reason, plan.message.clone())
        }
    }
}

/// The new status, with the targets bounded (the failing first, then in order; the count has
/// them all), and every target for the metrics (in error, held below original).
pub(super) fn new_status(
    scaler: &Scaler,
    plan: &Plan,
    now: DateTime<Utc>,
    ready: Condition,
    mut targets: Vec<TargetStatus>,
    savings: Option<Savings>,
) -> (ScalerStatus, Vec<TargetStatus>) {
    let suspended = scaler.spec.suspend();
    let outside = scaler.spec.outside_replicas;
    let target_count = i32::try_from(targets.len()).unwrap_or(i32::MAX);
    targets.sort_by_key(|t| t.error.is_none());
    let all_targets = targets.clone();
    targets.truncate(MAX_STATUS_TARGETS);
    let status = ScalerStatus {
        active: Some(!suspended && plan.replicas.is_some()),
        target_count: Some(target_count),
        next_transitions: match suspended {
            true => Vec::new(),
            false => plan
                .next
                .iter()
                .map(|t| Transition {
                    time: time(t.at),
                    replicas: t.replicas.or(outside),
                })
                .collect(),
        },
        last_transition: plan.last.map(time),
        override_: scaler
            .spec
            .override_
            .clone()
            .filter(|o| o.until.0.as_second() > now.timestamp()),
        targets,
        observed_generation: scaler.meta().generation,
        conditions: vec![ready],
        savings,
    };
    (status, all_targets)
}

/// A Warning event for a problem newly in the Ready condition: a conflict once on the way in,
/// however often it is reconciled in it; a missing, claimed or unscalable target when what is
/// wrong changes.
pub(super) async fn announce(
    scaler: &Scaler,
    ctx: &ScalerContext,
    previous: &ScalerStatus,
    status: &ScalerStatus,
) {
    let Some(ready) = status.conditions.iter().find(|c| c.type_ == READY) else {
        return;
    };
    let was = previous.conditions.iter().find(|c| c.type_ == READY);
    let reason = ready.reason.as_str();
    let announce = match reason {
        reason::CONFLICT => was.is_none_or(|c| c.reason != reason::CONFLICT),
        reason::TARGET_NOT_FOUND | reason::TARGET_CLAIMED | reason::TARGET_NOT_SCALABLE => {
            was.is_none_or(|c| c.reason != ready.reason || c.message != ready.message)
        }
        _ => false,
    };
    if announce {
        let message = ready.message.clone();
        ctx.publish(scaler, EventType::Warning, reason, message)
            .await;
    }
}
