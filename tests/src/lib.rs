//! Helpers for end-to-end tests that drive a real cluster with the real `kubectl`, like a user.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod keda;
pub mod release;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};

/// The repository root, for `config/samples` and the like.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cache_bin() -> PathBuf {
    let cache = std::env::var_os("KUBESTEER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/kubesteer")
        });
    cache.join("bin")
}

/// The e2e tests' own cluster, which `hack/e2e.sh` starts (never `make run`'s `kubesteer`).
const E2E_CLUSTER: &str = "kubesteer-e2e";

/// The state directory of the e2e cluster: `$KUBESTEER_STATE`, else `.kubesteer/e2e`.
fn state_dir() -> PathBuf {
    std::env::var_os("KUBESTEER_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".kubesteer/e2e"))
}

/// The kubeconfig of the e2e cluster that `hack/e2e.sh` started: `$KUBESTEER_KUBECONFIG`, else
/// the state directory's. Never `$KUBECONFIG`, which may well name `make run`'s cluster.
pub fn kubeconfig() -> PathBuf {
    std::env::var_os("KUBESTEER_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| state_dir().join("kubeconfig"))
}

/// The CA of the client certificate the cluster's apiserver presents to webhooks, which
/// hack/cluster.sh makes beside the kubeconfig; `None` for a cluster started without it.
pub fn apiserver_client_ca() -> Option<PathBuf> {
    let ca = kubeconfig().parent()?.join("apiserver-client/ca.crt");
    ca.is_file().then_some(ca)
}

/// The chart values that make a release's webhook answer reviews from this cluster's apiserver
/// only (`webhook.apiserverAuth.clientCA`), or none for a cluster without that certificate.
pub fn apiserver_auth_values() -> Vec<String> {
    apiserver_client_ca()
        .map(|ca| {
            vec![
                "--set-file".to_string(),
                format!("webhook.apiserverAuth.clientCA={}", ca.display()),
            ]
        })
        .unwrap_or_default()
}

/// The result of one kubectl call.
#[derive(Debug)]
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// Runs the pinned kubectl against the local cluster, feeding `stdin` when given.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Result<Run> {
    let mut cmd = Command::new(cache_bin().join("kubectl"));
    cmd.arg("--kubeconfig").arg(kubeconfig()).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .context("starting kubectl; run `make control-plane` first")?;
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .context("kubectl stdin")?
            .write_all(input.as_bytes())?;
    }
    Ok(child.wait_with_output()?.into())
}

/// Like [`kubectl`], but fails with kubectl's stderr when the call fails.
pub fn kubectl_ok(args: &[&str], stdin: Option<&str>) -> Result<String> {
    let run = kubectl(args, stdin)?;
    if !run.ok {
        bail!("kubectl {} failed: {}", args.join(" "), run.stderr);
    }
    Ok(run.stdout)
}

/// A namespace of its own for one test, deleted (without waiting) when dropped.
pub struct Namespace(pub String);

impl Namespace {
    pub fn new(prefix: &str) -> Result<Self> {
        let name = unique(&format!("{prefix}-"));
        kubectl_ok(&["create", "namespace", &name], None)?;
        Ok(Namespace(name))
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    /// `kubectl create deployment` of `replicas` nginx pods (kwok runs them) in this namespace.
    pub fn create_deployment(&self, name: &str, replicas: u32) -> Result<()> {
        let replicas = format!("--replicas={replicas}");
        kubectl_ok(
            &[
                "create",
                "deployment",
                name,
                "-n",
                &self.0,
                "--image=nginx",
                &replicas,
            ],
            None,
        )?;
        Ok(())
    }

    /// `kubectl apply -f -` of `yaml` in this namespace.
    pub fn apply(&self, yaml: &str) -> Result<Run> {
        kubectl(&["apply", "-n", &self.0, "-f", "-"], Some(yaml))
    }

    /// `kubectl patch --type=merge` of `object` (e.g. `memcached/cache`) in this namespace.
    pub fn merge_patch(&self, object: &str, patch: &str) -> Result<String> {
        kubectl_ok(
            &["patch", "-n", &self.0, object, "--type=merge", "-p", patch],
            None,
        )
    }

    /// Waits until the controller has written the status of `object`'s current generation
    /// (`status.observedGeneration`) and returns that generation.
    pub fn wait_observed(&self, object: &str, timeout: Duration) -> Result<String> {
        let generation = jsonpath(&self.0, object, "{.metadata.generation}")?;
        eventually(
            timeout,
            &format!("{object} generation {generation} observed"),
            || {
                let observed = jsonpath(&self.0, object, "{.status.observedGeneration}")?;
                Ok((observed == generation).then_some(()))
            },
        )?;
        Ok(generation)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"], None);
        // The test's controller is gone by now, so Scaler finalizers would hold the namespace
        // in Terminating for ever.
        let scalers = kubectl(
            &["get", "scalers.kubesteer.io", "-n", &self.0, "-o", "name"],
            None,
        );
        for scaler in scalers.iter().flat_map(|r| r.stdout.lines()) {
            let _ = kubectl(
                &[
                    "patch",
                    "-n",
                    &self.0,
                    scaler,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ],
                None,
            );
        }
    }
}

/// Polls `check` until it returns `Some`, or fails after `timeout` with the last observation.
pub fn eventually<T>(
    timeout: Duration,
    what: &str,
    check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    eventually_every(timeout, Duration::from_millis(250), what, check)
}

/// Like [`eventually`], polling every `interval`, for checks that are costly to the apiserver.
pub fn eventually_every<T>(
    timeout: Duration,
    interval: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last error: {last}");
        }
        std::thread::sleep(interval);
    }
}

/// Reads one JSONPath of one object.
pub fn jsonpath(ns: &str, resource: &str, path: &str) -> Result<String> {
    kubectl_ok(
        &["get", "-n", ns, resource, "-o", &format!("jsonpath={path}")],
        None,
    )
}

/// The notes of the events with `reason` in `ns`, oldest first.
pub fn event_notes(ns: &str, reason: &str) -> Result<Vec<String>> {
    let out = kubectl_ok(
        &[
            "get",
            "events.events.k8s.io",
            "-n",
            ns,
            "--field-selector",
            &format!("reason={reason}"),
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            "jsonpath={range .items[*]}{.note}{\"\\n\"}{end}",
        ],
        None,
    )?;
    Ok(out.lines().map(String::from).collect())
}

/// The directory cargo builds into (honours CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// A workspace binary, built by `hack/e2e.sh` before the tests run.
pub fn workspace_bin(name: &str) -> PathBuf {
    target_dir().join("debug").join(name)
}

/// Runs a pinned tool from the control-plane cache (helm, kubectl).
pub fn cached_tool(name: &str) -> PathBuf {
    cache_bin().join(name)
}

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

/// Applies the committed CRDs as `make install` does (`hack/crds.sh`), and waits until they are
/// established.
pub fn install_crds() -> Result<()> {
    let out = Command::new(repo_root().join("hack/crds.sh"))
        .arg(cached_tool("kubectl"))
        .env("KUBECONFIG", kubeconfig())
        .output()
        .context("running hack/crds.sh")?;
    if !out.status.success() {
        bail!("hack/crds.sh: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
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
            || {
                let got = kubectl_ok(
                    &[
                        "get",
                        "crd",
                        "scalers.kubesteer.io",
                        "-o",
                        "jsonpath={.spec.conversion.webhook.clientConfig.caBundle}",
                    ],
                    None,
                )?;
                Ok((got.trim() == want).then_some(()))
            },
        )?;
        Ok(webhook)
    }

    fn start_with(id: &str, converting: bool) -> Result<Self> {
        let port = free_port()?;
        let dir = target_dir().join("e2e").join(format!("webhook-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let dir_s = dir.to_string_lossy().to_string();
        let out = Command::new(workspace_bin("kubesteer-certs"))
            .args([
                "generate",
                "--service",
                "kubesteer-webhook",
                "--namespace",
                "kubesteer-system",
            ])
            .args(["--ip", "127.0.0.1", "--out-dir", &dir_s])
            .output()
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
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "2", "--cacert", &ca.to_string_lossy()])
            .arg(format!("https://127.0.0.1:{}{path}", self.port))
            .output()?;
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
        let ns = Namespace::new(prefix)?;
        kubectl_ok(
            &[
                "label",
                "namespace",
                ns.name(),
                &format!("kubesteer.io/e2e={}", self.id),
            ],
            None,
        )?;
        Ok(ns)
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

static CONTROLLER_BUILD: std::sync::OnceLock<std::result::Result<PathBuf, String>> =
    std::sync::OnceLock::new();

/// Builds `kubesteer-controller` once per test process and returns its path.
pub fn controller_binary() -> Result<PathBuf> {
    let built = CONTROLLER_BUILD.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let build = |selection: &[&str]| {
            Command::new(&cargo)
                .args(["build", "-q"])
                .args(selection)
                .current_dir(repo_root())
                .output()
                .map_err(|e| format!("running cargo build: {e}"))
        };
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
        use std::io::{Read, Write};
        let addr = self.metrics_addr()?;
        let mut stream = std::net::TcpStream::connect(&addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        anyhow::ensure!(
            response.starts_with("HTTP/1.1 200"),
            "GET /metrics: {response}"
        );
        Ok(response)
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
        if !self.is_running() {
            return true;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if !self.is_running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if !self.terminate(Duration::from_secs(10)) {
            self.crash();
        }
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    u64::try_from(Utc::now().timestamp()).unwrap_or_default()
}

/// Seconds since the Unix epoch, now, to the microsecond.
pub fn now_seconds() -> f64 {
    seconds(Utc::now())
}

fn seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp() as f64 + f64::from(at.timestamp_subsec_micros()) / 1e6
}

fn utc(unix: u64) -> DateTime<Utc> {
    i64::try_from(unix)
        .ok()
        .and_then(|s| DateTime::from_timestamp(s, 0))
        .unwrap_or_default()
}

/// The UTC wall-clock time `"HH:MM"` of a Unix time.
pub fn hh_mm(unix: u64) -> String {
    utc(unix).format("%H:%M").to_string()
}

/// A Unix time as Kubernetes prints it, e.g. "2025-03-03T09:00:00Z".
pub fn rfc3339(unix: u64) -> String {
    utc(unix).to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Seconds since the Unix epoch of an RFC 3339 time such as a Time ("2025-03-03T09:00:00Z") or a
/// MicroTime ("2025-03-03T09:00:00.123456Z").
pub fn parse_rfc3339(time: &str) -> Result<f64> {
    let at = DateTime::parse_from_rfc3339(time).with_context(|| format!("not a time: {time:?}"))?;
    Ok(seconds(at.with_timezone(&Utc)))
}

/// A Role in `ns` with `verbs` on `resource`, bound to `user`.
pub fn grant(ns: &str, role: &str, verbs: &str, resource: &str, user: &str) -> Result<()> {
    kubectl_ok(
        &[
            "create",
            "role",
            role,
            "-n",
            ns,
            &format!("--verb={verbs}"),
            &format!("--resource={resource}"),
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "create",
            "rolebinding",
            role,
            "-n",
            ns,
            &format!("--role={role}"),
            &format!("--user={user}"),
        ],
        None,
    )?;
    Ok(())
}

/// `kubectl apply` of `yaml` in `ns` as `user`.
pub fn apply_as(user: &str, ns: &str, yaml: &str) -> Result<Run> {
    kubectl(
        &["apply", &format!("--as={user}"), "-n", ns, "-f", "-"],
        Some(yaml),
    )
}

/// `kubectl patch --type=merge` of `object` in `ns` as `user`.
pub fn merge_patch_as(user: &str, ns: &str, object: &str, patch: &str) -> Result<Run> {
    kubectl(
        &[
            "patch",
            &format!("--as={user}"),
            "-n",
            ns,
            object,
            "--type=merge",
            "-p",
            patch,
        ],
        None,
    )
}

/// The webhooks the chart registers: a mutating and a validating one per kind.
pub const WEBHOOKS: usize = 2 * kubesteer_api::kind::ALL.len();

/// A random-enough suffix for names that must not collide between runs.
pub fn unique(prefix: &str) -> String {
    let nanos = Utc::now().timestamp_subsec_nanos();
    format!("{prefix}{:x}{:x}", std::process::id() % 4096, nanos % 65536)
}

/// A copy of the local kubeconfig whose user impersonates `user` with `groups`, so a process
/// run with it has exactly that identity's RBAC.
pub fn impersonating_kubeconfig(user: &str, groups: &[&str], file: &str) -> Result<PathBuf> {
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(kubeconfig())?)?;
    let users = config
        .get_mut("users")
        .and_then(|u| u.as_sequence_mut())
        .context("kubeconfig has no users")?;
    for entry in users {
        if let Some(u) = entry.get_mut("user").and_then(|u| u.as_mapping_mut()) {
            u.insert("as".into(), user.into());
            u.insert(
                "as-groups".into(),
                groups
                    .iter()
                    .map(|g| serde_yaml::Value::from(*g))
                    .collect::<Vec<_>>()
                    .into(),
            );
        }
    }
    let path = target_dir().join("e2e").join(file);
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

/// The e2e cluster's kwokctl directory (`<state>/kwok/clusters/<name>`).
fn cluster_dir() -> PathBuf {
    let name = std::env::var("KUBESTEER_CLUSTER").unwrap_or_else(|_| E2E_CLUSTER.to_string());
    state_dir().join("kwok/clusters").join(name)
}

/// One process of the local control plane, as kwokctl started it: enough to start it again.
struct Component {
    argv: Vec<std::ffi::OsString>,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    cwd: PathBuf,
    pid_file: PathBuf,
    log: PathBuf,
}

impl Component {
    /// Reads the running `name` (e.g. `kube-apiserver`) from its pid file and /proc.
    fn running(name: &str) -> Result<Self> {
        use std::os::unix::ffi::OsStrExt as _;
        let dir = cluster_dir();
        let pid_file = dir.join(format!("pids/{name}.pid"));
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("the pid file of {name}"))?;
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let split = |bytes: Vec<u8>| -> Vec<std::ffi::OsString> {
            bytes
                .split(|b| *b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| std::ffi::OsStr::from_bytes(part).to_os_string())
                .collect()
        };
        let argv = split(std::fs::read(proc.join("cmdline"))?);
        if argv.is_empty() {
            bail!("{name} ({pid}) has no command line");
        }
        let env = split(std::fs::read(proc.join("environ"))?)
            .into_iter()
            .filter_map(|kv| {
                let bytes = kv.as_bytes();
                let eq = bytes.iter().position(|b| *b == b'=')?;
                Some((
                    std::ffi::OsStr::from_bytes(&bytes[..eq]).to_os_string(),
                    std::ffi::OsStr::from_bytes(&bytes[eq + 1..]).to_os_string(),
                ))
            })
            .collect();
        let cwd = std::fs::read_link(proc.join("cwd"))?;
        // SIGKILL: a crash; SIGTERM would start a graceful shutdown that can take minutes.
        let killed = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()?;
        if !killed.success() {
            bail!("kill {pid} ({name}) failed");
        }
        eventually_every(
            Duration::from_secs(30),
            Duration::from_millis(20),
            &format!("{name} stopped"),
            || Ok((!proc.exists()).then_some(())),
        )?;
        Ok(Self {
            argv,
            env,
            cwd,
            pid_file,
            log: dir.join(format!("logs/{name}.log")),
        })
    }

    fn start(&self) -> Result<()> {
        use std::os::unix::process::CommandExt as _;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        // Its own process group, so it outlives this test as kwokctl's own processes do.
        let child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {:?} again", self.argv[0]))?;
        // kwokctl stops the cluster by these pid files.
        std::fs::write(&self.pid_file, child.id().to_string())?;
        Ok(())
    }
}

/// The local control plane restarting as a control-plane node does: kube-apiserver,
/// kube-controller-manager and kube-scheduler are killed, and started again with the same
/// command lines by [`Outage::end`] (or on drop). etcd, kwok and the kubelet stay up and
/// reconnect. (The controller-manager and the scheduler would exit anyway once their leader
/// leases could not be renewed, and nothing else restarts them here; `kwokctl stop cluster`
/// would restart kwok too, which then waits minutes for its old node leases.)
pub struct Outage {
    stopped: Vec<Component>,
}

impl Outage {
    pub fn begin() -> Result<Self> {
        let mut outage = Self {
            stopped: Vec::new(),
        };
        for name in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ] {
            outage.stopped.push(Component::running(name)?);
        }
        Ok(outage)
    }

    /// Starts the control plane again and returns once the apiserver answers `/readyz`.
    pub fn end(mut self) -> Result<Instant> {
        for component in std::mem::take(&mut self.stopped) {
            component.start()?;
        }
        eventually_every(
            Duration::from_secs(60),
            Duration::from_millis(100),
            "the apiserver back",
            || {
                Ok(kubectl(&["get", "--raw", "/readyz"], None)?
                    .ok
                    .then_some(()))
            },
        )?;
        Ok(Instant::now())
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        for component in &self.stopped {
            let _ = component.start();
        }
    }
}

/// The apiserver's address, from the local kubeconfig's server URL.
pub fn apiserver_addr() -> Result<std::net::SocketAddr> {
    let config: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig())?)?;
    let server = config["clusters"][0]["cluster"]["server"]
        .as_str()
        .context("kubeconfig has no server")?;
    let hostport = server
        .strip_prefix("https://")
        .context("the server is not https")?
        .trim_end_matches('/');
    Ok(hostport.parse()?)
}

/// A copy of the local kubeconfig whose server is `https://127.0.0.1:<port>`, e.g. a [`TcpProxy`]
/// (the apiserver certificate is for 127.0.0.1, whatever the port).
pub fn kubeconfig_via(port: u16, file: &str) -> Result<PathBuf> {
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(kubeconfig())?)?;
    let clusters = config
        .get_mut("clusters")
        .and_then(|c| c.as_sequence_mut())
        .context("kubeconfig has no clusters")?;
    for entry in clusters {
        if let Some(c) = entry.get_mut("cluster").and_then(|c| c.as_mapping_mut()) {
            c.insert("server".into(), format!("https://127.0.0.1:{port}").into());
        }
    }
    let path = target_dir().join("e2e").join(file);
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

/// A TCP proxy on 127.0.0.1 in front of `upstream`, to cut a process off the apiserver as a
/// network partition would: paused, it forwards nothing either way and connects nothing new,
/// so requests hang rather than fail. Stopped on drop.
pub struct TcpProxy {
    pub port: u16,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl TcpProxy {
    pub fn start(upstream: std::net::SocketAddr) -> Result<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let paused = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let (p, c) = (paused.clone(), closed.clone());
        std::thread::spawn(move || {
            while !c.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (p, c) = (p.clone(), c.clone());
                        std::thread::spawn(move || {
                            let _ = Self::connect(client, upstream, &p, &c);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(Self {
            port,
            paused,
            closed,
        })
    }

    /// Stops forwarding: bytes in flight stay where they are, in both directions.
    pub fn pause(&self) {
        self.paused.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.paused
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    fn connect(
        client: std::net::TcpStream,
        upstream: std::net::SocketAddr,
        paused: &std::sync::Arc<std::sync::atomic::AtomicBool>,
        closed: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<()> {
        use std::sync::atomic::Ordering;
        client.set_nonblocking(false)?;
        while paused.load(Ordering::Relaxed) && !closed.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let server = std::net::TcpStream::connect(upstream)?;
        let (c2, s2) = (client.try_clone()?, server.try_clone()?);
        let (p, c) = (paused.clone(), closed.clone());
        std::thread::spawn(move || Self::pipe(c2, s2, &p, &c));
        Self::pipe(server, client, paused, closed);
        Ok(())
    }

    fn pipe(
        mut from: std::net::TcpStream,
        mut to: std::net::TcpStream,
        paused: &std::sync::atomic::AtomicBool,
        closed: &std::sync::atomic::AtomicBool,
    ) {
        use std::io::{ErrorKind, Read, Write};
        use std::sync::atomic::Ordering;
        if from
            .set_read_timeout(Some(Duration::from_millis(50)))
            .is_err()
        {
            return;
        }
        let mut buf = [0u8; 16 * 1024];
        while !closed.load(Ordering::Relaxed) {
            if paused.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
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

/// `jsonpath` of every webhook of both configurations named `name`, one line per webhook.
pub fn webhook_fields(name: &str, jsonpath: &str) -> Result<Vec<String>> {
    let mut all = Vec::new();
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let range = format!("jsonpath={{range .webhooks[*]}}{jsonpath}{{\"\\n\"}}{{end}}");
        let out = kubectl_ok(&["get", kind, name, "-o", &range], None)?;
        all.extend(out.lines().map(String::from));
    }
    Ok(all)
}

/// Runs the pinned helm against the local cluster.
pub fn helm_run(args: &[&str]) -> Result<Run> {
    let out = Command::new(cached_tool("helm"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args)
        .output()
        .context("running helm; run `make control-plane` first")?;
    Ok(out.into())
}

/// Like [`helm_run`], but fails with helm's stderr when the call fails; helm's stdout.
pub fn helm(args: &[&str]) -> Result<String> {
    let run = helm_run(args)?;
    if !run.ok {
        bail!("helm {} failed: {}", args.join(" "), run.stderr);
    }
    Ok(run.stdout)
}

/// Standard base64, as Secret data and `caBundle`s are shown.
pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes standard base64, surrounding whitespace ignored.
pub fn unbase64(text: &str) -> Result<Vec<u8>> {
    Ok(base64::engine::general_purpose::STANDARD.decode(text.trim())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_like_kubernetes() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_740_992_400), "2025-03-03T09:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(hh_mm(1_740_992_400 + 59), "09:00");
    }

    #[test]
    fn times_parse_like_kubernetes_prints_them() -> Result<()> {
        assert_eq!(parse_rfc3339("2025-03-03T09:00:00Z")?, 1_740_992_400.0);
        assert_eq!(
            parse_rfc3339("2025-03-03T09:00:00.250000Z")?,
            1_740_992_400.25
        );
        assert_eq!(parse_rfc3339(&rfc3339(951_782_400))?, 951_782_400.0);
        assert!(parse_rfc3339("2025-03-03 09:00").is_err());
        Ok(())
    }
}
