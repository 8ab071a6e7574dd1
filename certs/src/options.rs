//! What to put in the certificates.
use std::net::IpAddr;
use std::time::Duration;

// A CA outlives many serving certificates so the caBundle in the webhook configuration rarely changes.
const DEFAULT_CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
// One year keeps a leaked serving key short-lived while renewals stay rare.
const DEFAULT_SERVING_VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);

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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

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
    fn defaults_are_ten_years_and_one_year() {
        let opts = opts();
        assert_eq!(opts.ca_validity, 3650 * DAY);
        assert_eq!(opts.serving_validity, 365 * DAY);
        assert!(opts.dns.is_empty() && opts.ips.is_empty());
    }
}
