//! The controller's debounce, end to end: changes that keep coming faster than `--debounce`
//! put a reconcile off for at most `--debounce-max`.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use kubesteer_tests::{
    apply, eventually, jsonpath, kubectl_ok, merge_patch, ControllerProcess, Namespace,
};

/// Long beside a kubectl write on a busy machine, so that the writes never pause for as long.
pub(crate) const DEBOUNCE: Duration = Duration::from_secs(8);
pub(crate) const DEBOUNCE_MAX: Duration = Duration::from_secs(9);

/// Annotates `deployment/cache` again and again until `stop`, recording when each write was
/// answered: each is a watch event of an owned child, so a request to reconcile its Memcached.
fn churn(ns: String, stop: Arc<AtomicBool>, answered: Arc<Mutex<Vec<Instant>>>) -> Result<()> {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        kubectl_ok(
            &[
                "annotate",
                "--overwrite",
                "-n",
                &ns,
                "deployment/cache",
                &format!("kubesteer.io/test-churn={i}"),
            ],
            None,
        )?;
        answered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
    }
    Ok(())
}

/// A Memcached whose Deployment changes every few hundred milliseconds, with a debounce of 8 s,
/// still gets its spec change to the Deployment while the changes go on: the debounce alone
/// would put the reconcile off until they stop; `--debounce-max` runs it within 9 s of the
/// first of them. No reconcile fails on the way.
#[test]
fn a_spec_change_lands_while_the_children_keep_changing_faster_than_the_debounce() -> Result<()> {
    let ns = Namespace::new("ctl-bound")?;
    let debounce = format!("--debounce={}s", DEBOUNCE.as_secs());
    let debounce_max = format!("--debounce-max={}s", DEBOUNCE_MAX.as_secs());
    let controller =
        ControllerProcess::start_with(ns.name(), ns.name(), &[&debounce, &debounce_max])?;
    spec_change_lands_through_churn(ns.name(), || Ok(controller.logs()))
}

/// The scenario above in `ns`, whose controller runs with [`DEBOUNCE`] and [`DEBOUNCE_MAX`] and
/// whose log `logs` reads: a host process here, the chart's controller pod in the install tests.
pub(crate) fn spec_change_lands_through_churn(
    ns: &str,
    logs: impl Fn() -> Result<String>,
) -> Result<()> {
    let run = apply(
        ns,
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {size: 1}\n",
    )?;
    ensure!(run.ok, "{run:?}");
    eventually(Duration::from_secs(90), "deployment/cache", || {
        let replicas = jsonpath(ns, "deployment/cache", "{.spec.replicas}");
        Ok(replicas.is_ok_and(|r| r == "1").then_some(()))
    })?;

    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(Mutex::new(Vec::new()));
    let churner = {
        let (ns, stop, answered) = (ns.to_string(), stop.clone(), answered.clone());
        std::thread::spawn(move || churn(ns, stop, answered))
    };
    let writes = || answered.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let landed = (|| {
        eventually(Duration::from_secs(30), "the churn under way", || {
            Ok((writes().len() >= 3).then_some(()))
        })?;
        merge_patch(ns, "memcached/cache", r#"{"spec":{"size":2}}"#)?;
        let patched = Instant::now();
        eventually(
            Duration::from_secs(30),
            "deployment/cache at 2 replicas",
            || {
                let replicas = jsonpath(ns, "deployment/cache", "{.spec.replicas}")?;
                Ok((replicas == "2").then_some(()))
            },
        )?;
        Ok::<_, anyhow::Error>((patched, Instant::now()))
    })();
    stop.store(true, Ordering::Relaxed);
    let churned = churner
        .join()
        .map_err(|_| anyhow::anyhow!("the churn thread panicked"))?;
    let (patched, seen) = landed?;
    churned?;

    // The changes never paused for as long as the debounce before the change was seen, so only
    // the bound can have let the reconcile run.
    let writes = writes();
    let mut during: Vec<Instant> = writes.iter().copied().filter(|t| *t <= seen).collect();
    during.push(seen);
    let longest = during
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    ensure!(
        longest < DEBOUNCE,
        "the annotations paused for {longest:?}, as long as the debounce: the test proves nothing"
    );
    ensure!(
        writes.iter().any(|t| *t > patched),
        "the churn went on after the patch"
    );
    // The other writers made no reconcile fail (the first apply after the create folds the
    // create's fields while the annotations keep coming).
    let logs = logs()?;
    ensure!(
        !logs.contains("reconcile failed"),
        "a reconcile failed:\n{logs}"
    );
    Ok(())
}
