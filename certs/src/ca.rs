//! The CA that signs the webhook's serving certificates.
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256,
};
use time::OffsetDateTime;

use crate::pem::{after, backdate};
use crate::{Options, Pem, Result};

/// Common name of the CA; the webhook's caBundle names it.
pub const CA_COMMON_NAME: &str = "kubesteer-ca";

/// A new self-signed ECDSA P-256 CA that may sign leaf certificates only.
pub fn generate_ca(opts: &Options) -> Result<Pem> {
    new_ca(CA_COMMON_NAME, opts.ca_validity)
}

/// A new self-signed ECDSA P-256 CA named `common_name`, for leaf certificates only.
pub(crate) fn new_ca(common_name: &str, validity: Duration) -> Result<Pem> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = backdate(now, validity)?;
    params.not_after = after(now, validity, "CA validity")?;
    let cert = params.self_signed(&key)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::pem::parse_cert;
    use crate::testing::*;

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
}
