//! `--apiserver-client-ca` over real TLS: a review is answered only on a connection whose
//! client certificate the apiserver's client CA signed; probes, /metrics and /convert need none;
//! a certificate of another CA fails the handshake; the CA file is reloaded when it changes.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use kubesteer_certs::{ensure_client_dir, issue_client, Pem};
use kubesteer_runtime::Health;
use kubesteer_webhook::metrics::ConnectionsClosed;
use kubesteer_webhook::server::serve;
use kubesteer_webhook::tls::{server_config_with_client_ca, CertStore, ClientCa};
use kubesteer_webhook::{apiserver_auth, router, AppState};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::common;
use crate::common::client::Sender;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A client CA with a certificate for `kube-apiserver`, as `kubesteer-certs client` writes them.
fn client_dir(dir: &Path) -> (Pem, Pem) {
    ensure_client_dir(dir, "kube-apiserver", 10 * DAY, DAY, SystemTime::now()).unwrap();
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    (
        Pem {
            cert: read("ca.crt"),
            key: read("ca.key"),
        },
        Pem {
            cert: read("client.crt"),
            key: read("client.key"),
        },
    )
}

/// A webhook on 127.0.0.1 that trusts the client CA in `ca_file`, requiring `names`.
async fn start(ca_file: &Path, names: &[&str]) -> (SocketAddr, rustls::RootCertStore) {
    let (key, roots) = common::local_tls();
    let ca = ClientCa::load(ca_file.to_path_buf()).unwrap();
    tokio::spawn(ca.clone().watch(Duration::from_millis(50)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = apiserver_auth::require(
        router(Arc::new(AppState::new(common::cluster()))),
        names.iter().map(|n| n.to_string()).collect(),
    );
    tokio::spawn(serve(
        listener,
        server_config_with_client_ca(CertStore::new(key), ca).unwrap(),
        app,
        common::limits(),
        Health::default(),
        ConnectionsClosed::default(),
        std::future::pending(),
    ));
    (addr, roots)
}

/// A TLS connection to `addr`, presenting `client` when given.
async fn connect(
    addr: SocketAddr,
    roots: &rustls::RootCertStore,
    client: Option<&Pem>,
) -> Result<Sender, String> {
    let builder = common::client::config_builder(roots);
    let config = match client {
        Some(pem) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(pem.cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(pem.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    common::client::connect(addr, &Arc::new(config)).await
}

/// Sends one request (a POST with `body`, or a GET); its status and body, or why there was no
/// answer.
async fn send(
    sender: &mut Sender,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(StatusCode, String), String> {
    let body = (method == "POST").then_some(body.as_slice());
    let reply = common::client::send(sender, path, body).await?;
    let status = StatusCode::from_u16(reply.status).map_err(|e| e.to_string())?;
    Ok((status, reply.body))
}

/// A review as `system:masters` would be forged: the body says so, nothing else does.
fn forged_review() -> Vec<u8> {
    let mut review = common::fixture("scaler-create.json");
    review["request"]["userInfo"] = serde_json::json!({
        "username": "admin", "groups": ["system:masters", "system:authenticated"]
    });
    serde_json::to_vec(&review).unwrap()
}

fn conversion_review() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u-1", "desiredAPIVersion": "kubesteer.io/v1beta1", "objects": []}
    }))
    .unwrap()
}

#[tokio::test]
async fn reviews_need_the_apiserver_certificate_and_probes_metrics_and_conversion_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let (_, apiserver) = client_dir(&dir.path().join("client"));
    let (addr, roots) = start(&dir.path().join("client/ca.crt"), &[]).await;

    let mut anonymous = connect(addr, &roots, None).await.unwrap();
    for path in ["/validate/scalers", "/mutate/scalers", "/validate/nothing"] {
        let (status, body) = send(&mut anonymous, "POST", path, forged_review())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body}");
        assert!(body.contains("--apiserver-client-ca"), "{path}: {body}");
    }
    for path in ["/healthz", "/readyz", "/metrics"] {
        let (status, body) = send(&mut anonymous, "GET", path, Vec::new()).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    let (status, body) = send(&mut anonymous, "POST", "/convert", conversion_review())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "/convert: {body}");
    assert!(body.contains("ConversionReview"), "{body}");

    let mut apiserver = connect(addr, &roots, Some(&apiserver)).await.unwrap();
    for path in ["/validate/scalers", "/mutate/scalers"] {
        let (status, body) = send(&mut apiserver, "POST", path, forged_review())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert!(body.contains("\"allowed\""), "{path}: {body}");
    }
    let (status, _) = send(&mut apiserver, "GET", "/healthz", Vec::new())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_certificate_of_another_ca_fails_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    client_dir(&dir.path().join("client"));
    let (_, stranger) = client_dir(&dir.path().join("other"));
    let (addr, roots) = start(&dir.path().join("client/ca.crt"), &[]).await;
    // In TLS 1.3 the client may finish before the server has judged its certificate; then the
    // server's alert ends the first request instead.
    match connect(addr, &roots, Some(&stranger)).await {
        Err(_) => {}
        Ok(mut sender) => {
            let sent = send(&mut sender, "POST", "/validate/scalers", forged_review()).await;
            assert!(
                sent.is_err(),
                "a stranger's certificate was answered: {sent:?}"
            );
        }
    }
}

#[tokio::test]
async fn names_narrow_the_ca_to_the_apiserver() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, apiserver) = client_dir(&dir.path().join("client"));
    let other = issue_client(&ca, "some-pod", DAY).unwrap();
    let (addr, roots) = start(&dir.path().join("client/ca.crt"), &["kube-apiserver"]).await;

    let mut sender = connect(addr, &roots, Some(&other)).await.unwrap();
    let (status, body) = send(&mut sender, "POST", "/validate/scalers", forged_review())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("CN=some-pod"), "{body}");
    assert!(body.contains("--apiserver-client-names"), "{body}");
    let mut sender = connect(addr, &roots, Some(&apiserver)).await.unwrap();
    let (status, body) = send(&mut sender, "POST", "/validate/scalers", forged_review())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_new_ca_in_the_file_is_trusted_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (old_ca, old) = client_dir(&dir.path().join("client"));
    let (new_ca, new) = client_dir(&dir.path().join("next"));
    let ca_file = dir.path().join("bundle.crt");
    std::fs::write(&ca_file, &old_ca.cert).unwrap();
    let (addr, roots) = start(&ca_file, &[]).await;

    async fn answered(addr: SocketAddr, roots: &rustls::RootCertStore, client: &Pem) -> bool {
        let Ok(mut sender) = connect(addr, roots, Some(client)).await else {
            return false;
        };
        matches!(
            send(&mut sender, "POST", "/validate/scalers", forged_review()).await,
            Ok((StatusCode::OK, _))
        )
    }
    assert!(answered(addr, &roots, &old).await);
    assert!(!answered(addr, &roots, &new).await);
    // The rotation's overlap: both CAs in the file, both certificates answered.
    std::fs::write(&ca_file, format!("{}{}", old_ca.cert, new_ca.cert)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !answered(addr, &roots, &new).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new CA was never taken up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answered(addr, &roots, &old).await);
    // The old CA dropped: its certificate is refused.
    std::fs::write(&ca_file, &new_ca.cert).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while answered(addr, &roots, &old).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the old CA was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answered(addr, &roots, &new).await);
}
