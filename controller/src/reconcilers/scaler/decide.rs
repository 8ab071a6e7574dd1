//! Pure decisions: what a target, its HPA or its ScaledObject should be changed to, and when
//! the Scaler runs next. No I/O; tested without an apiserver.
use super::*;

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

/// Outside every window under `outside.mode: Hold`: a target above the held replicas `to` is
/// set back, once `grace` has passed since it settled ([`Current::settled_from`]); before that,
/// the time to look again. None when it is at or below `to`.
pub fn hold_change(
    target: &Target,
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

/// Outside every window when the Scaler starts there (`ScalerSpec::sets_outside_at_start`): a target it
/// has not scaled goes to `to` at once, as a closing window leaves it, and is not recorded (a
/// closing window drops the record too). None when it is there already.
pub fn start_change(target: &Target, current: &Current, to: i32) -> Option<TargetChange> {
    let now = current.replicas;
    (now != to).then(|| TargetChange {
        record: None,
        replicas: Some(to),
        restoring: false,
        reason: reason::SCALED,
        note: format!(
            "Scaled {target} from {now} to {to} replicas: the Scaler starts outside every window"
        ),
    })
}

/// What a target needs from the Scaler `me`, given `record`, whose record of the original
/// replicas the target carries: `wanted` replicas in the schedule (recording the original and
/// `me` once), or, outside it, going back to `outside` or the recorded replicas. None when it is
/// as it should be, or when the record is another Scaler's.
pub fn target_change(
    target: &Target,
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
    target: &Target,
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
    target: &Target,
) -> Option<&'a HorizontalPodAutoscaler> {
    hpas.iter().find(|h| {
        h.spec.as_ref().is_some_and(|s| {
            let r = &s.scale_target_ref;
            let api_version = r.api_version.as_deref().unwrap_or_default();
            r.name == target.name && r.kind == target.kind && group_of(api_version) == target.group
        })
    })
}

/// A change to a suspended kind (a CronJob or Job) as its events say it: suspended or resumed.
pub(super) fn suspension(target: &Target, change: TargetChange) -> TargetChange {
    let note = match change.replicas {
        Some(0) => format!("Suspended {target}"),
        Some(_) => format!("Resumed {target}"),
        None => return change,
    };
    TargetChange { note, ..change }
}

/// What a KEDA ScaledObject needs from the Scaler `me` for `target`: paused at `paused`
/// replicas through KEDA's own annotation (KEDA then deletes its HPA and holds the target
/// there; setting the HPA's minReplicas would be undone by KEDA), recording the annotation as
/// it was; with None, the annotation as it was before. None when it is as it should be, or when
/// another Scaler paused it.
pub fn keda_change(
    so: &DynamicObject,
    target: &Target,
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

/// The spec part of a merge patch that gives the object `to` replicas: a suspended kind is
/// suspended at 0 and runs at 1 or more.
pub(super) fn replicas_patch(resource: &ApiResource, to: i32) -> Value {
    match asleep_by(&resource.group, &resource.plural) {
        Some(asleep) => asleep.spec_patch(to == 0),
        None => json!({"replicas": to}),
    }
}

/// One event note per reason for what was done to a selector's targets: the first few notes
/// and how many more.
pub(super) fn summaries(told: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
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
pub(super) fn listing(items: &[String], by: &str) -> String {
    const SHOWN: usize = 10;
    let shown = items[..items.len().min(SHOWN)].join(by);
    match items.len().checked_sub(SHOWN) {
        Some(more) if more > 0 => format!("{shown}{by}and {more} more"),
        _ => shown,
    }
}

/// The earlier of two times, either of which may be missing.
pub(super) fn earliest(
    a: Option<DateTime<Utc>>,
    b: Option<DateTime<Utc>>,
) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When to look at a Scaler again after a reconcile.
pub(super) fn next_action(
    next: Option<DateTime<Utc>>,
    suspended: bool,
    now: DateTime<Utc>,
) -> Action {
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

/// The time to sleep from `now` until `next` (a timer never fires early; see `at_boundary`).
pub fn until(now: DateTime<Utc>, next: DateTime<Utc>) -> Duration {
    (next - now).to_std().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::*;
    use crate::fixtures::at;

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

    #[test]
    fn an_hpa_min_never_exceeds_its_max_nor_goes_below_one() {
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "h", "namespace": "team"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 2, "maxReplicas": 10},
    }))
    .unwrap();
        let web = Target::deployment("team", "web");
        assert_eq!(
            hpa_change(&hpa, &web, ME, Some(12)).unwrap().replicas,
            Some(10)
        );
        assert_eq!(
            autoscaler_of(std::slice::from_ref(&hpa), &web).map(|h| h.name_any()),
            Some("h".into())
        );
        let db = Target {
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
    fn a_keda_scaled_object_is_paused_with_its_own_annotation_and_given_back_as_it_was() {
        let target = Target::deployment("team", "web");
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
