//! The webhook under a flood of large bodies (issue 27 item 3): `attackers` clients each send
//! bodies of `body_bytes` back to back, as fast as the webhook takes them, while one kept-alive
//! client sends the apiserver's ordinary reviews at a steady pace; the webhook's resident memory
//! is sampled from /proc the whole time. The ordinary client runs alone first, for the latency
//! without the flood.
//!
//! The bodies are of four shapes, one per attacker in turn, each aimed at a different part of the
//! review path: the probe of the issue (`"object": [0,0,...]`), a spec of too many values, a spec
//! holding one huge string (which the rules do read), and a ConversionReview whose object is
//! `[0,0,...]`.
//!
//! Against a webhook on the host it samples the process (`--pid`); against the chart's pods it
//! reads their containers' memory cgroups (`--cgroup`, one per pod): the peak the kernel kept, the
//! limit and how many times the OOM killer ran there. With `--client-cert` it presents the
//! apiserver's client certificate, as a webhook that answers only the apiserver requires.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// What to run; see the `webhook-memory` subcommand.
#[derive(Debug, Clone)]
pub struct Options {
    pub peer: Peer,
    pub ca: PathBuf,
    /// The apiserver's client certificate and key, for a webhook that requires them.
    pub client: Option<(PathBuf, PathBuf)>,
    /// The webhook process on this host, whose resident memory is sampled.
    pub pid: Option<u32>,
    /// The memory cgroups of the webhook's containers, read after the flood.
    pub cgroups: Vec<PathBuf>,
    pub attackers: usize,
    pub body_bytes: usize,
    pub seconds: u64,
    pub alone_seconds: u64,
    /// Time between the ordinary client's reviews.
    pub interval: Duration,
    /// The ordinary reviews: (path, body file), sent in turn.
    pub reviews: Vec<(String, PathBuf)>,
}

/// The attack bodies' shapes: (name, path, body).
fn shapes(bytes: usize) -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let zeros = |n: usize| {
        let mut list = "0,".repeat(n / 2);
        list.pop();
        format!("[{list}]")
    };
    let review = |kind: &str, object: &str| {
        let head = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"kubesteer.io","version":"v1beta1","kind":"{kind}"}},"operation":"CREATE","userInfo":{{"username":"mallory"}},"object":"#
        );
        let fill = bytes.saturating_sub(head.len() + object.len() + 3);
        (head, fill)
    };
    let (head, fill) = review("Scaler", "");
    let probe = format!("{head}{}}}}}", zeros(fill));
    let (head, fill) = review("Scaler", r#"{"spec":{"x":}}"#);
    let values = format!(r#"{head}{{"spec":{{"x":{}}}}}}}}}"#, zeros(fill));
    let (head, fill) = review("Memcached", r#"{"spec":{"image":""}}"#);
    let string = format!(r#"{head}{{"spec":{{"image":"{}"}}}}}}}}"#, "a".repeat(fill));
    let convert_head = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"kubesteer.io/v1beta1","objects":["#;
    let convert = format!(
        "{convert_head}{}]}}}}",
        zeros(bytes.saturating_sub(convert_head.len() + 4))
    );
    vec![
        ("object [0,0,...]", "/validate/scalers", probe.into_bytes()),
        (
            "spec of too many values",
            "/mutate/scalers",
            values.into_bytes(),
        ),
        (
            "spec with one huge string",
            "/validate/memcacheds",
            string.into_bytes(),
        ),
        (
            "ConversionReview object [0,0,...]",
            "/convert",
            convert.into_bytes(),
        ),
    ]
}

fn tls_config(ca: &Path, client: Option<&(PathBuf, PathBuf)>) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).with_context(|| format!("{}", ca.display()))? {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots);
    let config = match client {
        None => config.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .with_context(|| format!("{}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()?;
            let key =
                PrivateKeyDer::from_pem_file(key).with_context(|| format!("{}", key.display()))?;
            config.with_client_auth_cert(chain, key)?
        }
    };
    Ok(Arc::new(config))
}

/// What a container's memory cgroup says after the flood (cgroup v1, or v2).
fn cgroup_memory(dir: &Path) -> Result<Value> {
    let read = |file: &str| -> Option<String> {
        std::fs::read_to_string(dir.join(file))
            .ok()
            .map(|s| s.trim().to_string())
    };
    let number = |file: &str| read(file).and_then(|s| s.parse::<u64>().ok());
    let oom_kills = |file: &str| {
        read(file).and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("oom_kill "))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
    };
    let (peak, limit, usage, kills) = if dir.join("memory.max_usage_in_bytes").is_file() {
        (
            number("memory.max_usage_in_bytes"),
            number("memory.limit_in_bytes"),
            number("memory.usage_in_bytes"),
            oom_kills("memory.oom_control"),
        )
    } else {
        (
            number("memory.peak"),
            number("memory.max"),
            number("memory.current"),
            oom_kills("memory.events"),
        )
    };
    let Some(peak) = peak else {
        bail!("no peak memory in the cgroup {}", dir.display());
    };
    Ok(json!({
        "cgroup": dir,
        "peak_bytes": peak,
        "limit_bytes": limit,
        "usage_bytes_after": usage,
        "oom_kills": kills,
    }))
}

/// Where the webhook listens, and the name its certificate must hold: the address, or the
/// Service's DNS name when it is reached through a ClusterIP (`--server-name`).
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    pub name: ServerName<'static>,
}

impl Peer {
    pub fn new(addr: SocketAddr, name: Option<&str>) -> Result<Self> {
        let name = match name {
            Some(name) => ServerName::try_from(name.to_string())
                .with_context(|| format!("--server-name {name:?}"))?,
            None => ServerName::IpAddress(addr.ip().into()),
        };
        Ok(Self { addr, name })
    }
}

async fn connect(peer: &Peer, tls: &Arc<rustls::ClientConfig>) -> Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(peer.addr).await?;
    tcp.set_nodelay(true)?;
    Ok(TlsConnector::from(tls.clone())
        .connect(peer.name.clone(), tcp)
        .await?)
}

fn head(path: &str, length: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
}

/// A response: its status and whether the server closes the connection after it.
struct Answer {
    status: u16,
    close: bool,
}

/// Reads one response (head and Content-Length body).
async fn read_answer(r: &mut (impl AsyncRead + Unpin)) -> Result<Answer> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let (status, close, length, head_len) = loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            bail!("closed before an answer");
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head_len) = response.parse(&buf)? {
            let header = |name: &str| {
                response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).to_string())
            };
            let length: usize = header("content-length")
                .and_then(|l| l.parse().ok())
                .context("an answer without a Content-Length")?;
            let close = header("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
            break (response.code.unwrap_or(0), close, length, head_len);
        }
    };
    let mut left = (head_len + length).saturating_sub(buf.len());
    while left > 0 {
        let n = r.read(&mut chunk[..left.min(4096)]).await?;
        if n == 0 {
            bail!("closed in an answer's body");
        }
        left -= n;
    }
    Ok(Answer { status, close })
}

/// What the flood got back.
#[derive(Default)]
struct Flood {
    answers: Mutex<BTreeMap<String, BTreeMap<u16, u64>>>,
    /// Requests the connection ended under before an answer came (the server closes a
    /// connection whose body it did not read; the reset may beat its answer).
    unanswered: AtomicU64,
    connections: AtomicU64,
}

/// One attacker: its shape's body, back to back, reconnecting when the server closes.
async fn attack(
    peer: Peer,
    tls: Arc<rustls::ClientConfig>,
    shape: &'static str,
    path: &'static str,
    body: Arc<Vec<u8>>,
    flood: Arc<Flood>,
    stop: Arc<AtomicBool>,
) {
    let head = head(path, body.len());
    let mut conn = None;
    while !stop.load(Ordering::Relaxed) {
        let stream = match conn.take() {
            Some(s) => s,
            None => match connect(&peer, &tls).await {
                Ok(s) => {
                    flood.connections.fetch_add(1, Ordering::Relaxed);
                    s
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let (mut rd, mut wr) = tokio::io::split(stream);
        // The answer is read while the body is written: a 429 or 413 comes before it is all sent.
        let write = async {
            wr.write_all(head.as_bytes()).await?;
            wr.write_all(&body).await?;
            wr.flush().await
        };
        let (written, answer) = tokio::join!(write, read_answer(&mut rd));
        match answer {
            Ok(answer) => {
                *flood
                    .answers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(shape.to_string())
                    .or_default()
                    .entry(answer.status)
                    .or_default() += 1;
                if written.is_ok() && !answer.close {
                    conn = Some(rd.unsplit(wr));
                }
            }
            Err(_) => {
                flood.unanswered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The ordinary client's figures.
#[derive(Debug, Default)]
struct Steady {
    latencies_ms: Vec<f64>,
    statuses: BTreeMap<u16, u64>,
    failures: Vec<String>,
    reconnects: u64,
}

/// One kept-alive connection sending `reviews` in turn every `interval` for `seconds`, on a
/// thread of its own so that the flood's work on the client's core does not delay it.
fn steady(
    opts: &Options,
    tls: Arc<rustls::ClientConfig>,
    seconds: u64,
) -> std::thread::JoinHandle<Result<Steady>> {
    let opts = opts.clone();
    std::thread::spawn(move || {
        let reviews: Vec<(String, Vec<u8>)> = opts
            .reviews
            .iter()
            .map(|(path, file)| {
                std::fs::read(file)
                    .with_context(|| format!("{}", file.display()))
                    .map(|b| (path.clone(), b))
            })
            .collect::<Result<_>>()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async move {
            let mut out = Steady::default();
            let mut conn = Some(connect(&opts.peer, &tls).await?);
            let mut tick = tokio::time::interval(opts.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let mut i = 0;
            while Instant::now() < deadline {
                tick.tick().await;
                let (path, body) = &reviews[i % reviews.len()];
                i += 1;
                let mut stream = match conn.take() {
                    Some(s) => s,
                    None => {
                        out.reconnects += 1;
                        connect(&opts.peer, &tls).await?
                    }
                };
                let started = Instant::now();
                let sent = async {
                    stream.write_all(head(path, body.len()).as_bytes()).await?;
                    stream.write_all(body).await?;
                    stream.flush().await?;
                    read_answer(&mut stream).await
                };
                match tokio::time::timeout(Duration::from_secs(5), sent).await {
                    Ok(Ok(answer)) => {
                        out.latencies_ms
                            .push(started.elapsed().as_secs_f64() * 1000.0);
                        *out.statuses.entry(answer.status).or_default() += 1;
                        if !answer.close {
                            conn = Some(stream);
                        }
                    }
                    Ok(Err(e)) => out.failures.push(e.to_string()),
                    Err(_) => out.failures.push("no answer within 5 s".into()),
                }
            }
            Ok(out)
        })
    })
}

fn summary(steady: &Steady) -> Value {
    let mut v = steady.latencies_ms.clone();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        (!v.is_empty()).then(|| {
            let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            (v[i] * 1000.0).round() / 1000.0
        })
    };
    let mut failures: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &steady.failures {
        *failures.entry(f.as_str()).or_default() += 1;
    }
    json!({
        "requests": v.len() + steady.failures.len(),
        "statuses": steady.statuses,
        "failures": failures,
        "reconnects": steady.reconnects,
        "latency_ms": {"p50": at(0.5), "p99": at(0.99), "p99.9": at(0.999), "max": v.last()},
    })
}

/// CPU seconds (user and system) process `pid` has used.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is gone"))?;
    // The fields after the command (which may hold spaces) in parentheses; utime and stime are
    // the 14th and 15th fields of the line, in clock ticks (100 a second on Linux).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: Vec<f64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse().ok())
        .collect();
    if ticks.len() != 2 {
        bail!("no utime and stime in /proc/{pid}/stat");
    }
    Ok((ticks[0] + ticks[1]) / 100.0)
}

/// VmRSS and VmHWM of `pid`, in KiB.
fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid} is gone"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// The flood alone: `attackers` clients for `seconds`; what they got back. Run by `run` as a
/// process of its own at the lowest CPU priority, so that on a machine whose cores the webhook,
/// the flood and the ordinary client share, the flood's encryption never delays the ordinary
/// client's measurement (in a cluster the flood comes from another pod, the reviews from the
/// apiserver).
pub async fn flood(
    peer: Peer,
    ca: &Path,
    client: Option<&(PathBuf, PathBuf)>,
    attackers: usize,
    body_bytes: usize,
    seconds: u64,
) -> Result<Value> {
    let tls = tls_config(ca, client)?;
    let flood = Arc::new(Flood::default());
    let stop = Arc::new(AtomicBool::new(false));
    let shapes: Vec<_> = shapes(body_bytes)
        .into_iter()
        .map(|(name, path, body)| (name, path, Arc::new(body)))
        .collect();
    let started = Instant::now();
    let tasks: Vec<_> = (0..attackers)
        .map(|i| {
            let (name, path, body) = shapes[i % shapes.len()].clone();
            tokio::spawn(attack(
                peer.clone(),
                tls.clone(),
                name,
                path,
                body,
                flood.clone(),
                stop.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.abort();
    }
    let answers = flood
        .answers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let answered: u64 = answers.values().flat_map(|m| m.values()).sum();
    let unanswered = flood.unanswered.load(Ordering::Relaxed);
    Ok(json!({
        "attackers": attackers,
        "body_bytes": body_bytes,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "shapes": shapes.iter().map(|(n, p, _)| json!({"shape": n, "path": p})).collect::<Vec<_>>(),
        "requests": answered + unanswered,
        "answers_by_shape": answers,
        "unanswered": unanswered,
        "connections": flood.connections.load(Ordering::Relaxed),
    }))
}

pub async fn run(opts: Options) -> Result<Value> {
    let tls = tls_config(&opts.ca, opts.client.as_ref())?;
    // The ordinary client alone, which also shows the webhook answers.
    let alone = steady(&opts, tls.clone(), opts.alone_seconds)
        .join()
        .map_err(|_| anyhow::anyhow!("the ordinary client panicked"))??;
    if alone.latencies_ms.is_empty() {
        bail!(
            "the webhook answered no ordinary review: {:?}",
            alone.failures
        );
    }
    let before = opts.pid.map(memory).transpose()?;
    let cpu_before = opts.pid.map(cpu_seconds).transpose()?;
    let mut command = tokio::process::Command::new("nice");
    command
        .arg("-n19")
        .arg(std::env::current_exe()?)
        .arg("webhook-flood")
        .args(["--addr", &opts.peer.addr.to_string()])
        .arg("--ca")
        .arg(&opts.ca);
    if let ServerName::DnsName(name) = &opts.peer.name {
        command.args(["--server-name", name.as_ref()]);
    }
    if let Some((cert, key)) = &opts.client {
        command
            .arg("--client-cert")
            .arg(cert)
            .arg("--client-key")
            .arg(key);
    }
    let flood = command
        .args(["--attackers", &opts.attackers.to_string()])
        .args(["--body-bytes", &opts.body_bytes.to_string()])
        .args(["--seconds", &opts.seconds.to_string()])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the flood (nice kubesteer-bench webhook-flood)")?;
    let flood = tokio::spawn(flood.wait_with_output());
    let ordinary = steady(&opts, tls.clone(), opts.seconds);
    let mut peak_rss = before.map_or(0, |(rss, _)| rss);
    let mut samples = 0u64;
    while !ordinary.is_finished() || !flood.is_finished() {
        if let Some(pid) = opts.pid {
            let (rss, _) = memory(pid)?;
            peak_rss = peak_rss.max(rss);
            samples += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let under_attack = ordinary
        .join()
        .map_err(|_| anyhow::anyhow!("the ordinary client panicked"))??;
    let flood = flood.await??;
    if !flood.status.success() {
        bail!("the flood failed: {}", flood.status);
    }
    let mut flood: Value =
        serde_json::from_slice(&flood.stdout).context("reading the flood's figures")?;
    let alone = summary(&alone);
    let attacked = summary(&under_attack);
    let p99 = attacked["latency_ms"]["p99"].as_f64();
    let all_answered =
        under_attack.failures.is_empty() && under_attack.statuses.keys().all(|s| *s == 200);
    let mut process = Value::Null;
    let mut hwm_under_64_mib = Value::Null;
    if let (Some(pid), Some((idle_rss, idle_hwm)), Some(cpu_before)) =
        (opts.pid, before, cpu_before)
    {
        let cpu = cpu_seconds(pid)? - cpu_before;
        flood["webhook_cpu_seconds"] = json!((cpu * 100.0).round() / 100.0);
        let (after_rss, hwm) = memory(pid)?;
        hwm_under_64_mib = json!(hwm < 64 * 1024);
        process = json!({
            "idle": idle_rss,
            "hwm_before_flood": idle_hwm,
            "peak_sampled": peak_rss,
            "hwm": hwm,
            "after": after_rss,
            "samples": samples,
        });
    }
    let cgroups = opts
        .cgroups
        .iter()
        .map(|dir| cgroup_memory(dir))
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({
        "flood": flood,
        "rss_kib": process,
        "cgroups": cgroups,
        "ordinary_reviews": {
            "interval_ms": opts.interval.as_millis() as u64,
            "reviews": opts.reviews.iter().map(|(p, f)| json!({"path": p, "body": f})).collect::<Vec<_>>(),
            "alone": alone,
            "under_flood": attacked,
        },
        "targets": {
            "hwm_under_64_mib": hwm_under_64_mib,
            "p99_under_50_ms": p99.is_some_and(|p| p < 50.0),
            "every_ordinary_review_answered_200": all_answered,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_is_json_of_the_size_asked_with_the_field_it_aims_at() {
        for (name, _, body) in shapes(1 << 20) {
            let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(body.len().abs_diff(1 << 20) < 16, "{name}: {}", body.len());
            let aimed = if v["kind"] == "ConversionReview" {
                v["request"]["objects"][0].clone()
            } else {
                v["request"]["object"].clone()
            };
            assert!(
                aimed.is_array() || aimed["spec"].is_object(),
                "{name}: {aimed:.80}"
            );
        }
    }
}
