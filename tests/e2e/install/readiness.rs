//! A Memcached's readiness, as the chart's controller reports it: from its pods as soon as they
//! are Ready, not only once the controller-manager has counted them into its Deployment's status.
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::{eventually, instance_pods, jsonpath, kubectl, kubectl_ok, Paused};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

/// The Ready condition's `field` of `memcached/cache`.
fn ready_condition(ns: &str, field: &str) -> Result<String> {
    jsonpath(
        ns,
        "memcached/cache",
        &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
    )
}

/// With the controller-manager stopped, no ReplicaSet counts a pod into the Deployment's status.
/// The test makes the pod the Deployment's ReplicaSet would (its template, as a pod); once it is
/// Ready, the chart's controller, through its own pod watch under its own RBAC, reports the
/// Memcached Ready while the Deployment has no status at all. Then the controller-manager
/// continues: its ReplicaSet adopts that pod (it makes none), the Deployment turns Available, and
/// the Memcached's Ready stands as it was.
#[test]
fn a_memcached_is_ready_once_its_pods_are_before_its_deployments_status_says_so() -> Result<()> {
    let release = Release::install("ready", &[])?;
    let n = release.user_ns.as_str();
    // A pod needs its namespace's ServiceAccount, which the controller-manager makes.
    eventually(WAIT, "serviceaccount/default", || {
        Ok(kubectl(&["get", "-n", n, "serviceaccount/default"], None)?
            .ok
            .then_some(()))
    })?;
    let paused = Paused::begin("kube-controller-manager")?;
    let run = release
        .apply("apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {size: 1}\n")?;
    ensure!(run.ok, "{run:?}");
    let template = eventually(WAIT, "deployment/cache", || {
        let t = jsonpath(n, "deployment/cache", "{.spec.template}")?;
        Ok((!t.is_empty()).then_some(t))
    })
    .with_context(|| release.describe())?;
    let template: serde_json::Value = serde_json::from_str(&template)?;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "cache-", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    });
    kubectl_ok(
        &["create", "-n", n, "-f", "-"],
        Some(&serde_json::to_string(&pod)?),
    )?;
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
    // Ready from the pod alone: the Deployment's controller has not even seen it yet.
    let deployment_status = jsonpath(n, "deployment/cache", "{.status}")?;
    ensure!(
        jsonpath(n, "deployment/cache", "{.status.observedGeneration}")?.is_empty(),
        "the Deployment has a status with the controller-manager stopped: {deployment_status}"
    );
    let status = |path: &str| jsonpath(n, "memcached/cache", path);
    ensure!(status("{.status.readyReplicas}")? == "1");
    ensure!(status("{.status.conditions[?(@.type==\"Available\")].status}")? == "True");
    let since = ready_condition(n, "lastTransitionTime")?;

    paused.resume()?;
    eventually(WAIT, "deployment/cache Available", || {
        let available = jsonpath(
            n,
            "deployment/cache",
            "{.status.conditions[?(@.type==\"Available\")].status}",
        )?;
        Ok((available == "True").then_some(()))
    })
    .with_context(|| release.describe())?;
    let owners = kubectl_ok(
        &[
            "get",
            "pods",
            "-n",
            n,
            "-l",
            "app.kubernetes.io/instance=cache",
            "-o",
            "jsonpath={.items[*].metadata.ownerReferences[*].kind}",
        ],
        None,
    )?;
    ensure!(
        instance_pods(n, "cache")?.len() == 1 && owners == "ReplicaSet",
        "the ReplicaSet adopted the pod rather than make another: {owners}"
    );
    ensure!(ready_condition(n, "status")? == "True");
    ensure!(
        ready_condition(n, "lastTransitionTime")? == since,
        "Ready stands as it was since the pod was Ready"
    );
    Ok(())
}
