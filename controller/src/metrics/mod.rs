//! Prometheus metrics per kind: reconciles, errors and reconcile duration; and per Scaler
//! ([`ScalerMetrics`]).
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[cfg(doc)]
use crate::scaler::metrics::Parts;
use crate::scaler::metrics::ScalerMetrics;
use crate::Error;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: &'static str,
    error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScalerLabels {
    namespace: String,
    scaler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChildLabels {
    kind: String,
    outcome: &'static str,
}

type HistogramFamily = Family<KindLabel, Histogram, fn() -> Histogram>;

/// The controller's metrics, registered in their own registry.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<KindLabel, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: HistogramFamily,
    children: Family<ChildLabels, Counter>,
    leading: Gauge,
    /// Per Scaler with a recorded author: 1 while stopped because the author lost a right, 0
    /// while they hold the rights.
    forbidden: Family<ScalerLabels, Gauge>,
    /// Written after the registry's, in parts (with 10,000 Scalers the whole is 24 MB).
    scalers: ScalerMetrics,
}

/// The prefix of every metric name (`kubesteer_...`).
pub use kubesteer_runtime::exposition::PREFIX;

// Reconciles take milliseconds; the top buckets catch a slow or throttled apiserver.
const DURATION_BUCKETS: [f64; 9] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let reconciles = Family::<KindLabel, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration: HistogramFamily = Family::new_with_constructor(duration_histogram);
        registry.register(
            "reconciles",
            "Reconciliations started, per kind",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciliations that failed, per kind and error",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time a reconciliation took, per kind",
            duration.clone(),
        );
        let children = Family::<ChildLabels, Counter>::default();
        registry.register(
            "child_checks",
            "Owned objects checked, per kind and outcome: applied (created, or applied because it \
             drifted or changed) or unchanged (nothing written)",
            children.clone(),
        );
        let leading = Gauge::default();
        registry.register(
            "leading",
            "1 while this replica runs the controllers (as the leader, with leader election)",
            leading.clone(),
        );
        let forbidden = Family::<ScalerLabels, Gauge>::default();
        registry.register(
            "scaler_forbidden",
            "1 while a Scaler writes nothing because the author of its spec no longer holds a \
             right the spec needs (Ready=False, reason Forbidden), 0 while they hold them; absent \
             for a Scaler with no recorded author",
            forbidden.clone(),
        );
        let scalers = ScalerMetrics::default();
        Self {
            forbidden,
            registry,
            reconciles,
            errors,
            duration,
            children,
            leading,
            scalers,
        }
    }
}

impl Metrics {
    /// Counts a reconcile of `kind`; the returned guard records its duration when dropped.
    pub fn reconcile(&self, kind: &'static str) -> ReconcileMeasurer {
        self.reconciles.get_or_create(&KindLabel { kind }).inc();
        ReconcileMeasurer {
            start: Instant::now(),
            histogram: self.duration.get_or_create(&KindLabel { kind }).clone(),
        }
    }

    pub fn error(&self, kind: &'static str, error: &Error) {
        self.errors
            .get_or_create(&ErrorLabels {
                kind,
                error: error.metric_label(),
            })
            .inc();
    }

    /// Counts a check of an owned object of `kind`, and whether it took an apply.
    pub fn child(&self, kind: &str, applied: bool) {
        let outcome = if applied { "applied" } else { "unchanged" };
        self.children
            .get_or_create(&ChildLabels {
                kind: kind.to_string(),
                outcome,
            })
            .inc();
    }

    /// Records whether this replica runs the controllers now.
    pub fn set_leading(&self, leading: bool) {
        self.leading.set(i64::from(leading));
        if !leading {
            self.scalers.clear();
            self.forbidden.clear();
        }
    }

    /// Records whether the Scaler `namespace/name` is stopped for its author's rights; None: it
    /// has no recorded author, or is deleted, and no series.
    pub fn set_forbidden(&self, namespace: &str, name: &str, forbidden: Option<bool>) {
        let labels = ScalerLabels {
            namespace: namespace.to_string(),
            scaler: name.to_string(),
        };
        match forbidden {
            Some(forbidden) => {
                self.forbidden
                    .get_or_create(&labels)
                    .set(i64::from(forbidden));
            }
            None => {
                self.forbidden.remove(&labels);
            }
        }
    }

    /// The exposition for `/metrics` (OpenMetrics) in parts of whole lines, to be sent as they
    /// are made: the registry's metrics, then the Scalers' series (see [`Parts`]), then `# EOF`.
    pub fn exposition(
        &self,
    ) -> impl Iterator<Item = Result<String, std::fmt::Error>> + Send + 'static {
        let mut head = String::new();
        let head = prometheus_client::encoding::text::encode_registry(&mut head, &self.registry)
            .map(|()| head);
        let mut eof = String::new();
        let eof = prometheus_client::encoding::text::encode_eof(&mut eof).map(|()| eof);
        std::iter::once(head)
            .chain(self.scalers.parts())
            .chain(std::iter::once(eof))
    }

    /// The per-Scaler metrics: a reconcile of a Scaler records itself there
    /// ([`ScalerMetrics::observed`]), and a deleted Scaler drops its series
    /// ([`ScalerMetrics::deleted`]).
    pub fn scalers(&self) -> &ScalerMetrics {
        &self.scalers
    }

    /// The whole exposition in one string.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        self.exposition().collect()
    }
}

/// Records the reconcile duration when dropped, so early returns and errors are measured too.
pub struct ReconcileMeasurer {
    start: Instant,
    histogram: Histogram,
}

impl Drop for ReconcileMeasurer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

impl kubesteer_runtime::serve::Exposition for Metrics {
    fn parts(&self) -> Box<dyn Iterator<Item = Result<String, std::fmt::Error>> + Send + 'static> {
        Box::new(self.exposition())
    }
}

/// A rustls configuration serving a new self-signed certificate for `namespace`, localhost and
/// the loopback addresses. Scrapers cannot verify it, as with controller-runtime's own
/// self-signed certificate; it encrypts the bearer tokens on their way.
pub fn self_signed(namespace: &str) -> crate::Result<rustls::ServerConfig> {
    let mut opts = kubesteer_certs::Options::new("kubesteer-controller-metrics", namespace);
    opts.dns = vec!["localhost".to_string()];
    opts.ips = vec![
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
    ];
    let bundle = kubesteer_certs::generate(&opts)?;
    Ok(kubesteer_certs::server_config(&bundle.serving)?)
}

#[cfg(test)]
mod served;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_errors_and_durations_are_labelled_per_kind() {
        let metrics = Metrics::default();
        drop(metrics.reconcile("Memcached"));
        metrics.error(
            "Scaler",
            &Error::MissingField {
                kind: "Scaler",
                name: "x".into(),
                what: "namespace",
            },
        );
        metrics.child("Deployment", false);
        let text = metrics.encode().unwrap();
        // The next exposition is written into a buffer sized by this one, and reads the same.
        let again = metrics.encode().unwrap();
        assert_eq!(again, text);
        assert!(again.capacity() >= text.len());
        assert!(
            text.contains("kubesteer_reconciles_total{kind=\"Memcached\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "kubesteer_reconcile_errors_total{kind=\"Scaler\",error=\"missing_field\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("kubesteer_reconcile_duration_seconds_count{kind=\"Memcached\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "kubesteer_child_checks_total{kind=\"Deployment\",outcome=\"unchanged\"} 1"
            ),
            "{text}"
        );
    }
}
