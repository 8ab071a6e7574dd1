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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use axum::body::Body;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use crate::reviews::Granting;

pub const SERVERS: [&str; 4] = [
    "webhook-own",
    "webhook-axum-server",
    "metrics-own",
    "metrics-axum-server",
];

/// Flood connections being opened at once.
const OPENING: usize = 64;
/// Clients in the role of the apiserver (or a scraper), one request in flight each.
const CLIENTS: usize = 2;
const NEW_CONNECTION_EVERY: usize = 10;
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
/// The webhook's default handshake and request-head limits, given to axum-server too.
const HANDSHAKE: Duration = Duration::from_secs(3);
const HEAD: Duration = Duration::from_secs(5);

const REVIEW: &str = include_str!("../../webhook/tests/data/memcached-create.json");

type Sender = hyper::client::conn::http1::SendRequest<Body>;

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
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            client: Arc::new(client),
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

async fn connect(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let tls = TlsConnector::from(config.clone())
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn request(sender: &mut Sender, ask: &Ask) -> Result<(), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let builder = hyper::Request::builder()
        .uri(ask.path)
        .header("host", "127.0.0.1");
    let request = match ask.body {
        Some(body) => builder
            .method("POST")
            .header("content-type", "application/json")
            .body(Body::from(body)),
        None => builder.method("GET").body(Body::empty()),
    }
    .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if status != 200 {
        return Err(format!("{status}"));
    }
    if ask.review {
        let answer: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        if answer["response"]["allowed"] != true {
            return Err(format!("not allowed: {answer}"));
        }
    }
    Ok(())
}

#[derive(Default)]
struct Flood {
    connected: AtomicUsize,
    holding: AtomicUsize,
    closed: AtomicUsize,
}

/// A connection that never sends a byte, held until the server closes it.
async fn silent(addr: SocketAddr, flood: Arc<Flood>, opening: tokio::sync::OwnedSemaphorePermit) {
    let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    drop(opening);
    flood.connected.fetch_add(1, Ordering::Relaxed);
    flood.holding.fetch_add(1, Ordering::Relaxed);
    let mut buf = [0u8; 64];
    while let Ok(n) = tcp.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
    flood.closed.fetch_add(1, Ordering::Relaxed);
}

/// TLS finished, then a request head one byte every 500 ms, until the server closes it.
async fn slow(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    flood: Arc<Flood>,
    opening: tokio::sync::OwnedSemaphorePermit,
) {
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    flood.connected.fetch_add(1, Ordering::Relaxed);
    let handshake =
        TlsConnector::from(config).connect(ServerName::IpAddress(addr.ip().into()), tcp);
    let handshake = tokio::time::timeout(Duration::from_secs(3), handshake).await;
    drop(opening);
    let Ok(Ok(mut stream)) = handshake else {
        flood.closed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    flood.holding.fetch_add(1, Ordering::Relaxed);
    let head = b"POST /validate/memcacheds HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ";
    let mut bytes = head.iter().copied().chain(std::iter::repeat(b'a'));
    let mut buf = [0u8; 64];
    loop {
        let byte = bytes.next().unwrap_or(b'a');
        if stream.write_all(&[byte]).await.is_err() || stream.flush().await.is_err() {
            break;
        }
        // The attacker's pace: the server closing the connection ends the loop.
        match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    flood.closed.fetch_add(1, Ordering::Relaxed);
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
                sender = Some(connect(addr, &config).await?);
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
    {
        let (flood, config, addr) = (flood.clone(), target.client.clone(), target.addr);
        attackers.spawn(async move {
            let opening = Arc::new(tokio::sync::Semaphore::new(OPENING));
            let mut held = tokio::task::JoinSet::new();
            for i in 0..flood_size {
                let Ok(permit) = opening.clone().acquire_owned().await else {
                    return;
                };
                let (flood, config) = (flood.clone(), config.clone());
                held.spawn(async move {
                    if i % 2 == 0 {
                        silent(addr, flood, permit).await
                    } else {
                        slow(addr, config, flood, permit).await
                    }
                });
            }
            while held.join_next().await.is_some() {}
        });
    }
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
    let held = flood
        .holding
        .load(Ordering::Relaxed)
        .saturating_sub(flood.closed.load(Ordering::Relaxed));
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
