//! A target's I/O: naming it, reading it (from the watch, or the apiserver), writing its
//! replicas, its HPA's minReplicas or its ScaledObject's paused-replicas ([`visit`] is one
//! target's whole reconcile).
use super::*;
use kubesteer_api::scaler::patches::{self, SleepPatch};
use kubesteer_runtime::scale::{or_patched, Mapping};

/// Every target a Scaler names, resolved, without repeats (two entries may name one object when
/// stored while the webhook was down).
pub(super) fn named_in_spec(scaler: &Scaler, own_ns: &str) -> Vec<Target> {
    let mut seen = BTreeSet::new();
    scaler
        .spec
        .targets(own_ns)
        .map(|(t, ns)| t.target(ns))
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

pub(super) fn named_in_status(status: &TargetStatus) -> Target {
    Target::new(
        &status.api_version,
        &status.kind,
        &status.namespace,
        &status.name,
    )
}

/// One target as a reconcile found it.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// None when it does not exist.
    pub(super) current: Option<Current>,
    /// The Scaler (`namespace/name`) whose record it carries, when that is another live one.
    pub(super) claimed_by: Option<String>,
    /// Why it cannot be scaled at all.
    pub(super) unscalable: Option<String>,
    /// The HPA the Scaler works through, by name.
    pub(super) autoscaler: Option<String>,
    /// The KEDA ScaledObject the Scaler pauses instead, by name.
    pub(super) scaled_object: Option<String>,
    /// When a target held outside every window leaves its grace period, to be looked at then.
    pub(super) hold_until: Option<DateTime<Utc>>,
    /// What was done (or, in a dry run, would be), as (reason, note), when the caller tells of
    /// it itself: a selector's targets are told of in one event per reason.
    pub(super) told: Vec<(&'static str, String)>,
    /// What it does not run because of the Scaler (for a dry run, would not).
    pub(super) saving: Rate,
}

/// The record on a target as the Scaler `me` sees it. A record of another Scaler counts only
/// while that Scaler exists and claims the target ([`Scaler::claimed_targets`]); a stale one
/// (its Scaler gone, or the target given back by it) is as good as none, so it is replaced
/// rather than trusted. When both claim it, the older owns it ([`Claimant`]): the record of a
/// younger one (written before `me` claimed it) is taken over with the replicas it recorded.
pub(super) async fn record_of(
    ctx: &ScalerContext,
    target: &Target,
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
        other.claimed_targets().contains(target)
            || ctx
                .inventory
                .selects(&ctx.claims.read(), (owner_ns, owner_name), target)
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

/// The target's metadata and `/scale`, None when it does not exist.
/// A kind put to sleep by a declared patch (`patched`) reads as 0 replicas while it carries a
/// sleep record, 1 otherwise.
pub(super) async fn read(
    ctx: &ScalerContext,
    resource: &ApiResource,
    target: &Target,
    patched: bool,
) -> Result<Option<Current>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &target.namespace, resource);
    if patched {
        let object = match api.get_metadata(&target.name).await {
            Ok(o) => o,
            Err(e) if is_status(&e, 404) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let asleep = object.annotations().contains_key(annotation::ASLEEP_PATCH);
        return Ok(Some(Current::of(&object.metadata, i32::from(!asleep))));
    }
    if replicas_in_spec(resource) {
        // The object itself has both: one request.
        let object = match api.get(&target.name).await {
            Ok(o) => o,
            Err(e) if is_status(&e, 404) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let replicas = spec_replicas(resource, &object).unwrap_or(0);
        return Ok(Some(
            Current::of(&object.metadata, replicas).with_requests_of(&object),
        ));
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
pub(super) async fn autoscaler(
    ctx: &ScalerContext,
    scaler: &Scaler,
    target: &Target,
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

/// What a change is written to.
pub(super) enum Via {
    Target,
    /// An HPA, by name.
    Autoscaler(String),
    /// A KEDA ScaledObject, by name.
    ScaledObject(String),
}

/// KEDA's ScaledObject kind (KEDA 2.x); it has no `/scale`, so it is addressed directly.
pub(super) fn scaled_objects() -> ApiResource {
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
pub(super) fn scaled_object_name(
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
pub(super) async fn scaled_object(
    ctx: &ScalerContext,
    ns: &str,
    name: &str,
) -> Result<Option<DynamicObject>> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &scaled_objects());
    Ok(api.get_opt(name).await?)
}

/// The HPA `name` in `ns`, None when it is gone.
pub(super) async fn hpa_named(
    ctx: &ScalerContext,
    ns: &str,
    name: &str,
) -> Result<Option<HorizontalPodAutoscaler>> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    Ok(api.get_opt(name).await?)
}

/// Writes `change` to the target as read (`current`): for the apps/v1 workloads the record and
/// the replicas in one merge patch; for other kinds the record before the replicas (through
/// `/scale`), or after them on a restore. Returns the target as written.
/// `client` is whose rights the writes go with ([`super::acting`]).
pub(super) async fn write_target(
    ctx: &ScalerContext,
    client: &kube::Client,
    owner: &Scaler,
    resource: &ApiResource,
    target: &Target,
    current: &Current,
    change: &TargetChange,
) -> std::result::Result<Current, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &target.namespace, resource);
    if let Some(sleep) = sleep_patch(owner, resource) {
        return write_patched(ctx, &api, owner, sleep, target, current, change).await;
    }
    let mut written = current.clone();
    let scale = |to: i32, rv: Option<String>| async move {
        kubesteer_runtime::scale::RestMapper::set_replicas(
            client,
            resource,
            &target.namespace,
            &target.name,
            to,
            rv.as_deref(),
            &write_params(),
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
            .patch(&target.name, &write_params(), &Patch::Merge(&patch))
            .await?;
        let replicas = spec_replicas(resource, &object).unwrap_or(to);
        written = Current::of(&object.metadata, replicas).with_requests_of(&object);
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
                .patch_metadata(&target.name, &write_params(), &Patch::Merge(record))
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
                .patch_metadata(&target.name, &write_params(), &Patch::Merge(record))
                .await?;
            written.annotations = meta.annotations().clone();
        }
    }
    Ok(written)
}

/// The resource of `target`'s kind for `scaler`, or why it cannot be scaled: a kind without
/// `/scale` that the Scaler declares a patch for (`spec.patches`) is put to sleep by it.
pub(super) async fn resolve(
    ctx: &ScalerContext,
    scaler: &Scaler,
    target: &Target,
) -> Result<Mapping> {
    let mapping = ctx
        .mapper
        .resolve(&target.api_version(), &target.kind)
        .await?;
    Ok(or_patched(mapping, |group, kind| {
        scaler.spec.patch_for(group, kind).is_some()
    }))
}

/// The declared patch that puts targets of `resource` to sleep instead of scaling them (even
/// through a `/scale` they have, as CloudNativePG's Cluster), when the Scaler has one; never
/// for the kinds it scales or suspends through their own spec (the webhook refuses those).
pub(super) fn sleep_patch<'a>(
    scaler: &'a Scaler,
    resource: &ApiResource,
) -> Option<&'a kubesteer_api::scaler::patches::SleepPatch> {
    scaler
        .spec
        .patch_for(&resource.group, &resource.kind)
        .filter(|_| !replicas_in_spec(resource))
}

/// Puts a target to sleep by the Scaler's declared patch (at 0 replicas) or wakes it from the
/// record on it (at 1 or more), with the Scaler's record of its replicas in the same JSON patch,
/// conditional on the object as read here. A value someone else changed while it slept is left
/// as theirs, and told of in a Warning event.
async fn write_patched(
    ctx: &ScalerContext,
    api: &Api<DynamicObject>,
    owner: &Scaler,
    sleep: &SleepPatch,
    target: &Target,
    current: &Current,
    change: &TargetChange,
) -> std::result::Result<Current, kube::Error> {
    let invalid = |message: String| {
        kube::Error::Api(Box::new(
            kube::core::Status::failure(&message, "Invalid").with_code(422),
        ))
    };
    let object = api.get(&target.name).await?;
    let before = serde_json::to_value(&object).map_err(kube::Error::SerdeError)?;
    // Decided on a read that no longer holds (asleep or awake since): decided again.
    if i32::from(!patches::is_asleep(&before)) != current.replicas {
        let message = format!("{target} was put to sleep or woken meanwhile");
        return Err(kube::Error::Api(Box::new(
            kube::core::Status::failure(&message, "Conflict").with_code(409),
        )));
    }
    let me = scaler_id(
        owner.metadata.namespace.as_deref().unwrap_or_default(),
        &owner.name_any(),
    );
    let (mut after, kept) = match change.replicas {
        Some(0) => {
            let edits = sleep
                .edits()
                .map_err(|why| invalid(format!("the patch for {target} {why}")))?;
            let asleep = patches::put_to_sleep(&before, &edits, &me).map_err(|why| {
                invalid(format!("the patch cannot be applied to {target}: {why}"))
            })?;
            (asleep, Vec::new())
        }
        Some(_) => {
            let woken = patches::wake(&before);
            (woken.object, woken.kept)
        }
        None => (before.clone(), Vec::new()),
    };
    if let Some(record) = &change.record {
        json_patch::merge(&mut after, record);
        // Conditional on the object as read here, not on the earlier read the record names.
        after["metadata"]["resourceVersion"] = before["metadata"]["resourceVersion"].clone();
    }
    let ops = patches::write_ops(&before, &after);
    let written = match ops {
        Some(ops) => {
            let patch =
                Patch::Json::<()>(serde_json::from_value(ops).map_err(kube::Error::SerdeError)?);
            api.patch(&target.name, &write_params(), &patch).await?
        }
        None => object,
    };
    for path in kept {
        let note = format!(
            "Left {path} of {target} as it is: it was changed while asleep, so it is no longer the Scaler's to give back"
        );
        warn!(target = %target, "{note}");
        ctx.publish(owner, EventType::Warning, reason::PATCH_KEPT, note)
            .await;
    }
    let asleep = written.annotations().contains_key(annotation::ASLEEP_PATCH);
    let written = Current::of(&written.metadata, i32::from(!asleep));
    ctx.inventory.remember(target, &written);
    Ok(written)
}

/// A target as it is, without changing it.
pub(super) async fn look(ctx: &ScalerContext, scaler: &Scaler, target: &Target) -> Result<Seen> {
    match resolve(ctx, scaler, target).await? {
        Ok(resource) => Ok(Seen {
            current: match sleep_patch(scaler, &resource) {
                // A watch knows its replicas, not whether it sleeps by a patch.
                Some(_) => read(ctx, &resource, target, true).await?,
                None => match ctx.inventory.current(target) {
                    Some(cached) => cached.map(|c| Current { cached: true, ..c }),
                    None => read(ctx, &resource, target, false).await?,
                },
            },
            ..Seen::default()
        }),
        Err(why) => Ok(Seen {
            unscalable: Some(why.to_string()),
            ..Seen::default()
        }),
    }
}
