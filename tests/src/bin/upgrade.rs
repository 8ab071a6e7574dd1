//! The upgrade test (`hack/test-release.sh`, step 5): the previous release installed from the
//! cluster's registry, every kind created, a writer creating and updating objects through the
//! webhook the whole time, then `helm upgrade` to this release, `helm rollback` to the previous
//! one and `helm upgrade` again. After each: no admission failed, every object is there with its
//! spec unchanged, every recorded original is kept, every target still where its Scaler put it,
//! the Scalers stored at the storage version, the pods on that release's image. At the end the
//! Scalers are deleted and every target is given back its original. Prints the figures.
//!
//! Environment: KUBESTEER_KUBECONFIG (the cluster), UPGRADE_REGISTRY (HOST:PORT, with the image
//! `kubesteer:VERSION` and the chart `charts/kubesteer` of both releases pushed), UPGRADE_CA (the
//! registry's CA file), UPGRADE_FROM and UPGRADE_TO (the two versions).
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use kubesteer_api::keys::annotation::ORIGINAL_REPLICAS;
use kubesteer_api::kind::{self, Kind};
use kubesteer_api::GROUP;
use kubesteer_tests::{eventually, helm, hh_mm, kubectl, kubectl_ok, unix_now};

const RELEASE: &str = "kubesteer";
const SYSTEM: &str = "kubesteer-system";
const NS: &str = "upgrade";
/// Each kind's CRD, and the kind as kubectl names it at its storage version.
fn kinds() -> impl Iterator<Item = (String, String)> {
    kind::ALL.into_iter().map(|k| {
        let crd = format!("{}.{GROUP}", k.plural());
        let stored = format!("{}.{}.{GROUP}", k.plural(), k.version());
        (crd, stored)
    })
}

/// Each Scaler's targets: (Deployment, replicas before, replicas while the window is open).
const TARGETS: [(&str, u32, u32); 4] = [
    ("office", 2, 3),
    ("batch-1", 1, 2),
    ("batch-2", 1, 2),
    ("legacy", 1, 2),
];

/// What a step does to the release.
enum Step {
    /// `helm upgrade` to the step's version, with these flags.
    Upgrade(&'static [&'static str]),
    /// `helm rollback` to revision 1, the previous release's install.
    RollbackToFirst,
}

struct Setup {
    registry: String,
    ca: String,
    from: String,
    to: String,
}

fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set (hack/test-release.sh sets it)"))
}

fn main() -> Result<()> {
    let setup = Setup {
        registry: env("UPGRADE_REGISTRY")?,
        ca: env("UPGRADE_CA")?,
        from: env("UPGRADE_FROM")?,
        to: env("UPGRADE_TO")?,
    };
    let start = Instant::now();
    kubectl_ok(&["create", "namespace", NS], None)?;
    say(&format!(
        "helm install {RELEASE} {} (the previous release)",
        setup.from
    ));
    setup.helm("install", &setup.from, &["--create-namespace"])?;
    on_release(&setup.from)?;
    create_objects()?;
    let before = Snapshot::take()?;
    say(&format!(
        "{} objects and {} recorded originals before the upgrade",
        before.objects.len(),
        before.originals.len()
    ));

    let writer = Writer::start();
    let mut checked = 0;
    let steps = [
        // 0.1.0 installed its CRDs from crds/, which Helm did not own: the first upgrade adopts
        // them (docs/upgrading.md); after that they carry the release's annotations.
        (
            "helm upgrade",
            &setup.to,
            Step::Upgrade(&["--take-ownership"]),
        ),
        ("helm rollback", &setup.from, Step::RollbackToFirst),
        ("helm upgrade again", &setup.to, Step::Upgrade(&[])),
    ];
    for (step, version, action) in steps {
        say(&format!("{step} to {version}, the writer writing"));
        let at = Instant::now();
        match action {
            Step::Upgrade(extra) => setup.helm("upgrade", version, extra)?,
            Step::RollbackToFirst => {
                helm(&[
                    "rollback",
                    RELEASE,
                    "1",
                    "-n",
                    SYSTEM,
                    "--wait",
                    "--timeout",
                    "5m",
                ])?;
            }
        }
        on_release(version)?;
        // Writes keep going on the new pods for a while before the checks.
        writer.wait_writes(5, Duration::from_secs(120))?;
        let stats = writer.stats();
        ensure!(
            stats.failed.is_empty(),
            "{step}: {} of {} admissions failed: {:?}",
            stats.failed.len(),
            stats.attempted,
            stats.failed
        );
        checked += before.check(&Snapshot::take()?, step)?;
        checked += writer.check_written(step)?;
        crds_on(&setup.to)?;
        say(&format!(
            "{step}: done in {}s; {} admissions so far, 0 failed",
            at.elapsed().as_secs(),
            stats.attempted
        ));
    }
    let stats = writer.stop();

    say("the Scalers deleted: every target given back its original");
    kubectl_ok(
        &["delete", "scalers", "--all", "-n", NS, "--timeout=120s"],
        None,
    )?;
    let mut restored = 0;
    for (name, original, _) in TARGETS {
        let replicas = replicas(name)?;
        ensure!(
            replicas == original.to_string(),
            "deployment {NS}/{name} is at {replicas}, not given back its original {original}"
        );
        restored += 1;
    }
    say(&format!(
        "the upgrade as expected in {}s: admissions attempted {}, failed {}; objects and originals checked {checked} (over the three steps); originals restored {restored}",
        start.elapsed().as_secs(),
        stats.attempted,
        stats.failed.len()
    ));
    Ok(())
}

fn say(line: &str) {
    eprintln!("[upgrade] {line}");
}

impl Setup {
    /// `helm install|upgrade` of `version` from the registry, the image from there too.
    fn helm(&self, verb: &str, version: &str, extra: &[&str]) -> Result<()> {
        let chart = format!("oci://{}/charts/kubesteer", self.registry);
        let image = format!("image.repository={}/kubesteer", self.registry);
        let mut args = vec![
            verb,
            RELEASE,
            &chart,
            "--version",
            version,
            "--ca-file",
            &self.ca,
            "-n",
            SYSTEM,
            "--set",
            &image,
            "--set",
            "image.pullPolicy=Always",
            "--wait",
            "--timeout",
            "5m",
        ];
        args.extend(extra);
        helm(&args).map(drop)
    }
}

/// Waits until every pod of the release runs `version`'s image and none of another is left,
/// and the webhook answers a server-side dry run.
fn on_release(version: &str) -> Result<()> {
    let suffix = format!("/kubesteer:{version}");
    eventually(
        Duration::from_secs(300),
        &format!("every pod of the release on {version}"),
        || {
            let pods = kubectl_ok(
                &[
                    "get",
                    "pods",
                    "-n",
                    SYSTEM,
                    "-l",
                    &format!("app.kubernetes.io/instance={RELEASE}"),
                    "-o",
                    "jsonpath={range .items[*]}{.spec.containers[0].image} {.status.phase}{\"\\n\"}{end}",
                ],
                None,
            )?;
            let lines: Vec<_> = pods
                .lines()
                .filter(|l| !l.ends_with(" Succeeded"))
                .collect();
            if !lines.is_empty()
                && lines
                    .iter()
                    .all(|l| l.contains(&format!("{suffix} Running")))
            {
                Ok(Some(()))
            } else {
                bail!("pods: {lines:?}")
            }
        },
    )?;
    eventually(Duration::from_secs(60), "the webhook to answer", || {
        let probe = "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: probe}\nspec: {size: 0}\n";
        let run = kubectl(
            &["apply", "-n", NS, "--dry-run=server", "-f", "-"],
            Some(probe),
        )?;
        if run.ok {
            Ok(Some(()))
        } else {
            bail!("{}", run.stderr)
        }
    })
}

/// The CRDs are this release's: its version label, kept by Helm, and the Scaler stored as
/// v1beta1 only.
fn crds_on(version: &str) -> Result<()> {
    for (crd, _) in kinds() {
        let got = kubectl_ok(
            &[
                "get",
                "crd",
                &crd,
                "-o",
                "jsonpath={.metadata.labels.app\\.kubernetes\\.io/version} {.metadata.annotations.helm\\.sh/resource-policy}",
            ],
            None,
        )?;
        ensure!(
            got == format!("{version} keep"),
            "CRD {crd} is not {version}'s, kept: {got:?}"
        );
    }
    let stored = kubectl_ok(
        &[
            "get",
            "crd",
            &format!("{}.{GROUP}", Kind::Scaler.plural()),
            "-o",
            "jsonpath={.status.storedVersions}",
        ],
        None,
    )?;
    ensure!(
        stored == format!(r#"["{}"]"#, Kind::Scaler.version()),
        "the Scalers are stored as {stored}, not v1beta1 only"
    );
    Ok(())
}

fn replicas(deployment: &str) -> Result<String> {
    kubectl_ok(
        &[
            "get",
            "deployment",
            deployment,
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        None,
    )
}

/// Every kind, each Scaler with a window open now and its originals to record: a Scaler by name,
/// a selector Scaler, a v1alpha1 Scaler; a Memcached, a Welcome with its password Secret and an
/// Application with an Ingress. Waits until each target is at its window's replicas.
fn create_objects() -> Result<()> {
    for (name, original, _) in TARGETS {
        let tier = if name.starts_with("batch") {
            "batch"
        } else {
            "web"
        };
        let yaml = format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, labels: {{tier: {tier}}}}}\n\
             spec:\n  replicas: {original}\n  selector: {{matchLabels: {{app: {name}}}}}\n\
             \x20 template:\n    metadata: {{labels: {{app: {name}}}}}\n\
             \x20   spec: {{containers: [{{name: web, image: nginx}}]}}\n"
        );
        kubectl_ok(&["apply", "-n", NS, "-f", "-"], Some(&yaml))?;
    }
    // Open from an hour ago to two hours on: the whole test runs inside the window.
    let now = unix_now();
    let (start, end) = (hh_mm(now - 3600), hh_mm(now + 7200));
    let (hour_start, hour_end) = (&start[..2], &end[..2]);
    let objects = format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: office}}\nspec:\n\
         \x20 scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: office}}]\n\
         \x20 timeZone: UTC\n  windows: [{{start: \"{start}\", end: \"{end}\", replicas: 3}}]\n---\n\
         apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: batch}}\nspec:\n\
         \x20 selector: {{matchLabels: {{tier: batch}}}}\n\
         \x20 timeZone: UTC\n  windows: [{{start: \"{start}\", end: \"{end}\", replicas: 2}}]\n---\n\
         apiVersion: kubesteer.io/v1alpha1\nkind: Scaler\nmetadata: {{name: legacy}}\nspec:\n\
         \x20 deployments: [{{name: legacy}}]\n  timeZone: UTC\n\
         \x20 start: \"{hour_start}:00\"\n  end: \"{hour_end}:00\"\n  replicas: 2\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: hello-password}}\nstringData: {{password: s3cret}}\n---\n\
         apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {{name: cache}}\nspec: {{size: 0}}\n---\n\
         apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {{name: hello}}\n\
         spec: {{name: upgrade, replicas: 0, passwordSecretRef: {{name: hello-password, key: password}}}}\n---\n\
         apiVersion: kubesteer.io/v1alpha1\nkind: Application\nmetadata: {{name: site}}\n\
         spec: {{image: nginx, replicas: 0, port: 80, servicePort: 8080, ingress: {{host: upgrade.example.com}}}}\n"
    );
    kubectl_ok(&["apply", "-n", NS, "-f", "-"], Some(&objects))?;
    for (name, _, open) in TARGETS {
        eventually(
            Duration::from_secs(120),
            &format!("deployment {NS}/{name} at its window's {open} replicas"),
            || Ok((replicas(name)? == open.to_string()).then_some(())),
        )?;
    }
    for (kind, name) in [
        ("deployment", "cache"),
        ("deployment", "hello"),
        ("ingress", "site"),
    ] {
        eventually(
            Duration::from_secs(120),
            &format!("the controller's {kind} {NS}/{name}"),
            || {
                Ok(kubectl(&["get", kind, name, "-n", NS], None)?
                    .ok
                    .then_some(()))
            },
        )?;
    }
    Ok(())
}

/// What must survive every step: each object's spec, each target's recorded original and
/// replicas.
struct Snapshot {
    objects: BTreeMap<String, Value>,
    originals: BTreeMap<String, String>,
    replicas: BTreeMap<String, String>,
}

impl Snapshot {
    fn take() -> Result<Self> {
        let mut objects = BTreeMap::new();
        for (_, kind) in kinds() {
            let list: Value =
                serde_json::from_str(&kubectl_ok(&["get", &kind, "-n", NS, "-o", "json"], None)?)?;
            for item in list["items"].as_array().into_iter().flatten() {
                let name = item["metadata"]["name"].as_str().unwrap_or_default();
                // The writer's objects change under it: Writer::check_written checks those.
                if !name.starts_with(WRITTEN) {
                    objects.insert(format!("{kind}/{name}"), item["spec"].clone());
                }
            }
        }
        // The v1alpha1 Scaler reads back through the conversion webhook as it was written.
        let alpha = kubectl_ok(
            &[
                "get",
                "scalers.v1alpha1.kubesteer.io",
                "legacy",
                "-n",
                NS,
                "-o",
                "json",
            ],
            None,
        )?;
        let alpha: Value = serde_json::from_str(&alpha)?;
        objects.insert("scalers.v1alpha1/legacy".into(), alpha["spec"].clone());
        let mut originals = BTreeMap::new();
        let mut replicas = BTreeMap::new();
        for (name, _, _) in TARGETS {
            let deployment: Value = serde_json::from_str(&kubectl_ok(
                &["get", "deployment", name, "-n", NS, "-o", "json"],
                None,
            )?)?;
            let original = deployment["metadata"]["annotations"][ORIGINAL_REPLICAS]
                .as_str()
                .unwrap_or_default()
                .to_string();
            originals.insert(name.to_string(), original);
            replicas.insert(name.to_string(), deployment["spec"]["replicas"].to_string());
        }
        Ok(Self {
            objects,
            originals,
            replicas,
        })
    }

    /// Fails on any object lost or changed, original lost or changed, target moved; returns how
    /// many objects it compared.
    fn check(&self, now: &Snapshot, step: &str) -> Result<usize> {
        for (key, spec) in &self.objects {
            match now.objects.get(key) {
                None => bail!("{step}: {key} is gone"),
                Some(got) if got != spec => {
                    bail!("{step}: the spec of {key} changed from {spec} to {got}")
                }
                Some(_) => {}
            }
        }
        for (name, original) in &self.originals {
            ensure!(
                !original.is_empty(),
                "no original recorded on deployment {name} before the upgrade"
            );
            ensure!(
                now.originals.get(name) == Some(original),
                "{step}: deployment {name}'s recorded original {original} became {:?}",
                now.originals.get(name)
            );
        }
        ensure!(
            now.replicas == self.replicas,
            "{step}: the targets moved from {:?} to {:?}",
            self.replicas,
            now.replicas
        );
        Ok(self.objects.len() + self.originals.len())
    }
}

/// The prefix of the writer's objects.
const WRITTEN: &str = "w-";

#[derive(Clone, Default)]
struct Stats {
    attempted: usize,
    failed: Vec<String>,
    /// Each Memcached the writer created, with the memoryMB its last admitted write set.
    written: BTreeMap<String, u32>,
}

/// Creates and updates Memcacheds through the webhook, and writes the v1alpha1 Scaler through
/// the conversion webhook, one write after the other, until stopped.
struct Writer {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<Stats>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Writer {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(Stats::default()));
        let thread = {
            let (stop, stats) = (stop.clone(), stats.clone());
            thread::spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let name = format!("{WRITTEN}{i}");
                    let create = format!(
                        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {{name: {name}}}\nspec: {{size: 0, memoryMB: 64}}\n"
                    );
                    if write(&stats, &["create", "-n", NS, "-f", "-"], Some(&create)) {
                        lock(&stats).written.insert(name.clone(), 64);
                        let patch = r#"{"spec":{"memoryMB":128}}"#;
                        let args = [
                            "patch",
                            "memcached",
                            &name,
                            "-n",
                            NS,
                            "--type=merge",
                            "-p",
                            patch,
                        ];
                        if write(&stats, &args, None) {
                            lock(&stats).written.insert(name, 128);
                        }
                    }
                    let touch = format!("upgrade-test/touch={i}");
                    let args = [
                        "annotate",
                        "--overwrite",
                        "scalers.v1alpha1.kubesteer.io",
                        "legacy",
                        "-n",
                        NS,
                        &touch,
                    ];
                    write(&stats, &args, None);
                }
            })
        };
        Self {
            stop,
            stats,
            thread: Some(thread),
        }
    }

    fn stats(&self) -> Stats {
        lock(&self.stats).clone()
    }

    /// Waits until the writer has made `count` more writes.
    fn wait_writes(&self, count: usize, timeout: Duration) -> Result<()> {
        let from = self.stats().attempted;
        eventually(timeout, &format!("{count} more writes"), || {
            Ok((self.stats().attempted >= from + count).then_some(()))
        })
    }

    /// Every Memcached whose create was admitted is there, with the memoryMB last admitted.
    fn check_written(&self, step: &str) -> Result<usize> {
        let written = self.stats().written;
        let list: Value = serde_json::from_str(&kubectl_ok(
            &["get", "memcacheds", "-n", NS, "-o", "json"],
            None,
        )?)?;
        let got: BTreeMap<String, u64> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some((
                    m["metadata"]["name"].as_str()?.to_string(),
                    m["spec"]["memoryMB"].as_u64()?,
                ))
            })
            .collect();
        for (name, memory) in &written {
            // The one being written right now may be a write ahead of `written`.
            match got.get(name) {
                Some(m) if *m == u64::from(*memory) || *m == 128 => {}
                other => {
                    bail!("{step}: admitted Memcached {name} (memoryMB {memory}) is {other:?}")
                }
            }
        }
        Ok(written.len())
    }

    fn stop(mut self) -> Stats {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.stats()
    }
}

fn lock(stats: &Mutex<Stats>) -> std::sync::MutexGuard<'_, Stats> {
    stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One write through the apiserver (and so the webhook): counted, and its error kept.
fn write(stats: &Mutex<Stats>, args: &[&str], stdin: Option<&str>) -> bool {
    let mut with_timeout = vec!["--request-timeout=30s"];
    with_timeout.extend(args);
    let run = kubectl(&with_timeout, stdin);
    let mut stats = lock(stats);
    stats.attempted += 1;
    match run {
        Ok(run) if run.ok => true,
        Ok(run) => {
            stats
                .failed
                .push(format!("{}: {}", args.join(" "), run.stderr.trim()));
            false
        }
        Err(e) => {
            stats.failed.push(format!("{}: {e:#}", args.join(" ")));
            false
        }
    }
}
