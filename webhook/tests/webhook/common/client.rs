//! An HTTPS client for the servers under test, and the connections of a flood: shared by the
//! webhook's tests (`tests/webhook`, `tests/flood.rs`) and the servers benchmark
//! (`bench/src/servers.rs` includes this file), so that both send the same thing. It uses only
//! crates both have: tokio, rustls, tokio-rustls, hyper, hyper-util, http-body-util and axum's
//! `Body`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::TlsConnector;

pub type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// Flood connections being opened at once.
pub const OPENING: usize = 64;
/// A client in the apiserver's role opens a new connection this often, as the apiserver's pool
/// does when its concurrency changes: a flood must not keep new connections out either.
pub const NEW_CONNECTION_EVERY: usize = 10;
/// An answer slower than this counts as failed; the apiserver's own timeout is longer, but a
/// lock-out shows as a hang.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// A client that trusts `roots`, on ring, with no client certificate.
pub fn client_config(roots: &rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    Arc::new(config_builder(roots).with_no_client_auth())
}

/// The start of a client configuration that trusts `roots`, for a client certificate to follow.
pub fn config_builder(
    roots: &rustls::RootCertStore,
) -> rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert> {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| panic!("ring supports the default TLS versions: {e}"))
        .with_root_certificates(roots.clone())
}

/// A TLS connection to `addr` (its IP address as the server name), handshaken.
pub async fn tls(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    TlsConnector::from(config.clone())
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .map_err(|e| e.to_string())
}

/// An HTTP/1.1 connection over [`tls`], its driver spawned.
pub async fn connect(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> Result<Sender, String> {
    let stream = tls(addr, config).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(sender)
}

/// An answer: its status, `connection` header (lower case) and body.
pub struct Reply {
    pub status: u16,
    pub connection: Option<String>,
    pub body: String,
}

impl Reply {
    /// A 200 whose AdmissionReview allows.
    pub fn allowed(&self) -> bool {
        let review: serde_json::Value = serde_json::from_str(&self.body).unwrap_or_default();
        self.status == 200 && review["response"]["allowed"] == true
    }
}

/// Sends one request (a POST of JSON when `body` is given, a GET otherwise) and reads the answer.
pub async fn send(sender: &mut Sender, path: &str, body: Option<&[u8]>) -> Result<Reply, String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = hyper::Request::builder()
        .uri(path)
        .header("host", "127.0.0.1");
    let request = match body {
        Some(body) => request
            .method("POST")
            .header("content-type", "application/json")
            .body(Body::from(body.to_vec())),
        None => request.method("GET").body(Body::empty()),
    }
    .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let connection = response
        .headers()
        .get("connection")
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Reply {
        status,
        connection,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Counts of what a flood saw.
#[derive(Default)]
pub struct Flood {
    /// Connections whose TCP connect succeeded.
    pub connected: AtomicUsize,
    /// Connections that reached the point where they hold their slot (TCP up, or TLS done).
    pub holding: AtomicUsize,
    /// Connections the server closed.
    pub closed: AtomicUsize,
}

impl Flood {
    /// Flood connections the server still holds.
    pub fn held(&self) -> usize {
        self.holding
            .load(Ordering::Relaxed)
            .saturating_sub(self.closed.load(Ordering::Relaxed))
    }
}

/// Holds a connection that never sends a byte, until the server closes it; `opening` is
/// released once the connection is up.
pub async fn silent(addr: SocketAddr, flood: Arc<Flood>, opening: OwnedSemaphorePermit) {
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

/// Finishes TLS, then sends a request head one byte every 500 ms, until the server closes it;
/// `opening` is released once TLS is done (or failed), so a flood is not one burst of handshakes.
pub async fn slow(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    flood: Arc<Flood>,
    opening: OwnedSemaphorePermit,
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
        // The attacker's pace, not a wait for a condition: the server's answer ends the loop.
        match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    flood.closed.fetch_add(1, Ordering::Relaxed);
}

/// `size` flood connections to `addr`, `opening` at a time, silent and slow ones interleaved,
/// counted in `counts`; returns when every one has ended.
pub async fn flood(
    counts: Arc<Flood>,
    (addr, config): (SocketAddr, Arc<rustls::ClientConfig>),
    size: usize,
    opening: usize,
) {
    let opening = Arc::new(tokio::sync::Semaphore::new(opening));
    let mut held = tokio::task::JoinSet::new();
    for i in 0..size {
        let Ok(permit) = opening.clone().acquire_owned().await else {
            return;
        };
        let (counts, config) = (counts.clone(), config.clone());
        held.spawn(async move {
            if i % 2 == 0 {
                silent(addr, counts, permit).await
            } else {
                slow(addr, config, counts, permit).await
            }
        });
    }
    while held.join_next().await.is_some() {}
}
