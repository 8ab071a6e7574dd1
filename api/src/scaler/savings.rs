//! Savings: the pods, CPU and memory a Scaler's targets did not run because of it, as
//! GoKubeDownscaler exports them, kept in the Scaler's status (`status.savings`) and shown by
//! the controller's metrics and the plugin's `savings`.
//!
//! A target's saving now is the replicas the Scaler took away (its recorded original replicas
//! minus the replicas it has; for a dry run, its replicas minus those it would set) times its pod
//! template's requests, as the scheduler counts them. The status keeps that rate with the time it
//! was counted to; what it saved since is the rate times the time passed. So the status is
//! written only when the rate changes, and a reader adds the time since ([`Savings::at`]). The
//! amounts are kept in total and per day of the Scaler's time zone, for [`DAYS_KEPT`] days.
//!
//! Counted: the apps/v1 workloads (Deployment, StatefulSet, ReplicaSet) with their requests, and
//! any other kind with `/scale` as pods only (its pod template is not known). Not counted:
//! CronJobs, Jobs, DaemonSets and kinds put to sleep by a declared patch (their pods are not a
//! number of replicas), and targets whose replicas an HPA or KEDA sets.
use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::common::{from_time, to_time};
use crate::rules::MAX_EXACT;

/// How many days (of the Scaler's time zone, today included) `status.savings.days` keeps.
pub const DAYS_KEPT: usize = 31;
/// The amounts are kept to this fraction of an hour (3.6 ms), so a status reads cleanly.
const PRECISION: f64 = 1e-6;
const SECONDS_PER_HOUR: f64 = 3600.0;
const GIB: f64 = (1u64 << 30) as f64;

/// What a Scaler saves, kept in its status.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Savings {
    /// True for a dry run: what the Scaler would save if it wrote its changes. Counting starts
    /// over when dryRun is switched.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub potential: bool,
    /// When counting began: the first time the Scaler took replicas away (or would have).
    pub since: Time,
    /// The time total and days are counted to; from then on, now's rate adds up.
    pub counted_to: Time,
    /// What the Scaler's targets do not run now.
    pub now: Rate,
    /// Everything saved from since to countedTo.
    pub total: Saved,
    /// The amounts per day of the Scaler's time zone, oldest first, the last 31 days at most.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = DAYS_KEPT))]
    pub days: Vec<DaySaved>,
}

/// What is not run at one moment.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct Rate {
    /// Pods not running.
    #[schemars(range(min = 0, max = MAX_EXACT))]
    pub pods: i64,
    /// Their CPU requests, in millicores.
    #[schemars(range(min = 0, max = MAX_EXACT))]
    pub cpu_millicores: i64,
    /// Their memory requests, in bytes.
    #[schemars(range(min = 0, max = MAX_EXACT))]
    pub memory_bytes: i64,
}

/// Amounts not run over some time.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct Saved {
    /// Pod-hours not run.
    pub pod_hours: f64,
    /// CPU requested by those pods, in core-hours.
    pub cpu_core_hours: f64,
    /// Memory requested by those pods, in GiB-hours.
    #[serde(rename = "memoryGiBHours")]
    pub memory_gib_hours: f64,
}

/// The amounts of one day.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaySaved {
    /// The day, YYYY-MM-DD, in the Scaler's time zone.
    #[schemars(length(min = 10, max = 10))]
    pub date: String,
    #[serde(flatten)]
    pub saved: Saved,
}

/// One pod's requests, as the scheduler counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodRequests {
    pub cpu_millicores: u64,
    pub memory_bytes: u64,
}

impl Rate {
    /// `pods` pods of `requests` (pods only when the requests are not known).
    pub fn of(pods: i32, requests: Option<PodRequests>) -> Self {
        let pods = i64::from(pods.max(0));
        let requests = requests.unwrap_or_default();
        let times = |v: u64| {
            i64::try_from(v)
                .unwrap_or(MAX_EXACT)
                .saturating_mul(pods)
                .min(MAX_EXACT)
        };
        Self {
            pods,
            cpu_millicores: times(requests.cpu_millicores),
            memory_bytes: times(requests.memory_bytes),
        }
    }

    /// What a target does not run: `taken` replicas of its pods.
    pub fn taken(without: i32, with: i32, requests: Option<PodRequests>) -> Self {
        Self::of(without.saturating_sub(with), requests)
    }

    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }

    /// This rate kept for `seconds`.
    fn over(&self, seconds: f64) -> Saved {
        let hours = seconds / SECONDS_PER_HOUR;
        Saved {
            pod_hours: self.pods as f64 * hours,
            cpu_core_hours: self.cpu_millicores as f64 / 1000.0 * hours,
            memory_gib_hours: self.memory_bytes as f64 / GIB * hours,
        }
    }
}

impl std::ops::Add for Rate {
    type Output = Rate;
    fn add(self, other: Rate) -> Rate {
        let add = |a: i64, b: i64| a.saturating_add(b).min(MAX_EXACT);
        Rate {
            pods: add(self.pods, other.pods),
            cpu_millicores: add(self.cpu_millicores, other.cpu_millicores),
            memory_bytes: add(self.memory_bytes, other.memory_bytes),
        }
    }
}

impl std::iter::Sum for Rate {
    fn sum<I: Iterator<Item = Rate>>(iter: I) -> Rate {
        iter.fold(Rate::default(), |a, b| a + b)
    }
}

impl std::ops::Add for Saved {
    type Output = Saved;
    fn add(self, other: Saved) -> Saved {
        Saved {
            pod_hours: self.pod_hours + other.pod_hours,
            cpu_core_hours: self.cpu_core_hours + other.cpu_core_hours,
            memory_gib_hours: self.memory_gib_hours + other.memory_gib_hours,
        }
    }
}

impl std::iter::Sum for Saved {
    fn sum<I: Iterator<Item = Saved>>(iter: I) -> Saved {
        iter.fold(Saved::default(), |a, b| a + b)
    }
}

impl Saved {
    fn rounded(self) -> Saved {
        let round = |v: f64| (v / PRECISION).round() * PRECISION;
        Saved {
            pod_hours: round(self.pod_hours),
            cpu_core_hours: round(self.cpu_core_hours),
            memory_gib_hours: round(self.memory_gib_hours),
        }
    }
}

impl Savings {
    /// What the status says after a pass that found the targets not running `rate`, at `now`:
    /// the previous savings unchanged while the rate is the same (no status write), counted to
    /// now with the new rate when it changed, started over when dryRun was switched; None
    /// before anything was ever taken away.
    pub fn next(
        previous: Option<&Savings>,
        rate: Rate,
        potential: bool,
        now: DateTime<Utc>,
        tz: Tz,
    ) -> Option<Savings> {
        match previous.filter(|p| p.potential == potential) {
            Some(p) if p.now == rate => Some(p.clone()),
            Some(p) => Some(Savings {
                now: rate,
                ..p.at(now, tz)
            }),
            None if rate.is_zero() => None,
            None => Some(Savings {
                potential,
                since: to_time(now),
                counted_to: to_time(now),
                now: rate,
                total: Saved::default(),
                days: Vec::new(),
            }),
        }
    }

    /// These savings counted to `now` (no earlier than countedTo): the time since at now's
    /// rate added to the total and to each day it falls on.
    pub fn at(&self, now: DateTime<Utc>, tz: Tz) -> Savings {
        let from = from_time(&self.counted_to);
        let now = now.max(from);
        let mut days: BTreeMap<String, Saved> = self
            .days
            .iter()
            .map(|d| (d.date.clone(), d.saved))
            .collect();
        let mut total = self.total;
        let mut start = from;
        while start < now {
            let day = start.with_timezone(&tz).date_naive();
            let end = next_midnight(day, tz).filter(|m| *m < now).unwrap_or(now);
            let part = self.now.over((end - start).as_seconds_f64());
            total = total + part;
            let entry = days.entry(day.format("%Y-%m-%d").to_string()).or_default();
            *entry = *entry + part;
            start = end;
        }
        let today = now.with_timezone(&tz).date_naive();
        let first = first_day(today, DAYS_KEPT);
        Savings {
            counted_to: to_time(now),
            total: total.rounded(),
            days: days
                .into_iter()
                .filter(|(date, _)| date.as_str() >= first.as_str())
                .map(|(date, saved)| DaySaved {
                    date,
                    saved: saved.rounded(),
                })
                .collect(),
            ..self.clone()
        }
    }

    /// Everything saved from since to `now` (no earlier than countedTo).
    pub fn total_at(&self, now: DateTime<Utc>) -> Saved {
        let seconds = (now - from_time(&self.counted_to))
            .as_seconds_f64()
            .max(0.0);
        self.total + self.now.over(seconds)
    }

    /// The amounts of the days from `days` days before `today` (today included), as counted.
    pub fn last_days(&self, today: NaiveDate, days: usize) -> Saved {
        let first = first_day(today, days);
        self.days
            .iter()
            .filter(|d| d.date.as_str() >= first.as_str())
            .map(|d| d.saved)
            .sum()
    }
}

/// The first of the `days` days that end with `today`, as YYYY-MM-DD.
fn first_day(today: NaiveDate, days: usize) -> String {
    let back = i64::try_from(days.saturating_sub(1)).unwrap_or(0);
    (today - Duration::days(back))
        .format("%Y-%m-%d")
        .to_string()
}

/// When the day after `day` starts in `tz` (its first instant, around a gap).
fn next_midnight(day: NaiveDate, tz: Tz) -> Option<DateTime<Utc>> {
    let next = day.succ_opt()?;
    (0..4).find_map(|h| {
        let local = next.and_hms_opt(h, 0, 0)?;
        tz.from_local_datetime(&local)
            .earliest()
            .map(|t| t.with_timezone(&Utc))
    })
}

/// The requests of one pod of the workload whose `spec` this is (`spec.template.spec`), None
/// when it has no pod template.
pub fn template_requests(spec: &Value) -> Option<PodRequests> {
    let pod = spec.get("template")?.get("spec")?;
    Some(pod_requests(pod))
}

/// A pod's requests as the scheduler counts them: its containers and sidecars (init
/// containers that keep running) added up, or its largest init container with the sidecars
/// started before it if that is more, plus the pod's overhead.
pub fn pod_requests(pod: &Value) -> PodRequests {
    let containers = |key: &str| pod.get(key).and_then(Value::as_array).into_iter().flatten();
    let mut running = PodRequests::default();
    for c in containers("containers") {
        running = running.plus(requests_of(c.pointer("/resources/requests")));
    }
    let mut sidecars = PodRequests::default();
    let mut init = PodRequests::default();
    for c in containers("initContainers") {
        let own = requests_of(c.pointer("/resources/requests"));
        if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            sidecars = sidecars.plus(own);
            init = init.max(sidecars);
        } else {
            init = init.max(sidecars.plus(own));
        }
    }
    running
        .plus(sidecars)
        .max(init)
        .plus(requests_of(pod.get("overhead")))
}

impl PodRequests {
    fn plus(self, o: PodRequests) -> PodRequests {
        PodRequests {
            cpu_millicores: self.cpu_millicores.saturating_add(o.cpu_millicores),
            memory_bytes: self.memory_bytes.saturating_add(o.memory_bytes),
        }
    }

    fn max(self, o: PodRequests) -> PodRequests {
        PodRequests {
            cpu_millicores: self.cpu_millicores.max(o.cpu_millicores),
            memory_bytes: self.memory_bytes.max(o.memory_bytes),
        }
    }
}

/// The cpu and memory of a resource list (`{cpu: 250m, memory: 64Mi}`); a quantity that cannot
/// be read counts 0 (the apiserver validated them).
fn requests_of(list: Option<&Value>) -> PodRequests {
    let amount = |key: &str, scale: f64| {
        list.and_then(|l| l.get(key))
            .and_then(Value::as_str)
            .and_then(parse_quantity)
            .map(|q| (q * scale).ceil().max(0.0) as u64)
            .unwrap_or(0)
    };
    PodRequests {
        cpu_millicores: amount("cpu", 1000.0),
        memory_bytes: amount("memory", 1.0),
    }
}

/// A Kubernetes quantity (`250m`, `64Mi`, `1.5`, `1e3`) in its base unit.
pub fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: f64 = number.parse().ok()?;
    let multiplier = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    Some(number * multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn quantities_are_read_in_their_base_unit() {
        assert_eq!(parse_quantity("250m"), Some(0.25));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("64Mi"), Some(64.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("1.5Gi"), Some(1.5 * GIB));
        assert_eq!(parse_quantity("5e3"), Some(5000.0));
        assert_eq!(parse_quantity("100M"), Some(1e8));
        assert_eq!(parse_quantity("12x"), None);
        assert_eq!(parse_quantity(""), None);
    }

    #[test]
    fn a_pods_requests_count_sidecars_init_containers_and_overhead() {
        let pod = json!({
            "containers": [
                {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                {"resources": {"requests": {"cpu": "50m"}}},
                {"resources": {}}
            ],
            "initContainers": [
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}},
                {"resources": {"requests": {"cpu": "1", "memory": "8Mi"}}}
            ],
            "overhead": {"cpu": "5m"}
        });
        // cpu: max(100 + 50 + 10, 10 + 1000) + 5; memory: max(64 + 16, 16 + 8) Mi.
        assert_eq!(
            pod_requests(&pod),
            PodRequests {
                cpu_millicores: 1015,
                memory_bytes: 80 << 20
            }
        );
        let spec = json!({"replicas": 3, "template": {"spec": pod}});
        assert_eq!(template_requests(&spec), Some(pod_requests(&pod)));
        assert_eq!(template_requests(&json!({"replicas": 3})), None);
    }

    #[test]
    fn a_rate_is_the_replicas_taken_away_times_the_requests() {
        let requests = PodRequests {
            cpu_millicores: 100,
            memory_bytes: 64 << 20,
        };
        let r = Rate::taken(3, 0, Some(requests));
        assert_eq!(
            (r.pods, r.cpu_millicores, r.memory_bytes),
            (3, 300, 192 << 20)
        );
        // Scaled up, nothing is saved; without requests, pods only.
        assert!(Rate::taken(2, 5, Some(requests)).is_zero());
        assert_eq!(Rate::taken(4, 1, None), Rate::of(3, None));
        assert_eq!(Rate::of(3, None).cpu_millicores, 0);
    }

    #[test]
    fn savings_add_up_per_day_of_the_time_zone_and_are_written_only_when_the_rate_changes() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let rate = Rate {
            pods: 2,
            cpu_millicores: 500,
            memory_bytes: 1 << 30,
        };
        assert_eq!(
            Savings::next(None, Rate::default(), false, at("2026-12-01T20:00:00Z"), tz),
            None
        );
        let started = Savings::next(None, rate, false, at("2026-12-01T20:00:00Z"), tz).unwrap();
        assert_eq!(started.total, Saved::default());
        // The same rate later: unchanged, nothing to write.
        let same = Savings::next(Some(&started), rate, false, at("2026-12-02T08:00:00Z"), tz);
        assert_eq!(same.as_ref(), Some(&started));
        // Read at 08:00 UTC the next day: 12 hours, 3 of them on Dec 1st in Berlin (21:00-24:00).
        let read = started.at(at("2026-12-02T08:00:00Z"), tz);
        assert_eq!(read.total.pod_hours, 24.0);
        assert_eq!(read.total.cpu_core_hours, 6.0);
        assert_eq!(read.total.memory_gib_hours, 12.0);
        let days: Vec<(&str, f64)> = read
            .days
            .iter()
            .map(|d| (d.date.as_str(), d.saved.pod_hours))
            .collect();
        assert_eq!(days, [("2026-12-01", 6.0), ("2026-12-02", 18.0)]);
        // The rate changes: counted to then, the new rate from then on.
        let changed = Savings::next(
            Some(&started),
            Rate::default(),
            false,
            at("2026-12-02T08:00:00Z"),
            tz,
        )
        .unwrap();
        assert_eq!(changed.total, read.total);
        assert_eq!(changed.now, Rate::default());
        assert_eq!(changed.at(at("2026-12-05T08:00:00Z"), tz).total, read.total);
        assert_eq!(
            changed
                .last_days(NaiveDate::from_ymd_opt(2026, 12, 2).unwrap(), 1)
                .pod_hours,
            18.0
        );
        assert_eq!(
            changed
                .last_days(NaiveDate::from_ymd_opt(2026, 12, 2).unwrap(), 7)
                .pod_hours,
            24.0
        );
        // dryRun switched: counting starts over.
        let potential =
            Savings::next(Some(&changed), rate, true, at("2026-12-03T08:00:00Z"), tz).unwrap();
        assert!(potential.potential);
        assert_eq!(potential.total, Saved::default());
        assert_eq!(potential.since, to_time(at("2026-12-03T08:00:00Z")));
    }

    #[test]
    fn only_the_last_days_are_kept() {
        let tz: Tz = "UTC".parse().unwrap();
        let rate = Rate::of(1, None);
        let started = Savings::next(None, rate, false, at("2026-01-01T00:00:00Z"), tz).unwrap();
        let read = started.at(at("2026-03-01T12:00:00Z"), tz);
        assert_eq!(read.days.len(), DAYS_KEPT);
        assert_eq!(read.days.last().unwrap().date, "2026-03-01");
        assert_eq!(read.days.last().unwrap().saved.pod_hours, 12.0);
        assert_eq!(read.total.pod_hours, (31 + 28) as f64 * 24.0 + 12.0);
        // Reading before countedTo counts nothing.
        assert_eq!(
            started.at(at("2025-12-31T00:00:00Z"), tz).total,
            Saved::default()
        );
    }
}
