//! A Scaler re-applied as GitOps tools do, through the webhook and the real apiserver: with no
//! default stored inside a target, `kubectl apply` of the same file says `unchanged`, a second
//! server-side apply writes nothing, and the controller still scales a target without a
//! namespace in the Scaler's own namespace, which `status.targets` shows.
use std::time::Duration;

use anyhow::Result;
use kubesteer_tests::{
    eventually, hh_mm, jsonpath, kubectl, kubectl_ok, unix_now, ControllerProcess, Namespace,
    Webhook,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// A Scaler `name` of `target` (no namespace) whose window is open now, at 3 replicas.
fn open_window(name: &str, target: &str) -> String {
    let now = unix_now();
    format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: {name}}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: {target}}}], windows: [{{start: \"{}\", end: \"{}\", replicas: 3}}]}}\n",
        hh_mm(now - 3600),
        hh_mm(now + 3600)
    )
}

fn version(ns: &Namespace, name: &str) -> Result<String> {
    jsonpath(
        ns.name(),
        &format!("scaler/{name}"),
        "{.metadata.resourceVersion}",
    )
}

fn server_side_apply(ns: &Namespace, yaml: &str) -> Result<String> {
    let run = kubectl(
        &["apply", "--server-side", "-n", ns.name(), "-f", "-"],
        Some(yaml),
    )?;
    anyhow::ensure!(run.ok, "{run:?}");
    Ok(run.stdout)
}

/// Waits until the apiserver sends this namespace's Scalers to the webhook: two targets that
/// are one once resolved pass the schema (which cannot know the namespace) but not the webhook.
fn wait_for_the_webhook(ns: &Namespace) -> Result<()> {
    let probe = format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: probe}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}, {{apiVersion: apps/v1, kind: Deployment, name: web, namespace: {}}}], windows: [{{start: 1, end: 2}}]}}\n",
        ns.name()
    );
    eventually(WAIT, "the webhook to see the namespace", || {
        let run = kubectl(
            &["create", "--dry-run=server", "-n", ns.name(), "-f", "-"],
            Some(&probe),
        )?;
        Ok((!run.ok
            && run
                .stderr
                .contains("spec.scaleTargetRefs[1]: Duplicate value"))
        .then_some(()))
    })
}

#[test]
fn a_scaler_without_target_namespaces_reapplies_unchanged_and_scales_its_own_namespace(
) -> Result<()> {
    let webhook = Webhook::start("scl-reapply")?;
    let ns = webhook.namespace("scl-reapply")?;
    ns.create_deployment("web", 1)?;
    ns.create_deployment("api", 1)?;
    wait_for_the_webhook(&ns)?;

    // Client-side, as `kubectl apply -f` in a pipeline.
    let csa = open_window("csa", "web");
    let run = ns.apply(&csa)?;
    assert!(run.ok, "{run:?}");
    let object: Value = serde_json::from_str(&kubectl_ok(
        &["get", "-n", ns.name(), "scaler/csa", "-o", "json"],
        None,
    )?)?;
    assert_eq!(
        object["spec"]["scaleTargetRefs"],
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}])
    );
    assert_eq!(
        object["spec"]["timeZone"], "UTC",
        "top-level defaults are still stored"
    );
    let again = ns.apply(&csa)?;
    assert!(
        again.stdout.contains("scaler.kubesteer.io/csa unchanged"),
        "{again:?}"
    );

    // Server-side, as Argo CD and Flux do: the second apply must not write the object again.
    let ssa = open_window("ssa", "api");
    assert!(server_side_apply(&ns, &ssa)?.contains("serverside-applied"));
    let first = version(&ns, "ssa")?;
    server_side_apply(&ns, &ssa)?;
    assert_eq!(
        version(&ns, "ssa")?,
        first,
        "the second server-side apply wrote the Scaler again"
    );

    // The controller resolves the missing namespace to the Scaler's own, for both.
    let _controller = ControllerProcess::start(ns.name())?;
    for (scaler, target) in [("csa", "web"), ("ssa", "api")] {
        eventually(WAIT, &format!("{target} scaled by {scaler}"), || {
            let replicas = jsonpath(
                ns.name(),
                &format!("deployment/{target}"),
                "{.spec.replicas}",
            )?;
            let status = jsonpath(
                ns.name(),
                &format!("scaler/{scaler}"),
                "{.status.targets[0].namespace}/{.status.targets[0].name}={.status.targets[0].replicas}",
            )?;
            Ok((replicas == "3" && status == format!("{}/{target}=3", ns.name())).then_some(()))
        })?;
    }
    // The controller's own writes (finalizer, status) do not make the file differ either.
    let later = ns.apply(&csa)?;
    assert!(
        later.stdout.contains("scaler.kubesteer.io/csa unchanged"),
        "{later:?}"
    );
    Ok(())
}
