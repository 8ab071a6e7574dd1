//! A Memcached's readiness, as the chart's controller reports it: from its pods as soon as they
//! are Ready, not only once the controller-manager has counted them into its Deployment's status.
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::{eventually, instance_pods, jsonpath, kubectl_ok, Paused};

const WAIT: Duration = Duration::from_secs(90);

/// The Ready condition's `field` of `memcached/cache`.
fn ready_condition(ns: &str, field: &str) -> Result<String> {
    jsonpath(
        ns,
        "memcached/cache",
        &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
    )
}

/// The chart's controller, through its own pod watch under its own RBAC, reports a Memcached
/// Ready as soon as its pod is, while the controller-manager (stopped for the test) has not
/// counted the pod's readiness into the Deployment's status. The scheduler is stopped first, so
/// that the controller-manager makes the ReplicaSet and its pod and counts the pod (pending) into
/// the Deployment's status before it is stopped in turn; then the scheduler continues, places
/// the pod on a kwok node and kwok makes it Ready. Once the controller-manager continues, the
/// Deployment turns Available and the Memcached's Ready stands as it was.
#[test]
fn a_memcached_is_ready_once_its_pods_are_before_its_deployments_status_says_so() -> Result<()> {
    let release = Release::install("ready", &[])?;
    let n = release.user_ns.as_str();
    let deployment = |path: &str| jsonpath(n, "deployment/cache", path);
    let scheduler = Paused::begin("kube-scheduler")?;
    let run = release
        .apply("apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {size: 1}\n")?;
    ensure!(run.ok, "{run:?}");
    eventually(WAIT, "deployment/cache's pod made and counted", || {
        Ok((deployment("{.status.updatedReplicas}")? == "1").then_some(()))
    })
    .with_context(|| release.describe())?;
    let controller_manager = Paused::begin("kube-controller-manager")?;
    scheduler.resume()?;
    kubectl_ok(
        &[
            "wait",
            "-n",
            n,
            "--for=condition=Ready",
            "--timeout=90s",
            "memcached/cache",
        ],
        None,
    )
    .with_context(|| release.describe())?;
    // Ready from the pod alone: the Deployment's status has not counted it ready.
    let status = deployment("{.status}")?;
    ensure!(
        deployment("{.status.readyReplicas}")?.is_empty(),
        "the Deployment's status counts a ready pod with the controller-manager stopped: {status}"
    );
    let memcached = |path: &str| jsonpath(n, "memcached/cache", path);
    ensure!(memcached("{.status.readyReplicas}")? == "1");
    ensure!(memcached("{.status.conditions[?(@.type==\"Available\")].status}")? == "True");
    let since = ready_condition(n, "lastTransitionTime")?;

    controller_manager.resume()?;
    eventually(WAIT, "deployment/cache Available", || {
        let available = deployment("{.status.conditions[?(@.type==\"Available\")].status}")?;
        Ok((available == "True").then_some(()))
    })
    .with_context(|| release.describe())?;
    ensure!(instance_pods(n, "cache")?.len() == 1);
    ensure!(ready_condition(n, "status")? == "True");
    ensure!(
        ready_condition(n, "lastTransitionTime")? == since,
        "Ready stands as it was since the pod was Ready"
    );
    Ok(())
}
