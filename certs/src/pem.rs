//! Certificates and keys as PEM text, and reading them back.
use std::fmt;
use std::time::Duration;

use rcgen::{CertificateParams, IsCa, KeyPair, PKCS_ECDSA_P256_SHA256};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::CertificateDer;
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;

use crate::{Error, Result};

// Backdating tolerates nodes and apiservers whose clocks run a little behind ours.
pub(crate) const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// A certificate and its private key, as PEM text.
#[derive(Clone, PartialEq, Eq)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

// Keeps private keys out of logs and panic messages.
impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pem")
            .field("cert", &self.cert)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// The CA and the serving certificate it signed.
#[derive(Clone, Debug)]
pub struct Bundle {
    pub ca: Pem,
    pub serving: Pem,
}

pub(crate) fn invalid(what: &'static str, reason: impl fmt::Display) -> Error {
    Error::Invalid {
        what,
        reason: reason.to_string(),
    }
}

/// `now` less the clock skew allowance, which is at most a tenth of `validity`: a backdate as
/// long as a short lifetime would make the third-left renewal rule fire at once, forever.
pub(crate) fn backdate(now: OffsetDateTime, validity: Duration) -> Result<OffsetDateTime> {
    before(now, CLOCK_SKEW.min(validity / 10))
}

pub(crate) fn before(now: OffsetDateTime, by: Duration) -> Result<OffsetDateTime> {
    time::Duration::try_from(by)
        .ok()
        .and_then(|by| now.checked_sub(by))
        .ok_or(Error::Validity { what: "clock skew" })
}

pub(crate) fn after(
    now: OffsetDateTime,
    by: Duration,
    what: &'static str,
) -> Result<OffsetDateTime> {
    time::Duration::try_from(by)
        .ok()
        .and_then(|by| now.checked_add(by))
        .ok_or(Error::Validity { what })
}

/// DER of the first CERTIFICATE block in `pem`.
pub(crate) fn cert_der(pem: &str) -> Result<CertificateDer<'static>, String> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("bad PEM: {e}"))
}

pub(crate) fn parse_cert<'a>(der: &'a CertificateDer<'_>) -> Result<X509Certificate<'a>, String> {
    let (rest, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| format!("bad X.509: {e}"))?;
    if !rest.is_empty() {
        return Err("trailing bytes after the certificate".to_string());
    }
    Ok(cert)
}

pub(crate) fn key_matches(cert: &X509Certificate<'_>, key_pem: &str) -> Result<(), String> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| format!("bad private key: {e}"))?;
    if key.public_key_raw() != cert.public_key().subject_public_key.data.as_ref() {
        return Err("private key does not match the certificate".to_string());
    }
    Ok(())
}

/// The issuer of certificates signed by `ca`, and the CA's notAfter, which no certificate it
/// signs outlives.
pub(crate) fn issuer_of(
    ca: &crate::Pem,
) -> Result<(rcgen::Issuer<'static, KeyPair>, OffsetDateTime)> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(|e| invalid("CA key", e))?;
    let ca_der = cert_der(&ca.cert).map_err(|e| invalid("CA certificate", e))?;
    let ca_not_after = {
        let ca_cert = parse_cert(&ca_der).map_err(|e| invalid("CA certificate", e))?;
        OffsetDateTime::from_unix_timestamp(ca_cert.validity().not_after.timestamp())
            .map_err(|e| invalid("CA certificate", e))?
    };
    let issuer = rcgen::Issuer::from_ca_cert_der(&ca_der, ca_key)?;
    Ok((issuer, ca_not_after))
}

/// A new ECDSA P-256 leaf certificate with `params`' names and usages, signed by `ca`, valid for
/// `validity` (`what` in errors) or until the CA expires, whichever is sooner: a leaf that
/// outlived its CA would fail verification before check() noticed.
pub(crate) fn sign_leaf(
    ca: &Pem,
    mut params: CertificateParams,
    validity: Duration,
    what: &'static str,
) -> Result<Pem> {
    let (issuer, ca_not_after) = issuer_of(ca)?;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.use_authority_key_identifier_extension = true;
    let now = OffsetDateTime::now_utc();
    params.not_after = after(now, validity, what)?.min(ca_not_after);
    let lifetime = Duration::try_from(params.not_after - now).unwrap_or_default();
    params.not_before = backdate(now, lifetime)?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}
