//! HTTPS over rustls with HTTP/1.1 keep-alive, and limits against slow or idle clients.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower_http::timeout::TimeoutLayer;

/// How long clients may take; see the flags in `args.rs` for why each default is what it is.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub handshake: Duration,
    pub idle: Duration,
    pub request: Duration,
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains open connections.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let app = app.layer(TimeoutLayer::with_status_code(
        axum::http::StatusCode::REQUEST_TIMEOUT,
        limits.request,
    ));
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
        };
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(limits.handshake, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            // hyper starts this timer whenever it waits for a request head, so it bounds idle time too.
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.idle)
                .keep_alive(true);
            let conn = http.serve_connection(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    // Open connections finish their current request; bounded so a stuck client cannot hold us.
    let _ = tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await;
}
