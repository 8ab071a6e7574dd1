//! The webhook's permission checks alone (`kubesteer_webhook::permissions::Permissions`), in
//! process: `tasks` tasks each make `checks` checks, most from a hot set of questions (users x
//! permissions, one in eight denied) and the rest each asked once, against a fake cluster that
//! answers a SubjectAccessReview after `sar_ms` and counts them. Each scenario (a grant TTL) is
//! run `rounds` times on a fresh cache; the figures of each round and their medians. The bound
//! on SubjectAccessReviews is set far above what the run sends, so it is in the path but never
//! waits or refuses.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use k8s_openapi::api::authentication::v1::UserInfo;
use kubesteer_api::access::Access;
use kubesteer_runtime::scale::Mapping;
use kubesteer_webhook::cluster::Cluster;
use kubesteer_webhook::permissions::{Permissions, SarLimit, CAPACITY};
use serde_json::{json, Value};

pub struct Options {
    pub tasks: usize,
    pub checks: usize,
    pub sar: Duration,
    /// Users in the hot set; each asks `HOT_PERMISSIONS` questions.
    pub hot_users: usize,
    /// The share of checks, in percent, that ask a question nobody asked before.
    pub distinct_percent: u64,
    pub rounds: usize,
    pub ttls: Vec<Duration>,
    pub label: String,
    /// The webhook's bound on SubjectAccessReviews (its token bucket at the defaults) instead
    /// of one far above what the run sends.
    pub sar_limit: bool,
}

/// Questions per hot user; the last is denied.
const HOT_PERMISSIONS: usize = 8;

/// Answers after `delay`, denying in namespace "prod", and counts what it was asked.
struct Answering {
    delay: Duration,
    sars: AtomicU64,
}

impl Cluster for Answering {
    async fn permitted(&self, _: &UserInfo, access: &Access) -> Result<bool, String> {
        self.sars.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.delay).await;
        Ok(access.namespace != "prod")
    }
    async fn resolve(&self, _: &str, _: &str) -> Result<Mapping, String> {
        Err("not asked".into())
    }
}

/// splitmix64: the same questions in the same order in every run, without a dependency.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn user(name: String) -> UserInfo {
    UserInfo {
        username: Some(name),
        groups: Some(vec!["system:authenticated".into()]),
        ..Default::default()
    }
}

/// Resident memory of this process, in KiB.
fn rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|l| l.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// One round on a fresh cache with grants kept for `ttl`.
async fn round(o: &Options, ttl: Duration) -> Result<Value> {
    let mut permissions = Permissions::new(ttl, CAPACITY);
    permissions.set_limit(if o.sar_limit {
        SarLimit::default()
    } else {
        SarLimit {
            per_second: 1_000_000,
            burst: 1_000_000,
        }
    });
    let permissions = Arc::new(permissions);
    let cluster = Arc::new(Answering {
        delay: o.sar,
        sars: AtomicU64::new(0),
    });
    let rss_before = rss_kib()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..o.tasks {
        let (permissions, cluster) = (permissions.clone(), cluster.clone());
        let (checks, hot_users, distinct) = (o.checks, o.hot_users, o.distinct_percent);
        tasks.push(tokio::spawn(async move {
            let mut seed = task as u64;
            let mut took = Vec::with_capacity(checks);
            let mut answers = [0u64; 3];
            for i in 0..checks {
                let r = next(&mut seed);
                let (who, access) = if r % 100 < distinct {
                    (
                        user(format!("once-{task}")),
                        Access::scale_deployment("team", &format!("once-{task}-{i}")),
                    )
                } else {
                    let q = (r >> 8) as usize % (hot_users * HOT_PERMISSIONS);
                    let (u, p) = (q / HOT_PERMISSIONS, q % HOT_PERMISSIONS);
                    let namespace = if p == HOT_PERMISSIONS - 1 {
                        "prod"
                    } else {
                        "team"
                    };
                    (
                        user(format!("user-{u}")),
                        Access::scale_deployment(namespace, &format!("app-{p}")),
                    )
                };
                let at = Instant::now();
                let answer = permissions.check(&*cluster, &who, &access).await;
                took.push(at.elapsed().as_nanos() as u64);
                answers[match answer {
                    Ok(true) => 0,
                    Ok(false) => 1,
                    Err(_) => 2,
                }] += 1;
            }
            (took, answers)
        }));
    }
    let mut took = Vec::with_capacity(o.tasks * o.checks);
    let mut answers = [0u64; 3];
    for task in tasks {
        let (t, a) = task.await?;
        took.extend(t);
        for (sum, n) in answers.iter_mut().zip(a) {
            *sum += n;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let rss_after = rss_kib()?;
    took.sort_unstable();
    Ok(json!({
        "checks": took.len(),
        "seconds": seconds,
        "checks_per_second": took.len() as f64 / seconds,
        "p50_us": percentile(&took, 0.50),
        "p99_us": percentile(&took, 0.99),
        "max_us": percentile(&took, 1.0),
        "sars_sent": cluster.sars.load(Ordering::Relaxed),
        "sars_per_second": cluster.sars.load(Ordering::Relaxed) as f64 / seconds,
        "granted": answers[0],
        "denied": answers[1],
        "errors": answers[2],
        "rss_kib_before": rss_before,
        "rss_kib_after": rss_after,
    }))
}

fn median(rounds: &[Value], field: &str) -> f64 {
    let mut v: Vec<f64> = rounds.iter().filter_map(|r| r[field].as_f64()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub async fn run(o: &Options) -> Result<Value> {
    let mut scenarios = serde_json::Map::new();
    for &ttl in &o.ttls {
        let mut rounds = Vec::new();
        for _ in 0..o.rounds {
            rounds.push(round(o, ttl).await?);
        }
        let medians: serde_json::Map<String, Value> = [
            "checks_per_second",
            "p50_us",
            "p99_us",
            "max_us",
            "sars_sent",
            "sars_per_second",
            "errors",
            "rss_kib_after",
        ]
        .into_iter()
        .map(|f| (f.to_string(), json!(median(&rounds, f))))
        .collect();
        scenarios.insert(
            format!("ttl_{}ms", ttl.as_millis()),
            json!({"median": medians, "rounds": rounds}),
        );
    }
    Ok(json!({
        "label": o.label,
        "options": {
            "tasks": o.tasks,
            "checks_per_task": o.checks,
            "sar_ms": o.sar.as_secs_f64() * 1000.0,
            "hot_questions": o.hot_users * HOT_PERMISSIONS,
            "hot_denied_share": 1.0 / HOT_PERMISSIONS as f64,
            "distinct_percent": o.distinct_percent,
            "capacity": CAPACITY,
            "sar_limit": if o.sar_limit { json!({"per_second": SarLimit::default().per_second, "burst": SarLimit::default().burst}) } else { Value::Null },
            "rounds": o.rounds,
            "worker_threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        },
        "scenarios": scenarios,
    }))
}
