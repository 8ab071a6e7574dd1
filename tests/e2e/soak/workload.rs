//! The soak's workload: targets under Scalers whose windows switch every two or three minutes,
//! the plan of what each Scaler says, and the writes that change it (Scalers edited, deleted and
//! made again, overrides set and expiring, targets scaled by hand, and a writer of Memcached,
//! Welcome and Application objects). Every write goes through the apiserver with kubectl and is
//! written to the history; the plan changes only when a write succeeded.
use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Context, Result};
use kubesteer_tests::soak::{Event, History};
use kubesteer_tests::{kubectl, Run};
use serde_json::Value;

/// The label every object of the soak carries (`target`, `scaler`, `object`).
pub const LABEL: &str = "kubesteer-soak";
/// A held Scaler's outsideReplicas, and its targets' own replicas.
const HELD_AT: i32 = 1;
/// The label a selector Scaler picks its targets by.
const GROUP: &str = "kubesteer-soak/group";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Deployment,
    /// The kinds without `/scale` that sleep while their Scaler says 0 (suspended, or a
    /// DaemonSet scheduled nowhere): read as 1 awake, 0 asleep.
    CronJob,
    Job,
    DaemonSet,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::CronJob => "CronJob",
            Kind::Job => "Job",
            Kind::DaemonSet => "DaemonSet",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::Deployment | Kind::DaemonSet => "apps/v1",
            Kind::CronJob | Kind::Job => "batch/v1",
        }
    }
}

/// The sleeping kinds, in the order a sleeping group's targets take them.
const SLEEPERS: [Kind; 3] = [Kind::CronJob, Kind::Job, Kind::DaemonSet];

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub kind: Kind,
    /// Its own replicas (its original): what it was made with, or what a person scaled it to
    /// while no Scaler held it.
    pub own: i32,
    pub scaler: usize,
    /// The last read: replicas and recorded original.
    pub seen: Option<(i32, Option<i32>)>,
}

impl Target {
    /// `namespace/Kind/name`, as the history names it.
    pub fn key(&self, ns: &str) -> String {
        format!("{ns}/{}/{}", self.kind.name(), self.name)
    }
}

#[derive(Debug, Clone)]
pub struct Scaler {
    pub name: String,
    pub targets: Vec<usize>,
    /// Picks its targets by this group label instead of by name.
    pub group: Option<String>,
    /// `outside: {mode: Hold}` at outsideReplicas [`HELD_AT`], its targets' own. A held
    /// Scaler is never deleted before the end: made again outside every window, it would set
    /// its targets to outsideReplicas at once, recording nothing (as documented), and a person's
    /// replicas from meanwhile would be gone.
    pub hold: bool,
    pub replicas: i32,
    /// Windows as Unix minutes [start, end).
    pub windows: Vec<(i64, i64)>,
    pub exists: bool,
    /// (replicas, until as Unix seconds).
    pub overridden: Option<(i32, i64)>,
}

impl Scaler {
    fn in_window(&self, unix: f64) -> bool {
        let minute = (unix / 60.0).floor() as i64;
        self.windows
            .iter()
            .any(|(s, e)| *s <= minute && minute < *e)
    }

    /// What it says its targets should be at, at `unix`: None when it says nothing (their own).
    pub fn says(&self, unix: f64) -> Option<i32> {
        if !self.exists {
            return None;
        }
        if let Some((replicas, until)) = self.overridden {
            if unix < until as f64 {
                return Some(replicas);
            }
        }
        if self.in_window(unix) {
            Some(self.replicas)
        } else if self.hold {
            Some(HELD_AT)
        } else {
            None
        }
    }

    /// Seconds from `unix` to its nearest window boundary or override end.
    pub fn boundary_distance(&self, unix: f64) -> f64 {
        let overrides = self.overridden.map(|(_, until)| until as f64);
        self.windows
            .iter()
            .flat_map(|(s, e)| [*s as f64 * 60.0, *e as f64 * 60.0])
            .chain(overrides)
            .map(|b| (b - unix).abs())
            .fold(f64::INFINITY, f64::min)
    }

    /// The next window boundary after `unix`.
    pub fn next_boundary(&self, unix: f64) -> Option<f64> {
        self.windows
            .iter()
            .flat_map(|(s, e)| [*s as f64 * 60.0, *e as f64 * 60.0])
            .filter(|b| *b > unix)
            .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.min(b))))
    }
}

/// "HH:MM" of a Unix minute, "24:00" for a window that ends at midnight.
fn hh_mm(minute: i64, end: bool) -> String {
    let of_day = minute.rem_euclid(1440);
    if end && of_day == 0 {
        return "24:00".into();
    }
    format!("{:02}:{:02}", of_day / 60, of_day % 60)
}

pub struct Plan {
    pub ns: String,
    pub targets: Vec<Target>,
    pub scalers: Vec<Scaler>,
    /// The expectation last written to the history, per target.
    emitted: Vec<Option<Option<i32>>>,
}

/// How a soak's workload is shaped.
pub struct Shape {
    pub targets: usize,
    /// Unix time the first window may open.
    pub first: f64,
    /// Unix time the soak's workload ends.
    pub last: f64,
}

impl Plan {
    /// Targets in groups of 4 to 8 under one Scaler each: most Deployments by name, some by a
    /// selector, some held (Hold), and CronJobs suspended while their window's 0 holds.
    pub fn new(ns: &str, shape: &Shape, rng: &mut fastrand::Rng) -> Self {
        let mut plan = Plan {
            ns: ns.to_string(),
            targets: Vec::new(),
            scalers: Vec::new(),
            emitted: Vec::new(),
        };
        let first_minute = (shape.first / 60.0).ceil() as i64;
        let last_minute = (shape.last / 60.0).ceil() as i64 + 2;
        let minutes = (last_minute - first_minute).max(1);
        while plan.targets.len() < shape.targets {
            let index = plan.scalers.len();
            let size = rng
                .usize(kubesteer_tests::soak::GROUP_SIZE)
                .min(shape.targets - plan.targets.len());
            let sleepers = index % 5 == 4;
            let hold = index % 5 == 3;
            let by_selector = index % 5 == 2;
            // Windows of 1 or 2 minutes every 2 or 3, at most 20 (the CRD's cap) over the run.
            let mut period = rng.i64(kubesteer_tests::soak::WINDOW_PERIOD_MINUTES);
            while minutes / period > 19 {
                period += 1;
            }
            let open = rng.i64(1..period);
            let phase = rng.i64(0..period);
            let windows = (0..)
                .map(|k| first_minute + phase + k * period)
                .take_while(|s| *s < last_minute)
                .map(|s| (s, s + open))
                .collect();
            let targets = (0..size)
                .map(|i| {
                    let kind = if sleepers {
                        SLEEPERS[i % SLEEPERS.len()]
                    } else {
                        Kind::Deployment
                    };
                    plan.targets.push(Target {
                        name: format!("t{index}-{i}"),
                        kind,
                        own: if kind != Kind::Deployment {
                            1
                        } else if hold {
                            HELD_AT
                        } else {
                            rng.i32(1..=2)
                        },
                        scaler: index,
                        seen: None,
                    });
                    plan.targets.len() - 1
                })
                .collect();
            plan.scalers.push(Scaler {
                name: format!("s{index}"),
                targets,
                group: by_selector.then(|| format!("g{index}")),
                hold,
                replicas: if sleepers { 0 } else { 3 },
                windows,
                exists: false,
                overridden: None,
            });
        }
        plan.emitted = vec![None; plan.targets.len()];
        plan
    }

    /// Writes target `index`'s expectation at `unix` to the history when it changed, or always
    /// with `fresh` (a write about to touch it, or just done: its grace starts again).
    pub fn emit(&mut self, history: &History, index: usize, unix: f64, fresh: bool) {
        let replicas = self.expected(index, unix);
        if fresh || self.emitted[index] != Some(replicas) {
            self.emitted[index] = Some(replicas);
            history.record(&Event::Expect {
                t: history.now(),
                target: self.targets[index].key(&self.ns),
                replicas,
            });
        }
    }

    /// [`Plan::emit`] for every target.
    pub fn emit_all(&mut self, history: &History, unix: f64) {
        for index in 0..self.targets.len() {
            self.emit(history, index, unix, false);
        }
    }

    /// Every target as one List for `kubectl apply`.
    pub fn targets_yaml(&self) -> String {
        let mut items = Vec::new();
        for target in &self.targets {
            let scaler = &self.scalers[target.scaler];
            let group = scaler.group.as_deref().unwrap_or("none");
            let labels = serde_json::json!({LABEL: "target", GROUP: group});
            let pod = serde_json::json!({
                "metadata": {"labels": {"app": target.name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            });
            items.push(match target.kind {
                Kind::Deployment => serde_json::json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": target.name, "labels": labels},
                    "spec": {"replicas": target.own,
                             "selector": {"matchLabels": {"app": target.name}},
                             "template": pod},
                }),
                Kind::CronJob => serde_json::json!({
                    "apiVersion": "batch/v1", "kind": "CronJob",
                    "metadata": {"name": target.name, "labels": labels},
                    "spec": {"schedule": "0 0 1 1 *", "suspend": false,
                             "jobTemplate": {"spec": {"template": {
                                 "spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "nginx"}]}}}}},
                }),
                // Its pod runs on a kwok node until the Job is suspended.
                Kind::Job => serde_json::json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": target.name, "labels": labels},
                    "spec": {"suspend": false, "backoffLimit": 100,
                             "template": {"spec": {"restartPolicy": "Never",
                                                   "containers": [{"name": "c", "image": "nginx"}]}}},
                }),
                Kind::DaemonSet => serde_json::json!({
                    "apiVersion": "apps/v1", "kind": "DaemonSet",
                    "metadata": {"name": target.name, "labels": labels},
                    "spec": {"selector": {"matchLabels": {"app": target.name}}, "template": pod},
                }),
            });
        }
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
    }

    /// The Scaler `index` as it should be now.
    pub fn scaler_yaml(&self, index: usize) -> String {
        let s = &self.scalers[index];
        let mut spec = serde_json::json!({"timeZone": "UTC"});
        match &s.group {
            Some(group) => spec["selector"] = serde_json::json!({"matchLabels": {GROUP: group}}),
            None => {
                let refs: Vec<Value> = s
                    .targets
                    .iter()
                    .map(|t| {
                        let t = &self.targets[*t];
                        serde_json::json!({"apiVersion": t.kind.api_version(), "kind": t.kind.name(),
                                           "name": t.name})
                    })
                    .collect();
                spec["scaleTargetRefs"] = refs.into();
            }
        }
        spec["windows"] = s
            .windows
            .iter()
            .map(|(start, end)| {
                serde_json::json!({"start": hh_mm(*start, false), "end": hh_mm(*end, true),
                                   "replicas": s.replicas})
            })
            .collect::<Vec<_>>()
            .into();
        if s.hold {
            spec["outsideReplicas"] = HELD_AT.into();
            spec["outside"] = serde_json::json!({"mode": "Hold", "gracePeriod": "5s"});
        }
        if let Some((replicas, until)) = s.overridden {
            let until = chrono::DateTime::from_timestamp(until, 0)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            spec["override"] = serde_json::json!({"replicas": replicas, "until": until});
        }
        serde_json::json!({
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"name": s.name, "labels": {LABEL: "scaler"}},
            "spec": spec,
        })
        .to_string()
    }

    /// What target `index` should be at, at `unix`.
    pub fn expected(&self, index: usize, unix: f64) -> Option<i32> {
        let t = &self.targets[index];
        self.scalers[t.scaler].says(unix)
    }
}

/// A write through the apiserver, written to the history: kubectl `args` with `stdin`.
pub fn write(history: &History, object: &str, args: &[&str], stdin: Option<&str>) -> Run {
    let sent = history.now();
    let run = kubectl(args, stdin).unwrap_or_else(|e| Run {
        ok: false,
        stdout: String::new(),
        stderr: format!("{e:#}"),
    });
    history.record(&Event::Write {
        t: history.now(),
        sent: Some(sent),
        object: object.to_string(),
        admitted: run.ok,
        stored: None,
        error: (!run.ok).then(|| run.stderr.trim().to_string()),
    });
    run
}

/// One target as read.
pub struct Seen {
    pub key: String,
    pub replicas: Option<i32>,
    /// Its recorded original (`kubesteer.io/original-replicas`).
    pub recorded: Option<i32>,
    pub finalizers: Vec<String>,
}

/// Reads every target.
pub fn read_targets(ns: &str) -> Result<Vec<Seen>> {
    let run = kubectl(
        &[
            "get",
            "deployments,cronjobs,jobs,daemonsets",
            "-n",
            ns,
            "-l",
            &format!("{LABEL}=target"),
            "-o",
            "json",
            "--request-timeout=5s",
        ],
        None,
    )?;
    anyhow::ensure!(run.ok, "{}", run.stderr.trim());
    let list: Value = serde_json::from_str(&run.stdout).context("the targets' list")?;
    let mut found = Vec::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let kind = item["kind"].as_str().unwrap_or_default();
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let asleep = |yes: bool| Some(if yes { 0 } else { 1 });
        let replicas = match kind {
            "CronJob" | "Job" => asleep(item["spec"]["suspend"] == true),
            "DaemonSet" => asleep(
                item["spec"]["template"]["spec"]["nodeSelector"]["kubesteer.io/asleep"].is_string(),
            ),
            _ => item["spec"]["replicas"]
                .as_i64()
                .and_then(|r| i32::try_from(r).ok()),
        };
        let recorded = item["metadata"]["annotations"]["kubesteer.io/original-replicas"]
            .as_str()
            .and_then(|r| r.parse().ok());
        let finalizers = item["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(String::from))
            .collect();
        found.push(Seen {
            key: format!("{ns}/{kind}/{name}"),
            replicas,
            recorded,
            finalizers,
        });
    }
    Ok(found)
}

/// The writer's objects: Memcached, Welcome and Application, made and changed through the
/// webhook, each admitted write read back (its spec field as written).
pub struct Writer {
    ns: String,
    made: BTreeMap<String, u32>,
    next: u32,
}

impl Writer {
    pub fn new(ns: &str) -> Self {
        Self {
            ns: ns.to_string(),
            made: BTreeMap::new(),
            next: 0,
        }
    }

    /// One write: a new object, or a change to one made before.
    pub fn step(&mut self, history: &History, rng: &mut fastrand::Rng) {
        let change = !self.made.is_empty() && rng.bool();
        let (name, version) = if change {
            let names: Vec<&String> = self.made.keys().collect();
            let name = names[rng.usize(..names.len())].clone();
            let version = self.made[&name] + 1;
            (name, version)
        } else {
            self.next += 1;
            let kind = ["memcached", "welcome", "application"][self.next as usize % 3];
            (format!("{kind}-{}", self.next), 1)
        };
        let (yaml, field, value) = object_yaml(&name, version);
        let object = format!("{}/{name}", self.ns);
        let sent = history.now();
        let run =
            kubectl(&["apply", "-n", &self.ns, "-f", "-"], Some(&yaml)).unwrap_or_else(|e| Run {
                ok: false,
                stdout: String::new(),
                stderr: format!("{e:#}"),
            });
        let mut stored = None;
        if run.ok {
            self.made.insert(name.clone(), version);
            let kind = name.split('-').next().unwrap_or_default();
            if let Ok(read) = kubectl(
                &[
                    "get",
                    &format!("{kind}/{name}"),
                    "-n",
                    &self.ns,
                    "-o",
                    &format!("jsonpath={field}"),
                    "--request-timeout=5s",
                ],
                None,
            ) {
                if read.ok {
                    stored = Some(read.stdout.trim() == value);
                }
            }
        }
        history.record(&Event::Write {
            t: history.now(),
            sent: Some(sent),
            object,
            admitted: run.ok,
            stored,
            error: (!run.ok).then(|| run.stderr.trim().to_string()),
        });
    }
}

/// The writer's object `name` at `version`, the jsonpath that reads the version back, and what
/// it reads.
fn object_yaml(name: &str, version: u32) -> (String, &'static str, String) {
    let labels = format!("{{{LABEL}: object}}");
    let mut yaml = String::new();
    let field = match name.split('-').next() {
        Some("memcached") => {
            let _ = write!(
                yaml,
                "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {{name: {name}, labels: {labels}}}\n\
                 spec: {{size: 1, memoryMB: {}}}\n",
                64 + version
            );
            ("{.spec.memoryMB}", (64 + version).to_string())
        }
        Some("welcome") => {
            let _ = write!(
                yaml,
                "apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {{name: {name}, labels: {labels}}}\n\
                 spec: {{name: soak, email: soak@kubesteer.io, groups: [g{version}]}}\n"
            );
            ("{.spec.groups[0]}", format!("g{version}"))
        }
        _ => {
            let _ = write!(
                yaml,
                "apiVersion: kubesteer.io/v1alpha1\nkind: Application\nmetadata: {{name: {name}, labels: {labels}}}\n\
                 spec: {{image: nginx, replicas: 1, port: 80, servicePort: {}}}\n",
                8000 + version
            );
            ("{.spec.servicePort}", (8000 + version).to_string())
        }
    };
    (yaml, field.0, field.1)
}
