//! Prometheus metrics: reviews by kind, operation and result, and review latency.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub kind: String,
    pub endpoint: &'static str,
    pub operation: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
    pub endpoint: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub reviews: Family<ReviewLabels, Counter>,
    pub duration: Family<KindLabels, Histogram>,
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
        Self {
            registry,
            reviews,
            duration,
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
