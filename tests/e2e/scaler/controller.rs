//! The controller and Scaler, end to end: windows that open, close and are deleted, cron
//! firings, and targets that do not exist yet, against a real control plane.
use std::time::{Duration, Instant};

use anyhow::Result;
use kubesteer_tests::{
    eventually, hh_mm, jsonpath, kubectl_ok, now_seconds, rfc3339, unix_now, ControllerProcess,
    Namespace,
};

const WAIT: Duration = Duration::from_secs(60);
const ORIGINAL: &str = "{.metadata.annotations.kubesteer\\.io/original-replicas}";
const OWNER: &str = "{.metadata.annotations.kubesteer\\.io/original-replicas-owner}";

fn deployment(ns: &Namespace, name: &str, replicas: u32) -> Result<()> {
    kubectl_ok(
        &[
            "create",
            "deployment",
            name,
            "-n",
            ns.name(),
            "--image=nginx",
            &format!("--replicas={replicas}"),
        ],
        None,
    )?;
    Ok(())
}

fn replicas(ns: &Namespace, name: &str) -> Result<String> {
    jsonpath(ns.name(), &format!("deployment/{name}"), "{.spec.replicas}")
}

fn wait_replicas(ns: &Namespace, name: &str, want: &str) -> Result<()> {
    eventually(
        WAIT,
        &format!("deployment/{name} at {want} replicas"),
        || Ok((replicas(ns, name)? == want).then_some(())),
    )
}

/// When the controller last scaled or restored a target, to the second: the time of its latest
/// `Scaled`/`Restored` event, published right after the write. (A write through `/scale` leaves
/// no time in the target's managedFields.)
fn write_time(ns: &Namespace, _name: &str) -> Result<String> {
    let events: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &[
            "get",
            "events.v1.events.k8s.io",
            "-n",
            ns.name(),
            "-o",
            "json",
        ],
        None,
    )?)?;
    let latest = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| matches!(e["reason"].as_str(), Some("Scaled" | "Restored")))
        .filter_map(|e| {
            e["series"]["lastObservedTime"]
                .as_str()
                .or(e["eventTime"].as_str())
                .map(str::to_string)
        })
        .max()
        .unwrap_or_default();
    // MicroTime to whole seconds: "2026-11-25T02:08:00.123456Z" -> "2026-11-25T02:08:00Z".
    Ok(match latest.split_once('.') {
        Some((seconds, _)) => format!("{seconds}Z"),
        None => latest,
    })
}

/// A Scaler `sched` of the Deployments `targets` (`{name: web}` entries) with one window;
/// `extra` is `, replicas: 3` (the window's) and other spec fields (`, suspend: true`).
fn window(targets: &str, start: &str, end: &str, extra: &str) -> String {
    let targets = targets.replace("{name:", "{apiVersion: apps/v1, kind: Deployment, name:");
    let (replicas, rest): (Vec<&str>, Vec<&str>) = extra
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .partition(|f| f.starts_with("replicas:"));
    let fields = |f: Vec<&str>| f.iter().map(|f| format!(", {f}")).collect::<String>();
    let (replicas, rest) = (fields(replicas), fields(rest));
    format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: sched}}\nspec: {{scaleTargetRefs: [{targets}], windows: [{{start: \"{start}\", end: \"{end}\"{replicas}}}]{rest}}}\n"
    )
}

fn scaler(ns: &Namespace, path: &str) -> Result<String> {
    jsonpath(ns.name(), "scaler/sched", path)
}

#[test]
fn an_open_window_scales_reverts_hand_edits_and_deleting_restores() -> Result<()> {
    let ns = Namespace::new("ctl-scl-open")?;
    let mut controller = ControllerProcess::start(ns.name())?;
    deployment(&ns, "web", 1)?;
    let now = unix_now();
    let run = ns.apply(&window(
        "{name: web}",
        &hh_mm(now - 3600),
        &hh_mm(now + 3600),
        ", replicas: 3",
    ))?;
    assert!(run.ok, "{run:?}");

    wait_replicas(&ns, "web", "3")?;
    assert_eq!(jsonpath(ns.name(), "deployment/web", ORIGINAL)?, "1");
    kubectl_ok(
        &[
            "wait",
            "-n",
            ns.name(),
            "--for=condition=Ready",
            "scaler/sched",
            "--timeout=60s",
        ],
        None,
    )?;
    eventually(WAIT, "status.active and the target", || {
        let active = scaler(&ns, "{.status.active}")?;
        let target = scaler(
            &ns,
            "{.status.targets[0].replicas}/{.status.targets[0].originalReplicas}",
        )?;
        Ok((active == "true" && target == "3/1").then_some(()))
    })?;

    kubectl_ok(
        &["scale", "-n", ns.name(), "deployment/web", "--replicas=7"],
        None,
    )?;
    wait_replicas(&ns, "web", "3")?;
    assert_eq!(
        jsonpath(ns.name(), "deployment/web", ORIGINAL)?,
        "1",
        "recorded once"
    );

    kubectl_ok(
        &["delete", "-n", ns.name(), "scaler/sched", "--timeout=60s"],
        None,
    )?;
    assert_eq!(
        replicas(&ns, "web")?,
        "1",
        "restored before the Scaler is gone"
    );
    assert_eq!(jsonpath(ns.name(), "deployment/web", ORIGINAL)?, "");
    assert!(
        controller.terminate(Duration::from_secs(10)),
        "graceful shutdown"
    );
    Ok(())
}

/// A pause of the whole machine longer than this across the boundary (the wall clock ahead of
/// the monotonic one by it) makes the scenario's lateness unmeasurable.
const PAUSE: Duration = Duration::from_secs(2);

#[test]
fn a_short_window_closes_on_time_and_restores() -> Result<()> {
    // A paused machine is late by the pause, kubesteer with it: a scenario that spanned one
    // is measured once more, saying so.
    for _ in 0..2 {
        match short_window_closes()? {
            None => return Ok(()),
            Some(paused) => eprintln!(
                "the machine paused for {paused:?} across the boundary (its wall clock jumped ahead of the monotonic clock); measuring again"
            ),
        }
    }
    anyhow::bail!("the machine paused across the boundary twice: nothing measured")
}

/// One short window, closed on time: `Some(pause)` when the restore came late and the machine
/// paused for longer than [`PAUSE`] meanwhile.
fn short_window_closes() -> Result<Option<Duration>> {
    let drift = kubesteer_tests::ClockDrift::start();
    let ns = Namespace::new("ctl-scl-close")?;
    let _controller = ControllerProcess::start(ns.name())?;
    deployment(&ns, "web", 2)?;
    let now = unix_now();
    let end = (now / 60) * 60 + 120;
    let run = ns.apply(&window(
        "{name: web}",
        &hh_mm(now),
        &hh_mm(end),
        ", replicas: 4",
    ))?;
    assert!(run.ok, "{run:?}");
    wait_replicas(&ns, "web", "4")?;
    assert_eq!(jsonpath(ns.name(), "deployment/web", ORIGINAL)?, "2");
    assert_eq!(
        scaler(&ns, "{.status.nextTransitions[0].time}")?,
        rfc3339(end)
    );

    let wait = Duration::from_secs(end.saturating_sub(unix_now()) + 30);
    eventually(wait, "the window to close", || {
        Ok((replicas(&ns, "web")? == "2").then_some(()))
    })?;
    let seen = now_seconds();
    assert!(
        seen >= end as f64 - 0.5,
        "restored early: at {seen}, boundary {end}"
    );
    let paused = drift.ahead();
    if seen > end as f64 + 5.0 && paused > PAUSE {
        return Ok(Some(paused));
    }
    // Polling through kubectl on a busy machine adds latency; the write time below is exact.
    assert!(
        seen <= end as f64 + 5.0,
        "restored late: at {seen}, boundary {end}"
    );
    let written = write_time(&ns, "web")?;
    assert!(
        [rfc3339(end), rfc3339(end + 1)].contains(&written),
        "the restore was written at {written}, not within 1 s of {}",
        rfc3339(end)
    );
    assert_eq!(jsonpath(ns.name(), "deployment/web", ORIGINAL)?, "");
    eventually(WAIT, "status after closing", || {
        let s = scaler(&ns, "{.status.active} {.status.lastTransition}")?;
        Ok((s == format!("false {}", rfc3339(end))).then_some(()))
    })?;
    Ok(None)
}

#[test]
fn a_closed_window_leaves_the_target_alone_and_reports_the_next_opening() -> Result<()> {
    let ns = Namespace::new("ctl-scl-closed")?;
    let _controller = ControllerProcess::start(ns.name())?;
    deployment(&ns, "web", 2)?;
    let now = unix_now();
    let start = ((now + 7200) / 60) * 60;
    let run = ns.apply(&window(
        "{name: web}",
        &hh_mm(start),
        &hh_mm(start + 3600),
        ", replicas: 5",
    ))?;
    assert!(run.ok, "{run:?}");
    eventually(WAIT, "nextTransition", || {
        let next = scaler(&ns, "{.status.nextTransitions[0].time}")?;
        Ok((next == rfc3339(start)).then_some(()))
    })?;
    assert_eq!(scaler(&ns, "{.status.active}")?, "false");
    assert_eq!(
        scaler(&ns, "{.status.conditions[?(@.type==\"Ready\")].reason}")?,
        "WindowClosed"
    );
    assert_eq!(replicas(&ns, "web")?, "2");
    // A change to the Scaler is reconciled too, and still leaves the target alone.
    ns.merge_patch("scaler/sched", r#"{"spec":{"replicas":6}}"#)?;
    ns.wait_observed("scaler/sched", WAIT)?;
    assert_eq!(
        scaler(&ns, "{.status.conditions[?(@.type==\"Ready\")].reason}")?,
        "WindowClosed"
    );
    assert_eq!(replicas(&ns, "web")?, "2");
    assert_eq!(jsonpath(ns.name(), "deployment/web", ORIGINAL)?, "");
    Ok(())
}

#[test]
fn cron_jobs_scale_at_each_firing() -> Result<()> {
    let ns = Namespace::new("ctl-scl-cron")?;
    let _controller = ControllerProcess::start(ns.name())?;
    deployment(&ns, "web", 1)?;
    let run = ns.apply(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: sched}\nspec:\n  scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}]\n  jobs:\n  - {name: even, schedule: \"*/2 * * * *\", replicas: 2}\n  - {name: odd, schedule: \"1-59/2 * * * *\", replicas: 3}\n",
    )?;
    assert!(run.ok, "{run:?}");
    // Catch-up: the most recent firing applies at once.
    let first = eventually(WAIT, "the catch-up firing", || {
        let r = replicas(&ns, "web")?;
        Ok((r == "2" || r == "3").then_some(r))
    })?;
    assert_eq!(jsonpath(ns.name(), "deployment/web", ORIGINAL)?, "1");
    let other = if first == "2" { "3" } else { "2" };
    let started = Instant::now();
    eventually(Duration::from_secs(90), "the next firing", || {
        Ok((replicas(&ns, "web")? == other).then_some(()))
    })?;
    assert!(started.elapsed() < Duration::from_secs(65));
    let written = write_time(&ns, "web")?;
    assert!(
        written.ends_with(":00Z") || written.ends_with(":01Z"),
        "a firing lands within 1 s of its minute, but was written at {written}"
    );
    eventually(WAIT, "lastTransition at the minute", || {
        let last = scaler(&ns, "{.status.lastTransition}")?;
        Ok(last.ends_with(":00Z").then_some(()))
    })?;
    kubectl_ok(
        &["delete", "-n", ns.name(), "scaler/sched", "--timeout=60s"],
        None,
    )?;
    assert_eq!(replicas(&ns, "web")?, "1", "deleting restores the original");
    Ok(())
}

#[test]
fn a_missing_target_is_reported_and_picked_up_when_it_appears() -> Result<()> {
    let ns = Namespace::new("ctl-scl-missing")?;
    let _controller = ControllerProcess::start(ns.name())?;
    deployment(&ns, "web", 1)?;
    let now = unix_now();
    let run = ns.apply(&window(
        "{name: web}, {name: ghost}",
        &hh_mm(now - 3600),
        &hh_mm(now + 3600),
        ", replicas: 2",
    ))?;
    assert!(run.ok, "{run:?}");
    eventually(WAIT, "Ready=False TargetNotFound", || {
        let c = scaler(&ns, "{.status.conditions[?(@.type==\"Ready\")].status}/{.status.conditions[?(@.type==\"Ready\")].reason}")?;
        Ok((c == "False/TargetNotFound").then_some(()))
    })?;
    wait_replicas(&ns, "web", "2")?;
    let events = kubectl_ok(
        &[
            "get",
            "events",
            "-n",
            ns.name(),
            "--field-selector",
            "reason=TargetNotFound",
            "-o",
            "jsonpath={.items[*].message}",
        ],
        None,
    )?;
    assert!(events.contains("ghost"), "{events:?}");

    deployment(&ns, "ghost", 1)?;
    wait_replicas(&ns, "ghost", "2")?;
    kubectl_ok(
        &[
            "wait",
            "-n",
            ns.name(),
            "--for=condition=Ready",
            "scaler/sched",
            "--timeout=60s",
        ],
        None,
    )?;
    Ok(())
}

#[test]
fn a_target_dropped_by_a_suspended_scaler_is_given_back_with_no_record_left() -> Result<()> {
    let ns = Namespace::new("ctl-scl-drop")?;
    let _controller = ControllerProcess::start(ns.name())?;
    deployment(&ns, "web", 1)?;
    deployment(&ns, "api", 2)?;
    let now = unix_now();
    let (start, end) = (hh_mm(now - 3600), hh_mm(now + 3600));
    let run = ns.apply(&window(
        "{name: web}, {name: api}",
        &start,
        &end,
        ", replicas: 3",
    ))?;
    assert!(run.ok, "{run:?}");
    wait_replicas(&ns, "web", "3")?;
    wait_replicas(&ns, "api", "3")?;

    // Suspended and api dropped in one edit: api is no longer this Scaler's to hold.
    let run = ns.apply(&window(
        "{name: web}",
        &start,
        &end,
        ", replicas: 3, suspend: true",
    ))?;
    assert!(run.ok, "{run:?}");
    wait_replicas(&ns, "api", "2")?;
    assert_eq!(jsonpath(ns.name(), "deployment/api", ORIGINAL)?, "");
    assert_eq!(jsonpath(ns.name(), "deployment/api", OWNER)?, "");
    // web stays as it is while suspended, with this Scaler's record.
    assert_eq!(replicas(&ns, "web")?, "3");
    assert_eq!(jsonpath(ns.name(), "deployment/web", ORIGINAL)?, "1");
    assert_eq!(
        jsonpath(ns.name(), "deployment/web", OWNER)?,
        format!("{}/sched", ns.name())
    );
    Ok(())
}
