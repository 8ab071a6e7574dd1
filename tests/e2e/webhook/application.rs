//! Application through the webhook and a real apiserver: defaults stored and re-applied as
//! `unchanged`, denials naming every field, the environment's Secrets and ConfigMaps checked
//! against the author's own rights, and the Ingress warnings (named only to who may read).
use anyhow::Result;
use kubesteer_tests::{apply_as, eventually, grant, jsonpath, kubectl_ok, unique, Webhook};
use serde_json::Value;

const APP: &str = "apiVersion: kubesteer.io/v1alpha1\nkind: Application\n";

#[test]
fn defaults_are_stored_once_and_reapplying_is_unchanged() -> Result<()> {
    let webhook = Webhook::start("app-defaults")?;
    let ns = webhook.namespace("app-defaults")?;
    // A host of its own: a host belongs to the namespace that serves it first.
    let yaml = format!(
        "{APP}metadata: {{name: site}}\nspec:\n  image: nginx:1.27\n  env: [{{name: A, value: '1'}}]\n  ingress: {{host: {}.foo.com}}\n",
        ns.name()
    );
    let run = ns.apply(&yaml)?;
    assert!(run.ok, "{run:?}");
    let object: Value = serde_json::from_str(&kubectl_ok(
        &["get", "-n", ns.name(), "application/site", "-o", "json"],
        None,
    )?)?;
    let spec = &object["spec"];
    assert_eq!(spec["replicas"], 1, "{spec}");
    assert_eq!(spec["port"], 8080);
    assert_eq!(spec["servicePort"], 80);
    assert_eq!(spec["ingress"]["path"], "/");
    assert_eq!(spec["ingress"]["pathType"], "Prefix");
    assert_eq!(
        spec["env"],
        serde_json::json!([{"name": "A", "value": "1"}])
    );
    let again = ns.apply(&yaml)?;
    assert!(
        again
            .stdout
            .contains("application.kubesteer.io/site unchanged"),
        "{again:?}"
    );
    // Server-side: the first apply takes the fields over from client-side apply; the second
    // must change nothing.
    let ssa = |name: &str| -> Result<String> {
        let yaml = yaml.replace("name: site", &format!("name: {name}"));
        let run = kubesteer_tests::kubectl(
            &["apply", "--server-side", "-n", ns.name(), "-f", "-"],
            Some(&yaml),
        )?;
        anyhow::ensure!(run.ok, "{run:?}");
        jsonpath(
            ns.name(),
            &format!("application/{name}"),
            "{.metadata.resourceVersion}",
        )
    };
    for name in ["site", "ssa"] {
        let first = ssa(name)?;
        assert_eq!(
            ssa(name)?,
            first,
            "re-applying {name} server-side wrote it again"
        );
    }
    Ok(())
}

#[test]
fn every_bad_field_is_named_in_one_denial() -> Result<()> {
    let webhook = Webhook::start("app-deny")?;
    let ns = webhook.namespace("app-deny")?;
    let cases = [
        (
            "spec: {image: 'Nginx:latest', replicas: 101, port: 0, ingress: {host: 'Bad_Host', path: shop}}",
            vec![
                "spec.image",
                "spec.replicas",
                "spec.port",
                "spec.ingress.host",
                "spec.ingress.path",
            ],
        ),
        ("spec: {replicas: 1}", vec!["spec.image"]),
        ("spec: {image: nginx, ingress: {path: /}}", vec!["spec.ingress.host"]),
        (
            "spec: {image: nginx, ingress: {host: '10.0.0.1'}}",
            vec!["spec.ingress.host"],
        ),
        (
            "spec: {image: nginx, ingress: {host: a.io, pathType: Regex}}",
            vec!["spec.ingress.pathType"],
        ),
        (
            "spec: {image: nginx, env: [{name: A, value: x}, {name: A, value: y}]}",
            vec!["spec.env[1]"],
        ),
    ];
    for (i, (spec, fields)) in cases.iter().enumerate() {
        let yaml = format!("{APP}metadata: {{name: bad{i}}}\n{spec}\n");
        let run = ns.apply(&yaml)?;
        assert!(!run.ok, "accepted:\n{yaml}\n{}", run.stdout);
        for f in fields {
            assert!(run.stderr.contains(f), "{f:?} not named in: {}", run.stderr);
        }
    }
    Ok(())
}

#[test]
fn the_environment_reads_only_what_its_author_may_read() -> Result<()> {
    let webhook = Webhook::start("app-env")?;
    let ns = webhook.namespace("app-env")?;
    grant(
        ns.name(),
        "app-editor",
        "get,list,create,update,patch",
        "applications.kubesteer.io",
        "erin",
    )?;
    let yaml = format!(
        "{APP}metadata: {{name: site}}\nspec:\n  image: nginx\n  env:\n  - {{name: PW, valueFrom: {{secretKeyRef: {{name: db, key: pw}}}}}}\n  - {{name: MODE, valueFrom: {{configMapKeyRef: {{name: cfg, key: mode}}}}}}\n"
    );
    let run = apply_as("erin", ns.name(), &yaml)?;
    assert!(!run.ok, "{run:?}");
    for want in [
        format!("spec.env[0].valueFrom.secretKeyRef.name: Forbidden: user \"erin\" may not get secrets \"db\" in namespace \"{}\"", ns.name()),
        format!("spec.env[1].valueFrom.configMapKeyRef.name: Forbidden: user \"erin\" may not get configmaps \"cfg\" in namespace \"{}\"", ns.name()),
    ] {
        assert!(run.stderr.contains(&want), "{want} not in {}", run.stderr);
    }
    grant(ns.name(), "read-db", "get", "secrets", "erin")?;
    grant(ns.name(), "read-cfg", "get", "configmaps", "erin")?;
    // RBAC reaches the authorizer through its informer; the webhook keeps a denial for 2 s.
    eventually(
        std::time::Duration::from_secs(10),
        "the grants seen",
        || Ok(apply_as("erin", ns.name(), &yaml)?.ok.then_some(())),
    )?;
    Ok(())
}

/// The probe of a Secret read through an image swap: bob may edit Applications, not read the
/// Secret `db` an admin's Application reads. He may scale it, but neither swap its image nor
/// read a second key of that Secret.
#[test]
fn an_image_swap_or_a_second_key_needs_the_right_to_read_the_secret() -> Result<()> {
    let webhook = Webhook::start("app-swap")?;
    let ns = webhook.namespace("app-swap")?;
    grant(
        ns.name(),
        "app-editor",
        "get,list,create,update,patch",
        "applications.kubesteer.io",
        "bob",
    )?;
    let yaml = format!(
        "{APP}metadata: {{name: site}}\nspec:\n  image: nginx\n  env:\n  - {{name: PW, valueFrom: {{secretKeyRef: {{name: db, key: pw}}}}}}\n"
    );
    let run = ns.apply(&yaml)?;
    assert!(run.ok, "the admin may: {run:?}");
    let patch_as_bob =
        |patch: &str| kubesteer_tests::merge_patch_as("bob", ns.name(), "application/site", patch);
    let run = patch_as_bob(r#"{"spec":{"replicas":3}}"#)?;
    assert!(
        run.ok,
        "an edit that runs nothing new with the Secret: {run:?}"
    );
    kubesteer_tests::application::secret_reads_denied_to_bob(ns.name())?;
    Ok(())
}

#[test]
fn ingress_warnings_name_a_missing_class_and_a_taken_host_only_to_who_may_read_it() -> Result<()> {
    let webhook = Webhook::start("app-warn")?;
    let ns = webhook.namespace("app-warn")?;
    let other = webhook.namespace("app-warn-other")?;
    let class = unique("kubesteer-e2e-");
    let host = format!("{class}.example.com");
    let app = |name: &str, host: &str| {
        format!("{APP}metadata: {{name: {name}}}\nspec: {{image: nginx, ingress: {{host: {host}, className: {class}}}}}\n")
    };
    let ingress = |name: &str, host: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}}}\nspec:\n  rules:\n  - host: {host}\n    http:\n      paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: x, port: {{number: 80}}}}}}}}\n"
        )
    };
    let run = ns.apply(&app("site", &host))?;
    assert!(run.ok, "{run:?}");
    let want = format!("spec.ingress.className: no IngressClass \"{class}\" exists");
    assert!(run.stderr.contains(&want), "{want} not in {}", run.stderr);

    let ingress_class = format!(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: {class}}}\nspec: {{controller: example.com/none}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&ingress_class))?;
    // Another Ingress of the same namespace on the same host and path: the admin may read it,
    // so it is named. The class exists now: no warning about it.
    kubectl_ok(
        &["apply", "-n", ns.name(), "-f", "-"],
        Some(&ingress("legacy", &host)),
    )?;
    let named = format!(
        "Ingress {}/legacy already serves host \"{host}\"",
        ns.name()
    );
    let run = eventually(
        std::time::Duration::from_secs(20),
        "the webhook's caches to see the class and the Ingress",
        || {
            let run = ns.apply(&app("site2", &host))?;
            Ok(
                (run.stderr.contains(&named) && !run.stderr.contains("no IngressClass"))
                    .then_some(run),
            )
        },
    )?;
    assert!(run.ok, "{run:?}");
    // frank may create Applications here but not Ingresses: the controller is no way around
    // that, so an Application with an Ingress is his only once he may create one himself.
    grant(
        ns.name(),
        "app-editor",
        "get,list,create,update,patch",
        "applications.kubesteer.io",
        "frank",
    )?;
    let run = apply_as("frank", ns.name(), &app("site3", &host))?;
    assert!(!run.ok, "{run:?}");
    let want = format!(
        "spec.ingress: Forbidden: user \"frank\" may not create ingresses (networking.k8s.io) in namespace \"{}\"",
        ns.name()
    );
    assert!(run.stderr.contains(&want), "{want} not in {}", run.stderr);
    grant(
        ns.name(),
        "ingress-creator",
        "create",
        "ingresses.networking.k8s.io",
        "frank",
    )?;
    // He may not read Ingresses: nothing is said about the one serving the host.
    let run = eventually(std::time::Duration::from_secs(10), "the grant seen", || {
        let run = apply_as("frank", ns.name(), &app("site3", &host))?;
        Ok(run.ok.then_some(run))
    })?;
    assert!(
        !run.stderr.contains("legacy") && !run.stderr.contains("already serves"),
        "told frank about an Ingress he may not read: {}",
        run.stderr
    );

    // A host that another namespace serves first is that namespace's: denied, and named only
    // to who may read the Ingress there.
    let shop = format!("shop-{class}.example.com");
    kubectl_ok(
        &["apply", "-n", other.name(), "-f", "-"],
        Some(&ingress("login", &shop)),
    )?;
    let named = format!(
        "spec.ingress.host: Forbidden: host \"{shop}\" is served by Ingress {}/login",
        other.name()
    );
    let run = eventually(
        std::time::Duration::from_secs(20),
        "the webhook's cache to see the other namespace's Ingress",
        || {
            let run = ns.apply(&app("hijack", &shop))?;
            Ok((!run.ok && run.stderr.contains(&named)).then_some(run))
        },
    )?;
    assert!(!run.ok, "{run:?}");
    let run = apply_as("frank", ns.name(), &app("hijack2", &shop))?;
    assert!(!run.ok, "{run:?}");
    assert!(
        run.stderr
            .contains("is served by an Ingress of another namespace")
            && !run.stderr.contains("login"),
        "{}",
        run.stderr
    );
    kubectl_ok(&["delete", "ingressclass", &class], None)?;
    Ok(())
}

/// Two namespaces racing for one new host get exactly one Application admitted, every round; a
/// wildcard and its hosts are one namespace's; a claim holds while its namespace serves the host
/// and is handed over once it does not (the scenario: `kubesteer_tests::hosts`).
#[test]
fn one_namespace_per_host_even_when_two_race_for_it() -> Result<()> {
    let webhook = Webhook::start("app-hosts")?;
    let a = webhook.namespace("app-hosts-a")?;
    let b = webhook.namespace("app-hosts-b")?;
    kubesteer_tests::hosts::one_namespace_per_host(&a, &b)
}
