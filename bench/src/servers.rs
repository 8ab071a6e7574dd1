//! kubesteer's two HTTPS servers against axum-server, the kept crate that would replace them,
//! each serving the same router in a process of its own (`kubesteer-bench serve-target`):
//!
//! - `webhook-own`: the webhook's `server::serve` with the flags' defaults (time limits per
//!   phase, at most 1,024 connections and 512 per address), answering AdmissionReviews;
//! - `webhook-axum-server`: axum-server over the same rustls configuration and router, given the
//!   same handshake (3 s) and request-head (5 s) time limits;
//! - `metrics-own`: the controller's `/metrics` server, `kubesteer_runtime::serve::serve_tls`;
//! - `metrics-axum-server`: axum-server over the same configuration and router.
//!
//! Per round and server: `flood` connections from one address (half never start TLS, half
//! finish it and trickle a request head, as `webhook/tests/flood.rs`), then 2 clients behaving
//! like the apiserver or a scraper (kept-alive connections, a new one every 10 requests) send
//! `requests` requests each from the same address. Measured: requests that failed (no answer in
//! 3 s, or not 200), the p50 and p99 of the answers on kept-alive connections, the slowest on a
//! new connection, the flood connections the server still held at the end, and the server's
//! resident memory before the flood, at its peak (VmHWM) and at the end.
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use hyper_util::rt::TokioTimer;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use serde_json::{json, Value};

use crate::reviews::Granting;
use client::{send, Flood, Sender, ANSWER_TIMEOUT, NEW_CONNECTION_EVERY, OPENING};

/// The webhook tests' client and flood, the same code here.
#[path = "../../webhook/tests/webhook/common/client.rs"]
mod client;

pub const SERVERS: [&str; 4] = [
    "webhook-own",
    "webhook-axum-server",
    "metrics-own",
    "metrics-axum-server",
];

/// Clients in the role of the apiserver (or a scraper), one request in flight each.
const CLIENTS: usize = 2;
/// The webhook's default handshake and request-head limits, given to axum-server too.
const HANDSHAKE: Duration = Duration::from_secs(3);
const HEAD: Duration = Duration::from_secs(5);

const REVIEW: &str = include_str!("../../webhook/tests/data/memcached-create.json");

/// What a client asks of `server`: the method, path and body, and whether an answer is right.
struct Ask {
    path: &'static str,
    body: Option<&'static str>,
    review: bool,
}

fn ask(server: &str) -> Ask {
    if server.starts_with("webhook") {
        Ask {
            path: "/validate/memcacheds",
            body: Some(REVIEW),
            review: true,
        }
    } else {
        Ask {
            path: "/metrics",
            body: None,
            review: false,
        }
    }
}

/// A fixed exposition of about 40 KiB, as a controller with a few hundred Scalers serves.
struct Fixed(String);

impl kubesteer_runtime::serve::Exposition for Fixed {
    fn parts(&self) -> Box<dyn Iterator<Item = Result<String, std::fmt::Error>> + Send + 'static> {
        Box::new(std::iter::once(Ok(self.0.clone())))
    }
}

/// The child: serves `server` on a new port of 127.0.0.1, prints `{"port", "ca"}` on one line,
/// and serves until it is killed.
pub async fn serve_target(server: &str) -> Result<()> {
    rlimit::increase_nofile_limit(16_384).context("raising the open-file limit")?;
    let mut options = kubesteer_certs::Options::new("bench", "bench");
    options.ips.push("127.0.0.1".parse()?);
    let certs = kubesteer_certs::generate(&options)?;
    let key = kubesteer_webhook::tls::certified_key(
        certs.serving.cert.as_bytes(),
        certs.serving.key.as_bytes(),
        "bench",
    )?;
    let tls = kubesteer_webhook::tls::server_config(kubesteer_webhook::tls::CertStore::new(key))?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    println!("{}", json!({"port": port, "ca": certs.ca.cert}));

    let state = Arc::new(kubesteer_webhook::AppState::new(Granting));
    let router = if server.starts_with("webhook") {
        kubesteer_webhook::router(state.clone())
    } else {
        let line = "kubesteer_scaler_target_replicas{namespace=\"team\",scaler=\"s\",target=\"Deployment/web\"} 3\n";
        let text = line.repeat(40 * 1024 / line.len());
        kubesteer_runtime::serve::router(
            Arc::new(Fixed(text)),
            kubesteer_runtime::Health::new(Duration::from_secs(60)),
            None,
        )
    };
    let forever = std::future::pending::<()>();
    match server {
        "webhook-own" => {
            let limits = <kubesteer_webhook::args::Args as clap::Parser>::try_parse_from([
                "kubesteer-webhook",
            ])?
            .limits();
            kubesteer_webhook::server::serve(
                tokio::net::TcpListener::from_std(listener)?,
                tls,
                router,
                limits,
                state.health.clone(),
                state.metrics.connections_closed.clone(),
                forever,
            )
            .await;
        }
        "metrics-own" => {
            drop(listener);
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let (_, task) = kubesteer_runtime::serve::serve_tls(
                addr,
                router,
                Arc::unwrap_or_clone(tls),
                forever,
            )
            .await?;
            task.await??;
        }
        "webhook-axum-server" | "metrics-axum-server" => {
            let config = axum_server::tls_rustls::RustlsConfig::from_config(tls);
            let acceptor =
                axum_server::tls_rustls::RustlsAcceptor::new(config).handshake_timeout(HANDSHAKE);
            let mut serving = axum_server::from_tcp(listener)?
                .acceptor(acceptor)
                .http1_only();
            serving
                .http_builder()
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD);
            serving.serve(router.into_make_service()).await?;
        }
        other => bail!("no server {other:?}: one of {SERVERS:?}"),
    }
    Ok(())
}

/// The child serving one server, and what it printed.
struct Target {
    child: Child,
    addr: SocketAddr,
    client: Arc<rustls::ClientConfig>,
}

impl Target {
    fn start(server: &str) -> Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["serve-target", "--server", server])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the server's process")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let started: Value = serde_json::from_str(&line)
            .with_context(|| format!("{server} printed {line:?}, not its port"))?;
        let port = started["port"].as_u64().context("no port")? as u16;
        let ca = started["ca"].as_str().context("no ca")?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.as_bytes())?)?;
        Ok(Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            client: client::client_config(&roots),
        })
    }

    fn memory(&self) -> Result<crate::report::Process> {
        crate::report::process(self.child.id())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn request(sender: &mut Sender, ask: &Ask) -> Result<(), String> {
    let reply = send(sender, ask.path, ask.body.map(str::as_bytes)).await?;
    if reply.status != 200 || (ask.review && !reply.allowed()) {
        return Err(format!("{}: {}", reply.status, reply.body));
    }
    Ok(())
}

/// Kept-alive answers' latencies, new connections' latencies, and the failures.
#[derive(Default)]
struct Answers {
    kept: Vec<Duration>,
    opened: Vec<Duration>,
    failed: Vec<String>,
}

async fn client(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    ask: Arc<Ask>,
    requests: usize,
) -> Answers {
    let mut answers = Answers::default();
    let mut sender: Option<Sender> = None;
    for i in 0..requests {
        if i % NEW_CONNECTION_EVERY == 0 || sender.as_ref().is_none_or(Sender::is_closed) {
            sender = None;
        }
        let new_connection = sender.is_none();
        let started = Instant::now();
        let answered = tokio::time::timeout(ANSWER_TIMEOUT, async {
            if sender.is_none() {
                sender = Some(client::connect(addr, &config).await?);
            }
            match sender.as_mut() {
                Some(s) => request(s, &ask).await,
                None => Err("no connection".to_string()),
            }
        })
        .await;
        match answered {
            Ok(Ok(())) if new_connection => answers.opened.push(started.elapsed()),
            Ok(Ok(())) => answers.kept.push(started.elapsed()),
            Ok(Err(e)) => {
                answers.failed.push(e);
                sender = None;
            }
            Err(_) => {
                answers
                    .failed
                    .push(format!("no answer in {ANSWER_TIMEOUT:?}"));
                sender = None;
            }
        }
    }
    answers
}

fn quantile_ms(latencies: &mut [Duration], q: f64) -> f64 {
    latencies.sort();
    let rank = (latencies.len() as f64 * q).ceil() as usize;
    let at = latencies
        .get(rank.saturating_sub(1))
        .copied()
        .unwrap_or_default();
    (at.as_secs_f64() * 10_000.0).round() / 10.0
}

/// One round against one server.
async fn round(server: &str, flood_size: usize, requests: usize) -> Result<Value> {
    let target = Target::start(server)?;
    let before = target.memory()?;
    let flood = Arc::new(Flood::default());
    let mut attackers = tokio::task::JoinSet::new();
    attackers.spawn(client::flood(
        flood.clone(),
        (target.addr, target.client.clone()),
        flood_size,
        OPENING,
    ));
    let deadline = Instant::now() + Duration::from_secs(120);
    while flood.connected.load(Ordering::Relaxed) < flood_size {
        if Instant::now() > deadline {
            bail!(
                "{server}: the flood never got going ({} connected)",
                flood.connected.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ask = Arc::new(ask(server));
    let clients = (0..CLIENTS).map(|_| {
        tokio::spawn(client(
            target.addr,
            target.client.clone(),
            ask.clone(),
            requests,
        ))
    });
    let mut all = Answers::default();
    for answers in futures::future::join_all(clients).await {
        let answers = answers?;
        all.kept.extend(answers.kept);
        all.opened.extend(answers.opened);
        all.failed.extend(answers.failed);
    }
    let after = target.memory()?;
    let held = flood.held();
    attackers.abort_all();
    let mut first_failures = all.failed.clone();
    first_failures.truncate(3);
    Ok(json!({
        "server": server,
        "requests": CLIENTS * requests,
        "failed": all.failed.len(),
        "first_failures": first_failures,
        "kept_p50_ms": quantile_ms(&mut all.kept, 0.5),
        "kept_p99_ms": quantile_ms(&mut all.kept, 0.99),
        "new_connection_max_ms": quantile_ms(&mut all.opened, 1.0),
        "flood_held_at_end": held,
        "rss_before_kib": before.rss_kib,
        "rss_peak_kib": after.hwm_kib,
        "rss_end_kib": after.rss_kib,
        "cpu_s": after.cpu_s,
    }))
}

/// `rounds` rounds, each running every server in `servers` once, in turn.
pub async fn run(
    servers: &[String],
    flood: usize,
    requests: usize,
    rounds: usize,
) -> Result<Value> {
    rlimit::increase_nofile_limit(16_384).context("raising the open-file limit")?;
    let mut results = Vec::new();
    for _ in 0..rounds {
        for server in servers {
            results.push(round(server, flood, requests).await?);
        }
    }
    Ok(json!({
        "flood": flood,
        "clients": CLIENTS,
        "requests_per_client": requests,
        "rounds": results,
    }))
}
