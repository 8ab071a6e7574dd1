//! The renewal policy: a certificate is replaced when less than a third of its life is left,
//! when it is unusable, and (the serving certificate) when its names or its CA changed.
use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::time::SystemTime;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use crate::pem::{cert_der, key_matches, parse_cert};
use crate::storage::{SERVING_CERT_FILE, SERVING_KEY_FILE};
use crate::{generate, issue_serving, Bundle, Options, Pem, Result};

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

/// What [`ensure_dir`](crate::storage::ensure_dir) did.
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

pub(crate) fn less_than_a_third_left(cert: &X509Certificate<'_>, now: SystemTime) -> bool {
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

pub(crate) fn sans(cert: &X509Certificate<'_>) -> Result<Sans, String> {
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
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::generate_ca;
    use crate::testing::*;

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
}
