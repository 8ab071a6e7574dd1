//! The controller never takes over an object it did not create: a hand-made Deployment with a
//! Memcached's name is left alone, reported as a NameConflict, and survives the Memcached.

use anyhow::Result;
use kubesteer_tests::{
    event_notes, eventually, jsonpath, kubectl_ok, ControllerProcess, Namespace,
};

use super::memcached::{MEMCACHED, WAIT};

fn ready_reason(ns: &str) -> Result<String> {
    jsonpath(
        ns,
        "memcached/cache",
        "{.status.conditions[?(@.type==\"Ready\")].status}/{.status.conditions[?(@.type==\"Ready\")].reason}",
    )
}

#[test]
fn a_hand_made_deployment_of_the_same_name_is_never_adopted_nor_collected() -> Result<()> {
    let ns = Namespace::new("ctl-conflict")?;
    let controller = ControllerProcess::start(ns.name())?;
    // Without kubesteer's labels, so the controller's label-filtered watch does not see it.
    kubectl_ok(
        &[
            "create",
            "deployment",
            "cache",
            "-n",
            ns.name(),
            "--image=nginx",
        ],
        None,
    )?;
    let uid = jsonpath(ns.name(), "deployment/cache", "{.metadata.uid}")?;
    let run = ns.apply(MEMCACHED)?;
    assert!(run.ok, "{run:?}");

    eventually(WAIT, "Ready=False, reason NameConflict", || {
        Ok((ready_reason(ns.name())? == "False/NameConflict").then_some(()))
    })?;
    let message = jsonpath(
        ns.name(),
        "memcached/cache",
        "{.status.conditions[?(@.type==\"Ready\")].message}",
    )?;
    assert!(message.contains("Deployment cache"), "{message}");
    eventually(WAIT, "a NameConflict event", || {
        let notes = event_notes(ns.name(), "NameConflict")?;
        Ok(notes
            .iter()
            .any(|n| n.contains("Deployment cache"))
            .then_some(()))
    })?;

    // A change to the Memcached is reconciled, and the Deployment is still the user's, untouched.
    ns.merge_patch("memcached/cache", r#"{"spec":{"size":3}}"#)?;
    ns.wait_observed("memcached/cache", WAIT)?;
    assert_eq!(ready_reason(ns.name())?, "False/NameConflict");
    assert_eq!(
        jsonpath(ns.name(), "deployment/cache", "{.spec.replicas}")?,
        "1",
        "the size was not applied to the user's Deployment"
    );
    let image = jsonpath(
        ns.name(),
        "deployment/cache",
        "{.spec.template.spec.containers[*].image}",
    )?;
    assert_eq!(image, "nginx");
    assert_eq!(
        jsonpath(ns.name(), "deployment/cache", "{.metadata.ownerReferences}")?,
        "",
        "no owner reference was added"
    );
    assert_eq!(
        jsonpath(
            ns.name(),
            "deployment/cache",
            "{.metadata.labels.app\\.kubernetes\\.io/managed-by}"
        )?,
        "",
        "no kubesteer label was added"
    );

    // Deleting the Memcached leaves the hand-made Deployment in place. A ConfigMap that the
    // Memcached does own shows when the garbage collector has dealt with its dependents.
    let memcached_uid = jsonpath(ns.name(), "memcached/cache", "{.metadata.uid}")?;
    kubectl_ok(
        &["apply", "-n", ns.name(), "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned-by-cache\n  ownerReferences:\n  - {{apiVersion: kubesteer.io/v1alpha1, kind: Memcached, name: cache, uid: {memcached_uid}}}\n"
        )),
    )?;
    kubectl_ok(
        &["delete", "-n", ns.name(), "memcached/cache", "--wait=true"],
        None,
    )?;
    eventually(
        WAIT,
        "the garbage collector to delete the Memcached's dependents",
        || {
            let left = kubectl_ok(
                &[
                    "get",
                    "-n",
                    ns.name(),
                    "configmap/owned-by-cache",
                    "--ignore-not-found",
                    "-o",
                    "name",
                ],
                None,
            )?;
            Ok(left.trim().is_empty().then_some(()))
        },
    )?;
    assert_eq!(
        jsonpath(ns.name(), "deployment/cache", "{.metadata.uid}")?,
        uid,
        "the hand-made Deployment survives its namesake"
    );
    assert!(
        !controller.logs().contains("panicked"),
        "{}",
        controller.logs()
    );
    Ok(())
}
