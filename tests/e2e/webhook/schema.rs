//! The foundation, end to end: CRDs on a real apiserver, their kubectl surface, and the schema
//! refusing nonsense with no webhook running.
use std::time::Duration;

use anyhow::Result;
use kubesteer_tests::{
    crd_established, eventually, jsonpath, kubectl, kubectl_ok, repo_root, Namespace,
};

#[test]
fn the_crds_are_established() -> Result<()> {
    for kind in kubesteer_api::kind::ALL {
        crd_established(&format!("{}.kubesteer.io", kind.plural()))?;
    }
    Ok(())
}

#[test]
fn kubectl_get_shows_the_columns_of_each_kind() -> Result<()> {
    let ns = Namespace::new("columns")?;
    let samples = repo_root().join("config/samples");
    kubectl_ok(
        &["apply", "-n", ns.name(), "-f", &samples.to_string_lossy()],
        None,
    )?;
    let out = kubectl_ok(&["get", "-n", ns.name(), "scl,mc,wel,app"], None)?;
    let headers: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with("NAME"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        headers.contains(&vec![
            "NAME", "TIMEZONE", "ACTIVE", "TARGETS", "NEXT", "AGE"
        ]),
        "{out}"
    );
    assert!(
        headers.contains(&vec!["NAME", "SIZE", "READY", "PORT", "AGE"]),
        "{out}"
    );
    assert!(
        headers.contains(&vec![
            "NAME",
            "GREETS",
            "READYREPLICAS",
            "SERVICEURL",
            "AGE"
        ]),
        "{out}"
    );
    assert!(
        headers.contains(&vec!["NAME", "IMAGE", "READY", "URL", "AGE"]),
        "{out}"
    );
    let all = kubectl_ok(&["get", "-n", ns.name(), "kubesteer", "-o", "name"], None)?;
    assert_eq!(
        all.lines().count(),
        kubesteer_api::kind::ALL.len(),
        "category kubesteer lists every kind: {all}"
    );
    Ok(())
}

#[test]
fn kubectl_explain_shows_descriptions() -> Result<()> {
    let out = kubectl_ok(&["explain", "scaler.spec.windows.start"], None)?;
    assert!(out.contains("When the window opens"), "{out}");
    // The overlap, DST and exclude rules are told on the fields they affect.
    let out = kubectl_ok(&["explain", "scaler.spec.windows"], None)?;
    assert!(
        out.contains("the highest replicas of the open windows wins"),
        "{out}"
    );
    let out = kubectl_ok(&["explain", "scaler.spec.timeZone"], None)?;
    assert!(out.contains("spring-forward gap"), "{out}");
    let out = kubectl_ok(&["explain", "scaler.spec.excludeDates"], None)?;
    assert!(out.contains("behaves as outside every window"), "{out}");
    let out = kubectl_ok(&["explain", "memcached.spec.size"], None)?;
    assert!(out.contains("Number of memcached pods"), "{out}");
    let out = kubectl_ok(&["explain", "welcome.status.serviceURL"], None)?;
    assert!(out.contains("In-cluster URL"), "{out}");
    let out = kubectl_ok(&["explain", "application.spec.ingress.host"], None)?;
    assert!(out.contains("DNS-1123 subdomain"), "{out}");
    let out = kubectl_ok(&["explain", "app.status.url"], None)?;
    assert!(out.contains("https://host/path"), "{out}");
    Ok(())
}

#[test]
fn the_schema_alone_refuses_nonsense() -> Result<()> {
    let ns = Namespace::new("schema")?;
    let cases = [
        ("apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: bad}\nspec: {size: -1}\n", "spec.size"),
        ("apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: bad}\nspec: {scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 25, end: 3}]}\n", "spec.windows[0].start"),
        ("apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: bad2}\nspec: {scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: \"7:00\", end: 3}]}\n", "spec.windows[0].start"),
        ("apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {name: bad}\nspec: {name: x, serviceType: Foo}\n", "spec.serviceType"),
        ("apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {name: bad2}\nspec: {port: 8080}\n", "spec.name"),
        ("apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: bad3}\nspec: {scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 1, end: 2}], jobs: [{name: a, schedule: '@hourly', replicas: 1}]}\n", "exactly one of windows and jobs is required"),
    ];
    for (yaml, want) in cases {
        let run = ns.apply(yaml)?;
        assert!(!run.ok, "accepted:\n{yaml}");
        assert!(
            run.stderr.contains(want),
            "expected {want:?} in: {}",
            run.stderr
        );
    }
    Ok(())
}

#[test]
fn every_sample_applies() -> Result<()> {
    let ns = Namespace::new("samples")?;
    let dir = repo_root().join("config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<Vec<_>, _>>()?;
    files.sort_by_key(|f| f.file_name());
    assert_eq!(
        files.len(),
        kubesteer_api::kind::ALL.len(),
        "one sample per kind"
    );
    for f in files {
        let path = f.path();
        let out = kubectl_ok(
            &["apply", "-n", ns.name(), "-f", &path.to_string_lossy()],
            None,
        )?;
        assert!(out.contains("created"), "{}: {out}", path.display());
    }
    Ok(())
}

#[test]
fn a_deployment_gets_ready_pods_on_the_fake_nodes() -> Result<()> {
    let ns = Namespace::new("pods")?;
    ns.create_deployment("web", 2)?;
    let ready = eventually(Duration::from_secs(90), "readyReplicas 2", || {
        let r = jsonpath(ns.name(), "deployment/web", "{.status.readyReplicas}")?;
        Ok((r == "2").then_some(r))
    })?;
    assert_eq!(ready, "2");
    let run = kubectl(
        &[
            "get",
            "pods",
            "-n",
            ns.name(),
            "-o",
            "jsonpath={.items[*].status.phase}",
        ],
        None,
    )?;
    assert_eq!(run.stdout, "Running Running", "{run:?}");
    Ok(())
}
