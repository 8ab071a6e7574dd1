//! The controller and Application, end to end on a real control plane: the Deployment, Service
//! and Ingress it owns, the status and columns a user reads, scaling, drift repair, adding and
//! removing the Ingress, and garbage collection.
use std::time::Duration;

use anyhow::Result;
use kubesteer_tests::{
    event_notes, eventually, json_patch, jsonpath, kubectl, kubectl_ok, ControllerProcess, Webhook,
};

const WAIT: Duration = Duration::from_secs(90);

/// The Application `site`, its Ingress for `host`: a host of each test's own, since a host
/// belongs to the namespace that serves it first and the tests share one cluster.
fn site(host: &str) -> String {
    format!(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Application\nmetadata: {{name: site}}\nspec:\n  image: nginx:1.27-alpine\n  port: 80\n  env: [{{name: MODE, value: prod}}]\n  ingress: {{host: {host}}}\n"
    )
}

fn wait_for(ns: &str, what: &str, object: &str, path: &str, want: &str) -> Result<()> {
    eventually(WAIT, what, || {
        let got = jsonpath(ns, object, path)?;
        Ok((got == want).then_some(()))
    })
}

fn exists(ns: &str, object: &str) -> Result<bool> {
    Ok(kubectl(&["get", "-n", ns, object], None)?.ok)
}

#[test]
fn application_owns_a_deployment_a_service_and_an_ingress() -> Result<()> {
    let webhook = Webhook::start("ctl-app")?;
    let ns = webhook.namespace("ctl-app")?;
    let n = ns.name();
    let controller = ControllerProcess::start(n)?;
    let host = format!("{n}.foo.com");
    let run = ns.apply(&site(&host))?;
    assert!(run.ok, "{run:?}");
    kubectl_ok(
        &[
            "wait",
            "-n",
            n,
            "--for=condition=Ready",
            "application/site",
            "--timeout=90s",
        ],
        None,
    )?;

    // The children, as the tutorial's: a Deployment, a ClusterIP Service, an Ingress.
    assert_eq!(jsonpath(n, "deployment/site", "{.spec.replicas}")?, "1");
    assert_eq!(
        jsonpath(
            n,
            "deployment/site",
            "{.spec.template.spec.containers[0].env[0].value}"
        )?,
        "prod"
    );
    assert_eq!(jsonpath(n, "service/site", "{.spec.type}")?, "ClusterIP");
    assert_eq!(jsonpath(n, "service/site", "{.spec.ports[0].port}")?, "80");
    assert_eq!(jsonpath(n, "ingress/site", "{.spec.rules[0].host}")?, host);
    assert_eq!(
        jsonpath(
            n,
            "ingress/site",
            "{.spec.rules[0].http.paths[0].backend.service.name}"
        )?,
        "site"
    );
    for child in ["deployment/site", "service/site", "ingress/site"] {
        assert_eq!(
            jsonpath(n, child, "{.metadata.ownerReferences[0].kind}")?,
            "Application",
            "{child}"
        );
    }
    wait_for(
        n,
        "the URL",
        "application/site",
        "{.status.url}",
        &format!("http://{host}/"),
    )?;
    let status = |path: &str| jsonpath(n, "application/site", path);
    assert_eq!(status("{.status.readyReplicas}")?, "1");
    assert_eq!(status("{.status.observedGeneration}")?, "1");
    for (condition, want) in [
        ("Ready", "True"),
        ("Available", "True"),
        ("Progressing", "False"),
        ("Degraded", "False"),
    ] {
        let path = format!("{{.status.conditions[?(@.type==\"{condition}\")].status}}");
        assert_eq!(status(&path)?, want, "{condition}");
    }
    let columns = kubectl_ok(&["get", "-n", n, "app", "site", "--no-headers"], None)?;
    let columns: Vec<&str> = columns.split_whitespace().collect();
    assert_eq!(
        columns[..4],
        ["site", "nginx:1.27-alpine", "1", &format!("http://{host}/")],
        "NAME IMAGE READY URL: {columns:?}"
    );

    // The Ingress controller's published address shows in the status.
    kubectl_ok(
        &[
            "patch",
            "-n",
            n,
            "ingress/site",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.7"}]}}}"#,
        ],
        None,
    )?;
    wait_for(
        n,
        "the address",
        "application/site",
        "{.status.loadBalancer}",
        "203.0.113.7",
    )?;

    // Scaling.
    ns.merge_patch("application/site", r#"{"spec":{"replicas":3}}"#)?;
    wait_for(
        n,
        "3 ready",
        "application/site",
        "{.status.readyReplicas}",
        "3",
    )?;

    // Drift: hand edits are reverted, a deleted child comes back.
    kubectl_ok(&["scale", "-n", n, "deployment/site", "--replicas=5"], None)?;
    wait_for(
        n,
        "the hand scale reverted",
        "deployment/site",
        "{.spec.replicas}",
        "3",
    )?;
    json_patch(
        n,
        "ingress/site",
        r#"[{"op":"replace","path":"/spec/rules/0/host","value":"evil.example.com"}]"#,
    )?;
    wait_for(
        n,
        "the hand-edited host reverted",
        "ingress/site",
        "{.spec.rules[0].host}",
        &host,
    )?;
    kubectl_ok(&["delete", "-n", n, "service/site"], None)?;
    eventually(WAIT, "the Service recreated", || {
        Ok(exists(n, "service/site")?.then_some(()))
    })?;

    // TLS turns the URL to https; removing the ingress deletes the Ingress.
    ns.merge_patch(
        "application/site",
        r#"{"spec":{"ingress":{"tls":{"secretName":"site-tls"}}}}"#,
    )?;
    wait_for(
        n,
        "the https URL",
        "application/site",
        "{.status.url}",
        &format!("https://{host}/"),
    )?;
    assert_eq!(
        jsonpath(n, "ingress/site", "{.spec.tls[0].secretName}")?,
        "site-tls"
    );
    json_patch(
        n,
        "application/site",
        r#"[{"op":"remove","path":"/spec/ingress"}]"#,
    )?;
    eventually(WAIT, "the Ingress deleted", || {
        Ok((!exists(n, "ingress/site")?).then_some(()))
    })?;
    wait_for(
        n,
        "the in-cluster URL",
        "application/site",
        "{.status.url}",
        &format!("http://site.{n}.svc:80"),
    )?;
    eventually(WAIT, "a Deleted event", || {
        let notes = event_notes(n, "Deleted")?;
        Ok(notes
            .iter()
            .any(|m| m.starts_with("Deleted Ingress site"))
            .then_some(()))
    })?;
    // And adding it again makes a new one.
    ns.merge_patch(
        "application/site",
        &format!(r#"{{"spec":{{"ingress":{{"host":"shop.{host}","path":"/shop"}}}}}}"#),
    )?;
    wait_for(
        n,
        "a new Ingress",
        "ingress/site",
        "{.spec.rules[0].http.paths[0].path}",
        "/shop",
    )?;

    // Deleting the Application garbage-collects what it owns.
    kubectl_ok(
        &["delete", "-n", n, "application/site", "--wait=true"],
        None,
    )?;
    eventually(WAIT, "the children collected", || {
        let gone = !exists(n, "deployment/site")?
            && !exists(n, "service/site")?
            && !exists(n, "ingress/site")?;
        Ok(gone.then_some(()))
    })?;
    assert!(
        !controller.logs().contains("panicked"),
        "{}",
        controller.logs()
    );
    Ok(())
}

#[test]
fn an_ingress_of_someone_else_is_left_alone_and_reported() -> Result<()> {
    let webhook = Webhook::start("ctl-app-foreign")?;
    let ns = webhook.namespace("ctl-app-foreign")?;
    let n = ns.name();
    let foreign = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: site}\nspec:\n  rules:\n  - host: mine.example.com\n    http:\n      paths:\n      - {path: /, pathType: Prefix, backend: {service: {name: mine, port: {number: 80}}}}\n";
    kubectl_ok(&["apply", "-n", n, "-f", "-"], Some(foreign))?;
    let _controller = ControllerProcess::start(n)?;
    assert!(ns.apply(&site(&format!("{}.foo.com", ns.name())))?.ok);
    wait_for(
        n,
        "Ready=False NameConflict",
        "application/site",
        "{.status.conditions[?(@.type==\"Ready\")].reason}",
        "NameConflict",
    )?;
    assert_eq!(
        jsonpath(n, "ingress/site", "{.spec.rules[0].host}")?,
        "mine.example.com",
        "the foreign Ingress was changed"
    );
    Ok(())
}
