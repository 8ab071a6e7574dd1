//! The webhook's serving certificate, signed by the CA, and a rustls configuration serving it.
use std::sync::Arc;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType,
};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, DnsName, PrivateKeyDer};

use crate::pem::{invalid, sign_leaf};
use crate::{generate_ca, Bundle, Options, Pem, Result};

/// A new ECDSA P-256 serving certificate for the webhook Service, signed by `ca`.
pub fn issue_serving(ca: &Pem, opts: &Options) -> Result<Pem> {
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
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    sign_leaf(ca, params, opts.serving_validity, "serving validity")
}

/// A new CA and a serving certificate signed by it.
pub fn generate(opts: &Options) -> Result<Bundle> {
    let ca = generate_ca(opts)?;
    let serving = issue_serving(&ca, opts)?;
    Ok(Bundle { ca, serving })
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
#[cfg(test)]
mod tests {
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, Connection, RootCertStore, ServerConnection};

    use super::*;
    use crate::pem::{parse_cert, CLOCK_SKEW};
    use crate::renewal::sans;
    use crate::testing::*;
    use crate::Error;

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
