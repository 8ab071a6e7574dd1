//! The chart's monitoring, proven with Prometheus's own promtool (built from the Go module proxy
//! at the pin in versions.env by `make control-plane`): the alerting rules pass `promtool check
//! rules`, every alert fires and stays silent in `promtool test rules`, the dashboard's queries
//! parse, and a release installed with its ServiceMonitors (against the prometheus-operator CRDs)
//! is scraped as they say, with the metrics-reader token, into `promtool check metrics`.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::{
    cached_tool, crd_established, curl, eventually, kubectl_ok, output_within, repo_root,
    target_dir, unbase64, unix_now,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);

fn alerts_file() -> PathBuf {
    repo_root().join("charts/kubesteer/files/alerts.yaml")
}

fn dashboard_file() -> PathBuf {
    repo_root().join("charts/kubesteer/files/dashboard.json")
}

fn alert_tests_file() -> PathBuf {
    repo_root().join("tests/promtool/alerts-tests.yaml")
}

fn promtool() -> Result<PathBuf> {
    let path = cached_tool("promtool");
    ensure!(
        path.exists(),
        "{} is missing: `make control-plane` (or hack/build-control-plane.sh monitoring) builds it",
        path.display()
    );
    Ok(path)
}

/// `promtool args...` with `stdin`, failing unless it succeeds; its stdout and stderr.
fn run_promtool(args: &[&str], stdin: Option<&str>) -> Result<String> {
    let out = output_within(
        Command::new(promtool()?).args(args),
        Some(stdin.unwrap_or_default().as_bytes()),
        Duration::from_secs(120),
        &format!("promtool {}", args.join(" ")),
    )?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("promtool {args:?} failed ({}):\n{text}", out.status);
    }
    Ok(text)
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The alert names of the rules file.
fn alerts() -> Result<Vec<String>> {
    let rules: serde_yaml::Value = serde_yaml::from_str(&read(&alerts_file())?)?;
    let mut names = Vec::new();
    for group in rules["groups"].as_sequence().context("groups")? {
        for rule in group["rules"].as_sequence().context("rules")? {
            names.push(rule["alert"].as_str().context("alert name")?.to_string());
        }
    }
    Ok(names)
}

#[test]
fn promtool_checks_the_alerting_rules() -> Result<()> {
    let path = alerts_file();
    let out = run_promtool(&["check", "rules", path.to_str().context("path")?], None)?;
    let count = alerts()?.len();
    assert!(
        out.contains(&format!("SUCCESS: {count} rules found")),
        "{out}"
    );
    Ok(())
}

#[test]
fn promtool_unit_tests_fire_and_silence_every_alert() -> Result<()> {
    let path = alert_tests_file();
    let out = run_promtool(&["test", "rules", path.to_str().context("path")?], None)?;
    assert!(out.contains("SUCCESS"), "{out}");
    // Each alert has a case where it fires and one where it must not.
    let tests: serde_yaml::Value = serde_yaml::from_str(&read(&path)?)?;
    let mut fires = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for test in tests["tests"].as_sequence().context("tests")? {
        for case in test["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = case["alertname"].as_str().context("alertname")?.to_string();
            match case["exp_alerts"].as_sequence().map(Vec::is_empty) {
                Some(false) => fires.insert(name),
                _ => silent.insert(name),
            };
        }
    }
    for alert in alerts()? {
        assert!(fires.contains(&alert), "no test where {alert} fires");
        assert!(
            silent.contains(&alert),
            "no test where {alert} stays silent"
        );
    }
    Ok(())
}

/// Every `expr` in the dashboard, with Grafana's variables put in as a query would get them.
pub(super) fn dashboard_queries() -> Result<Vec<String>> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push(expr.clone());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let dashboard: Value = serde_json::from_str(&read(&dashboard_file())?)?;
    let mut exprs = Vec::new();
    walk(&dashboard, &mut exprs);
    Ok(exprs
        .into_iter()
        .map(|e| {
            e.replace("$__rate_interval", "2m")
                .replace("$__range", "1d")
                .replace("$namespace", ".*")
                .replace("$scaler", ".*")
        })
        .collect())
}

#[test]
fn the_dashboards_queries_are_promql() -> Result<()> {
    let queries = dashboard_queries()?;
    ensure!(queries.len() >= 10, "only {} queries", queries.len());
    // promtool parses expressions as recording rules.
    let rules = serde_json::json!({"groups": [{
        "name": "dashboard",
        "rules": queries.iter().enumerate().map(|(i, q)| serde_json::json!({
            "record": format!("dashboard:query_{i}"),
            "expr": q,
        })).collect::<Vec<_>>(),
    }]});
    let dir = target_dir().join("monitoring-tests");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("dashboard-rules.yaml");
    std::fs::write(&path, serde_yaml::to_string(&rules)?)?;
    let out = run_promtool(&["check", "rules", path.to_str().context("path")?], None)?;
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{out}"
    );
    Ok(())
}

/// The `kubesteer_*` metric names the alerts and the dashboard read.
fn metric_names_used() -> Result<BTreeSet<String>> {
    let text = read(&alerts_file())? + &read(&dashboard_file())?;
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("kubesteer_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    Ok(names)
}

/// The metric families (`# TYPE` lines) and sample names of a scrape.
fn served_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| match l.strip_prefix("# TYPE ") {
            Some(family) => family.split(' ').next(),
            None if l.starts_with('#') => None,
            None => l.split(['{', ' ']).next(),
        })
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

/// The chart's values that switch every monitoring object on.
pub(super) const MONITORING: &[&str] = &[
    "--set",
    "monitoring.serviceMonitor.enabled=true",
    "--set",
    "monitoring.prometheusRule.enabled=true",
    "--set",
    "monitoring.grafanaDashboard.enabled=true",
];

fn json_of(args: &[&str]) -> Result<Value> {
    Ok(serde_json::from_str(&kubectl_ok(args, None)?)?)
}

/// What one ServiceMonitor endpoint scrapes: `(pod ip, port)` of every endpoint of every
/// Service it selects, with the endpoint's settings.
fn targets(namespace: &str, monitor: &str) -> Result<(Value, Vec<(String, u16)>)> {
    let monitor = json_of(&[
        "get",
        "servicemonitor",
        monitor,
        "-n",
        namespace,
        "-o",
        "json",
    ])?;
    let endpoint = monitor["spec"]["endpoints"][0].clone();
    let port_name = endpoint["port"].as_str().context("endpoint port")?;
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .context("matchLabels")?
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    let services = json_of(&[
        "get", "services", "-n", namespace, "-l", &selector, "-o", "json",
    ])?;
    let mut found = Vec::new();
    for service in services["items"].as_array().context("services")? {
        let name = service["metadata"]["name"].as_str().context("name")?;
        let slices = json_of(&[
            "get",
            "endpointslices",
            "-n",
            namespace,
            "-l",
            &format!("kubernetes.io/service-name={name}"),
            "-o",
            "json",
        ])?;
        for slice in slices["items"].as_array().context("slices")? {
            let Some(port) = slice["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == port_name)
                .and_then(|p| p["port"].as_u64())
            else {
                continue;
            };
            for ep in slice["endpoints"].as_array().into_iter().flatten() {
                for addr in ep["addresses"].as_array().into_iter().flatten() {
                    let ip = addr.as_str().context("address")?.to_string();
                    found.push((ip, u16::try_from(port)?));
                }
            }
        }
    }
    Ok((endpoint, found))
}

/// `key` of Secret `name`, decoded, once it is there.
fn secret_key(namespace: &str, name: &str, key: &str) -> Result<String> {
    eventually(WAIT, &format!("{key} in secret {name}"), || {
        let secret = json_of(&["get", "secret", name, "-n", namespace, "-o", "json"])?;
        Ok(match secret["data"][key].as_str() {
            Some(b64) => Some(String::from_utf8(unbase64(b64)?)?),
            None => None,
        })
    })
}

/// What `promtool check metrics` reads: the Prometheus text format, which the binaries serve to
/// a client that asks for it alone (OpenMetrics otherwise, which Prometheus prefers).
const TEXT_FORMAT: &[&str] = &["--header", "Accept: text/plain;version=0.0.4"];

/// Scrapes every target of the controller's ServiceMonitor as Prometheus would: its scheme and
/// path, its bearer token Secret, no certificate check (insecureSkipVerify); `extra` curl
/// arguments.
pub(super) fn scrape_controllers(release: &Release, extra: &[&str]) -> Result<Vec<String>> {
    let (endpoint, targets, token) = controller_monitor(release)?;
    ensure!(
        endpoint["scheme"] == "https" && endpoint["tlsConfig"]["insecureSkipVerify"] == true,
        "{endpoint}"
    );
    let path = endpoint["path"].as_str().context("path")?;
    let mut scrapes = Vec::new();
    for (ip, port) in &targets {
        let url = format!("https://{ip}:{port}{path}");
        let args = [&["--insecure"], extra].concat();
        let (code, body) = curl(&url, &args, Some(&token))?;
        ensure!(code == 200, "{url}: {code} {body}");
        // Without the token it is refused: the token is what opens it.
        let (code, _) = curl(&url, &["--insecure"], None)?;
        ensure!(code == 401, "{url} without a token: {code}");
        scrapes.push(body);
    }
    Ok(scrapes)
}

/// Scrapes every target of the webhook's ServiceMonitor, checking its certificate against the
/// CA and server name the ServiceMonitor names; `extra` curl arguments.
fn scrape_webhooks(release: &Release, extra: &[&str]) -> Result<Vec<String>> {
    let (endpoint, targets, ca_file) = webhook_monitor(release)?;
    let server = endpoint["tlsConfig"]["serverName"]
        .as_str()
        .context("serverName")?;
    let ca_file = ca_file.to_str().context("path")?;
    let path = endpoint["path"].as_str().context("path")?;
    let mut scrapes = Vec::new();
    for (ip, port) in &targets {
        let url = format!("https://{server}:{port}{path}");
        let resolve = format!("{server}:{port}:{ip}");
        let args = [&["--cacert", ca_file, "--resolve", &resolve], extra].concat();
        let (code, body) = curl(&url, &args, None)?;
        ensure!(code == 200, "{url} at {ip}: {code} {body}");
        scrapes.push(body);
    }
    Ok(scrapes)
}

/// Prometheus' `scrape_configs` for the release's two ServiceMonitors, as the Prometheus
/// Operator would make them: the controller's pods over TLS with the metrics-reader token, the
/// webhook's with its CA and server name; the pods as static targets.
pub(super) fn scrape_configs(release: &Release) -> Result<String> {
    let listed = |targets: &[(String, u16)]| {
        targets
            .iter()
            .map(|(ip, port)| format!("\"{ip}:{port}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (endpoint, controllers, token) = controller_monitor(release)?;
    let token_file = monitoring_dir()?.join(format!("{}-token", release.name));
    std::fs::write(&token_file, token)?;
    let controller_path = endpoint["path"].as_str().context("path")?.to_string();
    let (endpoint, webhooks, ca_file) = webhook_monitor(release)?;
    ensure!(
        !controllers.is_empty() && !webhooks.is_empty(),
        "no targets"
    );
    Ok(format!(
        "  - job_name: controller\n    scheme: https\n    metrics_path: {controller_path}\n    tls_config: {{insecure_skip_verify: true}}\n    authorization: {{credentials_file: {}}}\n    static_configs: [{{targets: [{}]}}]\n  - job_name: webhook\n    scheme: https\n    metrics_path: {}\n    tls_config: {{ca_file: {}, server_name: {}}}\n    static_configs: [{{targets: [{}]}}]\n",
        token_file.display(),
        listed(&controllers),
        endpoint["path"].as_str().context("path")?,
        ca_file.display(),
        endpoint["tlsConfig"]["serverName"].as_str().context("serverName")?,
        listed(&webhooks),
    ))
}

/// Where the monitoring tests keep their files.
fn monitoring_dir() -> Result<PathBuf> {
    let dir = target_dir().join("monitoring-tests");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A ServiceMonitor's endpoint, the pods it scrapes (ip, port) and the credential it names.
type Monitor<T> = (Value, Vec<(String, u16)>, T);

/// The controller's ServiceMonitor endpoint, the pods it scrapes and the metrics-reader token
/// it names.
fn controller_monitor(release: &Release) -> Result<Monitor<String>> {
    let ns = &release.namespace;
    let (endpoint, targets) = targets(ns, &format!("{}-controller", release.fullname()))?;
    let credentials = &endpoint["authorization"]["credentials"];
    let token = secret_key(
        ns,
        credentials["name"].as_str().context("token secret")?,
        credentials["key"].as_str().context("token key")?,
    )?;
    Ok((endpoint, targets, token))
}

/// The webhook's ServiceMonitor endpoint, the pods it scrapes and the CA it names (in a file).
fn webhook_monitor(release: &Release) -> Result<Monitor<PathBuf>> {
    let ns = &release.namespace;
    let (endpoint, targets) = targets(ns, &format!("{}-webhook", release.fullname()))?;
    let ca = &endpoint["tlsConfig"]["ca"]["secret"];
    let pem = secret_key(
        ns,
        ca["name"].as_str().context("ca secret")?,
        ca["key"].as_str().context("ca key")?,
    )?;
    let ca_file = monitoring_dir()?.join(format!("{}-ca.crt", release.name));
    std::fs::write(&ca_file, pem)?;
    Ok((endpoint, targets, ca_file))
}

/// The prometheus-operator CRDs `make control-plane` fetched at the pin in versions.env.
pub(super) fn install_monitoring_crds() -> Result<()> {
    let env = read(&repo_root().join("versions.env"))?;
    let version = env
        .lines()
        .find_map(|l| l.strip_prefix("PROMETHEUS_OPERATOR_VERSION="))
        .context("PROMETHEUS_OPERATOR_VERSION in versions.env")?;
    let dir = cached_tool("promtool")
        .parent()
        .and_then(Path::parent)
        .context("the cache")?
        .join(format!("crds/prometheus-operator-{version}"));
    for crd in ["servicemonitors", "prometheusrules"] {
        let file = dir.join(format!("monitoring.coreos.com_{crd}.yaml"));
        ensure!(
            file.exists(),
            "{} is missing: `make control-plane` (or hack/build-control-plane.sh monitoring) fetches it",
            file.display()
        );
        let file = file.to_str().context("path")?;
        kubectl_ok(&["apply", "--server-side", "-f", file], None)?;
        crd_established(&format!("{crd}.monitoring.coreos.com"))?;
    }
    Ok(())
}

/// An `HH:MM` `hours` from now, UTC.
fn at(hours: i64) -> String {
    let now = i64::try_from(unix_now()).unwrap_or(i64::MAX);
    kubesteer_tests::hh_mm(u64::try_from(now.saturating_add(hours * 3600).max(0)).unwrap_or(0))
}

#[test]
fn a_scrape_of_the_installed_release_passes_promtool_check_metrics() -> Result<()> {
    promtool()?;
    install_monitoring_crds()?;
    // The apiserver validates the ServiceMonitors and the PrometheusRule against the real CRDs.
    let release = Release::install("mon", MONITORING)?;
    let user = release.user_ns.clone();
    kubectl_ok(
        &[
            "create",
            "deployment",
            "web",
            "-n",
            &user,
            "--image=nginx",
            "--replicas=3",
        ],
        None,
    )?;
    // A window open now that holds web at 1: 2 below its original 3.
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: nightly}}\nspec:\n  timeZone: UTC\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n  windows: [{{start: \"{}\", end: \"{}\", replicas: 1}}]\n",
        at(-1),
        at(1)
    ))?;
    ensure!(run.ok, "{run:?}");

    let scaler = format!(r#"namespace="{user}",scaler="nightly""#);
    let target =
        format!(r#"{scaler},target_kind="Deployment",target_namespace="{user}",target_name="web""#);
    let want = [
        format!("kubesteer_scaler_active{{{scaler}}} 1"),
        format!("kubesteer_scaler_replicas_held_below_original{{{scaler}}} 2"),
        format!("kubesteer_scaler_targets_in_error{{{scaler}}} 0"),
        // Its author (the test's admin, recorded by the webhook) holds the rights.
        format!("kubesteer_scaler_forbidden{{{scaler}}} 0"),
        format!("kubesteer_scaler_target_desired_replicas{{{target}}} 1"),
        format!("kubesteer_scaler_target_replicas{{{target}}} 1"),
    ];
    let controllers = eventually(WAIT, "the leader to report the Scaler", || {
        let scrapes = scrape_controllers(&release, &[])?;
        let all = scrapes.join("\n");
        Ok(want
            .iter()
            .all(|line| all.lines().any(|l| l == line))
            .then_some(scrapes))
    })
    .with_context(|| release.describe())?;
    // Every replica is scraped, and exactly one leads.
    ensure!(
        controllers.len() == 2,
        "{} controller targets",
        controllers.len()
    );
    let leading = controllers
        .iter()
        .filter(|s| s.lines().any(|l| l == "kubesteer_leading 1"))
        .count();
    assert_eq!(leading, 1);
    let next = format!("kubesteer_scaler_next_transition_timestamp_seconds{{{scaler}}} ");
    let leader = controllers
        .iter()
        .find(|s| s.contains(&next))
        .context("the leader's scrape")?;
    let due: u64 = leader
        .lines()
        .find_map(|l| l.strip_prefix(next.as_str()))
        .context("next transition")?
        .parse()?;
    let now = unix_now();
    assert!(
        due > now && due <= now + 3600,
        "next transition {due}, now {now}"
    );
    // The standby reports no Scaler.
    assert_eq!(
        controllers
            .iter()
            .filter(|s| s.contains("kubesteer_scaler_"))
            .count(),
        1
    );

    let webhooks = scrape_webhooks(&release, &[])?;
    ensure!(!webhooks.is_empty(), "no webhook target");
    let text = scrape_controllers(&release, TEXT_FORMAT)?;
    for scrape in text.iter().chain(&scrape_webhooks(&release, TEXT_FORMAT)?) {
        let out = run_promtool(&["check", "metrics"], Some(scrape))?;
        assert_eq!(out.trim(), "", "promtool check metrics:\n{out}\n{scrape}");
    }
    // The Scaler's series in the text format as in OpenMetrics.
    let all = text.join("\n");
    for line in &want {
        assert!(all.lines().any(|l| l == line), "{line} in\n{all}");
    }
    // The alerts and the dashboard read only metrics the binaries serve.
    let served: BTreeSet<String> = controllers
        .iter()
        .chain(&webhooks)
        .flat_map(|s| served_names(s))
        .collect();
    let missing: Vec<_> = metric_names_used()?
        .into_iter()
        .filter(|m| !served.contains(m))
        .collect();
    assert!(missing.is_empty(), "not served: {missing:?}\n{served:?}");
    for scrape in &webhooks {
        assert!(
            scrape.contains("kubesteer_webhook_serving_certificate_expiration_timestamp_seconds "),
            "{scrape}"
        );
    }

    // A deleted Scaler leaves no series behind.
    kubectl_ok(
        &["delete", "scaler", "nightly", "-n", &user, "--wait=true"],
        None,
    )?;
    eventually(WAIT, "the Scaler's series to go", || {
        let all = scrape_controllers(&release, &[])?.join("\n");
        Ok((!all.contains(r#"scaler="nightly""#)).then_some(()))
    })?;
    Ok(())
}
