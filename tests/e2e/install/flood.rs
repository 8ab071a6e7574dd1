//! The chart's webhook pods under a flood of large bodies, through the in-cluster Service: 64
//! clients send 4 MiB bodies back to back for a minute while one kept-alive client sends the
//! apiserver's ordinary reviews (`kubesteer-bench webhook-memory`, with the apiserver's client
//! certificate, which the release requires). No pod is OOM-killed or restarted, every ordinary
//! review is answered, the budget turns the flood away (429), and each pod's container cgroup
//! peaks under the chart's memory limit. The figures are printed; with
//! `KUBESTEER_FLOOD_RESULT=FILE` they are written there too (bench/scripts/webhook-memory-chart.sh
//! keeps them in bench/results/).
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kubesteer_tests::eventually;
use kubesteer_tests::release::Release;
use serde_json::Value;

/// How long the flood lasts, as the issue asks.
const FLOOD_SECONDS: u64 = 60;
const ATTACKERS: usize = 64;
const BODY_BYTES: usize = 4 * 1024 * 1024;

/// Each webhook pod: (name, restart count, memory cgroup of its container on this host).
fn webhook_pods(release: &Release) -> Result<Vec<(String, u64, PathBuf)>> {
    let out = release.component_pods("webhook", "json")?;
    let pods: Value = serde_json::from_str(&out)?;
    let mut found = Vec::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let status = &pod["status"]["containerStatuses"][0];
        let id = status["containerID"]
            .as_str()
            .and_then(|id| id.strip_prefix("containerd://"))
            .with_context(|| format!("pod {name} has no containerd container yet"))?;
        // The real node runs its containers' cgroups as /k8s.io/<container id> (hack/node.sh).
        let cgroup = ["memory/k8s.io", "k8s.io"]
            .iter()
            .map(|root| PathBuf::from("/sys/fs/cgroup").join(root).join(id))
            .find(|dir| dir.is_dir())
            .with_context(|| format!("no memory cgroup for pod {name}'s container {id}"))?;
        found.push((
            name.to_string(),
            status["restartCount"].as_u64().unwrap_or_default(),
            cgroup,
        ));
    }
    Ok(found)
}

#[test]
fn a_minute_of_4_mib_bodies_restarts_no_webhook_pod() -> Result<()> {
    let release = Release::install("flood", &[])?;
    let pods = eventually(
        Duration::from_secs(120),
        "both webhook pods ready on the real node",
        || {
            let ready = release.pods("webhook")?;
            if ready.len() != 2 || ready.iter().any(|p| p[3] != "True") {
                return Ok(None);
            }
            Ok(Some(webhook_pods(&release)?))
        },
    )
    .with_context(|| release.describe())?;

    let cgroups: Vec<PathBuf> = pods.iter().map(|(_, _, cgroup)| cgroup.clone()).collect();
    let figures = release.flood(ATTACKERS, BODY_BYTES, FLOOD_SECONDS, &cgroups)?;
    eprintln!("{}", serde_json::to_string_pretty(&figures)?);
    if let Some(file) = std::env::var_os("KUBESTEER_FLOOD_RESULT") {
        std::fs::write(&file, serde_json::to_string_pretty(&figures)?)?;
    }

    // Every ordinary review answered, 200, while the flood ran.
    let ordinary = &figures["ordinary_reviews"]["under_flood"];
    ensure!(
        ordinary["requests"].as_u64().unwrap_or_default() > 0
            && figures["targets"]["every_ordinary_review_answered_200"] == true,
        "ordinary reviews went unanswered under the flood: {ordinary}"
    );
    // The budget turned the flood away rather than reading it all.
    let refused: u64 = figures["flood"]["answers_by_shape"]
        .as_object()
        .into_iter()
        .flat_map(|shapes| shapes.values())
        .filter_map(|statuses| statuses["429"].as_u64())
        .sum();
    ensure!(
        refused > 0,
        "no flood body was refused: {}",
        figures["flood"]
    );
    // No pod OOM-killed, each under its limit, none restarted.
    let cgroups = figures["cgroups"].as_array().cloned().unwrap_or_default();
    ensure!(cgroups.len() == pods.len(), "{cgroups:?}");
    for cgroup in &cgroups {
        let peak = cgroup["peak_bytes"].as_u64().unwrap_or(u64::MAX);
        let limit = cgroup["limit_bytes"].as_u64().unwrap_or_default();
        ensure!(
            peak < limit,
            "a webhook container peaked at its limit: {cgroup}"
        );
        ensure!(
            cgroup["oom_kills"].as_u64().unwrap_or_default() == 0,
            "the OOM killer ran in a webhook container: {cgroup}"
        );
    }
    let after = webhook_pods(&release)?;
    ensure!(
        after
            .iter()
            .map(|(name, restarts, _)| (name, restarts))
            .eq(pods.iter().map(|(name, restarts, _)| (name, restarts))),
        "webhook pods restarted or were replaced under the flood: before {pods:?}, after {after:?}\n{}",
        release.describe()
    );
    Ok(())
}
