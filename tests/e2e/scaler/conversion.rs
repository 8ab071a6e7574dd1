//! Both Scaler versions through the real apiserver and the webhook's `/convert`: a v1alpha1
//! object reads as one v1beta1 window and back unchanged, a v1beta1 object with what v1alpha1
//! cannot say survives a read and an edit as v1alpha1, re-applying the v1alpha1 file is
//! `unchanged`, and v1alpha1 requests carry the deprecation warning.
//!
//! One webhook here owns the CRD's conversion (the other test binaries never use v1alpha1).
use anyhow::Result;
use kubesteer_tests::{kubectl, kubectl_ok, Namespace, Webhook};
use serde_json::{json, Value};

fn read(ns: &Namespace, version: &str, name: &str) -> Result<Value> {
    let out = kubectl_ok(
        &[
            "get",
            "-n",
            ns.name(),
            &format!("scalers.{version}.kubesteer.io/{name}"),
            "-o",
            "json",
        ],
        None,
    )?;
    Ok(serde_json::from_str(&out)?)
}

#[test]
fn both_versions_read_and_write_the_same_scalers() -> Result<()> {
    let webhook = Webhook::start_converting("conv")?;
    let ns = webhook.namespace("conv")?;

    // v1alpha1 in, one window out, and the same v1alpha1 back.
    let alpha = "apiVersion: kubesteer.io/v1alpha1\nkind: Scaler\nmetadata: {name: old}\nspec:\n  deployments: [{name: web}, {name: api, namespace: prod}]\n  start: \"09:00\"\n  end: 17\n  replicas: 2\n  days: [Mon, Tue]\n";
    let run = ns.apply(alpha)?;
    assert!(run.ok, "{run:?}");
    assert!(
        run.stderr
            .contains("kubesteer.io/v1alpha1 Scaler is deprecated"),
        "{run:?}"
    );
    let beta = read(&ns, "v1beta1", "old")?;
    assert_eq!(
        beta["spec"]["scaleTargetRefs"],
        json!([
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "prod"}
        ])
    );
    assert_eq!(
        beta["spec"]["windows"],
        json!([{"days": ["Mon", "Tue"], "start": "09:00", "end": 17, "replicas": 2}])
    );
    let back = read(&ns, "v1alpha1", "old")?;
    assert_eq!(back["apiVersion"], "kubesteer.io/v1alpha1");
    assert_eq!(
        back["spec"]["deployments"],
        json!([{"name": "web"}, {"name": "api", "namespace": "prod"}])
    );
    assert_eq!(
        (
            &back["spec"]["start"],
            &back["spec"]["end"],
            &back["spec"]["replicas"]
        ),
        (&json!("09:00"), &json!(17), &json!(2))
    );
    assert!(
        back["metadata"]["annotations"]["kubesteer.io/v1beta1-fields"].is_null(),
        "nothing v1beta1-only to carry: {back}"
    );
    let again = ns.apply(alpha)?;
    assert!(
        again.stdout.contains("scaler.kubesteer.io/old unchanged"),
        "{again:?}"
    );

    // v1beta1 with two windows, a holiday and a StatefulSet: v1alpha1 shows the first window and
    // carries the rest, and an edit made as v1alpha1 keeps it.
    let rich = "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: new}\nspec:\n  scaleTargetRefs:\n  - {apiVersion: apps/v1, kind: Deployment, name: site}\n  - {apiVersion: apps/v1, kind: StatefulSet, name: db}\n  windows:\n  - {start: 8, end: 18, replicas: 3}\n  - {days: [Fri], start: 18, end: 23, replicas: 5}\n  excludeDates: [\"--12-25\"]\n  hpaCooperation: Disabled\n";
    let run = ns.apply(rich)?;
    assert!(run.ok, "{run:?}");
    let as_alpha = read(&ns, "v1alpha1", "new")?;
    assert_eq!(as_alpha["spec"]["replicas"], 3);
    assert!(
        as_alpha["metadata"]["annotations"]["kubesteer.io/v1beta1-fields"].is_string(),
        "{as_alpha}"
    );
    let patched = kubectl(
        &[
            "patch",
            "-n",
            ns.name(),
            "scalers.v1alpha1.kubesteer.io/new",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":4}}"#,
        ],
        None,
    )?;
    assert!(patched.ok, "{patched:?}");
    let beta = read(&ns, "v1beta1", "new")?;
    assert_eq!(beta["spec"]["windows"][0]["replicas"], 4, "{beta}");
    assert_eq!(
        beta["spec"]["windows"][1],
        json!({"days": ["Fri"], "start": 18, "end": 23, "replicas": 5})
    );
    assert_eq!(beta["spec"]["excludeDates"], json!(["--12-25"]));
    assert_eq!(beta["spec"]["scaleTargetRefs"][1]["kind"], "StatefulSet");
    assert!(
        beta["metadata"]["annotations"]["kubesteer.io/v1beta1-fields"].is_null(),
        "the carrier annotation is not left on the stored object: {beta}"
    );

    // Listing as v1alpha1 works and warns.
    let list = kubectl(
        &["get", "-n", ns.name(), "scalers.v1alpha1.kubesteer.io"],
        None,
    )?;
    assert!(list.ok, "{list:?}");
    assert!(list.stdout.contains("old") && list.stdout.contains("new"));
    assert!(list.stderr.contains("deprecated"), "{list:?}");
    Ok(())
}
