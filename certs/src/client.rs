//! The apiserver's client certificate for calling webhooks, and the CA that signs it: what a
//! cluster's AdmissionConfiguration kubeconfig hands the apiserver, so that the webhook can tell
//! the apiserver's admission reviews from anyone else's (the webhook's `--apiserver-client-ca`).
use std::fmt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose,
};
use x509_parser::extensions::GeneralName;

use crate::ca::new_ca;
use crate::pem::{cert_der, invalid, key_matches, parse_cert, sign_leaf};
use crate::renewal::{ca_needs_renewal, less_than_a_third_left};
use crate::storage::{read_pair, write_atomic, CA_CERT_FILE, CA_KEY_FILE};
use crate::{Error, Pem, Result};

/// Common name of the client CA.
pub const CLIENT_CA_COMMON_NAME: &str = "kubesteer-apiserver-client-ca";
/// The client certificate's file beside `ca.crt` and `ca.key` in [`ensure_client_dir`]'s directory.
pub const CLIENT_CERT_FILE: &str = "client.crt";
/// See [`CLIENT_CERT_FILE`].
pub const CLIENT_KEY_FILE: &str = "client.key";

/// The names a client certificate carries: its common name and its DNS names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientIdentity {
    pub common_name: Option<String>,
    pub dns_names: Vec<String>,
}

impl ClientIdentity {
    /// The names of the DER certificate `der` (which the TLS stack has verified already).
    pub fn of(der: &[u8]) -> Result<Self> {
        let der = rustls_pki_types::CertificateDer::from(der);
        let cert = parse_cert(&der).map_err(|e| invalid("client certificate", e))?;
        let common_name = match cert.subject().iter_common_name().next() {
            Some(cn) => Some(
                cn.as_str()
                    .map_err(|e| invalid("client certificate common name", e))?
                    .to_string(),
            ),
            None => None,
        };
        let san = cert
            .subject_alternative_name()
            .map_err(|e| invalid("client certificate subjectAltName", e))?;
        let dns_names = san
            .iter()
            .flat_map(|san| &san.value.general_names)
            .filter_map(|name| match name {
                GeneralName::DNSName(name) => Some(name.to_string()),
                _ => None,
            })
            .collect();
        Ok(Self {
            common_name,
            dns_names,
        })
    }

    /// Whether the common name or one of the DNS names is among `names`.
    pub fn is_one_of(&self, names: &[String]) -> bool {
        self.common_name
            .iter()
            .chain(&self.dns_names)
            .any(|n| names.contains(n))
    }
}

impl fmt::Display for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.common_name {
            Some(cn) => write!(f, "CN={cn}")?,
            None => f.write_str("(no CN)")?,
        }
        if !self.dns_names.is_empty() {
            write!(f, " DNS={}", self.dns_names.join(","))?;
        }
        Ok(())
    }
}

/// A new ECDSA P-256 certificate named `name` (its common name) for TLS client authentication
/// only, signed by `ca`, valid for `validity` or until the CA expires, whichever is sooner.
pub fn issue_client(ca: &Pem, name: &str, validity: Duration) -> Result<Pem> {
    if name.is_empty() {
        return Err(invalid("client name", "must not be empty"));
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    sign_leaf(ca, params, validity, "client certificate validity")
}

/// What [`ensure_client_dir`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientOutcome {
    /// A new CA and client certificate were written.
    Created,
    /// Both were left as they were.
    Kept,
    /// The CA was kept and signed a new client certificate.
    Renewed,
}

impl fmt::Display for ClientOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientOutcome::Created => "created",
            ClientOutcome::Kept => "kept",
            ClientOutcome::Renewed => "renewed",
        })
    }
}

/// Makes `dir` hold a client CA (`ca.crt`, `ca.key`) and a client certificate for `name`
/// (`client.crt`, `client.key`). A healthy CA is kept, so the webhooks that trust it need no
/// change; the certificate is issued again when it is unusable, named otherwise, not signed by
/// the CA, or has less than a third of its life left.
pub fn ensure_client_dir(
    dir: &Path,
    name: &str,
    ca_validity: Duration,
    validity: Duration,
    now: SystemTime,
) -> Result<ClientOutcome> {
    let ca = read_pair(dir, CA_CERT_FILE, CA_KEY_FILE)?.filter(|ca| !ca_needs_renewal(ca, now));
    let (ca, outcome) = match ca {
        Some(ca) => {
            let client = read_pair(dir, CLIENT_CERT_FILE, CLIENT_KEY_FILE)?;
            if client.is_some_and(|client| current(&ca, &client, name, now)) {
                return Ok(ClientOutcome::Kept);
            }
            (ca, ClientOutcome::Renewed)
        }
        None => (
            new_ca(CLIENT_CA_COMMON_NAME, ca_validity)?,
            ClientOutcome::Created,
        ),
    };
    let client = issue_client(&ca, name, validity)?;
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    // Keys go first so that a reader never pairs a new certificate with an old key for long.
    write_atomic(&dir.join(CA_KEY_FILE), &ca.key, true)?;
    write_atomic(&dir.join(CA_CERT_FILE), &ca.cert, false)?;
    write_atomic(&dir.join(CLIENT_KEY_FILE), &client.key, true)?;
    write_atomic(&dir.join(CLIENT_CERT_FILE), &client.cert, false)?;
    Ok(outcome)
}

/// Whether `client` is a usable certificate for `name` from `ca` with more than a third left.
fn current(ca: &Pem, client: &Pem, name: &str, now: SystemTime) -> bool {
    let check = || -> Result<bool, String> {
        let ca_der = cert_der(&ca.cert)?;
        let ca = parse_cert(&ca_der)?;
        let der = cert_der(&client.cert)?;
        let cert = parse_cert(&der)?;
        key_matches(&cert, &client.key)?;
        let named = ClientIdentity::of(&der)
            .map_err(|e| e.to_string())?
            .common_name
            .as_deref()
            == Some(name);
        Ok(named
            && cert.issuer() == ca.subject()
            && cert.verify_signature(Some(ca.public_key())).is_ok()
            && !less_than_a_third_left(&cert, now))
    };
    check().unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use rcgen::KeyPair;

    const NAME: &str = "kube-apiserver";

    #[test]
    fn the_client_certificate_is_for_client_auth_only_and_names_its_holder() {
        let ca = new_ca(CLIENT_CA_COMMON_NAME, 3650 * DAY).unwrap();
        let client = issue_client(&ca, NAME, 365 * DAY).unwrap();
        let der = der(&client);
        let cert = parse_cert(&der).unwrap();
        assert!(!cert.is_ca());
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        assert_eq!(
            cert.issuer().to_string(),
            format!("CN={CLIENT_CA_COMMON_NAME}")
        );
        let ca_der = cert_der(&ca.cert).unwrap();
        cert.verify_signature(Some(parse_cert(&ca_der).unwrap().public_key()))
            .unwrap();
        let identity = ClientIdentity::of(&der).unwrap();
        assert_eq!(identity.common_name.as_deref(), Some(NAME));
        assert!(identity.dns_names.is_empty());
        assert_eq!(identity.to_string(), "CN=kube-apiserver");
        assert!(identity.is_one_of(&["other".into(), NAME.into()]));
        assert!(!identity.is_one_of(&["kube-apiserver-x".into()]));
        assert!(!identity.is_one_of(&[]));
        assert!(issue_client(&ca, "", DAY).is_err());
    }

    #[test]
    fn the_identity_counts_dns_names_and_refuses_garbage() {
        let mut params = CertificateParams::new(vec!["apiserver.example".to_string()]).unwrap();
        params.distinguished_name = DistinguishedName::new();
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let identity = ClientIdentity::of(cert.der()).unwrap();
        assert_eq!(identity.common_name, None);
        assert_eq!(identity.dns_names, ["apiserver.example"]);
        assert!(identity.is_one_of(&["apiserver.example".into()]));
        assert_eq!(identity.to_string(), "(no CN) DNS=apiserver.example");
        let err = ClientIdentity::of(b"not a certificate").unwrap_err();
        assert!(err.to_string().contains("client certificate"), "{err}");
    }

    #[test]
    fn ensure_client_dir_keeps_a_healthy_ca_and_renews_the_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("client");
        let read = |f: &str| std::fs::read(out.join(f)).unwrap();
        let ensure = |name: &str, now| ensure_client_dir(&out, name, 3650 * DAY, 365 * DAY, now);
        let now = SystemTime::now();
        assert_eq!(ensure(NAME, now).unwrap(), ClientOutcome::Created);
        let (ca, client) = (read(CA_CERT_FILE), read(CLIENT_CERT_FILE));
        assert_eq!(ensure(NAME, now).unwrap(), ClientOutcome::Kept);
        assert_eq!(read(CLIENT_CERT_FILE), client);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |f: &str| out.join(f).metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(CA_KEY_FILE), 0o600);
            assert_eq!(mode(CLIENT_KEY_FILE), 0o600);
            assert_eq!(mode(CLIENT_CERT_FILE), 0o644);
        }
        // Another name, an expiring certificate, a missing key: a new certificate, the same CA.
        assert_eq!(ensure("other", now).unwrap(), ClientOutcome::Renewed);
        assert_eq!(read(CA_CERT_FILE), ca);
        assert_eq!(
            ensure(NAME, now + 300 * DAY).unwrap(),
            ClientOutcome::Renewed
        );
        std::fs::remove_file(out.join(CLIENT_KEY_FILE)).unwrap();
        assert_eq!(ensure(NAME, now).unwrap(), ClientOutcome::Renewed);
        assert_eq!(read(CA_CERT_FILE), ca);
        assert_ne!(read(CLIENT_CERT_FILE), client);
        // A CA with less than a third left is replaced, and the certificate with it.
        assert_eq!(
            ensure(NAME, now + 7 * 365 * DAY).unwrap(),
            ClientOutcome::Created
        );
        assert_ne!(read(CA_CERT_FILE), ca);
    }
}
