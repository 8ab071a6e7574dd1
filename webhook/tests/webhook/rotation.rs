//! Certificate rotation over real TLS: files are replaced while a client keeps a connection open.
//! New handshakes see the new certificate; the open connection keeps working; no request fails.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kubesteer_runtime::Health;
use kubesteer_webhook::metrics::{ClosedLabels, ConnectionsClosed};
use kubesteer_webhook::server::{serve, Limits};
use kubesteer_webhook::tls::{server_config, CertFiles, CertStore};
use kubesteer_webhook::{router, AppState};
use rcgen::{CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::CertificateDer;

use crate::common;
use crate::common::client::{self, Sender};

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    der: CertificateDer<'static>,
}

fn ca() -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "test-ca");
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        der: cert.der().clone(),
        issuer: Issuer::new(params, key),
    }
}

/// A serving pair for 127.0.0.1 signed by `ca`: certificate PEM, key PEM, certificate DER.
fn serving_pair(ca: &Ca, generation: u32) -> (String, String, CertificateDer<'static>) {
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    params
        .distinguished_name
        .push(DnType::CommonName, format!("serving-{generation}"));
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().clone())
}

/// Writes `cert` and `key` into `dir` the way a Secret volume updates: a new directory, then an
/// atomic symlink swap.
fn install(dir: &Path, generation: u32, cert: &str, key: &[u8]) {
    let data = dir.join(format!("..{generation}"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tls.crt"), cert).unwrap();
    std::fs::write(data.join("tls.key"), key).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&data, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for f in ["tls.crt", "tls.key"] {
        if !dir.join(f).exists() {
            std::os::unix::fs::symlink(dir.join("..data").join(f), dir.join(f)).unwrap();
        }
    }
}

/// Writes a new valid serving pair into `dir` and returns its certificate.
fn write_serving(ca: &Ca, dir: &Path, generation: u32) -> CertificateDer<'static> {
    let (cert, key, der) = serving_pair(ca, generation);
    install(dir, generation, &cert, key.as_bytes());
    der
}

/// A connection to `addr` trusting `ca`, and the certificate the server presented.
async fn connect(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
) -> (Sender, CertificateDer<'static>) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let tls = client::tls(addr, &client::client_config(&roots))
        .await
        .unwrap();
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    (sender, leaf)
}

async fn healthz(sender: &mut Sender) -> Result<u16, String> {
    Ok(client::send(sender, "/healthz", None).await?.status)
}

/// The files `files.watch` reads in `dir`.
fn cert_files(dir: &Path) -> CertFiles {
    CertFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    }
}

#[tokio::test]
async fn rotation_serves_the_new_certificate_without_dropping_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let ca = ca();
    let first = write_serving(&ca, dir.path(), 1);
    let files = cert_files(dir.path());
    let store = CertStore::new(files.load().unwrap());
    tokio::spawn(files.watch(store.clone(), Duration::from_millis(100)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = common::limits();
    let app = router(Arc::new(AppState::new(common::cluster())));
    let closed = ConnectionsClosed::default();
    tokio::spawn(serve(
        listener,
        server_config(store.clone()).unwrap(),
        app,
        limits,
        Health::default(),
        closed.clone(),
        std::future::pending(),
    ));

    let (mut kept, leaf) = connect(addr, &ca.der).await;
    assert_eq!(leaf, first);
    for _ in 0..20 {
        assert_eq!(healthz(&mut kept).await, Ok(200));
    }
    let second = write_serving(&ca, dir.path(), 2);
    assert_ne!(first, second);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(
            healthz(&mut kept).await,
            Ok(200),
            "the open connection must keep working"
        );
        let (mut fresh, leaf) = connect(addr, &ca.der).await;
        assert_eq!(healthz(&mut fresh).await, Ok(200));
        if leaf == second {
            break;
        }
        assert_eq!(leaf, first);
        assert!(
            tokio::time::Instant::now() < deadline,
            "new handshakes never saw the new certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(store.leaf().as_deref(), Some(second.as_ref()));
    for _ in 0..20 {
        assert_eq!(
            healthz(&mut kept).await,
            Ok(200),
            "the connection opened before the rotation must keep working after it"
        );
    }
    assert_eq!(
        closed_total(&closed),
        0,
        "the server closed a connection during the rotation"
    );
}

/// Connections the server closed on its own, over every reason.
fn closed_total(closed: &ConnectionsClosed) -> u64 {
    [
        "handshake_timeout",
        "header_timeout",
        "idle_timeout",
        "address_limit",
        "total_limit",
        "all_busy",
    ]
    .into_iter()
    .map(|reason| closed.get_or_create(&ClosedLabels { reason }).get())
    .sum()
}

/// A `tracing` writer that keeps what was logged, for waiting on a log line.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_broken_replacement_keeps_the_old_certificate_until_it_is_whole() {
    use tracing::instrument::WithSubscriber as _;
    let dir = tempfile::tempdir().unwrap();
    let ca = ca();
    let first = write_serving(&ca, dir.path(), 1);
    let files = cert_files(dir.path());
    let store = CertStore::new(files.load().unwrap());
    assert_eq!(store.leaf().as_deref(), Some(first.as_ref()));
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tokio::spawn(
        files
            .watch(store.clone(), Duration::from_millis(50))
            .with_subscriber(subscriber),
    );
    // The watcher takes the files as it first reads them for the current pair, so it must have
    // read them before they break: on this single-threaded runtime, yielding runs it up to its
    // first wait. (Had it not run, the broken pair would be its "current" one, and the wait for
    // its refusal below would fail rather than pass.)
    tokio::task::yield_now().await;

    // A new pair whose key is half-written, as a copy that is still under way leaves it.
    let (cert, key, second) = serving_pair(&ca, 2);
    install(dir.path(), 2, &cert, &key.as_bytes()[..key.len() / 2]);
    assert!(
        common::eventually(Duration::from_secs(10), || log
            .text()
            .contains("still serving the old one"))
        .await,
        "the watcher never refused the broken pair; it logged: {}",
        log.text()
    );
    assert_eq!(
        store.leaf().as_deref(),
        Some(first.as_ref()),
        "a broken pair replaced the certificate"
    );

    // Once the key is whole, the watcher takes the pair.
    std::fs::write(dir.path().join("..2/tls.key"), &key).unwrap();
    assert!(
        common::eventually(Duration::from_secs(10), || store.leaf().as_deref()
            == Some(second.as_ref()))
        .await,
        "the repaired pair was never served; the watcher logged: {}",
        log.text()
    );
}

#[tokio::test]
async fn idle_and_slow_clients_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let ca = ca();
    write_serving(&ca, dir.path(), 1);
    let files = cert_files(dir.path());
    let store = CertStore::new(files.load().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits {
        handshake: Duration::from_millis(300),
        idle: Duration::from_millis(300),
        ..common::limits()
    };
    let app = router(Arc::new(AppState::new(common::cluster())));
    let closed = ConnectionsClosed::default();
    tokio::spawn(serve(
        listener,
        server_config(store).unwrap(),
        app,
        limits,
        Health::default(),
        closed.clone(),
        std::future::pending(),
    ));
    let count = |reason| closed.get_or_create(&ClosedLabels { reason }).get();

    // A client that never starts the handshake is closed after the handshake timeout.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(3), silent.read(&mut buf))
        .await
        .expect("closed in time");
    assert!(matches!(n, Ok(0) | Err(_)));
    assert_eq!(
        count("handshake_timeout"),
        1,
        "closed as a handshake timeout"
    );

    // A kept-alive connection that sends nothing after its request is closed after the idle
    // timeout.
    let (mut sender, _) = connect(addr, &ca.der).await;
    assert_eq!(healthz(&mut sender).await, Ok(200));
    assert_eq!(
        count("idle_timeout"),
        0,
        "closed while a request was served"
    );
    assert!(
        common::eventually(Duration::from_secs(5), || count("idle_timeout") == 1).await,
        "the idle connection was never closed"
    );
    assert!(
        healthz(&mut sender).await.is_err(),
        "an idle kept-alive connection must be closed"
    );
    let _ = silent.shutdown().await;
}
