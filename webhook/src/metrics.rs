//! Prometheus metrics: reviews by kind, operation and result, review latency, connections the
//! server closed on its own, and SubjectAccessReviews sent or refused by their bound.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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
    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
