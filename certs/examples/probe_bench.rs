//! Latency of `Probe::once` against a local TLS server: `cargo run -p kubesteer-certs --release
//! --example probe_bench -- [PROBES] [ROUNDS]` prints JSON (per round: median, p90 and mean
//! microseconds per probe). Each probe is a new TCP connection, TLS 1.3 handshake and HTTP/1.1
//! GET of /readyz against a server thread in the same process answering "200 OK" and closing.
use std::time::{Duration, Instant};

use kubesteer_certs::probe::Probe;
use kubesteer_certs::{generate, server_config, Options};

#[path = "../src/tls_server.rs"]
mod tls_server;

fn main() {
    let mut args = std::env::args().skip(1);
    let probes: usize = args.next().map_or(1000, |a| a.parse().expect("PROBES"));
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("ROUNDS"));

    let mut opts = Options::new("probe", "bench");
    opts.ips.push("127.0.0.1".parse().unwrap());
    let certs = generate(&opts).unwrap();
    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
    let port = tls_server::serve(server_config(&certs.serving).unwrap(), move |_, _| {
        Some(ok.to_vec())
    });

    let probe = Probe::new(
        &format!("https://127.0.0.1:{port}/readyz"),
        certs.ca.cert.as_bytes(),
        Duration::from_secs(5),
    )
    .unwrap();
    for _ in 0..50 {
        probe.once().unwrap();
    }
    let mut results = Vec::new();
    for _ in 0..rounds {
        let mut times: Vec<Duration> = (0..probes)
            .map(|_| {
                let start = Instant::now();
                probe.once().unwrap();
                start.elapsed()
            })
            .collect();
        times.sort();
        let us = |d: Duration| (d.as_secs_f64() * 1e7).round() / 10.0;
        let mean = times.iter().sum::<Duration>() / probes as u32;
        results.push(format!(
            "{{\"median_us\": {}, \"p90_us\": {}, \"mean_us\": {}}}",
            us(times[probes / 2]),
            us(times[probes * 9 / 10]),
            us(mean)
        ));
    }
    println!(
        "{{\"probes_per_round\": {probes}, \"rounds\": [{}]}}",
        results.join(", ")
    );
}
