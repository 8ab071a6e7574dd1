//! kubesteer-bench-lease: kubesteer's own leader election (runtime/src/lease.rs) against the kept
//! crate kube-lease-manager, on a real etcd and kube-apiserver this binary starts on ports of its
//! own and stops (issue 61 item 3). Writes bench/results/lease-own-vs-kube-lease-manager.json.
//!
//! Every replica is a process of its own (`replica`, this binary), reaching the apiserver through
//! a TCP proxy of the parent's, which can hold every byte both ways (a partition); it prints
//! `leading true` / `leading false` as its elector tells it, and the parent notes when it reads
//! each line. Each replica authenticates with a token of its own, so the apiserver's audit log
//! (Metadata level, Leases only) tells whose requests it answered, when and how.
//!
//! Scenarios, each round on a Lease of its own with a leader `a` and a standby `b` started after
//! it: failover (SIGKILL of `a`, until `b` leads), handover (`a` shut down gracefully, until `b`
//! leads), steady state (Lease requests per minute of both), and the split brain (`a`'s proxy
//! holds every byte for longer than the lease duration; after `b` leads it lets them through:
//! how long `a` still led after `b` started, and whether a write of `a` was accepted on `b`'s
//! Lease).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, Config};
use kube_lease_manager::LeaseManagerBuilder;
use kubesteer_runtime::lease;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, Command as Process};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const NAMESPACE: &str = "default";
/// Both electors' lease duration.
const DURATION_SECONDS: u64 = lease::LEASE_DURATION_SECONDS;

#[derive(Debug, Parser)]
#[command(
    name = "kubesteer-bench-lease",
    about = "Leader election: own vs kube-lease-manager"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
enum Elector {
    /// kubesteer_runtime::lease::run_while_leading, as the controller runs it.
    Own,
    /// kube_lease_manager::LeaseManager::watch.
    KubeLeaseManager,
}

impl Elector {
    fn name(self) -> &'static str {
        match self {
            Self::Own => "own",
            Self::KubeLeaseManager => "kube-lease-manager",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Self::Own => "own",
            Self::KubeLeaseManager => "klm",
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Starts etcd and kube-apiserver, runs every scenario on each elector (the electors side by
    /// side, on Leases of their own), stops them and writes `out`.
    Run {
        /// etcd and kube-apiserver (hack/build-control-plane.sh builds them there).
        #[arg(long, env = "KUBESTEER_CACHE_BIN")]
        bin_dir: Option<PathBuf>,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 60)]
        steady_secs: u64,
        /// How long the split-brain scenario holds the leader's bytes (at least until the
        /// standby leads, plus 2 s).
        #[arg(long, default_value_t = 15)]
        stall_secs: u64,
        /// kube-lease-manager's grace: it renews this long before the Lease would expire, so
        /// every duration - grace = 3 s, as often as the own elector's RETRY_PERIOD.
        #[arg(long, default_value_t = 7)]
        grace: u64,
        #[arg(long, value_enum, num_args = 1.., default_values_t = [Elector::Own, Elector::KubeLeaseManager])]
        electors: Vec<Elector>,
        /// The work directory (etcd's data, logs, the audit log); a new one under /tmp if unset.
        #[arg(long)]
        work: Option<PathBuf>,
        #[arg(
            long,
            default_value = "bench/results/lease-own-vs-kube-lease-manager.json"
        )]
        out: PathBuf,
    },
    /// One replica (a child of `run`): runs `elector` on Lease `lease` until its stdin closes,
    /// printing `leading true|false` when that changes and `exit` at the end.
    Replica {
        #[arg(long, value_enum)]
        elector: Elector,
        #[arg(long)]
        server: String,
        #[arg(long)]
        token: String,
        #[arg(long)]
        identity: String,
        #[arg(long)]
        lease: String,
        #[arg(long, default_value_t = 7)]
        grace: u64,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Replica {
            elector,
            server,
            token,
            identity,
            lease,
            grace,
        } => replica(elector, &server, &token, identity, &lease, grace).await,
        Command::Run {
            bin_dir,
            rounds,
            steady_secs,
            stall_secs,
            grace,
            electors,
            work,
            out,
        } => {
            let bin_dir = match bin_dir {
                Some(b) => b,
                None => {
                    let cache = std::env::var_os("KUBESTEER_CACHE").map(PathBuf::from);
                    let home = std::env::var_os("HOME")
                        .map(PathBuf::from)
                        .unwrap_or_default();
                    cache
                        .unwrap_or_else(|| home.join(".cache/kubesteer"))
                        .join("bin")
                }
            };
            let work = match work {
                Some(w) => w,
                None => std::env::temp_dir()
                    .join(format!("kubesteer-lease-bench-{}", std::process::id())),
            };
            let options = Options {
                rounds,
                steady: Duration::from_secs(steady_secs),
                stall: Duration::from_secs(stall_secs),
                grace,
            };
            let results = run(&bin_dir, &work, &electors, &options).await?;
            std::fs::write(&out, serde_json::to_string_pretty(&results)? + "\n")
                .with_context(|| format!("writing {}", out.display()))?;
            log(format!("wrote {}", out.display()));
            Ok(())
        }
    }
}

fn log(msg: impl AsRef<str>) {
    eprintln!(
        "[lease-bench {}] {}",
        Utc::now().format("%H:%M:%S%.3f"),
        msg.as_ref()
    );
}

fn say(line: &str) {
    println!("{line}");
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// `later - earlier` in seconds, negative when `later` came first.
fn signed(later: Instant, earlier: Instant) -> f64 {
    if later >= earlier {
        secs(later - earlier)
    } else {
        -secs(earlier - later)
    }
}

// ---------------------------------------------------------------------------------------------
// The replica.

async fn replica(
    elector: Elector,
    server: &str,
    token: &str,
    identity: String,
    lease_name: &str,
    grace: u64,
) -> Result<()> {
    kubesteer_runtime::logging::init("kubesteer-bench-lease", false)?;
    let mut config = Config::new(server.parse()?);
    config.accept_invalid_certs = true;
    config.headers.push((
        http::header::AUTHORIZATION,
        format!("Bearer {token}").parse()?,
    ));
    let (shutdown_tx, shutdown) = watch::channel(false);
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok(n) = std::io::Read::read(&mut std::io::stdin(), &mut buf) {
            if n == 0 {
                break;
            }
        }
        let _ = shutdown_tx.send(true);
    });
    match elector {
        Elector::Own => {
            let health = kubesteer_runtime::Health::default();
            let on_leading: lease::OnLeading = Arc::new(|l| say(&format!("leading {l}")));
            let while_leading =
                |stop: watch::Receiver<bool>| kubesteer_runtime::signal::stopped(stop);
            lease::run_while_leading(
                config,
                (NAMESPACE, lease_name),
                identity,
                on_leading,
                &health,
                shutdown,
                while_leading,
            )
            .await?;
        }
        Elector::KubeLeaseManager => {
            let client = Client::try_from(config)?;
            let manager = LeaseManagerBuilder::new(client, lease_name)
                .with_namespace(NAMESPACE)
                .with_identity(identity)
                .with_duration(DURATION_SECONDS)
                .with_grace(grace)
                .build()
                .await?;
            let (mut leading, task) = manager.watch().await;
            let mut shutdown = shutdown;
            loop {
                tokio::select! {
                    changed = leading.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        let now = *leading.borrow_and_update();
                        say(&format!("leading {now}"));
                    }
                    _ = shutdown.wait_for(|&s| s) => break,
                }
            }
            // The application stops its work, then closes the channel: the manager releases.
            if *leading.borrow() {
                say("leading false");
            }
            drop(leading);
            match tokio::time::timeout(Duration::from_secs(30), task).await {
                Ok(Ok(Ok(_))) => {}
                Ok(Ok(Err(e))) => eprintln!("lease manager: {e}"),
                Ok(Err(e)) => eprintln!("lease manager task: {e}"),
                Err(_) => eprintln!("lease manager did not stop within 30 s"),
            }
        }
    }
    say("exit");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The proxy: one per replica, holding every byte both ways while `stalled`.

struct Proxy {
    port: u16,
    stalled: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: u16) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (stalled, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::select! {
                        _ = pump(dr, uw, rx.clone()) => {}
                        _ = pump(ur, dw, rx) => {}
                    }
                });
            }
        });
        Ok(Self {
            port,
            stalled,
            task,
        })
    }

    fn stall(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, holding what it read while `stalled` is true.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut stalled: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.wait_for(|&s| !s).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A replica as the parent sees it.

#[derive(Debug, Clone)]
struct Event {
    at: Instant,
    wall: DateTime<Utc>,
    line: String,
}

struct Replica {
    user: String,
    child: Child,
    stdin: Option<ChildStdin>,
    events: watch::Receiver<Vec<Event>>,
    proxy: Proxy,
}

impl Replica {
    async fn start(bench: &Bench, user: &str, lease_name: &str) -> Result<Self> {
        let proxy = Proxy::start(bench.apiserver_port).await?;
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(bench.work.join(format!("replica-{user}.log")))?;
        let mut child = Process::new(&bench.exe)
            .args(["replica", "--elector"])
            .arg(bench.elector.name())
            .args(["--server", &format!("https://127.0.0.1:{}", proxy.port)])
            .args(["--token", &token(user)])
            .args(["--identity", user])
            .args(["--lease", lease_name])
            .args(["--grace", &bench.grace.to_string()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .context("starting a replica")?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("replica stdout")?;
        let (tx, events) = watch::channel(Vec::new());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let event = Event {
                    at: Instant::now(),
                    wall: Utc::now(),
                    line,
                };
                tx.send_modify(|e| e.push(event));
            }
        });
        Ok(Self {
            user: user.to_string(),
            child,
            stdin,
            events,
            proxy,
        })
    }

    /// The first event `line` after the first `skip` events, waiting at most `timeout`.
    async fn wait(&mut self, line: &str, skip: usize, timeout: Duration) -> Result<Event> {
        let found = |e: &Vec<Event>| e.iter().skip(skip).find(|e| e.line == line).cloned();
        let waited =
            tokio::time::timeout(timeout, self.events.wait_for(|e| found(e).is_some())).await;
        match waited {
            // wait_for returned this value because `found` held for it.
            Ok(Ok(e)) => found(&e).with_context(|| format!("{}: no {line:?}", self.user)),
            Ok(Err(_)) => bail!("{}: its output closed before {line:?}", self.user),
            Err(_) => bail!("{}: no {line:?} within {timeout:?}", self.user),
        }
    }

    async fn leading(&mut self, timeout: Duration) -> Result<Event> {
        self.wait("leading true", 0, timeout).await
    }

    /// When it led: from each `leading true` to the next `leading false` (or `end`).
    fn spans(&self, end: Instant) -> Vec<(Instant, Instant)> {
        let mut spans = Vec::new();
        let mut from = None;
        for e in self.events.borrow().iter() {
            match e.line.as_str() {
                "leading true" => from = from.or(Some(e.at)),
                "leading false" => spans.extend(from.take().map(|f| (f, e.at))),
                _ => {}
            }
        }
        spans.extend(from.map(|f| (f, end)));
        spans
    }

    fn count(&self) -> usize {
        self.events.borrow().len()
    }

    fn lines(&self) -> Vec<String> {
        self.events
            .borrow()
            .iter()
            .map(|e| e.line.clone())
            .collect()
    }

    /// SIGKILL: no release, no last word.
    async fn kill(&mut self) -> Result<()> {
        self.child.kill().await?;
        Ok(())
    }

    /// Closes its stdin: it stops as on SIGTERM (own: the shutdown channel; kube-lease-manager:
    /// the control channel dropped), releasing the Lease.
    fn shut_down(&mut self) {
        self.stdin.take();
    }

    async fn stop(mut self) -> Result<()> {
        self.shut_down();
        match tokio::time::timeout(Duration::from_secs(40), self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                log(format!("{} did not stop within 40 s: killed", self.user));
                self.child.kill().await?;
            }
        }
        Ok(())
    }
}

fn token(user: &str) -> String {
    format!("token-{user}")
}

// ---------------------------------------------------------------------------------------------
// The control plane.

struct ControlPlane {
    etcd: Child,
    apiserver: Child,
    port: u16,
    version: String,
}

async fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    Ok(l.local_addr()?.port())
}

fn users(electors: &[Elector]) -> Vec<String> {
    electors
        .iter()
        .flat_map(|e| ["a", "b"].map(|r| format!("{}-{r}", e.short())))
        .collect()
}

fn openssl(work: &Path, args: &[&str]) -> Result<()> {
    let status = std::process::Command::new("openssl")
        .args(args)
        .current_dir(work)
        .stderr(Stdio::null())
        .status()
        .context("openssl")?;
    if !status.success() {
        bail!("openssl {args:?}: {status}");
    }
    Ok(())
}

impl ControlPlane {
    async fn start(bin: &Path, work: &Path, electors: &[Elector]) -> Result<Self> {
        std::fs::create_dir_all(work)?;
        let etcd_client = free_port().await?;
        let etcd_peer = free_port().await?;
        let port = free_port().await?;
        let log_file = |name: &str| std::fs::File::create(work.join(name));
        let etcd = Process::new(bin.join("etcd"))
            .args(["--name", "lease-bench", "--data-dir"])
            .arg(work.join("etcd"))
            .arg(format!(
                "--listen-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
            ))
            .arg(format!(
                "--initial-cluster=lease-bench=http://127.0.0.1:{etcd_peer}"
            ))
            .args(["--unsafe-no-fsync", "--log-level", "warn"])
            .stdout(log_file("etcd.log")?)
            .stderr(log_file("etcd.err.log")?)
            .kill_on_drop(true)
            .spawn()
            .context("starting etcd")?;
        log(format!(
            "etcd pid {:?} on 127.0.0.1:{etcd_client}",
            etcd.id()
        ));

        let mut tokens = String::from("token-admin,lease-bench-admin,admin,\"system:masters\"\n");
        for user in users(electors) {
            tokens += &format!("{},{user},{user},\"system:masters\"\n", token(&user));
        }
        std::fs::write(work.join("tokens.csv"), tokens)?;
        std::fs::write(
            work.join("audit-policy.yaml"),
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [\"RequestReceived\"]\nrules:\n  - level: Metadata\n    namespaces: [\"default\"]\n    resources:\n      - group: coordination.k8s.io\n        resources: [\"leases\"]\n  - level: None\n",
        )?;
        openssl(work, &["genrsa", "-out", "sa.key", "2048"])?;
        openssl(work, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
        let apiserver_bin = bin.join("kube-apiserver");
        let version = std::process::Command::new(&apiserver_bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let path = |name: &str| work.join(name).display().to_string();
        let apiserver = Process::new(&apiserver_bin)
            .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_client}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", path("pki")))
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--endpoint-reconciler-type=none")
            .arg("--authorization-mode=RBAC")
            .arg(format!("--token-auth-file={}", path("tokens.csv")))
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!("--service-account-key-file={}", path("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                path("sa.key")
            ))
            .arg(format!("--audit-policy-file={}", path("audit-policy.yaml")))
            .arg(format!("--audit-log-path={}", path("audit.log")))
            .stdout(log_file("apiserver.log")?)
            .stderr(log_file("apiserver.err.log")?)
            .kill_on_drop(true)
            .spawn()
            .context("starting kube-apiserver")?;
        log(format!(
            "kube-apiserver pid {:?} on 127.0.0.1:{port}",
            apiserver.id()
        ));
        let plane = Self {
            etcd,
            apiserver,
            port,
            version,
        };
        let admin = plane.admin()?;
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let req = http::Request::get("/readyz").body(Vec::new())?;
            match admin.request_text(req).await {
                Ok(t) if t.trim() == "ok" => break,
                _ if Instant::now() > deadline => bail!("kube-apiserver not ready within 180 s"),
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
        // The default namespace is created by the apiserver's own controller: wait for it too.
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        while namespaces.get_opt(NAMESPACE).await?.is_none() {
            if Instant::now() > deadline {
                bail!("no namespace {NAMESPACE} within 180 s");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        log("kube-apiserver ready");
        Ok(plane)
    }

    fn admin(&self) -> Result<Client> {
        let mut config = Config::new(format!("https://127.0.0.1:{}", self.port).parse()?);
        config.accept_invalid_certs = true;
        config
            .headers
            .push((http::header::AUTHORIZATION, "Bearer token-admin".parse()?));
        Ok(Client::try_from(config)?)
    }

    async fn stop(mut self) {
        for (name, child) in [
            ("kube-apiserver", &mut self.apiserver),
            ("etcd", &mut self.etcd),
        ] {
            if let Err(e) = child.kill().await {
                log(format!("stopping {name}: {e}"));
            }
        }
        log("stopped kube-apiserver and etcd");
    }
}

// ---------------------------------------------------------------------------------------------
// The audit log.

#[derive(Debug, Clone)]
struct Request {
    user: String,
    verb: String,
    lease: String,
    code: i64,
    received: DateTime<Utc>,
    answered: DateTime<Utc>,
}

fn audit(path: &Path) -> Result<Vec<Request>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let s = |p: &str| {
            e.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let at = |p: &str| s(p).parse::<DateTime<Utc>>().ok();
        let (Some(received), Some(answered)) =
            (at("/requestReceivedTimestamp"), at("/stageTimestamp"))
        else {
            continue;
        };
        out.push(Request {
            user: s("/user/username"),
            verb: s("/verb"),
            lease: s("/objectRef/name"),
            code: e
                .pointer("/responseStatus/code")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            received,
            answered,
        });
    }
    Ok(out)
}

fn is_write(verb: &str) -> bool {
    matches!(verb, "update" | "patch" | "create")
}

// ---------------------------------------------------------------------------------------------
// The scenarios.

struct Options {
    rounds: usize,
    steady: Duration,
    stall: Duration,
    grace: u64,
}

struct Bench {
    elector: Elector,
    exe: PathBuf,
    work: PathBuf,
    apiserver_port: u16,
    admin: Client,
    grace: u64,
    audit: PathBuf,
}

/// min, median, max of `values` (seconds or counts).
fn summary(values: &[f64]) -> Value {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"min": r(v[0]), "median": r(median), "max": r(v[n - 1]), "n": n})
}

impl Bench {
    fn users(&self) -> (String, String) {
        let s = self.elector.short();
        (format!("{s}-a"), format!("{s}-b"))
    }

    fn lease_name(&self, scenario: &str, round: usize) -> String {
        format!("{}-{scenario}-{round}", self.elector.short())
    }

    /// `a` leading, `b` standing by for 4 s plus `offset` (spread over the renewal period so
    /// that the kill or cut falls at a different point of it each round).
    async fn pair(&self, lease_name: &str, offset: Duration) -> Result<(Replica, Replica)> {
        let (ua, ub) = self.users();
        let mut a = Replica::start(self, &ua, lease_name).await?;
        a.leading(Duration::from_secs(60)).await?;
        let b = Replica::start(self, &ub, lease_name).await?;
        tokio::time::sleep(Duration::from_secs(4) + offset).await;
        if b.lines().iter().any(|l| l == "leading true") {
            bail!("{lease_name}: b leads while a runs: {:?}", b.lines());
        }
        Ok((a, b))
    }

    fn offset(&self, round: usize, rounds: usize) -> Duration {
        lease::RETRY_PERIOD.mul_f64(round as f64 / rounds.max(1) as f64)
    }

    async fn failover(&self, round: usize, rounds: usize) -> Result<Value> {
        let name = self.lease_name("failover", round);
        let (mut a, mut b) = self.pair(&name, self.offset(round, rounds)).await?;
        let killed = Instant::now();
        a.kill().await?;
        let led = b.leading(Duration::from_secs(60)).await?;
        b.stop().await?;
        let s = signed(led.at, killed);
        log(format!("{} failover {round}: {s} s", self.elector.name()));
        Ok(json!({"lease": name, "failover_s": s}))
    }

    async fn handover(&self, round: usize, rounds: usize) -> Result<Value> {
        let name = self.lease_name("handover", round);
        let (mut a, mut b) = self.pair(&name, self.offset(round, rounds)).await?;
        let asked = Instant::now();
        a.shut_down();
        let led = b.leading(Duration::from_secs(60)).await?;
        let a_exit = a.wait("exit", 0, Duration::from_secs(40)).await.ok();
        a.stop().await?;
        b.stop().await?;
        let s = signed(led.at, asked);
        log(format!("{} handover {round}: {s} s", self.elector.name()));
        Ok(json!({
            "lease": name,
            "handover_s": s,
            "old_leader_exited_after_s": a_exit.map(|e| signed(e.at, asked)),
        }))
    }

    async fn steady(&self, window: Duration) -> Result<Value> {
        let name = self.lease_name("steady", 0);
        let (a, b) = self.pair(&name, Duration::ZERO).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let since = Utc::now();
        tokio::time::sleep(window).await;
        let until = Utc::now();
        let led = !b.lines().iter().any(|l| l == "leading true");
        a.stop().await?;
        b.stop().await?;
        let requests = audit(&self.audit)?;
        let minutes = window.as_secs_f64() / 60.0;
        let (ua, ub) = self.users();
        let mut per = BTreeMap::new();
        for (role, user) in [("leader", &ua), ("standby", &ub)] {
            let mine: Vec<_> = requests
                .iter()
                .filter(|r| {
                    &r.user == user && r.lease == name && r.received >= since && r.received < until
                })
                .collect();
            let mut by_verb: BTreeMap<String, u64> = BTreeMap::new();
            for r in &mine {
                *by_verb.entry(format!("{} {}", r.verb, r.code)).or_default() += 1;
            }
            per.insert(
                role,
                json!({
                    "requests": mine.len(),
                    "per_minute": ((mine.len() as f64 / minutes) * 10.0).round() / 10.0,
                    "by_verb_and_code": by_verb,
                }),
            );
        }
        let total = per
            .values()
            .filter_map(|v| v["per_minute"].as_f64())
            .sum::<f64>();
        log(format!(
            "{} steady: {total:.1} requests/min",
            self.elector.name()
        ));
        Ok(json!({
            "lease": name,
            "window_s": secs(window),
            "leader_kept_the_lease": led,
            "per_minute_total": (total * 10.0).round() / 10.0,
            "by_replica": per,
        }))
    }

    async fn split_brain(&self, round: usize, rounds: usize, stall: Duration) -> Result<Value> {
        let name = self.lease_name("split", round);
        let (mut a, mut b) = self.pair(&name, self.offset(round, rounds)).await?;
        let a_seen = a.count();
        let cut = Instant::now();
        a.proxy.stall(true);
        let b_led = b.leading(Duration::from_secs(60)).await?;
        let heal = (cut + stall).max(b_led.at + Duration::from_secs(2));
        tokio::time::sleep_until(heal).await;
        let before = self.lease_now(&name).await?;
        a.proxy.stall(false);
        let healed = Instant::now();
        // How long the old leader still led: its `leading false`, which may have come before.
        let a_stopped = a
            .wait("leading false", a_seen, Duration::from_secs(30))
            .await
            .ok();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = self.lease_now(&name).await?;
        let b_lost = b.lines().iter().filter(|l| *l == "leading false").count();
        let a_lines = a.lines();
        let end = Instant::now();
        let (a_led, b_led_spans) = (a.spans(end), b.spans(end));
        let both: Duration = a_led
            .iter()
            .flat_map(|x| {
                b_led_spans
                    .iter()
                    .map(move |y| (x.0.max(y.0), x.1.min(y.1)))
            })
            .filter(|(from, to)| to > from)
            .map(|(from, to)| to - from)
            .sum();
        let b_lost_at = b
            .events
            .borrow()
            .iter()
            .find(|e| e.line == "leading false")
            .map(|e| signed(e.at, healed));
        a.stop().await?;
        b.stop().await?;
        let (ua, _) = self.users();
        let late: Vec<_> = audit(&self.audit)?
            .into_iter()
            .filter(|r| {
                r.user == ua && r.lease == name && is_write(&r.verb) && r.answered > b_led.wall
            })
            .collect();
        let mut late_by_code: BTreeMap<String, u64> = BTreeMap::new();
        for r in &late {
            *late_by_code
                .entry(format!("{} {}", r.verb, r.code))
                .or_default() += 1;
        }
        let accepted = late.iter().filter(|r| (200..300).contains(&r.code)).count();
        let window = match &a_stopped {
            Some(e) => signed(e.at, b_led.at),
            // Still leading 30 s after the partition healed: at least that long.
            None => signed(healed + Duration::from_secs(30), b_led.at),
        };
        log(format!(
            "{} split brain {round}: old leader led {window} s after the new one started; late writes accepted: {accepted}",
            self.elector.name()
        ));
        Ok(json!({
            "lease": name,
            "standby_led_after_cut_s": signed(b_led.at, cut),
            "healed_after_standby_led_s": signed(healed, b_led.at),
            "old_leader_stopped_after_cut_s": a_stopped.as_ref().map(|e| signed(e.at, cut)),
            "old_leader_stopped_after_heal_s": a_stopped.as_ref().map(|e| signed(e.at, healed)),
            "split_brain_s": window,
            "both_leading_s": secs(both),
            "new_leader_stopped_after_heal_s": b_lost_at,
            "overlap_s": window.max(0.0),
            "old_leader_writes_answered_after_new_leader_started": late_by_code,
            "old_leader_late_writes_accepted": accepted,
            "lease_before_heal": before,
            "lease_after": after,
            "holder_after_is_new_leader": after["holder"] == json!(self.users().1),
            "new_leader_lost_it": b_lost > 0,
            "old_leader_lines": a_lines,
        }))
    }

    async fn lease_now(&self, name: &str) -> Result<Value> {
        let api: Api<Lease> = Api::namespaced(self.admin.clone(), NAMESPACE);
        let lease = api.get(name).await?;
        let spec = lease.spec.unwrap_or_default();
        let managers: Vec<Value> = lease
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .map(|m| json!({"manager": m.manager, "operation": m.operation, "time": m.time.map(|t| t.0.to_string())}))
            .collect();
        Ok(json!({
            "holder": spec.holder_identity,
            "renew_time": spec.renew_time.map(|t| t.0.to_string()),
            "lease_transitions": spec.lease_transitions,
            "resource_version": lease.metadata.resource_version,
            "managed_fields": managers,
        }))
    }

    async fn suite(&self, options: &Options) -> Result<Value> {
        let mut failovers = Vec::new();
        let mut rounds = Vec::new();
        for i in 0..options.rounds {
            let r = self.failover(i, options.rounds).await?;
            failovers.push(r["failover_s"].as_f64().unwrap_or(f64::NAN));
            rounds.push(r);
        }
        let failover = json!({"summary_s": summary(&failovers), "rounds": rounds});

        let mut handovers = Vec::new();
        let mut rounds = Vec::new();
        for i in 0..options.rounds {
            let r = self.handover(i, options.rounds).await?;
            handovers.push(r["handover_s"].as_f64().unwrap_or(f64::NAN));
            rounds.push(r);
        }
        let handover = json!({"summary_s": summary(&handovers), "rounds": rounds});

        let steady = self.steady(options.steady).await?;

        let mut windows = Vec::new();
        let mut overlaps = Vec::new();
        let mut accepted = 0;
        let mut taken_back = 0;
        let mut rounds = Vec::new();
        for i in 0..options.rounds {
            let r = self.split_brain(i, options.rounds, options.stall).await?;
            windows.push(r["split_brain_s"].as_f64().unwrap_or(f64::NAN));
            overlaps.push(r["both_leading_s"].as_f64().unwrap_or(f64::NAN));
            if r["holder_after_is_new_leader"] == json!(false) {
                taken_back += 1;
            }
            if r["old_leader_late_writes_accepted"].as_u64().unwrap_or(0) > 0 {
                accepted += 1;
            }
            rounds.push(r);
        }
        let split = json!({
            "split_brain_s": summary(&windows),
            "both_leading_s": summary(&overlaps),
            "rounds_where_the_old_leader_took_the_lease_back": format!("{taken_back}/{}", options.rounds),
            "rounds_with_a_late_write_of_the_old_leader_accepted": format!("{accepted}/{}", options.rounds),
            "rounds": rounds,
        });
        Ok(json!({
            "failover": failover,
            "handover": handover,
            "steady_state": steady,
            "split_brain": split,
        }))
    }
}

async fn run(bin: &Path, work: &Path, electors: &[Elector], options: &Options) -> Result<Value> {
    let started = Utc::now();
    let exe = std::env::current_exe()?;
    let plane = ControlPlane::start(bin, work, electors).await?;
    let admin = plane.admin()?;
    let benches: Vec<Bench> = electors
        .iter()
        .map(|&elector| Bench {
            elector,
            exe: exe.clone(),
            work: work.to_path_buf(),
            apiserver_port: plane.port,
            admin: admin.clone(),
            grace: options.grace,
            audit: work.join("audit.log"),
        })
        .collect();
    // The electors side by side, each on Leases of its own.
    let results = futures::future::join_all(benches.iter().map(|b| b.suite(options))).await;
    let version = plane.version.clone();
    plane.stop().await;
    let mut by_elector = serde_json::Map::new();
    for (b, r) in benches.iter().zip(results) {
        by_elector.insert(b.elector.name().to_string(), r?);
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let lease_rs_changed =
        !git(&["status", "--porcelain", "--", "runtime/src/lease.rs"]).is_empty();
    let medians = |path: &str| -> Value {
        by_elector
            .iter()
            .map(|(k, v)| (k.clone(), v.pointer(path).cloned().unwrap_or(Value::Null)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    Ok(json!({
        "benchmark": "leader election: kubesteer's own (runtime/src/lease.rs) vs kube-lease-manager 0.13.1 on a real kube-apiserver (issue 61 item 3)",
        "date": started.to_rfc3339(),
        "commit": git(&["rev-parse", "--short", "HEAD"]),
        "lease_rs_differs_from_commit": lease_rs_changed,
        "kube_apiserver": version,
        "machine": {"cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
        "what": "Each elector in processes of its own (kubesteer-bench-lease replica), two replicas per round on a Lease of their own: a leads, b stands by. failover: a is SIGKILLed (no release), time until b says it leads. handover: a is shut down as on SIGTERM (it releases), time until b leads. steady_state: requests for the Lease per minute of the leader and the standby, from the apiserver's audit log. split_brain: a's TCP proxy holds every byte both ways (a partition) from the cut until stall_s after it (and at least 2 s after b leads), then lets them through; split_brain_s is when a last said it leads (its `leading false`) minus when b started leading: positive is a window where both act, negative is the margin by which a stopped first; both_leading_s is the time both said they lead, over the whole round (the old leader may take the Lease back); old_leader_late_writes_accepted counts a's writes the apiserver accepted on the Lease after b started leading (its audit log); lease_after is the Lease 5 s after the heal. Times are when the parent read each replica's line, on its monotonic clock.",
        "how": "hack/build-control-plane.sh etcd; hack/build-control-plane.sh kubernetes (or just kube-apiserver into ~/.cache/kubesteer/bin); cargo build -p kubesteer-bench --bin kubesteer-bench-lease; target/debug/kubesteer-bench-lease run [--rounds 5 --steady-secs 60 --stall-secs 15] — it starts etcd and kube-apiserver on free loopback ports in a temporary directory (token auth, one user per replica, audit log of Leases), runs both electors side by side and stops them",
        "timings": {
            "own": {
                "lease_duration_s": lease::LEASE_DURATION_SECONDS,
                "renew_deadline_s": secs(lease::RENEW_DEADLINE),
                "retry_period_s": secs(lease::RETRY_PERIOD),
                "request_timeout_s": secs(lease::REQUEST_TIMEOUT),
                "note": "the crate's constants, not settable: retry 3 s (not 2 s)"
            },
            "kube-lease-manager": {
                "lease_duration_s": DURATION_SECONDS,
                "grace_s": options.grace,
                "renews_every_s": DURATION_SECONDS.saturating_sub(options.grace),
                "note": "a holder renews `grace` before its Lease expires (expiry = renewTime + duration on the writer's wall clock), so every duration - grace = the own retry period; a standby sleeps until that expiry instead of polling; no renew deadline and no request timeout (kube's default Config has no read timeout)"
            },
            "rounds": options.rounds,
            "stall_s": secs(options.stall),
            "steady_window_s": secs(options.steady),
        },
        "medians": {
            "failover_s": medians("/failover/summary_s/median"),
            "handover_s": medians("/handover/summary_s/median"),
            "steady_requests_per_minute": medians("/steady_state/per_minute_total"),
            "split_brain_s": medians("/split_brain/split_brain_s/median"),
            "both_leading_s": medians("/split_brain/both_leading_s/median"),
            "rounds_with_a_late_write_accepted": medians("/split_brain/rounds_with_a_late_write_of_the_old_leader_accepted"),
            "rounds_where_the_old_leader_took_the_lease_back": medians("/split_brain/rounds_where_the_old_leader_took_the_lease_back"),
        },
        "electors": by_elector,
    }))
}
