//! The parts a platform team already runs, for real on the real node, beside the chart's pods:
//! cert-manager (built from its module, installed from its own chart) issuing the webhook's
//! certificate, its cainjector filling every caBundle, and a renewal under a steady writer; and
//! the Prometheus Operator running a Prometheus that selects the chart's ServiceMonitors and
//! PrometheusRule, scrapes the pods with the chart's credentials, answers every query of the
//! dashboard, and fires and resolves an alert for a real cause.
//!
//! The three tests run side by side, each with a release of its own. None of them points the
//! shared Scaler CRD's conversion at its webhook (`webhook.conversion.enabled=false`), so that
//! only cainjector writes the conversion's caBundle in the cert-manager test.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use kubesteer_tests::addons::{self, CERT_MANAGER, PROMETHEUS_OPERATOR};
use kubesteer_tests::prometheus::Prometheus;
use kubesteer_tests::release::Release;
use kubesteer_tests::{
    eventually, hh_mm, jsonpath, kubectl, kubectl_ok, repo_root, unix_now,
    webhook_denies_a_bad_time_zone, WEBHOOKS,
};
use serde_json::{json, Value};

use super::monitoring::{dashboard_queries, scrape_controllers, MONITORING};
use super::release::{fingerprint, on_real_node, renewal_under_load, user_get, user_wait};
use super::savings::deployment;

/// Every release here leaves the shared Scaler CRD's conversion alone.
const CONVERSION_OFF: [&str; 2] = ["--set", "webhook.conversion.enabled=false"];

/// A Scaler `name` of the Deployment `target` with one window from `start` to `end` (unix
/// seconds, UTC) at `replicas`.
fn scaler(name: &str, target: &str, start: u64, end: u64, replicas: u32, dry_run: bool) -> String {
    format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: {name}}}\nspec:\n  dryRun: {dry_run}\n  timeZone: UTC\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: {target}}}]\n  windows: [{{start: \"{}\", end: \"{}\", replicas: {replicas}}}]\n",
        hh_mm(start),
        hh_mm(end)
    )
}

/// The Scaler CRD's conversion and cert-manager annotation as the chart renders them with its
/// CRDs on in certManager mode (`helm template`), put on the shared CRD while this lives, and the
/// annotation taken off again on drop (the next release's webhook points the conversion at
/// itself again).
struct ChartConversion;

impl ChartConversion {
    fn apply(release: &Release) -> Result<Self> {
        let chart = repo_root().join("charts/kubesteer");
        let rendered = kubesteer_tests::helm(&[
            "template",
            &release.name,
            &chart.to_string_lossy(),
            "-n",
            &release.namespace,
            "--set",
            "crds.enabled=true",
            "--set",
            "certs.mode=certManager",
            "--show-only",
            "templates/crds.yaml",
        ])?;
        let mut found = None;
        for doc in serde_yaml::Deserializer::from_str(&rendered) {
            let crd: Value = serde::Deserialize::deserialize(doc)?;
            if crd["metadata"]["name"] == "scalers.kubesteer.io" {
                found = Some(crd);
            }
        }
        let crd = found.context("the chart renders no Scaler CRD")?;
        let inject = &crd["metadata"]["annotations"]["cert-manager.io/inject-ca-from"];
        let conversion = &crd["spec"]["conversion"];
        ensure!(
            inject.is_string() && conversion["webhook"]["clientConfig"]["caBundle"].is_null(),
            "the chart's certManager-mode Scaler CRD: {crd}"
        );
        let patch = json!({
            "metadata": {"annotations": {"cert-manager.io/inject-ca-from": inject}},
            "spec": {"conversion": conversion},
        });
        kubectl_ok(
            &[
                "patch",
                "crd",
                "scalers.kubesteer.io",
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
            None,
        )?;
        Ok(Self)
    }
}

impl Drop for ChartConversion {
    fn drop(&mut self) {
        let _ = kubectl(
            &[
                "annotate",
                "crd",
                "scalers.kubesteer.io",
                "cert-manager.io/inject-ca-from-",
            ],
            None,
        );
    }
}

/// The PEM `key` of Secret `name` in `namespace`, decoded.
fn secret_pem(namespace: &str, name: &str, key: &str) -> Result<String> {
    let encoded = jsonpath(
        namespace,
        &format!("secret/{name}"),
        &format!("{{.data.{}}}", key.replace('.', "\\.")),
    )?;
    let out = kubesteer_tests::output_within(
        std::process::Command::new("base64").arg("-d"),
        Some(encoded.as_bytes()),
        Duration::from_secs(10),
        "base64 -d",
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// cert-manager issues the webhook's certificate from the chart's own CA; cainjector fills both
/// webhook configurations and the Scaler CRD's conversion (as the chart renders it with its
/// CRDs); every kind is admitted and reconciled through the chart's pods; and `cmctl renew`
/// under a steady writer gives every webhook pod the new certificate without a restart and
/// without one failed admission.
#[test]
fn cert_manager_issues_injects_and_renews_the_webhooks_certificate() -> Result<()> {
    addons::ensure(&CERT_MANAGER)?;
    let mut values = vec!["--set", "certs.mode=certManager"];
    values.extend(CONVERSION_OFF);
    let release = Release::install("cm", &values)?;
    let ns = release.namespace.clone();
    on_real_node(&release, "webhook", 2)?;
    on_real_node(&release, "controller", 2)?;
    let certificate = format!("{}-webhook", release.fullname());
    let secret = format!("{}-webhook-cert", release.fullname());
    let ready = jsonpath(
        &ns,
        &format!("certificate/{certificate}"),
        "{.status.conditions[?(@.type==\"Ready\")].status} {.spec.issuerRef.name}",
    )?;
    ensure!(
        ready == format!("True {}-ca", release.fullname()),
        "the Certificate, Ready and from the chart's CA Issuer: {ready}"
    );
    let issued_by = jsonpath(
        &ns,
        &format!("secret/{secret}"),
        "{.metadata.annotations.cert-manager\\.io/issuer-name}",
    )?;
    ensure!(
        issued_by == format!("{}-ca", release.fullname()),
        "cert-manager wrote the Secret: {issued_by:?}"
    );

    // cainjector: both webhook configurations carry the CA of the Secret cert-manager wrote.
    let ca = jsonpath(&ns, &format!("secret/{secret}"), "{.data.ca\\.crt}")?;
    ensure!(!ca.is_empty(), "the Secret has a ca.crt");
    eventually(
        Duration::from_secs(60),
        "cainjector to fill every webhook's caBundle",
        || {
            let bundles = release.ca_bundles()?;
            Ok((bundles.len() == WEBHOOKS && bundles.iter().all(|b| *b == ca)).then_some(()))
        },
    )
    .with_context(|| release.describe())?;
    // ... and the conversion of the Scaler CRD as the chart renders it, which has no caBundle:
    // only cainjector can write it (this release's webhook leaves the CRD alone).
    let conversion = ChartConversion::apply(&release)?;
    eventually(
        Duration::from_secs(60),
        "cainjector to fill the Scaler CRD's conversion caBundle",
        || Ok((kubesteer_tests::conversion_ca_bundle()? == ca).then_some(())),
    )?;

    // Every kind through the chart's pods.
    webhook_denies_a_bad_time_zone(|yaml| release.apply(yaml))?;
    let good = release.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {}\n",
    )?;
    ensure!(good.ok, "a good Memcached is admitted: {}", good.stderr);
    let size = user_get(&release, "memcached/cache", "{.spec.size}")?;
    ensure!(size == "1", "the webhook stored the defaults: {size:?}");
    release.wait_ready("memcached/cache")?;
    release.create_deployment("web")?;
    let now = unix_now();
    let run = release.apply(&scaler("nights", "web", now - 3600, now + 3600, 0, false))?;
    ensure!(run.ok, "{}", run.stderr);
    user_wait(&release, "deployment/web", "{.spec.replicas}", "0")?;
    // Read back as v1alpha1: the apiserver calls /convert, trusting what cainjector wrote.
    let old = user_get(
        &release,
        "scalers.v1alpha1.kubesteer.io/nights",
        "{.apiVersion}",
    )?;
    ensure!(old == "kubesteer.io/v1alpha1", "{old}");
    drop(conversion);
    let out = release.helm_test()?;
    ensure!(out.contains("Succeeded"), "helm test: {out}");

    // Renewal: cmctl marks the Certificate for issuance now; cert-manager writes a new key and
    // certificate (rotationPolicy Always) from the same CA into the Secret.
    let before = fingerprint(&secret_pem(&ns, &secret, "tls.crt")?)?;
    let cmctl = addons::cmctl()?;
    let admitted = renewal_under_load(&release, || {
        let mut renew = std::process::Command::new(&cmctl);
        renew
            .args(["renew", &certificate, "-n", &ns])
            .env("KUBECONFIG", kubesteer_tests::kubeconfig());
        let out =
            kubesteer_tests::output_within(&mut renew, None, Duration::from_secs(30), "cmctl")?;
        ensure!(
            out.status.success(),
            "cmctl renew: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eventually(
            Duration::from_secs(90),
            "cert-manager to write the renewed certificate",
            || {
                let now = fingerprint(&secret_pem(&ns, &secret, "tls.crt")?)?;
                Ok((now != before).then_some(now))
            },
        )
    })?;
    let bundles = release.ca_bundles()?;
    ensure!(
        bundles.iter().all(|b| *b == ca),
        "the CA, and so every caBundle, stays across the renewal"
    );
    eprintln!("cert-manager renewal: {admitted} writes admitted, 0 failed");
    Ok(())
}

/// The chart's values for a release that Prometheus scrapes every 5 s.
fn monitored() -> Vec<&'static str> {
    let mut values = MONITORING.to_vec();
    values.extend([
        "--set",
        "monitoring.serviceMonitor.interval=5s",
        "--set",
        "monitoring.serviceMonitor.scrapeTimeout=4s",
    ]);
    values.extend(CONVERSION_OFF);
    values
}

/// A Prometheus object of the Operator's (namespace monitoring, ServiceAccount prometheus, as
/// `hack/prometheus-operator.sh deploy` made them) that selects one release's ServiceMonitors
/// and PrometheusRule by its instance label, in any namespace, scraping and evaluating every 5 s
/// on the real node; deleted on drop.
struct OperatedPrometheus {
    name: String,
    prometheus: Prometheus,
}

impl OperatedPrometheus {
    fn start(release: &Release) -> Result<Self> {
        addons::ensure(&PROMETHEUS_OPERATOR)?;
        let (image, version) = addons::prometheus_image()?;
        let name = release.name.clone();
        let selector = json!({"matchLabels": {"app.kubernetes.io/instance": release.name}});
        let object = json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": name, "namespace": "monitoring"},
            "spec": {
                "image": image,
                "version": version,
                "replicas": 1,
                "serviceAccountName": "prometheus",
                "scrapeInterval": "5s",
                "evaluationInterval": "5s",
                "serviceMonitorSelector": selector,
                "serviceMonitorNamespaceSelector": {},
                "ruleSelector": selector,
                "ruleNamespaceSelector": {},
                "nodeSelector": {"kubesteer.io/real-node": "true"},
                "tolerations": [{"key": "kubesteer.io/real-node", "operator": "Exists", "effect": "NoSchedule"}],
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
            },
        });
        kubectl_ok(&["apply", "-f", "-"], Some(&object.to_string()))?;
        let pod = format!("pod/prometheus-{name}-0");
        let ip = eventually(
            Duration::from_secs(180),
            "the Operator's Prometheus pod Ready",
            || {
                let run = kubectl(
                    &[
                        "get",
                        &pod,
                        "-n",
                        "monitoring",
                        "-o",
                        "jsonpath={.status.podIP} {.status.conditions[?(@.type==\"Ready\")].status}",
                    ],
                    None,
                )?;
                Ok(match run.stdout.split_whitespace().collect::<Vec<_>>()[..] {
                    [ip, "True"] if run.ok => Some(ip.to_string()),
                    _ => None,
                })
            },
        )
        .with_context(|| {
            kubectl(&["describe", &pod, "-n", "monitoring"], None)
                .map(|r| r.stdout)
                .unwrap_or_default()
        })?;
        let prometheus = Prometheus::at(&ip, 9090, Duration::from_secs(60))?;
        Ok(Self { name, prometheus })
    }

    /// Waits until Prometheus scrapes the release's two ServiceMonitors and every pod is up, over
    /// HTTPS: two controllers, two webhooks.
    fn wait_targets_up(&self, release: &Release) -> Result<()> {
        let pools = [
            format!(
                "serviceMonitor/{}/{}-controller/0",
                release.namespace,
                release.fullname()
            ),
            format!(
                "serviceMonitor/{}/{}-webhook/0",
                release.namespace,
                release.fullname()
            ),
        ];
        eventually(
            Duration::from_secs(120),
            "Prometheus to scrape 2 controller and 2 webhook pods, all up",
            || {
                let targets = self.prometheus.targets()?;
                let up = |pool: &str| {
                    targets
                        .iter()
                        .filter(|t| t.pool == pool && t.health == "up")
                        .filter(|t| t.url.starts_with("https://"))
                        .count()
                };
                Ok((targets.len() == 4 && pools.iter().all(|p| up(p) == 2)).then_some(()))
            },
        )
        .with_context(|| format!("targets: {:?}", self.prometheus.targets()))
    }
}

impl Drop for OperatedPrometheus {
    fn drop(&mut self) {
        let _ = kubectl(
            &[
                "delete",
                "prometheus",
                &self.name,
                "-n",
                "monitoring",
                "--wait=false",
            ],
            None,
        );
    }
}

/// The Operator's Prometheus scrapes the chart's pods through its ServiceMonitors (the
/// controller's over TLS with the metrics-reader token, which a scrape without is refused), and
/// with every kind in use and a Scaler's transition landed, every query of the Grafana dashboard
/// returns series with finite values: none of its panels is empty.
#[test]
fn the_operators_prometheus_scrapes_the_chart_and_every_dashboard_query_has_data() -> Result<()> {
    let release = Release::install("dash", &monitored())?;
    let n = release.user_ns.clone();
    let prometheus = OperatedPrometheus::start(&release)?;
    // Every kind in use: a Scaler that keeps web asleep, a dry run on trial, and the others.
    for (name, replicas, cpu) in [("web", 3, "100m"), ("trial", 2, "250m"), ("api", 2, "50m")] {
        kubectl_ok(
            &["apply", "-n", &n, "-f", "-"],
            Some(&deployment(name, replicas, cpu, "64Mi")),
        )?;
    }
    let now = unix_now();
    for (yaml, what) in [
        (scaler("nights", "web", now - 3600, now + 3600, 0, false), "Scaler"),
        (scaler("trial", "trial", now - 3600, now + 3600, 0, true), "dry run"),
        (
            "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {}\n".into(),
            "Memcached",
        ),
        (
            "apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {name: hello}\nspec: {name: dash}\n".into(),
            "Welcome",
        ),
        (
            "apiVersion: kubesteer.io/v1alpha1\nkind: Application\nmetadata: {name: shop}\nspec: {image: nginx}\n".into(),
            "Application",
        ),
    ] {
        let run = release.apply(&yaml)?;
        ensure!(run.ok, "{what}: {}", run.stderr);
    }
    user_wait(&release, "deployment/web", "{.spec.replicas}", "0")?;
    prometheus.wait_targets_up(&release)?;
    // What Prometheus sent is what opens the controller's metrics: without the token, 401.
    scrape_controllers(&release, &[])?;

    // A transition Prometheus sees happen: api sleeps from the next minute that is at least 20 s
    // away (its series, at zero, scraped before).
    let boundary = (unix_now() + 20).div_ceil(60) * 60;
    let run = release.apply(&scaler("soon", "api", boundary, boundary + 7200, 0, false))?;
    ensure!(run.ok, "{}", run.stderr);
    eventually(
        Duration::from_secs(150),
        "api put to sleep at its window's start",
        || Ok((user_get(&release, "deployment/api", "{.spec.replicas}")? == "0").then_some(())),
    )
    .with_context(|| release.describe())?;

    // Every panel's query, as Grafana sends it for the last day; `or vector(0)` taken off, so
    // that a panel whose metric is missing counts as empty.
    let queries: Vec<String> = dashboard_queries()?
        .into_iter()
        .map(|q| q.replace(" or vector(0)", ""))
        .collect();
    ensure!(queries.len() >= 20, "the dashboard's queries: {queries:?}");
    // A panel shows something when one of its series has a number (a rate over a window with
    // no change is NaN, as Grafana shows it).
    let empty = |queries: &[String]| -> Result<Vec<String>> {
        let mut empty = Vec::new();
        for query in queries {
            let series = prometheus.prometheus.query(query)?;
            if !series.iter().any(|(_, v)| v.is_finite()) {
                empty.push(format!("{query} => {series:?}"));
            }
        }
        Ok(empty)
    };
    let mut writes = 0;
    eventually(
        Duration::from_secs(120),
        "every dashboard query to return a series with a value",
        || {
            // The webhook's rates look at the last 2 minutes: a user keeps writing.
            writes += 1;
            kubectl_ok(
                &[
                    "annotate",
                    "--overwrite",
                    "-n",
                    &n,
                    "memcached/cache",
                    &format!("seq={writes}"),
                ],
                None,
            )?;
            Ok(empty(&queries)?.is_empty().then_some(()))
        },
    )
    .with_context(|| format!("{:#?}", empty(&queries)))?;
    eprintln!(
        "the Operator's Prometheus: {} dashboard queries, each with data",
        queries.len()
    );
    Ok(())
}

/// KubesteerNoLeader goes from inactive to pending to firing in the Operator's Prometheus when
/// no controller runs (the release's controller scaled to 0), and back to inactive once the
/// controllers run again and one leads.
#[test]
fn an_alert_fires_when_no_controller_leads_and_resolves_when_one_does() -> Result<()> {
    const ALERT: &str = "KubesteerNoLeader";
    let release = Release::install("alert", &monitored())?;
    let prometheus = OperatedPrometheus::start(&release)?;
    prometheus.wait_targets_up(&release)?;
    let p = &prometheus.prometheus;
    let state = || -> Result<String> { Ok(p.alert_states(ALERT)?.join(",")) };
    eventually(
        Duration::from_secs(60),
        "the chart's rules loaded, KubesteerNoLeader inactive while a controller leads",
        || {
            let leading = p.query("sum(kubesteer_leading)")?;
            Ok((state()? == "inactive" && leading.iter().any(|(_, v)| *v == 1.0)).then_some(()))
        },
    )
    .with_context(|| format!("{ALERT}: {:?}", state()))?;

    let controller = format!("deployment/{}-controller", release.fullname());
    let scale = |replicas: &str| {
        kubectl_ok(
            &[
                "scale",
                &controller,
                "-n",
                &release.namespace,
                &format!("--replicas={replicas}"),
            ],
            None,
        )
    };
    scale("0")?;
    let stopped = Instant::now();
    let mut pending = false;
    eventually(
        Duration::from_secs(240),
        "KubesteerNoLeader to fire (for: 2m)",
        || {
            let now = state()?;
            pending |= now == "pending";
            Ok((now == "firing").then_some(()))
        },
    )
    .with_context(|| format!("{ALERT}: {:?}", state()))?;
    let fired = stopped.elapsed();
    ensure!(pending, "{ALERT} was pending before it fired");
    let listed = p.alerts()?;
    ensure!(
        listed.contains(&(ALERT.to_string(), "firing".to_string())),
        "/api/v1/alerts lists it firing: {listed:?}"
    );

    scale("2")?;
    let restored = Instant::now();
    eventually(
        Duration::from_secs(180),
        "KubesteerNoLeader inactive again once a controller leads",
        || Ok((state()? == "inactive").then_some(())),
    )
    .with_context(|| format!("{ALERT}: {:?}", state()))?;
    ensure!(
        !p.alerts()?.iter().any(|(name, _)| name == ALERT),
        "/api/v1/alerts no longer lists it"
    );
    eprintln!(
        "{ALERT}: fired {:.0} s after the controllers stopped, resolved {:.0} s after they were back",
        fired.as_secs_f64(),
        restored.elapsed().as_secs_f64()
    );
    Ok(())
}
