//! HTTPS over rustls with HTTP/1.1 keep-alive, limits against slow or idle clients, and a
//! shutdown that drains: readiness fails first, requests are served until endpoints forget us.
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::util::MapResponseLayer;
use tower_http::timeout::TimeoutLayer;

/// How long clients may take; see the flags in `args.rs` for why each default is what it is.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub handshake: Duration,
    pub idle: Duration,
    pub request: Duration,
    pub max_connections: usize,
    /// After the shutdown signal: how long connections are still accepted and served.
    pub shutdown_delay: Duration,
    /// After the delay: how long requests in progress may take to finish.
    pub drain: Duration,
}

/// Whether shutdown has begun; shared by the server and `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    /// Makes `/readyz` fail and every later response close its connection.
    pub fn start(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains in two steps.
///
/// First, for `limits.shutdown_delay`, `draining` is set (so `/readyz` fails and endpoints drop
/// this server) while new connections are still accepted and every request is served; each
/// response then carries `Connection: close`, so a kept-alive client finishes the request it
/// sent and reconnects elsewhere, and no idle connection is closed under it. Then the listener
/// closes and open connections finish their current request, for at most `limits.drain`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    limits: Limits,
    draining: Draining,
    shutdown: impl Future<Output = ()>,
) {
    let closing = draining.clone();
    let app = app
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            limits.request,
        ))
        .layer(MapResponseLayer::new(move |mut response: Response| {
            if closing.is_draining() {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            response
        }));
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let stop = async {
        shutdown.await;
        draining.start();
        tracing::info!(delay = ?limits.shutdown_delay, "shutting down: /readyz fails, admission requests are still served");
        tokio::time::sleep(limits.shutdown_delay).await;
    };
    let mut stop = std::pin::pin!(stop);
    loop {
        let permit = tokio::select! {
            _ = &mut stop => break,
            permit = slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
        };
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
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
    tracing::info!("stopped accepting connections; finishing requests in progress");
    // Idle connections close now, busy ones after their response; bounded so a stuck client cannot hold us.
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?limits.drain, "connections still open after the drain timeout");
    }
}
