//! A TLS server thread on 127.0.0.1 for the readiness probe's tests and its benchmark
//! (`examples/probe_bench.rs` includes this file by its path): no part of the crate's API.
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ServerConfig, ServerConnection, StreamOwned};

/// Serves on a new port of 127.0.0.1, which it returns (or why it could not bind one): reads each connection's request head and sends what
/// `answer` returns for it and the connection's number (from 0), then closes; for None it sends
/// nothing for a second.
pub fn serve<F>(config: ServerConfig, answer: F) -> std::io::Result<u16>
where
    F: Fn(usize, &str) -> Option<Vec<u8>> + Send + 'static,
{
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for (n, tcp) in listener.incoming().enumerate() {
            let Ok(tcp) = tcp else { continue };
            let Ok(conn) = ServerConnection::new(config.clone()) else {
                continue;
            };
            let mut tls = StreamOwned::new(conn, tcp);
            let mut reader = BufReader::new(&mut tls);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line == "\r\n" => break,
                    Ok(_) => head.push_str(&line),
                }
            }
            match answer(n, &head) {
                Some(reply) => {
                    let _ = tls.write_all(&reply);
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                }
                None => std::thread::sleep(Duration::from_secs(1)),
            }
        }
    });
    Ok(port)
}
