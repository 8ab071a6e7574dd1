//! The controller and Welcome, end to end: a NodePort Service, a password kept in a Secret and
//! out of the Deployment, and the status a user reads.
use std::time::Duration;

use anyhow::Result;
use kubesteer_tests::{eventually, jsonpath, kubectl, kubectl_ok, ControllerProcess, Namespace};

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
    assert_eq!(stored, base64(PASSWORD.as_bytes()));
    let deployment = kubectl_ok(
        &["get", "-n", ns.name(), "deployment/hello", "-o", "json"],
        None,
    )?;
    assert!(
        !deployment.contains(PASSWORD),
        "the password leaked into the Deployment"
    );
    assert!(!deployment.contains(&base64(PASSWORD.as_bytes())));
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
    kubectl_ok(
        &[
            "patch",
            "-n",
            ns.name(),
            "welcome/hello",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/password"}]"#,
        ],
        None,
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
    let logs = controller.logs();
    assert!(!logs.contains(PASSWORD), "the password leaked into the log");
    Ok(())
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
