//! Shutdown without a failed admission: after the signal /readyz fails, but admission requests are
//! still served for the shutdown delay, over kept-alive and new connections, each of which closes
//! after its answer; then the server stops accepting and exits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kubesteer_webhook::server::Limits;
use kubesteer_webhook::AppState;
use tokio::time::Instant;

use crate::common;
use crate::common::client::{self, send, Sender};

const DELAY: Duration = Duration::from_secs(3);

async fn connect(addr: SocketAddr, roots: &rustls::RootCertStore) -> Result<Sender, String> {
    client::connect(addr, &client::client_config(roots)).await
}

async fn closed(sender: &Sender) -> bool {
    common::eventually(Duration::from_secs(5), || sender.is_closed()).await
}

#[tokio::test]
async fn shutdown_fails_readiness_but_serves_admission_until_the_delay_ends() {
    let (key, roots) = common::local_tls();

    let state = Arc::new(AppState::new(common::cluster()));
    let limits = Limits {
        shutdown_delay: DELAY,
        ..common::limits()
    };
    let (signal, signalled) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = common::serve_state(state.clone(), key, limits, async {
        let _ = signalled.await;
    })
    .await;
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
        assert!(reply.allowed(), "{}", reply.body);
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
    assert!(reply.allowed(), "{}", reply.body);
    assert_eq!(reply.connection.as_deref(), Some("close"));
    assert!(closed(&kept).await, "closed after its answer");

    // A new connection is accepted and served too.
    let mut fresh = connect(addr, &roots)
        .await
        .expect("new connections are accepted during the delay");
    let reply = send(&mut fresh, "/validate/memcacheds", Some(&review))
        .await
        .unwrap();
    assert!(reply.allowed(), "{}", reply.body);
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
