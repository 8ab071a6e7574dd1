//! The CAs the apiserver is told to trust (a webhook's `caBundle`), through a CA rollover.
//!
//! Replacing the CA at once would break every replica still serving a certificate of the old
//! one. So when the CA is replaced, the old CA stays in the bundle beside the new one for an
//! overlap, long enough for every replica to have moved to a certificate of the new CA:
//!
//! 1. the new CA and its serving certificate are stored, the bundle holds new and old;
//! 2. every replica injects that bundle, and serves the new certificate only from its next
//!    round on, once the apiserver has been told to trust the new CA;
//! 3. after the overlap the old CA leaves the bundle.
use std::time::{Duration, SystemTime};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::{Bundle, Outcome, Pem};

/// The trusted CAs, the current one first, and until when the others stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    /// PEM certificates, one per CA, the current CA first.
    pub cas: Vec<String>,
    /// Until when the CAs after the first stay trusted; `None` when there are none.
    pub overlap_until: Option<SystemTime>,
}

impl Trust {
    /// Trust in `ca` alone.
    pub fn only(ca: &Pem) -> Self {
        Self {
            cas: vec![ca.cert.trim().to_string()],
            overlap_until: None,
        }
    }

    /// Reads a stored bundle (concatenated PEM certificates) and its overlap deadline (RFC 3339).
    /// Unreadable parts read as missing: the result is then rebuilt from the current CA.
    pub fn parse(bundle: &str, overlap_until: Option<&str>) -> Option<Self> {
        const END: &str = "-----END CERTIFICATE-----";
        let cas: Vec<String> = bundle
            .split_inclusive(END)
            .map(str::trim)
            .filter(|pem| pem.ends_with(END))
            .map(str::to_string)
            .collect();
        if cas.is_empty() {
            return None;
        }
        let overlap_until = overlap_until
            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
            .map(SystemTime::from);
        Some(Self { cas, overlap_until })
    }

    /// The bundle as stored and injected: the certificates, one after the other.
    pub fn bundle(&self) -> String {
        let mut out = self.cas.join("\n");
        out.push('\n');
        out
    }

    /// The overlap deadline as stored, in RFC 3339.
    pub fn overlap_until_rfc3339(&self) -> Option<String> {
        self.overlap_until
            .and_then(|t| OffsetDateTime::from(t).format(&Rfc3339).ok())
    }

    /// Whether the CA certificate `ca` is in the bundle.
    pub fn trusts(&self, ca: &str) -> bool {
        self.cas.iter().any(|c| c.trim() == ca.trim())
    }

    /// The trust after `renew` turned the stored `old_ca` and `stored` trust into `bundle`.
    ///
    /// A replaced CA that still parses stays trusted for `overlap`; an overlap ends on time;
    /// otherwise the stored trust is kept, with the current CA first.
    pub fn next(
        stored: Option<Trust>,
        old_ca: Option<&Pem>,
        bundle: &Bundle,
        outcome: &Outcome,
        now: SystemTime,
        overlap: Duration,
    ) -> Trust {
        let mut trust = Trust::only(&bundle.ca);
        let replaced = old_ca.filter(|old| {
            *outcome == Outcome::Created
                && old.cert.trim() != bundle.ca.cert.trim()
                && crate::pem::cert_der(&old.cert).is_ok()
        });
        if let Some(old) = replaced {
            trust.cas.push(old.cert.trim().to_string());
            trust.overlap_until = now.checked_add(overlap);
            return trust;
        }
        let Some(stored) = stored else { return trust };
        match stored.overlap_until {
            Some(until) if now < until => {
                trust.cas.extend(
                    stored
                        .cas
                        .into_iter()
                        .filter(|c| c.trim() != bundle.ca.cert.trim()),
                );
                trust.overlap_until = (trust.cas.len() > 1).then_some(until);
                trust
            }
            _ => trust,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{generate, Options};

    const OVERLAP: Duration = Duration::from_secs(180);

    fn bundle() -> Bundle {
        generate(&Options::new("kubesteer-webhook", "kubesteer-system")).unwrap()
    }

    #[test]
    fn a_replaced_ca_stays_trusted_for_the_overlap_then_leaves() {
        let (old, new) = (bundle(), bundle());
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let stored = Some(Trust::only(&old.ca));
        let rolled = Trust::next(stored, Some(&old.ca), &new, &Outcome::Created, t0, OVERLAP);
        assert_eq!(rolled.cas.len(), 2);
        assert!(rolled.cas[0] == new.ca.cert.trim() && rolled.trusts(&old.ca.cert));
        assert_eq!(rolled.overlap_until, Some(t0 + OVERLAP));

        // Stored and read back, it is kept until the deadline...
        let read = Trust::parse(&rolled.bundle(), rolled.overlap_until_rfc3339().as_deref());
        assert_eq!(read.as_ref(), Some(&rolled));
        let later = t0 + OVERLAP - Duration::from_secs(1);
        let kept = Trust::next(
            read.clone(),
            Some(&new.ca),
            &new,
            &Outcome::Kept,
            later,
            OVERLAP,
        );
        assert_eq!(kept, rolled);
        // ...and the old CA leaves at it.
        let after = t0 + OVERLAP;
        let dropped = Trust::next(read, Some(&new.ca), &new, &Outcome::Kept, after, OVERLAP);
        assert_eq!(dropped, Trust::only(&new.ca));
    }

    #[test]
    fn a_first_ca_or_an_unreadable_one_brings_no_overlap() {
        let new = bundle();
        let now = SystemTime::now();
        let first = Trust::next(None, None, &new, &Outcome::Created, now, OVERLAP);
        assert_eq!(first, Trust::only(&new.ca));
        let garbage = Pem {
            cert: "not a certificate".into(),
            key: String::new(),
        };
        let replaced = Trust::next(None, Some(&garbage), &new, &Outcome::Created, now, OVERLAP);
        assert_eq!(replaced, Trust::only(&new.ca));
    }

    #[test]
    fn a_renewed_serving_certificate_keeps_the_stored_trust_and_puts_the_ca_first() {
        let (old, new) = (bundle(), bundle());
        let now = SystemTime::now();
        let stored = Trust {
            cas: vec![old.ca.cert.trim().into(), new.ca.cert.trim().into()],
            overlap_until: Some(now + OVERLAP),
        };
        let renewed = Outcome::Renewed(crate::Renewal::Expiring);
        let next = Trust::next(Some(stored), Some(&new.ca), &new, &renewed, now, OVERLAP);
        assert_eq!(next.cas, [new.ca.cert.trim(), old.ca.cert.trim()]);
    }

    #[test]
    fn an_unreadable_stored_bundle_reads_as_missing() {
        assert_eq!(Trust::parse("garbage", None), None);
        assert_eq!(Trust::parse("", Some("not a time")), None);
    }
}
