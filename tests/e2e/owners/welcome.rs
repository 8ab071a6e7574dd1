//! The controller and Welcome, end to end: a NodePort Service, a password kept in a Secret and
//! out of the Deployment, and the status a user reads.
use std::time::Duration;

use anyhow::Result;
use kubesteer_tests::{
    event_notes, eventually, json_patch, jsonpath, kubectl, kubectl_ok, ControllerProcess,
    Namespace,
};

const PASSWORD: &str = "correct-horse-battery-staple";
const WAIT: Duration = Duration::from_secs(90);

#[test]
fn welcome_gets_a_nodeport_service_a_secret_and_a_status() -> Result<()> {
    let ns = Namespace::new("ctl-wel")?;
    let controller = ControllerProcess::start(ns.name())?;
    let run = ns.apply(&format!(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {{name: hello}}\nspec: {{name: kubesteer, password: {PASSWORD}}}\n"
    ))?;
    assert!(run.ok, "{run:?}");

    kubectl_ok(
        &[
            "wait",
            "-n",
            ns.name(),
            "--for=condition=Ready",
            "welcome/hello",
            "--timeout=90s",
        ],
        None,
    )?;
    assert_eq!(
        jsonpath(ns.name(), "service/hello", "{.spec.type}")?,
        "NodePort"
    );
    let node_port = jsonpath(ns.name(), "service/hello", "{.spec.ports[0].nodePort}")?;
    assert!(node_port.parse::<u16>().is_ok(), "{node_port:?}");
    eventually(WAIT, "the status", || {
        let url = jsonpath(ns.name(), "welcome/hello", "{.status.serviceURL}")?;
        let port = jsonpath(ns.name(), "welcome/hello", "{.status.nodePort}")?;
        let ready = jsonpath(ns.name(), "welcome/hello", "{.status.readyReplicas}")?;
        Ok((url == format!("http://hello.{}.svc:8088", ns.name())
            && port == node_port
            && ready == "1")
            .then_some(()))
    })?;

    // The password sits in the owned Secret, and the Deployment only points at it.
    let stored = jsonpath(ns.name(), "secret/hello-credentials", "{.data.password}")?;
    assert_eq!(stored, kubesteer_tests::base64(PASSWORD.as_bytes()));
    let deployment = kubectl_ok(
        &["get", "-n", ns.name(), "deployment/hello", "-o", "json"],
        None,
    )?;
    assert!(
        !deployment.contains(PASSWORD),
        "the password leaked into the Deployment"
    );
    assert!(!deployment.contains(&kubesteer_tests::base64(PASSWORD.as_bytes())));
    assert_eq!(
        jsonpath(
            ns.name(),
            "deployment/hello",
            "{.spec.template.spec.containers[0].env[?(@.name==\"PASSWORD\")].valueFrom.secretKeyRef.name}"
        )?,
        "hello-credentials"
    );
    let pods = kubectl_ok(&["get", "-n", ns.name(), "pods", "-o", "json"], None)?;
    assert!(!pods.contains(PASSWORD), "the password leaked into a pod");
    assert_eq!(
        event_notes(ns.name(), "Created")?,
        ["Created Secret hello-credentials, Deployment hello, Service hello"],
        "one Normal event names what was created"
    );
    let columns = kubectl_ok(
        &["get", "-n", ns.name(), "wel", "hello", "--no-headers"],
        None,
    )?;
    let columns: Vec<&str> = columns.split_whitespace().collect();
    assert_eq!(
        columns[..4],
        [
            "hello",
            "kubesteer",
            "1",
            &format!("http://hello.{}.svc:8088", ns.name())
        ],
        "{columns:?}"
    );

    // Without the password the Secret goes away.
    json_patch(
        ns.name(),
        "welcome/hello",
        r#"[{"op":"remove","path":"/spec/password"}]"#,
    )?;
    eventually(WAIT, "the Secret deleted", || {
        Ok(
            (!kubectl(&["get", "-n", ns.name(), "secret/hello-credentials"], None)?.ok)
                .then_some(()),
        )
    })?;
    eventually(WAIT, "PASSWORD gone from the env", || {
        let env = jsonpath(
            ns.name(),
            "deployment/hello",
            "{.spec.template.spec.containers[0].env[*].name}",
        )?;
        Ok((env == "NAME PORT").then_some(()))
    })?;
    eventually(WAIT, "the Deleted event", || {
        let notes = event_notes(ns.name(), "Deleted")?;
        anyhow::ensure!(
            notes == ["Deleted Secret hello-credentials, as spec.password was removed"],
            "Deleted events: {notes:?}"
        );
        Ok(Some(()))
    })?;
    let all_events = kubectl_ok(&["get", "events", "-n", ns.name(), "-o", "json"], None)?;
    assert!(
        !all_events.contains(PASSWORD)
            && !all_events.contains(&kubesteer_tests::base64(PASSWORD.as_bytes())),
        "the password leaked into an event"
    );
    let logs = controller.logs();
    assert!(!logs.contains(PASSWORD), "the password leaked into the log");
    Ok(())
}

#[test]
fn a_users_own_secret_of_the_credentials_name_is_never_deleted() -> Result<()> {
    let ns = Namespace::new("ctl-wel-own")?;
    let mut controller = ControllerProcess::start(ns.name())?;
    let welcome = |spec: &str| {
        let run = ns.apply(&format!(
            "apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {{name: hello}}\nspec: {spec}\n"
        ))?;
        anyhow::ensure!(run.ok, "{run:?}");
        Ok(())
    };
    let password_ref = || {
        jsonpath(
            ns.name(),
            "deployment/hello",
            "{.spec.template.spec.containers[0].env[?(@.name==\"PASSWORD\")].valueFrom.secretKeyRef.name}",
        )
    };
    let users_secret = || -> Result<String> {
        kubectl_ok(
            &[
                "create",
                "secret",
                "generic",
                "hello-credentials",
                "-n",
                ns.name(),
                "--from-literal=password=the-users-own",
            ],
            None,
        )?;
        jsonpath(ns.name(), "secret/hello-credentials", "{.metadata.uid}")
    };
    let secret_uid = || jsonpath(ns.name(), "secret/hello-credentials", "{.metadata.uid}");

    // The user's Secret, referenced and then no longer: the controller leaves it be.
    let uid = users_secret()?;
    welcome("{name: kubesteer, passwordSecretRef: {name: hello-credentials, key: password}}")?;
    eventually(WAIT, "the Deployment referencing the user's Secret", || {
        Ok((password_ref()? == "hello-credentials").then_some(()))
    })?;
    json_patch(
        ns.name(),
        "welcome/hello",
        r#"[{"op":"remove","path":"/spec/passwordSecretRef"}]"#,
    )?;
    eventually(WAIT, "PASSWORD gone from the env", || {
        Ok(password_ref()?.is_empty().then_some(()))
    })?;
    // The delete, had there been one, comes before the Deployment changes.
    assert_eq!(secret_uid()?, uid, "the user's Secret was deleted");

    // The controller's Secret, replaced by the user's own while the controller was down, and
    // then the password removed: the delete is conditional on the uid the controller wrote.
    kubectl_ok(
        &["delete", "-n", ns.name(), "secret/hello-credentials"],
        None,
    )?;
    welcome(&format!("{{name: kubesteer, password: {PASSWORD}}}"))?;
    kubectl_ok(
        &[
            "wait",
            "-n",
            ns.name(),
            "--for=condition=Ready",
            "welcome/hello",
            "--timeout=90s",
        ],
        None,
    )?;
    eventually(WAIT, "the controller's Secret", || {
        Ok((password_ref()? == "hello-credentials" && !secret_uid()?.is_empty()).then_some(()))
    })?;
    assert!(
        controller.terminate(Duration::from_secs(10)),
        "graceful shutdown"
    );
    kubectl_ok(
        &["delete", "-n", ns.name(), "secret/hello-credentials"],
        None,
    )?;
    let uid = users_secret()?;
    welcome("{name: kubesteer}")?;
    let _restarted =
        ControllerProcess::start_with(ns.name(), &format!("{}-restarted", ns.name()), &[])?;
    eventually(WAIT, "PASSWORD gone from the env", || {
        Ok(password_ref()?.is_empty().then_some(()))
    })?;
    assert_eq!(
        secret_uid()?,
        uid,
        "the user's replacement Secret was deleted"
    );
    Ok(())
}
