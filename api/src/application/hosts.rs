//! One namespace per Ingress host, decided by the apiserver rather than by a cache.
//!
//! A host belongs to the namespace that serves it first. The webhook records that in a
//! [`HostClaim`]: a cluster-scoped object of its own kind, named after the host ([`claim_name`]),
//! that names the namespace. Creating it is atomic (etcd refuses a second create of a name, and a
//! takeover is an update conditional on the resourceVersion read), so of two Applications for one
//! new host admitted at the same moment from two namespaces, exactly one gets it. Only the
//! webhook's ServiceAccount may write HostClaims, and it may write nothing else of the kind's
//! namespace-free scope.
//!
//! A claim holds while its namespace serves the host (an Application there names it), and for
//! [`IN_FLIGHT`] after it was made or renewed whatever else: the Application whose admission
//! made it may not be stored yet. After that, a claim whose namespace serves the host no more
//! (the Application was deleted, or moved to another host) is stale, and the next namespace to
//! ask takes it over.
//!
//! A wildcard host (`*.example.com`) and the hosts it covers (`a.example.com`: one label, as an
//! Ingress matches) belong to one namespace too: each side checks the other's claims after
//! writing its own, so two concurrent claims either see each other (and both are refused, to
//! retry) or were not concurrent.
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The claim of one Ingress host by one namespace, written by the webhook when it admits an
/// Application for the host. Named `h.<host>`, or `w.<domain>` for `*.<domain>`.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kubesteer.io",
    version = "v1alpha1",
    kind = "HostClaim",
    shortname = "hclaim",
    doc = "HostClaim records which namespace an Ingress host belongs to. The kubesteer webhook writes it when it admits an Application for the host; nothing else should.",
    printcolumn = r#"{"name":"Host","type":"string","jsonPath":".spec.host","description":"The Ingress host claimed"}"#,
    printcolumn = r#"{"name":"Holder","type":"string","jsonPath":".spec.namespace","description":"The namespace the host belongs to"}"#,
    printcolumn = r#"{"name":"Renewed","type":"date","jsonPath":".spec.renewTime","description":"When the claim was made or last renewed"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HostClaimSpec {
    /// The Ingress host, as the Application wrote it (*.<domain> for a wildcard).
    pub host: String,
    /// The namespace the host belongs to.
    pub namespace: String,
    /// When the claim was made or last renewed.
    pub renew_time: Time,
}

impl HostClaim {
    /// The claim of `host` for `namespace`, made or renewed at `now`; None when its name would be
    /// too long ([`claim_name`]).
    pub fn of(host: &str, namespace: &str, now: Timestamp) -> Option<Self> {
        let name = claim_name(host)?;
        let mut claim = HostClaim::new(
            &name,
            HostClaimSpec {
                host: host.to_string(),
                namespace: namespace.to_string(),
                renew_time: Time(now),
            },
        );
        claim.metadata.labels = Some(std::collections::BTreeMap::from([(
            crate::keys::label::MANAGED_BY.to_string(),
            crate::keys::label::MANAGED_BY_VALUE.to_string(),
        )]));
        Some(claim)
    }

    /// What the claim says.
    pub fn claim(&self) -> Claim {
        Claim {
            namespace: self.spec.namespace.clone(),
            renewed: Some(self.spec.renew_time.0),
        }
    }
}

/// How long a claim holds with nothing in its namespace serving the host: the longest an
/// admission can be in flight between the claim and the stored object (the apiserver gives a
/// webhook at most 30 s).
pub const IN_FLIGHT: Duration = Duration::from_secs(30);

/// The [`HostClaim`] of `host`: `h.<host>`, or `w.<domain>` for `*.<domain>`; None when the name
/// would pass the 253 characters of a Kubernetes name.
pub fn claim_name(host: &str) -> Option<String> {
    let name = match host.strip_prefix("*.") {
        Some(domain) => format!("w.{domain}"),
        None => format!("h.{host}"),
    };
    (name.len() <= 253).then_some(name)
}

/// The wildcard that covers `host` (`a.example.com`: `*.example.com`); None for a wildcard or a
/// host of one label.
pub fn covering_wildcard(host: &str) -> Option<String> {
    if host.starts_with("*.") {
        return None;
    }
    let (_, domain) = host.split_once('.')?;
    Some(format!("*.{domain}"))
}

/// Whether the claim `name` (see [`claim_name`]) is of a host that the wildcard `*.<domain>`
/// covers.
pub fn covered_claim(name: &str, domain: &str) -> bool {
    name.strip_prefix("h.")
        .is_some_and(|host| covers(&format!("*.{domain}"), host))
}

/// Whether `wildcard` (`*.<domain>`) covers `host`: exactly one label before the domain, as an
/// Ingress matches.
pub fn covers(wildcard: &str, host: &str) -> bool {
    let Some(domain) = wildcard.strip_prefix("*.") else {
        return false;
    };
    host.strip_suffix(domain)
        .and_then(|label| label.strip_suffix('.'))
        .is_some_and(|label| !label.is_empty() && !label.contains('.') && label != "*")
}

/// Whether two Ingress hosts are one namespace's: the same host, or a wildcard and a host it
/// covers (either way round).
pub fn overlap(a: &str, b: &str) -> bool {
    a == b || covers(a, b) || covers(b, a)
}

/// What a claim says: which namespace holds the host, since when (made or last renewed).
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub namespace: String,
    pub renewed: Option<Timestamp>,
}

impl Claim {
    /// Whether the claim still holds at `now`: its namespace serves the host (`serves`), or it
    /// was made or renewed less than [`IN_FLIGHT`] ago.
    pub fn holds(&self, now: Timestamp, serves: bool) -> bool {
        serves || self.fresh(now)
    }

    /// Made or renewed less than [`IN_FLIGHT`] ago (a claim without a time is not).
    pub fn fresh(&self, now: Timestamp) -> bool {
        let in_flight = SignedDuration::try_from(IN_FLIGHT).unwrap_or(SignedDuration::MAX);
        self.renewed
            .is_some_and(|at| now.duration_since(at) < in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_and_a_wildcard_have_claims_of_their_own_that_cannot_collide() {
        assert_eq!(
            claim_name("shop.example.com").as_deref(),
            Some("h.shop.example.com")
        );
        assert_eq!(
            claim_name("*.example.com").as_deref(),
            Some("w.example.com")
        );
        // A host that looks like a wildcard's claim is still a host's.
        assert_eq!(
            claim_name("w.example.com").as_deref(),
            Some("h.w.example.com")
        );
        let longest = format!("{}.com", "a".repeat(247));
        assert_eq!(claim_name(&longest).map(|n| n.len()), Some(253));
        assert_eq!(claim_name(&format!("a{longest}")), None);
    }

    #[test]
    fn a_wildcard_covers_one_label_as_an_ingress_matches() {
        assert_eq!(
            covering_wildcard("a.example.com").as_deref(),
            Some("*.example.com")
        );
        assert_eq!(covering_wildcard("*.example.com"), None);
        assert_eq!(covering_wildcard("localhost"), None);
        assert!(covered_claim("h.a.example.com", "example.com"));
        assert!(!covered_claim("h.a.b.example.com", "example.com"));
        assert!(!covered_claim("h.example.com", "example.com"));
        assert!(!covered_claim("h.aexample.com", "example.com"));
        assert!(!covered_claim("w.a.example.com", "example.com"));
        assert!(overlap("shop.example.com", "shop.example.com"));
        assert!(overlap("*.example.com", "shop.example.com"));
        assert!(overlap("shop.example.com", "*.example.com"));
        assert!(!overlap("*.example.com", "example.com"));
        assert!(!overlap("*.example.com", "a.shop.example.com"));
        assert!(!overlap("shop.example.com", "shop.example.org"));
    }

    #[test]
    fn a_claim_names_its_host_namespace_and_time() {
        let now = Timestamp::now();
        let made = HostClaim::of("*.example.com", "team-a", now).unwrap();
        assert_eq!(made.metadata.name.as_deref(), Some("w.example.com"));
        assert_eq!(made.spec.host, "*.example.com");
        assert_eq!(
            made.claim(),
            Claim {
                namespace: "team-a".into(),
                renewed: Some(now)
            }
        );
        assert!(HostClaim::of(&format!("{}.com", "a".repeat(250)), "team-a", now).is_none());
    }

    #[test]
    fn a_claim_holds_while_served_or_in_flight() {
        let now = Timestamp::now();
        let claim = |secs: i64| Claim {
            namespace: "a".into(),
            renewed: Some(now - SignedDuration::from_secs(secs)),
        };
        assert!(claim(5).holds(now, false), "in flight");
        assert!(!claim(31).holds(now, false), "stale");
        assert!(claim(3600).holds(now, true), "served");
        let timeless = Claim {
            namespace: "a".into(),
            renewed: None,
        };
        assert!(!timeless.holds(now, false));
    }
}
