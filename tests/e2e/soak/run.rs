//! The soak (issue 63): on a release of the chart, targets under Scalers whose windows switch
//! every two or three minutes while the workload writes (Scalers edited, deleted and made again,
//! overrides, targets scaled by hand, Memcached/Welcome/Application objects) and faults are
//! injected one after another, every kind in turn in a seeded order. Everything is written to a
//! history, which `kubesteer_tests::soak::check` then holds to kubesteer's promises.
//!
//! Settings (environment): KUBESTEER_SOAK_DURATION (how long faults are injected; default 300s,
//! `make soak DURATION=30m` is the long run), KUBESTEER_SOAK_SEED (printed; the same seed makes
//! the same plan, actions and fault order), KUBESTEER_SOAK_TARGETS (default 40),
//! KUBESTEER_SOAK_MIN_FAULTS (each kind at least this often, default 1), KUBESTEER_SOAK_HISTORY
//! (the history's file) and KUBESTEER_SOAK_REPORT (a JSON summary).
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::soak::{check, parse, Event, Fault, History, Rules};
use kubesteer_tests::{eventually_every, kubectl_ok, now_seconds, target_dir};

use super::faults::{inject, KINDS};
use super::workload::{read_targets, write, Kind, Plan, Shape, Writer, LABEL};

const GRACE: f64 = kubesteer_tests::soak::GRACE_SECONDS;

struct Settings {
    duration: Duration,
    seed: u64,
    targets: usize,
    min_faults: usize,
    history: std::path::PathBuf,
}

impl Settings {
    fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let duration = match var("KUBESTEER_SOAK_DURATION") {
            Some(d) => humantime::parse_duration(&d)
                .with_context(|| format!("KUBESTEER_SOAK_DURATION={d}"))?,
            None => kubesteer_tests::soak::SHORT_DURATION,
        };
        let seed = match var("KUBESTEER_SOAK_SEED") {
            Some(s) => s
                .parse()
                .with_context(|| format!("KUBESTEER_SOAK_SEED={s}"))?,
            None => u64::from(std::process::id()) ^ kubesteer_tests::unix_now(),
        };
        let number = |name: &str, default: usize| -> Result<usize> {
            var(name).map_or(Ok(default), |v| {
                v.parse().with_context(|| format!("{name}={v}"))
            })
        };
        let history = var("KUBESTEER_SOAK_HISTORY").map_or_else(
            || target_dir().join(format!("e2e/soak/history-{seed}.jsonl")),
            std::path::PathBuf::from,
        );
        Ok(Self {
            duration,
            seed,
            targets: number(
                "KUBESTEER_SOAK_TARGETS",
                kubesteer_tests::soak::SHORT_TARGETS,
            )?,
            min_faults: number("KUBESTEER_SOAK_MIN_FAULTS", 1)?,
            history,
        })
    }
}

/// A Scaler's write, repeated until the apiserver takes it (a fault may refuse it a while); a
/// denial by the webhook is a failure of the soak itself, unless the webhook could not decide.
fn until_written(
    history: &History,
    object: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let run = write(history, object, args, stdin);
        if run.ok {
            return Ok(());
        }
        // A denial stands, but for one where the webhook could not ask the apiserver (a
        // force-deleted webhook pod still answers for a moment, its token already revoked; an
        // apiserver just restarted may refuse a token for a moment): it says to try again.
        let transient = ["could not check", "try again"];
        let denied = run.stderr.contains("denied the request")
            && !transient.iter().any(|t| run.stderr.contains(t));
        if denied || Instant::now() > deadline {
            bail!(
                "kubectl {} for {object}: {}",
                args.join(" "),
                run.stderr.trim()
            );
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The actor's step: one change to a Scaler or a target, chosen by `rng`.
fn act(plan: &Mutex<Plan>, history: &History, rng: &mut fastrand::Rng) -> Result<()> {
    let lock = || {
        plan.lock()
            .map_err(|_| anyhow::anyhow!("the plan's lock is poisoned"))
    };
    let now = now_seconds();
    let (ns, scaler, targets) = {
        let p = lock()?;
        let scaler = rng.usize(..p.scalers.len());
        (p.ns.clone(), scaler, p.scalers[scaler].targets.clone())
    };
    let choice = rng.u32(0..10);
    let touch = |fresh_targets: &[usize]| -> Result<()> {
        let mut p = lock()?;
        for t in fresh_targets {
            p.emit(history, *t, now_seconds(), true);
        }
        Ok(())
    };
    if choice < 4 {
        // A person scales a Deployment: theirs when no Scaler holds it, set back otherwise.
        let (index, name, to, own_changes) = {
            let p = lock()?;
            let index = targets[rng.usize(..targets.len())];
            let t = &p.targets[index];
            let s = &p.scalers[t.scaler];
            if t.kind != Kind::Deployment || s.boundary_distance(now) < GRACE {
                return Ok(());
            }
            match p.expected(index, now) {
                None if t.seen == Some((t.own, None)) => {
                    (index, t.name.clone(), if t.own == 1 { 2 } else { 1 }, true)
                }
                None => return Ok(()),
                Some(held) => (index, t.name.clone(), held + 1, false),
            }
        };
        touch(&[index])?;
        let object = format!("{ns}/Deployment/{name}");
        let replicas = format!("--replicas={to}");
        let run = write(
            history,
            &object,
            &["scale", "-n", &ns, &format!("deployment/{name}"), &replicas],
            None,
        );
        let mut p = lock()?;
        if run.ok && own_changes {
            p.targets[index].own = to;
            history.record(&Event::Original {
                t: history.now(),
                target: object,
                replicas: to,
            });
        }
        p.emit(history, index, now_seconds(), true);
        return Ok(());
    }
    let yaml = {
        let mut p = lock()?;
        let s = &mut p.scalers[scaler];
        let sleepers = s.replicas == 0;
        // An override that has ended is left out of the next write (one in the past is denied).
        if s.overridden
            .is_some_and(|(_, until)| (until as f64) < now + 5.0)
        {
            s.overridden = None;
        }
        match choice {
            4..=5 if s.exists && !s.hold => {
                // Deleted, then made again by a later step.
                None
            }
            4..=5 if !s.exists => {
                s.exists = true;
                Some(p.scaler_yaml(scaler))
            }
            6..=7 if s.exists && !sleepers => {
                s.replicas = if s.replicas == 3 { 4 } else { 3 };
                Some(p.scaler_yaml(scaler))
            }
            8..=9 if s.exists && !sleepers && s.overridden.is_none() => {
                s.overridden = Some((
                    2,
                    (now as i64) + rng.i64(kubesteer_tests::soak::OVERRIDE_SECONDS),
                ));
                Some(p.scaler_yaml(scaler))
            }
            _ => return Ok(()),
        }
    };
    touch(&targets)?;
    let name = lock()?.scalers[scaler].name.clone();
    let object = format!("{ns}/Scaler/{name}");
    match yaml {
        Some(yaml) => until_written(
            history,
            &object,
            &["apply", "-n", &ns, "-f", "-"],
            Some(&yaml),
        )?,
        None => {
            until_written(
                history,
                &object,
                &[
                    "delete",
                    "-n",
                    &ns,
                    &format!("scaler/{name}"),
                    "--ignore-not-found",
                    "--wait=false",
                ],
                None,
            )?;
            lock()?.scalers[scaler].exists = false;
        }
    }
    touch(&targets)
}

/// A range of seconds in milliseconds.
fn millis(seconds: std::ops::Range<u64>) -> std::ops::Range<u64> {
    seconds.start * 1000..seconds.end * 1000
}

/// Runs `step` every `every` (a random pause in that range) until `stop`, its first error kept.
fn repeat(
    stop: &Arc<AtomicBool>,
    seed: u64,
    every: std::ops::Range<u64>,
    mut step: impl FnMut(&mut fastrand::Rng) -> Result<()> + Send + 'static,
) -> std::thread::JoinHandle<Result<()>> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        let mut rng = fastrand::Rng::with_seed(seed);
        while !stop.load(Ordering::Relaxed) {
            step(&mut rng)?;
            std::thread::sleep(Duration::from_millis(rng.u64(every.clone())));
        }
        Ok(())
    })
}

/// One read of every target: the plan's expectations written before and after it, so that a
/// boundary passed while reading is in the history before the read is.
fn observe(plan: &Mutex<Plan>, history: &History) -> Result<()> {
    let lock = || {
        plan.lock()
            .map_err(|_| anyhow::anyhow!("the plan's lock is poisoned"))
    };
    let ns = {
        let mut p = lock()?;
        p.emit_all(history, now_seconds());
        p.ns.clone()
    };
    let Ok(read) = read_targets(&ns) else {
        return Ok(());
    };
    let mut p = lock()?;
    p.emit_all(history, now_seconds());
    let t = history.now();
    for seen in read {
        let index = p.targets.iter().position(|x| x.key(&ns) == seen.key);
        if let (Some(index), Some(r)) = (index, seen.replicas) {
            p.targets[index].seen = Some((r, seen.recorded));
        }
        history.record(&Event::Observed {
            t,
            target: seen.key,
            replicas: seen.replicas,
            recorded: seen.recorded,
            finalizers: seen.finalizers,
        });
    }
    Ok(())
}

#[test]
fn faults_lose_nothing() -> Result<()> {
    let settings = Settings::from_env()?;
    eprintln!(
        "soak: seed {} (KUBESTEER_SOAK_SEED={} repeats its plan, actions and faults), faults for {:?}, \
         {} targets, history {}",
        settings.seed,
        settings.seed,
        settings.duration,
        settings.targets,
        settings.history.display()
    );
    let release = Release::install("soak", &[])?;
    let history = Arc::new(History::create(&settings.history)?);
    let mut rng = fastrand::Rng::with_seed(settings.seed);
    let started = now_seconds();
    let shape = Shape {
        targets: settings.targets,
        first: started + 60.0,
        last: started + 60.0 + settings.duration.as_secs_f64() + 600.0,
    };
    let plan = Plan::new(&release.user_ns, &shape, &mut rng);
    kubectl_ok(
        &["apply", "-n", &release.user_ns, "-f", "-"],
        Some(&plan.targets_yaml()),
    )?;
    for t in &plan.targets {
        history.record(&Event::Original {
            t: history.now(),
            target: t.key(&plan.ns),
            replicas: t.own,
        });
    }
    let plan = Arc::new(Mutex::new(plan));
    let scalers = plan.lock().map(|p| p.scalers.len()).unwrap_or_default();
    for index in 0..scalers {
        let (yaml, object, ns) = {
            let mut p = plan.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            p.scalers[index].exists = true;
            let object = format!("{}/Scaler/{}", p.ns, p.scalers[index].name);
            (p.scaler_yaml(index), object, p.ns.clone())
        };
        until_written(
            &history,
            &object,
            &["apply", "-n", &ns, "-f", "-"],
            Some(&yaml),
        )?;
    }

    let stop_actors = Arc::new(AtomicBool::new(false));
    let stop_observer = Arc::new(AtomicBool::new(false));
    let observer = {
        let (plan, history) = (plan.clone(), history.clone());
        repeat(&stop_observer, 0, 1500..2500, move |_| {
            observe(&plan, &history)
        })
    };
    let actor = {
        let (plan, history) = (plan.clone(), history.clone());
        repeat(
            &stop_actors,
            settings.seed ^ 1,
            millis(kubesteer_tests::soak::ACTOR_PAUSE_SECONDS),
            move |rng| act(&plan, &history, rng),
        )
    };
    let writer = {
        let history = history.clone();
        let mut writer = Writer::new(&release.user_ns);
        repeat(
            &stop_actors,
            settings.seed ^ 2,
            millis(kubesteer_tests::soak::WRITER_PAUSE_SECONDS),
            move |rng| {
                writer.step(&history, rng);
                Ok(())
            },
        )
    };

    // Faults, one after another, each kind in turn in a seeded order, until the duration is over
    // and every kind has been injected its minimum.
    let deadline = Instant::now() + settings.duration;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut bag: Vec<Fault> = Vec::new();
    let mut fault_error = None;
    while Instant::now() < deadline
        || KINDS.iter().any(|k| {
            counts.get(&format!("{k:?}")).copied().unwrap_or_default() < settings.min_faults
        })
    {
        std::thread::sleep(Duration::from_secs(
            rng.u64(kubesteer_tests::soak::FAULT_GAP_SECONDS),
        ));
        if bag.is_empty() {
            bag = KINDS.to_vec();
            rng.shuffle(&mut bag);
        }
        let Some(kind) = bag.pop() else { continue };
        // Half the leaders are killed at a window's boundary, in the middle of its transition.
        let at = if kind == Fault::ControllerLeaderKilled && rng.bool() {
            let now = now_seconds();
            let p = plan.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            p.scalers
                .iter()
                .filter_map(|s| s.next_boundary(now))
                .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.min(b))))
                .map(|b| b + 0.3)
        } else {
            None
        };
        eprintln!("soak: {:.0} s: {kind:?}", history.now());
        if let Err(e) = inject(kind, &release, &history, at, &mut rng) {
            fault_error = Some(e);
            break;
        }
        *counts.entry(format!("{kind:?}")).or_default() += 1;
    }

    // The end: the workload stops, every Scaler is deleted, and every target must come back.
    stop_actors.store(true, Ordering::Relaxed);
    let actor = actor
        .join()
        .map_err(|_| anyhow::anyhow!("the actor panicked"))?;
    let writer = writer
        .join()
        .map_err(|_| anyhow::anyhow!("the writer panicked"))?;
    if let Some(e) = fault_error {
        stop_observer.store(true, Ordering::Relaxed);
        return Err(e.context(release.describe()));
    }
    let ns = release.user_ns.clone();
    until_written(
        &history,
        &format!("{ns}/Scaler/*"),
        &[
            "delete",
            "scalers",
            "-n",
            &ns,
            "-l",
            &format!("{LABEL}=scaler"),
            "--wait=false",
        ],
        None,
    )?;
    if let Ok(mut p) = plan.lock() {
        for s in &mut p.scalers {
            s.exists = false;
        }
    }
    history.record(&Event::End { t: history.now() });
    let back = eventually_every(
        Duration::from_secs(180),
        Duration::from_secs(2),
        "every target back at its own replicas, no Scaler left",
        || {
            let p = plan.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            let left = kubectl_ok(&["get", "scalers", "-n", &ns, "-o", "name"], None)?;
            let home = p.targets.iter().all(|t| t.seen == Some((t.own, None)));
            Ok((home && left.trim().is_empty()).then_some(()))
        },
    );
    stop_observer.store(true, Ordering::Relaxed);
    let observer = observer
        .join()
        .map_err(|_| anyhow::anyhow!("the observer panicked"))?;
    observe(&plan, &history)?;
    for line in kubectl_ok(
        &[
            "get",
            "scalers",
            "-n",
            &ns,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.finalizers}{\"\\n\"}{end}",
        ],
        None,
    )?
    .lines()
    {
        let (name, finalizers) = line.split_once(' ').unwrap_or((line, ""));
        history.record(&Event::Observed {
            t: history.now(),
            target: format!("{ns}/Scaler/{name}"),
            replicas: None,
            recorded: None,
            finalizers: serde_json::from_str(finalizers).unwrap_or_default(),
        });
    }
    drop(history);

    // The checker reads the history back, as `kubesteer-soak-check` would.
    let text = std::fs::read_to_string(&settings.history)?;
    let events = parse(&text).map_err(anyhow::Error::msg)?;
    let violations = check(&events, Rules { grace: GRACE });
    let writes = events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Write { .. }))
        .count();
    let refused = events
        .iter()
        .filter(|(_, e)| {
            matches!(
                e,
                Event::Write {
                    admitted: false,
                    ..
                }
            )
        })
        .count();
    let reads = events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Observed { .. }))
        .count();
    let report = serde_json::json!({
        "seed": settings.seed,
        "fault_seconds": settings.duration.as_secs(),
        "targets": settings.targets,
        "scalers": scalers,
        "writes": writes,
        "writes_failed_during_faults": refused,
        "reads": reads,
        "faults": counts,
        "violations": violations.len(),
        "history_lines": events.len(),
    });
    eprintln!("soak: {}", serde_json::to_string_pretty(&report)?);
    if let Some(file) = std::env::var_os("KUBESTEER_SOAK_REPORT") {
        std::fs::write(&file, serde_json::to_string_pretty(&report)?)?;
    }
    for v in violations.iter().take(40) {
        eprintln!("soak: violation: {v}");
    }
    actor?;
    writer?;
    observer?;
    ensure!(
        violations.is_empty(),
        "{} violations in {} (the first are above)",
        violations.len(),
        settings.history.display()
    );
    back.with_context(|| release.describe())?;
    for kind in KINDS {
        let n = counts
            .get(&format!("{kind:?}"))
            .copied()
            .unwrap_or_default();
        ensure!(n >= settings.min_faults, "{kind:?} injected {n} times");
    }
    ensure!(
        writes > 0 && reads > 0,
        "the soak wrote {writes} and read {reads}"
    );
    Ok(())
}
