//! Per-Scaler metrics: whether it is active, each target's desired and current replicas, the
//! next transition, transitions applied and how late, targets in error, the replicas held below
//! their original, and its savings (`status.savings`: the pods, CPU and memory not running now,
//! and what was not run, counted to the scrape's time; label `potential` for a dry run's). Labels
//! are the Scaler's `namespace` and `scaler`, plus the
//! target's kind, namespace and name on per-target series, so a Scaler adds at most a few series
//! per target (at most `MAX_STATUS_TARGETS` targets each, those its status lists; the counts
//! of targets in error and held below original take them all); its series go when it is deleted, and
//! all of them when this replica stops leading, so only the leader reports Scalers.
//!
//! They are kept as one plain entry per Scaler and written out by a [`Collector`] at scrape
//! time, not as prometheus-client families: a family holds its own copy of the labels, a hash
//! slot and an `Arc` per series, which came to 3.7 KB per Scaler with one target; an entry here
//! takes 0.3 KB (bench/src/stores.rs).
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kubesteer_api::rules::scaler::MAX_STATUS_TARGETS;
use kubesteer_api::scaler::savings::{Saved, Savings};
use kubesteer_api::scaler::v1beta1::TargetStatus;
use kubesteer_api::{Scaler, ScalerStatus};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use kubesteer_runtime::exposition::PREFIX;

// A transition lands within a few hundred milliseconds (README, Benchmarks); the top buckets
// tell an apiserver outage (retried every 2 s) from a controller that was down.
const LATENESS_BUCKETS: [f64; 11] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
];

/// The Scaler series, registered under the controller's `kubesteer_` prefix.
#[derive(Default)]
pub struct ScalerMetrics {
    scalers: Arc<Scalers>,
}

/// Each Scaler's series by `namespace/name` (a namespace has no `/`, so the first one splits
/// them). Boxed entries keep the table's slots small: a table is up to half empty after it grows.
#[derive(Debug, Default)]
struct Scalers(Mutex<HashMap<Box<str>, Box<ScalerSeries>>>);

/// What one Scaler's series show.
#[derive(Clone, Debug, Default)]
struct ScalerSeries {
    /// None: the series is absent.
    next_transition: Option<i64>,
    held_below_original: i64,
    lateness_sum: f64,
    /// Applied transitions per lateness bucket, the last one +Inf (not cumulative): their sum is
    /// the transitions counter and the histogram's count. u32 as a Scaler transitioning every
    /// minute would take 8,000 years to fill one.
    lateness: [u32; LATENESS_BUCKETS.len() + 1],
    /// Those the status lists, one per distinct kind, namespace and name (their labels).
    targets: Box<[TargetSeries]>,
    targets_in_error: u32,
    active: bool,
    /// The Scaler's savings as its status has them (without the days), None until it has some.
    savings: Option<Box<Savings>>,
}

/// One target's series; each absent while None.
#[derive(Clone, Debug)]
struct TargetSeries {
    /// Kind, namespace and name one after the other, ending at `ends`: one allocation, not three.
    labels: Box<str>,
    ends: [u32; 2],
    desired: Option<i32>,
    current: Option<i32>,
}

impl ScalerMetrics {
    /// The Scalers' series of a scrape, in parts (see [`Parts`]); taken from a copy, so that a
    /// reconcile waits for the copy (6-10 ms with 20,000 Scalers, a few MB), not for the text,
    /// and the scrape sees one consistent view.
    pub fn parts(&self) -> Parts {
        self.parts_of(PART)
    }

    fn parts_of(&self, per: usize) -> Parts {
        let scalers: Vec<_> = self
            .scalers
            .lock()
            .iter()
            .map(|(key, series)| (key.clone(), ScalerSeries::clone(series)))
            .collect();
        Parts {
            scalers: Arc::new(scalers),
            per: per.max(1),
            family: 0,
            from: 0,
            headed: false,
        }
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
        let late = applied_transition(scaler, previous, status, now);
        let in_error = status.targets.iter().filter(|t| t.error.is_some()).count();
        let held = held_below_original(&status.targets);
        let key = key(&scaler.namespace().unwrap_or_default(), &scaler.name_any());
        let mut scalers = self.scalers.lock();
        // Created at zero before the first transition, so that increase() sees that one too.
        let series = scalers.entry(key.into_boxed_str()).or_default();
        series.active = status.active.unwrap_or(false);
        series.next_transition = status
            .next_transitions
            .first()
            .map(|t| t.time.0.as_second());
        if let Some(late) = late {
            let bucket = LATENESS_BUCKETS
                .iter()
                .position(|bound| late <= *bound)
                .unwrap_or(LATENESS_BUCKETS.len());
            series.lateness[bucket] = series.lateness[bucket].saturating_add(1);
            series.lateness_sum += late;
        }
        series.targets_in_error = u32::try_from(in_error).unwrap_or(u32::MAX);
        series.held_below_original = held;
        series.savings = status.savings.as_ref().map(|s| {
            Box::new(Savings {
                days: Vec::new(),
                ..s.clone()
            })
        });
        // Per-target series for the targets a status lists, so a fleet adds a bounded number.
        let listed = &status.targets[..status.targets.len().min(MAX_STATUS_TARGETS)];
        series.set_targets(listed, wanted);
    }

    /// Drops every series of the Scaler `namespace/name`: it is being deleted.
    pub fn deleted(&self, namespace: &str, name: &str) {
        self.scalers.lock().remove(key(namespace, name).as_str());
    }

    /// Drops every Scaler's series: this replica no longer runs the controllers, and the next
    /// leader reports them.
    pub fn clear(&self) {
        // A new table, so that a standby does not keep the leader's fleet-sized one.
        *self.scalers.lock() = HashMap::new();
    }
}

fn key(namespace: &str, name: &str) -> String {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key
}

impl ScalerSeries {
    fn transitions(&self) -> u64 {
        self.lateness.iter().map(|&n| u64::from(n)).sum()
    }

    fn set_targets(&mut self, listed: &[TargetStatus], wanted: Option<i32>) {
        // The same targets as last time (the usual reconcile): only their values change.
        if self.targets.len() == listed.len()
            && self.targets.iter().zip(listed).all(|(s, t)| s.is(t))
        {
            for (series, target) in self.targets.iter_mut().zip(listed) {
                series.set(target, wanted);
            }
            return;
        }
        let mut targets: Vec<TargetSeries> = Vec::with_capacity(listed.len());
        for target in listed {
            // Two entries with one kind, namespace and name (two API groups) have the same
            // labels, so one series: the last one's values.
            match targets.iter_mut().find(|s| s.is(target)) {
                Some(series) => series.set(target, wanted),
                None => targets.push(TargetSeries::new(target, wanted)),
            }
        }
        self.targets = targets.into_boxed_slice();
    }
}

impl TargetSeries {
    fn new(target: &TargetStatus, wanted: Option<i32>) -> Self {
        let (kind, namespace, name) = (&target.kind, &target.namespace, &target.name);
        let end = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
        let mut series = Self {
            labels: [kind.as_str(), namespace, name].concat().into_boxed_str(),
            ends: [end(kind.len()), end(kind.len() + namespace.len())],
            desired: None,
            current: None,
        };
        series.set(target, wanted);
        series
    }

    fn set(&mut self, target: &TargetStatus, wanted: Option<i32>) {
        self.desired = desired(target, wanted);
        self.current = target.replicas;
    }

    /// Kind, namespace and name.
    fn labels(&self) -> (&str, &str, &str) {
        let [kind, namespace] = self.ends.map(|e| usize::try_from(e).unwrap_or(usize::MAX));
        let part = |from: usize, to: usize| self.labels.get(from..to).unwrap_or_default();
        (
            part(0, kind),
            part(kind, namespace),
            part(namespace, self.labels.len()),
        )
    }

    fn is(&self, target: &TargetStatus) -> bool {
        self.labels() == (&target.kind, &target.namespace, &target.name)
    }
}

impl Scalers {
    fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, Box<ScalerSeries>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Each Scaler's series as a scrape writes them, by `namespace/name`.
type Snapshot = [(Box<str>, ScalerSeries)];

/// Writes the family `name` with a series per Scaler that `has` one, omitted when none has (as
/// prometheus-client omits an empty family).
fn scaler_family(
    encoder: &mut DescriptorEncoder<'_>,
    scalers: &Snapshot,
    (name, help, metric_type): (&str, &str, MetricType),
    has: impl Fn(&ScalerSeries) -> bool,
    value: impl Fn(&ScalerSeries, &mut MetricEncoder<'_>) -> fmt::Result,
) -> fmt::Result {
    if !scalers.iter().any(|(_, s)| has(s)) {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (key, series) in scalers.iter().filter(|(_, s)| has(s)) {
        let (namespace, scaler) = key.split_once('/').unwrap_or(("", key));
        let labels = [("namespace", namespace), ("scaler", scaler)];
        value(series, &mut family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes the family `name` with a series per Scaler that has savings, labelled `potential`
/// "true" for a dry run's. Totals are counted to the scrape's time.
fn saving_family(
    encoder: &mut DescriptorEncoder<'_>,
    scalers: &Snapshot,
    (name, help, metric_type): (&str, &str, MetricType),
    value: impl Fn(&Savings, &mut MetricEncoder<'_>) -> fmt::Result,
) -> fmt::Result {
    let mut set = scalers
        .iter()
        .filter_map(|(key, series)| Some((key, series.savings.as_deref()?)))
        .peekable();
    if set.peek().is_none() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (key, savings) in set {
        let (namespace, scaler) = key.split_once('/').unwrap_or(("", key));
        let potential = if savings.potential { "true" } else { "false" };
        let labels = [
            ("namespace", namespace),
            ("scaler", scaler),
            ("potential", potential),
        ];
        value(savings, &mut family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A savings total (hours) at the scrape's time, in seconds.
fn saved_seconds(savings: &Savings, amount: impl Fn(&Saved) -> f64) -> f64 {
    amount(&savings.total_at(Utc::now())) * 3600.0
}

/// Writes the gauge family `name` with a series per listed target whose `value` is Some.
fn target_family(
    encoder: &mut DescriptorEncoder<'_>,
    scalers: &Snapshot,
    name: &str,
    help: &str,
    value: impl Fn(&TargetSeries) -> Option<i32>,
) -> fmt::Result {
    let mut set = scalers
        .iter()
        .flat_map(|(key, series)| series.targets.iter().map(move |t| (key, t)))
        .filter_map(|(key, target)| Some((key, target, value(target)?)))
        .peekable();
    if set.peek().is_none() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (key, target, value) in set {
        let (namespace, scaler) = key.split_once('/').unwrap_or(("", key));
        let (kind, target_namespace, target_name) = target.labels();
        let labels = [
            ("namespace", namespace),
            ("scaler", scaler),
            ("target_kind", kind),
            ("target_namespace", target_namespace),
            ("target_name", target_name),
        ];
        family
            .encode_family(&labels)?
            .encode_gauge(&i64::from(value))?;
    }
    Ok(())
}

/// Scalers per part of a streamed exposition: about 2.4 KB of text each, so a part is about
/// 0.6 MB where the whole is 24 MB with 10,000 Scalers.
const PART: usize = 256;

/// How many families the Scaler series make.
const FAMILIES: usize = 14;

/// Writes family `index` (of [`FAMILIES`]) of the Scalers in `scalers`. Names, help texts (with
/// the full stop the registry adds to those it registers) and types as when they were registered
/// families: the chart's alerts and dashboard read them.
fn family(encoder: &mut DescriptorEncoder<'_>, scalers: &Snapshot, index: usize) -> fmt::Result {
    let all = |_: &ScalerSeries| true;
    match index {
        0 => scaler_family(
            encoder,
            scalers,
            (
                "scaler_active",
                "1 while the Scaler scales its targets (inside a window, after a cron firing, or \
                         under an override), else 0.",
                MetricType::Gauge,
            ),
            all,
            |s, e| e.encode_gauge(&i64::from(s.active)),
        ),
        1 => scaler_family(
            encoder,
            scalers,
            (
                "scaler_next_transition_timestamp_seconds",
                "When the Scaler's next transition is due, in Unix seconds; absent while \
                         suspended or with none ahead.",
                MetricType::Gauge,
            ),
            |s| s.next_transition.is_some(),
            |s, e| e.encode_gauge(&s.next_transition.unwrap_or_default()),
        ),
        2 => scaler_family(
            encoder,
            scalers,
            (
                "scaler_transitions",
                "Scheduled transitions the Scaler applied to its targets.",
                MetricType::Counter,
            ),
            all,
            |s, e| e.encode_counter::<NoLabelSet, _, u64>(&s.transitions(), None),
        ),
        3 => scaler_family(
            encoder,
            scalers,
            (
                "scaler_transition_lateness_seconds",
                "How long after its boundary each applied transition had its targets written, \
                         as seen when the Scaler's status recorded it.",
                MetricType::Histogram,
            ),
            all,
            |s, e| {
                let mut buckets = [(f64::INFINITY, 0); LATENESS_BUCKETS.len() + 1];
                for (i, (bound, count)) in buckets.iter_mut().enumerate() {
                    *bound = LATENESS_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY);
                    *count = u64::from(s.lateness[i]);
                }
                e.encode_histogram::<NoLabelSet>(s.lateness_sum, s.transitions(), &buckets, None)
            },
        ),
        4 => scaler_family(
            encoder,
            scalers,
            (
                "scaler_targets_in_error",
                "The Scaler's targets whose last change failed.",
                MetricType::Gauge,
            ),
            all,
            |s, e| e.encode_gauge(&i64::from(s.targets_in_error)),
        ),
        5 => scaler_family(
            encoder,
            scalers,
            (
                "scaler_replicas_held_below_original",
                "Replicas the Scaler holds its targets below their recorded original: the sum \
                         of original minus current over targets below it.",
                MetricType::Gauge,
            ),
            all,
            |s, e| e.encode_gauge(&s.held_below_original),
        ),
        6 => target_family(
            encoder,
            scalers,
            "scaler_target_desired_replicas",
            "The replicas the Scaler wants a target to have now.",
            |t| t.desired,
        ),
        7 => target_family(
            encoder,
            scalers,
            "scaler_target_replicas",
            "A target's replicas as the Scaler last saw or set them.",
            |t| t.current,
        ),
        8 => saving_family(
            encoder,
            scalers,
            (
                "scaler_saving_pods",
                "Pods the Scaler's targets do not run now because of it: replicas taken away \
                         (for a dry run, potential=\"true\", those it would take away).",
                MetricType::Gauge,
            ),
            |s, e| e.encode_gauge(&s.now.pods),
        ),
        9 => saving_family(
            encoder,
            scalers,
            (
                "scaler_saving_cpu_cores",
                "The CPU those pods request, in cores.",
                MetricType::Gauge,
            ),
            |s, e| e.encode_gauge(&(s.now.cpu_millicores as f64 / 1000.0)),
        ),
        10 => saving_family(
            encoder,
            scalers,
            (
                "scaler_saving_memory_bytes",
                "The memory those pods request, in bytes.",
                MetricType::Gauge,
            ),
            |s, e| e.encode_gauge(&s.now.memory_bytes),
        ),
        11 => saving_family(
            encoder,
            scalers,
            (
                "scaler_saved_pod_seconds",
                "Pod-seconds the Scaler's targets did not run because of it, since \
                         status.savings.since.",
                MetricType::Counter,
            ),
            |s, e| {
                let v = saved_seconds(s, |t| t.pod_hours);
                e.encode_counter::<NoLabelSet, _, u64>(&v, None)
            },
        ),
        12 => saving_family(
            encoder,
            scalers,
            (
                "scaler_saved_cpu_core_seconds",
                "CPU requests not run because of the Scaler, in core-seconds.",
                MetricType::Counter,
            ),
            |s, e| {
                let v = saved_seconds(s, |t| t.cpu_core_hours);
                e.encode_counter::<NoLabelSet, _, u64>(&v, None)
            },
        ),
        13 => saving_family(
            encoder,
            scalers,
            (
                "scaler_saved_memory_byte_seconds",
                "Memory requests not run because of the Scaler, in byte-seconds.",
                MetricType::Counter,
            ),
            |s, e| {
                let v = saved_seconds(s, |t| t.memory_gib_hours) * f64::from(1u32 << 30);
                e.encode_counter::<NoLabelSet, _, u64>(&v, None)
            },
        ),
        _ => Ok(()),
    }
}

/// A range of a scrape's Scalers, written as one of their families.
struct Part {
    scalers: Arc<Vec<(Box<str>, ScalerSeries)>>,
    range: std::ops::Range<usize>,
    family: usize,
}

impl fmt::Debug for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Part")
            .field("range", &self.range)
            .field("family", &self.family)
            .finish()
    }
}

impl Collector for Part {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let scalers = self.scalers.get(self.range.clone()).unwrap_or_default();
        family(&mut encoder, scalers, self.family)
    }
}

/// The Scalers' series of one scrape, family after family, each in parts of `per` Scalers:
/// the text of each part is made as the one before is sent, so that the exposition of a fleet
/// is never held whole. A family's HELP and TYPE lines come with its first part that has series.
pub struct Parts {
    scalers: Arc<Vec<(Box<str>, ScalerSeries)>>,
    per: usize,
    family: usize,
    from: usize,
    /// Whether the current family's HELP and TYPE lines were written.
    headed: bool,
}

impl Parts {
    fn part(&self, range: std::ops::Range<usize>) -> Result<String, fmt::Error> {
        let mut registry = Registry::with_prefix(PREFIX);
        registry.register_collector(Box::new(Part {
            scalers: Arc::clone(&self.scalers),
            range,
            family: self.family,
        }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode_registry(&mut text, &registry)?;
        Ok(text)
    }
}

impl Iterator for Parts {
    type Item = Result<String, fmt::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.family < FAMILIES {
            let to = (self.from + self.per).min(self.scalers.len());
            let text = match self.part(self.from..to) {
                Ok(text) => text,
                Err(e) => return Some(Err(e)),
            };
            let headed = self.headed;
            if to >= self.scalers.len() {
                (self.family, self.from, self.headed) = (self.family + 1, 0, false);
            } else {
                (self.from, self.headed) = (to, headed || !text.is_empty());
            }
            match (text.is_empty(), headed) {
                (true, _) => continue,
                (false, false) => return Some(Ok(text)),
                (false, true) => {
                    let samples = text.split_inclusive('\n').filter(|l| !l.starts_with("# "));
                    return Some(Ok(samples.collect()));
                }
            }
        }
        None
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

    /// Active after the transition at `boundary`, the next one at 17:00 that day.
    fn applied(boundary: DateTime<Utc>) -> ScalerStatus {
        ScalerStatus {
            active: Some(true),
            last_transition: Some(time(boundary)),
            next_transitions: vec![Transition {
                time: time(at("2026-03-02T17:00:00Z")),
                replicas: None,
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

    fn named(namespace: &str, name: &str) -> Scaler {
        let mut s = scaler(json!({}));
        s.metadata.namespace = Some(namespace.into());
        s.metadata.name = Some(name.into());
        s
    }

    /// The Scaler lines of `text` (descriptors and samples), sorted: a family's series come in
    /// no particular order.
    fn scaler_lines(text: &str) -> Vec<&str> {
        let mut lines: Vec<_> = text
            .lines()
            .filter(|l| l.contains("kubesteer_scaler_"))
            .collect();
        lines.sort_unstable();
        lines
    }

    /// What the families this replaced (one prometheus-client `Family` per metric) wrote for
    /// `several_scalers`, sorted, and the savings families since.
    const FAMILIES_WROTE: &str = r#"# HELP kubesteer_scaler_active 1 while the Scaler scales its targets (inside a window, after a cron firing, or under an override), else 0.
# HELP kubesteer_scaler_next_transition_timestamp_seconds When the Scaler's next transition is due, in Unix seconds; absent while suspended or with none ahead.
# HELP kubesteer_scaler_replicas_held_below_original Replicas the Scaler holds its targets below their recorded original: the sum of original minus current over targets below it.
# HELP kubesteer_scaler_saved_cpu_core_seconds CPU requests not run because of the Scaler, in core-seconds.
# HELP kubesteer_scaler_saved_memory_byte_seconds Memory requests not run because of the Scaler, in byte-seconds.
# HELP kubesteer_scaler_saved_pod_seconds Pod-seconds the Scaler's targets did not run because of it, since status.savings.since.
# HELP kubesteer_scaler_saving_cpu_cores The CPU those pods request, in cores.
# HELP kubesteer_scaler_saving_memory_bytes The memory those pods request, in bytes.
# HELP kubesteer_scaler_saving_pods Pods the Scaler's targets do not run now because of it: replicas taken away (for a dry run, potential="true", those it would take away).
# HELP kubesteer_scaler_target_desired_replicas The replicas the Scaler wants a target to have now.
# HELP kubesteer_scaler_target_replicas A target's replicas as the Scaler last saw or set them.
# HELP kubesteer_scaler_targets_in_error The Scaler's targets whose last change failed.
# HELP kubesteer_scaler_transition_lateness_seconds How long after its boundary each applied transition had its targets written, as seen when the Scaler's status recorded it.
# HELP kubesteer_scaler_transitions Scheduled transitions the Scaler applied to its targets.
# TYPE kubesteer_scaler_active gauge
# TYPE kubesteer_scaler_next_transition_timestamp_seconds gauge
# TYPE kubesteer_scaler_replicas_held_below_original gauge
# TYPE kubesteer_scaler_saved_cpu_core_seconds counter
# TYPE kubesteer_scaler_saved_memory_byte_seconds counter
# TYPE kubesteer_scaler_saved_pod_seconds counter
# TYPE kubesteer_scaler_saving_cpu_cores gauge
# TYPE kubesteer_scaler_saving_memory_bytes gauge
# TYPE kubesteer_scaler_saving_pods gauge
# TYPE kubesteer_scaler_target_desired_replicas gauge
# TYPE kubesteer_scaler_target_replicas gauge
# TYPE kubesteer_scaler_targets_in_error gauge
# TYPE kubesteer_scaler_transition_lateness_seconds histogram
# TYPE kubesteer_scaler_transitions counter
kubesteer_scaler_active{namespace="ops",scaler="late"} 1
kubesteer_scaler_active{namespace="ops",scaler="quiet"} 0
kubesteer_scaler_active{namespace="team",scaler="nightly"} 1
kubesteer_scaler_next_transition_timestamp_seconds{namespace="ops",scaler="late"} 1772470800
kubesteer_scaler_next_transition_timestamp_seconds{namespace="team",scaler="nightly"} 1772470800
kubesteer_scaler_replicas_held_below_original{namespace="ops",scaler="late"} 3
kubesteer_scaler_replicas_held_below_original{namespace="ops",scaler="quiet"} 0
kubesteer_scaler_replicas_held_below_original{namespace="team",scaler="nightly"} 3
kubesteer_scaler_saved_cpu_core_seconds_total{namespace="ops",scaler="late",potential="false"} 900.0
kubesteer_scaler_saved_cpu_core_seconds_total{namespace="team",scaler="nightly",potential="false"} 900.0
kubesteer_scaler_saved_memory_byte_seconds_total{namespace="ops",scaler="late",potential="false"} 1932735283200.0
kubesteer_scaler_saved_memory_byte_seconds_total{namespace="team",scaler="nightly",potential="false"} 1932735283200.0
kubesteer_scaler_saved_pod_seconds_total{namespace="ops",scaler="late",potential="false"} 9000.0
kubesteer_scaler_saved_pod_seconds_total{namespace="team",scaler="nightly",potential="false"} 9000.0
kubesteer_scaler_saving_cpu_cores{namespace="ops",scaler="late",potential="false"} 0.0
kubesteer_scaler_saving_cpu_cores{namespace="team",scaler="nightly",potential="false"} 0.0
kubesteer_scaler_saving_memory_bytes{namespace="ops",scaler="late",potential="false"} 0
kubesteer_scaler_saving_memory_bytes{namespace="team",scaler="nightly",potential="false"} 0
kubesteer_scaler_saving_pods{namespace="ops",scaler="late",potential="false"} 0
kubesteer_scaler_saving_pods{namespace="team",scaler="nightly",potential="false"} 0
kubesteer_scaler_target_desired_replicas{namespace="ops",scaler="late",target_kind="Deployment",target_namespace="team",target_name="api"} 0
kubesteer_scaler_target_desired_replicas{namespace="ops",scaler="late",target_kind="Deployment",target_namespace="team",target_name="dup"} 0
kubesteer_scaler_target_desired_replicas{namespace="ops",scaler="late",target_kind="Deployment",target_namespace="team",target_name="none"} 0
kubesteer_scaler_target_desired_replicas{namespace="ops",scaler="late",target_kind="Deployment",target_namespace="team",target_name="web"} 0
kubesteer_scaler_target_desired_replicas{namespace="team",scaler="nightly",target_kind="Deployment",target_namespace="team",target_name="api"} 1
kubesteer_scaler_target_desired_replicas{namespace="team",scaler="nightly",target_kind="Deployment",target_namespace="team",target_name="dup"} 2
kubesteer_scaler_target_desired_replicas{namespace="team",scaler="nightly",target_kind="Deployment",target_namespace="team",target_name="web"} 3
kubesteer_scaler_target_replicas{namespace="ops",scaler="late",target_kind="Deployment",target_namespace="team",target_name="api"} 2
kubesteer_scaler_target_replicas{namespace="ops",scaler="late",target_kind="Deployment",target_namespace="team",target_name="web"} 0
kubesteer_scaler_target_replicas{namespace="team",scaler="nightly",target_kind="Deployment",target_namespace="team",target_name="api"} 2
kubesteer_scaler_target_replicas{namespace="team",scaler="nightly",target_kind="Deployment",target_namespace="team",target_name="web"} 0
kubesteer_scaler_targets_in_error{namespace="ops",scaler="late"} 1
kubesteer_scaler_targets_in_error{namespace="ops",scaler="quiet"} 0
kubesteer_scaler_targets_in_error{namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="+Inf",namespace="ops",scaler="late"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="+Inf",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="+Inf",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.1",namespace="ops",scaler="late"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.1",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.1",namespace="team",scaler="nightly"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.25",namespace="ops",scaler="late"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.25",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.25",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.5",namespace="ops",scaler="late"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.5",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.5",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="1.0",namespace="ops",scaler="late"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="1.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="1.0",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="10.0",namespace="ops",scaler="late"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="10.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="10.0",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="2.5",namespace="ops",scaler="late"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="2.5",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="2.5",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="30.0",namespace="ops",scaler="late"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="30.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="30.0",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="300.0",namespace="ops",scaler="late"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="300.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="300.0",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="5.0",namespace="ops",scaler="late"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="5.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="5.0",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="60.0",namespace="ops",scaler="late"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="60.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="60.0",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="900.0",namespace="ops",scaler="late"} 1
kubesteer_scaler_transition_lateness_seconds_bucket{le="900.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="900.0",namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_count{namespace="ops",scaler="late"} 1
kubesteer_scaler_transition_lateness_seconds_count{namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_count{namespace="team",scaler="nightly"} 1
kubesteer_scaler_transition_lateness_seconds_sum{namespace="ops",scaler="late"} 45.0
kubesteer_scaler_transition_lateness_seconds_sum{namespace="ops",scaler="quiet"} 0.0
kubesteer_scaler_transition_lateness_seconds_sum{namespace="team",scaler="nightly"} 0.12
kubesteer_scaler_transitions_total{namespace="ops",scaler="late"} 1
kubesteer_scaler_transitions_total{namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transitions_total{namespace="team",scaler="nightly"} 1"#;

    /// Three Scalers left of four: one with every kind of target (dropped, in error, with no
    /// replicas, two entries with the same labels), one with nothing ahead and no targets, and
    /// one late by 45 s.
    fn several_scalers(metrics: &Metrics) {
        let boundary = at("2026-03-02T09:00:00Z");
        let previous = coming(boundary);
        let with_old = ScalerStatus {
            targets: vec![
                target("web", Some(0), Some(3)),
                TargetStatus {
                    kind: "StatefulSet".into(),
                    ..target("old", Some(1), None)
                },
                TargetStatus {
                    error: Some("denied".into()),
                    ..target("api", Some(2), Some(1))
                },
                target("none", None, None),
                TargetStatus {
                    api_version: "apps.example/v1".into(),
                    ..target("dup", Some(4), None)
                },
                target("dup", None, Some(2)),
            ],
            ..applied(boundary)
        };
        let nightly = named("team", "nightly");
        let written = at("2026-03-02T09:00:00.120Z");
        metrics
            .scalers()
            .observed(&nightly, &previous, &with_old, None, written);
        let mut status = with_old.clone();
        status.targets.remove(1);
        // Savings with no rate now: the totals a scrape shows whenever it runs.
        status.savings = Some(Savings {
            potential: false,
            since: time(boundary),
            counted_to: time(boundary),
            now: Default::default(),
            total: Saved {
                pod_hours: 2.5,
                cpu_core_hours: 0.25,
                memory_gib_hours: 0.5,
            },
            days: Vec::new(),
        });
        let later = at("2026-03-02T09:00:05Z");
        metrics
            .scalers()
            .observed(&nightly, &with_old, &status, None, later);
        let none = ScalerStatus::default();
        metrics
            .scalers()
            .observed(&named("ops", "quiet"), &none, &none, Some(1), later);
        let late = at("2026-03-02T09:00:45Z");
        metrics
            .scalers()
            .observed(&named("ops", "gone"), &previous, &status, Some(0), late);
        metrics
            .scalers()
            .observed(&named("ops", "late"), &previous, &status, Some(0), late);
        metrics.scalers().deleted("ops", "gone");
    }

    #[test]
    fn the_exposition_is_what_the_families_wrote() {
        let metrics = Metrics::default();
        several_scalers(&metrics);
        let text = metrics.encode().unwrap();
        let expected: Vec<_> = FAMILIES_WROTE.lines().collect();
        assert_eq!(scaler_lines(&text), expected, "{text}");
    }

    #[test]
    fn the_series_in_parts_of_one_scaler_are_the_series_in_one_part() {
        let metrics = Metrics::default();
        several_scalers(&metrics);
        let whole: String = metrics
            .scalers()
            .parts_of(PART)
            .map(Result::unwrap)
            .collect();
        let parts: Vec<String> = metrics.scalers().parts_of(1).map(Result::unwrap).collect();
        assert_eq!(parts.concat(), whole);
        // More parts than families, some empty ("quiet" has no next transition): each family's
        // HELP and TYPE come once, in its first part with series.
        assert!(parts.len() > FAMILIES, "{parts:?}");
        assert_eq!(whole.matches("# TYPE ").count(), FAMILIES);
        assert!(parts.iter().all(|p| p.ends_with('\n')), "{parts:?}");
    }

    #[test]
    fn one_scaler_with_nothing_ahead_and_no_targets_has_no_such_families() {
        let metrics = Metrics::default();
        let none = ScalerStatus::default();
        let now = at("2026-03-02T09:00:05Z");
        metrics
            .scalers()
            .observed(&named("ops", "quiet"), &none, &none, Some(1), now);
        let text = metrics.encode().unwrap();
        // One series per family: the order is the families' own, as they wrote it.
        let lines: Vec<_> = text
            .lines()
            .filter(|l| l.contains("kubesteer_scaler_"))
            .collect();
        assert_eq!(lines, QUIET.lines().collect::<Vec<_>>(), "{text}");
    }

    const QUIET: &str = r#"# HELP kubesteer_scaler_active 1 while the Scaler scales its targets (inside a window, after a cron firing, or under an override), else 0.
# TYPE kubesteer_scaler_active gauge
kubesteer_scaler_active{namespace="ops",scaler="quiet"} 0
# HELP kubesteer_scaler_transitions Scheduled transitions the Scaler applied to its targets.
# TYPE kubesteer_scaler_transitions counter
kubesteer_scaler_transitions_total{namespace="ops",scaler="quiet"} 0
# HELP kubesteer_scaler_transition_lateness_seconds How long after its boundary each applied transition had its targets written, as seen when the Scaler's status recorded it.
# TYPE kubesteer_scaler_transition_lateness_seconds histogram
kubesteer_scaler_transition_lateness_seconds_sum{namespace="ops",scaler="quiet"} 0.0
kubesteer_scaler_transition_lateness_seconds_count{namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.1",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.25",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="0.5",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="1.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="2.5",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="5.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="10.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="30.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="60.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="300.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="900.0",namespace="ops",scaler="quiet"} 0
kubesteer_scaler_transition_lateness_seconds_bucket{le="+Inf",namespace="ops",scaler="quiet"} 0
# HELP kubesteer_scaler_targets_in_error The Scaler's targets whose last change failed.
# TYPE kubesteer_scaler_targets_in_error gauge
kubesteer_scaler_targets_in_error{namespace="ops",scaler="quiet"} 0
# HELP kubesteer_scaler_replicas_held_below_original Replicas the Scaler holds its targets below their recorded original: the sum of original minus current over targets below it.
# TYPE kubesteer_scaler_replicas_held_below_original gauge
kubesteer_scaler_replicas_held_below_original{namespace="ops",scaler="quiet"} 0"#;

    #[test]
    fn only_the_targets_a_status_lists_have_series() {
        let metrics = Metrics::default();
        let status = ScalerStatus {
            targets: (0..MAX_STATUS_TARGETS + 5)
                .map(|i| target(&format!("t{i}"), Some(1), None))
                .collect(),
            ..ScalerStatus::default()
        };
        let now = at("2026-03-02T10:00:00Z");
        metrics
            .scalers()
            .observed(&scaler(json!({})), &status, &status, None, now);
        let text = metrics.encode().unwrap();
        let count = |prefix: &str| samples(&text, prefix).len();
        assert_eq!(
            count("kubesteer_scaler_target_replicas{"),
            MAX_STATUS_TARGETS
        );
        assert_eq!(
            count("kubesteer_scaler_target_desired_replicas{"),
            MAX_STATUS_TARGETS
        );
    }

    #[test]
    fn a_transition_is_counted_once_with_its_lateness_and_targets_are_reported() {
        let metrics = Metrics::default();
        let s = scaler(json!({}));
        let boundary = at("2026-03-02T09:00:00Z");
        let previous = coming(boundary);
        let status = ScalerStatus {
            targets: vec![
                target("web", Some(0), Some(3)),
                TargetStatus {
                    error: Some("denied".into()),
                    ..target("api", Some(2), Some(1))
                },
            ],
            ..applied(boundary)
        };
        let written = at("2026-03-02T09:00:00.120Z");
        metrics
            .scalers()
            .observed(&s, &previous, &status, Some(0), written);
        // The next reconcile sees the same transition as the last: not counted again.
        metrics
            .scalers()
            .observed(&s, &status, &status, Some(0), at("2026-03-02T09:05:00Z"));
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
        metrics
            .scalers()
            .observed(&s, &ScalerStatus::default(), &two, Some(0), now);
        let one = ScalerStatus {
            targets: vec![target("web", Some(0), Some(3))],
            ..two.clone()
        };
        metrics.scalers().observed(&s, &two, &one, Some(0), now);
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

        metrics.scalers().deleted("team", "nightly");
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
        metrics
            .scalers()
            .observed(&scaler(json!({})), &status, &status, Some(0), now);
        metrics.set_leading(false);
        let text = metrics.encode().unwrap();
        // No series, so no family either (not even its HELP and TYPE lines).
        assert!(!text.contains("kubesteer_scaler_"), "{text}");
        assert!(text.contains("kubesteer_leading 0"), "{text}");
    }
}
