//! The `fleet` phase of `make bench-controller` (issue 28 item 6): one Scaler per namespace
//! selecting its namespace's Deployments by label (`spec.selector`, no names), every Scaler's
//! window closing at one minute boundary, so that the whole fleet goes from `replicas` to 0 at
//! once; then a GitOps-style scale-up of some of them, which `outside.mode: Hold` sets back.
//!
//! What is measured, by a watch of the fleet's Deployments in this client: from the boundary
//! until each Deployment's spec.replicas is seen at 0, and from each scale-up write (answered)
//! until the set-back is seen; the controller's requests in the apiserver's audit log (its own
//! user), per target; its resident memory from /proc.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use kubesteer_api::keys::annotation::ORIGINAL_REPLICAS_OWNER;
use kubesteer_api::scaler::selector::TargetSelector;
use kubesteer_api::scaler::v1beta1::{Outside, OutsideMode, ScaleWindow, TimeOfDay};
use kubesteer_api::{Scaler, ScalerSpec};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::{audit, hh_mm, log, percentile, rolled_out, scaler_reconciled, secs, Spread};

/// The label every fleet Deployment carries, and its Scaler selects.
const TIER: (&str, &str) = ("tier", "web");
/// The field manager of the GitOps-style scale-up: not the one that created the Deployments
/// (which owns the pod template), so the scale-up does not restart Hold's grace period.
const GITOPS_MANAGER: &str = "fleet-gitops";
const CREATE_MANAGER: &str = "fleet-bench";
/// Hold's grace period: the Deployments are created minutes before the boundary.
const GRACE_PERIOD: &str = "1m";

pub struct Options {
    /// Namespaces `PREFIX-0` .. `PREFIX-{namespaces-1}`.
    pub prefix: String,
    pub namespaces: usize,
    pub per_namespace: usize,
    /// Each Deployment's replicas, and the window's.
    pub replicas: i32,
    pub hold: usize,
    pub concurrency: usize,
    /// The ceiling line's PATCHes in flight (0: no ceiling line).
    pub ceiling_concurrency: usize,
    /// The boundary is the first minute boundary at least this far after the window is set.
    pub lead_secs: i64,
    /// The apiserver's log directory (audit*.log, rotated ones too).
    pub audit_dir: PathBuf,
    pub user: String,
    pub controller_pid: u32,
    /// The controller's log: when its writes were answered, beside when the watch saw them.
    pub controller_log: Option<PathBuf>,
    pub setup_timeout: Duration,
    /// How long after the boundary, and after the scale-ups, the bench waits for the fleet.
    pub settle_timeout: Duration,
}

/// What the watches saw.
#[derive(Default)]
struct Fleet {
    /// Per `namespace/name`: every change of spec.replicas, with when the watch saw it.
    changes: HashMap<String, Vec<(i32, DateTime<Utc>)>>,
    /// Per `namespace/name`: whether it carries a Scaler's record of its original replicas.
    recorded: HashMap<String, bool>,
    /// Per `namespace/name`: whether it has rolled out with every pod Ready.
    rolled_out: HashMap<String, bool>,
    /// Per Scaler namespace: what its status says.
    scalers: HashMap<String, ScalerSeen>,
}

/// A Scaler's status.targetCount, whether it is reconciled, and its next transition's time.
struct ScalerSeen {
    count: Option<i32>,
    reconciled: bool,
    next: Option<DateTime<Utc>>,
}

impl Fleet {
    fn replicas(&self, key: &str) -> Option<i32> {
        self.changes.get(key).and_then(|c| c.last()).map(|c| c.0)
    }
    fn count(map: &HashMap<String, bool>) -> usize {
        map.values().filter(|v| **v).count()
    }
}

type Shared = Arc<Mutex<Fleet>>;

fn lock(fleet: &Shared) -> std::sync::MutexGuard<'_, Fleet> {
    fleet.lock().unwrap_or_else(|e| e.into_inner())
}

/// Watches the fleet's Deployments (by label, every namespace) into `fleet`; returns once the
/// first list is done.
async fn watch_deployments(client: &Client, fleet: Shared) -> Result<()> {
    let (ready_tx, ready_rx) = oneshot::channel();
    let api: Api<Deployment> = Api::all(client.clone());
    let config = watcher::Config::default().labels(&format!("{}={}", TIER.0, TIER.1));
    tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            let at = Utc::now();
            match event {
                Ok(Event::InitDone) => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Apply(d) | Event::InitApply(d)) => {
                    let key = format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any());
                    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    let recorded = d.annotations().contains_key(ORIGINAL_REPLICAS_OWNER);
                    let done = rolled_out(&d);
                    let mut f = lock(&fleet);
                    if f.replicas(&key) != Some(replicas) {
                        f.changes
                            .entry(key.clone())
                            .or_default()
                            .push((replicas, at));
                    }
                    f.recorded.insert(key.clone(), recorded);
                    f.rolled_out.insert(key, done);
                }
                Ok(_) => {}
                Err(e) => log(format!("deployment watch error (retrying): {e}")),
            }
        }
    });
    ready_rx.await.context("the Deployment watch ended early")
}

/// Watches the Scalers of the fleet's namespaces into `fleet`.
async fn watch_scalers(client: &Client, spread: Spread, fleet: Shared) -> Result<()> {
    let (ready_tx, ready_rx) = oneshot::channel();
    let api: Api<Scaler> = spread.api(client);
    tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::InitDone) => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Apply(s) | Event::InitApply(s)) => {
                    let Some(ns) = s.namespace().filter(|ns| spread.holds(Some(ns))) else {
                        continue;
                    };
                    let status = s.status.as_ref();
                    let count = status.and_then(|st| st.target_count);
                    let next = status
                        .and_then(|st| st.next_transitions.first())
                        .map(|t| t.time.0)
                        .and_then(|t| DateTime::from_timestamp(t.as_second(), 0));
                    lock(&fleet).scalers.insert(
                        ns,
                        ScalerSeen {
                            count,
                            reconciled: scaler_reconciled(&s),
                            next,
                        },
                    );
                }
                Ok(_) => {}
                Err(e) => log(format!("scaler watch error (retrying): {e}")),
            }
        }
    });
    ready_rx.await.context("the Scaler watch ended early")
}

/// Polls `done` (every 500 ms, a progress line every 10 s) until it holds or `timeout` passes;
/// returns whether it held.
async fn wait_for(
    fleet: &Shared,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Fleet) -> (bool, String),
) -> bool {
    let start = Instant::now();
    let mut said = Instant::now();
    loop {
        let (ok, progress) = done(&lock(fleet));
        if ok {
            log(format!(
                "{what}: {progress} ({:.1}s)",
                start.elapsed().as_secs_f64()
            ));
            return true;
        }
        if start.elapsed() >= timeout {
            log(format!("{what}: not within {timeout:?}: {progress}"));
            return false;
        }
        if said.elapsed() >= Duration::from_secs(10) {
            log(format!("{what}: {progress}"));
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The benchmark's other target Deployments, with the fleet's label on them and their pods.
fn deployment(name: &str, namespace: &str, replicas: i32) -> Deployment {
    let mut d = crate::target_deployment(name, namespace, replicas);
    let tier = (TIER.0.to_string(), TIER.1.to_string());
    d.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(tier.0.clone(), tier.1.clone());
    if let Some(meta) = d.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(tier.0, tier.1);
    }
    d
}

fn window(start: &TimeOfDay, end: TimeOfDay, replicas: i32) -> ScaleWindow {
    ScaleWindow {
        start: start.clone(),
        end,
        replicas: Some(replicas),
        days: None,
    }
}

/// The namespace's Scaler: every `tier: web` Deployment of its namespace (selector defaults:
/// Deployments and StatefulSets, the Scaler's own namespace), at `replicas` inside the window,
/// held at 0 outside it.
fn scaler(namespace: &str, window: ScaleWindow) -> Scaler {
    let mut s = Scaler::new(
        "fleet",
        ScalerSpec {
            selector: Some(TargetSelector {
                match_labels: Some(BTreeMap::from([(TIER.0.into(), TIER.1.into())])),
                ..TargetSelector::default()
            }),
            windows: Some(vec![window]),
            time_zone: Some("UTC".into()),
            outside_replicas: Some(0),
            outside: Some(Outside {
                mode: Some(OutsideMode::Hold),
                grace_period: Some(GRACE_PERIOD.into()),
            }),
            ..ScalerSpec::default()
        },
    );
    s.metadata.namespace = Some(namespace.into());
    s
}

fn ms(at: DateTime<Utc>, from: DateTime<Utc>) -> f64 {
    (at - from).num_microseconds().unwrap_or(0) as f64 / 1000.0
}

/// p50/p99/max (and more) of latencies in ms, with how many were within `within_ms`.
fn latencies(mut v: Vec<f64>, within_ms: f64) -> Value {
    v.sort_by(f64::total_cmp);
    json!({
        "samples": v.len(),
        "min_ms": v.first(),
        "p50_ms": percentile(&v, 0.5),
        "p90_ms": percentile(&v, 0.9),
        "p99_ms": percentile(&v, 0.99),
        "max_ms": v.last(),
        format!("within_{}s", within_ms / 1000.0): v.iter().filter(|x| **x <= within_ms).count(),
    })
}

/// The apiserver's audit log files, rotated ones included.
fn audit_logs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit") && n.ends_with(".log"))
        })
        .collect();
    logs.sort();
    if logs.is_empty() {
        bail!("no audit*.log in {}", dir.display());
    }
    Ok(logs)
}

/// The controller's requests in [since, until], with totals per one of `per` things (targets,
/// set-backs), under the key `per_what`.
fn requests(
    o: &Options,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    (per, per_what): (usize, &str),
) -> Result<Value> {
    let counted = audit(
        &audit_logs(&o.audit_dir)?,
        &o.user,
        Some(since),
        Some(until),
    )?;
    let by: BTreeMap<String, u64> =
        serde_json::from_value(counted["by_verb_resource"].clone()).unwrap_or_default();
    let verb_total = |verbs: &[&str]| -> u64 {
        by.iter()
            .filter(|(k, _)| verbs.iter().any(|v| k.split(' ').next() == Some(v)))
            .map(|(_, n)| n)
            .sum()
    };
    let total = counted["non_watch_requests"].as_u64().unwrap_or(0);
    let writes = verb_total(&["create", "update", "patch", "delete", "deletecollection"]);
    let reads = verb_total(&["get", "list"]);
    let per_one = |n: u64| (n as f64 / per.max(1) as f64 * 1000.0).round() / 1000.0;
    Ok(json!({
        "since": since.to_rfc3339(),
        "until": until.to_rfc3339(),
        "total": total,
        "writes": writes,
        "reads": reads,
        "watches_opened": counted["watch_requests"],
        per_what: {"total": per_one(total), "writes": per_one(writes), "reads": per_one(reads)},
        "by_verb_resource": counted["by_verb_resource"],
        "by_status_code": counted["by_status_code"],
        "objects": counted["objects"],
    }))
}

fn memory(pid: u32) -> Result<Value> {
    let p = crate::report::process(pid)?;
    let mib = |k: u64| (k as f64 / 1024.0 * 10.0).round() / 10.0;
    Ok(json!({
        "rss_mib": mib(p.rss_kib),
        "peak_rss_mib": mib(p.hwm_kib),
        "cpu_s": p.cpu_s,
        "open_fds": p.open_fds,
        // The machine's, as a hint of what else ran (the control plane, other work).
        "machine_loadavg": std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    }))
}

/// When the controller's writes answered, per `namespace/name`, from its log lines after
/// `since` whose message starts with `verb` ("Restored", "Set") and names a fleet Deployment.
fn written(
    log: &Path,
    verb: &str,
    prefix: &str,
    since: DateTime<Utc>,
) -> Result<HashMap<String, DateTime<Utc>>> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let needle = format!("{verb} Deployment {prefix}-");
    let mut at: HashMap<String, DateTime<Utc>> = HashMap::new();
    for line in text.lines() {
        let Some((stamp, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(t) = DateTime::parse_from_rfc3339(stamp) else {
            continue;
        };
        let t = t.to_utc();
        if t < since {
            continue;
        }
        // The line of each write names its target; the Scaler's summary of them repeats the
        // note without it.
        let Some(i) = rest.find(&needle).filter(|_| rest.contains(" target=")) else {
            continue;
        };
        let what = &rest[i + needle.len() - prefix.len() - 1..];
        if let Some(key) = what.split_whitespace().next() {
            at.entry(key.to_string()).or_insert(t);
        }
    }
    Ok(at)
}

pub async fn run(client: Client, o: &Options) -> Result<Value> {
    let spread = Spread::new(o.prefix.clone(), o.namespaces);
    let total = o.namespaces * o.per_namespace;
    let keys: Vec<(String, String)> = (0..o.per_namespace)
        .flat_map(|i| {
            spread
                .names
                .iter()
                .map(move |ns| (ns.clone(), format!("web-{i:03}")))
        })
        .collect();
    let settle = o.settle_timeout;
    let mut notes: Vec<String> = Vec::new();
    spread.ensure(&client).await?;
    let fleet: Shared = Arc::default();
    watch_deployments(&client, fleet.clone()).await?;
    watch_scalers(&client, spread.clone(), fleet.clone()).await?;

    // 1. The Deployments, until every pod of them is Ready.
    log(format!(
        "fleet: {total} Deployments ({} namespaces x {}, {} replicas each), concurrency {}",
        o.namespaces, o.per_namespace, o.replicas, o.concurrency
    ));
    let t = Instant::now();
    let pp = PostParams {
        field_manager: Some(CREATE_MANAGER.into()),
        ..PostParams::default()
    };
    futures::stream::iter(keys.iter())
        .map(|(ns, name)| {
            let (client, pp) = (client.clone(), &pp);
            async move {
                Api::<Deployment>::namespaced(client, ns)
                    .create(pp, &deployment(name, ns, o.replicas))
                    .await
                    .with_context(|| format!("creating {ns}/{name}"))
            }
        })
        .buffer_unordered(o.concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await?;
    let created_s = secs(t.elapsed());
    log(format!(
        "fleet: {total} Deployments created in {created_s}s"
    ));
    let rolled = wait_for(&fleet, "rolled out", o.setup_timeout, |f| {
        let n = Fleet::count(&f.rolled_out);
        (n >= total, format!("{n}/{total} rolled out"))
    })
    .await;
    if !rolled {
        bail!("the fleet did not roll out within {:?}", o.setup_timeout);
    }
    let rolled_out_s = secs(t.elapsed());

    // 2. One Scaler per namespace, its window open now and far from closing; once every
    // Scaler counts its targets and every Deployment carries its record, the window's end is
    // moved to the boundary.
    let now = Utc::now();
    let start = hh_mm(now.duration_trunc(TimeDelta::minutes(1))?);
    let far = hh_mm(now + TimeDelta::hours(6));
    let t = Instant::now();
    futures::stream::iter(spread.names.iter())
        .map(|ns| {
            let api: Api<Scaler> = Api::namespaced(client.clone(), ns);
            let s = scaler(ns, window(&start, far.clone(), o.replicas));
            let pp = &pp;
            async move {
                api.create(pp, &s)
                    .await
                    .with_context(|| format!("Scaler {ns}/fleet"))
            }
        })
        .buffer_unordered(o.concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await?;
    let per = o.per_namespace as i32;
    let counted = wait_for(&fleet, "targetCount", o.setup_timeout, |f| {
        let n = f
            .scalers
            .values()
            .filter(|s| s.reconciled && s.count == Some(per))
            .count();
        let counts: BTreeMap<String, usize> =
            f.scalers.values().fold(BTreeMap::new(), |mut m, s| {
                *m.entry(format!("{:?}", s.count)).or_default() += 1;
                m
            });
        (
            n >= o.namespaces,
            format!(
                "{n}/{} Scalers with targetCount {per} (targetCounts seen: {counts:?})",
                o.namespaces
            ),
        )
    })
    .await;
    if !counted {
        bail!("not every Scaler reached status.targetCount {per}");
    }
    let target_count_s = secs(t.elapsed());
    let recorded = wait_for(&fleet, "records", o.setup_timeout, |f| {
        let n = Fleet::count(&f.recorded);
        (
            n >= total,
            format!("{n}/{total} Deployments carry a record"),
        )
    })
    .await;
    if !recorded {
        bail!("not every Deployment got its record of original replicas");
    }
    let recorded_s = secs(t.elapsed());

    let boundary = (Utc::now() + TimeDelta::seconds(o.lead_secs + 59))
        .duration_trunc(TimeDelta::minutes(1))?;
    log(format!(
        "fleet: moving every window's end to {} UTC",
        boundary.format("%H:%M:%S")
    ));
    let patch = json!({"spec": {"windows": [window(&start, hh_mm(boundary), o.replicas)]}});
    let pp_patch = PatchParams {
        field_manager: Some(CREATE_MANAGER.into()),
        ..PatchParams::default()
    };
    let patched_at = Utc::now();
    futures::stream::iter(spread.names.iter())
        .map(|ns| {
            let api: Api<Scaler> = Api::namespaced(client.clone(), ns);
            let (patch, pp) = (&patch, &pp_patch);
            async move {
                api.patch("fleet", pp, &Patch::Merge(patch))
                    .await
                    .with_context(|| format!("patching Scaler {ns}/fleet"))
            }
        })
        .buffer_unordered(o.concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await?;
    let until_boundary = (boundary - Utc::now()).to_std().unwrap_or_default();
    let ready = wait_for(
        &fleet,
        "next transition at the boundary",
        until_boundary.saturating_sub(Duration::from_secs(5)),
        |f| {
            let n = f
                .scalers
                .values()
                .filter(|s| s.reconciled && s.count == Some(per) && s.next == Some(boundary))
                .count();
            (n >= o.namespaces, format!("{n}/{} Scalers", o.namespaces))
        },
    )
    .await;
    if !ready {
        notes.push(
            "not every Scaler showed the boundary as its next transition 5 s before it".into(),
        );
    }
    let lead_s = secs((boundary - patched_at).to_std().unwrap_or_default());
    let shown = lock(&fleet)
        .scalers
        .values()
        .filter(|s| s.next == Some(boundary))
        .count();
    let before = memory(o.controller_pid)?;

    // 3. The boundary: every Deployment from `replicas` to 0.
    tokio::time::sleep((boundary - Utc::now()).to_std().unwrap_or_default()).await;
    log("fleet: boundary; waiting for every Deployment at 0");
    let zero_after = |f: &Fleet, key: &str, from: DateTime<Utc>| -> Option<DateTime<Utc>> {
        f.changes
            .get(key)?
            .iter()
            .find(|(r, at)| *r == 0 && *at >= from)
            .map(|c| c.1)
    };
    let key_names: Vec<String> = keys.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
    // Early writes (before the boundary) would count too: take them from a second before.
    let early = boundary - TimeDelta::seconds(1);
    let all_zero = wait_for(&fleet, "transition", o.settle_timeout, |f| {
        let n = key_names
            .iter()
            .filter(|k| zero_after(f, k, early).is_some())
            .count();
        (n >= total, format!("{n}/{total} at 0"))
    })
    .await;
    let after = memory(o.controller_pid)?;
    let (seen, missed) = {
        let f = lock(&fleet);
        let mut seen = Vec::new();
        let mut missed = Vec::new();
        for k in &key_names {
            match zero_after(&f, k, early) {
                Some(at) => seen.push(ms(at, boundary)),
                None => missed.push(k.clone()),
            }
        }
        (seen, missed)
    };
    let last_zero_s = seen.iter().copied().fold(0.0, f64::max) / 1000.0;
    if !all_zero {
        notes.push(format!(
            "{} Deployments were not seen at 0 within {settle:?} of the boundary",
            missed.len()
        ));
    }
    let written_at = match &o.controller_log {
        Some(l) => Some(written(l, "Restored", &o.prefix, early)?),
        None => None,
    };
    // The audit window: [T-5s, T+60s], counted once its last events are in the log.
    let (from, to) = (
        boundary - TimeDelta::seconds(5),
        boundary + TimeDelta::seconds(60),
    );
    // And over the whole transition, until 5 s after the last Deployment was seen at 0, which
    // may be later than T+60s.
    let done =
        boundary + TimeDelta::milliseconds((last_zero_s * 1000.0) as i64) + TimeDelta::seconds(5);
    let wait = (to.max(done) + TimeDelta::seconds(3) - Utc::now())
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait).await;
    let transition_requests = requests(o, from, to, (total, "per_target"))?;
    let whole_requests = requests(o, from, done, (total, "per_target"))?;
    let mut transition = json!({
        "boundary": boundary.to_rfc3339(),
        "window_end_patched_s_before": lead_s,
        "scalers_showing_the_boundary_before": shown,
        "seen_at_0": latencies(seen, 10_000.0),
        "all_seen_at_0_s": last_zero_s,
        "missed": missed.len(),
        "missed_first": missed.iter().take(10).collect::<Vec<_>>(),
        "written": written_at.as_ref().map(|w| latencies(w.values().map(|at| ms(*at, boundary)).collect(), 10_000.0)),
        "requests": transition_requests,
        "requests_until_all_at_0": whole_requests,
        "controller_before": before,
        "controller_after": after,
    });

    // 4. Hold: a GitOps-style sync scales `hold` Deployments (spread over every namespace) back
    // up, as fast as this client can; the controller sets each back to 0.
    // Only Deployments the transition brought to 0: a scale-up of one still at its replicas
    // would change nothing.
    let held: Vec<String> = {
        let f = lock(&fleet);
        key_names
            .iter()
            .filter(|k| zero_after(&f, k, early).is_some())
            .take(o.hold)
            .cloned()
            .collect()
    };
    let hold = held.len();
    if hold < o.hold.min(total) {
        notes.push(format!(
            "only {hold} Deployments were at 0 to be scaled up for Hold, not {}",
            o.hold.min(total)
        ));
    }
    log(format!(
        "fleet: hold: scaling {hold} Deployments back to {}",
        o.replicas
    ));
    let hold_from = Utc::now();
    let gitops = PatchParams {
        field_manager: Some(GITOPS_MANAGER.into()),
        ..PatchParams::default()
    };
    let up = json!({"spec": {"replicas": o.replicas}});
    let t = Instant::now();
    let wrote = merge_patch_each(
        &client,
        held.iter()
            .map(|key| key.split_once('/').unwrap_or_default()),
        &up,
        &gitops,
        o.concurrency,
    )
    .await?;
    let scale_ups_s = secs(t.elapsed());
    let wrote: HashMap<String, DateTime<Utc>> = wrote.into_iter().collect();
    // The set-back: the first 0 after the watch saw the scale-up.
    let set_back = |f: &Fleet, key: &str| -> Option<DateTime<Utc>> {
        let changes = f.changes.get(key)?;
        let up = changes
            .iter()
            .position(|(r, at)| *r == o.replicas && *at >= hold_from)?;
        changes[up..].iter().find(|(r, _)| *r == 0).map(|c| c.1)
    };
    let all_back = wait_for(&fleet, "set back", o.settle_timeout, |f| {
        let n = held.iter().filter(|k| set_back(f, k).is_some()).count();
        (n >= hold, format!("{n}/{hold} set back"))
    })
    .await;
    let hold_after = memory(o.controller_pid)?;
    let (back, not_back, last_back) = {
        let f = lock(&fleet);
        let mut back = Vec::new();
        let mut not_back = Vec::new();
        let mut last = hold_from;
        for k in &held {
            match (set_back(&f, k), wrote.get(k)) {
                (Some(at), Some(w)) => {
                    back.push(ms(at, *w));
                    last = last.max(at);
                }
                _ => not_back.push(k.clone()),
            }
        }
        (back, not_back, last)
    };
    if !all_back {
        notes.push(format!(
            "{} scaled-up Deployments were not set back within {settle:?}",
            not_back.len()
        ));
    }
    let hold_written = match &o.controller_log {
        Some(l) => {
            let w = written(l, "Set", &o.prefix, hold_from)?;
            let v: Vec<f64> = w
                .iter()
                .filter_map(|(k, at)| wrote.get(k).map(|up| ms(*at, *up)))
                .collect();
            Some(latencies(v, 10_000.0))
        }
        None => None,
    };
    let hold_to = last_back + TimeDelta::seconds(5);
    tokio::time::sleep(
        (hold_to + TimeDelta::seconds(3) - Utc::now())
            .to_std()
            .unwrap_or_default(),
    )
    .await;
    let hold_requests = requests(
        o,
        hold_from - TimeDelta::seconds(1),
        hold_to,
        (back.len(), "per_set_back"),
    )?;
    // Deployments the transition had not reached within the settle time, when they got to 0
    // after all (before the end of the run).
    let eventually: Vec<f64> = {
        let f = lock(&fleet);
        missed
            .iter()
            .filter_map(|k| zero_after(&f, k, early))
            .map(|at| ms(at, boundary))
            .collect()
    };
    if !missed.is_empty() {
        transition["missed_seen_at_0_later"] = latencies(eventually, 10_000.0);
    }
    let hold_section = json!({
        "scaled_up": hold,
        "scale_ups_accepted_s": scale_ups_s,
        "set_back": latencies(back, 10_000.0),
        "not_set_back": not_back.len(),
        "not_set_back_first": not_back.iter().take(10).collect::<Vec<_>>(),
        "written": hold_written,
        "requests": hold_requests,
        "controller_after": hold_after,
    });

    // 5. The ceiling line: with the controller stopped, a plain client PATCHes every Deployment
    // once (an annotation; their replicas stay at 0), as many at a time as the controller may
    // have in flight, to tell the apiserver's share of the transition from the controller's.
    let ceiling = if o.ceiling_concurrency > 0 {
        Some(ceiling(&client, o, &keys).await?)
    } else {
        None
    };

    Ok(json!({
        "ceiling": ceiling,
        "setup": {
            "deployments_created_s": created_s,
            "rolled_out_s": rolled_out_s,
            "scalers_target_count_s": target_count_s,
            "records_written_s": recorded_s,
        },
        "transition": transition,
        "hold": hold_section,
        "notes": notes,
    }))
}

/// Merge-patches every Deployment `(namespace, name)` with `patch`, `concurrency` at a time, as
/// fast as the apiserver answers: each as `namespace/name`, with when its answer came.
async fn merge_patch_each<'a>(
    client: &Client,
    keys: impl Iterator<Item = (&'a str, &'a str)>,
    patch: &Value,
    pp: &PatchParams,
    concurrency: usize,
) -> Result<Vec<(String, DateTime<Utc>)>> {
    futures::stream::iter(keys)
        .map(|(ns, name)| {
            let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
            async move {
                api.patch(name, pp, &Patch::Merge(patch))
                    .await
                    .with_context(|| format!("patching {ns}/{name}"))?;
                Ok::<_, anyhow::Error>((format!("{ns}/{name}"), Utc::now()))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await
}

/// Sends SIGSTOP or SIGCONT to the controller.
fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill {sig} {pid}: {status}");
    }
    Ok(())
}

/// Every Deployment PATCHed once by this client, `ceiling_concurrency` at a time, with the
/// controller stopped: per PATCH when it was answered (from the first one sent), and the
/// whole pass.
async fn ceiling(client: &Client, o: &Options, keys: &[(String, String)]) -> Result<Value> {
    log(format!(
        "fleet: ceiling: {} PATCHes, {} at a time, controller stopped",
        keys.len(),
        o.ceiling_concurrency
    ));
    signal(o.controller_pid, "-STOP")?;
    let pp = PatchParams {
        field_manager: Some(CREATE_MANAGER.into()),
        ..PatchParams::default()
    };
    let patch = json!({"metadata": {"annotations": {"bench.kubesteer.io/ceiling": Utc::now().to_rfc3339()}}});
    let from = Utc::now();
    let t = Instant::now();
    let answered = merge_patch_each(
        client,
        keys.iter().map(|(ns, name)| (ns.as_str(), name.as_str())),
        &patch,
        &pp,
        o.ceiling_concurrency,
    )
    .await;
    let took_s = secs(t.elapsed());
    signal(o.controller_pid, "-CONT")?;
    let answered: Vec<f64> = answered?.iter().map(|(_, at)| ms(*at, from)).collect();
    Ok(json!({
        "patches": keys.len(),
        "concurrency": o.ceiling_concurrency,
        "all_answered_s": took_s,
        "answered": latencies(answered, 10_000.0),
        "per_second": (keys.len() as f64 / took_s.max(0.001)).round(),
    }))
}

/// What the script knows about the run, for the results file.
pub struct Facts {
    pub nodes: usize,
    pub commit: String,
    pub k8s: String,
    pub notes: Vec<String>,
    pub took: Duration,
}

fn machine() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let meminfo = read("/proc/meminfo");
    let mem_kib: Option<u64> = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "memory_mib": mem_kib.map(|k| k / 1024),
        "cpu": cpu,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
    })
}

/// The results file: the facts, the parameters, the definition, and what `run` measured.
pub fn document(o: &Options, facts: &Facts, mut measured: Value) -> Result<Value> {
    let total = o.namespaces * o.per_namespace;
    let mut notes = facts.notes.clone();
    if let Some(more) = measured.get_mut("notes").map(Value::take) {
        notes.extend(serde_json::from_value::<Vec<String>>(more).unwrap_or_default());
    }
    let definition = format!(
        "{namespaces} namespaces {prefix}-0.. with {per} Deployments each ({total}, label tier: web, \
         {replicas} replicas, pods on {nodes} kwok nodes), created by this client {concurrency} at a \
         time and rolled out before anything else. One Scaler per namespace (kubesteer.io/v1beta1, \
         no scaleTargetRefs; spec.selector.matchLabels tier: web, so Deployments and StatefulSets of \
         its own namespace), timeZone UTC, one window with replicas {replicas}, outsideReplicas 0, \
         outside {{mode: Hold, gracePeriod: {GRACE_PERIOD}}}, hpaCooperation left at its default \
         (Enabled; there are no HPAs). The window is created open (start at the current minute, end \
         6 hours later), so the controller records every target's original replicas; once every \
         Scaler has status.targetCount {per} and every Deployment carries the record, every \
         Scaler's window end is patched to the boundary T, the first minute boundary at least \
         {lead} s away (transition.window_end_patched_s_before; \
         scalers_showing_the_boundary_before: how many Scalers' status.nextTransitions showed T \
         5 s before it). At T every window closes and every Deployment goes from {replicas} to 0 \
         (outsideReplicas). transition.seen_at_0: per Deployment, when a watch of the fleet's \
         Deployments in this client (niced, on the same machine) first saw spec.replicas 0, minus T; \
         transition.written: the same from the controller's log line of each answered write; \
         the bench waits up to {settle} s after T (and after the scale-ups) for the fleet; \
         missed: Deployments not at 0 by then, missed_seen_at_0_later: when those reached 0 \
         before the end of the run. Hold scales up only Deployments the transition brought to 0. \
         transition.requests: the controller's non-watch requests (its own user in the apiserver's \
         audit log, Metadata level) received in [T-5s, T+60s], per target = divided by {total}; \
         writes = create/update/patch/delete, reads = get/list; requests_until_all_at_0: the same \
         over [T-5s, 5 s after the last Deployment was seen at 0]. controller_before/after: VmRSS and \
         VmHWM of the controller process (a host binary, default flags), just before T and once \
         every Deployment was seen at 0. hold: outside every window, {hold} of the Deployments \
         (the first in every namespace, then the second, ...) are scaled back to {replicas} by this \
         client with merge patches of spec.replicas (field manager {GITOPS_MANAGER}, not the \
         creator, so the grace period is not restarted), {concurrency} at a time as fast as the \
         apiserver answers; hold.set_back: per Deployment, from when its scale-up patch was answered \
         until the watch saw spec.replicas 0 again; hold.requests: the controller's requests from the \
         first scale-up (minus 1 s) until 5 s after the last set-back, per set-back. ceiling (the \
         apiserver's line): after Hold, with the controller stopped (SIGSTOP), this client sends one \
         merge PATCH (an annotation) to every Deployment, {ceiling} at a time; answered: per PATCH, \
         from the first one sent until it was answered.",
        namespaces = o.namespaces,
        prefix = o.prefix,
        per = o.per_namespace,
        replicas = o.replicas,
        nodes = facts.nodes,
        concurrency = o.concurrency,
        lead = o.lead_secs,
        hold = o.hold.min(total),
        settle = o.settle_timeout.as_secs(),
        ceiling = o.ceiling_concurrency,
    );
    let mut doc = json!({
        "benchmark": "controller fleet: selector Scalers switching a fleet of Deployments at one boundary, then Hold",
        "date": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "commit": facts.commit,
        "kubernetes": facts.k8s,
        "machine": machine(),
        "parameters": {
            "namespaces": o.namespaces,
            "deployments_per_namespace": o.per_namespace,
            "deployments": total,
            "replicas": o.replicas,
            "pods": total * o.replicas.max(0) as usize,
            "scalers": o.namespaces,
            "hold": o.hold.min(total),
            "kwok_nodes": facts.nodes,
            "client_concurrency": o.concurrency,
            "lead_s": o.lead_secs,
            "grace_period": GRACE_PERIOD,
        },
        "definition": definition,
        "took_s": facts.took.as_secs(),
    });
    if let (Value::Object(d), Value::Object(m)) = (&mut doc, measured) {
        d.extend(m);
    }
    doc["notes"] = json!(notes);
    Ok(doc)
}
