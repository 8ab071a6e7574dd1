//! Latency of `Probe::once` against a local TLS server: `cargo run -p kubesteer-certs --release
//! --example probe_bench -- [PROBES] [ROUNDS]` prints JSON (per round: median, p90 and mean
//! microseconds per probe). Each probe is a new TCP connection, TLS 1.3 handshake and HTTP/1.1
//! GET of /readyz against a server thread in the same process answering "200 OK" and closing.
use std::time::{Duration, Instant};

use kubesteer_certs::probe::Probe;
use kubesteer_certs::{generate, server_config, Options};

#[path = "../src/tls_server.rs"]
mod tls_server;

type Error = Box<dyn std::error::Error>;

/// The positional argument `name` as a count of at least 1, or `default` when it is absent.
fn count(arg: Option<String>, name: &str, default: usize) -> Result<usize, Error> {
    match arg {
        None => Ok(default),
        Some(a) => match a.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!("{name}: expected a whole number of at least 1, got {a:?}").into()),
        },
    }
}

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let probes = count(args.next(), "PROBES", 1000)?;
    let rounds = count(args.next(), "ROUNDS", 5)?;

    let mut opts = Options::new("probe", "bench");
    opts.ips.push([127, 0, 0, 1].into());
    let certs = generate(&opts)?;
    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
    let port = tls_server::serve(server_config(&certs.serving)?, move |_, _| {
        Some(ok.to_vec())
    })?;

    let probe = Probe::new(
        &format!("https://127.0.0.1:{port}/readyz"),
        certs.ca.cert.as_bytes(),
        Duration::from_secs(5),
    )?;
    for _ in 0..50 {
        probe.once()?;
    }
    let mut results = Vec::new();
    for _ in 0..rounds {
        let mut times = (0..probes)
            .map(|_| {
                let start = Instant::now();
                probe.once().map(|_| start.elapsed())
            })
            .collect::<Result<Vec<Duration>, _>>()?;
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
    Ok(())
}
