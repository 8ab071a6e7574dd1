//! A real Prometheus (built from the pinned module by `hack/build-control-plane.sh monitoring`),
//! run as a host process with a scrape configuration a test writes, or run by the Prometheus
//! Operator in a pod; and its HTTP query API.
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::{cached_tool, curl, eventually, free_port, target_dir, unique};

/// A running Prometheus: a host process (stopped, and its storage removed, on drop) or one at an
/// address.
pub struct Prometheus {
    /// `http://host:port`.
    base: String,
    process: Option<(Child, PathBuf)>,
}

impl Prometheus {
    /// Starts Prometheus with the `scrape_configs` given (YAML, a list) at a 1 s scrape and
    /// evaluation interval, and waits until it is ready.
    pub fn start(scrape_configs: &str) -> Result<Self> {
        let binary = cached_tool("prometheus");
        ensure!(
            binary.exists(),
            "{} is missing: hack/build-control-plane.sh monitoring builds it",
            binary.display()
        );
        let dir = target_dir().join(unique("prometheus-"));
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}}\nscrape_configs:\n{scrape_configs}"
            ),
        )?;
        let port = free_port()?;
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let child = Command::new(&binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let prometheus = Self {
            base: format!("http://127.0.0.1:{port}"),
            process: Some((child, dir)),
        };
        prometheus.ready(Duration::from_secs(60))?;
        Ok(prometheus)
    }

    /// The Prometheus that serves at `host:port` (a pod's), once it is ready, within `limit`.
    pub fn at(host: &str, port: u16, limit: Duration) -> Result<Self> {
        let prometheus = Self {
            base: format!("http://{host}:{port}"),
            process: None,
        };
        prometheus.ready(limit)?;
        Ok(prometheus)
    }

    fn ready(&self, limit: Duration) -> Result<()> {
        eventually(limit, "Prometheus ready", || {
            let (code, _) = curl(&self.url("/-/ready"), &[], None)?;
            Ok((code == 200).then_some(()))
        })
        .with_context(|| self.log())
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The log of the process this started, for a failure's message (empty for one at an address).
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .and_then(|(_, dir)| std::fs::read_to_string(dir.join("prometheus.log")).ok())
            .unwrap_or_default()
    }

    /// `GET path` of the API, its `data`.
    fn api(&self, path: &str, args: &[&str]) -> Result<Value> {
        let (code, body) = curl(&self.url(path), args, None)?;
        ensure!(code == 200, "{path}: {code} {body}");
        let answer: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
        ensure!(answer["status"] == "success", "{path}: {body}");
        Ok(answer["data"].clone())
    }

    /// The instant vector of `expr` now: each series' labels and value.
    pub fn query(&self, expr: &str) -> Result<Vec<(Value, f64)>> {
        let query = format!("query={expr}");
        let data = self.api("/api/v1/query", &["-G", "--data-urlencode", &query])?;
        let mut series = Vec::new();
        for s in data["result"].as_array().into_iter().flatten() {
            let value = s["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .with_context(|| format!("{expr}: {s}"))?;
            series.push((s["metric"].clone(), value));
        }
        Ok(series)
    }

    /// The state of every alerting rule named `alert` (`inactive`, `pending` or `firing`), as the
    /// rules API reports it after its last evaluation.
    pub fn alert_states(&self, alert: &str) -> Result<Vec<String>> {
        let data = self.api("/api/v1/rules", &["-G", "--data-urlencode", "type=alert"])?;
        Ok(data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .filter(|r| r["name"] == alert)
            .map(|r| r["state"].as_str().unwrap_or_default().to_string())
            .collect())
    }

    /// The alerts `/api/v1/alerts` lists (pending and firing): (name, state).
    pub fn alerts(&self) -> Result<Vec<(String, String)>> {
        let data = self.api("/api/v1/alerts", &[])?;
        Ok(data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (text(&a["labels"]["alertname"]), text(&a["state"]))
            })
            .collect())
    }

    /// Every scrape target as Prometheus reports it. A ServiceMonitor's pool is
    /// `serviceMonitor/<namespace>/<name>/<endpoint>`; a job's is its name.
    pub fn targets(&self) -> Result<Vec<Target>> {
        let data = self.api("/api/v1/targets", &[])?;
        Ok(data["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                Target {
                    pool: text(&t["scrapePool"]),
                    url: text(&t["scrapeUrl"]),
                    health: text(&t["health"]),
                    error: text(&t["lastError"]),
                }
            })
            .collect())
    }
}

/// One scrape target of [`Prometheus::targets`].
#[derive(Debug)]
pub struct Target {
    pub pool: String,
    /// The URL it scrapes, scheme first.
    pub url: String,
    /// `up`, `down` or `unknown`.
    pub health: String,
    /// Why its last scrape failed; empty when it did not.
    pub error: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some((child, dir)) = &mut self.process {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
