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
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use hyper_util::rt::TokioTimer;

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

/// Like [`serve`], over TLS with `tls`, on axum-server: each connection is handshaken and
/// served in a task of its own, so a slow client holds up no other. There is no bound on
/// connections: the controller's `/metrics` is scraped by a few clients, and a flood of
/// connections costs what it costs any axum-server (`bench/results/servers-*.json`).
pub async fn serve_tls(
    addr: SocketAddr,
    router: Router,
    tls: rustls::ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let acceptor = RustlsAcceptor::new(RustlsConfig::from_config(Arc::new(tls)))
        .handshake_timeout(CLIENT_TIMEOUT);
    let handle = axum_server::Handle::new();
    let mut server = axum_server::from_tcp(listener)?
        .acceptor(acceptor)
        .handle(handle.clone())
        .http1_only();
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT);
    tokio::spawn(async move {
        shutdown.await;
        handle.graceful_shutdown(Some(DRAIN_TIMEOUT));
    });
    let task = tokio::spawn(server.serve(router.into_make_service()));
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serve_tls_answers_over_tls_and_stops_on_shutdown() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut options = kubesteer_certs::Options::new("metrics", "test");
        options.ips.push("127.0.0.1".parse().unwrap());
        let certs = kubesteer_certs::generate(&options).unwrap();
        let tls = kubesteer_certs::server_config(&certs.serving).unwrap();
        let router = Router::new().route("/healthz", get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr, task) = serve_tls("127.0.0.1:0".parse().unwrap(), router, tls, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();

        let url = format!("https://{addr}/healthz");
        let ca = certs.ca.cert.clone();
        let answered = tokio::task::spawn_blocking(move || {
            kubesteer_certs::probe::Probe::new(&url, ca.as_bytes(), Duration::from_secs(5))
                .unwrap()
                .once()
        })
        .await
        .unwrap();
        assert!(answered.is_ok(), "{answered:?}");

        stop.send(()).unwrap();
        let ended = tokio::time::timeout(DRAIN_TIMEOUT * 2, task).await;
        assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
