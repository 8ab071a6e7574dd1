//! Savings through the chart's pods: a Scaler that put a Deployment to sleep reports its pods'
//! requests as saved (status, `kubectl kubesteer savings`, the metrics the dashboard reads), and
//! a dry run reports what it would save while writing nothing.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kubesteer_tests::prometheus::Prometheus;
use kubesteer_tests::release::Release;
use kubesteer_tests::{eventually, kubectl_ok, unix_now};

use super::monitoring::{
    dashboard_queries, install_monitoring_crds, scrape_configs, scrape_controllers, MONITORING,
};
use super::release::{user_get, user_wait};

const WAIT: Duration = Duration::from_secs(120);

/// A Deployment `name` of `replicas` whose pods request `cpu` and `memory`.
pub(super) fn deployment(name: &str, replicas: u32, cpu: &str, memory: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n        - name: app\n          image: nginx\n          resources: {{requests: {{cpu: {cpu}, memory: {memory}}}}}\n"
    )
}

/// A Scaler of `target` with a window open now at 0 replicas.
fn sleeper(name: &str, target: &str, dry_run: bool) -> String {
    let now = i64::try_from(unix_now()).unwrap_or(i64::MAX);
    let at = |hours: i64| {
        kubesteer_tests::hh_mm(u64::try_from(now.saturating_add(hours * 3600).max(0)).unwrap_or(0))
    };
    format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: {name}}}\nspec:\n  dryRun: {dry_run}\n  timeZone: UTC\n  hpaCooperation: Disabled\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: {target}}}]\n  windows: [{{start: \"{}\", end: \"{}\", replicas: 0}}]\n",
        at(-1),
        at(1)
    )
}

/// `kubectl kubesteer savings` with `args`, as a user runs it.
fn plugin(args: &[&str]) -> Result<String> {
    let mut command =
        std::process::Command::new(kubesteer_tests::workspace_bin("kubectl-kubesteer"));
    command
        .arg("savings")
        .args(args)
        .env("KUBECONFIG", kubesteer_tests::kubeconfig());
    let out = kubesteer_tests::output_within(
        &mut command,
        None,
        Duration::from_secs(30),
        "kubectl-kubesteer savings",
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

/// The numbers of `scaler`'s row of the table: pod-, CPU core- and GiB-hours.
fn row_of(table: &str, scaler: &str) -> Option<[f64; 3]> {
    let line = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(scaler))?;
    let numbers: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .take(3)
        .collect();
    numbers.try_into().ok()
}

#[test]
fn a_sleeping_deployment_saves_its_pods_requests_and_a_dry_run_only_reports_them() -> Result<()> {
    install_monitoring_crds()?;
    let release = Release::install("savings", MONITORING)?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    for yaml in [
        deployment("web", 3, "100m", "64Mi"),
        deployment("trial", 2, "250m", "128Mi"),
        sleeper("nights", "web", false),
        sleeper("trial", "trial", true),
    ] {
        let run = release.apply(&yaml)?;
        ensure!(run.ok, "{run:?}");
    }
    user_wait(&release, "deployment/web", "{.spec.replicas}", "0")?;
    // From web's pod template: 3 pods of 100m and 64Mi.
    let now = "{.status.savings.now.pods} {.status.savings.now.cpuMillicores} {.status.savings.now.memoryBytes} {.status.savings.potential}";
    user_wait(&release, "scaler/nights", now, "3 300 201326592 ")?;
    // The dry run: what it would take away from trial, which keeps its replicas and no record.
    user_wait(&release, "scaler/trial", now, "2 500 268435456 true")?;
    assert_eq!(
        user_get(&release, "deployment/trial", "{.spec.replicas}")?,
        "2"
    );
    assert_eq!(
        user_get(
            &release,
            "deployment/trial",
            "{.metadata.annotations.kubesteer\\.io/original-replicas}"
        )?,
        "",
        "a dry run writes nothing to its target"
    );

    // The plugin counts the time since: pod-hours grow, and CPU and memory are the pods'
    // requests times them.
    let table = eventually(WAIT, "nights to have saved a measurable amount", || {
        let table = plugin(&["-n", n, "--since", "1d"])?;
        Ok(row_of(&table, "nights")
            .filter(|[pods, _, _]| *pods >= 0.001)
            .map(|_| table))
    })?;
    let [pods, cpu, memory] = row_of(&table, "nights").context("nights' row")?;
    let close = |a: f64, b: f64| (a - b).abs() <= 0.0002 + b * 0.02;
    ensure!(
        close(cpu, pods * 0.1) && close(memory, pods / 16.0),
        "CPU and memory are 100m and 64Mi per pod-hour: {table}"
    );
    ensure!(
        table.contains("3 pods, 300m CPU, 192Mi") && table.contains("would (dry run)"),
        "{table}"
    );
    let [would, _, _] = row_of(&table, "trial").context("trial's row")?;
    ensure!(would > 0.0, "trial would have saved: {table}");
    let picture = plugin(&["-n", n, "-o", "svg"])?;
    ensure!(
        picture.starts_with("<svg") && picture.contains(&format!("{n}/nights saved")),
        "{picture}"
    );

    // The metrics the dashboard's Savings row reads, from the leader, counted at the scrape.
    let scaler = |name: &str, potential: bool| {
        format!(r#"namespace="{n}",scaler="{name}",potential="{potential}""#)
    };
    let saved = format!(
        "kubesteer_scaler_saved_cpu_core_seconds_total{{{}}} ",
        scaler("nights", false)
    );
    let want = [
        format!(
            "kubesteer_scaler_saving_pods{{{}}} 3",
            scaler("nights", false)
        ),
        format!(
            "kubesteer_scaler_saving_cpu_cores{{{}}} 0.3",
            scaler("nights", false)
        ),
        format!(
            "kubesteer_scaler_saving_memory_bytes{{{}}} 201326592",
            scaler("nights", false)
        ),
        format!(
            "kubesteer_scaler_saving_pods{{{}}} 2",
            scaler("trial", true)
        ),
    ];
    let cpu_seconds = eventually(WAIT, "the leader to report the savings", || {
        let all = scrape_controllers(&release, &[])?.join("\n");
        let reported = want.iter().all(|line| all.lines().any(|l| l == line));
        let saved = all
            .lines()
            .find_map(|l| l.strip_prefix(&saved))
            .and_then(|v| v.parse::<f64>().ok());
        Ok(saved.filter(|_| reported))
    })?;
    ensure!(cpu_seconds > 0.0, "{saved}{cpu_seconds}");

    // The dashboard's Savings row, queried from a real Prometheus that scraped the chart's pods
    // as its ServiceMonitors say: every panel shows more than 0.
    let prometheus = Prometheus::start(&scrape_configs(&release)?)?;
    eventually(WAIT, "Prometheus to have scraped every pod twice", || {
        let targets = prometheus.targets()?;
        let up = targets.len() == 4 && targets.iter().all(|t| t.health == "up");
        let samples = prometheus.query(&format!(
            "count_over_time(kubesteer_scaler_saved_cpu_core_seconds_total{{namespace=\"{n}\"}}[1m])"
        ))?;
        Ok((up && samples.iter().any(|(_, v)| *v >= 2.0)).then_some(()))
    })
    .with_context(|| format!("{:?}\n{}", prometheus.targets(), prometheus.log()))?;
    let savings_panels: Vec<String> = dashboard_queries()?
        .into_iter()
        .filter(|q| q.contains("kubesteer_scaler_sav"))
        .collect();
    ensure!(savings_panels.len() == 6, "{savings_panels:?}");
    for query in &savings_panels {
        let series = prometheus.query(query)?;
        ensure!(
            !series.is_empty() && series.iter().all(|(_, v)| *v > 0.0),
            "the dashboard's {query}: {series:?}"
        );
    }
    drop(prometheus);

    // Back to its replicas when the Scaler goes: nothing is taken away any more.
    kubectl_ok(
        &["delete", "scaler", "nights", "-n", n, "--wait=true"],
        None,
    )?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", "3")?;
    Ok(())
}
