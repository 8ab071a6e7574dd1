//! The serving certificate: loaded from files and swapped in place when they change, so new
//! handshakes get the new certificate while open connections are untouched. Likewise the CA of
//! the apiserver's client certificate, when admission reviews must come from the apiserver.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::ring;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use crate::error::{Error, Result};

/// The certificate every new handshake is answered with.
#[derive(Debug)]
pub struct CertStore {
    current: ArcSwap<CertifiedKey>,
}

impl CertStore {
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Self {
            current: ArcSwap::from_pointee(key),
        })
    }

    /// Makes `key` the certificate of every later handshake.
    pub fn set(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }

    /// The leaf certificate now served, DER-encoded.
    pub fn leaf(&self) -> Option<Vec<u8>> {
        self.current.load().cert.first().map(|c| c.to_vec())
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// Parses a PEM certificate chain and private key into a signing key for rustls.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8], origin: &str) -> Result<CertifiedKey> {
    let tls = |reason: String| Error::Tls {
        path: origin.to_string(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| tls(format!("certificate: {e}")))?;
    if chain.is_empty() {
        return Err(tls("no certificate in PEM".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| tls(format!("private key: {e}")))?;
    let signing = ring::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| tls(format!("private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| tls(format!("certificate and key do not match: {e}")))?;
    Ok(certified)
}

/// A rustls server config on ring, TLS 1.2 and 1.3, HTTP/1.1, answering from `store`.
pub fn server_config(store: Arc<CertStore>) -> Result<Arc<ServerConfig>> {
    config(store, None)
}

/// Like [`server_config`], and asks every client for a certificate from `client_ca`: one from
/// another CA fails the handshake, none at all is let through (for the routes that need none).
pub fn server_config_with_client_ca(
    store: Arc<CertStore>,
    client_ca: Arc<ClientCa>,
) -> Result<Arc<ServerConfig>> {
    config(store, Some(client_ca))
}

fn config(store: Arc<CertStore>, client_ca: Option<Arc<ClientCa>>) -> Result<Arc<ServerConfig>> {
    let builder = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Tls {
            path: "(config)".into(),
            reason: e.to_string(),
        })?;
    let mut config = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(ca),
        None => builder.with_no_client_auth(),
    }
    .with_cert_resolver(store);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The CA(s) whose client certificates are taken as the apiserver's (`--apiserver-client-ca`):
/// a client verifier that is reloaded from its file like the serving certificate, so a mounted
/// ConfigMap can add a new CA beside the old one and later drop the old one, without a restart.
///
/// Every client is asked for a certificate; one that does not chain to these CAs fails the
/// handshake, and a client without one is let in (kubelet probes, scrapers, and the apiserver's
/// CRD conversion calls, which carry no client certificate), for the routes to turn away.
#[derive(Debug)]
pub struct ClientCa {
    path: PathBuf,
    current: ArcSwap<LoadedCa>,
}

#[derive(Debug)]
struct LoadedCa {
    pem: Vec<u8>,
    verifier: Arc<dyn ClientCertVerifier>,
}

impl ClientCa {
    /// Reads the PEM bundle at `path` now; it must hold at least one CA certificate.
    pub fn load(path: PathBuf) -> Result<Arc<Self>> {
        let pem = read(&path)?;
        let verifier = client_verifier(&pem, &path.display().to_string())?;
        Ok(Arc::new(Self {
            path,
            current: ArcSwap::from_pointee(LoadedCa { pem, verifier }),
        }))
    }

    /// Re-reads the file every `interval` and takes up a changed, valid bundle; an unusable one
    /// is skipped with a warning, so the CAs trusted before stay trusted.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.reload() {
                Ok(true) => {
                    tracing::info!(file = %self.path.display(), "apiserver client CA reloaded")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "apiserver client CA file is not usable; still trusting the CAs read before")
                }
            }
        }
    }

    /// Takes up the file if it changed and is usable: whether it did, or why it is unusable.
    fn reload(&self) -> Result<bool> {
        let pem = read(&self.path)?;
        if pem == self.current.load().pem {
            return Ok(false);
        }
        let verifier = client_verifier(&pem, &self.path.display().to_string())?;
        self.current.store(Arc::new(LoadedCa { pem, verifier }));
        Ok(true)
    }

    fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        self.current.load().verifier.clone()
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })
}

fn client_verifier(pem: &[u8], origin: &str) -> Result<Arc<dyn ClientCertVerifier>> {
    let tls = |reason: String| Error::Tls {
        path: origin.to_string(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| tls(format!("CA certificate: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| tls(format!("CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(tls("no CA certificate in PEM".into()));
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(ring::default_provider()))
        .allow_unauthenticated()
        .build()
        .map_err(|e| tls(format!("client verifier: {e}")))
}

impl ClientCertVerifier for ClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    // Hints are optional; without them a client offers its certificate whatever CA issued it
    // and verification decides (client-go sends its configured certificate either way).
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        self.verifier()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}

/// A certificate and key pair of files, as a Secret volume mounts them.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    fn read(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| Error::Read {
                path: p.display().to_string(),
                source,
            })
        };
        Ok((read(&self.cert)?, read(&self.key)?))
    }

    /// Loads the pair now.
    pub fn load(&self) -> Result<CertifiedKey> {
        let (cert, key) = self.read()?;
        certified_key(&cert, &key, &self.cert.display().to_string())
    }

    /// Re-reads the files every `interval` and swaps in a changed, valid pair.
    ///
    /// Reading through the paths (not watching one inode) follows Secret volumes, which replace
    /// the `..data` symlink rather than the files. A half-written or mismatched pair is skipped
    /// and retried, so the old certificate keeps serving. Files are compared with what `store`
    /// serves, not with an earlier read, so a change between [`CertFiles::load`] and the start of
    /// the watch is still taken up.
    pub async fn watch(self, store: Arc<CertStore>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Ok(pair) = self.read() else { continue };
            let leaf = CertificateDer::pem_slice_iter(&pair.0)
                .next()
                .and_then(|c| c.ok());
            if leaf.is_some_and(|leaf| store.leaf().as_deref() == Some(leaf.as_ref())) {
                continue;
            }
            match certified_key(&pair.0, &pair.1, &self.cert.display().to_string()) {
                Ok(key) => {
                    store.set(key);
                    tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "new certificate files are not usable yet; still serving the old one")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unusable_client_ca_file_is_refused_at_start_and_skipped_on_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        for (bad, why) in [
            ("", "no CA certificate"),
            (
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "CA certificate",
            ),
        ] {
            std::fs::write(&path, bad).unwrap();
            let e = ClientCa::load(path.clone()).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("ca.crt"), "{e}");
        }
        assert!(ClientCa::load(dir.path().join("missing.crt")).is_err());

        let ca = kubesteer_certs::generate(&kubesteer_certs::Options::new("s", "n"))
            .unwrap()
            .ca;
        std::fs::write(&path, &ca.cert).unwrap();
        let loaded = ClientCa::load(path.clone()).unwrap();
        assert!(!loaded.reload().unwrap(), "an unchanged file is no reload");
        std::fs::write(&path, "garbage").unwrap();
        assert!(loaded.reload().is_err());
        assert_eq!(loaded.current.load().pem, ca.cert.as_bytes());
        std::fs::remove_file(&path).unwrap();
        assert!(loaded.reload().is_err());
        assert_eq!(loaded.current.load().pem, ca.cert.as_bytes());
        let next = kubesteer_certs::generate(&kubesteer_certs::Options::new("s", "n"))
            .unwrap()
            .ca;
        std::fs::write(&path, format!("{}{}", ca.cert, next.cert)).unwrap();
        assert!(loaded.reload().unwrap());
        assert!(loaded.offer_client_auth() && !loaded.client_auth_mandatory());
    }
}
