//! The apiserver restarting across a Scaler's window boundary: the transition lands within 5 s
//! of the apiserver coming back, and /readyz fails while the watches are down and passes again
//! once they are back. It stops the local kube-apiserver (the other components stay up and
//! reconnect), so it is a test binary of its own: no other test sees the outage.
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kubesteer_tests::{
    eventually, eventually_every, hh_mm, jsonpath, now_seconds, unix_now, ControllerProcess,
    Namespace, Outage,
};

const WAIT: Duration = Duration::from_secs(60);

/// The status code and body of the controller's /readyz at `addr`.
fn readyz(addr: &str) -> Result<(u16, String)> {
    kubesteer_tests::http_get(addr, "/readyz")
}

/// Sleeps until the Unix time `at` (a time to reach, not a condition to wait for).
fn sleep_until_unix(at: u64) {
    let left = at as f64 - now_seconds();
    if left > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(left));
    }
}

#[test]
fn a_window_that_opens_while_the_apiserver_is_down_opens_within_5_seconds_of_its_return(
) -> Result<()> {
    let ns = Namespace::new("ctl-outage")?;
    // Readiness fails once a watch has been down for 5 s.
    let controller =
        ControllerProcess::start_with(ns.name(), ns.name(), &["--watch-stale-after=5s"])?;
    ns.create_deployment("web", 1)?;
    // The boundary: a whole minute (windows are set in minutes) at least 25 s ahead.
    let opens = (unix_now() + 25).div_ceil(60) * 60;
    let run = ns.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: sched}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}], windows: [{{start: \"{}\", end: \"{}\", replicas: 3}}]}}\n",
        hh_mm(opens),
        hh_mm(opens + 3600)
    ))?;
    ensure!(run.ok, "{run:?}");
    eventually(WAIT, "the Scaler to wait for its window", || {
        let reason = jsonpath(
            ns.name(),
            "scaler/sched",
            "{.status.conditions[?(@.type==\"Ready\")].reason}",
        )?;
        Ok((reason == "WindowClosed").then_some(()))
    })?;
    let addr = controller.metrics_addr()?;
    eventually(WAIT, "/readyz 200 once every watch has listed", || {
        Ok((readyz(&addr)?.0 == 200).then_some(()))
    })
    .with_context(|| controller.logs())?;

    // Down from 8 s before the boundary to about 20 s after it (the apiserver takes 3-5 s to
    // start): the failed reconcile at the boundary backs off to 1, 2, 4, 8 and 16 s, so without
    // a cap its next try falls 31 s after the boundary, and the watches, backing off since the
    // outage began, are between tries too.
    sleep_until_unix(opens - 8);
    let outage = Outage::begin()?;
    // Polled through the outage instead of sleeping through it: a moment to reach, not a
    // condition; the condition is checked after.
    let mut unready = None;
    while unix_now() < opens + 17 {
        let (code, _) = readyz(&addr)?;
        if code == 503 && unready.is_none() {
            unready = Some(unix_now().saturating_sub(opens - 8));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let back = outage.end()?;
    let unready = unready.context("/readyz never failed while the apiserver was down")?;
    eprintln!("/readyz failed {unready} s into the outage");
    eprintln!(
        "apiserver back {} s after the boundary",
        unix_now().saturating_sub(opens)
    );
    eventually_every(
        Duration::from_secs(90),
        Duration::from_millis(100),
        "web scaled to 3",
        || Ok((jsonpath(ns.name(), "deployment/web", "{.spec.replicas}")? == "3").then_some(())),
    )
    .with_context(|| controller.logs())?;
    let late = back.elapsed();
    eprintln!("the window opened {late:?} after the apiserver came back");
    ensure!(
        late <= Duration::from_secs(5),
        "the window opened {late:?} after the apiserver came back"
    );
    // The watches retry at most 10 s apart and resume, but the restarted apiserver answers a
    // resumed watch with 410 Expired only once its watch cache is up, up to about two minutes
    // later here; each watch then relists. With 16 watches (four owner kinds) on a busy 2-core
    // machine the last one was back after more than 240 s once.
    eventually(
        Duration::from_secs(360),
        "/readyz 200 once the watches are back",
        || match readyz(&addr)? {
            (200, _) => Ok(Some(())),
            (code, why) => anyhow::bail!("{code} {why}"),
        },
    )
    .with_context(|| controller.logs())?;
    eprintln!(
        "/readyz passed again {:?} after the apiserver came back",
        back.elapsed()
    );
    // The restarted scheduler and controller-manager wait out their old leases before they act:
    // the tests after this one need a cluster that runs pods again.
    ns.create_deployment("after-outage", 1)?;
    eventually(
        Duration::from_secs(120),
        "a new pod Ready after the restart",
        || {
            let ready = jsonpath(
                ns.name(),
                "deployment/after-outage",
                "{.status.readyReplicas}",
            )?;
            Ok((ready == "1").then_some(()))
        },
    )?;
    Ok(())
}
