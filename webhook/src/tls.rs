//! The serving certificate: loaded from files and swapped in place when they change, so new
//! handshakes get the new certificate while open connections are untouched.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::ring;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

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
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Tls {
            path: "(config)".into(),
            reason: e.to_string(),
        })?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
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
