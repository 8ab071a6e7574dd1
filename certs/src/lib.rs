//! kubesteer's CA and webhook serving certificates: generation, renewal checks,
//! on-disk layout and the rustls server configuration that serves them.

#![forbid(unsafe_code)]
#![deny(warnings, rust_2018_idioms)]

use std::collections::BTreeSet;
use std::fmt;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, PKCS_ECDSA_P256_SHA256,
};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, DnsName, PrivateKeyDer};
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

pub mod probe;
pub mod trust;

pub use trust::Trust;

/// Common name of the CA; the webhook's caBundle names it.
pub const CA_COMMON_NAME: &str = "kubesteer-ca";

// A CA outlives many serving certificates so the caBundle in the webhook configuration rarely changes.
const DEFAULT_CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
// One year keeps a leaked serving key short-lived while renewals stay rare.
const DEFAULT_SERVING_VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);
// Backdating tolerates nodes and apiservers whose clocks run a little behind ours.
const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// File names inside the directory written by [`write_dir`], as in a `kubernetes.io/tls` Secret.
pub const CA_CERT_FILE: &str = "ca.crt";
/// See [`CA_CERT_FILE`].
pub const CA_KEY_FILE: &str = "ca.key";
/// See [`CA_CERT_FILE`].
pub const SERVING_CERT_FILE: &str = "tls.crt";
/// See [`CA_CERT_FILE`].
pub const SERVING_KEY_FILE: &str = "tls.key";

/// Everything that can go wrong while making, reading or writing certificates.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),

    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },

    #[error("{what} is too long to represent as a certificate date")]
    Validity { what: &'static str },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("TLS configuration failed: {0}")]
    Tls(#[from] rustls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to put in the certificates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Name of the Service in front of the webhook.
    pub service: String,
    /// Namespace of that Service.
    pub namespace: String,
    /// Extra DNS names, after the in-cluster ones.
    pub dns: Vec<String>,
    /// IP address SANs, for a webhook reached by address (local runs).
    pub ips: Vec<IpAddr>,
    /// Lifetime of a new CA.
    pub ca_validity: Duration,
    /// Lifetime of a new serving certificate.
    pub serving_validity: Duration,
}

impl Options {
    pub fn new(service: &str, namespace: &str) -> Self {
        Self {
            service: service.to_string(),
            namespace: namespace.to_string(),
            dns: Vec::new(),
            ips: Vec::new(),
            ca_validity: DEFAULT_CA_VALIDITY,
            serving_validity: DEFAULT_SERVING_VALIDITY,
        }
    }

    /// Every name the apiserver may use for the Service, then the extra names; no duplicates.
    pub fn dns_names(&self) -> Vec<String> {
        let (svc, ns) = (&self.service, &self.namespace);
        let cluster = [
            svc.clone(),
            format!("{svc}.{ns}"),
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
        ];
        let mut names: Vec<String> = Vec::new();
        for name in cluster.into_iter().chain(self.dns.iter().cloned()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// The serving certificate's common name, which is also the name the apiserver dials.
    pub fn common_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }
}

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

/// Whether the serving certificate must be issued again, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    NotNeeded,
    Expiring,
    SansChanged,
    WrongCa,
    Unreadable(String),
}

impl Renewal {
    pub fn is_needed(&self) -> bool {
        *self != Renewal::NotNeeded
    }
}

impl fmt::Display for Renewal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Renewal::NotNeeded => f.write_str("serving certificate is current"),
            Renewal::Expiring => f.write_str("serving certificate expires soon"),
            Renewal::SansChanged => f.write_str("serving certificate names changed"),
            Renewal::WrongCa => f.write_str("serving certificate was not signed by the CA"),
            Renewal::Unreadable(why) => write!(f, "serving certificate unreadable: {why}"),
        }
    }
}

/// What [`ensure_dir`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new CA and serving certificate were written.
    Created,
    /// The existing CA and serving certificate were left as they were.
    Kept,
    /// The existing CA signed a new serving certificate.
    Renewed(Renewal),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Created => f.write_str("created"),
            Outcome::Kept => f.write_str("kept"),
            Outcome::Renewed(why) => write!(f, "renewed: {why}"),
        }
    }
}

/// A new self-signed ECDSA P-256 CA that may sign leaf certificates only.
pub fn generate_ca(opts: &Options) -> Result<Pem> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = backdate(now, opts.ca_validity)?;
    params.not_after = after(now, opts.ca_validity, "CA validity")?;
    let cert = params.self_signed(&key)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A new ECDSA P-256 serving certificate for the webhook Service, signed by `ca`.
pub fn issue_serving(ca: &Pem, opts: &Options) -> Result<Pem> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(|e| invalid("CA key", e))?;
    let ca_der = cert_der(&ca.cert).map_err(|e| invalid("CA certificate", e))?;
    let ca_not_after = {
        let ca_cert = parse_cert(&ca_der).map_err(|e| invalid("CA certificate", e))?;
        OffsetDateTime::from_unix_timestamp(ca_cert.validity().not_after.timestamp())
            .map_err(|e| invalid("CA certificate", e))?
    };
    let issuer = Issuer::from_ca_cert_der(&ca_der, ca_key)?;

    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, opts.common_name());
    params.subject_alt_names = opts
        .dns_names()
        .into_iter()
        .map(|name| {
            // rcgen takes any IA5 string; clients reject a certificate with a malformed name.
            DnsName::try_from(name.as_str())
                .map_err(|e| invalid("DNS name", format!("{name:?}: {e}")))?;
            Ok(SanType::DnsName(name.try_into()?))
        })
        .chain(opts.ips.iter().map(|ip| Ok(SanType::IpAddress(*ip))))
        .collect::<Result<_>>()?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let now = OffsetDateTime::now_utc();
    // A leaf that outlives its CA would fail verification before check() noticed.
    params.not_after = after(now, opts.serving_validity, "serving validity")?.min(ca_not_after);
    let lifetime = Duration::try_from(params.not_after - now).unwrap_or_default();
    params.not_before = backdate(now, lifetime)?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A new CA and a serving certificate signed by it.
pub fn generate(opts: &Options) -> Result<Bundle> {
    let ca = generate_ca(opts)?;
    let serving = issue_serving(&ca, opts)?;
    Ok(Bundle { ca, serving })
}

/// Whether `bundle.serving` must be issued again for `opts` at `now`.
pub fn check(bundle: &Bundle, opts: &Options, now: SystemTime) -> Renewal {
    match check_serving(bundle, opts, now) {
        Ok(renewal) => renewal,
        Err(why) => Renewal::Unreadable(why),
    }
}

fn check_serving(bundle: &Bundle, opts: &Options, now: SystemTime) -> Result<Renewal, String> {
    let ca_der = cert_der(&bundle.ca.cert).map_err(|e| format!("CA certificate: {e}"))?;
    let ca = parse_cert(&ca_der).map_err(|e| format!("CA certificate: {e}"))?;
    let der = cert_der(&bundle.serving.cert)?;
    let serving = parse_cert(&der)?;
    key_matches(&serving, &bundle.serving.key)?;

    if serving.issuer() != ca.subject() || serving.verify_signature(Some(ca.public_key())).is_err()
    {
        return Ok(Renewal::WrongCa);
    }

    let (dns, ips) = sans(&serving)?;
    let wanted_dns: BTreeSet<String> = opts.dns_names().into_iter().collect();
    let wanted_ips: BTreeSet<IpAddr> = opts.ips.iter().copied().collect();
    if dns != wanted_dns || ips != wanted_ips {
        return Ok(Renewal::SansChanged);
    }

    if less_than_a_third_left(&serving, now) {
        return Ok(Renewal::Expiring);
    }
    Ok(Renewal::NotNeeded)
}

/// Whether the CA must be replaced: less than a third of its life left, or unusable.
pub fn ca_needs_renewal(ca: &Pem, now: SystemTime) -> bool {
    let usable = || -> Result<bool, String> {
        let der = cert_der(&ca.cert)?;
        let cert = parse_cert(&der)?;
        key_matches(&cert, &ca.key)?;
        Ok(cert.is_ca() && !less_than_a_third_left(&cert, now))
    };
    !matches!(usable(), Ok(true))
}

/// Writes the bundle as `ca.crt`, `ca.key`, `tls.crt` and `tls.key`, each replaced atomically.
pub fn write_dir(bundle: &Bundle, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    // Keys go first so that a reader never pairs a new certificate with an old key for long.
    write_atomic(&dir.join(CA_KEY_FILE), &bundle.ca.key, true)?;
    write_atomic(&dir.join(CA_CERT_FILE), &bundle.ca.cert, false)?;
    write_atomic(&dir.join(SERVING_KEY_FILE), &bundle.serving.key, true)?;
    write_atomic(&dir.join(SERVING_CERT_FILE), &bundle.serving.cert, false)?;
    Ok(())
}

/// Reads what [`write_dir`] wrote; `None` when any of the four files is absent.
pub fn read_dir(dir: &Path) -> Result<Option<Bundle>> {
    let (Some(ca), Some(serving)) = (
        read_pair(dir, CA_CERT_FILE, CA_KEY_FILE)?,
        read_pair(dir, SERVING_CERT_FILE, SERVING_KEY_FILE)?,
    ) else {
        return Ok(None);
    };
    Ok(Some(Bundle { ca, serving }))
}

/// Decides what a holder of `ca` and `serving` (either possibly absent) should hold now: a
/// healthy CA is kept so the caBundle stays stable, and the serving certificate is reissued
/// only when [`check`] says so. The Outcome says whether anything changed.
pub fn renew(
    ca: Option<Pem>,
    serving: Option<Pem>,
    opts: &Options,
    now: SystemTime,
) -> Result<(Bundle, Outcome)> {
    let Some(ca) = ca.filter(|ca| !ca_needs_renewal(ca, now)) else {
        return Ok((generate(opts)?, Outcome::Created));
    };
    let renewal = match serving {
        Some(serving) => {
            let bundle = Bundle {
                ca: ca.clone(),
                serving,
            };
            match check(&bundle, opts, now) {
                Renewal::NotNeeded => return Ok((bundle, Outcome::Kept)),
                needed => needed,
            }
        }
        None => Renewal::Unreadable(format!(
            "{SERVING_CERT_FILE} or {SERVING_KEY_FILE} is missing"
        )),
    };
    let serving = issue_serving(&ca, opts)?;
    Ok((Bundle { ca, serving }, Outcome::Renewed(renewal)))
}

/// Makes `dir` hold a usable bundle for `opts`, keeping a healthy CA so the caBundle stays stable.
pub fn ensure_dir(dir: &Path, opts: &Options, now: SystemTime) -> Result<Outcome> {
    let ca = read_pair(dir, CA_CERT_FILE, CA_KEY_FILE)?;
    let serving = read_pair(dir, SERVING_CERT_FILE, SERVING_KEY_FILE)?;
    let (bundle, outcome) = renew(ca, serving, opts, now)?;
    if outcome != Outcome::Kept {
        write_dir(&bundle, dir)?;
    }
    Ok(outcome)
}

/// A rustls server configuration (ring, TLS 1.2 and 1.3, ALPN http/1.1) serving `serving`.
pub fn server_config(serving: &Pem) -> Result<rustls::ServerConfig> {
    let chain = CertificateDer::pem_slice_iter(serving.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("serving certificate", e))?;
    if chain.is_empty() {
        return Err(invalid("serving certificate", "no CERTIFICATE block"));
    }
    let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes())
        .map_err(|e| invalid("serving key", e))?;
    // An explicit provider keeps this independent of the process-wide default.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Parses "250ms", "10s", "2m", "8760h" or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 10s or 2m"))?;
    let seconds = |factor: u64| {
        n.checked_mul(factor)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{s:?} is too long"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => seconds(60),
        "h" => seconds(3600),
        _ => Err(format!("{s:?}: unknown unit {unit:?}; use ms, s, m or h")),
    }
}

fn invalid(what: &'static str, reason: impl fmt::Display) -> Error {
    Error::Invalid {
        what,
        reason: reason.to_string(),
    }
}

/// `now` less the clock skew allowance, which is at most a tenth of `validity`: a backdate as
/// long as a short lifetime would make the third-left renewal rule fire at once, forever.
fn backdate(now: OffsetDateTime, validity: Duration) -> Result<OffsetDateTime> {
    before(now, CLOCK_SKEW.min(validity / 10))
}

fn before(now: OffsetDateTime, by: Duration) -> Result<OffsetDateTime> {
    time::Duration::try_from(by)
        .ok()
        .and_then(|by| now.checked_sub(by))
        .ok_or(Error::Validity { what: "clock skew" })
}

fn after(now: OffsetDateTime, by: Duration, what: &'static str) -> Result<OffsetDateTime> {
    time::Duration::try_from(by)
        .ok()
        .and_then(|by| now.checked_add(by))
        .ok_or(Error::Validity { what })
}

/// DER of the first CERTIFICATE block in `pem`.
fn cert_der(pem: &str) -> Result<CertificateDer<'static>, String> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("bad PEM: {e}"))
}

fn parse_cert<'a>(der: &'a CertificateDer<'_>) -> Result<X509Certificate<'a>, String> {
    let (rest, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| format!("bad X.509: {e}"))?;
    if !rest.is_empty() {
        return Err("trailing bytes after the certificate".to_string());
    }
    Ok(cert)
}

fn key_matches(cert: &X509Certificate<'_>, key_pem: &str) -> Result<(), String> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| format!("bad private key: {e}"))?;
    if key.public_key_raw() != cert.public_key().subject_public_key.data.as_ref() {
        return Err("private key does not match the certificate".to_string());
    }
    Ok(())
}

fn less_than_a_third_left(cert: &X509Certificate<'_>, now: SystemTime) -> bool {
    let validity = cert.validity();
    let not_before = validity.not_before.timestamp();
    let not_after = validity.not_after.timestamp();
    let now = match now.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    };
    let lifetime = i128::from(not_after) - i128::from(not_before);
    let left = i128::from(not_after) - i128::from(now);
    left * 3 < lifetime
}

type Sans = (BTreeSet<String>, BTreeSet<IpAddr>);

fn sans(cert: &X509Certificate<'_>) -> Result<Sans, String> {
    let mut dns = BTreeSet::new();
    let mut ips = BTreeSet::new();
    let Some(san) = cert
        .subject_alternative_name()
        .map_err(|e| format!("bad subjectAltName: {e}"))?
    else {
        return Ok((dns, ips));
    };
    for name in &san.value.general_names {
        match name {
            GeneralName::DNSName(name) => {
                dns.insert(name.to_string());
            }
            GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes).map(IpAddr::from).ok(),
                    16 => <[u8; 16]>::try_from(*bytes).map(IpAddr::from).ok(),
                    _ => None,
                };
                ips.insert(ip.ok_or_else(|| format!("bad IP SAN {bytes:?}"))?);
            }
            // Other name kinds are never issued here; a certificate holding one differs from what we want.
            _ => {
                dns.insert(format!("{name}"));
            }
        }
    }
    Ok((dns, ips))
}

fn read_pair(dir: &Path, cert_file: &str, key_file: &str) -> Result<Option<Pem>> {
    let (Some(cert), Some(key)) = (
        read_optional(&dir.join(cert_file))?,
        read_optional(&dir.join(key_file))?,
    ) else {
        return Ok(None);
    };
    Ok(Some(Pem { cert, key }))
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write_atomic(path: &Path, contents: &str, secret: bool) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    // A leftover temp file from a crashed run could carry wider permissions; create_new sets ours.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, if secret { 0o600 } else { 0o644 });
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(&tmp).map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_lived_ca_is_kept_until_a_third_of_it_is_left() {
        let mut opts = Options::new("kubesteer-webhook", "kubesteer-system");
        opts.ca_validity = Duration::from_secs(90);
        let bundle = generate(&opts).unwrap();
        let now = SystemTime::now();
        let (_, fresh) = renew(
            Some(bundle.ca.clone()),
            Some(bundle.serving.clone()),
            &opts,
            now,
        )
        .unwrap();
        assert_eq!(
            fresh,
            Outcome::Kept,
            "a fresh 90 s CA must not be replaced at once"
        );
        let later = now + Duration::from_secs(70);
        let (_, due) = renew(Some(bundle.ca), Some(bundle.serving), &opts, later).unwrap();
        assert_eq!(
            due,
            Outcome::Created,
            "with less than a third left it is replaced"
        );
    }
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, Connection, RootCertStore, ServerConnection};
    use x509_parser::extensions::{BasicConstraints as X509BasicConstraints, KeyUsage};

    const HOUR: Duration = Duration::from_secs(60 * 60);
    const DAY: Duration = Duration::from_secs(24 * 60 * 60);

    fn opts() -> Options {
        Options::new("kubesteer-webhook", "kubesteer-system")
    }

    fn der(pem: &Pem) -> CertificateDer<'static> {
        cert_der(&pem.cert).unwrap()
    }

    fn unix_now() -> i64 {
        OffsetDateTime::now_utc().unix_timestamp()
    }

    fn basic_constraints(cert: &X509Certificate<'_>) -> X509BasicConstraints {
        cert.basic_constraints().unwrap().unwrap().value.clone()
    }

    fn key_usage(cert: &X509Certificate<'_>) -> KeyUsage {
        *cert.key_usage().unwrap().unwrap().value
    }

    #[test]
    fn dns_names_cover_the_service_then_extras_without_duplicates() {
        let mut opts = Options::new("svc", "ns");
        opts.dns = vec![
            "localhost".into(),
            "svc.ns.svc".into(),
            "localhost".into(),
            "webhook.example.com".into(),
        ];
        assert_eq!(
            opts.dns_names(),
            [
                "svc",
                "svc.ns",
                "svc.ns.svc",
                "svc.ns.svc.cluster.local",
                "localhost",
                "webhook.example.com",
            ]
        );
        assert_eq!(opts.common_name(), "svc.ns.svc");
    }

    #[test]
    fn malformed_dns_names_are_refused() {
        for bad in ["bad name!", "", "-.example", "a..b"] {
            let mut opts = opts();
            opts.dns.push(bad.into());
            let ca = generate_ca(&opts).unwrap();
            let err = issue_serving(&ca, &opts).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Invalid {
                        what: "DNS name",
                        ..
                    }
                ),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn defaults_are_ten_years_and_one_year() {
        let opts = opts();
        assert_eq!(opts.ca_validity, 3650 * DAY);
        assert_eq!(opts.serving_validity, 365 * DAY);
        assert!(opts.dns.is_empty() && opts.ips.is_empty());
    }

    #[test]
    fn ca_is_a_constrained_ca() {
        let ca = generate_ca(&opts()).unwrap();
        let der = der(&ca);
        let cert = parse_cert(&der).unwrap();
        assert!(cert.is_ca());
        let constraints = basic_constraints(&cert);
        assert!(constraints.ca);
        assert_eq!(constraints.path_len_constraint, Some(0));
        let usage = key_usage(&cert);
        assert!(usage.key_cert_sign() && usage.crl_sign() && usage.digital_signature());
        assert_eq!(cert.subject().to_string(), "CN=kubesteer-ca");
        assert_eq!(cert.issuer(), cert.subject());
        cert.verify_signature(None).unwrap();
        assert!(ca.key.contains("BEGIN PRIVATE KEY"));
    }

    #[test]
    fn serving_cert_is_a_server_leaf_with_the_wanted_names() {
        let mut opts = opts();
        opts.dns.push("localhost".into());
        opts.ips = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        let bundle = generate(&opts).unwrap();
        let der = der(&bundle.serving);
        let cert = parse_cert(&der).unwrap();
        assert!(!cert.is_ca());
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && !eku.client_auth);
        let usage = key_usage(&cert);
        assert!(usage.digital_signature() && usage.key_encipherment());
        assert!(!usage.key_cert_sign());
        assert_eq!(
            cert.subject().to_string(),
            "CN=kubesteer-webhook.kubesteer-system.svc"
        );
        assert_eq!(cert.issuer().to_string(), "CN=kubesteer-ca");
        let (dns, ips) = sans(&cert).unwrap();
        assert_eq!(dns, opts.dns_names().into_iter().collect());
        assert_eq!(ips, opts.ips.iter().copied().collect());
        assert_eq!(dns.len(), 5);
    }

    #[test]
    fn validity_is_what_was_asked() {
        let mut opts = opts();
        opts.ca_validity = 30 * DAY;
        opts.serving_validity = 7 * DAY;
        let bundle = generate(&opts).unwrap();
        let now = unix_now();
        for (pem, validity) in [(&bundle.ca, 30 * DAY), (&bundle.serving, 7 * DAY)] {
            let der = der(pem);
            let cert = parse_cert(&der).unwrap();
            let not_after = cert.validity().not_after.timestamp();
            let not_before = cert.validity().not_before.timestamp();
            let asked = i64::try_from(validity.as_secs()).unwrap();
            assert!((not_after - now - asked).abs() < 60, "not_after off");
            let skew = i64::try_from(CLOCK_SKEW.as_secs()).unwrap();
            assert!((now - skew - not_before).abs() < 60, "not_before off");
        }
    }

    #[test]
    fn serving_cert_never_outlives_its_ca() {
        let mut opts = opts();
        opts.ca_validity = DAY;
        let bundle = generate(&opts).unwrap();
        let (ca_der, serving_der) = (der(&bundle.ca), der(&bundle.serving));
        let ca = parse_cert(&ca_der).unwrap();
        let serving = parse_cert(&serving_der).unwrap();
        assert_eq!(serving.validity().not_after, ca.validity().not_after);
    }

    #[test]
    fn fresh_bundle_needs_no_renewal() {
        let mut opts = opts();
        opts.ips = vec!["127.0.0.1".parse().unwrap()];
        let bundle = generate(&opts).unwrap();
        assert_eq!(check(&bundle, &opts, SystemTime::now()), Renewal::NotNeeded);
        assert!(!Renewal::NotNeeded.is_needed());
    }

    #[test]
    fn short_lived_cert_is_expiring_past_two_thirds_of_its_life() {
        let mut opts = opts();
        opts.serving_validity = 3 * HOUR;
        let bundle = generate(&opts).unwrap();
        let now = SystemTime::now();
        assert_eq!(check(&bundle, &opts, now + HOUR), Renewal::NotNeeded);
        assert_eq!(
            check(&bundle, &opts, now + 2 * HOUR + HOUR / 2),
            Renewal::Expiring
        );
        assert_eq!(check(&bundle, &opts, now + 4 * HOUR), Renewal::Expiring);
    }

    #[test]
    fn extra_dns_or_ip_changes_the_sans() {
        let opts = opts();
        let bundle = generate(&opts).unwrap();

        let mut more_dns = opts.clone();
        more_dns.dns.push("localhost".into());
        assert_eq!(
            check(&bundle, &more_dns, SystemTime::now()),
            Renewal::SansChanged
        );

        let mut more_ips = opts.clone();
        more_ips.ips.push("10.0.0.1".parse().unwrap());
        assert_eq!(
            check(&bundle, &more_ips, SystemTime::now()),
            Renewal::SansChanged
        );

        let mut other_service = opts.clone();
        other_service.service = "other".into();
        assert_eq!(
            check(&bundle, &other_service, SystemTime::now()),
            Renewal::SansChanged
        );
    }

    #[test]
    fn duplicate_or_reordered_extras_are_the_same_sans() {
        let mut opts = opts();
        opts.dns = vec!["a.example".into(), "b.example".into()];
        let bundle = generate(&opts).unwrap();
        opts.dns = vec!["b.example".into(), "a.example".into(), "a.example".into()];
        assert_eq!(check(&bundle, &opts, SystemTime::now()), Renewal::NotNeeded);
    }

    #[test]
    fn serving_cert_from_another_ca_is_wrong_ca() {
        let opts = opts();
        let bundle = generate(&opts).unwrap();
        let other = generate_ca(&opts).unwrap();
        let mixed = Bundle {
            ca: other,
            serving: bundle.serving,
        };
        assert_eq!(check(&mixed, &opts, SystemTime::now()), Renewal::WrongCa);
    }

    #[test]
    fn garbage_is_unreadable() {
        let opts = opts();
        let good = generate(&opts).unwrap();
        let with = |what: &str, ca: Pem, serving: Pem| (what.to_string(), Bundle { ca, serving });
        let short_der = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let (ca, serving) = (good.ca.clone(), good.serving.clone());
        let cases = [
            with(
                "serving cert",
                ca.clone(),
                Pem {
                    cert: "garbage".into(),
                    ..serving.clone()
                },
            ),
            with(
                "serving key",
                ca.clone(),
                Pem {
                    key: "garbage".into(),
                    ..serving.clone()
                },
            ),
            with(
                "ca cert",
                Pem {
                    cert: String::new(),
                    ..ca.clone()
                },
                serving.clone(),
            ),
            with(
                "other key",
                ca.clone(),
                Pem {
                    key: ca.key.clone(),
                    ..serving.clone()
                },
            ),
            with(
                "bad der",
                ca.clone(),
                Pem {
                    cert: short_der.into(),
                    ..serving
                },
            ),
        ];
        for (what, bundle) in cases {
            assert!(
                matches!(
                    check(&bundle, &opts, SystemTime::now()),
                    Renewal::Unreadable(_)
                ),
                "{what} should be unreadable"
            );
        }
    }

    #[test]
    fn ca_renewal_at_a_third_of_life_or_when_unusable() {
        let mut opts = opts();
        opts.ca_validity = 30 * DAY;
        let ca = generate_ca(&opts).unwrap();
        let now = SystemTime::now();
        assert!(!ca_needs_renewal(&ca, now));
        assert!(!ca_needs_renewal(&ca, now + 19 * DAY));
        assert!(ca_needs_renewal(&ca, now + 21 * DAY));
        let bad_key = Pem {
            key: generate_ca(&opts).unwrap().key,
            ..ca.clone()
        };
        assert!(ca_needs_renewal(&bad_key, now));
        let garbage = Pem {
            cert: "nope".into(),
            ..ca.clone()
        };
        assert!(ca_needs_renewal(&garbage, now));
        let leaf = issue_serving(&ca, &opts).unwrap();
        assert!(ca_needs_renewal(&leaf, now), "a leaf is no CA");
    }

    #[test]
    fn write_dir_and_read_dir_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("certs");
        assert!(read_dir(&out).unwrap().is_none());
        let bundle = generate(&opts()).unwrap();
        write_dir(&bundle, &out).unwrap();
        let read = read_dir(&out).unwrap().unwrap();
        assert_eq!(read.ca, bundle.ca);
        assert_eq!(read.serving, bundle.serving);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |f: &str| out.join(f).metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(CA_KEY_FILE), 0o600);
            assert_eq!(mode(SERVING_KEY_FILE), 0o600);
            assert_eq!(mode(CA_CERT_FILE), 0o644);
        }
        let names: BTreeSet<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["ca.crt", "ca.key", "tls.crt", "tls.key"]
                .map(String::from)
                .into()
        );
        std::fs::remove_file(out.join(SERVING_KEY_FILE)).unwrap();
        assert!(read_dir(&out).unwrap().is_none());
    }

    #[test]
    fn ensure_dir_keeps_a_healthy_ca() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let read = |f: &str| std::fs::read(out.join(f)).unwrap();
        let mut opts = opts();
        let now = SystemTime::now();

        assert_eq!(ensure_dir(out, &opts, now).unwrap(), Outcome::Created);
        let (ca, tls) = (read(CA_CERT_FILE), read(SERVING_CERT_FILE));
        assert_eq!(ensure_dir(out, &opts, now).unwrap(), Outcome::Kept);
        assert_eq!(read(CA_CERT_FILE), ca);
        assert_eq!(read(SERVING_CERT_FILE), tls);

        opts.dns.push("localhost".into());
        assert_eq!(
            ensure_dir(out, &opts, now).unwrap(),
            Outcome::Renewed(Renewal::SansChanged)
        );
        assert_eq!(read(CA_CERT_FILE), ca);
        assert_ne!(read(SERVING_CERT_FILE), tls);

        std::fs::remove_file(out.join(SERVING_CERT_FILE)).unwrap();
        assert!(matches!(
            ensure_dir(out, &opts, now).unwrap(),
            Outcome::Renewed(Renewal::Unreadable(_))
        ));
        assert_eq!(read(CA_CERT_FILE), ca);

        let late = now + 7 * 365 * DAY;
        assert_eq!(ensure_dir(out, &opts, late).unwrap(), Outcome::Created);
        assert_ne!(read(CA_CERT_FILE), ca);
        let bundle = read_dir(out).unwrap().unwrap();
        assert_eq!(check(&bundle, &opts, now), Renewal::NotNeeded);
    }

    #[test]
    fn outcome_and_renewal_read_well() {
        assert_eq!(Outcome::Kept.to_string(), "kept");
        assert_eq!(
            Outcome::Renewed(Renewal::Expiring).to_string(),
            "renewed: serving certificate expires soon"
        );
        let pem = Pem {
            cert: "c".into(),
            key: "secret".into(),
        };
        assert!(!format!("{pem:?}").contains("secret"));
    }

    fn handshake(
        bundle: &Bundle,
        trusted_ca: &Pem,
        name: &str,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Result<Option<Vec<u8>>, rustls::Error> {
        // The process-wide default may already be installed by another test.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = RootCertStore::empty();
        roots.add(der(trusted_ca)).unwrap();
        let mut client_config = ClientConfig::builder_with_protocol_versions(versions)
            .with_root_certificates(roots)
            .with_no_client_auth();
        client_config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from(name.to_string()).unwrap();
        let mut client =
            Connection::from(ClientConnection::new(Arc::new(client_config), name).unwrap());
        let server_config = server_config(&bundle.serving).unwrap();
        let mut server = Connection::from(ServerConnection::new(Arc::new(server_config)).unwrap());

        // A TLS 1.2 or 1.3 handshake needs at most a few flights each way.
        for _ in 0..10 {
            if !client.is_handshaking() && !server.is_handshaking() {
                break;
            }
            pump(&mut client, &mut server)?;
            pump(&mut server, &mut client)?;
        }
        assert!(!client.is_handshaking() && !server.is_handshaking());
        Ok(client.alpn_protocol().map(<[u8]>::to_vec))
    }

    fn pump(from: &mut Connection, to: &mut Connection) -> Result<(), rustls::Error> {
        let mut bytes = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut bytes).unwrap();
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            to.read_tls(&mut rest).unwrap();
            to.process_new_packets()?;
        }
        Ok(())
    }

    #[test]
    fn tls_handshake_succeeds_for_the_service_name_and_ip() {
        let mut opts = opts();
        opts.ips = vec!["127.0.0.1".parse().unwrap()];
        let bundle = generate(&opts).unwrap();
        let all = rustls::DEFAULT_VERSIONS;
        let tls12 = &[&rustls::version::TLS12];
        let alpn = Some(b"http/1.1".to_vec());
        for name in [
            "kubesteer-webhook.kubesteer-system.svc",
            "kubesteer-webhook.kubesteer-system.svc.cluster.local",
            "127.0.0.1",
        ] {
            assert_eq!(
                handshake(&bundle, &bundle.ca, name, all).unwrap(),
                alpn,
                "{name}"
            );
            assert_eq!(
                handshake(&bundle, &bundle.ca, name, tls12).unwrap(),
                alpn,
                "{name}"
            );
        }
    }

    #[test]
    fn tls_handshake_fails_for_unknown_names_and_other_cas() {
        let bundle = generate(&opts()).unwrap();
        let all = rustls::DEFAULT_VERSIONS;
        let service = "kubesteer-webhook.kubesteer-system.svc";
        assert!(handshake(&bundle, &bundle.ca, "example.com", all).is_err());
        assert!(handshake(&bundle, &bundle.ca, "127.0.0.1", all).is_err());
        let other = generate_ca(&opts()).unwrap();
        assert!(handshake(&bundle, &other, service, all).is_err());
    }

    #[test]
    fn server_config_rejects_garbage() {
        let bundle = generate(&opts()).unwrap();
        let no_cert = Pem {
            cert: String::new(),
            ..bundle.serving.clone()
        };
        assert!(server_config(&no_cert).is_err());
        let no_key = Pem {
            key: "nope".into(),
            ..bundle.serving
        };
        assert!(server_config(&no_key).is_err());
    }
}
