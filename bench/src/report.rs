//! The controller benchmark's report: each phase's section of `bench/results/controller.json`,
//! assembled from the JSON files that the other subcommands wrote into the work directory, and
//! merged into the file as soon as the phase is done.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use chrono::{SecondsFormat, Utc};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A phase of `bench/scripts/controller.sh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Phase {
    Convergence,
    Memory,
    Idle,
    Lateness,
    Scale,
}

/// What the script knows about a phase beyond the files in the work directory.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The Kubernetes version of the control plane.
    pub k8s: String,
    /// Convergence runs done (`controller-<r>*.json`, `ceiling-<r>.json` for r in 1..=repeats).
    pub repeats: usize,
    /// Memcacheds of size 1 that the convergence phase left on the cluster.
    pub with_pods: u64,
    /// The idle phase's measured time.
    pub seconds: u64,
    /// Something that happened during the memory phase, to keep beside its figures.
    pub note: Option<String>,
}

/// The results file: the shared header in a fixed order, then each phase's section, then
/// whatever else it holds (kept as it is).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Results {
    #[serde(default)]
    benchmark: Value,
    #[serde(default)]
    date: Value,
    #[serde(default)]
    machine: Value,
    #[serde(default)]
    setup: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    convergence: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idle: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lateness: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scale: Option<Value>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

/// The controller process, read from /proc by `kubesteer-bench process`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Process {
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub open_fds: u64,
    /// CPU seconds (user + system) since it started.
    pub cpu_s: f64,
}

/// Reads VmRSS, VmHWM, open file descriptors and CPU time of process `pid`.
pub fn process(pid: u32) -> Result<Process> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let status = std::fs::read_to_string(proc.join("status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib = |field: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next())
            .with_context(|| format!("/proc/{pid}/status has no {field}"))?
            .parse()
            .with_context(|| format!("/proc/{pid}/status: {field}"))
    };
    let open_fds = std::fs::read_dir(proc.join("fd"))
        .with_context(|| format!("reading /proc/{pid}/fd"))?
        .count() as u64;
    let stat = std::fs::read_to_string(proc.join("stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The fields after the command, which is in parentheses and may hold spaces: state is
    // field 3, utime and stime are fields 14 and 15.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .with_context(|| format!("/proc/{pid}/stat: no command"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i - 3)
            .with_context(|| format!("/proc/{pid}/stat has no field {i}"))?
            .parse()
            .with_context(|| format!("/proc/{pid}/stat: field {i}"))
    };
    let cpu_s = (ticks(14)? + ticks(15)?) as f64 / clock_ticks();
    Ok(Process {
        rss_kib: kib("VmRSS")?,
        hwm_kib: kib("VmHWM")?,
        open_fds,
        cpu_s: round(cpu_s, 1),
    })
}

/// Clock ticks per second, as `getconf CLK_TCK` tells (100 on every Linux we run on).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The `started_at` and `converged_at` of a `kubesteer-bench converge` output, or the
/// `started_at` and `window_end` of a `touch` output.
pub fn window(converge: &Path) -> Result<(String, String)> {
    let run = load_file(converge)?;
    let at = |key: &str| -> Result<String> {
        run[key]
            .as_str()
            .map(String::from)
            .with_context(|| format!("{}: no {key}", converge.display()))
    };
    let end = if run.get("window_end").is_some() {
        "window_end"
    } else {
        "converged_at"
    };
    Ok((at("started_at")?, at(end)?))
}

fn load_file(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(xs[n / 2]),
        _ => Some((xs[n / 2 - 1] + xs[n / 2]) / 2.0),
    }
}

fn mib(kib: u64) -> f64 {
    round(kib as f64 / 1024.0, 1)
}

/// A number field of a JSON object, named in the error.
fn number(v: &Value, key: &str, from: &str) -> Result<f64> {
    v[key]
        .as_f64()
        .with_context(|| format!("{from}: {key} is not a number"))
}

struct Work {
    dir: PathBuf,
}

impl Work {
    fn load(&self, name: &str) -> Result<Value> {
        load_file(&self.dir.join(format!("{name}.json")))
    }

    fn process(&self, name: &str) -> Result<Process> {
        let path = self.dir.join(format!("{name}.json"));
        serde_json::from_value(load_file(&path)?)
            .with_context(|| format!("{}: not a process reading", path.display()))
    }

    /// `kubesteer_reconciles_total{kind="Memcached"}` in a saved /metrics text, if it is there.
    fn reconciles(&self, name: &str) -> Option<f64> {
        let text = std::fs::read_to_string(self.dir.join(name)).ok()?;
        text.lines()
            .find(|l| l.starts_with(r#"kubesteer_reconciles_total{kind="Memcached"}"#))?
            .split_whitespace()
            .last()?
            .parse::<f64>()
            .ok()
            .map(f64::trunc)
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

fn cpus() -> usize {
    let listed = std::fs::read_to_string("/proc/cpuinfo")
        .map(|info| info.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    if listed > 0 {
        listed
    } else {
        std::thread::available_parallelism().map_or(1, usize::from)
    }
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Builds `phase`'s section from the files in `work` and merges it into the results file `out`;
/// returns the section's scalar fields, for the log.
pub fn assemble(phase: Phase, work: &Path, out: &Path, facts: &Facts) -> Result<Value> {
    let mut results: Results = match std::fs::read_to_string(out) {
        Ok(text) => serde_json::from_str(&text).unwrap_or_default(),
        Err(_) => Results::default(),
    };
    let date = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, false);
    let commit = commit();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_default();
    results.benchmark = json!("controller");
    results.date = json!(date);
    results.machine = json!({
        "cpus": cpus(),
        "cpu_model": cpu_model(),
        "kernel": kernel,
        "note": "the cores are shared by the control plane, the controller, the load client and \
                 whatever else runs on the machine",
    });
    results.setup = json!({
        "control_plane": format!(
            "kwok binary runtime, Kubernetes {}, etcd without fsync, controller-manager and \
             scheduler without leader election; a fresh cluster for each convergence run and for \
             the later phases",
            facts.k8s
        ),
        "controller": "release kubesteer-controller, cluster-wide watches, no leader election, its \
                       own client certificate (user kubesteer-bench-controller)",
        "client": "kubesteer-bench (bench/), kube-rs, niced",
    });
    let work = Work {
        dir: work.to_path_buf(),
    };
    let section = match phase {
        Phase::Convergence => convergence(&work, facts, &date, &commit)?,
        Phase::Memory => memory(&work, facts, &date, &commit)?,
        Phase::Idle => idle(&work, facts, &date, &commit)?,
        Phase::Lateness => lateness(&work, &date, &commit)?,
        Phase::Scale => scale(&work, facts, &date, &commit)?,
    };
    let scalars: serde_json::Map<String, Value> = section
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_object() && !v.is_array())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    match phase {
        Phase::Convergence => results.convergence = Some(section),
        Phase::Memory => results.memory = Some(section),
        Phase::Idle => results.idle = Some(section),
        Phase::Lateness => results.lateness = Some(section),
        Phase::Scale => results.scale = Some(section),
    }
    let text = serde_json::to_string_pretty(&results)?;
    std::fs::write(out, text + "\n").with_context(|| format!("writing {}", out.display()))?;
    Ok(Value::Object(scalars))
}

fn convergence(work: &Work, facts: &Facts, date: &str, commit: &str) -> Result<Value> {
    let repeats = facts.repeats;
    if repeats == 0 {
        bail!("--repeats: the convergence phase needs at least one run");
    }
    let runs = |prefix: &str, suffix: &str| -> Result<Vec<Value>> {
        (1..=repeats)
            .map(|r| work.load(&format!("{prefix}-{r}{suffix}")))
            .collect()
    };
    let ceiling = runs("ceiling", "")?;
    let controller = runs("controller", "")?;
    let requests = runs("controller", "-requests")?;
    let first = &controller[0];
    let count = number(first, "count", "controller-1.json")?;
    let converged = |runs: &[Value], name: &str| -> Result<f64> {
        let times = runs
            .iter()
            .map(|r| number(r, "converged_s", name))
            .collect::<Result<Vec<_>>>()?;
        median(times)
            .map(|m| round(m, 3))
            .with_context(|| format!("{name}: no runs"))
    };
    let ceiling_s = converged(&ceiling, "ceiling-<r>.json")?;
    let controller_s = converged(&controller, "controller-<r>.json")?;
    let per_memcached = requests
        .iter()
        .map(|q| Ok(number(q, "non_watch_requests", "controller-<r>-requests.json")? / count))
        .collect::<Result<Vec<_>>>()?;
    let cpu: Vec<f64> = (1..=repeats)
        .filter_map(|r| work.process(&format!("controller-{r}-process")).ok())
        .map(|p| p.cpu_s)
        .collect();
    let reconciles: Vec<f64> = (1..=repeats)
        .filter_map(|r| work.reconciles(&format!("controller-{r}-metrics.txt")))
        .filter(|n| *n > 0.0)
        .map(|n| n / count)
        .collect();
    let ratio = controller_s / ceiling_s;
    Ok(json!({
        "date": date,
        "commit": commit,
        "count": first["count"],
        "size": first["size"],
        "repeats": repeats,
        "client_concurrency": first["client_concurrency"],
        "controller_converged_s": controller_s,
        "ceiling_converged_s": ceiling_s,
        "ratio_controller_to_ceiling": round(ratio, 2),
        "target_ratio_max": 1.3,
        "meets_target": ratio <= 1.3,
        "controller_requests_per_memcached": median(per_memcached).map(|m| round(m, 3)),
        "controller_reconciles_per_memcached": median(reconciles).map(|m| round(m, 3)),
        "ceiling_requests_per_memcached":
            number(&ceiling[0], "client_create_requests", "ceiling-1.json")? / count,
        "controller_cpu_s": median(cpu).map(|m| round(m, 3)),
        "definition": {
            "controller": "from the first Memcached create until every Memcached has condition \
                           Ready=True, which the controller sets once its Deployment has rolled out \
                           with every pod Ready (pods made Ready by kwok) and its Service is applied",
            "ceiling": "from the first create until every Deployment has rolled out with every pod \
                        Ready (pods made Ready by kwok); a plain client POSTs the same Deployment and \
                        Service the controller would apply (without owner references), the Service \
                        right after its Deployment",
        },
        "controller_runs": controller,
        "ceiling_runs": ceiling,
        "controller_requests": requests,
    }))
}

fn memory(work: &Work, facts: &Facts, date: &str, commit: &str) -> Result<Value> {
    let m = work.load("memory-converge")?;
    let q = work.load("memory-requests")?;
    let p = work.process("memory-process")?;
    let size_0 = number(&m, "count", "memory-converge.json")?;
    let mut section = json!({
        "date": date,
        "commit": commit,
        "memcacheds": facts.with_pods + size_0 as u64,
        "with_pods": facts.with_pods,
        "size_0": m["count"],
        "rss_mib": mib(p.rss_kib),
        "peak_rss_mib": mib(p.hwm_kib),
        "rss_kib": p.rss_kib,
        "peak_rss_kib": p.hwm_kib,
        "open_fds": p.open_fds,
        "target_mib_max": 64,
        "meets_target": mib(p.hwm_kib) < 64.0,
        "reconciled_s": m["converged_s"],
        "controller_requests_per_memcached":
            round(number(&q, "non_watch_requests", "memory-requests.json")? / size_0, 1),
        "note": format!(
            "{} Memcacheds of size 1 (Deployment, Service, pod) and {} of size 0 (Deployment, \
             Service); read 10 s after every Memcached had a status for its generation, i.e. the \
             controller had applied its children and written its status; peak is VmHWM since the \
             controller started",
            facts.with_pods, size_0
        ),
        "converge": m,
        "controller_requests": q,
    });
    if let Some(note) = facts.note.as_deref().filter(|n| !n.is_empty()) {
        section["incident"] = json!(note);
    }
    Ok(section)
}

fn idle(work: &Work, facts: &Facts, date: &str, commit: &str) -> Result<Value> {
    let idle = work.load("idle")?;
    let setup = work.load("idle-setup")?;
    let p = work.process("idle-process")?;
    if facts.seconds == 0 {
        bail!("--seconds: the idle phase needs its measured time");
    }
    let non_watch = number(&idle, "non_watch_requests", "idle.json")?;
    Ok(json!({
        "date": date,
        "commit": commit,
        "scalers": setup["count"],
        "window_utc_hours": setup["window_utc"],
        "measured_s": facts.seconds,
        "non_watch_requests": idle["non_watch_requests"],
        "non_watch_requests_per_min": per_minute(non_watch, facts.seconds),
        "watch_requests": idle["watch_requests"],
        "target_non_watch_requests_per_min": 0,
        "meets_target": non_watch == 0.0,
        "by_verb_resource": idle["by_verb_resource"],
        "rss_mib": mib(p.rss_kib),
        "note": "requests of the controller's own user in the apiserver audit log, once every \
                 Scaler had its status and the controller had gone 20 s without a reconcile; \
                 windows open 6 hours ahead; leader election off (with it, Lease renewals add \
                 their own requests)",
    }))
}

fn lateness(work: &Work, date: &str, commit: &str) -> Result<Value> {
    let late = work.load("lateness")?;
    let all = &late["all_transitions"];
    let missed_none = none_missed(&late, "lateness.json")?;
    let on_time = all["max_ms"].as_f64().is_some_and(|max| max <= 1000.0);
    Ok(json!({
        "date": date,
        "commit": commit,
        "scalers": late["scalers"],
        "transitions": all["samples"],
        "p50_ms": all["p50_ms"],
        "p90_ms": all["p90_ms"],
        "p99_ms": all["p99_ms"],
        "max_ms": all["max_ms"],
        "min_ms": all["min_ms"],
        "written_p50_ms": late["written"]["all_transitions"]["p50_ms"],
        "written_p99_ms": late["written"]["all_transitions"]["p99_ms"],
        "written_max_ms": late["written"]["all_transitions"]["max_ms"],
        "target_ms_max": 1000,
        "meets_target": on_time && missed_none,
        "target_p99_ms_max": 100,
        "meets_target_p99": missed_none && all["p99_ms"].as_f64().is_some_and(|ms| ms < 100.0),
        "opening": late["opening"],
        "closing": late["closing"],
        "missed": late["missed"],
        "reconciled_before_open": late["reconciled_before_open"],
        "window": {"open": late["window_open_at"], "close": late["window_close_at"]},
        "note": "every Scaler's window opens at the same minute boundary and closes a minute later; \
                 lateness is when the bench client's watch saw the target's spec.replicas change, \
                 minus the boundary; written_*: when the controller's write of it was answered \
                 (from its log), minus the boundary",
    }))
}

/// `count` over `seconds`, per minute.
fn per_minute(count: f64, seconds: u64) -> f64 {
    round(count / (seconds as f64 / 60.0), 2)
}

/// Whether a `kubesteer-bench lateness` output saw every transition.
fn none_missed(late: &Value, from: &str) -> Result<bool> {
    Ok(late["missed"]
        .as_array()
        .with_context(|| format!("{from}: missed is not a list"))?
        .is_empty())
}

/// The scale phase: 1,000 Memcacheds with a pod, many more of size 0 and many idle Scalers on
/// one cluster; how long each step took to be reconciled, the controller's memory with all of
/// them, its requests while idle, and Scaler transitions among them.
fn scale(work: &Work, facts: &Facts, date: &str, commit: &str) -> Result<Value> {
    let pods = work.load("scale-pods")?;
    let bulk = work.load("scale-converge")?;
    let scalers = work.load("scale-scalers")?;
    let idle = work.load("scale-idle")?;
    let paused = work.load("scale-idle-paused")?;
    let late = work.load("scale-lateness")?;
    let p = work.process("scale-process")?;
    let after = work.process("scale-process-end")?;
    if facts.seconds == 0 {
        bail!("--seconds: the scale phase needs its idle time");
    }
    let memcacheds =
        number(&pods, "count", "scale-pods.json")? + number(&bulk, "count", "scale-converge.json")?;
    let non_watch = number(&idle, "non_watch_requests", "scale-idle.json")?;
    let paused_non_watch = number(&paused, "non_watch_requests", "scale-idle-paused.json")?;
    let all = &late["all_transitions"];
    let p99 = all["p99_ms"].as_f64();
    let missed_none = none_missed(&late, "scale-lateness.json")?;
    let peak = mib(p.hwm_kib.max(after.hwm_kib));
    Ok(json!({
        "date": date,
        "commit": commit,
        "memcacheds": memcacheds,
        "memcacheds_with_a_pod": pods["count"],
        "scalers": scalers["count"],
        "namespaces": bulk["namespaces"],
        "pods_ready_s": pods["converged_s"],
        "size_0_reconciled_s": bulk["converged_s"],
        "size_0_creates_accepted_s": bulk["creates_accepted_s"],
        "scalers_reconciled_s": scalers["reconciled_s"],
        "rss_mib": mib(p.rss_kib),
        "peak_rss_mib": peak,
        "rss_mib_after_lateness": mib(after.rss_kib),
        "cpu_s": after.cpu_s,
        "open_fds": p.open_fds,
        "target_rss_mib_max": 150,
        "idle_measured_s": facts.seconds,
        "idle_non_watch_requests": idle["non_watch_requests"],
        "idle_non_watch_requests_per_min": per_minute(non_watch, facts.seconds),
        "idle_by_verb_resource": idle["by_verb_resource"],
        "idle_objects": idle["objects"],
        "cluster_after_idle": work.load("scale-cluster")?,
        "idle_kcm_paused_non_watch_requests": paused["non_watch_requests"],
        "idle_kcm_paused_non_watch_requests_per_min": per_minute(paused_non_watch, facts.seconds),
        "idle_kcm_paused_by_verb_resource": paused["by_verb_resource"],
        "lateness_p50_ms": all["p50_ms"],
        "lateness_p99_ms": all["p99_ms"],
        "lateness_max_ms": all["max_ms"],
        "lateness_written_p50_ms": late["written"]["all_transitions"]["p50_ms"],
        "lateness_written_p99_ms": late["written"]["all_transitions"]["p99_ms"],
        "target_lateness_p99_ms_max": 250,
        "meets_target": {
            "rss": peak < 150.0,
            // Idle: nothing in the cluster changes, so the window with the controller-manager
            // paused; the one before it counts the Memcacheds turning Ready as it catches up.
            "idle": paused_non_watch == 0.0,
            "lateness": missed_none && p99.is_some_and(|ms| ms < 250.0),
        },
        "lateness": late,
        "steps": {"pods": pods, "size_0": bulk, "scalers": scalers},
        "note": "one cluster, one controller: the Memcacheds with a pod until Ready, then the size-0 \
                 ones (spread over `namespaces`) until each has a status for its generation, then \
                 the Scalers (each with a Deployment of its own, windows hours away) until each \
                 has a status; RSS read once all were reconciled and the controller had gone 20 s \
                 without a reconcile; idle requests from the apiserver's audit log of the \
                 controller's user, over a window with the controller-manager running (each of \
                 its rollouts observed turns a Memcached Ready: one status write) and one with it \
                 paused (SIGSTOP: nothing changes); then 30 more \
                 Scalers switch at the same minute boundaries while all the others are present",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_round_like_the_report_shows_them() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(round(79.00549, 3), 79.005);
        assert_eq!(mib(30_822), 30.1);
    }

    #[test]
    fn a_process_reads_itself() -> Result<()> {
        let me = process(std::process::id())?;
        assert!(me.rss_kib > 0 && me.hwm_kib >= me.rss_kib, "{me:?}");
        assert!(me.open_fds >= 3, "{me:?}");
        Ok(())
    }
}
