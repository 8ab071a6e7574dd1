//! Shutdown without a failed admission: after the signal /readyz fails, but admission requests are
//! still served for the shutdown delay, over kept-alive and new connections, each of which closes
//! after its answer; then the server stops accepting and exits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use kubesteer_webhook::server::{serve, Limits};
use kubesteer_webhook::tls::{server_config, CertStore};
use kubesteer_webhook::{router, AppState};
use rustls::pki_types::ServerName;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::common;

type Sender = hyper::client::conn::http1::SendRequest<Body>;

const DELAY: Duration = Duration::from_secs(3);

struct Reply {
    status: u16,
    connection: Option<String>,
    body: String,
}

async fn connect(addr: SocketAddr, roots: &rustls::RootCertStore) -> Result<Sender, String> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots.clone())
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn send(sender: &mut Sender, path: &str, review: Option<&[u8]>) -> Result<Reply, String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = match review {
        Some(body) => hyper::Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_vec())),
        None => hyper::Request::get(path).body(Body::empty()),
    };
    let mut request = request.unwrap();
    request
        .headers_mut()
        .insert("host", "127.0.0.1".parse().unwrap());
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

fn allowed(reply: &Reply) -> bool {
    let review: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    reply.status == 200 && review["response"]["allowed"] == true
}

/// Waits (up to 5 s) until the client has seen the server close `sender`'s connection.
async fn closed(sender: &Sender) -> bool {
    common::eventually(Duration::from_secs(5), || sender.is_closed()).await
}

#[tokio::test]
async fn shutdown_fails_readiness_but_serves_admission_until_the_delay_ends() {
    let (key, roots) = common::local_tls();

    let state = Arc::new(AppState::new(common::cluster()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits {
        shutdown_delay: DELAY,
        ..common::limits()
    };
    let (signal, signalled) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        server_config(CertStore::new(key)).unwrap(),
        router(state.clone()),
        limits,
        state.health.clone(),
        state.metrics.connections_closed.clone(),
        async {
            let _ = signalled.await;
        },
    ));
    let review = serde_json::to_vec(&common::fixture("memcached-create.json")).unwrap();

    // Two kept-alive connections: one is used again after the signal, one stays idle.
    let mut kept = connect(addr, &roots).await.unwrap();
    let mut idle = connect(addr, &roots).await.unwrap();
    for sender in [&mut kept, &mut idle] {
        let ready = send(sender, "/readyz", None).await.unwrap();
        assert_eq!((ready.status, ready.connection), (200, None));
        let reply = send(sender, "/mutate/memcacheds", Some(&review))
            .await
            .unwrap();
        assert!(allowed(&reply), "{}", reply.body);
        assert_eq!(reply.connection, None, "kept alive before the signal");
    }

    signal.send(()).unwrap();
    let signalled_at = Instant::now();
    // Readiness turns as soon as the signal is seen.
    loop {
        let mut probe = connect(addr, &roots).await.unwrap();
        let ready = send(&mut probe, "/readyz", None).await.unwrap();
        if ready.status == 503 {
            assert_eq!(ready.body, "shutting down");
            assert_eq!(ready.connection.as_deref(), Some("close"));
            break;
        }
        assert_eq!(ready.status, 200);
        assert!(
            signalled_at.elapsed() < DELAY,
            "/readyz never failed during the delay"
        );
        tokio::task::yield_now().await;
    }
    assert!(state.health.is_shutting_down());

    // The kept-alive connection still gets its answer, then is closed by the server.
    let reply = send(&mut kept, "/mutate/memcacheds", Some(&review))
        .await
        .expect("a kept-alive connection is served during the delay");
    assert!(allowed(&reply), "{}", reply.body);
    assert_eq!(reply.connection.as_deref(), Some("close"));
    assert!(closed(&kept).await, "closed after its answer");

    // A new connection is accepted and served too.
    let mut fresh = connect(addr, &roots)
        .await
        .expect("new connections are accepted during the delay");
    let reply = send(&mut fresh, "/validate/memcacheds", Some(&review))
        .await
        .unwrap();
    assert!(allowed(&reply), "{}", reply.body);
    assert_eq!(reply.connection.as_deref(), Some("close"));
    assert!(
        signalled_at.elapsed() < DELAY,
        "the test ran past the delay; its checks prove nothing"
    );
    assert!(!server.is_finished());

    // After the delay the server closes the idle connection and exits, without waiting for it.
    tokio::time::timeout(DELAY + Duration::from_secs(10), server)
        .await
        .expect("the server exits after the delay")
        .unwrap();
    assert!(signalled_at.elapsed() >= DELAY, "exited before the delay");
    assert!(closed(&idle).await, "the idle connection is closed");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no connection is accepted after the exit"
    );
}
