//! An owner's readiness (Memcached, Welcome, Application), as the chart's controller reports
//! it: from its pods as soon as they are Ready, not only once the controller-manager has counted
//! them into its Deployment's status.
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::{eventually, instance_pods, jsonpath, kubectl_ok, Paused};

const WAIT: Duration = Duration::from_secs(90);

/// The name in `kind/name`: the owner's, its Deployment's and its instance's.
fn name_of(owner: &str) -> &str {
    owner.split_once('/').map_or(owner, |(_, name)| name)
}

/// One of each owner kind, a pod each: its object (`kind/name`, as kubectl names it; its
/// Deployment and pods are named after it) and its manifest.
const OWNERS: [(&str, &str); 3] = [
    (
        "memcached/cache",
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {size: 1}\n",
    ),
    (
        "welcome/hello",
        "apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {name: hello}\nspec: {name: kubesteer}\n",
    ),
    (
        "application/site",
        "apiVersion: kubesteer.io/v1alpha1\nkind: Application\nmetadata: {name: site}\nspec: {image: nginx}\n",
    ),
];

/// The chart's controller, through its own pod watches under its own RBAC, reports each owner
/// Ready as soon as its pod is, while the controller-manager (stopped for the test) has not
/// counted the pod's readiness into the Deployment's status. The scheduler is stopped first, so
/// that the controller-manager makes the ReplicaSets and their pods and counts the pods
/// (pending) into the Deployments' status before it is stopped in turn; then the scheduler
/// continues, places the pods on kwok nodes and kwok makes them Ready. Once the
/// controller-manager continues, the Deployments turn Available and each owner's Ready stands
/// as it was.
#[test]
fn every_owner_is_ready_once_its_pods_are_before_its_deployments_status_says_so() -> Result<()> {
    let release = Release::install("ready", &[])?;
    let n = release.user_ns.as_str();
    let deployment =
        |owner: &str, path: &str| jsonpath(n, &format!("deployment/{}", name_of(owner)), path);
    let ready = |owner: &str, field: &str| {
        jsonpath(
            n,
            owner,
            &format!("{{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
        )
    };
    let scheduler = Paused::begin("kube-scheduler")?;
    for (_, manifest) in OWNERS {
        let run = release.apply(manifest)?;
        ensure!(run.ok, "{run:?}");
    }
    for (owner, _) in OWNERS {
        eventually(WAIT, &format!("{owner}'s pod made and counted"), || {
            Ok((deployment(owner, "{.status.updatedReplicas}")? == "1").then_some(()))
        })
        .with_context(|| release.describe())?;
    }
    let controller_manager = Paused::begin("kube-controller-manager")?;
    scheduler.resume()?;
    let mut since = Vec::new();
    for (owner, _) in OWNERS {
        kubectl_ok(
            &[
                "wait",
                "-n",
                n,
                "--for=condition=Ready",
                "--timeout=90s",
                owner,
            ],
            None,
        )
        .with_context(|| release.describe())?;
        // Ready from the pod alone: the Deployment's status has not counted it ready.
        ensure!(
            deployment(owner, "{.status.readyReplicas}")?.is_empty(),
            "{owner}: the Deployment's status counts a ready pod with the controller-manager stopped: {}",
            deployment(owner, "{.status}")?
        );
        ensure!(
            jsonpath(n, owner, "{.status.readyReplicas}")? == "1",
            "{owner}: {}",
            jsonpath(n, owner, "{.status}")?
        );
        since.push(ready(owner, "lastTransitionTime")?);
    }
    // The kinds with the four conditions say Available too.
    for owner in ["memcached/cache", "application/site"] {
        let available = jsonpath(
            n,
            owner,
            "{.status.conditions[?(@.type==\"Available\")].status}",
        )?;
        ensure!(available == "True", "{owner}: Available {available:?}");
    }

    controller_manager.resume()?;
    for ((owner, _), since) in OWNERS.iter().zip(&since) {
        eventually(WAIT, &format!("{owner}'s Deployment Available"), || {
            let available = deployment(
                owner,
                "{.status.conditions[?(@.type==\"Available\")].status}",
            )?;
            Ok((available == "True").then_some(()))
        })
        .with_context(|| release.describe())?;
        ensure!(instance_pods(n, name_of(owner))?.len() == 1);
        ensure!(ready(owner, "status")? == "True");
        ensure!(
            &ready(owner, "lastTransitionTime")? == since,
            "{owner}: Ready stands as it was since the pod was Ready"
        );
    }
    Ok(())
}
