//! HTTPS over rustls with HTTP/1.1 keep-alive, connection limits that a flood of idle or slow
//! clients cannot turn into a lock-out, and a shutdown that drains: readiness fails first,
//! requests are served until endpoints forget us.
//!
//! Every connection is accepted at once; the accept loop never waits for room. A connection is
//! always in one of four phases, each with its own time limit:
//!
//! - *handshaking*: TCP is up, TLS is not done (`Limits::handshake`);
//! - *awaiting a head*: TLS is done and no request has come yet, or the first bytes of a request
//!   head have come but not the whole head (`Limits::header`);
//! - *idle*: between requests on a kept-alive connection (`Limits::idle`);
//! - *busy*: a whole request head was read and the answer is not yet given (`Limits::request`,
//!   answered with 408).
//!
//! When a new connection would give its address more than `Limits::max_connections_per_ip`
//! connections, or the server more than `Limits::max_connections`, room is made by closing the
//! connection that has been longest in its phase among those that are not busy: for the
//! per-address limit among that address's connections, for the total among the connections of
//! the address that holds the most. A busy connection is never closed for room, and the new
//! connection is closed instead only when every candidate is busy. All admission requests come
//! from the apiserver, often from one address that an abuser may share; its connections are busy
//! or were idle a moment ago, so an abuser's silent, half-sent and long-idle connections go first
//! and the apiserver's requests are still answered.
//!
//! When the TLS configuration verifies client certificates (`--apiserver-client-ca`), the names
//! of a connection's verified certificate go into each of its requests as a [`VerifiedClient`]
//! extension, for the routes that answer only the apiserver (`apiserver_auth`).
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Router;
use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use kubesteer_certs::ClientIdentity;
use kubesteer_runtime::Health;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::util::MapResponseLayer;
use tower::ServiceExt as _;
use tower_http::timeout::TimeoutLayer;

use crate::metrics::{ClosedLabels, ConnectionsClosed};

/// The names of the client certificate that a connection's TLS handshake verified, in the
/// extensions of each request on that connection; absent when the client presented none.
#[derive(Debug, Clone)]
pub struct VerifiedClient(pub Arc<ClientIdentity>);

/// How long clients may take and how many connections they may hold; see the flags in
/// `args.rs` for why each default is what it is.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time from accept to a finished TLS handshake.
    pub handshake: Duration,
    /// Time to send a whole request head: the first one counted from the handshake, later
    /// ones from their first byte.
    pub header: Duration,
    /// Time a kept-alive connection may sit between requests.
    pub idle: Duration,
    /// Time to read a request body and answer it.
    pub request: Duration,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// After the shutdown signal: how long connections are still accepted and served.
    pub shutdown_delay: Duration,
    /// After the delay: how long requests in progress may take to finish.
    pub drain: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains in two steps.
///
/// First, for `limits.shutdown_delay`, `health` is shut down (so `/readyz` fails and endpoints
/// drop this server) while new connections are still accepted and every request is served; each
/// response then carries `Connection: close`, so a kept-alive client finishes the request it
/// sent and reconnects elsewhere, and no idle connection is closed under it. Then the listener
/// closes, connections without a request in progress close, and the others finish their
/// current request, for at most `limits.drain`. Connections the server closes on its own are
/// counted in `closed`, by reason.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    limits: Limits,
    health: Health,
    closed: ConnectionsClosed,
    shutdown: impl Future<Output = ()>,
) {
    let closing = health.clone();
    let app = app
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            limits.request,
        ))
        .layer(MapResponseLayer::new(move |mut response: Response| {
            if closing.is_shutting_down() {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            response
        }));
    let acceptor = TlsAcceptor::from(tls);
    let table = Arc::new(Table::new(limits, closed));
    // Every connection holds a receiver; the sender sees them all gone when the drain is done.
    let (drain, drained) = watch::channel(false);
    let stop = async {
        shutdown.await;
        health.shut_down();
        tracing::info!(delay = ?limits.shutdown_delay, "shutting down: /readyz fails, admission requests are still served");
        tokio::time::sleep(limits.shutdown_delay).await;
    };
    let mut stop = std::pin::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, most likely; they come back as connections close.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(conn) = table.admit(peer.ip()) else {
            tracing::debug!(%peer, "connection limit reached and every connection is busy; closing the new one");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(connection(
            tcp,
            acceptor.clone(),
            app.clone(),
            Admitted {
                table: table.clone(),
                conn,
            },
            limits,
            drained.clone(),
        ));
    }
    drop(listener);
    tracing::info!("stopped accepting connections; finishing requests in progress");
    drain.send_replace(true);
    drop(drained);
    // Idle connections close now, busy ones after their response; bounded so a stuck client cannot hold us.
    if tokio::time::timeout(limits.drain, drain.closed())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?limits.drain, "connections still open after the drain timeout");
    }
}

/// One connection from TLS to its end, closed when its phase's time is up, when room is made
/// for others while it is not busy, or when the server drains.
async fn connection(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    app: Router,
    admitted: Admitted,
    limits: Limits,
    mut drain: watch::Receiver<bool>,
) {
    let conn = admitted.conn.clone();
    let peer = conn.ip;
    let tls = tokio::select! {
        _ = conn.evicted.notified() => return,
        _ = drain.wait_for(|d| *d) => return,
        accepted = tokio::time::timeout(limits.handshake, acceptor.accept(tcp)) => match accepted {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => {
                admitted.table.count_closed("handshake_timeout");
                return tracing::debug!(%peer, "TLS handshake timed out");
            }
        },
    };
    conn.enter(Phase::AwaitingHead);
    let client = verified_client(&tls, peer);
    let app = app.map_request(move |mut request: hyper::Request<Incoming>| {
        if let Some(client) = &client {
            request.extensions_mut().insert(client.clone());
        }
        request
    });
    let service = Tracked {
        inner: TowerToHyperService::new(app),
        conn: conn.clone(),
    };
    let io = Tracked {
        inner: tls,
        conn: conn.clone(),
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    // Our own timers below bound every phase; hyper's header timer cannot tell idle from slow.
    http.timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true)
        .max_buf_size(crate::budget::READ_BUFFER_BYTES);
    let http = http.serve_connection(TokioIo::new(io), service);
    let mut http = std::pin::pin!(http);
    let mut finishing = false;
    loop {
        let (phase, since) = conn.phase();
        let deadline = match phase {
            Phase::Handshaking | Phase::AwaitingHead => {
                Some((since + limits.header, "header_timeout"))
            }
            Phase::Idle => Some((since + limits.idle, "idle_timeout")),
            // The request timeout answers it; it is never cut off mid-request.
            Phase::Busy => None,
        };
        tokio::select! {
            ended = http.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            // Wakes the loop so that the deadline follows the phase.
            _ = conn.changed.notified() => {}
            _ = until(deadline.map(|(at, _)| at)) => {
                if let Some((_, reason)) = deadline {
                    if conn.phase() == (phase, since) {
                        admitted.table.count_closed(reason);
                        return tracing::debug!(%peer, ?phase, "connection timed out");
                    }
                }
            }
            _ = conn.evicted.notified(), if !finishing => {
                if conn.phase().0 != Phase::Busy {
                    return tracing::debug!(%peer, ?phase, "closed to make room");
                }
                http.as_mut().graceful_shutdown();
                finishing = true;
            }
            _ = drain.wait_for(|d| *d), if !finishing => {
                if conn.phase().0 != Phase::Busy {
                    return;
                }
                http.as_mut().graceful_shutdown();
                finishing = true;
            }
        }
    }
}

/// The names of the certificate the handshake verified; rustls finishes a handshake with a
/// client certificate only when the configured verifier accepted it.
fn verified_client(
    tls: &tokio_rustls::server::TlsStream<TcpStream>,
    peer: IpAddr,
) -> Option<VerifiedClient> {
    let leaf = tls.get_ref().1.peer_certificates()?.first()?;
    match ClientIdentity::of(leaf) {
        Ok(identity) => Some(VerifiedClient(Arc::new(identity))),
        Err(e) => {
            tracing::debug!(%peer, error = %e, "verified client certificate has unreadable names; treated as none");
            None
        }
    }
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Handshaking,
    AwaitingHead,
    Idle,
    Busy,
}

/// What the server knows of one connection.
struct Conn {
    id: u64,
    ip: IpAddr,
    /// The phase and when it began.
    phase: Mutex<(Phase, Instant)>,
    /// Woken when the phase changes.
    changed: Notify,
    /// Woken when the connection is closed to make room.
    evicted: Notify,
}

impl Conn {
    fn phase(&self) -> (Phase, Instant) {
        *lock(&self.phase)
    }

    fn enter(&self, phase: Phase) {
        let mut current = lock(&self.phase);
        if current.0 != phase {
            *current = (phase, Instant::now());
            drop(current);
            self.changed.notify_one();
        }
    }

    /// The first bytes of a request head after an idle spell start the head's clock.
    fn received(&self) {
        let mut current = lock(&self.phase);
        if current.0 == Phase::Idle {
            *current = (Phase::AwaitingHead, Instant::now());
            drop(current);
            self.changed.notify_one();
        }
    }
}

/// A panic elsewhere must not stop the server; the data is a plain value either way.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every open connection, by address, and the rule for making room.
struct Table {
    conns: Mutex<Conns>,
    max_total: usize,
    max_per_ip: usize,
    closed: ConnectionsClosed,
}

#[derive(Default)]
struct Conns {
    next_id: u64,
    total: usize,
    by_ip: HashMap<IpAddr, HashMap<u64, Arc<Conn>>>,
}

impl Table {
    fn new(limits: Limits, closed: ConnectionsClosed) -> Self {
        Self {
            conns: Mutex::default(),
            max_total: limits.max_connections.max(1),
            max_per_ip: limits.max_connections_per_ip.max(1),
            closed,
        }
    }

    /// Registers a new connection from `ip`, making room as the module doc says; `None` when
    /// there is no room because every candidate is busy.
    fn admit(&self, ip: IpAddr) -> Option<Arc<Conn>> {
        let mut conns = lock(&self.conns);
        while conns.by_ip.get(&ip).map_or(0, HashMap::len) >= self.max_per_ip {
            let Some(victim) = oldest_waiting(conns.by_ip.get(&ip).into_iter()) else {
                self.count_closed("all_busy");
                return None;
            };
            conns.evict(&victim);
            self.count_closed("address_limit");
        }
        while conns.total >= self.max_total {
            let mut addresses: Vec<_> = conns.by_ip.values().collect();
            // The address holding the most goes first; among equals, any.
            addresses.sort_by_key(|c| std::cmp::Reverse(c.len()));
            let Some(victim) = addresses
                .into_iter()
                .find_map(|c| oldest_waiting(std::iter::once(c)))
            else {
                self.count_closed("all_busy");
                return None;
            };
            conns.evict(&victim);
            self.count_closed("total_limit");
        }
        conns.next_id += 1;
        let conn = Arc::new(Conn {
            id: conns.next_id,
            ip,
            phase: Mutex::new((Phase::Handshaking, Instant::now())),
            changed: Notify::new(),
            evicted: Notify::new(),
        });
        conns.total += 1;
        conns
            .by_ip
            .entry(ip)
            .or_default()
            .insert(conn.id, conn.clone());
        Some(conn)
    }

    fn remove(&self, conn: &Conn) {
        let mut conns = lock(&self.conns);
        conns.remove(conn);
    }

    fn count_closed(&self, reason: &'static str) {
        self.closed.get_or_create(&ClosedLabels { reason }).inc();
    }
}

impl Conns {
    fn remove(&mut self, conn: &Conn) -> bool {
        let Some(of_ip) = self.by_ip.get_mut(&conn.ip) else {
            return false;
        };
        let removed = of_ip.remove(&conn.id).is_some();
        if of_ip.is_empty() {
            self.by_ip.remove(&conn.ip);
        }
        if removed {
            self.total -= 1;
        }
        removed
    }

    fn evict(&mut self, conn: &Arc<Conn>) {
        if self.remove(conn) {
            conn.evicted.notify_one();
        }
    }
}

/// The connection longest in its phase among those without a request in progress.
fn oldest_waiting<'a>(
    groups: impl Iterator<Item = &'a HashMap<u64, Arc<Conn>>>,
) -> Option<Arc<Conn>> {
    groups
        .flat_map(HashMap::values)
        .filter_map(|c| {
            let (phase, since) = c.phase();
            (phase != Phase::Busy).then_some((since, c))
        })
        .min_by_key(|(since, _)| *since)
        .map(|(_, c)| c.clone())
}

/// A connection in the table, removed from it when the connection task ends.
struct Admitted {
    table: Arc<Table>,
    conn: Arc<Conn>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.table.remove(&self.conn);
    }
}

/// Wraps the TLS stream, to see a request head begin, and the service, to see requests
/// begin and end.
struct Tracked<T> {
    inner: T,
    conn: Arc<Conn>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.received();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S> hyper::service::Service<hyper::Request<Incoming>> for Tracked<S>
where
    S: hyper::service::Service<hyper::Request<Incoming>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let busy = Busy::enter(self.conn.clone());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answered = answer.await;
            drop(busy);
            answered
        })
    }
}

/// Marks a connection busy while a request is answered, idle again after.
struct Busy(Arc<Conn>);

impl Busy {
    fn enter(conn: Arc<Conn>) -> Self {
        conn.enter(Phase::Busy);
        Self(conn)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.enter(Phase::Idle);
    }
}
