//! The v1alpha1 stash (`kubesteer.io/v1beta1-fields`) through the real apiserver: a user who may
//! update Scalers but not `scalers/status` writes a status into the annotation with a v1alpha1
//! `replace`, and the stored v1beta1 status stays the one the status writer set; a stash holding
//! an invalid v1beta1 spec is denied by the webhook, which reviews the v1alpha1 write as v1beta1.
//!
//! Its webhook owns the CRD's conversion while it runs (as in `scaler_conversion.rs`), so this
//! file holds one test.
use anyhow::{Context, Result};
use kubesteer_tests::{grant, kubectl, kubectl_ok, Namespace, Webhook};
use serde_json::{json, Value};

const STASH: &str = "kubesteer.io/v1beta1-fields";
const USER: &str = "mallory";

fn read_as(user: Option<&str>, ns: &Namespace, version: &str) -> Result<Value> {
    let object = format!("scalers.{version}.kubesteer.io/s");
    let mut args = vec!["get", "-n", ns.name(), &object, "-o", "json"];
    let as_user = user.map(|u| format!("--as={u}"));
    args.extend(as_user.as_deref());
    Ok(serde_json::from_str(&kubectl_ok(&args, None)?)?)
}

/// `object` (read as v1alpha1) with its stash changed by `edit`, written back as `user` with
/// `kubectl replace`.
fn replace_with_stash(
    ns: &Namespace,
    mut object: Value,
    edit: impl FnOnce(&mut Value),
) -> Result<kubesteer_tests::Run> {
    let annotations = &mut object["metadata"]["annotations"];
    let mut stash: Value = match annotations[STASH].as_str() {
        Some(raw) => serde_json::from_str(raw).context("the stash is JSON")?,
        None => json!({}),
    };
    edit(&mut stash);
    annotations[STASH] = Value::String(stash.to_string());
    kubectl(
        &[
            "replace",
            &format!("--as={USER}"),
            "-n",
            ns.name(),
            "-f",
            "-",
        ],
        Some(&object.to_string()),
    )
}

#[test]
fn a_status_written_into_the_v1alpha1_stash_never_reaches_the_status() -> Result<()> {
    let webhook = Webhook::start_converting("stash")?;
    let ns = webhook.namespace("stash")?;
    ns.create_deployment("web", 1)?;
    let beta = "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: s}\nspec:\n  scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}]\n  windows: [{start: 1, end: 2, replicas: 2}, {days: [Sat], start: 3, end: 4, replicas: 3}]\n  hpaCooperation: Disabled\n";
    let run = ns.apply(beta)?;
    assert!(run.ok, "{run:?}");
    // The status the status writer (here the admin, as the controller would) sets: all of it
    // expressible in v1alpha1, so a v1alpha1 write leaves it exactly as it is.
    let status = json!({
        "active": false,
        "nextTransitions": [{"time": "2030-01-01T01:00:00Z"}],
        "targets": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                     "namespace": ns.name(), "replicas": 1}]
    });
    kubectl_ok(
        &[
            "patch",
            "-n",
            ns.name(),
            "scalers.v1beta1.kubesteer.io/s",
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({ "status": status }).to_string(),
        ],
        None,
    )?;
    let before = read_as(None, &ns, "v1beta1")?;
    assert_eq!(before["status"], status, "{before}");

    // mallory may update Scalers and scale web, and may not write their status.
    grant(
        ns.name(),
        "scaler-editor",
        "get,list,update,patch",
        "scalers.kubesteer.io",
        USER,
    )?;
    grant(
        ns.name(),
        "web-scaler",
        "patch",
        "deployments.apps/scale",
        USER,
    )?;
    let can_i = kubectl(
        &[
            "auth",
            "can-i",
            "update",
            "scalers.kubesteer.io",
            "--subresource=status",
            "-n",
            ns.name(),
            &format!("--as={USER}"),
        ],
        None,
    )?;
    assert_eq!(can_i.stdout.trim(), "no", "{can_i:?}");

    // A status in the stash: an override, transitions, and web as a StatefulSet with an HPA
    // (the shape earlier versions read back when v1alpha1 showed the same name and replicas).
    let alpha = read_as(Some(USER), &ns, "v1alpha1")?;
    let namespace = ns.name().to_string();
    let run = replace_with_stash(&ns, alpha.clone(), move |stash| {
        stash["status"] = json!({
            "override": {"replicas": 50, "until": "2099-01-01T00:00:00Z"},
            "nextTransitions": [{"time": "2030-01-01T01:00:00Z", "replicas": 50},
                                {"time": "2030-01-01T02:00:00Z", "replicas": 50}],
            "targets": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                         "namespace": namespace, "replicas": 1,
                         "horizontalPodAutoscaler": "theirs"}]
        });
    })?;
    assert!(run.ok, "mallory may update the Scaler: {run:?}");
    let after = read_as(None, &ns, "v1beta1")?;
    assert_eq!(
        after["status"], status,
        "the status is the status writer's: {after}"
    );
    assert_eq!(after["spec"], before["spec"], "{after}");
    assert!(after["metadata"]["annotations"][STASH].is_null(), "{after}");

    // An invalid v1beta1 spec in the stash is judged as v1beta1 (matchPolicy Equivalent): denied,
    // each field named by its v1beta1 path, and nothing stored.
    let alpha = read_as(Some(USER), &ns, "v1alpha1")?;
    let run = replace_with_stash(&ns, alpha, |stash| {
        stash["windows"] = json!([{"start": 20, "end": 20}]);
        stash["override"] = json!({"replicas": 3, "until": "2020-01-01T00:00:00Z"});
    })?;
    assert!(!run.ok, "{run:?}");
    for field in ["spec.windows[1].end", "spec.override.until"] {
        assert!(run.stderr.contains(field), "{field} not in {}", run.stderr);
    }
    let unchanged = read_as(None, &ns, "v1beta1")?;
    assert_eq!(unchanged["spec"], before["spec"], "{unchanged}");
    Ok(())
}
