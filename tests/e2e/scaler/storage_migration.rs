//! Storage version migration by the chart's own controller: an object stored at v1alpha1 (made
//! the storage version for a moment) is stored again at v1beta1 when the controller's leader
//! starts, and the Scaler CRD's `status.storedVersions` goes back to `["v1beta1"]`, so that
//! v1alpha1 can stop being served. Its own test binary: it switches the CRD's storage and served
//! versions, which no other test may see, and runs a controller over the whole cluster.
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::{eventually, kubectl, kubectl_ok};

const CRD: &str = "crd/scalers.kubesteer.io";

/// The index of each version in the Scaler CRD's `spec.versions`.
fn version_index(name: &str) -> Result<usize> {
    let names = kubectl_ok(
        &["get", CRD, "-o", "jsonpath={.spec.versions[*].name}"],
        None,
    )?;
    names
        .split_whitespace()
        .position(|n| n == name)
        .with_context(|| format!("no version {name} in {names}"))
}

/// Sets which version is stored and whether v1alpha1 is served.
fn set_versions(storage: &str, alpha_served: bool) -> Result<()> {
    let alpha = version_index("v1alpha1")?;
    let beta = version_index("v1beta1")?;
    let patch = format!(
        r#"[{{"op":"replace","path":"/spec/versions/{alpha}/storage","value":{}}},
            {{"op":"replace","path":"/spec/versions/{beta}/storage","value":{}}},
            {{"op":"replace","path":"/spec/versions/{alpha}/served","value":{alpha_served}}}]"#,
        storage == "v1alpha1",
        storage == "v1beta1",
    );
    kubectl_ok(&["patch", CRD, "--type=json", "-p", &patch], None)?;
    Ok(())
}

fn stored_versions() -> Result<String> {
    kubectl_ok(
        &["get", CRD, "-o", "jsonpath={.status.storedVersions}"],
        None,
    )
}

/// Puts the CRD's versions back as installed, whatever the test did.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = set_versions("v1beta1", true) {
            eprintln!("could not restore the Scaler CRD's versions: {e:#}");
        }
    }
}

#[test]
fn the_leader_stores_every_object_at_the_storage_version_and_v1alpha1_can_go() -> Result<()> {
    // The controller over the whole cluster (no WATCH_NAMESPACE): only it may migrate.
    let release = Release::install("stor", &["--set-json", "controller.extraEnv=[]"])?;
    let _restore = Restore;
    let ns = release.user_ns.clone();

    set_versions("v1alpha1", true)?;
    let created = release.apply(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: kept}\n\
         spec:\n  scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}]\n  \
         timeZone: Europe/Berlin\n  \
         windows: [{start: \"08:00\", end: \"18:00\", replicas: 3}, {start: \"20:00\", end: \"22:00\", replicas: 2}]\n  \
         excludeDates: [\"--12-25\"]\n",
    )?;
    if !created.ok {
        bail!("creating the Scaler: {}", created.stderr);
    }
    let spec_of = || {
        kubectl_ok(
            &[
                "get",
                "scalers.v1beta1.kubesteer.io",
                "kept",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec}",
            ],
            None,
        )
    };
    // Stored at v1alpha1 now, and the CRD says so.
    eventually(
        Duration::from_secs(30),
        "v1alpha1 among storedVersions",
        || Ok(stored_versions()?.contains("v1alpha1").then_some(())),
    )?;
    let before = spec_of()?;

    // Back to v1beta1; a new leader migrates at its start.
    set_versions("v1beta1", true)?;
    let deployment = format!("deployment/{}-controller", release.fullname());
    kubectl_ok(
        &["rollout", "restart", &deployment, "-n", &release.namespace],
        None,
    )?;
    kubectl_ok(
        &[
            "rollout",
            "status",
            &deployment,
            "-n",
            &release.namespace,
            "--timeout=180s",
        ],
        None,
    )
    .with_context(|| release.describe())?;
    eventually(
        Duration::from_secs(120),
        "storedVersions [\"v1beta1\"]",
        || Ok((stored_versions()? == r#"["v1beta1"]"#).then_some(())),
    )
    .with_context(|| {
        let logs = kubectl(
            &["logs", "-n", &release.namespace, &deployment, "--tail=40"],
            None,
        )
        .map(|r| r.stdout + &r.stderr)
        .unwrap_or_default();
        format!("controller log:\n{logs}")
    })?;
    let logs = kubectl_ok(
        &[
            "logs",
            "-n",
            &release.namespace,
            "-l",
            "app.kubernetes.io/component=controller",
            "--tail=-1",
        ],
        None,
    )?;
    assert!(
        logs.contains("stored versions migrated"),
        "the leader logs the migration:\n{logs}"
    );
    assert_eq!(spec_of()?, before, "the object is intact");

    // v1alpha1 is no longer served: the object is still read, at v1beta1.
    set_versions("v1beta1", false)?;
    assert_eq!(spec_of()?, before, "read at v1beta1 with v1alpha1 gone");
    let alpha = kubectl(
        &["get", "scalers.v1alpha1.kubesteer.io", "kept", "-n", &ns],
        None,
    )?;
    assert!(!alpha.ok, "v1alpha1 is not served: {}", alpha.stdout);
    Ok(())
}
