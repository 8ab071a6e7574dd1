//! Per-Scaler metrics: whether it is active, each target's desired and current replicas, the
//! next transition, transitions applied and how late, targets in error, and the replicas held
//! below their original (the savings). Labels are the Scaler's `namespace` and `scaler`, plus the
//! target's kind, namespace and name on per-target series, so a Scaler adds at most a few series
//! per target (at most `MAX_STATUS_TARGETS` targets each, those its status lists; the counts
//! of targets in error and held below original take them all); its series go when it is deleted, and
//! all of them when this replica stops leading, so only the leader reports Scalers.
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kubesteer_api::rules::scaler::MAX_STATUS_TARGETS;
use kubesteer_api::scaler::v1beta1::TargetStatus;
use kubesteer_api::{Scaler, ScalerStatus};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ScalerLabels {
    namespace: String,
    scaler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct TargetLabels {
    namespace: String,
    scaler: String,
    target_kind: String,
    target_namespace: String,
    target_name: String,
}

type LatenessFamily = Family<ScalerLabels, Histogram, fn() -> Histogram>;

// A transition lands within a few hundred milliseconds (README, Benchmarks); the top buckets
// tell an apiserver outage (retried every 2 s) from a controller that was down.
const LATENESS_BUCKETS: [f64; 11] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
];

fn lateness_histogram() -> Histogram {
    Histogram::new(LATENESS_BUCKETS)
}

/// The Scaler series, registered under the controller's `kubesteer_` prefix.
pub struct ScalerMetrics {
    active: Family<ScalerLabels, Gauge>,
    next_transition: Family<ScalerLabels, Gauge>,
    transitions: Family<ScalerLabels, Counter>,
    lateness: LatenessFamily,
    targets_in_error: Family<ScalerLabels, Gauge>,
    held_below_original: Family<ScalerLabels, Gauge>,
    desired: Family<TargetLabels, Gauge>,
    current: Family<TargetLabels, Gauge>,
    /// The target series each Scaler has now, to drop those of a target it no longer has.
    targets: Mutex<HashMap<ScalerLabels, BTreeSet<TargetLabels>>>,
}

impl ScalerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            active: Family::default(),
            next_transition: Family::default(),
            transitions: Family::default(),
            lateness: Family::new_with_constructor(lateness_histogram),
            targets_in_error: Family::default(),
            held_below_original: Family::default(),
            desired: Family::default(),
            current: Family::default(),
            targets: Mutex::default(),
        };
        registry.register(
            "scaler_active",
            "1 while the Scaler scales its targets (inside a window, after a cron firing, or \
             under an override), else 0",
            metrics.active.clone(),
        );
        registry.register(
            "scaler_next_transition_timestamp_seconds",
            "When the Scaler's next transition is due, in Unix seconds; absent while suspended \
             or with none ahead",
            metrics.next_transition.clone(),
        );
        registry.register(
            "scaler_transitions",
            "Scheduled transitions the Scaler applied to its targets",
            metrics.transitions.clone(),
        );
        registry.register(
            "scaler_transition_lateness_seconds",
            "How long after its boundary each applied transition had its targets written, as \
             seen when the Scaler's status recorded it",
            metrics.lateness.clone(),
        );
        registry.register(
            "scaler_targets_in_error",
            "The Scaler's targets whose last change failed",
            metrics.targets_in_error.clone(),
        );
        registry.register(
            "scaler_replicas_held_below_original",
            "Replicas the Scaler holds its targets below their recorded original: the sum of \
             original minus current over targets below it",
            metrics.held_below_original.clone(),
        );
        registry.register(
            "scaler_target_desired_replicas",
            "The replicas the Scaler wants a target to have now",
            metrics.desired.clone(),
        );
        registry.register(
            "scaler_target_replicas",
            "A target's replicas as the Scaler last saw or set them",
            metrics.current.clone(),
        );
        metrics
    }

    /// Records a reconcile of `scaler` that went from `previous` to `status` (already written,
    /// but with every target, not only those the written one lists) at `now`, its targets
    /// wanting `wanted` replicas (None: back to their original).
    pub fn observed(
        &self,
        scaler: &Scaler,
        previous: &ScalerStatus,
        status: &ScalerStatus,
        wanted: Option<i32>,
        now: DateTime<Utc>,
    ) {
        let labels = labels_of(scaler);
        self.active
            .get_or_create(&labels)
            .set(i64::from(status.active.unwrap_or(false)));
        match status.next_transitions.first() {
            Some(next) => {
                self.next_transition
                    .get_or_create(&labels)
                    .set(next.time.0.as_second());
            }
            None => {
                self.next_transition.remove(&labels);
            }
        }
        // Created at zero before the first transition, so that increase() sees that one too.
        let transitions = self.transitions.get_or_create(&labels);
        let lateness = self.lateness.get_or_create(&labels);
        if let Some(late) = applied_transition(scaler, previous, status, now) {
            transitions.inc();
            lateness.observe(late);
        }
        drop((transitions, lateness));
        let in_error = status.targets.iter().filter(|t| t.error.is_some()).count();
        self.targets_in_error
            .get_or_create(&labels)
            .set(i64::try_from(in_error).unwrap_or(i64::MAX));
        self.held_below_original
            .get_or_create(&labels)
            .set(held_below_original(&status.targets));

        // Per-target series for the targets a status lists, so a fleet adds a bounded number.
        let mut now_present = BTreeSet::new();
        for target in status.targets.iter().take(MAX_STATUS_TARGETS) {
            let target_labels = TargetLabels {
                namespace: labels.namespace.clone(),
                scaler: labels.scaler.clone(),
                target_kind: target.kind.clone(),
                target_namespace: target.namespace.clone(),
                target_name: target.name.clone(),
            };
            set_or_remove(&self.desired, &target_labels, desired(target, wanted));
            set_or_remove(&self.current, &target_labels, target.replicas);
            now_present.insert(target_labels);
        }
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        let before = targets.insert(labels, now_present.clone());
        for gone in before.unwrap_or_default().difference(&now_present) {
            self.desired.remove(gone);
            self.current.remove(gone);
        }
    }

    /// Drops every series of the Scaler `namespace/name`: it is being deleted.
    pub fn deleted(&self, namespace: &str, name: &str) {
        let labels = ScalerLabels {
            namespace: namespace.to_string(),
            scaler: name.to_string(),
        };
        self.active.remove(&labels);
        self.next_transition.remove(&labels);
        self.transitions.remove(&labels);
        self.lateness.remove(&labels);
        self.targets_in_error.remove(&labels);
        self.held_below_original.remove(&labels);
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        for gone in targets.remove(&labels).unwrap_or_default() {
            self.desired.remove(&gone);
            self.current.remove(&gone);
        }
    }

    /// Drops every Scaler's series: this replica no longer runs the controllers, and the next
    /// leader reports them.
    pub fn clear(&self) {
        self.active.clear();
        self.next_transition.clear();
        self.transitions.clear();
        self.lateness.clear();
        self.targets_in_error.clear();
        self.held_below_original.clear();
        self.desired.clear();
        self.current.clear();
        self.targets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

fn labels_of(scaler: &Scaler) -> ScalerLabels {
    ScalerLabels {
        namespace: scaler.namespace().unwrap_or_default(),
        scaler: scaler.name_any(),
    }
}

fn set_or_remove(family: &Family<TargetLabels, Gauge>, labels: &TargetLabels, value: Option<i32>) {
    match value {
        Some(v) => {
            family.get_or_create(labels).set(i64::from(v));
        }
        None => {
            family.remove(labels);
        }
    }
}

/// What `target` should have: `wanted`, or outside the schedule its recorded original (still to
/// be restored), or else what it has (the Scaler leaves it alone).
fn desired(target: &TargetStatus, wanted: Option<i32>) -> Option<i32> {
    wanted.or(target.original_replicas).or(target.replicas)
}

/// The sum of `original - current` over targets below their recorded original.
fn held_below_original(targets: &[TargetStatus]) -> i64 {
    targets
        .iter()
        .filter_map(|t| Some(i64::from(t.original_replicas?) - i64::from(t.replicas?)))
        .filter(|held| *held > 0)
        .sum()
}

/// How late (seconds after its boundary) the transition this reconcile applied was, if it
/// applied one: a new last transition that the previous status had listed as coming, so a new
/// Scaler or a changed schedule (whose last boundary may be long past) is not counted, nor a
/// dry run or a suspended Scaler, which write nothing.
fn applied_transition(
    scaler: &Scaler,
    previous: &ScalerStatus,
    status: &ScalerStatus,
    now: DateTime<Utc>,
) -> Option<f64> {
    if scaler.spec.dry_run() || scaler.spec.suspend() {
        return None;
    }
    let last = status.last_transition.as_ref()?;
    if previous.last_transition.as_ref() == Some(last)
        || !previous.next_transitions.iter().any(|t| t.time == *last)
    {
        return None;
    }
    let late_ms = now.timestamp_millis() - last.0.as_millisecond();
    Some(late_ms.max(0) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::reconcilers::time;
    use kubesteer_api::scaler::v1beta1::Transition;
    use serde_json::json;

    fn scaler(extra: serde_json::Value) -> Scaler {
        let mut spec = json!({
            "timeZone": "UTC",
            "windows": [{"days": ["Mon"], "start": "09:00", "end": "17:00", "replicas": 0}],
            "scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1beta1",
            "kind": "Scaler",
            "metadata": {"namespace": "team", "name": "nightly"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn target(name: &str, replicas: Option<i32>, original: Option<i32>) -> TargetStatus {
        TargetStatus {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "team".into(),
            name: name.into(),
            replicas,
            original_replicas: original,
            ..TargetStatus::default()
        }
    }

    fn coming(at: DateTime<Utc>) -> ScalerStatus {
        ScalerStatus {
            active: Some(false),
            next_transitions: vec![Transition {
                time: time(at),
                replicas: Some(0),
            }],
            ..ScalerStatus::default()
        }
    }

    /// The sample lines of `text` that start with `prefix`.
    fn samples(text: &str, prefix: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(String::from)
            .collect()
    }

    const WEB: &str = r#"namespace="team",scaler="nightly",target_kind="Deployment",target_namespace="team",target_name="web""#;
    const API: &str = r#"namespace="team",scaler="nightly",target_kind="Deployment",target_namespace="team",target_name="api""#;

    #[test]
    fn a_transition_is_counted_once_with_its_lateness_and_targets_are_reported() {
        let metrics = Metrics::default();
        let s = scaler(json!({}));
        let boundary = at("2026-03-02T09:00:00Z");
        let previous = coming(boundary);
        let status = ScalerStatus {
            active: Some(true),
            last_transition: Some(time(boundary)),
            next_transitions: vec![Transition {
                time: time(at("2026-03-02T17:00:00Z")),
                replicas: None,
            }],
            targets: vec![
                target("web", Some(0), Some(3)),
                TargetStatus {
                    error: Some("denied".into()),
                    ..target("api", Some(2), Some(1))
                },
            ],
            ..ScalerStatus::default()
        };
        let written = at("2026-03-02T09:00:00.120Z");
        metrics.scaler_observed(&s, &previous, &status, Some(0), written);
        // The next reconcile sees the same transition as the last: not counted again.
        metrics.scaler_observed(&s, &status, &status, Some(0), at("2026-03-02T09:05:00Z"));
        let text = metrics.encode().unwrap();
        let scaler = r#"{namespace="team",scaler="nightly"}"#;
        assert_eq!(
            samples(&text, "kubesteer_scaler_transitions_total"),
            [format!("kubesteer_scaler_transitions_total{scaler} 1")]
        );
        assert!(
            text.contains(r#"kubesteer_scaler_transition_lateness_seconds_sum{namespace="team",scaler="nightly"} 0.12"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kubesteer_scaler_transition_lateness_seconds_bucket{le="0.1",namespace="team",scaler="nightly"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kubesteer_scaler_transition_lateness_seconds_bucket{le="0.25",namespace="team",scaler="nightly"} 1"#),
            "{text}"
        );
        for line in [
            format!("kubesteer_scaler_active{scaler} 1"),
            format!("kubesteer_scaler_next_transition_timestamp_seconds{scaler} 1772470800"),
            format!("kubesteer_scaler_targets_in_error{scaler} 1"),
            // web is 3 below its original; api above its own counts for nothing.
            format!("kubesteer_scaler_replicas_held_below_original{scaler} 3"),
            format!("kubesteer_scaler_target_desired_replicas{{{WEB}}} 0"),
            format!("kubesteer_scaler_target_replicas{{{WEB}}} 0"),
            format!("kubesteer_scaler_target_replicas{{{API}}} 2"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    #[test]
    fn outside_the_schedule_a_target_is_wanted_at_its_original_until_restored() {
        let t = target("web", Some(0), Some(3));
        assert_eq!(desired(&t, None), Some(3));
        assert_eq!(desired(&target("web", Some(3), None), None), Some(3));
        assert_eq!(desired(&t, Some(1)), Some(1));
        assert_eq!(desired(&target("web", None, None), None), None);
    }

    #[test]
    fn a_new_scaler_a_dry_run_and_a_suspended_one_count_no_transition() {
        let boundary = at("2026-03-02T09:00:00Z");
        let status = ScalerStatus {
            last_transition: Some(time(boundary)),
            ..ScalerStatus::default()
        };
        let late = at("2026-03-05T09:00:00Z");
        let s = scaler(json!({}));
        // A new Scaler: its last boundary was never coming, however long ago it was.
        assert_eq!(
            applied_transition(&s, &ScalerStatus::default(), &status, late),
            None
        );
        // A controller down across the boundary: late, and counted.
        assert_eq!(
            applied_transition(&s, &coming(boundary), &status, late),
            Some(3.0 * 86400.0)
        );
        for quiet in [json!({"dryRun": true}), json!({"suspend": true})] {
            assert_eq!(
                applied_transition(&scaler(quiet.clone()), &coming(boundary), &status, late),
                None,
                "{quiet}"
            );
        }
        // Written a hair before the boundary (a timer's tolerance) is not early: zero.
        assert_eq!(
            applied_transition(
                &s,
                &coming(boundary),
                &status,
                at("2026-03-02T08:59:59.990Z")
            ),
            Some(0.0)
        );
    }

    #[test]
    fn a_dropped_target_and_a_deleted_scaler_leave_no_series() {
        let metrics = Metrics::default();
        let s = scaler(json!({}));
        let two = ScalerStatus {
            active: Some(true),
            next_transitions: coming(at("2026-03-02T17:00:00Z")).next_transitions,
            targets: vec![
                target("web", Some(0), Some(3)),
                target("api", Some(0), Some(1)),
            ],
            ..ScalerStatus::default()
        };
        let now = at("2026-03-02T10:00:00Z");
        metrics.scaler_observed(&s, &ScalerStatus::default(), &two, Some(0), now);
        let one = ScalerStatus {
            targets: vec![target("web", Some(0), Some(3))],
            ..two.clone()
        };
        metrics.scaler_observed(&s, &two, &one, Some(0), now);
        let text = metrics.encode().unwrap();
        // No transition yet: its series are there, at zero.
        assert!(
            text.contains(
                r#"kubesteer_scaler_transitions_total{namespace="team",scaler="nightly"} 0"#
            ),
            "{text}"
        );
        assert!(text.contains(WEB), "{text}");
        assert!(!text.contains(API), "{text}");

        metrics.scaler_deleted("team", "nightly");
        let text = metrics.encode().unwrap();
        let left: Vec<_> = text
            .lines()
            .filter(|l| l.contains(r#"scaler="nightly""#))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_replica_that_stops_leading_drops_every_scaler_series() {
        let metrics = Metrics::default();
        metrics.set_leading(true);
        let status = ScalerStatus {
            targets: vec![target("web", Some(0), Some(3))],
            ..coming(at("2026-03-02T17:00:00Z"))
        };
        let now = at("2026-03-02T10:00:00Z");
        metrics.scaler_observed(&scaler(json!({})), &status, &status, Some(0), now);
        metrics.set_leading(false);
        let text = metrics.encode().unwrap();
        assert!(!text.contains(r#"scaler="nightly""#), "{text}");
        assert!(text.contains("kubesteer_leading 0"), "{text}");
    }
}
