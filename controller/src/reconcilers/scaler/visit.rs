//! One target's reconcile, in three steps: [`find`] reads the target and what scales it (an
//! HPA, a KEDA ScaledObject, the records on them), [`changes`] decides what to write (the rules
//! of `decide`), and [`write_changes`] writes it, or a dry run tells of it. A conflict reads
//! again and decides again.
use super::*;

/// What the Scaler wants of one target in this pass, and how to report it.
#[derive(Default)]
pub(super) struct Visit<'a> {
    /// In a window (or under an override), the replicas it says.
    pub(super) wanted: Option<i32>,
    /// `outsideReplicas`.
    pub(super) outside: Option<i32>,
    /// The Scaler lets go of the target (deleted, or the target left its spec), so an HPA gets
    /// its own minReplicas back whatever outsideReplicas says.
    pub(super) release: bool,
    /// The target's status entry: the HPA this Scaler last worked through for it, when the
    /// spec no longer finds that one (`hpaCooperation` switched off, the HPA retargeted), has
    /// its minReplicas given back by that name; the KEDA ScaledObject it paused (whose HPA KEDA
    /// deleted meanwhile) is found again by its name.
    pub(super) recorded: Option<&'a TargetStatus>,
    /// What the Scaler read of the target just before a boundary (see [`Early`]).
    pub(super) prefetched: Option<Current>,
    /// Its place at the boundary's gate.
    pub(super) pass: Option<&'a Pass>,
    /// A selector's target: what is done is gathered, and told of in one event per reason.
    pub(super) gather: bool,
}

impl<'a> Visit<'a> {
    /// A target given back: the Scaler was deleted, or the target left its spec.
    pub(super) fn release(
        outside: Option<i32>,
        recorded: Option<&'a TargetStatus>,
        gather: bool,
    ) -> Self {
        Self {
            outside,
            release: true,
            recorded,
            gather,
            ..Self::default()
        }
    }
}

/// A target and what scales it, as read in one attempt.
struct Found {
    current: Current,
    /// The HPA that scales it, while the Scaler cooperates with HPAs.
    hpa: Option<HorizontalPodAutoscaler>,
    /// The record on that HPA, when it is written through (no ScaledObject).
    hpa_record: Option<Record>,
    /// The KEDA ScaledObject that scales it, to pause instead.
    keda: Option<DynamicObject>,
    /// The HPA the Scaler worked through last, when the spec no longer finds that one.
    earlier: Option<HorizontalPodAutoscaler>,
    /// The record on the target.
    record: Record,
}

/// What to write, and what is left to look at later.
struct Changes {
    list: Vec<(Via, TargetChange)>,
    /// When a target held outside every window leaves its grace period.
    hold_until: Option<DateTime<Utc>>,
    /// The replicas a ScaledObject is paused at.
    paused: Option<i32>,
}

/// Reconciles one target of `owner` as `visit` says, and tells what it found and did.
pub(super) async fn reconcile_target(
    ctx: &ScalerContext,
    owner: &Scaler,
    target: &Target,
    mut visit: Visit<'_>,
) -> Result<Seen> {
    let resource = match resolve(ctx, owner, target).await? {
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
    // What was done (or would be), gathered across attempts.
    let mut done = Vec::new();
    let mut attempt = 0;
    loop {
        let found = find(
            ctx, owner, target, &resource, &claimant, &mut visit, attempt,
        )
        .await?;
        let Some(found) = found else {
            return Ok(Seen::default());
        };
        let changes = changes(ctx, owner, target, &resource, &me, &found, &visit);
        let seen = |current: Current, told: Vec<(&'static str, String)>| Seen {
            saving: saving(owner, &resource, &me, &current, &found, &changes),
            current: Some(current),
            claimed_by: match &found.record {
                Record::Other(other) => Some(other.clone()),
                _ => None,
            },
            unscalable: None,
            autoscaler: found
                .hpa
                .as_ref()
                .filter(|_| found.keda.is_none())
                .map(|h| h.name_any()),
            scaled_object: found
                .keda
                .as_ref()
                .filter(|_| changes.paused.is_some())
                .map(|so| so.name_any()),
            hold_until: changes.hold_until,
            told,
        };
        if changes.list.is_empty() {
            return Ok(seen(found.current.clone(), done));
        }
        // A dry run says what it would write, and writes nothing; giving back is still done.
        if owner.spec.dry_run() && !visit.release {
            for (_, change) in &changes.list {
                let note = format!("Dry run, not done: {}", change.note);
                info!(target = %target, reason = reason::DRY_RUN, "{note}");
                tell(ctx, owner, &visit, &mut done, reason::DRY_RUN, note).await;
            }
            return Ok(seen(found.current.clone(), done));
        }
        let retry = attempt + 1 < CONFLICT_RETRIES;
        let to = (&resource, &found, &changes);
        match write_changes(ctx, owner, target, to, &visit, retry, &mut done).await? {
            Some(now) => return Ok(seen(now, done)),
            None => attempt += 1,
        }
    }
}

/// What `current` does not run because of `owner` ([`kubesteer_api::scaler::savings`]): the
/// replicas below those it recorded, or in a dry run those it would take away, times one pod's
/// requests. Kinds put to sleep rather than scaled, and targets scaled through an HPA or KEDA,
/// count nothing.
fn saving(
    owner: &Scaler,
    resource: &ApiResource,
    me: &str,
    current: &Current,
    found: &Found,
    changes: &Changes,
) -> Rate {
    let asleep = asleep_by(&resource.group, &resource.plural).is_some();
    if asleep || sleep_patch(owner, resource).is_some() || found.hpa.is_some() {
        return Rate::default();
    }
    // The requests of the read: a write of the replicas leaves the template as it was.
    let requests = found.current.requests;
    if owner.spec.dry_run() {
        let would = changes.list.iter().find_map(|(via, change)| match via {
            Via::Target => change.replicas,
            _ => None,
        });
        return would.map_or_else(Rate::default, |to| {
            Rate::taken(current.replicas, to, requests)
        });
    }
    match Record::of(&current.annotations, me) {
        Record::Mine {
            replicas: Some(original),
            ..
        } => Rate::taken(original, current.replicas, requests),
        _ => Rate::default(),
    }
}

/// Reads the target (the prefetched read, then the watch, then the apiserver after a conflict)
/// and what scales it. None when the target does not exist.
async fn find(
    ctx: &ScalerContext,
    owner: &Scaler,
    target: &Target,
    resource: &ApiResource,
    claimant: &Claimant,
    visit: &mut Visit<'_>,
    attempt: usize,
) -> Result<Option<Found>> {
    let prefetched = visit.prefetched.take();
    let patched = sleep_patch(owner, resource).is_some();
    let current = async {
        match prefetched {
            Some(read_before) => Ok(Some(read_before)),
            // From the watch first; after a conflict, from the apiserver.
            None if attempt == 0 && !patched => match ctx.inventory.current(target) {
                Some(cached) => Ok(cached.map(|c| Current { cached: true, ..c })),
                None => read(ctx, resource, target, patched).await,
            },
            None => read(ctx, resource, target, patched).await,
        }
    };
    let (current, hpa) = tokio::try_join!(current, autoscaler(ctx, owner, target))?;
    let Some(current) = current else {
        return Ok(None);
    };
    // A target KEDA scales (its HPA owned by a ScaledObject, or a ScaledObject this Scaler
    // paused, whose HPA KEDA deleted meanwhile) is paused through KEDA instead.
    let remembered = ctx.inventory.scaled_object_of(target);
    let keda = match scaled_object_name(hpa.as_ref(), visit.recorded, remembered, owner) {
        Some(name) => scaled_object(ctx, &target.namespace, &name).await?,
        None => None,
    };
    let recorded_hpa = visit
        .recorded
        .and_then(|r| r.horizontal_pod_autoscaler.as_deref());
    let earlier = match recorded_hpa {
        Some(name) if hpa.as_ref().is_none_or(|h| h.name_any() != name) => {
            hpa_named(ctx, &target.namespace, name).await?
        }
        _ => None,
    };
    let key = annotation::ORIGINAL_REPLICAS;
    let record = record_of(ctx, target, &current.annotations, key, claimant).await?;
    let hpa_record = match hpa.as_ref().filter(|_| keda.is_none()) {
        Some(hpa) => {
            let key = annotation::ORIGINAL_MIN_REPLICAS;
            Some(record_of(ctx, target, hpa.annotations(), key, claimant).await?)
        }
        None => None,
    };
    Ok(Some(Found {
        current,
        hpa,
        hpa_record,
        keda,
        earlier,
        record,
    }))
}

/// What to write to the target, its HPA and its ScaledObject, as `decide`'s rules say.
fn changes(
    ctx: &ScalerContext,
    owner: &Scaler,
    target: &Target,
    resource: &ApiResource,
    me: &str,
    found: &Found,
    visit: &Visit<'_>,
) -> Changes {
    let (current, record) = (&found.current, &found.record);
    let (hpa, hpa_record) = (&found.hpa, &found.hpa_record);
    let (keda, earlier) = (&found.keda, &found.earlier);
    let release = visit.release;
    // In the schedule (or held at outsideReplicas), the replicas every target should have.
    let effective = visit.wanted.or(visit.outside);
    // With an HPA, replicas of 1 or more go to its minReplicas and the target is left to it
    // (given back if the Scaler had scaled it to 0, where an HPA does not act); 0 and the
    // way back outside go to the target itself, with the HPA's own minReplicas restored.
    let ((mut w, mut o), hpa_wanted) = match (hpa, effective) {
        (Some(_), Some(n)) if n >= 1 && !release => ((None, None), Some(n)),
        _ => ((visit.wanted, visit.outside), None),
    };
    let mut list = Vec::new();
    if let Some(earlier) = earlier.as_ref().filter(|_| keda.is_none()) {
        if let Some(change) = hpa_change(earlier, target, me, None) {
            list.push((Via::Autoscaler(earlier.name_any()), change));
        }
    }
    // Paused while the schedule says so; resumed on the way back, or once cooperation is
    // switched off (the target is then written itself from the next reconcile).
    let cooperate = owner.spec.hpa_cooperation() == HpaCooperation::Enabled;
    let paused = effective.filter(|_| !release && cooperate);
    if let Some(so) = keda {
        if let Some(change) = keda_change(so, target, me, paused) {
            list.push((Via::ScaledObject(so.name_any()), change));
        }
    }
    if let (Some(hpa), Some(hpa_record)) = (hpa, hpa_record) {
        if !matches!(hpa_record, Record::Other(_)) {
            if let Some(change) = hpa_change(hpa, target, me, hpa_wanted) {
                list.push((Via::Autoscaler(hpa.name_any()), change));
            }
        }
    }
    let suspended = suspended_instead(&resource.group, &resource.plural)
        || sleep_patch(owner, resource).is_some();
    if suspended {
        // Suspended at 0; at 1 or more as it was before the Scaler (never resumed by it).
        let running = match record {
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
    } else if let Some(change) = target_change(target, current, me, record, w, o) {
        list.push((Via::Target, told(change)));
    } else if let (None, false, None, Record::Absent) = (w, release, hpa, record) {
        let starting = owner.spec.sets_outside_at_start(owner.spec_is_new());
        if let Some((to, grace)) = owner.spec.hold() {
            // Outside every window, held: set back what was scaled up meanwhile.
            match hold_change(target, current, to, grace, ctx.clock.now()) {
                Some(Ok(change)) => list.push((Via::Target, told(change))),
                Some(Err(until)) => hold_until = Some(until),
                None => {}
            }
        } else if let Some(change) = o
            .filter(|_| starting)
            .and_then(|to| start_change(target, current, to))
        {
            // Started outside every window: where a closing window would have left it.
            list.push((Via::Target, told(change)));
        }
    }
    Changes {
        list,
        hold_until,
        paused,
    }
}

/// Writes `changes` in order and tells of each (gathered into `done`): the target as written,
/// or None on a conflict to read again for (when `retry`; otherwise the conflict is an error).
async fn write_changes(
    ctx: &ScalerContext,
    owner: &Scaler,
    target: &Target,
    (resource, found, changes): (&ApiResource, &Found, &Changes),
    visit: &Visit<'_>,
    retry: bool,
    done: &mut Vec<(&'static str, String)>,
) -> Result<Option<Current>> {
    let mut now = found.current.clone();
    let client = ctx
        .acting
        .client(owner.metadata.namespace.as_deref().unwrap_or_default())?;
    for (via, change) in &changes.list {
        let patch = change.record.clone().unwrap_or_default();
        let written = match via {
            Via::Autoscaler(hpa) => {
                let api: Api<HorizontalPodAutoscaler> =
                    Api::namespaced(client.clone(), &target.namespace);
                api.patch(hpa, &write_params(), &Patch::Merge(patch))
                    .await
                    .map(|_| now.clone())
            }
            Via::ScaledObject(name) => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &target.namespace, &scaled_objects());
                api.patch(name, &write_params(), &Patch::Merge(patch))
                    .await
                    .map(|_| now.clone())
            }
            Via::Target => {
                write_target(
                    ctx,
                    &client,
                    owner,
                    resource,
                    target,
                    &found.current,
                    change,
                )
                .await
            }
        };
        match written {
            Ok(written) => {
                now = written;
                info!(target = %target, reason = change.reason, "{}", change.note);
                if !visit.gather {
                    if let Some(pass) = visit.pass {
                        pass.leave_and_wait(GATE_WAIT).await;
                    }
                }
                tell(ctx, owner, visit, done, change.reason, change.note.clone()).await;
            }
            Err(e) if retry && is_status(&e, 409) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(now))
}

/// Tells of what was done to a target: gathered for a selector's, an event for a named one.
async fn tell(
    ctx: &ScalerContext,
    owner: &Scaler,
    visit: &Visit<'_>,
    done: &mut Vec<(&'static str, String)>,
    reason: &'static str,
    note: String,
) {
    match visit.gather {
        true => done.push((reason, note)),
        false => ctx.publish(owner, EventType::Normal, reason, note).await,
    }
}
