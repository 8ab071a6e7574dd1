//! Processes a test starts: a webhook with its own certificates, the controller, any daemon.
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::Engine as _;

/// The repository root, for `config/samples` and the like.
use crate::*;

/// A free TCP port on 127.0.0.1 for a process a test starts.
///
/// It comes from below the kernel's ephemeral range (32768 and up), so the source port of some
/// other outgoing connection (kubectl, curl, the apiserver's clients) cannot take it between
/// this check and the process binding it, and no port is handed out twice in one test binary.
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    // Each test binary starts at its own offset, so two binaries never walk the same ports.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(SPAN)) as u16;
    for _ in 0..SPAN {
        let step = NEXT.fetch_add(1, Ordering::Relaxed) % SPAN;
        let port = FIRST + (start + step) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port between {FIRST} and {}", FIRST + SPAN)
}

/// A kubesteer-webhook process on 127.0.0.1 with its own certificates, registered through the
/// chart's webhook configurations for namespaces labelled `kubesteer.io/e2e=<id>` only, so tests
/// never affect each other. Everything is removed on drop.
pub struct Webhook {
    pub id: String,
    pub port: u16,
    pub dir: PathBuf,
    child: std::process::Child,
    /// Whether it serves the Scaler CRD's conversion (and put its URL there).
    converting: bool,
}

impl Webhook {
    pub fn start(id: &str) -> Result<Self> {
        Self::start_with(id, false)
    }

    /// A webhook that also serves the Scaler CRD's conversion: it points the CRD at itself with
    /// its CA and this returns once the apiserver has that caBundle. Conversion is cluster-wide,
    /// so only one test binary (never two tests at once) may use it.
    pub fn start_converting(id: &str) -> Result<Self> {
        let webhook = Self::start_with(id, true)?;
        let ca = std::fs::read(webhook.dir.join("ca.crt"))?;
        let want = base64::engine::general_purpose::STANDARD.encode(ca);
        eventually(
            Duration::from_secs(60),
            "the CRD's conversion caBundle",
            || Ok((crate::conversion_ca_bundle()?.trim() == want).then_some(())),
        )?;
        Ok(webhook)
    }

    fn start_with(id: &str, converting: bool) -> Result<Self> {
        let port = free_port()?;
        let dir = target_dir().join("e2e").join(format!("webhook-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let dir_s = dir.to_string_lossy().to_string();
        let out = output_within(
            Command::new(workspace_bin("kubesteer-certs"))
                .args([
                    "generate",
                    "--service",
                    "kubesteer-webhook",
                    "--namespace",
                    "kubesteer-system",
                ])
                .args(["--ip", "127.0.0.1", "--out-dir", &dir_s]),
            None,
            Duration::from_secs(60),
            "kubesteer-certs generate",
        )
        .context("running kubesteer-certs; run `cargo build --workspace` first")?;
        if !out.status.success() {
            bail!("kubesteer-certs: {}", String::from_utf8_lossy(&out.stderr));
        }
        let log = std::fs::File::create(dir.join("webhook.log"))?;
        let child = Command::new(workspace_bin("kubesteer-webhook"))
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args([
                "--tls-cert-file",
                &format!("{dir_s}/tls.crt"),
                "--tls-key-file",
                &format!("{dir_s}/tls.key"),
            ])
            .args(if converting {
                vec![
                    "--conversion-crd".to_string(),
                    "scalers.kubesteer.io".to_string(),
                    "--conversion-url".to_string(),
                    format!("https://127.0.0.1:{port}"),
                    "--conversion-ca-file".to_string(),
                    format!("{dir_s}/ca.crt"),
                    "--cert-check-interval".to_string(),
                    "2s".to_string(),
                ]
            } else {
                Vec::new()
            })
            .env("KUBECONFIG", kubeconfig())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting kubesteer-webhook")?;
        let webhook = Webhook {
            id: id.to_string(),
            port,
            dir,
            child,
            converting,
        };
        webhook.wait_ready()?;
        webhook.register()?;
        Ok(webhook)
    }

    fn curl(&self, path: &str) -> Result<bool> {
        let ca = self.dir.join("ca.crt");
        let url = format!("https://127.0.0.1:{}{path}", self.port);
        let out = output_within(
            Command::new("curl")
                .args(["-sf", "--max-time", "2", "--cacert", &ca.to_string_lossy()])
                .arg(&url),
            None,
            Duration::from_secs(12),
            &format!("curl {url}"),
        )?;
        Ok(out.status.success())
    }

    fn wait_ready(&self) -> Result<()> {
        eventually(Duration::from_secs(30), "webhook /readyz", || {
            Ok(self.curl("/readyz")?.then_some(()))
        })
    }

    /// Renders the chart's webhook configurations for this process and applies them.
    fn register(&self) -> Result<()> {
        let chart = repo_root().join("charts/kubesteer");
        let release = format!("e2e-{}", self.id);
        let url = format!("webhook.url=https://127.0.0.1:{}", self.port);
        let ca = format!("webhook.caBundle={}", self.dir.join("ca.crt").display());
        let selector = format!(
            "webhook.namespaceSelector.matchLabels.kubesteer\\.io/e2e={}",
            self.id
        );
        let rendered = helm(&[
            "template",
            &release,
            &chart.to_string_lossy(),
            "--namespace",
            "kubesteer-system",
            "--show-only",
            "templates/webhook-configurations.yaml",
            "--set",
            &url,
            "--set-file",
            &ca,
            "--set",
            &selector,
        ])?;
        kubectl_ok(&["apply", "-f", "-"], Some(&rendered))?;
        Ok(())
    }

    /// A fresh namespace that this webhook admits.
    pub fn namespace(&self, prefix: &str) -> Result<Namespace> {
        Namespace::admitted_by(prefix, &self.id)
    }

    /// The webhook's log so far, for assertions about what it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("webhook.log")).unwrap_or_default()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let name = format!("e2e-{}-kubesteer", self.id);
        let _ = kubectl(
            &[
                "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                &name,
                "--ignore-not-found",
            ],
            None,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.converting {
            // The CRD's conversion back to the committed Service, for whatever runs next.
            let _ = install_crds();
        }
    }
}

pub(crate) static CONTROLLER_BUILD: std::sync::OnceLock<std::result::Result<PathBuf, String>> =
    std::sync::OnceLock::new();

/// How long a test may build the workspace's binaries for: usually they are built already
/// (`hack/e2e.sh` builds them first), but a cold build on a small machine takes long.
pub const CARGO_BUILD_LIMIT: Duration = Duration::from_secs(60 * 60);

/// `cargo build -q SELECTION` in the repository, within [`CARGO_BUILD_LIMIT`]; an error only when
/// it could not run (its status says whether it built).
pub fn cargo_build(selection: &[&str]) -> std::result::Result<std::process::Output, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    output_within(
        Command::new(&cargo)
            .args(["build", "-q"])
            .args(selection)
            .current_dir(repo_root()),
        None,
        CARGO_BUILD_LIMIT,
        &format!("cargo build {}", selection.join(" ")),
    )
    .map_err(|e| format!("running cargo build: {e:#}"))
}

/// Builds `kubesteer-controller` once per test process and returns its path.
pub fn controller_binary() -> Result<PathBuf> {
    let built = CONTROLLER_BUILD.get_or_init(|| {
        let build = cargo_build;
        // The selection of hack/e2e.sh: another one unifies dependency features differently
        // (ring, rustls), so each switch rebuilds half the tree for a minute or more.
        let mut out = build(&["--workspace", "--bins"])?;
        if !out.status.success() {
            // Some other crate does not build right now; the controller alone may.
            out = build(&["-p", "kubesteer-controller"])?;
        }
        if !out.status.success() {
            return Err(format!(
                "cargo build -p kubesteer-controller failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(target_dir().join("debug/kubesteer-controller"))
    });
    built.clone().map_err(anyhow::Error::msg)
}

/// `kubesteer-controller` running as a child process for one test, watching only `namespace`,
/// so tests running side by side never share a controller. Stopped with SIGTERM on drop.
pub struct ControllerProcess {
    child: std::process::Child,
    log: PathBuf,
}

impl ControllerProcess {
    pub fn start(namespace: &str) -> Result<Self> {
        Self::start_with(namespace, namespace, &[])
    }

    /// Starts one with extra arguments; `log_name` names its log file under target/e2e-logs.
    pub fn start_with(namespace: &str, log_name: &str, extra: &[&str]) -> Result<Self> {
        Self::start_via(&kubeconfig(), namespace, log_name, extra)
    }

    /// Like [`ControllerProcess::start_with`], reaching the cluster through `kubeconfig`.
    pub fn start_via(
        kubeconfig: &std::path::Path,
        namespace: &str,
        log_name: &str,
        extra: &[&str],
    ) -> Result<Self> {
        let binary = controller_binary()?;
        let dir = target_dir().join("e2e-logs");
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{log_name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(&binary)
            .args(["--namespace", namespace, "--metrics-addr", "127.0.0.1:0"])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kubesteer_controller=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self { child, log })
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// What the controller logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address of its /metrics, as it logged it.
    pub fn metrics_addr(&self) -> Result<String> {
        self.logs()
            .lines()
            .find(|l| l.contains("serving /metrics"))
            .and_then(|l| l.split("addr=").nth(1))
            .map(|a| a.trim().to_string())
            .context("the controller has not logged its metrics address")
    }

    /// What its /metrics serves now, at the address it logged.
    pub fn metrics(&self) -> Result<String> {
        let addr = self.metrics_addr()?;
        let (code, body) = http_get(&addr, "/metrics")?;
        anyhow::ensure!(code == 200, "GET /metrics: {code} {body}");
        Ok(body)
    }

    /// The value of the counter or gauge sample `name{labels}` in /metrics, 0 if absent.
    pub fn metric(&self, sample: &str) -> Result<f64> {
        let text = self.metrics()?;
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .map(|v| v.trim().parse::<f64>())
            .transpose()?;
        Ok(value.unwrap_or(0.0))
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills it at once, as a crash would: no graceful shutdown, no Lease release.
    pub fn crash(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks it to stop with SIGTERM and waits up to `timeout`; true when it exited in time.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        use wait_timeout::ChildExt as _;
        if !self.is_running() {
            return true;
        }
        if send_signal(self.child.id(), "TERM").is_err() {
            return false;
        }
        matches!(self.child.wait_timeout(timeout), Ok(Some(_)))
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if !self.terminate(Duration::from_secs(10)) {
            self.crash();
        }
    }
}

/// A background process for one test, with its output in a log file; killed on drop.
pub struct Daemon {
    child: std::process::Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn spawn(
        binary: &str,
        args: &[String],
        kubeconfig: &std::path::Path,
        log_name: &str,
    ) -> Result<Self> {
        let dir = target_dir().join("e2e");
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{log_name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(workspace_bin(binary))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {binary}; run `cargo build --workspace` first"))?;
        Ok(Self { child, log })
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the process now (also done on drop).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A plain HTTP/1.1 GET of `path` from `addr` (host:port), 5 s for each step: the status code
/// and the body.
pub fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let socket = std::net::ToSocketAddrs::to_socket_addrs(addr)?
        .next()
        .with_context(|| format!("no address in {addr:?}"))?;
    let mut stream = std::net::TcpStream::connect_timeout(&socket, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .with_context(|| format!("GET {path}: {response}"))?;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    Ok((code.parse()?, body.to_string()))
}
