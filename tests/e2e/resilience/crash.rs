//! The controller crashing, end to end: a killed leader's standby takes over within 15 s and
//! writes nothing twice, and a controller killed while 200 Memcacheds converge finishes the job
//! after a restart, leaving exactly one owned Deployment and Service per Memcached.
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use kubesteer_tests::{
    apiserver_addr, eventually, eventually_every, hh_mm, jsonpath, kubeconfig_via, kubectl_ok,
    now_seconds, parse_rfc3339, unix_now, ControllerProcess, Namespace, TcpProxy,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const MANAGER: &str = "kubesteer-controller";

fn get_json(ns: &str, resource: &str) -> Result<Value> {
    let out = kubectl_ok(&["get", "-n", ns, resource, "-o", "json"], None)?;
    Ok(serde_json::from_str(&out)?)
}

/// A controller taking part in leader election on the Lease `kubesteer-controller` in `ns`.
fn elector(ns: &Namespace, identity: &str) -> Result<ControllerProcess> {
    elector_via(&kubesteer_tests::kubeconfig(), ns, identity)
}

/// Like [`elector`], reaching the apiserver through `kubeconfig`.
fn elector_via(
    kubeconfig: &std::path::Path,
    ns: &Namespace,
    identity: &str,
) -> Result<ControllerProcess> {
    ControllerProcess::start_via(
        kubeconfig,
        ns.name(),
        &format!("{}-{identity}", ns.name()),
        &[
            "--leader-election",
            "--lease-namespace",
            ns.name(),
            "--identity",
            identity,
        ],
    )
}

#[test]
fn a_leader_cut_off_from_the_apiserver_stops_reconciling_before_its_lease_expires() -> Result<()> {
    let ns = Namespace::new("ctl-lease-cut")?;
    let proxy = TcpProxy::start(apiserver_addr()?)?;
    let via_proxy = kubeconfig_via(proxy.port, &format!("{}-proxied.kubeconfig", ns.name()))?;
    let a = elector_via(&via_proxy, &ns, "a")?;
    eventually(WAIT, "a to lead", || {
        Ok((holder(&ns)? == "a" && a.metric("kubesteer_leading")? == 1.0).then_some(()))
    })
    .with_context(|| a.logs())?;
    // Work is going on: a Scaler with its window open.
    ns.create_deployment("web", 1)?;
    let now = unix_now();
    let run = ns.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: sched}}\nspec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}], windows: [{{start: \"{}\", end: \"{}\", replicas: 2}}]}}\n",
        hh_mm(now - 3600),
        hh_mm(now + 3600)
    ))?;
    ensure!(run.ok, "{run:?}");
    eventually(WAIT, "web scaled by a", || {
        Ok((jsonpath(ns.name(), "deployment/web", "{.spec.replicas}")? == "2").then_some(()))
    })?;

    proxy.pause();
    let paused = now_seconds();
    // The last renewal that reached the apiserver; the Lease expires 10 s after it.
    let renewed = parse_rfc3339(&jsonpath(
        ns.name(),
        "lease/kubesteer-controller",
        "{.spec.renewTime}",
    )?)?;
    let duration: f64 = jsonpath(
        ns.name(),
        "lease/kubesteer-controller",
        "{.spec.leaseDurationSeconds}",
    )?
    .parse()?;
    eventually_every(
        Duration::from_secs(20),
        Duration::from_millis(100),
        "the cut-off leader to stop reconciling",
        || Ok((a.metric("kubesteer_leading")? == 0.0).then_some(())),
    )
    .with_context(|| a.logs())?;
    let stopped = now_seconds();
    eprintln!(
        "a stopped {:.1} s after the pause, {:.1} s after its last renewal, {:.1} s before the Lease expired",
        stopped - paused,
        stopped - renewed,
        renewed + duration - stopped
    );
    ensure!(
        stopped < renewed + duration,
        "a stopped at {stopped}, after its Lease expired at {}",
        renewed + duration
    );
    ensure!(a
        .logs()
        .contains("could not renew the leader lease in time"));

    // A standby takes over once the Lease expires, with the cut-off leader stopped already.
    let b = elector(&ns, "b")?;
    eventually(Duration::from_secs(30), "b to lead", || {
        Ok((holder(&ns)? == "b" && b.metric("kubesteer_leading")? == 1.0).then_some(()))
    })
    .with_context(|| b.logs())?;
    ensure!(a.metric("kubesteer_leading")? == 0.0);
    Ok(())
}

fn holder(ns: &Namespace) -> Result<String> {
    jsonpath(
        ns.name(),
        "lease/kubesteer-controller",
        "{.spec.holderIdentity}",
    )
}

/// What the controller wrote to an object, as far as the apiserver shows it: the generation and
/// the controller's managed-fields entries (fields and time), and the resourceVersion of objects
/// that no one but the controller writes.
fn written(ns: &str, resource: &str) -> Result<Value> {
    let out = kubectl_ok(
        &[
            "get",
            "-n",
            ns,
            resource,
            "-o",
            "json",
            "--show-managed-fields",
        ],
        None,
    )?;
    let obj: Value = serde_json::from_str(&out)?;
    let ours: Vec<&Value> = obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["manager"] == MANAGER)
        .collect();
    ensure!(!ours.is_empty(), "{resource}: no fields of {MANAGER}");
    // Deployments also get status writes from kube-controller-manager.
    let rv = if resource.starts_with("deployment/") {
        Value::Null
    } else {
        obj["metadata"]["resourceVersion"].clone()
    };
    Ok(json!({"generation": obj["metadata"]["generation"], "fields": ours, "resourceVersion": rv}))
}

fn snapshot(ns: &str, resources: &[&str]) -> Result<BTreeMap<String, Value>> {
    resources
        .iter()
        .map(|r| Ok((r.to_string(), written(ns, r)?)))
        .collect()
}

/// Whether `log` shows a finished reconcile of `kind`/`name` in `ns`.
fn reconciled(log: &str, kind: &str, name: &str, ns: &str) -> bool {
    let version = kubesteer_api::kind::ALL
        .into_iter()
        .find(|k| k.name() == kind)
        .map_or("v1alpha1", |k| k.version());
    let object = format!("object={kind}.{version}.kubesteer.io/{name}.{ns} ");
    log.lines()
        .any(|l| l.contains("reconciled") && l.contains(&object))
}

/// (object, reason, note) of every event `instance` published in `ns`.
fn events_by(ns: &str, instance: &str) -> Result<BTreeSet<(String, String, String)>> {
    let events = get_json(ns, "events.events.k8s.io")?;
    Ok(events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reportingInstance"] == instance)
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (s(&e["regarding"]["name"]), s(&e["reason"]), s(&e["note"]))
        })
        .collect())
}

#[test]
fn a_killed_leaders_standby_takes_over_within_15_seconds_and_writes_nothing_twice() -> Result<()> {
    let ns = Namespace::new("ctl-crash-lease")?;
    let mut a = elector(&ns, "a")?;
    let mut b = elector(&ns, "b")?;
    let leader = eventually(WAIT, "a leader", || {
        let h = holder(&ns)?;
        Ok(["a", "b"].contains(&h.as_str()).then_some(h))
    })?;

    // One of each kind, converged under the first leader.
    ns.create_deployment("web", 1)?;
    let now = unix_now();
    let run = ns.apply(&format!(
        r#"apiVersion: kubesteer.io/v1alpha1
kind: Memcached
metadata: {{name: cache}}
spec: {{size: 1}}
---
apiVersion: kubesteer.io/v1alpha1
kind: Welcome
metadata: {{name: hello}}
spec: {{name: kubesteer, password: crash-test-password, serviceType: ClusterIP}}
---
apiVersion: kubesteer.io/v1beta1
kind: Scaler
metadata: {{name: sched}}
spec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}], windows: [{{start: "{}", end: "{}", replicas: 3}}]}}
"#,
        hh_mm(now - 3600),
        hh_mm(now + 3600)
    ))?;
    ensure!(run.ok, "{run:?}");
    kubectl_ok(
        &[
            "wait",
            "-n",
            ns.name(),
            "--for=condition=Ready",
            "memcached/cache",
            "welcome/hello",
            "scaler/sched",
            "--timeout=90s",
        ],
        None,
    )?;
    eventually(WAIT, "web scaled to 3 ready replicas", || {
        let r = jsonpath(ns.name(), "deployment/web", "{.status.readyReplicas}")?;
        Ok((r == "3").then_some(()))
    })?;
    let resources = [
        "memcached/cache",
        "deployment/cache",
        "service/cache",
        "welcome/hello",
        "deployment/hello",
        "service/hello",
        "secret/hello-credentials",
        "scaler/sched",
        "deployment/web",
    ];
    // Status writes trail readiness a little; the comparison starts once nothing moves for 3 s.
    let before = eventually(WAIT, "the objects to settle", || {
        let first = snapshot(ns.name(), &resources)?;
        std::thread::sleep(Duration::from_secs(3));
        Ok((snapshot(ns.name(), &resources)? == first).then_some(first))
    })?;
    let first_events = events_by(ns.name(), &leader)?;
    let scaled = format!(
        "Scaled Deployment {}/web from 1 to 3 replicas; recorded 1 to restore",
        ns.name()
    );
    for expected in [
        (
            "cache",
            "Created",
            "Created Deployment cache, Service cache",
        ),
        (
            "hello",
            "Created",
            "Created Secret hello-credentials, Deployment hello, Service hello",
        ),
        ("sched", "Scaled", scaled.as_str()),
    ] {
        let expected = (
            expected.0.to_string(),
            expected.1.to_string(),
            expected.2.to_string(),
        );
        ensure!(
            first_events.contains(&expected),
            "{expected:?} not in {first_events:?}"
        );
    }

    // kill -9 the leader: no graceful shutdown, the Lease is not released.
    let (killed, standby, new_leader) = if leader == "a" {
        (&mut a, &b, "b")
    } else {
        (&mut b, &a, "a")
    };
    killed.crash();
    let crashed = chrono::Utc::now();
    let run = ns.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: after}\nspec: {size: 1}\n",
    )?;
    ensure!(run.ok, "{run:?}");
    eventually(Duration::from_secs(25), "the standby to lead", || {
        Ok((holder(&ns)? == new_leader).then_some(()))
    })?;
    // The takeover is when the standby wrote the Lease (its acquireTime, the same machine's
    // clock), not when this test's kubectl polls saw it.
    let acquired = jsonpath(
        ns.name(),
        "lease/kubesteer-controller",
        "{.spec.acquireTime}",
    )?;
    let took = chrono::DateTime::parse_from_rfc3339(&acquired)
        .with_context(|| format!("acquireTime {acquired:?}"))?
        .signed_duration_since(crashed)
        .to_std()
        .with_context(|| format!("acquired at {acquired}, before the kill at {crashed}"))?;
    eprintln!("{new_leader} took over {took:?} after {leader} was killed");
    ensure!(
        took <= Duration::from_secs(15),
        "the takeover took {took:?}"
    );

    // Work goes on under the new leader.
    kubectl_ok(
        &[
            "wait",
            "-n",
            ns.name(),
            "--for=condition=Ready",
            "memcached/after",
            "--timeout=90s",
        ],
        None,
    )
    .with_context(|| standby.logs())?;
    eventually(WAIT, "the new leader's first reconcile of each", || {
        let log = standby.logs();
        Ok((reconciled(&log, "Memcached", "cache", ns.name())
            && reconciled(&log, "Welcome", "hello", ns.name())
            && reconciled(&log, "Scaler", "sched", ns.name()))
        .then_some(()))
    })?;
    // ... and it wrote nothing to what had converged: every apply was a no-op.
    assert_eq!(snapshot(ns.name(), &resources)?, before);

    // The new leader's finalizer gives the target back.
    kubectl_ok(
        &["delete", "-n", ns.name(), "scaler/sched", "--timeout=60s"],
        None,
    )?;
    assert_eq!(
        jsonpath(ns.name(), "deployment/web", "{.spec.replicas}")?,
        "1"
    );
    let restored = format!("Restored Deployment {}/web from 3 to 1 replicas", ns.name());
    let expected: BTreeSet<(String, String, String)> = [
        (
            "after",
            "Created",
            "Created Deployment after, Service after",
        ),
        ("sched", "Restored", restored.as_str()),
    ]
    .into_iter()
    .map(|(o, r, n)| (o.to_string(), r.to_string(), n.to_string()))
    .collect();
    eventually(Duration::from_secs(10), "the new leader's events", || {
        let events = events_by(ns.name(), new_leader)?;
        ensure!(events == expected, "new leader's events: {events:?}");
        Ok(Some(()))
    })?;
    Ok(())
}

/// The names of the `resource` objects in `ns`.
fn names(ns: &str, resource: &str) -> Result<Vec<String>> {
    let out = kubectl_ok(
        &[
            "get",
            resource,
            "-n",
            ns,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        None,
    )?;
    Ok(out.split_whitespace().map(String::from).collect())
}

fn ready_memcacheds(ns: &str) -> Result<usize> {
    let out = kubectl_ok(
        &[
            "get",
            "memcacheds",
            "-n",
            ns,
            "-o",
            "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
        ],
        None,
    )?;
    Ok(out.lines().filter(|l| l.trim() == "True").count())
}

/// Every `resource` object in `ns` has exactly one owner reference, the controlling one, to the
/// live Memcached of its name (whose uid is in `uids`).
fn owned_one_to_one(ns: &str, resource: &str, uids: &BTreeMap<String, String>) -> Result<()> {
    let items = get_json(ns, resource)?;
    let items = items["items"].as_array().context("no items")?;
    ensure!(
        items.len() == uids.len(),
        "{} {resource} for {} Memcacheds",
        items.len(),
        uids.len()
    );
    for item in items {
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let owners = item["metadata"]["ownerReferences"]
            .as_array()
            .with_context(|| format!("{resource}/{name} has no owner"))?;
        ensure!(owners.len() == 1, "{resource}/{name}: owners {owners:?}");
        let owner = &owners[0];
        ensure!(
            owner["controller"] == true
                && owner["kind"] == "Memcached"
                && owner["name"] == name
                && owner["uid"].as_str() == uids.get(name).map(String::as_str),
            "{resource}/{name} is not controlled by its live Memcached: {owner}"
        );
    }
    Ok(())
}

#[test]
fn a_controller_killed_while_200_memcacheds_converge_finishes_the_job_after_a_restart() -> Result<()>
{
    const COUNT: usize = 200;
    let ns = Namespace::new("ctl-crash-200")?;
    let manifests: String = (0..COUNT)
        .map(|i| {
            format!("---\napiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {{name: mc-{i:03}}}\nspec: {{size: 1}}\n")
        })
        .collect();
    // Server-side: one request per object, where a client-side apply makes two and more.
    kubectl_ok(
        &["apply", "--server-side", "-n", ns.name(), "-f", "-"],
        Some(&manifests),
    )?;
    // Started once all are there, so the kill lands in the controller's work, not in kubectl's.
    let mut controller = ControllerProcess::start(ns.name())?;
    let started = Instant::now();

    // Killed mid-flight: children written for some Memcacheds, statuses far from all Ready.
    eventually_every(
        WAIT,
        Duration::from_millis(100),
        "the controller at work",
        || Ok((names(ns.name(), "deployments")?.len() >= 20).then_some(())),
    )?;
    controller.crash();
    let (deployments, services, ready) = (
        names(ns.name(), "deployments")?.len(),
        names(ns.name(), "services")?.len(),
        ready_memcacheds(ns.name())?,
    );
    eprintln!(
        "killed after {:?}: {deployments} Deployments, {services} Services, {ready} Memcacheds Ready",
        started.elapsed()
    );
    ensure!(ready < COUNT, "all {COUNT} were Ready before the kill");

    let restarted =
        ControllerProcess::start_with(ns.name(), &format!("{}-restarted", ns.name()), &[])?;
    // Listing 200 objects is not free; every 2 s is often enough.
    eventually_every(
        Duration::from_secs(240),
        Duration::from_secs(2),
        "all Memcacheds Ready",
        || {
            let ready = ready_memcacheds(ns.name())?;
            ensure!(ready == COUNT, "{ready}/{COUNT} Ready");
            Ok(Some(()))
        },
    )
    .with_context(|| {
        format!(
            "restarted controller's log tail: {}",
            tail(&restarted.logs())
        )
    })?;
    eprintln!("all {COUNT} Ready after {:?}", started.elapsed());

    let memcacheds = get_json(ns.name(), "memcacheds")?;
    let uids: BTreeMap<String, String> = memcacheds["items"]
        .as_array()
        .context("no items")?
        .iter()
        .map(|m| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (s(&m["metadata"]["name"]), s(&m["metadata"]["uid"]))
        })
        .collect();
    ensure!(uids.len() == COUNT, "{} Memcacheds", uids.len());
    owned_one_to_one(ns.name(), "deployments", &uids)?;
    owned_one_to_one(ns.name(), "services", &uids)?;
    // One ReplicaSet and one pod each: no Deployment was rewritten into a second rollout.
    ensure!(names(ns.name(), "replicasets")?.len() == COUNT);
    ensure!(names(ns.name(), "pods")?.len() == COUNT);
    ensure!(!restarted.logs().contains("panicked"));
    Ok(())
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
