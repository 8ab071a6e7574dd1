//! One object that cannot be decoded does not stop the others: a Memcached stored under an older
//! schema with `size: 3000000000` (out of i32) is logged and left out, while the Memcached beside
//! it is reconciled as usual.
//!
//! The test loosens the installed Memcached CRD for a moment to store the bad object, as an older
//! version of kubesteer (or none) would have let through. It is the only test of its binary, and
//! cargo runs test binaries one after another, so no other test sees the loosened schema.
use std::time::Duration;

use anyhow::{ensure, Result};
use kubesteer_tests::{
    eventually, jsonpath, kubectl, kubectl_ok, repo_root, ControllerProcess, Namespace,
};

const CRD: &str = "memcacheds.kubesteer.io";
const SIZE: &str = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/size";
const WAIT: Duration = Duration::from_secs(90);

/// Puts the CRD of `charts/kubesteer/files/crds/` back when dropped, however the test ends.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        let crd = repo_root().join("charts/kubesteer/files/crds/memcacheds.kubesteer.io.yaml");
        let crd = crd.to_string_lossy();
        let _ = kubectl(
            &["apply", "--server-side", "--force-conflicts", "-f", &crd],
            None,
        );
    }
}

#[test]
fn an_undecodable_memcached_is_skipped_and_the_others_are_reconciled() -> Result<()> {
    let ns = Namespace::new("ctl-poison")?;
    let restore = Restore;
    let loosen = format!(
        r#"[{{"op": "remove", "path": "{SIZE}/maximum"}}, {{"op": "remove", "path": "{SIZE}/format"}}]"#
    );
    kubectl_ok(&["patch", "crd", CRD, "--type=json", "-p", &loosen], None)?;
    let poison = "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: poison}\nspec: {size: 3000000000}\n";
    // The apiserver may take a moment to serve the loosened schema.
    eventually(WAIT, "the out-of-range Memcached stored", || {
        Ok(ns.apply(poison)?.ok.then_some(()))
    })?;
    drop(restore);
    let stored = jsonpath(ns.name(), "memcached/poison", "{.spec.size}")?;
    ensure!(stored == "3000000000", "stored size {stored}");

    let good = "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: good}\nspec: {size: 1}\n";
    let run = ns.apply(good)?;
    assert!(run.ok, "{run:?}");
    let controller = ControllerProcess::start(ns.name())?;
    let replicas = eventually(WAIT, "the good Memcached's Deployment", || {
        let run = kubectl(
            &[
                "get",
                "deployment",
                "good",
                "-n",
                ns.name(),
                "-o",
                "jsonpath={.spec.replicas}",
            ],
            None,
        )?;
        Ok(run.ok.then(|| run.stdout.trim().to_string()))
    });
    let logs = controller.logs();
    assert_eq!(replicas?, "1", "{logs}");
    eventually(WAIT, "the good Memcached Ready", || {
        let ready = jsonpath(
            ns.name(),
            "memcached/good",
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        )?;
        Ok((ready == "True").then_some(()))
    })?;
    let logs = controller.logs();
    let skipped = logs
        .lines()
        .find(|l| l.contains("cannot decode") && l.contains("poison"))
        .unwrap_or_default();
    assert!(
        skipped.contains("spec.size"),
        "the log names the field: {logs}"
    );
    assert!(
        kubectl(&["get", "deployment", "poison", "-n", ns.name()], None)?
            .stderr
            .contains("NotFound"),
        "nothing is made for the undecodable object"
    );
    Ok(())
}
