//! Scaler (v1beta1): scales any workload with a `/scale` subresource inside windows or at cron
//! firings, except on excluded dates and while an override holds, and restores it. A target
//! scaled by a HorizontalPodAutoscaler is scaled through that HPA's minReplicas instead.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

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
use kubesteer_api::scaler::savings::{Rate, Savings};
use kubesteer_api::scaler::target::{group_of, Target};
use kubesteer_api::scaler::v1beta1::{
    asleep_by, keda_owner, suspended_instead, HpaCooperation, TargetStatus, Transition,
};
use kubesteer_api::scaler::{scaler_id, Record};
use kubesteer_api::{Scaler, ScalerStatus};
use kubesteer_runtime::queue::Action;
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::children::{namespace_and_name, write_params, SYNC_WAIT};
use crate::reconcilers::{status_patch, time};
use crate::{is_status, Error, Result};
use futures::StreamExt;
use workload::*;

pub mod acting;
mod boundary;
mod calendar;
mod decide;
pub mod inventory;
pub mod metrics;
pub mod rights;
mod state;
mod status;
mod target;
#[cfg(test)]
pub(super) mod tests;
mod visit;
pub mod workload;

use boundary::*;
pub use decide::*;
pub use state::ScalerContext;
use status::*;
use target::*;
use visit::*;

pub const KIND: &str = "Scaler";
use kubesteer_api::scaler::calendar::RECHECK as CALENDAR_RECHECK;
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

/// One pass over a Scaler: its targets, each reconciled ([`visit`]), those it let go of given
/// back, then its status, events and metrics, and when to look again.
async fn apply(scaler: &Scaler, ctx: &ScalerContext) -> Result<Action> {
    let (ns, name) = namespace_and_name(KIND, scaler)?;
    let previous = scaler.status.clone().unwrap_or_default();
    let suspended = scaler.spec.suspend();
    let me = scaler_id(&ns, &name);
    let claimant = Claimant::of(scaler.meta());
    let wanted = Wanted::of(scaler, &ns, &claimant, ctx).await;
    // Close before a transition: read the targets now and wait for it, so that the boundary
    // costs only the writes. (A target read as missing is read again at the boundary.)
    let boundary = match suspended {
        false => transition_within(ctx.clock.now(), &previous, PREFETCH_LEAD),
        true => None,
    };
    let mut early = match boundary {
        Some(at) => Some(read_early(ctx, scaler, &wanted.targets, at).await?),
        None => None,
    };
    let now = match boundary {
        Some(at) => at.max(ctx.clock.now()),
        None => at_boundary(ctx.clock.now(), &previous),
    };
    let schedule = match scaler.spec.schedule() {
        Ok(s) => s,
        Err(errors) => return invalid_schedule(scaler, ctx, &previous, now, &errors).await,
    };
    // The holidays of its calendar; while it cannot be read, nothing is written.
    let schedule = match &scaler.spec.exclude_calendar {
        None => schedule,
        Some(c) => match calendar::read_holidays(ctx, &ns, c, schedule.time_zone(), now).await? {
            Ok(holidays) => schedule.with_holidays(&holidays),
            Err(why) => {
                let stop = Stop {
                    reason: reason::CALENDAR_UNREADABLE,
                    message: why,
                    then: Action::requeue(CALENDAR_RECHECK),
                };
                return stopped(scaler, ctx, &previous, now, stop).await;
            }
        },
    };
    let plan: Plan = schedule.plan(now);
    // Nothing is written for an author who lost a right the spec needs.
    let standing = ctx
        .rights
        .standing(&ctx.client, &ctx.mapper, scaler, &ns, |t| {
            ctx.inventory.scaled_object_of(t).is_some()
        })
        .await?;
    let forbidden = match &standing {
        rights::Standing::Unrecorded => None,
        rights::Standing::Held => Some(false),
        rights::Standing::Missing(_) => Some(true),
    };
    ctx.metrics.set_forbidden(&ns, &name, forbidden);
    if let rights::Standing::Missing(why) = standing {
        let stop = Stop {
            reason: reason::FORBIDDEN,
            message: why,
            then: Action::requeue(rights::RECHECK),
        };
        return stopped(scaler, ctx, &previous, now, stop).await;
    }
    let mut outcome = Outcome::default();
    visit_all(
        scaler,
        ctx,
        &wanted,
        &claimant,
        &plan,
        early.as_mut(),
        &mut outcome,
    )
    .await;
    // When the boundary's writes landed: a transition's lateness, before the wait at the gate.
    let written_at = ctx.clock.now();
    give_back(scaler, ctx, &wanted, &me, &mut outcome).await;
    // What reports the transition (events, status) waits for the other Scalers' target writes.
    if let Some(early) = &early {
        early.pass.leave_and_wait(GATE_WAIT).await;
    }
    for (reason, note) in summaries(std::mem::take(&mut outcome.told)) {
        ctx.publish(scaler, EventType::Normal, reason, note).await;
    }
    let (ok, reason, message) = outcome.readiness(scaler, &plan);
    let ready = condition(
        READY,
        ok,
        reason,
        message,
        scaler.meta().generation,
        time(now),
        &previous.conditions,
    );
    let savings = Savings::next(
        previous.savings.as_ref(),
        outcome.saving,
        scaler.spec.dry_run(),
        now,
        schedule.time_zone(),
    );
    let (status, all_targets) = new_status(scaler, &plan, now, ready, outcome.targets, savings);
    announce(scaler, ctx, &previous, &status).await;
    if status != previous {
        patch_status(ctx, &ns, &name, &status).await?;
    }
    let observed = ScalerStatus {
        targets: all_targets,
        ..status.clone()
    };
    let replicas = plan.replicas.or(scaler.spec.outside_replicas);
    ctx.metrics
        .scalers()
        .observed(scaler, &previous, &observed, replicas, written_at);
    // The failed targets are retried with the Scaler's backoff (never past its next transition),
    // and the failure is announced as any failed reconcile is.
    if let Some(failed) = targets_failed(outcome.failed) {
        return Err(failed);
    }
    // From the clock now, not from the start: the writes above took time, and the requeue's
    // timer starts when this returns.
    // A held target still in its grace period is looked at again when it ends.
    let next = earliest(plan.next.first().map(|t| t.at), outcome.hold_until);
    // An author's rights are asked again at least every RECHECK.
    let recheck = (standing == rights::Standing::Held)
        .then(|| now + chrono::Duration::from_std(rights::RECHECK).unwrap_or_default());
    // A calendar is read again at least every CALENDAR_RECHECK, to see the ConfigMap's edits.
    let recheck = earliest(
        recheck,
        scaler
            .spec
            .exclude_calendar
            .as_ref()
            .map(|_| now + chrono::Duration::from_std(CALENDAR_RECHECK).unwrap_or_default()),
    );
    Ok(next_action(
        earliest(next, recheck),
        suspended,
        ctx.clock.now(),
    ))
}

/// The targets of one pass: those the spec names, then those its selector picks that no other
/// Scaler names.
struct Wanted {
    targets: Vec<Target>,
    named: BTreeSet<Target>,
    /// Whether every selected kind has been listed once.
    complete: bool,
}

impl Wanted {
    async fn of(scaler: &Scaler, ns: &str, claimant: &Claimant, ctx: &ScalerContext) -> Self {
        let selected = select(scaler, claimant, ctx).await;
        let mut targets = named_in_spec(scaler, ns);
        let named: BTreeSet<Target> = targets.iter().cloned().collect();
        targets.extend(selected.mine.into_iter().filter(|t| !named.contains(t)));
        Self {
            targets,
            named,
            complete: selected.complete,
        }
    }
}

/// A schedule that cannot be planned: Ready false with why, told once, and nothing done until
/// the spec changes.
async fn invalid_schedule(
    scaler: &Scaler,
    ctx: &ScalerContext,
    previous: &ScalerStatus,
    now: DateTime<Utc>,
    errors: &[impl ToString],
) -> Result<Action> {
    let message = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let stop = Stop {
        reason: reason::INVALID_SCHEDULE,
        message,
        then: Action::await_change(),
    };
    stopped(scaler, ctx, previous, now, stop).await
}

/// Why a pass stops before it writes anything to the targets, and when to look again.
struct Stop {
    reason: &'static str,
    message: String,
    then: Action,
}

/// A pass that writes nothing to the targets: Ready false with why, told once (a Warning event
/// when the status changes).
async fn stopped(
    scaler: &Scaler,
    ctx: &ScalerContext,
    previous: &ScalerStatus,
    now: DateTime<Utc>,
    stop: Stop,
) -> Result<Action> {
    let (ns, name) = namespace_and_name(KIND, scaler)?;
    let generation = scaler.meta().generation;
    let ready = condition(
        READY,
        false,
        stop.reason,
        stop.message.clone(),
        generation,
        time(now),
        &previous.conditions,
    );
    let status = ScalerStatus {
        active: Some(false),
        conditions: vec![ready],
        observed_generation: generation,
        ..previous.clone()
    };
    if status != *previous {
        ctx.publish(scaler, EventType::Warning, stop.reason, stop.message)
            .await;
        patch_status(ctx, &ns, &name, &status).await?;
    }
    Ok(stop.then)
}

/// Reconciles every wanted target: named ones one after another, a selector's (a fleet)
/// several at once. A target an older Scaler claims, or every target while suspended, is only
/// looked at.
async fn visit_all(
    scaler: &Scaler,
    ctx: &ScalerContext,
    wanted: &Wanted,
    claimant: &Claimant,
    plan: &Plan,
    early: Option<&mut Early>,
    outcome: &mut Outcome,
) {
    let previous = scaler.status.clone().unwrap_or_default();
    let suspended = scaler.spec.suspend();
    let (mut prefetched, pass) = match early {
        Some(e) => {
            let read = std::mem::take(&mut e.read);
            let e: &Early = e;
            (read, Some(&e.pass))
        }
        None => (BTreeMap::new(), None),
    };
    let visit = |i: usize, read_before: Option<Current>| {
        let target = &wanted.targets[i];
        // The oldest Scaler that claims a target owns it; the others leave it alone.
        let owner = ctx
            .claims
            .read()
            .older_claimant(target, claimant)
            .map(Claimant::id);
        let visit = Visit {
            wanted: plan.replicas,
            outside: scaler.spec.outside_replicas,
            recorded: recorded_entry(&previous, target),
            prefetched: read_before,
            pass,
            gather: !wanted.named.contains(target),
            ..Visit::default()
        };
        async move {
            let seen = match &owner {
                Some(_) => look(ctx, scaler, target).await,
                None if suspended => look(ctx, scaler, target).await,
                None => reconcile_target(ctx, scaler, target, visit).await,
            };
            (target, owner, seen)
        }
    };
    let mut visited = Vec::new();
    let (one_by_one, together): (Vec<usize>, Vec<usize>) =
        (0..wanted.targets.len()).partition(|i| wanted.named.contains(&wanted.targets[*i]));
    for i in one_by_one {
        let read_before = prefetched.remove(&wanted.targets[i]);
        visited.push(visit(i, read_before).await);
    }
    let at_once: Vec<_> = futures::stream::iter(together)
        .map(|i| {
            let read_before = prefetched.remove(&wanted.targets[i]);
            visit(i, read_before)
        })
        .buffered(SELECTED_AT_ONCE)
        .collect()
        .await;
    visited.extend(at_once);
    let me = claimant.id();
    for (target, owner, seen) in visited {
        outcome.add(&previous, &me, target, owner, seen);
    }
}

/// Gives back, as if its window closed, suspended or not, each target the Scaler no longer
/// wants: one that left the spec (dropped or renamed), and those it holds by its record but no
/// longer lists (beyond the status' bound) once every selected kind has been listed. One that
/// cannot be given back stays in the status, to be tried again.
async fn give_back(
    scaler: &Scaler,
    ctx: &ScalerContext,
    wanted: &Wanted,
    me: &str,
    outcome: &mut Outcome,
) {
    let previous = scaler.status.clone().unwrap_or_default();
    let still: BTreeSet<&Target> = wanted.targets.iter().collect();
    let listed: BTreeSet<Target> = previous.targets.iter().map(named_in_status).collect();
    let held = match wanted.complete {
        true => ctx.inventory.held_by(me),
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
        if still.contains(&old) {
            continue;
        }
        let visit = Visit::release(
            scaler.spec.outside_replicas,
            hpa,
            !wanted.named.contains(&old),
        );
        match reconcile_target(ctx, scaler, &old, visit).await {
            Ok(seen) => outcome.told.extend(seen.told),
            Err(e) => outcome.failed_on(&previous, old, e),
        }
    }
}

/// What the Scaler's selector picks now. The watches of the kinds it names (and of the
/// namespaces, for a namespaceSelector) are started the first time; until they have listed
/// everything once, the pick is incomplete and nothing is given back for no longer matching.
async fn select(scaler: &Scaler, me: &Claimant, ctx: &ScalerContext) -> inventory::Selected {
    let Some(selector) = &scaler.spec.selector else {
        return inventory::Selected {
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
    ctx.metrics.scalers().deleted(&ns, &name);
    ctx.metrics.set_forbidden(&ns, &name, None);
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
        let visit = Visit::release(outside, recorded_entry(&status, &target), false);
        match reconcile_target(ctx, scaler, &target, visit).await {
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
