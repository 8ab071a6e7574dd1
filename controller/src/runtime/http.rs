//! The small HTTP server for /metrics, /healthz and /readyz; HTTPS under `--metrics-auth`.
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{middleware, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use kubesteer_runtime::{exposition, health, Health};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::debug;

use super::metrics_auth::{self, Authorizer};
use crate::metrics::Metrics;
use crate::Result;

/// Time a client has for the TLS handshake, and then for each request head: a scraper needs
/// milliseconds, and a stalled connection must not hold its task for long.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Time open connections get to finish on shutdown, inside the pod's grace period.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// /metrics, behind `authorizer` when given, and the probes (see `runtime` for readiness),
/// always open to the kubelet.
pub fn router(metrics: Arc<Metrics>, health: Health, authorizer: Option<Authorizer>) -> Router {
    let router = Router::new().route("/metrics", get(metrics_text));
    let router = match authorizer {
        Some(authorizer) => router.route_layer(middleware::from_fn_with_state(
            authorizer,
            metrics_auth::require,
        )),
        None => router,
    };
    router.with_state(metrics).merge(health::routes(health))
}

async fn metrics_text(
    State(metrics): State<Arc<Metrics>>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    exposition::respond_parts(&headers, metrics.exposition())
}

/// Binds `addr`, then serves until `shutdown` resolves; the bound address is returned at once.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok((local, task))
}

/// A rustls configuration serving a new self-signed certificate for `namespace`, localhost and
/// the loopback addresses. Scrapers cannot verify it, as with controller-runtime's own
/// self-signed certificate; it encrypts the bearer tokens on their way.
pub fn self_signed(namespace: &str) -> Result<rustls::ServerConfig> {
    let mut opts = kubesteer_certs::Options::new("kubesteer-controller-metrics", namespace);
    opts.dns = vec!["localhost".to_string()];
    opts.ips = vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    let bundle = kubesteer_certs::generate(&opts)?;
    Ok(kubesteer_certs::server_config(&bundle.serving)?)
}

/// Like [`serve`], over TLS with `tls`: each connection is handshaken and served in a task of its
/// own, so a slow client holds up no other.
pub async fn serve_tls(
    addr: SocketAddr,
    router: Router,
    tls: rustls::ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let task = tokio::spawn(async move {
        let (stop_tx, stop) = watch::channel(false);
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            // Reap finished connections, so the set holds only open ones.
            while connections.try_join_next().is_some() {}
            match accepted {
                Ok((tcp, peer)) => {
                    let (acceptor, router, stop) = (acceptor.clone(), router.clone(), stop.clone());
                    connections.spawn(async move {
                        if let Err(e) = connection(acceptor, tcp, router, stop).await {
                            debug!(%peer, error = %e, "metrics connection ended");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors, say: back off instead of spinning.
                    debug!(error = %e, "cannot accept a metrics connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            connections.abort_all();
        }
        Ok(())
    });
    Ok((local, task))
}

/// Serves one connection: the handshake, then HTTP/1.1 until the client leaves or `stop`.
async fn connection(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    router: Router,
    mut stop: watch::Receiver<bool>,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let tls = tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(tcp)).await??;
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT)
        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(router));
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => return Ok(served?),
        _ = stop.wait_for(|&s| s) => conn.as_mut().graceful_shutdown(),
    }
    Ok(conn.await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        get_with(addr, path, "").await
    }

    async fn get_with(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let code = out[9..12].parse().unwrap();
        (code, out)
    }

    #[tokio::test]
    async fn health_readiness_and_metrics_are_served() {
        let metrics = Arc::new(Metrics::default());
        drop(metrics.reconcile("Welcome"));
        let health = Health::default();
        health.hold(crate::runtime::STARTING);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, task) = serve(
            "127.0.0.1:0".parse().unwrap(),
            router(metrics, health.clone(), None),
            async move {
                let _ = rx.await;
            },
        )
        .await
        .unwrap();
        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/readyz").await.0, 503);
        health.release(crate::runtime::STARTING);
        assert_eq!(get(addr, "/readyz").await.0, 200);
        let (code, body) = get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(
            body.contains("kubesteer_reconciles_total{kind=\"Welcome\"} 1"),
            "{body}"
        );
        assert!(body.contains("application/openmetrics-text"), "{body}");
        // The text format to a client that asks for it alone (promtool check metrics).
        let (code, body) = get_with(addr, "/metrics", "Accept: text/plain;version=0.0.4\r\n").await;
        assert_eq!(code, 200);
        assert!(body.contains("text/plain; version=0.0.4"), "{body}");
        assert!(
            body.contains("# TYPE kubesteer_reconciles_total counter\n"),
            "{body}"
        );
        assert!(!body.contains("# EOF"), "{body}");
        tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }
}
