//! The controller's /metrics under `--metrics-auth`, as a scraper meets it: HTTPS, and nothing
//! without a token that the apiserver accepts and RBAC allows `get` on /metrics.
use std::time::Duration;

use anyhow::Result;
use kubesteer_tests::{
    curl, eventually, kubectl, kubectl_ok, unique, ControllerProcess, Namespace,
};

const WAIT: Duration = Duration::from_secs(60);

/// `GET https://addr/path` with curl (the controller's own certificate is not checked): the
/// status code and the body.
fn get(addr: &str, path: &str, token: Option<&str>) -> Result<(u16, String)> {
    curl(&format!("https://{addr}{path}"), &["--insecure"], token)
}

/// Cluster-scoped objects of one test, deleted when dropped.
struct ClusterObjects(Vec<String>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for object in &self.0 {
            let _ = kubectl(&["delete", object, "--ignore-not-found"], None);
        }
    }
}

#[test]
fn metrics_are_served_over_https_only_to_tokens_allowed_to_get_them() -> Result<()> {
    let ns = Namespace::new("ctl-met")?;
    let controller = ControllerProcess::start_with(ns.name(), ns.name(), &["--metrics-auth"])?;
    let addr = eventually(WAIT, "the metrics address", || {
        Ok(controller.metrics_addr().ok())
    })?;

    // The probes are the kubelet's, which brings no token.
    assert_eq!(get(&addr, "/healthz", None)?.0, 200);
    let (code, body) = get(&addr, "/metrics", None)?;
    assert_eq!((code, body.trim()), (401, "Unauthorized"));
    assert_eq!(get(&addr, "/metrics", Some("not-a-token"))?.0, 401);

    // A real ServiceAccount token, whose account may do nothing yet.
    kubectl_ok(
        &["create", "serviceaccount", "scraper", "-n", ns.name()],
        None,
    )?;
    let token = kubectl_ok(&["create", "token", "scraper", "-n", ns.name()], None)?;
    let token = token.trim();
    let (code, body) = get(&addr, "/metrics", Some(token))?;
    assert_eq!((code, body.trim()), (403, "Forbidden"));

    // What kubebuilder's metrics-reader ClusterRole grants, bound to the account.
    let role = unique("kubesteer-e2e-metrics-reader-");
    let _cleanup = ClusterObjects(vec![
        format!("clusterrolebinding/{role}"),
        format!("clusterrole/{role}"),
    ]);
    kubectl_ok(
        &[
            "create",
            "clusterrole",
            &role,
            "--verb=get",
            "--non-resource-url=/metrics",
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &role,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={}:scraper", ns.name()),
        ],
        None,
    )?;
    // The 403 is remembered for up to 10 s.
    let body = eventually(WAIT, "the bound account to read /metrics", || {
        let (code, body) = get(&addr, "/metrics", Some(token))?;
        Ok((code == 200).then_some(body))
    })?;
    assert!(body.contains("kubesteer_leading 1"), "{body}");
    // Another token keeps being refused meanwhile.
    assert_eq!(get(&addr, "/metrics", Some("not-a-token"))?.0, 401);
    assert!(
        !controller.logs().contains(token),
        "the controller logged a token"
    );
    // Plain HTTP gets no metrics from this port.
    let (plain, _) = curl(&format!("http://{addr}/metrics"), &[], None)?;
    assert_ne!(plain, 200);
    Ok(())
}
