//! The small HTTP server for /metrics, /healthz and /readyz; HTTPS when scrapes need a token
//! ([`metrics_auth`]).
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::{exposition, health, Health};
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{middleware, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::debug;

use crate::metrics_auth::{self, Authorizer};

/// What /metrics serves: the exposition in parts (written one after another, so a large one is
/// never held whole).
pub trait Exposition: Send + Sync + 'static {
    fn parts(&self) -> Box<dyn Iterator<Item = Result<String, std::fmt::Error>> + Send + 'static>;
}

/// Time a client has for the TLS handshake, and then for each request head: a scraper needs
/// milliseconds, and a stalled connection must not hold its task for long.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Time open connections get to finish on shutdown, inside the pod's grace period.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// /metrics, behind `authorizer` when given, and the probes ([`health`] for readiness),
/// always open to the kubelet.
pub fn router<M: Exposition>(
    metrics: Arc<M>,
    health: Health,
    authorizer: Option<Authorizer>,
) -> Router {
    let router = Router::new().route("/metrics", get(metrics_text::<M>));
    let router = match authorizer {
        Some(authorizer) => router.route_layer(middleware::from_fn_with_state(
            authorizer,
            metrics_auth::require,
        )),
        None => router,
    };
    router.with_state(metrics).merge(health::routes(health))
}

async fn metrics_text<M: Exposition>(
    State(metrics): State<Arc<M>>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    exposition::respond_parts(&headers, metrics.parts())
}

/// Binds `addr`, then serves until `shutdown` resolves; the bound address is returned at once.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok((local, task))
}

/// Like [`serve`], over TLS with `tls`: each connection is handshaken and served in a task of its
/// own, so a slow client holds up no other.
pub async fn serve_tls(
    addr: SocketAddr,
    router: Router,
    tls: rustls::ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
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
