//! The controller and Memcached, end to end: a user's session with kubectl against a real
//! control plane, with the controller running as a child process.
use std::time::Duration;

use anyhow::Result;
use kubesteer_tests::{
    event_notes, eventually, instance_pods, jsonpath, kubectl, kubectl_ok, ControllerProcess,
    Namespace,
};

pub(super) const MEMCACHED: &str = r#"
apiVersion: kubesteer.io/v1alpha1
kind: Memcached
metadata: {name: cache}
spec: {size: 2}
"#;

pub(super) const WAIT: Duration = Duration::from_secs(90);

fn wait_ready_replicas(ns: &str, want: &str) -> Result<()> {
    eventually(WAIT, &format!("status.readyReplicas {want}"), || {
        let r = jsonpath(ns, "memcached/cache", "{.status.readyReplicas}")?;
        Ok((r == want).then_some(()))
    })
}

#[test]
fn memcached_runs_scales_reverts_hand_edits_and_is_collected() -> Result<()> {
    let ns = Namespace::new("ctl-mc")?;
    let controller = ControllerProcess::start(ns.name())?;
    let run = ns.apply(MEMCACHED)?;
    assert!(run.ok, "{run:?}");

    let replicas = eventually(WAIT, "the Deployment", || {
        jsonpath(ns.name(), "deployment/cache", "{.spec.replicas}").map(Some)
    })?;
    assert_eq!(replicas, "2");
    assert_eq!(
        jsonpath(ns.name(), "service/cache", "{.spec.clusterIP}")?,
        "None",
        "the Service is headless"
    );
    assert_eq!(
        jsonpath(
            ns.name(),
            "deployment/cache",
            "{.metadata.ownerReferences[0].kind}"
        )?,
        "Memcached"
    );
    assert_eq!(
        jsonpath(
            ns.name(),
            "deployment/cache",
            "{.spec.template.spec.automountServiceAccountToken}"
        )?,
        "false",
        "owned pods get no service account token"
    );
    kubectl_ok(
        &[
            "wait",
            "-n",
            ns.name(),
            "--for=condition=Ready",
            "memcached/cache",
            "--timeout=90s",
        ],
        None,
    )?;
    wait_ready_replicas(ns.name(), "2")?;
    eventually(WAIT, "status.nodes naming the 2 pods", || {
        let nodes = jsonpath(ns.name(), "memcached/cache", "{.status.nodes[*]}")?;
        let pods = instance_pods(ns.name(), "cache")?;
        Ok((pods.len() == 2 && nodes == pods.join(" ")).then_some(()))
    })?;
    // Reconciles after the rollout found the children as wanted in the watch caches, and sent
    // no apply: what the controller applies is contained in what the apiserver keeps.
    for kind in ["Deployment", "Service"] {
        let unchanged =
            format!(r#"kubesteer_child_checks_total{{kind="{kind}",outcome="unchanged"}}"#);
        let applied = format!(r#"kubesteer_child_checks_total{{kind="{kind}",outcome="applied"}}"#);
        eventually(WAIT, "a reconcile that needs no apply", || {
            Ok((controller.metric(&unchanged)? >= 1.0).then_some(()))
        })?;
        let applies = controller.metric(&applied)?;
        assert!(
            (1.0..=2.0).contains(&applies),
            "{kind} applied {applies} times for one Memcached that never changed"
        );
    }
    let columns = kubectl_ok(
        &["get", "-n", ns.name(), "mc", "cache", "--no-headers"],
        None,
    )?;
    let columns: Vec<&str> = columns.split_whitespace().collect();
    assert_eq!(
        columns[..3],
        ["cache", "2", "2"],
        "NAME SIZE READY: {columns:?}"
    );

    // The size change propagates.
    ns.merge_patch("memcached/cache", r#"{"spec":{"size":3}}"#)?;
    wait_ready_replicas(ns.name(), "3")?;
    eventually(WAIT, "3 nodes", || {
        let nodes = jsonpath(ns.name(), "memcached/cache", "{.status.nodes[*]}")?;
        Ok((nodes.split_whitespace().count() == 3).then_some(()))
    })?;

    // A hand edit of the owned Deployment is reverted.
    kubectl_ok(
        &["scale", "-n", ns.name(), "deployment/cache", "--replicas=5"],
        None,
    )?;
    eventually(WAIT, "the hand scale reverted to 3", || {
        let r = jsonpath(ns.name(), "deployment/cache", "{.spec.replicas}")?;
        Ok((r == "3").then_some(()))
    })?;

    // A deleted owned object is recreated.
    kubectl_ok(&["delete", "-n", ns.name(), "service/cache"], None)?;
    eventually(WAIT, "the Service recreated", || {
        Ok(kubectl(&["get", "-n", ns.name(), "service/cache"], None)?
            .ok
            .then_some(()))
    })?;
    eventually(WAIT, "a Normal event for each creation", || {
        let notes = event_notes(ns.name(), "Created")?;
        anyhow::ensure!(
            notes
                == [
                    "Created Deployment cache, Service cache",
                    "Created Service cache"
                ],
            "Created events: {notes:?}"
        );
        Ok(Some(()))
    })?;

    // Deleting the Memcached garbage-collects what it owns.
    kubectl_ok(
        &["delete", "-n", ns.name(), "memcached/cache", "--wait=true"],
        None,
    )?;
    eventually(WAIT, "the Deployment and Service collected", || {
        let d = kubectl(&["get", "-n", ns.name(), "deployment/cache"], None)?;
        let s = kubectl(&["get", "-n", ns.name(), "service/cache"], None)?;
        Ok((!d.ok && !s.ok).then_some(()))
    })?;
    assert!(
        !controller.logs().contains("panicked"),
        "{}",
        controller.logs()
    );
    Ok(())
}
