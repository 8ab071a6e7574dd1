//! Scaler (v1beta1): scales any workload with a `/scale` subresource inside windows or at cron
//! firings, except on excluded dates and while an override holds, and restores it. A target
//! scaled by a HorizontalPodAutoscaler is scaled through that HPA's minReplicas instead.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use kubesteer_api::common::condition;
use kubesteer_api::keys::condition::READY;
use kubesteer_api::keys::{
    annotation, reason, CONTROLLER_FIELD_MANAGER, RESTORE_TARGETS_FINALIZER,
};
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

use crate::children::{apply_params, namespace_and_name};
use crate::context::{Pass, GATE_WAIT};
use crate::reconcilers::{status_patch, time};
use crate::{is_status, Context, Error, Result};
use futures::StreamExt;

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
pub async fn reconcile(scaler: Arc<Scaler>, ctx: Arc<Context>) -> Result<Action> {
    ctx.reconcile(KIND, scaler.as_ref(), with_finalizer(scaler.clone(), &ctx))
        .await
}

pub fn error_policy(scaler: Arc<Scaler>, error: &Error, ctx: Arc<Context>) -> Action {
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

async fn with_finalizer(scaler: Arc<Scaler>, ctx: &Context) -> Result<Action> {
    let (ns, _) = namespace_and_name(KIND, scaler.as_ref())?;
    let api: Api<Scaler> = Api::namespaced(ctx.client.clone(), &ns);
    match finalizer(
        &api,
        RESTORE_TARGETS_FINALIZER,
        scaler,
        |event| async move {
            match event {
                Finalizer::Apply(s) => apply(&s, ctx).await,
                Finalizer::Cleanup(s) => cleanup(&s, ctx).await,
            }
        },
    )
    .await
    {
        Ok(action) => Ok(action),
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

/// A target as named (its namespace resolved), with the address to reach it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Named {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Named {
    fn target(&self) -> Target {
        Target::new(&self.api_version, &self.kind, &self.namespace, &self.name)
    }

    fn status(&self) -> TargetStatus {
        TargetStatus {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            ..Default::default()
        }
    }
}

impl std::fmt::Display for Named {
    /// `StatefulSet team/db`, as events and conditions name it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Every target a Scaler names, resolved, without repeats (two entries may name one object when
/// stored while the webhook was down).
fn named_in_spec(scaler: &Scaler, own_ns: &str) -> Vec<Named> {
    let mut seen = BTreeSet::new();
    scaler
        .spec
        .targets(own_ns)
        .map(|(t, ns)| Named {
            api_version: t.api_version.clone(),
            kind: t.kind.clone(),
            namespace: ns.to_string(),
            name: t.name.clone(),
        })
        .filter(|n| seen.insert(n.target()))
        .collect()
}

fn named_in_status(status: &TargetStatus) -> Named {
    Named {
        api_version: status.api_version.clone(),
        kind: status.kind.clone(),
        namespace: status.namespace.clone(),
        name: status.name.clone(),
    }
}

/// A change to one target's replicas and its record of the original replicas.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetChange {
    /// A merge patch of the target's metadata: the record written (before scaling) or removed
    /// (after restoring), conditional on the resourceVersion read.
    pub record: Option<Value>,
    /// The replicas to set through `/scale`.
    pub replicas: Option<i32>,
    /// Whether the record goes after the replicas are set (a restore) rather than before.
    pub restoring: bool,
    pub reason: &'static str,
    pub note: String,
}

/// What a Scaler woken just before a boundary brings to it: its targets as read then, and its
/// pass through the boundary's gate, let go once its target writes are done, so that its events
/// and status wait for every other Scaler's target writes of that boundary.
struct Early {
    read: BTreeMap<Named, Current>,
    pass: Pass,
}

/// One target as read: its metadata and its replicas from `/scale`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Current {
    pub annotations: BTreeMap<String, String>,
    pub resource_version: Option<String>,
    pub replicas: i32,
    /// When the target was created or its pod template last written, whichever is later: a
    /// held target is left alone for the grace period after it (a rollout).
    pub settled_from: Option<DateTime<Utc>>,
    /// The field manager that owns its replicas (who scaled it last), from managedFields.
    pub scaled_by: Option<String>,
    /// Read from the watch's cache rather than from the apiserver: every write of it is then
    /// conditional on its resourceVersion, and a conflict reads it afresh.
    pub cached: bool,
}

impl Current {
    pub fn of(meta: &ObjectMeta, replicas: i32) -> Self {
        let (settled_from, scaled_by) = provenance(meta);
        Self {
            annotations: meta.annotations.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone(),
            replicas,
            settled_from,
            scaled_by,
            cached: false,
        }
    }
}

/// From a target's managedFields: the later of its creation and the last write by a manager
/// that owns its pod template, and the manager that owns its replicas.
fn provenance(meta: &ObjectMeta) -> (Option<DateTime<Utc>>, Option<String>) {
    let created = meta.creation_timestamp.as_ref().map(|t| t.0);
    let owns = |fields: &Value, field: &str| fields["f:spec"].get(field).is_some();
    let mut settled = created
        .and_then(|t| DateTime::from_timestamp(t.as_second(), 0))
        .into_iter()
        .collect::<Vec<_>>();
    let mut scaled_by = None;
    for entry in meta.managed_fields.iter().flatten() {
        let Some(fields) = entry.fields_v1.as_ref().map(|f| &f.0) else {
            continue;
        };
        if owns(fields, "f:template") {
            if let Some(at) = entry
                .time
                .as_ref()
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
            {
                settled.push(at);
            }
        }
        if owns(fields, "f:replicas") {
            scaled_by = entry.manager.clone();
        }
    }
    (settled.into_iter().max(), scaled_by)
}

/// Outside every window under `outside.mode: Hold`: a target above the held replicas `to` is
/// set back, once `grace` has passed since it settled ([`Current::settled_from`]); before that,
/// the time to look again. None when it is at or below `to`.
pub fn hold_change(
    target: &Named,
    current: &Current,
    to: i32,
    grace: Duration,
    now: DateTime<Utc>,
) -> Option<Result<TargetChange, DateTime<Utc>>> {
    let replicas = current.replicas;
    if replicas <= to {
        return None;
    }
    let grace = chrono::Duration::from_std(grace).unwrap_or_default();
    if let Some(until) = current.settled_from.map(|t| t + grace).filter(|u| *u > now) {
        return Some(Err(until));
    }
    let by = current
        .scaled_by
        .as_deref()
        .map(|m| format!(" (scaled up by {m})"))
        .unwrap_or_default();
    Some(Ok(TargetChange {
        record: None,
        replicas: Some(to),
        restoring: false,
        reason: reason::HELD,
        note: format!(
            "Set {target} back from {replicas} to {to} replicas outside every window{by}"
        ),
    }))
}

/// What a target needs from the Scaler `me`, given `record`, whose record of the original
/// replicas the target carries: `wanted` replicas in the schedule (recording the original and
/// `me` once), or, outside it, going back to `outside` or the recorded replicas. None when it is
/// as it should be, or when the record is another Scaler's.
pub fn target_change(
    target: &Named,
    current: &Current,
    me: &str,
    record: &Record,
    wanted: Option<i32>,
    outside: Option<i32>,
) -> Option<TargetChange> {
    let now = current.replicas;
    let rv = &current.resource_version;
    match (wanted, record) {
        (_, Record::Other(_)) => None,
        (Some(wanted), Record::Absent) => Some(TargetChange {
            record: Some(json!({"metadata": {"resourceVersion": rv, "annotations": {
                annotation::ORIGINAL_REPLICAS: now.to_string(),
                annotation::ORIGINAL_REPLICAS_OWNER: me,
            }}})),
            replicas: (now != wanted).then_some(wanted),
            restoring: false,
            reason: reason::SCALED,
            note: format!(
                "Scaled {target} from {now} to {wanted} replicas; recorded {now} to restore"
            ),
        }),
        (Some(wanted), Record::Mine { owner_recorded, .. }) if now != wanted || !owner_recorded => {
            Some(TargetChange {
                record: (!owner_recorded).then(|| {
                    json!({"metadata": {"resourceVersion": rv, "annotations": {
                        annotation::ORIGINAL_REPLICAS_OWNER: me,
                    }}})
                }),
                replicas: (now != wanted).then_some(wanted),
                restoring: false,
                reason: reason::SCALED,
                note: if now == wanted {
                    format!("Recorded this Scaler as the one that scaled {target}")
                } else {
                    format!("Scaled {target} from {now} back to {wanted} replicas")
                },
            })
        }
        (Some(_), Record::Mine { .. }) => None,
        (None, Record::Mine { replicas, .. }) => {
            let restore = outside.or(*replicas);
            Some(TargetChange {
                record: Some(json!({"metadata": {"annotations": {
                    annotation::ORIGINAL_REPLICAS: null,
                    annotation::ORIGINAL_REPLICAS_OWNER: null,
                }}})),
                replicas: restore.filter(|&to| to != now),
                restoring: true,
                reason: reason::RESTORED,
                note: match restore {
                    Some(to) => format!("Restored {target} from {now} to {to} replicas"),
                    None => format!("Released {target}; its recorded replicas were unreadable"),
                },
            })
        }
        (None, Record::Absent) => None,
    }
}

/// What an HPA needs from the Scaler `me`: its minReplicas at `wanted` (at most its
/// maxReplicas), the original recorded once; or, with `wanted` None, the recorded minReplicas
/// back and the record gone. None when it is as it should be or another Scaler's record.
pub fn hpa_change(
    hpa: &HorizontalPodAutoscaler,
    target: &Named,
    me: &str,
    wanted: Option<i32>,
) -> Option<TargetChange> {
    let name = format!(
        "HorizontalPodAutoscaler {}/{}",
        hpa.namespace().unwrap_or_default(),
        hpa.name_any()
    );
    let spec = hpa.spec.as_ref()?;
    let min = spec.min_replicas.unwrap_or(HPA_DEFAULT_MIN_REPLICAS);
    let record = Record::kept_in(hpa.annotations(), annotation::ORIGINAL_MIN_REPLICAS, me);
    // A minReplicas the apiserver accepts: at least 1, at most maxReplicas.
    let within_hpa = |n: i32| n.min(spec.max_replicas).max(HPA_DEFAULT_MIN_REPLICAS);
    let rv = hpa.resource_version();
    let set_min = |to: i32, annotations: Value| {
        json!({"metadata": {"resourceVersion": rv, "annotations": annotations},
               "spec": {"minReplicas": to}})
    };
    match (wanted, &record) {
        (_, Record::Other(_)) => None,
        (Some(wanted), _) => {
            let to = within_hpa(wanted);
            let recorded = matches!(
                record,
                Record::Mine {
                    owner_recorded: true,
                    ..
                }
            );
            if to == min && recorded {
                return None;
            }
            let annotations = match record {
                Record::Absent => json!({
                    annotation::ORIGINAL_MIN_REPLICAS: min.to_string(),
                    annotation::ORIGINAL_REPLICAS_OWNER: me,
                }),
                _ => json!({annotation::ORIGINAL_REPLICAS_OWNER: me}),
            };
            Some(TargetChange {
                record: Some(set_min(to, annotations)),
                replicas: Some(to),
                restoring: false,
                reason: reason::SCALED,
                note: format!(
                    "Set {name} minReplicas from {min} to {to} for {target}; it scales the target"
                ),
            })
        }
        (None, Record::Mine { replicas, .. }) => {
            let annotations = json!({
                annotation::ORIGINAL_MIN_REPLICAS: null,
                annotation::ORIGINAL_REPLICAS_OWNER: null,
            });
            // The recorded value is anyone's to edit who may edit the HPA: one the apiserver
            // would refuse (below 1, above maxReplicas) is brought within them, not retried.
            let recorded = replicas.unwrap_or(min);
            let to = within_hpa(recorded);
            let clamped = match to == recorded {
                true => String::new(),
                false => format!(" (recorded {recorded}, within 1..{})", spec.max_replicas),
            };
            Some(TargetChange {
                record: Some(set_min(to, annotations)),
                replicas: Some(to),
                restoring: true,
                reason: reason::RESTORED,
                note: format!("Restored {name} minReplicas from {min} to {to}{clamped}"),
            })
        }
        (None, Record::Absent) => None,
    }
}

/// The HPA among `hpas` that scales `target` (same group, kind and name, any version).
pub fn autoscaler_of<'a>(
    hpas: &'a [HorizontalPodAutoscaler],
    target: &Named,
) -> Option<&'a HorizontalPodAutoscaler> {
    hpas.iter().find(|h| {
        h.spec.as_ref().is_some_and(|s| {
            let r = &s.scale_target_ref;
            let api_version = r.api_version.as_deref().unwrap_or_default();
            r.name == target.name
                && r.kind == target.kind
                && group_of(api_version) == group_of(&target.api_version)
        })
    })
}

/// One target as a reconcile found it.
#[derive(Debug, Default)]
struct Seen {
    /// None when it does not exist.
    current: Option<Current>,
    /// The Scaler (`namespace/name`) whose record it carries, when that is another live one.
    claimed_by: Option<String>,
    /// Why it cannot be scaled at all.
    unscalable: Option<String>,
    /// The HPA the Scaler works through, by name.
    autoscaler: Option<String>,
    /// The KEDA ScaledObject the Scaler pauses instead, by name.
    scaled_object: Option<String>,
    /// When a target held outside every window leaves its grace period, to be looked at then.
    hold_until: Option<DateTime<Utc>>,
    /// What was done (or, in a dry run, would be), as (reason, note), when the caller tells of
    /// it itself: a selector's targets are told of in one event per reason.
    told: Vec<(&'static str, String)>,
}

/// The record on a target as the Scaler `me` sees it. A record of another Scaler counts only
/// while that Scaler exists and claims the target ([`Scaler::claimed_targets`]); a stale one
/// (its Scaler gone, or the target given back by it) is as good as none, so it is replaced
/// rather than trusted. When both claim it, the older owns it ([`Claimant`]): the record of a
/// younger one (written before `me` claimed it) is taken over with the replicas it recorded.
async fn record_of(
    ctx: &Context,
    target: &Named,
    annotations: &BTreeMap<String, String>,
    key: &str,
    me: &Claimant,
) -> Result<Record> {
    let record = Record::kept_in(annotations, key, &me.id());
    let Record::Other(owner) = &record else {
        return Ok(record);
    };
    let Some((owner_ns, owner_name)) = owner.split_once('/') else {
        return Ok(Record::Absent);
    };
    let api: Api<Scaler> = Api::namespaced(ctx.client.clone(), owner_ns);
    let claims_it = |other: &Scaler| {
        other.claimed_targets().contains(&target.target())
            || ctx
                .inventory
                .selects(&ctx.claims.read(), (owner_ns, owner_name), &target.target())
    };
    match api.get(owner_name).await {
        Ok(other) if !claims_it(&other) => Ok(Record::Absent),
        Ok(other) if Claimant::of(&other.metadata) > *me => Ok(Record::Mine {
            replicas: annotations.get(key).and_then(|v| v.trim().parse().ok()),
            owner_recorded: false,
        }),
        Ok(_) => Ok(record),
        Err(e) if is_status(&e, 404) => Ok(Record::Absent),
        // Whether it still targets it cannot be told; leaving it alone is the safe side.
        Err(e) if is_status(&e, 403) => Ok(record),
        Err(e) => Err(e.into()),
    }
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// The target's metadata and `/scale`, None when it does not exist.
async fn read(ctx: &Context, resource: &ApiResource, target: &Named) -> Result<Option<Current>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &target.namespace, resource);
    if replicas_in_spec(resource) {
        // The object itself has both: one request.
        let object = match api.get(&target.name).await {
            Ok(o) => o,
            Err(e) if is_status(&e, 404) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        return Ok(Some(Current::of(
            &object.metadata,
            spec_replicas(resource, &object).unwrap_or(0),
        )));
    }
    // Both at once: a transition waits on one round trip, not two.
    let (meta, scale) = tokio::join!(
        api.get_metadata(&target.name),
        ctx.mapper
            .get_scale(resource, &target.namespace, &target.name)
    );
    let meta = match meta {
        Ok(m) => m,
        Err(e) if is_status(&e, 404) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(scale) = scale? else {
        return Ok(None);
    };
    // The replicas' version: a conditional write of them fails if they changed since this read.
    let resource_version = scale.metadata.resource_version.clone();
    let mut current = Current::of(
        &meta.metadata,
        scale.spec.and_then(|s| s.replicas).unwrap_or(0),
    );
    current.resource_version = resource_version.or(current.resource_version);
    Ok(Some(current))
}

/// The HPA that scales `target`, while the Scaler cooperates with HPAs.
async fn autoscaler(
    ctx: &Context,
    scaler: &Scaler,
    target: &Named,
) -> Result<Option<HorizontalPodAutoscaler>> {
    if scaler.spec.hpa_cooperation() != HpaCooperation::Enabled {
        return Ok(None);
    }
    // Most targets of a fleet have none: known from the watch, without a read.
    if ctx.inventory.surely_unscaled(target) {
        return Ok(None);
    }
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), &target.namespace);
    let hpas = api.list(&ListParams::default()).await?;
    Ok(autoscaler_of(&hpas.items, target).cloned())
}

/// A change to a suspended kind (a CronJob) as its events say it: suspended or resumed.
fn suspension(target: &Named, change: TargetChange) -> TargetChange {
    let note = match change.replicas {
        Some(0) => format!("Suspended {target}"),
        Some(_) => format!("Resumed {target}"),
        None => return change,
    };
    TargetChange { note, ..change }
}

/// What a change is written to.
enum Via {
    Target,
    /// An HPA, by name.
    Autoscaler(String),
    /// A KEDA ScaledObject, by name.
    ScaledObject(String),
}

/// KEDA's ScaledObject kind (KEDA 2.x); it has no `/scale`, so it is addressed directly.
fn scaled_objects() -> ApiResource {
    ApiResource {
        group: "keda.sh".into(),
        version: "v1alpha1".into(),
        api_version: "keda.sh/v1alpha1".into(),
        kind: "ScaledObject".into(),
        plural: "scaledobjects".into(),
    }
}

/// The KEDA ScaledObject behind a target, by name, while the Scaler cooperates with
/// autoscalers: the owner of its HPA, or the one the Scaler paused (KEDA deletes its HPA while
/// paused), as the HPA watch last saw it or the target's status entry recorded it.
fn scaled_object_name(
    hpa: Option<&HorizontalPodAutoscaler>,
    recorded: Option<&TargetStatus>,
    remembered: Option<String>,
    owner: &Scaler,
) -> Option<String> {
    let recorded = recorded.and_then(|r| r.scaled_object.clone());
    // Switched off: only one this Scaler paused, to give it back (once resumed, its status no
    // longer names it, and the target is written itself).
    if owner.spec.hpa_cooperation() != HpaCooperation::Enabled {
        return recorded;
    }
    let owned = hpa.and_then(|h| keda_owner(h.owner_references()).map(str::to_string));
    // The status may lag behind (a reconcile woken by the HPA's deletion may see the Scaler
    // before its own last status write): what the HPA watch saw comes before it.
    owned.or(remembered).or(recorded)
}

/// The ScaledObject `name` in `ns`, None when it (or KEDA) is gone.
async fn scaled_object(ctx: &Context, ns: &str, name: &str) -> Result<Option<DynamicObject>> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &scaled_objects());
    Ok(api.get_opt(name).await?)
}

/// What a KEDA ScaledObject needs from the Scaler `me` for `target`: paused at `paused`
/// replicas through KEDA's own annotation (KEDA then deletes its HPA and holds the target
/// there; setting the HPA's minReplicas would be undone by KEDA), recording the annotation as
/// it was; with None, the annotation as it was before. None when it is as it should be, or when
/// another Scaler paused it.
pub fn keda_change(
    so: &DynamicObject,
    target: &Named,
    me: &str,
    paused: Option<i32>,
) -> Option<TargetChange> {
    let annotations = so.annotations();
    let name = format!(
        "ScaledObject {}/{}",
        so.namespace().unwrap_or_default(),
        so.name_any()
    );
    let now = annotations.get(annotation::KEDA_PAUSED_REPLICAS);
    let owner = annotations.get(annotation::ORIGINAL_REPLICAS_OWNER);
    let rv = so.resource_version();
    let patch = |annotations: Value| json!({"metadata": {"resourceVersion": rv, "annotations": annotations}});
    match (paused, owner) {
        (_, Some(other)) if other != me => None,
        (Some(n), _) => {
            let to = n.to_string();
            if now == Some(&to) && owner.is_some() {
                return None;
            }
            let mut record = json!({
                annotation::KEDA_PAUSED_REPLICAS: to,
                annotation::ORIGINAL_REPLICAS_OWNER: me,
            });
            if owner.is_none() {
                record[annotation::ORIGINAL_PAUSED_REPLICAS] =
                    json!(now.cloned().unwrap_or_default());
            }
            Some(TargetChange {
                record: Some(patch(record)),
                replicas: Some(n),
                restoring: false,
                reason: reason::SCALED,
                note: format!("Paused {name} at {n} replicas for {target}; KEDA scales the target"),
            })
        }
        (None, Some(_)) => {
            let before = annotations
                .get(annotation::ORIGINAL_PAUSED_REPLICAS)
                .filter(|v| !v.is_empty());
            let record = json!({
                annotation::KEDA_PAUSED_REPLICAS: before,
                annotation::ORIGINAL_PAUSED_REPLICAS: null,
                annotation::ORIGINAL_REPLICAS_OWNER: null,
            });
            let note = match before {
                Some(v) => format!("Restored {name} to paused at {v} replicas, as it was"),
                None => format!("Resumed {name}: KEDA scales {target} again"),
            };
            Some(TargetChange {
                record: Some(patch(record)),
                replicas: None,
                restoring: true,
                reason: reason::RESTORED,
                note,
            })
        }
        (None, None) => None,
    }
}

/// The HPA `name` in `ns`, None when it is gone.
async fn hpa_named(ctx: &Context, ns: &str, name: &str) -> Result<Option<HorizontalPodAutoscaler>> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    Ok(api.get_opt(name).await?)
}

/// Writes `change` to the target as read (`current`): for the apps/v1 workloads the record and
/// the replicas in one merge patch; for other kinds the record before the replicas (through
/// `/scale`), or after them on a restore. Returns the target as written.
async fn write_target(
    ctx: &Context,
    resource: &ApiResource,
    target: &Named,
    current: &Current,
    change: &TargetChange,
) -> std::result::Result<Current, kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &target.namespace, resource);
    let mut written = current.clone();
    let scale = |to: i32, rv: Option<String>| async move {
        ctx.mapper
            .set_replicas(
                resource,
                &target.namespace,
                &target.name,
                to,
                rv.as_deref(),
                &params(),
            )
            .await
    };
    // Where /scale is the object's spec.replicas, the record and the replicas go in one write:
    // one round trip less at a boundary, and no moment with one written and not the other.
    // A suspended kind has no /scale: its replicas are always written this way.
    let suspended = suspended_instead(&resource.group, &resource.plural);
    let one_write = match &change.record {
        Some(record) => Some(record.clone()),
        None if suspended => Some(json!({})),
        None => None,
    };
    if let (Some(mut patch), Some(to), true) =
        (one_write, change.replicas, replicas_in_spec(resource))
    {
        patch["spec"] = replicas_patch(resource, to);
        if change.restoring || change.record.is_none() || current.cached {
            patch["metadata"]["resourceVersion"] = json!(current.resource_version);
        }
        let object = api
            .patch(&target.name, &params(), &Patch::Merge(&patch))
            .await?;
        let replicas = spec_replicas(resource, &object).unwrap_or(to);
        written = Current::of(&object.metadata, replicas);
        ctx.inventory.remember(target, &written);
        return Ok(written);
    }
    // Conditional on what was read, so a concurrent change means a retry; but right after the
    // record, which was itself conditional, not again: the target's controller bumps the
    // resourceVersion with every status write, and the record must not be written twice.
    let mut rv = current.resource_version.clone();
    if !change.restoring {
        if let Some(record) = &change.record {
            let meta = api
                .patch_metadata(&target.name, &params(), &Patch::Merge(record))
                .await?;
            written.annotations = meta.annotations().clone();
            rv = None;
        }
    }
    if let Some(to) = change.replicas {
        let scaled = scale(to, rv).await?;
        written.replicas = scaled.spec.and_then(|s| s.replicas).unwrap_or(to);
    }
    if change.restoring {
        if let Some(record) = &change.record {
            let meta = api
                .patch_metadata(&target.name, &params(), &Patch::Merge(record))
                .await?;
            written.annotations = meta.annotations().clone();
        }
    }
    Ok(written)
}

/// Whether `resource`'s /scale is its own `spec.replicas` (the apps/v1 workloads), so that one
/// merge patch of the object can set the replicas and the record together.
pub fn replicas_in_spec(resource: &ApiResource) -> bool {
    replicas_in_spec_kind(&resource.group, &resource.kind)
}

/// [`replicas_in_spec`] of the kind `group`/`kind`.
pub fn replicas_in_spec_kind(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("apps", "Deployment" | "StatefulSet" | "ReplicaSet") | ("batch", "CronJob")
    )
}

/// The spec part of a merge patch that gives the object `to` replicas: a suspended kind is
/// suspended at 0 and runs at 1 or more.
fn replicas_patch(resource: &ApiResource, to: i32) -> Value {
    match suspended_instead(&resource.group, &resource.plural) {
        true => json!({"suspend": to == 0}),
        false => json!({"replicas": to}),
    }
}

/// The `spec.replicas` of an apps/v1 workload (defaulted by the apiserver, so always there); a
/// suspended kind's replicas, 0 while suspended and 1 while not.
pub fn spec_replicas(resource: &ApiResource, object: &DynamicObject) -> Option<i32> {
    if suspended_instead(&resource.group, &resource.plural) {
        let suspended = object.data["spec"]["suspend"].as_bool().unwrap_or(false);
        return Some(if suspended { 0 } else { 1 });
    }
    object.data["spec"]["replicas"]
        .as_i64()
        .and_then(|r| i32::try_from(r).ok())
}

/// `release`: the Scaler lets go of the target (deleted, or the target left its spec), so an
/// HPA gets its own minReplicas back whatever outsideReplicas says.
///
/// `prefetched`, `pass`: what the Scaler read of the target just before a boundary, and its
/// place at the boundary's gate (see [`Early`]).
/// `recorded`: the target's status entry: the HPA this Scaler last worked through for it, when
/// the spec no longer finds that one (`hpaCooperation` switched off, the HPA retargeted), has
/// its minReplicas given back by that name; the KEDA ScaledObject it paused (whose HPA KEDA
/// deleted meanwhile) is found again by its name.
#[allow(clippy::too_many_arguments)]
async fn reconcile_target(
    ctx: &Context,
    owner: &Scaler,
    target: &Named,
    wanted: Option<i32>,
    outside: Option<i32>,
    release: bool,
    recorded: Option<&TargetStatus>,
    (mut prefetched, pass): (Option<Current>, Option<&Pass>),
    gather: bool,
) -> Result<Seen> {
    let mut done = Vec::new();
    let resource = match ctx
        .mapper
        .resolve(&target.api_version, &target.kind)
        .await?
    {
        Ok(r) => r,
        Err(why) => {
            return Ok(Seen {
                unscalable: Some(why.to_string()),
                ..Seen::default()
            })
        }
    };
    let (own_ns, own_name) = namespace_and_name(KIND, owner)?;
    let me = scaler_id(&own_ns, &own_name);
    let claimant = Claimant::of(owner.meta());
    // In the schedule (or held at outsideReplicas), the replicas every target should have.
    let effective = wanted.or(outside);
    let mut attempt = 0;
    loop {
        let current = async {
            match prefetched.take() {
                Some(read_before) => Ok(Some(read_before)),
                // From the watch first; after a conflict, from the apiserver.
                None if attempt == 0 => match ctx.inventory.current(target) {
                    Some(cached) => Ok(cached.map(|c| Current { cached: true, ..c })),
                    None => read(ctx, &resource, target).await,
                },
                None => read(ctx, &resource, target).await,
            }
        };
        let (current, hpa) = tokio::try_join!(current, autoscaler(ctx, owner, target))?;
        let Some(current) = current else {
            return Ok(Seen::default());
        };
        // A target KEDA scales (its HPA owned by a ScaledObject, or a ScaledObject this Scaler
        // paused, whose HPA KEDA deleted meanwhile) is paused through KEDA instead.
        let remembered = ctx.inventory.scaled_object_of(target);
        let keda = match scaled_object_name(hpa.as_ref(), recorded, remembered, owner) {
            Some(name) => scaled_object(ctx, &target.namespace, &name).await?,
            None => None,
        };
        let recorded_hpa = recorded.and_then(|r| r.horizontal_pod_autoscaler.as_deref());
        let earlier = match recorded_hpa {
            Some(name) if hpa.as_ref().is_none_or(|h| h.name_any() != name) => {
                hpa_named(ctx, &target.namespace, name).await?
            }
            _ => None,
        };
        let record = record_of(
            ctx,
            target,
            &current.annotations,
            annotation::ORIGINAL_REPLICAS,
            &claimant,
        )
        .await?;
        let claimed_by = match &record {
            Record::Other(other) => Some(other.clone()),
            _ => None,
        };
        // With an HPA, replicas of 1 or more go to its minReplicas and the target is left to it
        // (given back if the Scaler had scaled it to 0, where an HPA does not act); 0 and the
        // way back outside go to the target itself, with the HPA's own minReplicas restored.
        let (target_change_of, hpa_wanted) = match (&hpa, effective) {
            (Some(_), Some(n)) if n >= 1 && !release => ((None, None), Some(n)),
            _ => ((wanted, outside), None),
        };
        let mut changes = Vec::new();
        if let Some(earlier) = earlier.as_ref().filter(|_| keda.is_none()) {
            if let Some(change) = hpa_change(earlier, target, &me, None) {
                changes.push((Via::Autoscaler(earlier.name_any()), change));
            }
        }
        // Paused while the schedule says so; resumed on the way back, or once cooperation is
        // switched off (the target is then written itself from the next reconcile).
        let cooperate = owner.spec.hpa_cooperation() == HpaCooperation::Enabled;
        let paused = effective.filter(|_| !release && cooperate);
        if let Some(so) = &keda {
            if let Some(change) = keda_change(so, target, &me, paused) {
                changes.push((Via::ScaledObject(so.name_any()), change));
            }
        }
        if let Some(hpa) = hpa.as_ref().filter(|_| keda.is_none()) {
            let hpa_record = record_of(
                ctx,
                target,
                hpa.annotations(),
                annotation::ORIGINAL_MIN_REPLICAS,
                &claimant,
            )
            .await?;
            if !matches!(hpa_record, Record::Other(_)) {
                if let Some(change) = hpa_change(hpa, target, &me, hpa_wanted) {
                    changes.push((Via::Autoscaler(hpa.name_any()), change));
                }
            }
        }
        let (mut w, mut o) = target_change_of;
        let suspended = suspended_instead(&resource.group, &resource.plural);
        if suspended {
            // Suspended at 0; at 1 or more as it was before the Scaler (never resumed by it).
            let running = match &record {
                Record::Mine {
                    replicas: Some(r), ..
                } => (*r).clamp(0, 1),
                _ => current.replicas,
            };
            let level = |n: i32| if n == 0 { 0 } else { running };
            w = w.map(level);
            o = o.map(level);
        }
        let mut hold_until = None;
        let told = |change: TargetChange| match suspended {
            true => suspension(target, change),
            false => change,
        };
        // KEDA scales a paused target itself: it is never written here.
        if keda.is_some() {
        } else if let Some(change) = target_change(target, &current, &me, &record, w, o) {
            changes.push((Via::Target, told(change)));
        } else if let (None, false, None, Record::Absent, Some((to, grace))) =
            (w, release, &hpa, &record, owner.spec.hold())
        {
            // Outside every window, held: set back what was scaled up meanwhile.
            match hold_change(target, &current, to, grace, ctx.clock.now()) {
                Some(Ok(change)) => changes.push((Via::Target, told(change))),
                Some(Err(until)) => hold_until = Some(until),
                None => {}
            }
        }
        let seen = |current: Option<Current>, told: Vec<(&'static str, String)>| Seen {
            current,
            claimed_by: claimed_by.clone(),
            unscalable: None,
            autoscaler: hpa
                .as_ref()
                .filter(|_| keda.is_none())
                .map(|h| h.name_any()),
            scaled_object: keda
                .as_ref()
                .filter(|_| paused.is_some())
                .map(|so| so.name_any()),
            hold_until,
            told,
        };
        if changes.is_empty() {
            return Ok(seen(Some(current), done));
        }
        // A dry run says what it would write, and writes nothing; giving back is still done.
        if owner.spec.dry_run() && !release {
            for (_, change) in &changes {
                let note = format!("Dry run, not done: {}", change.note);
                info!(target = %target, reason = reason::DRY_RUN, "{note}");
                match gather {
                    true => done.push((reason::DRY_RUN, note)),
                    false => {
                        ctx.publish(owner, EventType::Normal, reason::DRY_RUN, note)
                            .await
                    }
                }
            }
            return Ok(seen(Some(current), done));
        }
        let mut conflict = false;
        let mut now = current.clone();
        for (via, change) in &changes {
            let patch = change.record.clone().unwrap_or_default();
            let written = match via {
                Via::Autoscaler(hpa) => {
                    let api: Api<HorizontalPodAutoscaler> =
                        Api::namespaced(ctx.client.clone(), &target.namespace);
                    api.patch(hpa, &params(), &Patch::Merge(patch))
                        .await
                        .map(|_| now.clone())
                }
                Via::ScaledObject(name) => {
                    let api: Api<DynamicObject> = Api::namespaced_with(
                        ctx.client.clone(),
                        &target.namespace,
                        &scaled_objects(),
                    );
                    api.patch(name, &params(), &Patch::Merge(patch))
                        .await
                        .map(|_| now.clone())
                }
                Via::Target => write_target(ctx, &resource, target, &current, change).await,
            };
            match written {
                Ok(written) => {
                    now = written;
                    info!(target = %target, reason = change.reason, "{}", change.note);
                    if gather {
                        done.push((change.reason, change.note.clone()));
                        continue;
                    }
                    if let Some(pass) = pass {
                        pass.leave_and_wait(GATE_WAIT).await;
                    }
                    ctx.publish(owner, EventType::Normal, change.reason, change.note.clone())
                        .await;
                }
                Err(e) if is_status(&e, 409) && attempt + 1 < CONFLICT_RETRIES => {
                    conflict = true;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if conflict {
            attempt += 1;
            continue;
        }
        return Ok(seen(Some(now), done));
    }
}

fn target_status(target: &Named, seen: &Seen, me: &str) -> TargetStatus {
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
        ..target.status()
    }
}

async fn apply(scaler: &Scaler, ctx: &Context) -> Result<Action> {
    let (ns, name) = namespace_and_name(KIND, scaler)?;
    let generation = scaler.meta().generation;
    let previous = scaler.status.clone().unwrap_or_default();
    let suspended = scaler.spec.suspend();
    let me = scaler_id(&ns, &name);
    let claimant = Claimant::of(scaler.meta());
    let selected = select(scaler, &claimant, ctx).await;
    let mut wanted_targets = named_in_spec(scaler, &ns);
    let named: BTreeSet<Named> = wanted_targets.iter().cloned().collect();
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
            .older_claimant(&target.target(), &claimant)
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
    let wanted: BTreeSet<&Named> = wanted_targets.iter().collect();
    let listed: BTreeSet<Named> = previous.targets.iter().map(named_in_status).collect();
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

/// One event note per reason for what was done to a selector's targets: the first few notes
/// and how many more.
fn summaries(told: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    let mut by_reason: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (reason, note) in told {
        info!(reason, "{note}");
        by_reason.entry(reason).or_default().push(note);
    }
    by_reason
        .into_iter()
        .map(|(reason, notes)| {
            let note = match notes.len() {
                1 => notes.join(""),
                n => format!("{n} selected targets: {}", listing(&notes, "; ")),
            };
            (reason, note)
        })
        .collect()
}

/// The first few of `items`, joined with `by`, and how many more there are: a condition's
/// message stays readable for a fleet.
fn listing(items: &[String], by: &str) -> String {
    const SHOWN: usize = 10;
    let shown = items[..items.len().min(SHOWN)].join(by);
    match items.len().checked_sub(SHOWN) {
        Some(more) if more > 0 => format!("{shown}{by}and {more} more"),
        _ => shown,
    }
}

/// What the Scaler's selector picks now. The watches of the kinds it names (and of the
/// namespaces, for a namespaceSelector) are started the first time; until they have listed
/// everything once, the pick is incomplete and nothing is given back for no longer matching.
async fn select(scaler: &Scaler, me: &Claimant, ctx: &Context) -> crate::inventory::Selected {
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

/// Enters the boundary's gate, reads `targets` (those that exist and can be scaled), and waits
/// until the boundary `at`.
async fn read_early(ctx: &Context, targets: &[Named], at: DateTime<Utc>) -> Result<Early> {
    let pass = ctx.boundary.enter();
    let mut read = BTreeMap::new();
    for target in targets {
        if let Some(current) = look(ctx, target).await?.current {
            read.insert(target.clone(), current);
        }
    }
    tokio::time::sleep(until(ctx.clock.now(), at)).await;
    Ok(Early { read, pass })
}

/// `now`, or the next transition in `status` when that is at most [`BOUNDARY_TOLERANCE`] away.
fn at_boundary(now: DateTime<Utc>, status: &ScalerStatus) -> DateTime<Utc> {
    transition_within(now, status, BOUNDARY_TOLERANCE).unwrap_or(now)
}

/// The next transition in `status`, when it is after `now` and at most `lead` away.
fn transition_within(
    now: DateTime<Utc>,
    status: &ScalerStatus,
    lead: Duration,
) -> Option<DateTime<Utc>> {
    let at = status
        .next_transitions
        .first()
        .and_then(|t| DateTime::from_timestamp(t.time.0.as_second(), 0))?;
    (at > now && (at - now).to_std().is_ok_and(|d| d <= lead)).then_some(at)
}

/// A target as it is, without changing it.
async fn look(ctx: &Context, target: &Named) -> Result<Seen> {
    match ctx
        .mapper
        .resolve(&target.api_version, &target.kind)
        .await?
    {
        Ok(resource) => Ok(Seen {
            current: match ctx.inventory.current(target) {
                Some(cached) => cached.map(|c| Current { cached: true, ..c }),
                None => read(ctx, &resource, target).await?,
            },
            ..Seen::default()
        }),
        Err(why) => Ok(Seen {
            unscalable: Some(why.to_string()),
            ..Seen::default()
        }),
    }
}

/// The earlier of two times, either of which may be missing.
fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When to look at a Scaler again after a reconcile.
fn next_action(next: Option<DateTime<Utc>>, suspended: bool, now: DateTime<Utc>) -> Action {
    match next {
        _ if suspended => Action::await_change(),
        // Woken a little early, to read the targets before the boundary (see `apply`); from
        // closer than that, at the boundary itself.
        Some(next) => {
            let left = until(now, next);
            match left > PREFETCH_LEAD {
                true => Action::requeue(left - PREFETCH_LEAD),
                false => Action::requeue(left),
            }
        }
        None => Action::requeue(NO_TRANSITION_RECHECK),
    }
}

/// The time to sleep from `now` until `next` (a timer never fires early; see [`at_boundary`]).
pub fn until(now: DateTime<Utc>, next: DateTime<Utc>) -> Duration {
    (next - now).to_std().unwrap_or_default()
}

/// A deleted Scaler gives every target it scaled back, as when its window closes, each on its
/// own. A target the apiserver refuses to give back (a recorded value it rejects, a write it
/// forbids: nothing a retry changes) is reported with a Warning event and let go, so that it
/// never holds the Scaler's deletion; other failures keep the finalizer and are retried.
async fn cleanup(scaler: &Scaler, ctx: &Context) -> Result<Action> {
    let (ns, name) = namespace_and_name(KIND, scaler)?;
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

/// The error of a reconcile in which the changes to these targets failed, if any did.
fn targets_failed(failed: Vec<(Named, Error)>) -> Option<Error> {
    let count = failed.len();
    let (target, first) = failed.into_iter().next()?;
    Some(Error::Targets {
        count,
        target: target.to_string(),
        first: Box::new(first),
    })
}

/// Whether the apiserver refused a write for good: a 4xx other than a conflict or throttling.
fn refused(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(s))
        if (400..500).contains(&s.code) && s.code != 409 && s.code != 429)
}

/// The status entry of `target`: what the Scaler last worked through for it (an HPA, a KEDA
/// ScaledObject).
fn recorded_entry<'a>(status: &'a ScalerStatus, target: &Named) -> Option<&'a TargetStatus> {
    status
        .targets
        .iter()
        .find(|t| named_in_status(t) == *target)
}

/// The status entry of a target whose change failed: as it was last seen, with why it failed.
fn failed_entry(previous: &ScalerStatus, target: &Named, error: &Error) -> TargetStatus {
    let before = previous
        .targets
        .iter()
        .find(|t| named_in_status(t) == *target)
        .cloned()
        .unwrap_or_else(|| target.status());
    TargetStatus {
        error: Some(error.to_string()),
        ..before
    }
}

async fn patch_status(ctx: &Context, ns: &str, name: &str, status: &ScalerStatus) -> Result<()> {
    let api: Api<Scaler> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(name, &apply_params(), &status_patch::<Scaler>(status))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, at, Call};
    use kubesteer_runtime::scale::Unscalable;
    use serde_json::json;

    const STATUS: &str = "/apis/kubesteer.io/v1beta1/namespaces/team/scalers/nightly/status?&force=true&fieldManager=kubesteer-controller";
    const WEB: &str = "/apis/apps/v1/namespaces/team/deployments/web";
    const API: &str = "/apis/apps/v1/namespaces/other/deployments/api";
    const SCALER: &str = "/apis/kubesteer.io/v1beta1/namespaces/team/scalers/nightly?";
    const HPAS: &str = "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers?";
    const ME: &str = "team/nightly";

    /// The object at `base`, patched (metadata or /scale) by the controller.
    fn patch_of(base: &str) -> String {
        format!("{base}?&fieldManager=kubesteer-controller")
    }

    fn scale_of(base: &str) -> String {
        format!("{base}/scale")
    }

    /// A context at `now` whose RESTMapper knows Deployments and StatefulSets.
    fn ctx_at(now: &str) -> (Arc<Context>, fixtures::Verifier) {
        let (ctx, verifier) = fixtures::context_at(at(now));
        for (kind, plural) in [
            ("Deployment", "deployments"),
            ("StatefulSet", "statefulsets"),
        ] {
            let resource = ApiResource {
                group: "apps".into(),
                version: "v1".into(),
                api_version: "apps/v1".into(),
                kind: kind.into(),
                plural: plural.into(),
            };
            ctx.mapper.remember("apps/v1", kind, Ok(resource));
        }
        (ctx, verifier)
    }

    fn scaler(spec: Value) -> Scaler {
        serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"name": "nightly", "namespace": "team", "uid": "scl-uid", "generation": 3,
                         "finalizers": [RESTORE_TARGETS_FINALIZER]},
            "spec": spec,
        }))
        .unwrap()
    }

    fn deployment(name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name})
    }

    /// Deployment web, 09:00-17:00 UTC at 5 replicas, not cooperating with HPAs.
    fn nine_to_five() -> Scaler {
        scaler(json!({"scaleTargetRefs": [deployment("web")],
                      "windows": [{"start": 9, "end": 17, "replicas": 5}],
                      "hpaCooperation": "Disabled"}))
    }

    /// A target's metadata, with this Scaler's record of `original` replicas.
    fn meta(ns: &str, name: &str, original: Option<i32>) -> Value {
        let mut m = json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "41"},
        });
        if let Some(o) = original {
            m["metadata"]["annotations"] = json!({
                annotation::ORIGINAL_REPLICAS: o.to_string(),
                annotation::ORIGINAL_REPLICAS_OWNER: ME,
            });
        }
        m
    }

    fn scale(ns: &str, name: &str, replicas: i32) -> Value {
        json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "41"},
            "spec": {"replicas": replicas}, "status": {"replicas": replicas},
        })
    }

    /// Whether `base` is an apps/v1 workload, read and written as one object.
    fn is_apps(base: &str) -> bool {
        base.starts_with("/apis/apps/v1/")
    }

    /// The reads of a target: an apps/v1 workload whole; another kind's metadata and /scale.
    fn reads(base: &str, metadata: Value, replicas: i32) -> Vec<Call> {
        if is_apps(base) {
            return vec![Call::get(base).respond(written(metadata, &json!({}), replicas))];
        }
        let ns = metadata["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        let name = metadata["metadata"]["name"].as_str().unwrap().to_string();
        vec![
            Call::get(base).respond(metadata),
            Call::get(&scale_of(base)).respond(scale(&ns, &name, replicas)),
        ]
    }

    /// The reads of a target that does not exist.
    fn absent(base: &str) -> Vec<Call> {
        if is_apps(base) {
            return vec![Call::get(base).not_found()];
        }
        vec![
            Call::get(base).not_found(),
            Call::get(&scale_of(base)).not_found(),
        ]
    }

    /// The object (a Deployment or StatefulSet) as a merge patch of its record and replicas
    /// left it.
    fn written(before: Value, patch: &Value, replicas: i32) -> Value {
        let mut object = annotated(before, patch);
        object["spec"] = json!({"replicas": replicas});
        object
    }

    /// The metadata after a merge patch of its annotations.
    fn annotated(mut before: Value, patch: &Value) -> Value {
        if let Some(a) = patch["metadata"]["annotations"].as_object() {
            for (k, v) in a {
                if v.is_null() {
                    if let Some(m) = before["metadata"]["annotations"].as_object_mut() {
                        m.remove(k);
                    }
                } else {
                    before["metadata"]["annotations"][k] = v.clone();
                }
            }
        }
        before
    }

    /// The merge patch of this Scaler's record of `original` replicas, conditional on version 41.
    fn recorded(original: &str) -> Value {
        json!({"metadata": {"resourceVersion": "41", "annotations": {
            annotation::ORIGINAL_REPLICAS: original, annotation::ORIGINAL_REPLICAS_OWNER: ME,
        }}})
    }

    fn calls(groups: Vec<Vec<Call>>) -> Vec<Call> {
        groups.into_iter().flatten().collect()
    }

    #[tokio::test]
    async fn opening_the_window_records_the_original_replicas_once_and_scales() {
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let record = recorded("2");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::patch(&patch_of(WEB))
                    // The record and the replicas in one write, conditional on the read.
                    .body({
                        let mut r = record.clone();
                        r["spec"] = json!({"replicas": 5});
                        move |b| assert_eq!(b, &r)
                    })
                    .respond(written(meta("team", "web", None), &record, 5)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "Scaled");
                        assert_eq!(b["type"], "Normal");
                        assert_eq!(
                            b["note"],
                            "Scaled Deployment team/web from 2 to 5 replicas; recorded 2 to restore"
                        );
                        assert_eq!(b["regarding"]["kind"], "Scaler");
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["active"], true);
                        assert_eq!(
                            s["nextTransitions"][0],
                            json!({"time": "2025-03-03T17:00:00Z"})
                        );
                        assert_eq!(s["lastTransition"], "2025-03-03T09:00:00Z");
                        assert_eq!(
                            s["targets"],
                            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                    "namespace": "team", "replicas": 5, "originalReplicas": 2}])
                        );
                        assert_eq!(s["observedGeneration"], 3);
                        assert_eq!(s["conditions"][0]["reason"], "WindowOpen");
                        assert_eq!(s["conditions"][0]["status"], "True");
                    })
                    .respond_status_of(&nine_to_five()),
            ],
        ]));
        let action = reconcile(Arc::new(nine_to_five()), ctx.clone())
            .await
            .unwrap();
        assert_eq!(
            action,
            Action::requeue(Duration::from_secs(5 * 3600) - PREFETCH_LEAD),
            "requeued at the closing boundary"
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn woken_just_before_a_boundary_it_reads_first_and_only_writes_at_the_boundary() {
        let (ctx, verifier) = ctx_at("2025-03-03T08:59:59.850Z");
        let mut s = nine_to_five();
        s.status = Some(ScalerStatus {
            next_transitions: vec![Transition {
                time: time(at("2025-03-03T09:00:00Z")),
                replicas: Some(5),
            }],
            ..ScalerStatus::default()
        });
        let record = recorded("2");
        // One read, before the boundary; the write uses it.
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::patch(&patch_of(WEB))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 5))
                    .respond(written(meta("team", "web", None), &record, 5)),
                Call::event("team").respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(b["status"]["lastTransition"], "2025-03-03T09:00:00Z");
                        assert_eq!(b["status"]["active"], true);
                    })
                    .respond_status_of(&nine_to_five()),
            ],
        ]));
        let started = std::time::Instant::now();
        let action = reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        // The fixed clock stands still: the reconcile waited the 150 ms to the boundary itself.
        assert!(started.elapsed() >= Duration::from_millis(150));
        // (Measured from the clock after the writes, which the fixed clock keeps 150 ms early.)
        assert_eq!(
            action,
            Action::requeue(Duration::from_millis(8 * 3600 * 1000 + 150) - PREFETCH_LEAD)
        );
        scenario.finish(ctx).await;
    }

    #[test]
    fn a_requeue_wakes_before_the_boundary_unless_it_is_closer_than_the_lead() {
        let now = at("2025-03-03T08:00:00Z");
        let hour = at("2025-03-03T09:00:00Z");
        assert_eq!(
            next_action(Some(hour), false, now),
            Action::requeue(Duration::from_secs(3600) - PREFETCH_LEAD)
        );
        let close = at("2025-03-03T07:59:59.900Z");
        assert_eq!(
            next_action(Some(now), false, close),
            Action::requeue(Duration::from_millis(100))
        );
        assert_eq!(next_action(Some(hour), true, now), Action::await_change());
    }

    #[tokio::test]
    async fn closing_the_window_restores_the_recorded_replicas_and_removes_the_record_in_one_write()
    {
        let (ctx, verifier) = ctx_at("2025-03-03T17:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 5),
            vec![
                Call::patch(&patch_of(WEB))
                    // The replicas back and the record gone in one write, conditional on the read.
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!({"metadata": {"resourceVersion": "41", "annotations": {
                                annotation::ORIGINAL_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null,
                            }}, "spec": {"replicas": 2}})
                        )
                    })
                    .respond(written(meta("team", "web", None), &json!({}), 2)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "Restored");
                        assert_eq!(b["note"], "Restored Deployment team/web from 5 to 2 replicas");
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["active"], false);
                        assert_eq!(
                            s["nextTransitions"][0],
                            json!({"time": "2025-03-04T09:00:00Z", "replicas": 5})
                        );
                        assert_eq!(s["lastTransition"], "2025-03-03T17:00:00Z");
                        assert_eq!(s["targets"][0]["replicas"], 2);
                        assert!(s["targets"][0].get("originalReplicas").is_none(), "{s}");
                        assert_eq!(s["conditions"][0]["reason"], "WindowClosed");
                    })
                    .respond_status_of(&nine_to_five()),
            ],
        ]));
        let action = reconcile(Arc::new(nine_to_five()), ctx.clone())
            .await
            .unwrap();
        assert_eq!(
            action,
            Action::requeue(Duration::from_secs(16 * 3600) - PREFETCH_LEAD)
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn closing_goes_to_outside_replicas_when_set() {
        let s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "windows": [{"start": 9, "end": 17, "replicas": 5}], "outsideReplicas": 1,
            "hpaCooperation": "Disabled"}));
        let (ctx, verifier) = ctx_at("2025-03-03T18:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 5),
            vec![
                Call::patch(&patch_of(WEB))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 1))
                    .respond(written(meta("team", "web", None), &json!({}), 1)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(
                            b["note"],
                            "Restored Deployment team/web from 5 to 1 replicas"
                        )
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(
                            b["status"]["nextTransitions"][1],
                            json!({"time": "2025-03-04T17:00:00Z", "replicas": 1}),
                            "a closing shows the outside replicas"
                        )
                    })
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_manual_change_inside_the_window_is_reverted_and_the_original_kept() {
        let (ctx, verifier) = ctx_at("2025-03-03T10:30:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 7),
            vec![
                Call::patch(&patch_of(&scale_of(WEB)))
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 5}})
                        )
                    })
                    .respond(scale("team", "web", 5)),
                Call::event("team")
                    .body(|b| assert!(b["note"].as_str().unwrap().contains("from 7 back to 5")))
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(b["status"]["targets"][0]["originalReplicas"], 2);
                        assert_eq!(b["status"]["targets"][0]["replicas"], 5);
                    })
                    .respond_status_of(&nine_to_five()),
            ],
        ]));
        reconcile(Arc::new(nine_to_five()), ctx.clone())
            .await
            .unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_closed_window_makes_no_target_writes_and_requeues_at_the_next_boundary() {
        let now = "2025-03-03T06:15:30Z";
        let (ctx, verifier) = ctx_at(now);
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["active"], false);
                    assert_eq!(
                        b["status"]["nextTransitions"][0]["time"],
                        "2025-03-03T09:00:00Z"
                    );
                    assert_eq!(b["status"]["targets"][0]["replicas"], 2);
                })
                .respond_status_of(&nine_to_five())],
        ]));
        let action = reconcile(Arc::new(nine_to_five()), ctx.clone())
            .await
            .unwrap();
        assert_eq!(
            action,
            Action::requeue(Duration::from_secs(2 * 3600 + 44 * 60 + 30) - PREFETCH_LEAD)
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_missing_target_is_reported_and_the_others_are_still_scaled() {
        let s = scaler(json!({"scaleTargetRefs": [deployment("web"),
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "other"}],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "hpaCooperation": "Disabled"}));
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            absent(WEB),
            reads(API, meta("other", "api", None), 1),
            vec![
                Call::patch(&patch_of(API))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 3))
                    .respond(written(meta("other", "api", Some(1)), &json!({}), 3)),
                Call::event("team")
                    .body(|b| assert_eq!(b["reason"], "Scaled"))
                    .respond_with_body(),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "TargetNotFound");
                        assert_eq!(b["type"], "Warning");
                        assert_eq!(b["note"], "Deployment team/web not found");
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["conditions"][0]["status"], "False");
                        assert_eq!(s["conditions"][0]["reason"], "TargetNotFound");
                        assert_eq!(
                            s["targets"][0],
                            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team"})
                        );
                        assert_eq!(s["targets"][1]["replicas"], 3);
                    })
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn one_failing_target_never_blocks_the_others_and_is_shown_on_its_entry() {
        let refusal = "Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: 3";
        let s = scaler(json!({"scaleTargetRefs": [deployment("web"),
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "other"}],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "hpaCooperation": "Disabled"}));
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 1),
            vec![Call::patch(&patch_of(WEB)).error(422, refusal)],
            reads(API, meta("other", "api", None), 1),
            vec![
                Call::patch(&patch_of(API))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 3))
                    .respond(written(meta("other", "api", Some(1)), &json!({}), 3)),
                Call::event("team")
                    .body(|b| assert_eq!(b["reason"], "Scaled"))
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(move |b| {
                        let s = &b["status"];
                        assert_eq!(s["conditions"][0]["reason"], "TargetFailed");
                        let error = s["targets"][0]["error"].as_str().unwrap();
                        assert!(error.contains(refusal), "{error}");
                        assert_eq!(s["targets"][0]["name"], "web");
                        assert_eq!(s["targets"][1]["replicas"], 3);
                        assert!(s["targets"][1].get("error").is_none());
                    })
                    .respond_status_of(&s),
                Call::event("team")
                    .body(move |b| {
                        assert_eq!(b["reason"], "ReconcileFailed");
                        assert_eq!(b["type"], "Warning");
                        let note = b["note"].as_str().unwrap();
                        assert!(note.contains("Deployment team/web: "), "{note}");
                        assert!(note.contains(refusal), "{note}");
                        assert!(note.ends_with("(1 target(s) failed)"), "{note}");
                    })
                    .respond_with_body(),
            ],
        ]));
        let failed = reconcile(Arc::new(s), ctx.clone()).await.unwrap_err();
        assert!(failed.admission_denial().is_none(), "{failed}");
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_deleted_scaler_lets_go_of_a_target_the_apiserver_refuses_and_restores_the_others() {
        let mut s = scaler(json!({"scaleTargetRefs": [deployment("web"),
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "other"}],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "hpaCooperation": "Disabled"}));
        s.metadata.deletion_timestamp = Some(time(at("2025-03-03T12:00:00Z")));
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 3),
            vec![Call::patch(&patch_of(WEB)).error(403, "forbidden")],
            vec![Call::event("team")
                .body(|b| {
                    assert_eq!(b["reason"], "RestoreFailed");
                    let note = b["note"].as_str().unwrap();
                    assert!(
                        note.starts_with("Deployment team/web could not be given back"),
                        "{note}"
                    );
                })
                .respond_with_body()],
            reads(API, meta("other", "api", Some(1)), 3),
            vec![
                Call::patch(&patch_of(API))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 1))
                    .respond(written(meta("other", "api", None), &json!({}), 1)),
                Call::event("team")
                    .body(|b| assert_eq!(b["reason"], "Restored"))
                    .respond_with_body(),
                Call::patch(SCALER)
                    .body(|b| assert_eq!(b[1]["op"], "remove"))
                    .respond(serde_json::to_value(nine_to_five()).unwrap()),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_deleted_scaler_keeps_its_finalizer_while_a_restore_can_still_succeed() {
        let mut s = nine_to_five();
        s.metadata.deletion_timestamp = Some(time(at("2025-03-03T12:00:00Z")));
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 5),
            vec![
                Call::patch(&patch_of(WEB)).error(503, "etcd is down"),
                Call::event("team")
                    .body(|b| assert_eq!(b["reason"], "ReconcileFailed"))
                    .respond_with_body(),
            ],
        ]));
        let failed = reconcile(Arc::new(s), ctx.clone()).await.unwrap_err();
        assert!(failed.is_unavailable(), "{failed}");
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_dry_run_says_what_it_would_write_and_writes_nothing() {
        let mut s = nine_to_five();
        s.spec.dry_run = Some(true);
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "DryRun");
                        assert_eq!(b["type"], "Normal");
                        assert_eq!(
                            b["note"],
                            "Dry run, not done: Scaled Deployment team/web from 2 to 5 replicas; recorded 2 to restore"
                        );
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["conditions"][0]["reason"], "DryRun");
                        assert_eq!(s["conditions"][0]["status"], "True");
                        assert_eq!(s["active"], true);
                        assert_eq!(s["targets"][0]["replicas"], 2, "as it is");
                        assert!(s["targets"][0].get("originalReplicas").is_none());
                    })
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    /// web's metadata, created at `created`, its template last written by `deployer` at
    /// `deployed` and its replicas owned by `scaler`.
    fn managed_meta(created: &str, deployed: &str, scaler: &str) -> Value {
        let mut m = meta("team", "web", None);
        m["metadata"]["creationTimestamp"] = json!(created);
        m["metadata"]["managedFields"] = json!([
            {"manager": "argocd", "operation": "Apply", "apiVersion": "apps/v1", "time": deployed,
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {}}}}},
            {"manager": scaler, "operation": "Update", "apiVersion": "apps/v1", "time": deployed,
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}, "subresource": "scale"},
        ]);
        m
    }

    #[test]
    fn provenance_reads_the_last_template_write_and_who_owns_the_replicas() {
        let m: ObjectMeta = serde_json::from_value(
            managed_meta("2025-01-01T00:00:00Z", "2025-03-03T19:00:00Z", "ci-bot")["metadata"]
                .clone(),
        )
        .unwrap();
        assert_eq!(
            provenance(&m),
            (Some(at("2025-03-03T19:00:00Z")), Some("ci-bot".to_string()))
        );
        let bare: ObjectMeta = serde_json::from_value(json!({"name": "web",
            "creationTimestamp": "2025-01-01T00:00:00Z"}))
        .unwrap();
        assert_eq!(provenance(&bare), (Some(at("2025-01-01T00:00:00Z")), None));
    }

    #[test]
    fn a_held_target_is_set_back_only_after_its_grace_period() {
        let mut current = Current {
            replicas: 4,
            settled_from: Some(at("2025-03-03T19:00:00Z")),
            scaled_by: Some("ci-bot".into()),
            ..Current::default()
        };
        let grace = Duration::from_secs(15 * 60);
        assert_eq!(
            hold_change(&web(), &current, 1, grace, at("2025-03-03T19:10:00Z")),
            Some(Err(at("2025-03-03T19:15:00Z"))),
            "in its grace period: looked at again when it ends"
        );
        let change = hold_change(&web(), &current, 1, grace, at("2025-03-03T19:15:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(change.replicas, Some(1));
        assert_eq!(change.record, None, "the record of a window stays as it is");
        assert_eq!(
            change.note,
            "Set Deployment team/web back from 4 to 1 replicas outside every window (scaled up by ci-bot)"
        );
        current.replicas = 1;
        assert_eq!(
            hold_change(&web(), &current, 1, grace, at("2025-03-04T00:00:00Z")),
            None
        );
        current.replicas = 0;
        assert_eq!(
            hold_change(&web(), &current, 1, grace, at("2025-03-04T00:00:00Z")),
            None,
            "below the held replicas is left alone"
        );
    }

    #[tokio::test]
    async fn outside_every_window_a_held_target_scaled_up_is_set_back() {
        let mut s = nine_to_five();
        s.spec.outside_replicas = Some(1);
        s.spec.outside = Some(kubesteer_api::scaler::v1beta1::Outside {
            mode: Some(kubesteer_api::scaler::v1beta1::OutsideMode::Hold),
            grace_period: Some("15m".into()),
        });
        // A CI deploy at 19:00 left web at 4; at 20:00 the grace period is over.
        let (ctx, verifier) = ctx_at("2025-03-03T20:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(
                WEB,
                managed_meta("2025-01-01T00:00:00Z", "2025-03-03T19:00:00Z", "ci-bot"),
                4,
            ),
            vec![
                Call::patch(&patch_of(&scale_of(WEB)))
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 1}})
                        )
                    })
                    .respond(scale("team", "web", 1)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "Held");
                        assert_eq!(
                            b["note"],
                            "Set Deployment team/web back from 4 to 1 replicas outside every window (scaled up by ci-bot)"
                        );
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| assert_eq!(b["status"]["targets"][0]["replicas"], 1))
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        // At 19:05, inside the grace period: nothing written, looked at again at 19:15.
        let (ctx, verifier) = ctx_at("2025-03-03T19:05:00Z");
        let scenario = verifier.run(calls(vec![
            reads(
                WEB,
                managed_meta("2025-01-01T00:00:00Z", "2025-03-03T19:00:00Z", "ci-bot"),
                4,
            ),
            vec![Call::patch(STATUS).respond_status_of(&s)],
        ]));
        let action = reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        assert_eq!(
            action,
            Action::requeue(Duration::from_secs(600) - PREFETCH_LEAD)
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_cron_job_is_suspended_while_its_replicas_would_be_0_and_resumed_after() {
        const REPORT: &str = "/apis/batch/v1/namespaces/team/cronjobs/report";
        let s = scaler(
            json!({"scaleTargetRefs": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "report"}],
            "windows": [{"start": 9, "end": 17, "replicas": 0}], "hpaCooperation": "Disabled"}),
        );
        let cron = |suspend: bool, original: Option<&str>| {
            let mut c = json!({"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "report", "namespace": "team", "resourceVersion": "41"},
                "spec": {"schedule": "0 * * * *", "suspend": suspend}});
            if let Some(o) = original {
                c["metadata"]["annotations"] = json!({annotation::ORIGINAL_REPLICAS: o,
                    annotation::ORIGINAL_REPLICAS_OWNER: ME});
            }
            c
        };
        let remember = |ctx: &Context| {
            ctx.mapper.remember(
                "batch/v1",
                "CronJob",
                Ok(ApiResource {
                    group: "batch".into(),
                    version: "v1".into(),
                    api_version: "batch/v1".into(),
                    kind: "CronJob".into(),
                    plural: "cronjobs".into(),
                }),
            )
        };
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        remember(&ctx);
        let scenario = verifier.run(vec![
            Call::get(REPORT).respond(cron(false, None)),
            Call::patch(&patch_of(REPORT))
                .body(|b| {
                    assert_eq!(
                        b,
                        &json!({"metadata": {"resourceVersion": "41", "annotations": {
                            annotation::ORIGINAL_REPLICAS: "1", annotation::ORIGINAL_REPLICAS_OWNER: ME}},
                            "spec": {"suspend": true}})
                    )
                })
                .respond(cron(true, Some("1"))),
            Call::event("team")
                .body(|b| assert_eq!(b["note"], "Suspended CronJob team/report"))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["targets"][0]["replicas"], 0);
                    assert_eq!(b["status"]["targets"][0]["originalReplicas"], 1);
                })
                .respond_status_of(&s),
        ]);
        reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        let (ctx, verifier) = ctx_at("2025-03-03T18:00:00Z");
        remember(&ctx);
        let scenario = verifier.run(vec![
            Call::get(REPORT).respond(cron(true, Some("1"))),
            Call::patch(&patch_of(REPORT))
                .body(|b| {
                    assert_eq!(b["spec"], json!({"suspend": false}));
                    assert_eq!(b["metadata"]["resourceVersion"], "41");
                    assert_eq!(
                        b["metadata"]["annotations"],
                        json!({annotation::ORIGINAL_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null})
                    );
                })
                .respond(cron(false, None)),
            Call::event("team")
                .body(|b| {
                    assert_eq!(b["reason"], "Restored");
                    assert_eq!(b["note"], "Resumed CronJob team/report");
                })
                .respond_with_body(),
            Call::patch(STATUS).respond_status_of(&s),
        ]);
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_target_that_stays_missing_is_not_announced_again() {
        let mut s = nine_to_five();
        let now = at("2025-03-03T07:00:00Z");
        let missing = condition(
            READY,
            false,
            "TargetNotFound",
            "Deployment team/web not found",
            Some(3),
            time(at("2025-03-03T06:00:00Z")),
            &[],
        );
        let schedule = s.spec.plan(now).unwrap();
        s.status = Some(ScalerStatus {
            active: Some(false),
            next_transitions: schedule
                .next
                .iter()
                .map(|t| Transition {
                    time: time(t.at),
                    replicas: t.replicas,
                })
                .collect(),
            last_transition: schedule.last.map(time),
            targets: vec![TargetStatus {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                namespace: "team".into(),
                ..TargetStatus::default()
            }],
            target_count: Some(1),
            observed_generation: Some(3),
            conditions: vec![missing],
            ..ScalerStatus::default()
        });
        let (ctx, verifier) = ctx_at("2025-03-03T07:00:00Z");
        let scenario = verifier.run(absent(WEB));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_conflict_is_retried_with_a_fresh_read() {
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![Call::patch(&patch_of(WEB)).conflict()],
            reads(WEB, meta("team", "web", None), 3),
            vec![
                Call::patch(&patch_of(WEB))
                    .body(|b| {
                        assert_eq!(
                            b["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS],
                            "3"
                        )
                    })
                    .respond(written(meta("team", "web", Some(3)), &json!({}), 5)),
                Call::event("team").respond_with_body(),
                Call::patch(STATUS).respond_status_of(&nine_to_five()),
            ],
        ]));
        reconcile(Arc::new(nine_to_five()), ctx.clone())
            .await
            .unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_new_scaler_first_gets_its_finalizer() {
        let mut s = nine_to_five();
        s.metadata.finalizers = None;
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(vec![Call::patch(SCALER)
            .body(|b| {
                assert_eq!(
                    b,
                    &json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                            {"op": "add", "path": "/metadata/finalizers", "value": [RESTORE_TARGETS_FINALIZER]}])
                )
            })
            .respond(serde_json::to_value(nine_to_five()).unwrap())]);
        assert_eq!(
            reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_denied_write_backs_off_and_shows_the_webhooks_message_once() {
        let denial = "admission webhook \"vscalers.kubesteer.io\" denied the request: Scaler \"nightly\" is invalid: spec.scaleTargetRefs[0]: Forbidden: no";
        let mut s = nine_to_five();
        s.metadata.finalizers = None;
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let shown = json!([{"type": "Ready", "status": "False", "reason": "AdmissionDenied",
                            "message": denial, "observedGeneration": 3,
                            "lastTransitionTime": "2025-03-03T12:00:00Z"}]);
        let want = shown.clone();
        let scenario = verifier.run(vec![
            Call::patch(SCALER).error(422, denial),
            Call::event("team").body(move |b| {
                assert_eq!(b["type"], "Warning");
                assert_eq!(b["reason"], "AdmissionDenied");
                assert_eq!(b["note"], denial);
            }),
            Call::patch("/apis/kubesteer.io/v1beta1/namespaces/team/scalers/nightly/status?&force=true&fieldManager=kubesteer-controller-denial")
                .body(move |b| assert_eq!(b["status"]["conditions"], want))
                .respond_status_of(&s),
        ]);
        let error = reconcile(Arc::new(s.clone()), ctx.clone())
            .await
            .expect_err("denied");
        assert_eq!(error.admission_denial(), Some(denial));
        assert!(!error.is_conflict(), "a denial is no conflict: {error}");
        // Backed off as a failure (1 s, then 2 s, ...), not retried at once as a conflict.
        let first = error_policy(Arc::new(s.clone()), &error, ctx.clone());
        assert_eq!(first, Action::requeue(Duration::from_secs(1)));
        assert_eq!(
            error_policy(Arc::new(s.clone()), &error, ctx.clone()),
            Action::requeue(Duration::from_secs(2))
        );
        scenario.finish(ctx).await;

        // Once the status shows the message, a second denial writes no status again.
        let mut shown_already = s.clone();
        shown_already.status = Some(serde_json::from_value(json!({"conditions": shown})).unwrap());
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:02Z");
        let scenario = verifier.run(vec![
            Call::patch(SCALER).error(422, denial),
            Call::event("team"),
        ]);
        assert!(reconcile(Arc::new(shown_already), ctx.clone())
            .await
            .is_err());
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn deleting_an_active_scaler_restores_its_targets_then_lets_go() {
        let mut s = nine_to_five();
        s.metadata.deletion_timestamp = Some(time(at("2025-03-03T12:00:00Z")));
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 5),
            vec![
                Call::patch(&patch_of(WEB))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 2))
                    .respond(written(meta("team", "web", None), &json!({}), 2)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "Restored");
                        assert_eq!(b["note"], "Restored Deployment team/web from 5 to 2 replicas");
                    })
                    .respond_with_body(),
                Call::patch(SCALER)
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!([{"op": "test", "path": "/metadata/finalizers/0", "value": RESTORE_TARGETS_FINALIZER},
                                    {"op": "remove", "path": "/metadata/finalizers/0"}])
                        )
                    })
                    .respond(serde_json::to_value(nine_to_five()).unwrap()),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn cron_mode_catches_up_on_the_most_recent_past_firing() {
        let s = scaler(
            json!({"scaleTargetRefs": [deployment("web")], "timeZone": "Europe/Berlin",
            "hpaCooperation": "Disabled", "jobs": [
                {"name": "morning", "schedule": "0 8 * * *", "replicas": 4},
                {"name": "night", "schedule": "0 20 * * *", "replicas": 1},
            ]}),
        );
        // 12:00 UTC is 13:00 in Berlin: "morning" fired at 07:00 UTC, "night" fires at 19:00 UTC.
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::patch(&patch_of(WEB))
                    .body(|b| {
                        assert_eq!(
                            b["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS],
                            "2"
                        )
                    })
                    .body(|b| assert_eq!(b["spec"]["replicas"], 4))
                    .respond(written(meta("team", "web", Some(2)), &json!({}), 4)),
                Call::event("team").respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["active"], true);
                        assert_eq!(s["lastTransition"], "2025-03-03T07:00:00Z");
                        assert_eq!(
                            s["nextTransitions"][0],
                            json!({"time": "2025-03-03T19:00:00Z", "replicas": 1})
                        );
                        assert_eq!(s["conditions"][0]["reason"], "JobFired");
                    })
                    .respond_status_of(&s),
            ],
        ]));
        let action = reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        assert_eq!(
            action,
            Action::requeue(Duration::from_secs(7 * 3600) - PREFETCH_LEAD)
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_suspended_scaler_only_reads() {
        let s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "windows": [{"start": 9, "end": 17}], "suspend": true}));
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["active"], false);
                    assert!(b["status"].get("nextTransitions").is_none(), "{b}");
                    assert_eq!(b["status"]["conditions"][0]["reason"], "Suspended");
                })
                .respond_status_of(&s)],
        ]));
        assert_eq!(
            reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_suspended_scaler_gives_back_a_target_dropped_from_its_spec() {
        let mut s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "suspend": true,
            "hpaCooperation": "Disabled"}));
        s.status = Some(ScalerStatus {
            targets: [("team", "web"), ("other", "api")]
                .into_iter()
                .map(|(ns, name)| TargetStatus {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: name.into(),
                    namespace: ns.into(),
                    replicas: Some(3),
                    original_replicas: Some(1),
                    horizontal_pod_autoscaler: None,
                    scaled_object: None,
                    error: None,
                })
                .collect(),
            ..ScalerStatus::default()
        });
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(1)), 3),
            reads(API, meta("other", "api", Some(1)), 3),
            vec![
                Call::patch(&patch_of(API))
                    .body(|b| {
                        assert_eq!(
                            b["metadata"]["annotations"],
                            json!({annotation::ORIGINAL_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null})
                        )
                    })
                    .body(|b| assert_eq!(b["spec"]["replicas"], 1))
                    .respond(written(meta("other", "api", None), &json!({}), 1)),
                Call::event("team")
                    .body(|b| assert_eq!(b["note"], "Restored Deployment other/api from 3 to 1 replicas"))
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(
                            b["status"]["targets"],
                            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                    "namespace": "team", "replicas": 3, "originalReplicas": 1}])
                        );
                    })
                    .respond_status_of(&s),
            ],
        ]));
        assert_eq!(
            reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_stale_record_of_a_deleted_scaler_is_replaced_not_trusted() {
        let mut stale = meta("team", "web", Some(2));
        stale["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS_OWNER] = json!("team/gone");
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, stale, 5),
            vec![
                Call::get("/apis/kubesteer.io/v1beta1/namespaces/team/scalers/gone").not_found(),
                Call::patch(&patch_of(WEB))
                    .body(|b| {
                        assert_eq!(
                            b["metadata"]["annotations"],
                            json!({annotation::ORIGINAL_REPLICAS: "5", annotation::ORIGINAL_REPLICAS_OWNER: ME})
                        );
                    })
                    .respond(meta("team", "web", Some(5))),
                Call::event("team").respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| assert_eq!(b["status"]["targets"][0]["originalReplicas"], 5))
                    .respond_status_of(&nine_to_five()),
            ],
        ]));
        reconcile(Arc::new(nine_to_five()), ctx.clone())
            .await
            .unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_target_another_live_scaler_scales_is_left_alone_and_reported() {
        let mut theirs = meta("team", "web", Some(4));
        theirs["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS_OWNER] =
            json!("team/daily");
        let mut daily = serde_json::to_value(nine_to_five()).unwrap();
        daily["metadata"]["name"] = json!("daily");
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, theirs, 2),
            vec![
                Call::get("/apis/kubesteer.io/v1beta1/namespaces/team/scalers/daily")
                    .respond(daily),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["type"], "Warning");
                        assert_eq!(b["reason"], "TargetClaimed");
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["conditions"][0]["reason"], "TargetClaimed");
                        assert_eq!(
                            s["conditions"][0]["message"],
                            "Deployment team/web is scaled by Scaler team/daily"
                        );
                        assert_eq!(s["targets"][0]["replicas"], 2);
                    })
                    .respond_status_of(&nine_to_five()),
            ],
        ]));
        reconcile(Arc::new(nine_to_five()), ctx.clone())
            .await
            .unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_stored_never_firing_schedule_is_reported_not_searched() {
        // Stored while the webhook was down: the controller must neither panic nor spin on it.
        let s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "jobs": [{"name": "feb30", "schedule": "0 0 30 2 *", "replicas": 2}]}));
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let message =
            "spec.jobs[0].schedule: Invalid value: \"0 0 30 2 *\": never fires within 5 years";
        let scenario = verifier.run(vec![
            Call::event("team")
                .body(move |b| assert_eq!(b["note"], message))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(move |b| {
                    assert_eq!(b["status"]["active"], false);
                    assert_eq!(b["status"]["conditions"][0]["reason"], "InvalidSchedule");
                    assert_eq!(b["status"]["conditions"][0]["message"], message);
                })
                .respond_status_of(&s),
        ]);
        assert_eq!(
            reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    const HPA: &str = "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers/web-hpa";
    const HPA_PATCH: &str = "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers/web-hpa?&fieldManager=kubesteer-controller";

    /// HPA web-hpa of Deployment web at `min` (max 10), with this Scaler's record of `original`.
    fn hpa(min: i32, original: Option<i32>) -> Value {
        let mut h = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web-hpa", "namespace": "team", "resourceVersion": "7"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": min, "maxReplicas": 10},
        });
        if let Some(o) = original {
            h["metadata"]["annotations"] = json!({
                annotation::ORIGINAL_MIN_REPLICAS: o.to_string(),
                annotation::ORIGINAL_REPLICAS_OWNER: ME,
            });
        }
        h
    }

    #[tokio::test]
    async fn an_hpa_gets_its_min_replicas_raised_and_restored_instead_of_the_replicas() {
        let s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "windows": [{"start": 9, "end": 17, "replicas": 5}]}));
        let list = |h: Value| json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscalerList", "metadata": {}, "items": [h]});

        // Inside the window: minReplicas 2 → 5, the original recorded; the Deployment untouched.
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::get(HPAS).respond(list(hpa(2, None))),
                Call::patch(HPA_PATCH)
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!({"metadata": {"resourceVersion": "7", "annotations": {
                                annotation::ORIGINAL_MIN_REPLICAS: "2", annotation::ORIGINAL_REPLICAS_OWNER: ME}},
                                "spec": {"minReplicas": 5}})
                        )
                    })
                    .respond(hpa(5, Some(2))),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(
                            b["note"],
                            "Set HorizontalPodAutoscaler team/web-hpa minReplicas from 2 to 5 for Deployment team/web; it scales the target"
                        )
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(b["status"]["targets"][0]["horizontalPodAutoscaler"], "web-hpa");
                        assert_eq!(b["status"]["targets"][0]["replicas"], 2);
                    })
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        // After the window: minReplicas back to 2 and the record gone.
        let (ctx, verifier) = ctx_at("2025-03-03T18:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 5),
            vec![
                Call::get(HPAS).respond(list(hpa(5, Some(2)))),
                Call::patch(HPA_PATCH)
                    .body(|b| {
                        assert_eq!(b["spec"]["minReplicas"], 2);
                        assert_eq!(
                            b["metadata"]["annotations"],
                            json!({annotation::ORIGINAL_MIN_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null})
                        );
                    })
                    .respond(hpa(2, None)),
                Call::event("team")
                    .body(|b| assert_eq!(b["note"], "Restored HorizontalPodAutoscaler team/web-hpa minReplicas from 5 to 2"))
                    .respond_with_body(),
                Call::patch(STATUS).respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn an_hpa_raised_before_cooperation_was_switched_off_is_restored_by_its_recorded_name() {
        // Raised to 5 while hpaCooperation was Enabled; now Disabled inside the window.
        let mut s = nine_to_five();
        s.status = Some(ScalerStatus {
            targets: vec![TargetStatus {
                horizontal_pod_autoscaler: Some("web-hpa".into()),
                ..named_in_spec(&s, "team")[0].status()
            }],
            ..ScalerStatus::default()
        });
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::get(HPA).respond(hpa(5, Some(2))),
                Call::patch(HPA_PATCH)
                    .body(|b| {
                        assert_eq!(b["spec"]["minReplicas"], 2);
                        assert_eq!(
                            b["metadata"]["annotations"],
                            json!({annotation::ORIGINAL_MIN_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null})
                        );
                    })
                    .respond(hpa(2, None)),
                Call::event("team")
                    .body(|b| assert_eq!(b["note"], "Restored HorizontalPodAutoscaler team/web-hpa minReplicas from 5 to 2"))
                    .respond_with_body(),
                Call::patch(&patch_of(WEB))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 5))
                    .respond(written(meta("team", "web", Some(2)), &json!({}), 5)),
                Call::event("team")
                    .body(|b| assert_eq!(b["reason"], "Scaled"))
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let entry = &b["status"]["targets"][0];
                        assert!(entry.get("horizontalPodAutoscaler").is_none(), "{entry}");
                        assert_eq!(entry["replicas"], 5);
                    })
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        // An HPA recorded but gone, or no longer carrying this Scaler's record, is left alone.
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 5),
            vec![
                Call::get(HPA).respond(hpa(3, None)),
                Call::patch(STATUS).respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[test]
    fn an_hpa_min_never_exceeds_its_max_nor_goes_below_one() {
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": "h", "namespace": "team"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 2, "maxReplicas": 10},
        }))
        .unwrap();
        let web = Named {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "team".into(),
            name: "web".into(),
        };
        assert_eq!(
            hpa_change(&hpa, &web, ME, Some(12)).unwrap().replicas,
            Some(10)
        );
        assert_eq!(
            autoscaler_of(std::slice::from_ref(&hpa), &web).map(|h| h.name_any()),
            Some("h".into())
        );
        let db = Named {
            kind: "StatefulSet".into(),
            ..web.clone()
        };
        assert!(autoscaler_of(std::slice::from_ref(&hpa), &db).is_none());
        assert_eq!(
            hpa_change(&hpa, &web, ME, None),
            None,
            "nothing recorded, nothing to restore"
        );
        // A recorded original edited past what the apiserver accepts is restored within it.
        for (recorded, to) in [("999", 10), ("0", 1), ("-1", 2), ("3", 3)] {
            let mut edited = hpa.clone();
            edited.metadata.annotations = Some(
                [
                    (
                        annotation::ORIGINAL_MIN_REPLICAS.to_string(),
                        recorded.to_string(),
                    ),
                    (
                        annotation::ORIGINAL_REPLICAS_OWNER.to_string(),
                        ME.to_string(),
                    ),
                ]
                .into(),
            );
            let change = hpa_change(&edited, &web, ME, None).expect("a restore");
            assert_eq!(change.replicas, Some(to), "recorded {recorded}");
            assert_eq!(change.record.unwrap()["spec"]["minReplicas"], to);
        }
    }

    #[tokio::test]
    async fn a_stateful_set_gets_its_record_and_replicas_in_one_write() {
        let db = "/apis/apps/v1/namespaces/team/statefulsets/db";
        let s = scaler(
            json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "hpaCooperation": "Disabled"}),
        );
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(db, meta("team", "db", None), 1),
            vec![
                Call::patch(&patch_of(db))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 3))
                    .respond(written(meta("team", "db", Some(1)), &json!({}), 3)),
                Call::event("team")
                    .body(|b| assert_eq!(b["note"], "Scaled StatefulSet team/db from 1 to 3 replicas; recorded 1 to restore"))
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| assert_eq!(b["status"]["targets"][0]["kind"], "StatefulSet"))
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_custom_kind_gets_its_record_first_then_its_replicas_through_scale() {
        let workers = "/apis/example.com/v1/namespaces/team/workers/w";
        let s = scaler(
            json!({"scaleTargetRefs": [{"apiVersion": "example.com/v1", "kind": "Worker", "name": "w"}],
            "windows": [{"start": 9, "end": 17, "replicas": 4}], "hpaCooperation": "Disabled"}),
        );
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        ctx.mapper.remember(
            "example.com/v1",
            "Worker",
            Ok(ApiResource {
                group: "example.com".into(),
                version: "v1".into(),
                api_version: "example.com/v1".into(),
                kind: "Worker".into(),
                plural: "workers".into(),
            }),
        );
        let record = recorded("1");
        let scenario = verifier.run(calls(vec![
            reads(workers, meta("team", "w", None), 1),
            vec![
                // Its /scale may be anything, so the record goes first, on its own.
                Call::patch(&patch_of(workers))
                    .body({
                        let r = record.clone();
                        move |b| assert_eq!(b, &r)
                    })
                    .respond(annotated(meta("team", "w", None), &record)),
                Call::patch(&patch_of(&scale_of(workers)))
                    .body(|b| assert_eq!(b, &json!({"spec": {"replicas": 4}})))
                    .respond(scale("team", "w", 4)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(
                            b["note"],
                            "Scaled Worker team/w from 1 to 4 replicas; recorded 1 to restore"
                        )
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| assert_eq!(b["status"]["targets"][0]["replicas"], 4))
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_target_that_cannot_be_scaled_is_reported_without_touching_it() {
        let s = scaler(
            json!({"scaleTargetRefs": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm"}],
            "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled"}),
        );
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        ctx.mapper.remember(
            "v1",
            "ConfigMap",
            Err(Unscalable::NoScaleSubresource {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
            }),
        );
        let message =
            "ConfigMap team/cm: ConfigMap (v1) has no /scale subresource, so it cannot be scaled";
        let scenario = verifier.run(vec![
            Call::event("team")
                .body(move |b| {
                    assert_eq!(b["reason"], "TargetNotScalable");
                    assert_eq!(b["note"], message);
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| assert_eq!(b["status"]["conditions"][0]["reason"], "TargetNotScalable"))
                .respond_status_of(&s),
        ]);
        reconcile(Arc::new(s), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn overlapping_windows_scale_to_the_highest_and_a_holiday_restores() {
        let s = scaler(
            json!({"scaleTargetRefs": [deployment("web")], "hpaCooperation": "Disabled",
            "windows": [{"start": 9, "end": 17, "replicas": 2}, {"start": 11, "end": 13, "replicas": 6}]}),
        );
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(1)), 2),
            vec![
                Call::patch(&patch_of(&scale_of(WEB)))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 6))
                    .respond(scale("team", "web", 6)),
                Call::event("team").respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(
                            b["status"]["nextTransitions"],
                            json!([{"time": "2025-03-03T13:00:00Z", "replicas": 2},
                                   {"time": "2025-03-03T17:00:00Z"},
                                   {"time": "2025-03-04T09:00:00Z", "replicas": 2}])
                        )
                    })
                    .respond_status_of(&s),
            ],
        ]));
        reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        let mut holiday = s;
        holiday.spec.exclude_dates = Some(vec!["2025-03-03".into()]);
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(1)), 6),
            vec![
                Call::patch(&patch_of(WEB))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 1))
                    .respond(written(meta("team", "web", None), &json!({}), 1)),
                Call::event("team").respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(b["status"]["conditions"][0]["reason"], "ExcludedDate");
                        assert_eq!(
                            b["status"]["nextTransitions"][0],
                            json!({"time": "2025-03-04T09:00:00Z", "replicas": 2})
                        );
                    })
                    .respond_status_of(&holiday),
            ],
        ]));
        reconcile(Arc::new(holiday), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[test]
    fn the_backoff_of_a_failed_scaler_never_outlasts_its_next_transition() {
        let mut s = nine_to_five();
        // Applied up to the 09:00 opening.
        s.status = Some(ScalerStatus {
            last_transition: Some(time(at("2025-03-03T09:00:00Z"))),
            ..ScalerStatus::default()
        });
        let long = Duration::from_secs(300);
        assert_eq!(
            retry_delay(long, &s, at("2025-03-03T16:58:00Z"), true),
            Duration::from_secs(120),
            "capped by the 17:00 closing"
        );
        assert_eq!(
            retry_delay(long, &s, at("2025-03-03T12:00:00Z"), true),
            long,
            "nothing owed, nothing near"
        );
        // Past 17:00 with the closing not applied: an outage retries often, a bad request does not.
        let after = at("2025-03-03T17:00:40Z");
        assert_eq!(retry_delay(long, &s, after, true), OUTAGE_RETRY);
        assert_eq!(retry_delay(long, &s, after, false), long);
        let mut suspended = s.clone();
        suspended.spec.suspend = Some(true);
        assert_eq!(retry_delay(long, &suspended, after, true), long);
        assert_eq!(
            next_action(None, false, after),
            Action::requeue(NO_TRANSITION_RECHECK)
        );
        assert_eq!(next_action(None, true, after), Action::await_change());
    }

    fn web() -> Named {
        Named {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "team".into(),
            name: "web".into(),
        }
    }

    fn current(replicas: i32, annotations: &[(&str, &str)]) -> Current {
        Current {
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            resource_version: Some("41".into()),
            replicas,
            ..Current::default()
        }
    }

    #[test]
    fn target_changes_follow_the_record() {
        let mine = [
            (annotation::ORIGINAL_REPLICAS, "2"),
            (annotation::ORIGINAL_REPLICAS_OWNER, ME),
        ];
        let change = |c: &Current, wanted, outside| {
            target_change(
                &web(),
                c,
                ME,
                &Record::of(&c.annotations, ME),
                wanted,
                outside,
            )
        };
        assert_eq!(change(&current(5, &mine), Some(5), None), None, "settled");
        assert_eq!(
            change(&current(2, &[]), None, Some(9)),
            None,
            "outside: left alone"
        );
        let same = change(&current(5, &[]), Some(5), None).unwrap();
        assert_eq!(
            same.record.unwrap()["metadata"]["annotations"],
            json!({annotation::ORIGINAL_REPLICAS: "5", annotation::ORIGINAL_REPLICAS_OWNER: ME}),
            "the original is recorded, with its owner, even when it already matches"
        );
        assert_eq!(same.replicas, None);
        let unreadable = current(5, &[(annotation::ORIGINAL_REPLICAS, "many")]);
        let release = change(&unreadable, None, None).unwrap();
        assert_eq!(release.replicas, None, "{release:?}");
        assert!(release.restoring);
    }

    #[test]
    fn a_record_of_another_scaler_is_neither_trusted_nor_touched() {
        let c = current(5, &[(annotation::ORIGINAL_REPLICAS, "2")]);
        let theirs = Record::Other("team/nightly".into());
        for (wanted, outside) in [(Some(3), None), (None, None), (None, Some(1))] {
            assert_eq!(
                target_change(&web(), &c, "team/daily", &theirs, wanted, outside),
                None
            );
        }
        // A stale record (its Scaler gone) is read as none: the current replicas are recorded anew.
        let fresh =
            target_change(&web(), &c, "team/daily", &Record::Absent, Some(3), None).unwrap();
        assert_eq!(
            fresh.record.unwrap()["metadata"]["annotations"],
            json!({annotation::ORIGINAL_REPLICAS: "5", annotation::ORIGINAL_REPLICAS_OWNER: "team/daily"})
        );
    }

    #[test]
    fn a_wake_up_a_hair_before_the_boundary_acts_as_at_the_boundary() {
        let status = ScalerStatus {
            next_transitions: vec![Transition {
                time: time(at("2025-03-03T09:00:00Z")),
                replicas: Some(3),
            }],
            ..ScalerStatus::default()
        };
        let boundary = at("2025-03-03T09:00:00Z");
        let early = at("2025-03-03T08:59:59.990Z");
        assert_eq!(at_boundary(early, &status), boundary);
        let too_early = at("2025-03-03T08:59:59.900Z");
        assert_eq!(at_boundary(too_early, &status), too_early);
        let late = at("2025-03-03T09:00:00.004Z");
        assert_eq!(at_boundary(late, &status), late);
        assert_eq!(at_boundary(early, &ScalerStatus::default()), early);
        // Requeued for the boundary itself, without slack.
        assert_eq!(until(too_early, boundary), Duration::from_millis(100));
    }

    #[test]
    fn a_record_from_before_owners_is_adopted_with_an_owner() {
        let legacy = current(5, &[(annotation::ORIGINAL_REPLICAS, "2")]);
        let record = Record::of(&legacy.annotations, ME);
        let adopt = target_change(&web(), &legacy, ME, &record, Some(5), None).unwrap();
        assert_eq!(
            adopt.record.unwrap()["metadata"]["annotations"],
            json!({annotation::ORIGINAL_REPLICAS_OWNER: ME})
        );
        let restore = target_change(&web(), &legacy, ME, &record, None, None).unwrap();
        assert_eq!(restore.replicas, Some(2));
    }

    #[test]
    fn targets_map_to_the_scalers_that_name_them() {
        let mut claims = ClaimIndex::default();
        let mut other_ns = scaler(json!({"scaleTargetRefs": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "api", "namespace": "other"}],
            "windows": [{"start": 1, "end": 2}]}));
        other_ns.metadata.name = Some("cross".into());
        claims.upsert(&nine_to_five());
        claims.upsert(&other_ns);
        let object = |ns: &str, name: &str| -> k8s_openapi::api::apps::v1::Deployment {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap()
        };
        let names =
            |refs: Vec<ObjectRef<Scaler>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(
            names(scalers_targeting(
                &claims,
                "apps/v1",
                "Deployment",
                &object("team", "web")
            )),
            vec!["nightly"]
        );
        assert_eq!(
            names(scalers_targeting(
                &claims,
                "apps/v1",
                "StatefulSet",
                &object("other", "api")
            )),
            vec!["cross"]
        );
        assert!(
            scalers_targeting(&claims, "apps/v1", "Deployment", &object("other", "api")).is_empty()
        );
    }

    /// `s` named `name`, created at `created` with `uid`.
    fn aged(mut s: Scaler, name: &str, created: &str, uid: &str) -> Scaler {
        s.metadata.name = Some(name.into());
        s.metadata.uid = Some(uid.into());
        s.metadata.creation_timestamp = Some(time(at(created)));
        s
    }

    #[tokio::test]
    async fn a_younger_scaler_leaves_a_shared_target_to_the_older_and_says_so_once() {
        let older = aged(nine_to_five(), "early", "2025-03-01T00:00:00Z", "uid-b");
        let me = aged(nine_to_five(), "nightly", "2025-03-02T00:00:00Z", "uid-a");
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let mut follow = kubesteer_runtime::claims::follow(&ctx.claims);
        follow(&kube::runtime::watcher::Event::Apply(older));
        follow(&kube::runtime::watcher::Event::Apply(me.clone()));
        let written = Arc::new(std::sync::Mutex::new(Value::Null));
        let message = "Deployment team/web is owned by Scaler team/early, which is older; it is left alone until that one lets go";
        let scenario = verifier.run(calls(vec![
            // Read for the status only: no write to the target.
            reads(WEB, meta("team", "web", None), 5),
            vec![
                Call::event("team")
                    .body(move |b| {
                        assert_eq!(b["reason"], "Conflict");
                        assert_eq!(b["note"], message);
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body({
                        let written = written.clone();
                        move |b| {
                            let c = &b["status"]["conditions"][0];
                            assert_eq!(
                                (&c["status"], &c["reason"]),
                                (&json!("False"), &json!("Conflict"))
                            );
                            assert_eq!(c["message"], message);
                            *written.lock().unwrap() = b["status"].clone();
                        }
                    })
                    .respond_status_of(&me),
            ],
        ]));
        reconcile(Arc::new(me.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        // Reconciled again in the same conflict: no event, no write, the target untouched.
        let mut again = me;
        again.status = Some(serde_json::from_value(written.lock().unwrap().clone()).unwrap());
        let (ctx2, verifier) = ctx_at("2025-03-03T12:00:05Z");
        let mut follow = kubesteer_runtime::claims::follow(&ctx2.claims);
        for s in [
            aged(nine_to_five(), "early", "2025-03-01T00:00:00Z", "uid-b"),
            again.clone(),
        ] {
            follow(&kube::runtime::watcher::Event::Apply(s));
        }
        let scenario = verifier.run(reads(WEB, meta("team", "web", None), 5));
        reconcile(Arc::new(again), ctx2.clone()).await.unwrap();
        scenario.finish(ctx2).await;
    }

    #[tokio::test]
    async fn the_older_scaler_takes_a_shared_target_over_with_the_replicas_recorded() {
        // The younger scaled it first (the older claimed it later, with the webhook down).
        let me = aged(nine_to_five(), "nightly", "2025-03-01T00:00:00Z", "uid-z");
        let younger = aged(nine_to_five(), "late", "2025-03-02T00:00:00Z", "uid-a");
        let mut theirs = meta("team", "web", Some(2));
        theirs["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS_OWNER] = json!("team/late");
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:00Z");
        let expected = json!({
            "metadata": {"resourceVersion": "41", "annotations": {annotation::ORIGINAL_REPLICAS_OWNER: ME}},
        });
        let scenario = verifier.run(calls(vec![
            reads(WEB, theirs.clone(), 4),
            vec![
                Call::get("/apis/kubesteer.io/v1beta1/namespaces/team/scalers/late")
                    .respond(serde_json::to_value(&younger).unwrap()),
                Call::patch(&patch_of(WEB))
                    .body({
                        let mut p = expected.clone();
                        p["spec"] = json!({"replicas": 5});
                        move |b| assert_eq!(b, &p)
                    })
                    .respond(written(theirs, &expected, 5)),
                Call::event("team").respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(b["status"]["targets"][0]["originalReplicas"], 2);
                        assert_eq!(b["status"]["targets"][0]["replicas"], 5);
                        assert_eq!(b["status"]["conditions"][0]["reason"], "WindowOpen");
                    })
                    .respond_status_of(&me),
            ],
        ]));
        reconcile(Arc::new(me), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_cleanup_that_lost_the_race_to_a_gone_scaler_is_quiet() {
        let mut s = nine_to_five();
        s.metadata.deletion_timestamp = Some(time(at("2025-03-03T12:00:00Z")));
        let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z");
        let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![Call::patch(SCALER).not_found()],
        ]));
        assert_eq!(
            reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    #[test]
    fn a_keda_scaled_object_is_paused_with_its_own_annotation_and_given_back_as_it_was() {
        let target = Named {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "team".into(),
            name: "web".into(),
        };
        let so = |annotations: serde_json::Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                "metadata": {"name": "web", "namespace": "team", "resourceVersion": "7", "annotations": annotations},
            }))
            .expect("a ScaledObject")
        };
        let paused = keda_change(&so(json!({})), &target, "team/nightly", Some(0)).expect("paused");
        assert_eq!(
            paused.record,
            Some(json!({"metadata": {"resourceVersion": "7", "annotations": {
                "autoscaling.keda.sh/paused-replicas": "0",
                "kubesteer.io/original-replicas-owner": "team/nightly",
                "kubesteer.io/original-paused-replicas": "",
            }}}))
        );
        assert_eq!(paused.note, "Paused ScaledObject team/web at 0 replicas for Deployment team/web; KEDA scales the target");
        let mine = so(json!({
            "autoscaling.keda.sh/paused-replicas": "0",
            "kubesteer.io/original-replicas-owner": "team/nightly",
            "kubesteer.io/original-paused-replicas": "",
        }));
        assert_eq!(
            keda_change(&mine, &target, "team/nightly", Some(0)),
            None,
            "as it should be"
        );
        assert_eq!(
            keda_change(&mine, &target, "team/other", Some(3)),
            None,
            "another Scaler's"
        );
        let resumed = keda_change(&mine, &target, "team/nightly", None).expect("resumed");
        assert_eq!(
            resumed.record,
            Some(json!({"metadata": {"resourceVersion": "7", "annotations": {
                "autoscaling.keda.sh/paused-replicas": null,
                "kubesteer.io/original-replicas-owner": null,
                "kubesteer.io/original-paused-replicas": null,
            }}}))
        );
        // Paused by its owner before the Scaler: that pause is what comes back.
        let before = so(json!({
            "autoscaling.keda.sh/paused-replicas": "2",
            "kubesteer.io/original-replicas-owner": "team/nightly",
            "kubesteer.io/original-paused-replicas": "2",
        }));
        let back = keda_change(&before, &target, "team/nightly", None).expect("given back");
        assert_eq!(
            back.record.expect("a patch")["metadata"]["annotations"]
                ["autoscaling.keda.sh/paused-replicas"],
            "2"
        );
        assert_eq!(
            keda_change(&so(json!({})), &target, "team/nightly", None),
            None
        );
    }
}
