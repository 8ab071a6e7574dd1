//! Scaler (v1beta1): scales any workload with a `/scale` subresource inside windows or at cron
//! firings, except on excluded dates and while an override holds, and restores it. A target
//! scaled by a HorizontalPodAutoscaler is scaled through that HPA's minReplicas instead.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::queue::Action;
use chrono::{DateTime, Utc};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use kubesteer_api::common::condition;
use kubesteer_api::keys::condition::READY;
use kubesteer_api::keys::{annotation, reason, RESTORE_TARGETS_FINALIZER};
use kubesteer_api::rules::scaler::MAX_STATUS_TARGETS;
use kubesteer_api::scaler::claims::{ClaimIndex, Claimant};
use kubesteer_api::scaler::plan::Plan;
use kubesteer_api::scaler::target::{group_of, Target};
use kubesteer_api::scaler::v1beta1::{
    keda_owner, suspended_instead, HpaCooperation, TargetStatus, Transition,
};
use kubesteer_api::scaler::{scaler_id, Record};
use kubesteer_api::{Scaler, ScalerStatus};
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::children::{namespace_and_name, write_params, SYNC_WAIT};
use crate::reconcilers::{status_patch, time};
use crate::workload::*;
use crate::{is_status, Error, Result};
use futures::StreamExt;

mod boundary;
mod decide;
mod state;
mod status;
mod target;
#[cfg(test)]
pub(super) mod tests;

use boundary::*;
pub use decide::*;
pub use state::ScalerContext;
use status::*;
use target::*;

pub const KIND: &str = "Scaler";
/// A reconcile this close before the boundary it was requeued for acts as at the boundary: the
/// timer runs on the monotonic clock and the plan on the wall clock, which may differ by a hair.
const BOUNDARY_TOLERANCE: Duration = Duration::from_millis(20);
/// A Scaler with a transition ahead wakes this much before it, reads its targets, and waits
/// for the boundary with what it read: at the boundary only the writes are left.
pub const PREFETCH_LEAD: Duration = Duration::from_millis(250);
/// How many of a selector's targets one Scaler writes at once (named targets go one by one).
const SELECTED_AT_ONCE: usize = 16;
// Enough to ride out a burst of concurrent writers; after that the reconcile is requeued.
const CONFLICT_RETRIES: usize = 3;
/// How often a Scaler that owes a transition retries while the apiserver is unreachable: the
/// transition lands within this of the apiserver coming back, for a few refused connections.
pub const OUTAGE_RETRY: Duration = Duration::from_secs(2);
// Without a transition in reach (a schedule that never changes again), look again this much later.
const NO_TRANSITION_RECHECK: Duration = Duration::from_secs(24 * 3600);
/// An HPA's minReplicas when its spec leaves it out, as the apiserver defaults it.
const HPA_DEFAULT_MIN_REPLICAS: i32 = 1;

/// The controller's reconcile function for Scaler.
pub async fn reconcile(scaler: Arc<Scaler>, ctx: Arc<ScalerContext>) -> Result<Action> {
    ctx.reconcile(KIND, scaler.as_ref(), with_finalizer(scaler.clone(), &ctx))
        .await
}

pub fn error_policy(scaler: Arc<Scaler>, error: &Error, ctx: Arc<ScalerContext>) -> Action {
    let now = ctx.clock.now();
    let unavailable = error.is_unavailable();
    ctx.error_policy_with(KIND, scaler.as_ref(), error, |backoff| {
        retry_delay(backoff, &scaler, now, unavailable)
    })
}

/// How long a failed Scaler waits before it tries again: its `backoff`, but never past its
/// next transition, and at most [`OUTAGE_RETRY`] while the apiserver is `unavailable` and the
/// last transition is not applied yet (its status does not show it), so an outage across a
/// boundary delays that transition by no more than this once the apiserver is back.
pub fn retry_delay(
    backoff: Duration,
    scaler: &Scaler,
    now: DateTime<Utc>,
    unavailable: bool,
) -> Duration {
    let Ok(plan) = scaler.spec.plan(now) else {
        return backoff;
    };
    if scaler.spec.suspend() || scaler.meta().deletion_timestamp.is_some() {
        return backoff;
    }
    let applied = scaler
        .status
        .as_ref()
        .and_then(|s| s.last_transition.clone());
    let owed = plan.last.is_some() && plan.last.map(time) != applied;
    let mut delay = backoff;
    if owed && unavailable {
        delay = delay.min(OUTAGE_RETRY);
    }
    if let Some(next) = plan.next.first() {
        delay = delay.min(until(now, next.at));
    }
    delay
}

async fn with_finalizer(scaler: Arc<Scaler>, ctx: &ScalerContext) -> Result<Action> {
    let (ns, _) = namespace_and_name(KIND, scaler.as_ref())?;
    let api: Api<Scaler> = Api::namespaced(ctx.client.clone(), &ns);
    // kube-runtime's helper speaks its own `Action`, which cannot be read back: the reconcile's
    // is kept here. When the helper runs none (it added the finalizer, whose write brings the
    // next reconcile, or the Scaler is going and the finalizer gone), there is nothing to await.
    let mut action = Action::await_change();
    let kept = &mut action;
    match finalizer(
        &api,
        RESTORE_TARGETS_FINALIZER,
        scaler,
        |event| async move {
            *kept = match event {
                Finalizer::Apply(s) => apply(&s, ctx).await?,
                Finalizer::Cleanup(s) => cleanup(&s, ctx).await?,
            };
            Ok::<_, Error>(kube::runtime::controller::Action::await_change())
        },
    )
    .await
    {
        Ok(_) => Ok(action),
        // A second cleanup raced the first; the Scaler is gone, which is all that was wanted.
        Err(kube::runtime::finalizer::Error::RemoveFinalizer(e)) if is_status(&e, 404) => {
            Ok(Action::await_change())
        }
        Err(e) => Err(e.into()),
    }
}

/// The Scalers that claim the object `api_version`/`kind` (in their spec, or in their status
/// until given back), looked up in the claims index.
pub fn scalers_targeting(
    claims: &ClaimIndex,
    api_version: &str,
    kind: &str,
    object: &impl ResourceExt,
) -> Vec<ObjectRef<Scaler>> {
    let Some(ns) = object.namespace() else {
        return Vec::new();
    };
    claims
        .claimants(&Target::new(api_version, kind, &ns, &object.name_any()))
        .map(|c| ObjectRef::new(&c.name).within(&c.namespace))
        .collect()
}

async fn apply(scaler: &Scaler, ctx: &ScalerContext) -> Result<Action> {
    let (ns, name) = namespace_and_name(KIND, scaler)?;
    let generation = scaler.meta().generation;
    let previous = scaler.status.clone().unwrap_or_default();
    let suspended = scaler.spec.suspend();
    let me = scaler_id(&ns, &name);
    let claimant = Claimant::of(scaler.meta());
    let selected = select(scaler, &claimant, ctx).await;
    let mut wanted_targets = named_in_spec(scaler, &ns);
    let named: BTreeSet<Target> = wanted_targets.iter().cloned().collect();
    wanted_targets.extend(selected.mine.into_iter().filter(|t| !named.contains(t)));
    // Close before a transition: read the targets now and wait for it, so that the boundary
    // costs only the writes. (A target read as missing is read again at the boundary.)
    let boundary = match suspended {
        false => transition_within(ctx.clock.now(), &previous, PREFETCH_LEAD),
        true => None,
    };
    let mut early = match boundary {
        Some(at) => Some(read_early(ctx, &wanted_targets, at).await?),
        None => None,
    };
    let now = match boundary {
        Some(at) => at.max(ctx.clock.now()),
        None => at_boundary(ctx.clock.now(), &previous),
    };
    let ready = |ok: bool, reason: &str, message: String| {
        condition(
            READY,
            ok,
            reason,
            message,
            generation,
            time(now),
            &previous.conditions,
        )
    };

    let plan: Plan = match scaler.spec.plan(now) {
        Ok(p) => p,
        Err(errors) => {
            let message = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            let status = ScalerStatus {
                active: Some(false),
                conditions: vec![ready(false, reason::INVALID_SCHEDULE, message.clone())],
                observed_generation: generation,
                ..previous.clone()
            };
            if status != previous {
                ctx.publish(
                    scaler,
                    EventType::Warning,
                    reason::INVALID_SCHEDULE,
                    message,
                )
                .await;
                patch_status(ctx, &ns, &name, &status).await?;
            }
            return Ok(Action::await_change());
        }
    };
    let outside = scaler.spec.outside_replicas;

    let mut targets = Vec::new();
    let mut missing = Vec::new();
    let mut unscalable = Vec::new();
    let mut claimed = Vec::new();
    let mut conflicts = Vec::new();
    // Each target on its own: one that fails is shown on its entry and retried, never holding
    // up the others.
    let mut failed = Vec::new();
    let mut hold_until: Option<DateTime<Utc>> = None;
    // What was done to selected targets, told of in one event per reason below.
    let mut told: Vec<(&'static str, String)> = Vec::new();
    let mut prefetched = early
        .as_mut()
        .map(|e| std::mem::take(&mut e.read))
        .unwrap_or_default();
    let pass = early.as_ref().map(|e| &e.pass);
    // One target: whether an older Scaler owns it, and what was seen or done.
    let visit = |i: usize, read_before: Option<Current>| {
        let target = &wanted_targets[i];
        // The oldest Scaler that claims a target owns it; the others leave it alone.
        let owner = ctx
            .claims
            .read()
            .older_claimant(target, &claimant)
            .map(Claimant::id);
        let recorded = recorded_entry(&previous, target);
        let gather = !named.contains(target);
        async move {
            let seen = match &owner {
                Some(_) => look(ctx, target).await,
                None if suspended => look(ctx, target).await,
                None => {
                    reconcile_target(
                        ctx,
                        scaler,
                        target,
                        plan.replicas,
                        outside,
                        false,
                        recorded,
                        (read_before, pass),
                        gather,
                    )
                    .await
                }
            };
            (target, owner, seen)
        }
    };
    // Named targets one after another; a selector's (a fleet) several at once.
    let mut visited = Vec::new();
    let (one_by_one, together): (Vec<usize>, Vec<usize>) =
        (0..wanted_targets.len()).partition(|i| named.contains(&wanted_targets[*i]));
    for i in one_by_one {
        let read_before = prefetched.remove(&wanted_targets[i]);
        visited.push(visit(i, read_before).await);
    }
    let at_once: Vec<_> = futures::stream::iter(together)
        .map(|i| {
            let read_before = prefetched.remove(&wanted_targets[i]);
            visit(i, read_before)
        })
        .buffered(SELECTED_AT_ONCE)
        .collect()
        .await;
    visited.extend(at_once);
    for (target, owner, seen) in visited {
        if let Some(owner) = &owner {
            conflicts.push(format!(
                "{target} is owned by Scaler {owner}, which is older; it is left alone until that one lets go"
            ));
        }
        let seen = match seen {
            Ok(seen) => seen,
            Err(e) => {
                targets.push(failed_entry(&previous, target, &e));
                failed.push((target.clone(), e));
                continue;
            }
        };
        if let Some(why) = &seen.unscalable {
            unscalable.push(format!("{target}: {why}"));
        } else if seen.current.is_none() {
            missing.push(target.to_string());
        }
        if let Some(other) = &seen.claimed_by {
            claimed.push(format!("{target} is scaled by Scaler {other}"));
        }
        hold_until = earliest(hold_until, seen.hold_until);
        targets.push(target_status(target, &seen, &me));
        told.extend(seen.told);
    }
    // When the boundary's writes landed: a transition's lateness, before the wait at the gate.
    let written_at = ctx.clock.now();
    // A target that left the spec (dropped or renamed) is given back as if its window closed,
    // suspended or not: it is no longer this Scaler's to hold.
    // One that cannot be given back stays in the status, to be tried again.
    // Those it holds by its record but no longer lists (beyond the status' bound) likewise,
    // once every selected kind has been listed.
    let wanted: BTreeSet<&Target> = wanted_targets.iter().collect();
    let listed: BTreeSet<Target> = previous.targets.iter().map(named_in_status).collect();
    let held = match selected.complete {
        true => ctx.inventory.held_by(&me),
        false => Vec::new(),
    };
    let given_back = previous
        .targets
        .iter()
        .map(|e| (named_in_status(e), Some(e)))
        .chain(
            held.into_iter()
                .filter(|h| !listed.contains(h))
                .map(|h| (h, None)),
        );
    for (old, hpa) in given_back {
        if wanted.contains(&old) {
            continue;
        }
        let gather = !named.contains(&old);
        let given = reconcile_target(
            ctx,
            scaler,
            &old,
            None,
            outside,
            true,
            hpa,
            (None, None),
            gather,
        );
        match given.await {
            Ok(seen) => told.extend(seen.told),
            Err(e) => {
                targets.push(failed_entry(&previous, &old, &e));
                failed.push((old, e));
            }
        }
    }
    // What reports the transition (events, status) waits for the other Scalers' target writes.
    if let Some(early) = &early {
        early.pass.leave_and_wait(GATE_WAIT).await;
    }
    for (reason, note) in summaries(told) {
        ctx.publish(scaler, EventType::Normal, reason, note).await;
    }

    let condition = if !failed.is_empty() {
        let each: Vec<String> = failed.iter().map(|(t, e)| format!("{t}: {e}")).collect();
        ready(false, reason::TARGET_FAILED, listing(&each, "; "))
    } else if !conflicts.is_empty() {
        ready(false, reason::CONFLICT, listing(&conflicts, "; "))
    } else if !unscalable.is_empty() {
        ready(
            false,
            reason::TARGET_NOT_SCALABLE,
            listing(&unscalable, "; "),
        )
    } else if !missing.is_empty() {
        ready(
            false,
            reason::TARGET_NOT_FOUND,
            format!("{} not found", listing(&missing, ", ")),
        )
    } else if !claimed.is_empty() {
        ready(false, reason::TARGET_CLAIMED, listing(&claimed, "; "))
    } else if suspended {
        ready(true, reason::SUSPENDED, "scaling is suspended".into())
    } else if scaler.spec.dry_run() {
        ready(
            true,
            reason::DRY_RUN,
            format!(
                "dry run, nothing is written to the targets: {}",
                plan.message
            ),
        )
    } else {
        ready(true, plan.reason, plan.message.clone())
    };
    // Bounded: the failing first, then in order; the count has them all.
    let target_count = i32::try_from(targets.len()).unwrap_or(i32::MAX);
    targets.sort_by_key(|t| t.error.is_none());
    // The metrics count them all (in error, held below original); the status lists the first.
    let all_targets = targets.clone();
    targets.truncate(MAX_STATUS_TARGETS);
    let status = ScalerStatus {
        active: Some(!suspended && plan.replicas.is_some()),
        target_count: Some(target_count),
        next_transitions: if suspended {
            Vec::new()
        } else {
            plan.next
                .iter()
                .map(|t| Transition {
                    time: time(t.at),
                    replicas: t.replicas.or(outside),
                })
                .collect()
        },
        last_transition: plan.last.map(time),
        override_: scaler
            .spec
            .override_
            .clone()
            .filter(|o| o.until.0.as_second() > now.timestamp()),
        targets,
        observed_generation: generation,
        conditions: vec![condition.clone()],
    };
    let was = previous.conditions.iter().find(|c| c.type_ == READY);
    let reason = condition.reason.as_str();
    let announce = match reason {
        // Once, on the way into the conflict, however often it is reconciled in it.
        reason::CONFLICT => was.is_none_or(|c| c.reason != reason::CONFLICT),
        reason::TARGET_NOT_FOUND | reason::TARGET_CLAIMED | reason::TARGET_NOT_SCALABLE => {
            was.is_none_or(|c| c.reason != condition.reason || c.message != condition.message)
        }
        _ => false,
    };
    if announce {
        ctx.publish(
            scaler,
            EventType::Warning,
            reason,
            condition.message.clone(),
        )
        .await;
    }
    if status != previous {
        patch_status(ctx, &ns, &name, &status).await?;
    }
    let wanted = plan.replicas.or(outside);
    let observed = ScalerStatus {
        targets: all_targets,
        ..status.clone()
    };
    ctx.metrics
        .scaler_observed(scaler, &previous, &observed, wanted, written_at);
    // The failed targets are retried with the Scaler's backoff (never past its next transition),
    // and the failure is announced as any failed reconcile is.
    if let Some(failed) = targets_failed(failed) {
        return Err(failed);
    }
    // From the clock now, not from the start: the writes above took time, and the requeue's
    // timer starts when this returns.
    // A held target still in its grace period is looked at again when it ends.
    let next = earliest(plan.next.first().map(|t| t.at), hold_until);
    Ok(next_action(next, suspended, ctx.clock.now()))
}

/// What the Scaler's selector picks now. The watches of the kinds it names (and of the
/// namespaces, for a namespaceSelector) are started the first time; until they have listed
/// everything once, the pick is incomplete and nothing is given back for no longer matching.
async fn select(scaler: &Scaler, me: &Claimant, ctx: &ScalerContext) -> crate::inventory::Selected {
    let Some(selector) = &scaler.spec.selector else {
        return crate::inventory::Selected {
            complete: true,
            ..Default::default()
        };
    };
    for (api_version, kind) in selector.kinds() {
        match ctx.mapper.resolve(&api_version, &kind).await {
            Ok(Ok(resource)) => ctx.inventory.watch(&resource, &ctx.claims),
            Ok(Err(why)) => warn!(scaler = %scaler.name_any(), kind, "{why}"),
            Err(e) => {
                warn!(scaler = %scaler.name_any(), kind, error = %e, "could not look the kind up")
            }
        }
    }
    if selector.namespace_selector.is_some() {
        ctx.inventory.watch_namespaces(&ctx.claims);
    }
    ctx.inventory.selected(scaler, me, &ctx.claims.read())
}

/// A deleted Scaler gives every target it scaled back, as when its window closes, each on its
/// own. A target the apiserver refuses to give back (a recorded value it rejects, a write it
/// forbids: nothing a retry changes) is reported with a Warning event and let go, so that it
/// never holds the Scaler's deletion; other failures keep the finalizer and are retried.
async fn cleanup(scaler: &Scaler, ctx: &ScalerContext) -> Result<Action> {
    let (ns, name) = namespace_and_name(KIND, scaler)?;
    // What it holds by record is known once the Deployments and StatefulSets have listed
    // (their watches start with the first Scaler seen, maybe this one, just now). Until then
    // the finalizer stays (an error keeps it, and retries), for as long as the caches' first
    // lists are waited for.
    if !ctx
        .inventory
        .workloads_listed_within(&ctx.claims, SYNC_WAIT)
        .await
    {
        return Err(Error::Unlisted("Scaler target Deployment and StatefulSet"));
    }
    ctx.metrics.scaler_deleted(&ns, &name);
    let outside = scaler.spec.outside_replicas;
    let status = scaler.status.clone().unwrap_or_default();
    let mut seen = BTreeSet::new();
    let from_status = status.targets.iter().map(named_in_status);
    // And the selected ones beyond the status' bound, by the record they carry.
    let held = ctx.inventory.held_by(&scaler_id(&ns, &name));
    let mut retry = Vec::new();
    for target in named_in_spec(scaler, &ns)
        .into_iter()
        .chain(from_status)
        .chain(held)
    {
        if !seen.insert(target.clone()) {
            continue;
        }
        let hpa = recorded_entry(&status, &target);
        match reconcile_target(
            ctx,
            scaler,
            &target,
            None,
            outside,
            true,
            hpa,
            (None, None),
            false,
        )
        .await
        {
            Ok(_) => {}
            Err(e) if refused(&e) => {
                let note = format!("{target} could not be given back and is left as it is: {e}");
                warn!(scaler = %scaler.name_any(), "{note}");
                ctx.publish(scaler, EventType::Warning, reason::RESTORE_FAILED, note)
                    .await;
            }
            Err(e) => retry.push((target, e)),
        }
    }
    match targets_failed(retry) {
        Some(failed) => Err(failed),
        None => Ok(Action::await_change()),
    }
}
