//! The webhook through a real apiserver with real kubectl: denials that name fields, defaults the
//! apiserver really applies (proving the patch encoding), warnings, dry-run and permissions.
use anyhow::Result;
use kubesteer_tests::{apply_as, grant, jsonpath, kubectl, kubectl_ok, Webhook};
use serde_json::Value;

const MC: &str = "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\n";
const WEL: &str = "apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\n";
const SCL: &str = "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\n";

fn get_json(ns: &str, what: &str) -> Result<Value> {
    Ok(serde_json::from_str(&kubectl_ok(
        &["get", "-n", ns, what, "-o", "json"],
        None,
    )?)?)
}

#[test]
fn defaults_are_stored_and_reapplying_is_unchanged() -> Result<()> {
    let webhook = Webhook::start("defaults")?;
    let ns = webhook.namespace("defaults")?;
    let mc = format!("{MC}metadata: {{name: cache}}\nspec: {{}}\n");
    let out = ns.apply(&mc)?;
    assert!(out.ok, "{out:?}");
    let spec = &get_json(ns.name(), "memcached/cache")?["spec"];
    assert_eq!(spec["size"], 1, "{spec}");
    assert_eq!(spec["port"], 11211);
    assert_eq!(spec["memoryMB"], 64);
    assert_eq!(spec["image"], kubesteer_api::memcached::DEFAULT_IMAGE);
    assert_eq!(spec["resources"]["requests"]["memory"], "128Mi");
    let again = ns.apply(&mc)?;
    assert!(
        again
            .stdout
            .contains("memcached.kubesteer.io/cache unchanged"),
        "{again:?}"
    );

    let wel = format!("{WEL}metadata: {{name: hello}}\nspec: {{name: kubesteer, port: 9000}}\n");
    assert!(ns.apply(&wel)?.ok);
    let spec = &get_json(ns.name(), "welcome/hello")?["spec"];
    assert_eq!(
        (spec["port"].as_i64(), spec["replicas"].as_i64()),
        (Some(9000), Some(1)),
        "{spec}"
    );
    assert_eq!(spec["serviceType"], "NodePort");

    ns.create_deployment("web", 1)?;
    let scl = format!("{SCL}metadata: {{name: hours}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}], windows: [{{start: 9, end: \"17:30\"}}]}}\n");
    assert!(ns.apply(&scl)?.ok);
    let spec = &get_json(ns.name(), "scaler/hours")?["spec"];
    // Nothing is stored inside a target (its namespace is resolved when read), so the
    // re-apply is `unchanged` (tests/e2e/scaler/reapply.rs goes further).
    assert_eq!(
        spec["scaleTargetRefs"],
        serde_json::json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]),
        "{spec}"
    );
    assert_eq!(
        (spec["suspend"].as_bool(), spec["timeZone"].as_str()),
        (Some(false), Some("UTC"))
    );
    let again = ns.apply(&scl)?;
    assert!(
        again.stdout.contains("scaler.kubesteer.io/hours unchanged"),
        "{again:?}"
    );
    Ok(())
}

/// Applies `yaml` and expects a denial from the webhook or the schema naming every field in `fields`.
fn expect_denied(ns: &kubesteer_tests::Namespace, yaml: &str, fields: &[&str]) -> Result<String> {
    let run = ns.apply(yaml)?;
    assert!(!run.ok, "accepted:\n{yaml}\n{}", run.stdout);
    for f in fields {
        assert!(run.stderr.contains(f), "{f:?} not named in: {}", run.stderr);
    }
    Ok(run.stderr)
}

#[test]
fn invalid_objects_of_every_kind_are_denied_naming_each_field() -> Result<()> {
    let webhook = Webhook::start("denials")?;
    let ns = webhook.namespace("denials")?;
    let denied_by_webhook = "denied the request";
    let mc = |name: &str, spec: &str| format!("{MC}metadata: {{name: {name}}}\nspec: {spec}\n");
    for (yaml, fields) in [
        (
            mc("m1", "{image: \"memcached latest\"}"),
            vec!["spec.image"],
        ),
        (mc("m2", "{size: 101, image: \"a b\"}"), vec!["spec.size"]),
        (mc("m3", "{port: 0}"), vec!["spec.port"]),
        (mc("m4", "{memoryMB: 0}"), vec!["spec.memoryMB"]),
        (mc("m5", "{size: \"three\"}"), vec!["spec.size"]),
    ] {
        expect_denied(&ns, &yaml, &fields)?;
    }
    let wel = |name: &str, spec: &str| format!("{WEL}metadata: {{name: {name}}}\nspec: {spec}\n");
    for (yaml, fields) in [
        (
            wel("w1", "{name: x, email: \"not-an-email\"}"),
            vec!["spec.email"],
        ),
        (
            wel(
                "w2",
                "{name: x, passwordSecretRef: {name: \"Bad_Name\", key: k}}",
            ),
            vec!["spec.passwordSecretRef.name"],
        ),
        (
            wel("w3", "{name: \"\", port: 0}"),
            vec!["spec.name", "spec.port"],
        ),
        (
            wel("w4", "{name: x, userID: 70000, replicas: 101}"),
            vec!["spec.userID", "spec.replicas"],
        ),
        (
            wel("w5", "{name: x, image: \"a b\", groups: [\"\"]}"),
            vec!["spec.groups[0]"],
        ),
        (
            wel("w6", "{name: x, image: \"with space\"}"),
            vec!["spec.image"],
        ),
    ] {
        expect_denied(&ns, &yaml, &fields)?;
    }
    let scl = |name: &str, spec: &str| format!("{SCL}metadata: {{name: {name}}}\nspec: {spec}\n");
    for (yaml, fields) in [
        (scl("s1", "{scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 9, end: \"09:00\"}]}"), vec!["spec.windows[0].end", "must differ from start"]),
        (scl("s2", "{scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 9, end: 17}], timeZone: Mars/Olympus}"), vec!["spec.timeZone", denied_by_webhook]),
        (scl("s3", "{scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], jobs: [{name: a, schedule: \"not cron\", replicas: 1}]}"), vec!["spec.jobs[0].schedule", denied_by_webhook]),
        (scl("s4", "{scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: Web}], windows: [{start: 1, end: 2}]}"), vec!["spec.scaleTargetRefs[0].name"]),
        (scl("s5", "{scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 25, end: 3}]}"), vec!["spec.windows[0].start"]),
        (scl("s7", "{scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], jobs: [{name: a, schedule: \"0 0 30 2 *\", replicas: 1}]}"), vec!["spec.jobs[0].schedule", "never fires", denied_by_webhook]),
        (scl("s6", "{scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 1, end: 2}], jobs: [{name: a, schedule: \"@hourly\", replicas: 1}]}"), vec!["exactly one of windows and jobs is required"]),
    ] {
        expect_denied(&ns, &yaml, &fields)?;
    }
    // The schema refuses the rest before the validating webhook is asked (tests/e2e/webhook/agreement.rs).
    let denials = webhook.log().matches("denied").count();
    assert!(
        denials >= 3,
        "one log line per denial, got {denials}:\n{}",
        webhook.log()
    );
    Ok(())
}

#[test]
fn an_invalid_update_is_denied_and_the_object_is_unchanged() -> Result<()> {
    let webhook = Webhook::start("update")?;
    let ns = webhook.namespace("update")?;
    assert!(
        ns.apply(&format!(
            "{MC}metadata: {{name: cache}}\nspec: {{size: 2}}\n"
        ))?
        .ok
    );
    let run = kubectl(
        &[
            "patch",
            "-n",
            ns.name(),
            "memcached/cache",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":3,"image":"bad image"}}"#,
        ],
        None,
    )?;
    assert!(!run.ok);
    assert!(
        run.stderr
            .contains("spec.image: Invalid value: \"bad image\""),
        "{}",
        run.stderr
    );
    assert_eq!(
        jsonpath(ns.name(), "memcached/cache", "{.spec.size}")?,
        "2",
        "nothing half-applied"
    );
    Ok(())
}

#[test]
fn warnings_are_printed_by_kubectl() -> Result<()> {
    let webhook = Webhook::start("warnings")?;
    let ns = webhook.namespace("warnings")?;
    let run = ns.apply(&format!(
        "{WEL}metadata: {{name: hello}}\nspec: {{name: x, password: hunter2}}\n"
    ))?;
    assert!(run.ok, "{run:?}");
    assert!(
        run.stderr.contains("Warning: spec.password")
            && run.stderr.contains("last-applied-configuration"),
        "{}",
        run.stderr
    );
    // The warning says where the text stays, and it is there indeed.
    let applied = kubesteer_tests::jsonpath(
        ns.name(),
        "welcome/hello",
        "{.metadata.annotations.kubectl\\.kubernetes\\.io/last-applied-configuration}",
    )?;
    assert!(applied.contains("hunter2"), "{applied}");
    assert!(
        !webhook.log().contains("hunter2"),
        "the password must never be logged"
    );
    let run = ns.apply(&format!("{SCL}metadata: {{name: later}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: not-yet}}], windows: [{{start: 1, end: 2}}]}}\n"))?;
    assert!(run.ok, "{run:?}");
    assert!(
        run.stderr
            .contains("Warning: spec.scaleTargetRefs[0]: Deployment")
            && run.stderr.contains("does not exist yet"),
        "{}",
        run.stderr
    );
    ns.create_deployment("web", 1)?;
    kubectl_ok(
        &["autoscale", "deployment", "web", "-n", ns.name(), "--max=3"],
        None,
    )?;
    let hpa_seen = kubesteer_tests::eventually(
        std::time::Duration::from_secs(10),
        "HPA warning",
        || {
            let run = ns.apply(&format!("{SCL}metadata: {{name: office}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}], windows: [{{start: 1, end: 2}}]}}\n"))?;
            Ok(run
                .stderr
                .contains("HorizontalPodAutoscaler web")
                .then_some(run))
        },
    )?;
    assert!(hpa_seen.ok);
    Ok(())
}

#[test]
fn server_side_dry_run_defaults_without_storing() -> Result<()> {
    let webhook = Webhook::start("dryrun")?;
    let ns = webhook.namespace("dryrun")?;
    let out = kubectl_ok(
        &[
            "apply",
            "-n",
            ns.name(),
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
        ],
        Some(&format!("{MC}metadata: {{name: dry}}\nspec: {{}}\n")),
    )?;
    let object: Value = serde_json::from_str(&out)?;
    assert_eq!(object["spec"]["size"], 1, "{object}");
    let run = kubectl(&["get", "-n", ns.name(), "memcached/dry"], None)?;
    assert!(!run.ok && run.stderr.contains("NotFound"), "{run:?}");
    let run = kubectl(
        &["apply", "-n", ns.name(), "--dry-run=server", "-f", "-"],
        Some(&format!(
            "{MC}metadata: {{name: dry}}\nspec: {{image: \"a b\"}}\n"
        )),
    )?;
    assert!(
        !run.ok && run.stderr.contains("spec.image"),
        "dry-run denies like a real request: {run:?}"
    );
    Ok(())
}

#[test]
fn cross_namespace_targets_need_permission_and_targets_are_not_shared() -> Result<()> {
    let webhook = Webhook::start("crossns")?;
    let ns = webhook.namespace("crossns")?;
    let other = kubesteer_tests::Namespace::new("crossns-prod")?;
    other.create_deployment("web", 1)?;
    kubectl_ok(
        &[
            "create",
            "role",
            "scaler-editor",
            "-n",
            ns.name(),
            "--verb=get,list,create,update,patch",
            "--resource=scalers.kubesteer.io",
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "create",
            "rolebinding",
            "bob",
            "-n",
            ns.name(),
            "--role=scaler-editor",
            "--user=bob",
        ],
        None,
    )?;
    // HPA cooperation off: it would also need `patch` on that namespace's HPAs, and this test
    // is about the scale permission alone (tests/e2e/scaler/v1beta1.rs covers HPAs).
    let yaml = format!("{SCL}metadata: {{name: remote}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web, namespace: {}}}], windows: [{{start: 1, end: 2}}], hpaCooperation: Disabled}}\n", other.name());
    let run = kubectl(
        &["apply", "--as=bob", "-n", ns.name(), "-f", "-"],
        Some(&yaml),
    )?;
    assert!(!run.ok, "{run:?}");
    let want = format!("spec.scaleTargetRefs[0]: Forbidden: user \"bob\" may not patch deployments/scale (apps) \"web\" in namespace \"{}\"", other.name());
    assert!(run.stderr.contains(&want), "{}", run.stderr);
    // The cluster admin may scale there, so the same object is admitted for them.
    assert!(ns.apply(&yaml)?.ok);
    let second = format!("{SCL}metadata: {{name: rival}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web, namespace: {}}}], windows: [{{start: 3, end: 4}}], hpaCooperation: Disabled}}\n", other.name());
    // The webhook learns of `remote` through its watch: ask by server-side dry run (which stores
    // nothing) until it denies, so a create that races the watch cannot slip `rival` in.
    let want = format!("is already scaled by Scaler {}/remote", ns.name());
    let dry = kubesteer_tests::eventually(
        std::time::Duration::from_secs(30),
        "claim denial (dry run)",
        || {
            let run = kubectl(
                &["create", "--dry-run=server", "-n", ns.name(), "-f", "-"],
                Some(&second),
            )?;
            Ok((!run.ok).then_some(run))
        },
    )?;
    assert!(dry.stderr.contains(&want), "{}", dry.stderr);
    // Claims are ordered by creationTimestamp, whole seconds, then by uid (api/src/scaler/claims.rs):
    // created within the same second as `remote`, `rival` would win or lose by its random uid.
    let created = kubectl_ok(
        &[
            "get",
            "scaler",
            "remote",
            "-n",
            ns.name(),
            "-o",
            "jsonpath={.metadata.creationTimestamp}",
        ],
        None,
    )?;
    let created = chrono::DateTime::parse_from_rfc3339(created.trim())
        .map_err(|e| anyhow::anyhow!("remote's creationTimestamp {created:?}: {e}"))?;
    kubesteer_tests::eventually(
        std::time::Duration::from_secs(5),
        "a second later than remote's creation",
        || Ok((chrono::Utc::now() >= created + chrono::TimeDelta::seconds(1)).then_some(())),
    )?;
    let claimed = ns.apply(&second)?;
    assert!(!claimed.ok, "{claimed:?}");
    assert!(claimed.stderr.contains(&want), "{}", claimed.stderr);
    Ok(())
}

#[test]
fn a_same_namespace_target_needs_permission_to_scale_it_and_tells_nothing_otherwise() -> Result<()>
{
    let webhook = Webhook::start("samens")?;
    let ns = webhook.namespace("samens")?;
    ns.create_deployment("web", 1)?;
    grant(
        ns.name(),
        "scaler-editor",
        "get,list,create,update,patch",
        "scalers.kubesteer.io",
        "carol",
    )?;
    // HPA cooperation off, as above: only the scale permission is asked for.
    let yaml = format!("{SCL}metadata: {{name: own}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}, {{apiVersion: apps/v1, kind: Deployment, name: hidden}}], windows: [{{start: 1, end: 2}}], hpaCooperation: Disabled}}\n");
    let run = apply_as("carol", ns.name(), &yaml)?;
    assert!(!run.ok, "{run:?}");
    for (i, name) in ["web", "hidden"].iter().enumerate() {
        let want = format!("spec.scaleTargetRefs[{i}]: Forbidden: user \"carol\" may not patch deployments/scale (apps) \"{name}\" in namespace \"{}\"", ns.name());
        assert!(run.stderr.contains(&want), "{want} not in {}", run.stderr);
    }
    assert!(
        !run.stderr.contains("does not exist"),
        "a denied target's existence is not told: {}",
        run.stderr
    );
    grant(
        ns.name(),
        "scaler-scale",
        "patch",
        "deployments.apps/scale",
        "carol",
    )?;
    // RBAC reaches the authorizer through its informer; the webhook keeps a denial for 2 s.
    let admitted =
        kubesteer_tests::eventually(std::time::Duration::from_secs(10), "grant seen", || {
            let run = apply_as("carol", ns.name(), &yaml)?;
            Ok(run.ok.then_some(run))
        })?;
    assert!(
        admitted
            .stderr
            .contains("Warning: spec.scaleTargetRefs[1]: Deployment")
            && admitted.stderr.contains("does not exist yet"),
        "a permitted target gets the advice: {}",
        admitted.stderr
    );
    Ok(())
}

#[test]
fn a_welcome_may_reference_only_a_secret_its_author_may_read() -> Result<()> {
    let webhook = Webhook::start("secretref")?;
    let ns = webhook.namespace("secretref")?;
    kubectl_ok(
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            ns.name(),
            "--from-literal=pw=hunter2",
        ],
        None,
    )?;
    grant(
        ns.name(),
        "welcome-editor",
        "get,list,create,update,patch",
        "welcomes.kubesteer.io",
        "dave",
    )?;
    let yaml = format!("{WEL}metadata: {{name: hello}}\nspec: {{name: x, passwordSecretRef: {{name: creds, key: pw}}}}\n");
    let run = apply_as("dave", ns.name(), &yaml)?;
    assert!(!run.ok, "{run:?}");
    let want = format!("spec.passwordSecretRef.name: Forbidden: user \"dave\" may not get secrets \"creds\" in namespace \"{}\"", ns.name());
    assert!(run.stderr.contains(&want), "{}", run.stderr);
    // The cluster admin may read it, so the same object is admitted for them.
    let run = ns.apply(&yaml)?;
    assert!(run.ok, "{run:?}");
    let patch_as_dave =
        |patch: &str| kubesteer_tests::merge_patch_as("dave", ns.name(), "welcome/hello", patch);
    // An edit that keeps the ref is not a new claim on the Secret, so dave may make it.
    let run = patch_as_dave(r#"{"spec":{"replicas":2}}"#)?;
    assert!(run.ok, "{run:?}");
    // Another Secret, another key of it, or another image running with the password: asked.
    for patch in [
        r#"{"spec":{"passwordSecretRef":{"name":"other","key":"pw"}}}"#,
        r#"{"spec":{"passwordSecretRef":{"name":"creds","key":"root"}}}"#,
        r#"{"spec":{"image":"evil.example/exfiltrate:1"}}"#,
    ] {
        let run = patch_as_dave(patch)?;
        assert!(!run.ok, "{patch}: {run:?}");
        assert!(
            run.stderr
                .contains("spec.passwordSecretRef.name: Forbidden"),
            "{patch}: {}",
            run.stderr
        );
    }
    Ok(())
}
