//! A connection flood does not lock the apiserver out. One address opens 2,000 connections, half
//! of them plain TCP that never sends a ClientHello, half finishing TLS and then trickling a
//! request head; from the same address a client that behaves like the apiserver (kept-alive
//! connections, four requests at a time, a new connection now and then) sends AdmissionReviews.
//! Every review is answered, with p99 under 50 ms, and the server made room by closing flood
//! connections. The server runs with the flags' defaults.
//!
//! Its own test binary, not a module of tests/webhook: libtest runs a binary's tests at once, and
//! this p99 bound measures the server on the machine's two cores (see WORKERS); beside the other
//! tests (the 2,000 proptest cases among them) its p99 doubled. Cargo runs test binaries one
//! after another, so here it has the cores to itself. It also raises the process's open-file
//! limit, for its 4,000 sockets.
#[path = "webhook/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use common::client::{
    self, client_config, connect, send, Flood, Sender, ANSWER_TIMEOUT, NEW_CONNECTION_EVERY,
    OPENING,
};
use kubesteer_webhook::args::Args;
use kubesteer_webhook::AppState;
use tokio::time::Instant;

/// Flood connections: every other one never starts TLS, the rest finish TLS and then send a
/// request head one byte at a time.
const FLOOD: usize = 2_000;
/// The apiserver's requests in flight at once, one per kept-alive connection. A review takes
/// several milliseconds of CPU in this debug build; more at once than the machine's two cores
/// would measure queueing in this test rather than the server.
const WORKERS: usize = 2;
const REQUESTS_PER_WORKER: usize = 500;
/// The bound, for reviews on kept-alive connections, as the apiserver sends most.
const P99_BOUND: Duration = Duration::from_millis(50);
/// A review on a new connection includes a TLS handshake, which in this debug build on two shared
/// cores takes 40-60 ms with no flood at all; what matters there is that it is not locked out.
const NEW_CONNECTION_BOUND: Duration = Duration::from_secs(1);

/// One AdmissionReview; `Ok` only for an allowed review.
async fn review(sender: &mut Sender, path: &str, body: &[u8]) -> Result<(), String> {
    let reply = send(sender, path, Some(body)).await?;
    if !reply.allowed() {
        return Err(format!("{}: {}", reply.status, reply.body));
    }
    Ok(())
}

/// One answered review: its latency, connecting included when it opened a connection.
struct Answered {
    latency: Duration,
    new_connection: bool,
}

/// The apiserver: kept-alive connections, a new one every few requests; returns every review's
/// answer, or why it failed.
async fn apiserver_worker(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    body: Arc<Vec<u8>>,
    worker: usize,
) -> Vec<Result<Answered, String>> {
    let mut results = Vec::with_capacity(REQUESTS_PER_WORKER);
    let mut sender: Option<Sender> = None;
    for i in 0..REQUESTS_PER_WORKER {
        let path = if (i + worker).is_multiple_of(2) {
            "/validate/memcacheds"
        } else {
            "/mutate/memcacheds"
        };
        if i.is_multiple_of(NEW_CONNECTION_EVERY) || sender.as_ref().is_none_or(Sender::is_closed) {
            sender = None;
        }
        let new_connection = sender.is_none();
        let started = Instant::now();
        let answered = tokio::time::timeout(ANSWER_TIMEOUT, async {
            if sender.is_none() {
                sender = Some(connect(addr, &config).await?);
            }
            match sender.as_mut() {
                Some(s) => review(s, path, &body).await,
                None => Err("no connection".to_string()),
            }
        })
        .await;
        results.push(match answered {
            Ok(Ok(())) => Ok(Answered {
                latency: started.elapsed(),
                new_connection,
            }),
            Ok(Err(e)) => Err(format!("request {i}: {e}")),
            Err(_) => Err(format!("request {i}: no answer within {ANSWER_TIMEOUT:?}")),
        });
        if !matches!(results.last(), Some(Ok(_))) {
            sender = None;
        }
    }
    results
}

/// The `q` quantile of `latencies`.
fn at(latencies: &mut [Duration], q: f64) -> Duration {
    latencies.sort();
    let rank = (latencies.len() as f64 * q).ceil() as usize;
    latencies
        .get(rank.saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_and_slow_connections_does_not_lock_out_the_apiserver() {
    // Client and server ends of every flood connection live in this process.
    let nofile = rlimit::increase_nofile_limit(8192).unwrap();
    assert!(
        nofile >= 2 * FLOOD as u64 + 256,
        "open-file limit {nofile} is too low for this test"
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (key, roots) = common::local_tls();
    let config = client_config(&roots);

    let state = Arc::new(AppState::new(common::cluster()));
    let limits = Args::try_parse_from(["kubesteer-webhook"])
        .unwrap()
        .limits();
    let (addr, _server) =
        common::serve_state(state.clone(), key, limits, std::future::pending()).await;

    // The flood, OPENING connections at a time, silent and slow ones interleaved.
    let flood = Arc::new(Flood::default());
    let mut attackers = tokio::task::JoinSet::new();
    attackers.spawn(client::flood(
        flood.clone(),
        (addr, config.clone()),
        FLOOD,
        OPENING,
    ));
    // The apiserver starts once every flood connection is up, so that its requests meet a full
    // server rather than the handshakes of this test's own attacker, which compete for the CPU.
    assert!(
        common::eventually(Duration::from_secs(120), || flood
            .connected
            .load(Ordering::Relaxed)
            >= FLOOD)
        .await,
        "the flood never got going: {} connected",
        flood.connected.load(Ordering::Relaxed)
    );
    let flood_at_start = flood.connected.load(Ordering::Relaxed);

    let body = Arc::new(serde_json::to_vec(&common::fixture("memcached-create.json")).unwrap());
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..WORKERS {
        workers.spawn(apiserver_worker(addr, config.clone(), body.clone(), worker));
    }
    let (mut kept, mut opened, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(results) = workers.join_next().await {
        for result in results.unwrap() {
            match result {
                Ok(a) if a.new_connection => opened.push(a.latency),
                Ok(a) => kept.push(a.latency),
                Err(e) => failures.push(e),
            }
        }
    }
    let flood_at_end = flood.connected.load(Ordering::Relaxed);
    // Flood connections the server still held when the apiserver was done.
    let flood_open = flood.held();
    attackers.abort_all();

    let (p50, p99, max) = (at(&mut kept, 0.5), at(&mut kept, 0.99), at(&mut kept, 1.0));
    let slowest_new = at(&mut opened, 1.0);
    let metrics = state.metrics.encode();
    let room_made: u64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("kubesteer_webhook_connections_closed_total{reason=\"address_limit\"}")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    println!(
        "answered {} of {}; on kept-alive connections p50 {p50:?}, p99 {p99:?}, max {max:?}; \
         {} on new connections, p50 {:?}, slowest {slowest_new:?}; flood connected \
         {flood_at_start} before the apiserver started, {flood_at_end} by its end; held {}, \
         closed by the server {}, still open at the end {flood_open}; closed for room: \
         {room_made}",
        kept.len() + opened.len(),
        WORKERS * REQUESTS_PER_WORKER,
        opened.len(),
        at(&mut opened, 0.5),
        flood.holding.load(Ordering::Relaxed),
        flood.closed.load(Ordering::Relaxed),
    );
    assert!(
        failures.is_empty(),
        "{} of {} reviews failed, e.g. {:?}",
        failures.len(),
        WORKERS * REQUESTS_PER_WORKER,
        failures.iter().take(3).collect::<Vec<_>>()
    );
    assert!(p99 < P99_BOUND, "p99 {p99:?} is over {P99_BOUND:?}");
    assert!(
        slowest_new < NEW_CONNECTION_BOUND,
        "a review on a new connection took {slowest_new:?}"
    );
    assert!(
        flood_open > 0,
        "the flood was over before the apiserver was done"
    );
    assert!(
        room_made > 0,
        "the flood never filled the per-address limit"
    );
}
