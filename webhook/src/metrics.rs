//! Prometheus metrics: reviews by kind, operation and result, review latency, connections the
//! server closed on its own, SubjectAccessReviews sent or refused by their bound, and the
//! validity of the serving certificate.
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::tls::CertStore;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub kind: &'static str,
    pub endpoint: &'static str,
    pub operation: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabels {
    /// `handshake_timeout`, `header_timeout`, `idle_timeout`, `address_limit`, `total_limit`
    /// or `all_busy` (the new connection itself); see `server.rs`.
    pub reason: &'static str,
}

/// Connections the server closed on its own, by reason.
pub type ConnectionsClosed = Family<ClosedLabels, Counter>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SarLabels {
    /// `sent`, or `rate_limited` (not sent: over `--subject-access-review-qps`; see
    /// `permissions.rs`). Answers from the cache are not counted.
    pub result: &'static str,
}

impl SarLabels {
    pub const SENT: Self = Self { result: "sent" };
    pub const RATE_LIMITED: Self = Self {
        result: "rate_limited",
    };
}

pub struct Metrics {
    registry: Registry,
    pub reviews: Family<ReviewLabels, Counter>,
    pub duration: Family<KindLabels, Histogram>,
    pub connections_closed: ConnectionsClosed,
    pub subject_access_reviews: Family<SarLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kubesteer_webhook");
        let reviews = Family::<ReviewLabels, Counter>::default();
        // 50 µs to ~1.6 s: local reviews take microseconds, SubjectAccessReviews milliseconds.
        let duration = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00005, 2.0, 16))
        });
        registry.register("reviews", "Admission reviews answered", reviews.clone());
        registry.register(
            "review_duration_seconds",
            "Time to answer an admission review",
            duration.clone(),
        );
        let connections_closed = ConnectionsClosed::default();
        registry.register(
            "connections_closed",
            "Connections the server closed on its own: timeouts, and room made under the connection limits",
            connections_closed.clone(),
        );
        let subject_access_reviews = Family::<SarLabels, Counter>::default();
        registry.register(
            "subject_access_reviews",
            "SubjectAccessReviews sent about reviews' authors, and those refused by the webhook's bound on them",
            subject_access_reviews.clone(),
        );
        Self {
            registry,
            reviews,
            duration,
            connections_closed,
            subject_access_reviews,
        }
    }
}

impl Metrics {
    /// Reports the validity of the certificate `store` serves, read at each scrape (so a
    /// rotated certificate shows at once).
    pub fn serving_certificate(&mut self, store: Arc<CertStore>) {
        self.registry
            .register_collector(Box::new(ServingCertificate(store)));
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// `kubesteer_webhook_serving_certificate_{not_before,expiration}_timestamp_seconds`, from the
/// leaf certificate served now.
#[derive(Debug)]
struct ServingCertificate(Arc<CertStore>);

impl Collector for ServingCertificate {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(der) = self.0.leaf() else {
            return Ok(());
        };
        // The certificate loaded already; one rustls accepted but x509-parser cannot read is
        // left out of the metrics rather than failing the scrape.
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
            return Ok(());
        };
        let validity = cert.validity();
        for (name, help, at) in [
            (
                "serving_certificate_not_before_timestamp_seconds",
                "Start of the serving certificate's validity, in Unix seconds",
                validity.not_before.timestamp(),
            ),
            (
                "serving_certificate_expiration_timestamp_seconds",
                "End of the serving certificate's validity (notAfter), in Unix seconds",
                validity.not_after.timestamp(),
            ),
        ] {
            let gauge = ConstGauge::new(at);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_certificates_validity_is_reported_and_follows_a_rotation() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let issue = |until: (i32, u8, u8)| {
            let mut params = rcgen::CertificateParams::new(vec!["webhook.test".into()]).unwrap();
            params.not_before = rcgen::date_time_ymd(2026, 1, 1);
            params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.self_signed(&key).unwrap();
            crate::tls::certified_key(
                cert.pem().as_bytes(),
                key.serialize_pem().as_bytes(),
                "test",
            )
            .unwrap()
        };
        let store = CertStore::new(issue((2026, 4, 1)));
        let mut metrics = Metrics::default();
        metrics.serving_certificate(store.clone());
        let text = metrics.encode();
        // 2026-01-01 and 2026-04-01.
        assert!(
            text.contains(
                "kubesteer_webhook_serving_certificate_not_before_timestamp_seconds 1767225600\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "kubesteer_webhook_serving_certificate_expiration_timestamp_seconds 1775001600\n"
            ),
            "{text}"
        );
        store.set(issue((2027, 1, 1)));
        assert!(
            metrics.encode().contains(
                "kubesteer_webhook_serving_certificate_expiration_timestamp_seconds 1798761600\n"
            ),
            "{}",
            metrics.encode()
        );
    }
}
