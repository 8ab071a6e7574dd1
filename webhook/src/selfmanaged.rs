//! Self-managed certificates: the webhook keeps its own CA and serving certificate in a Secret,
//! renews them under the rules of `kubesteer-certs`, and injects the CA into its two webhook
//! configurations. Replicas share the Secret: whoever loses a create or update race re-reads it.
//!
//! A replaced CA rolls over (see `kubesteer_certs::trust`): the Secret's `ca-bundle.crt` holds
//! the new and the old CA for an overlap of `CA_OVERLAP_ROUNDS` check intervals, and each
//! replica serves a certificate of a new CA only after a round in which it injected a bundle that
//! trusts that CA, so no replica ever serves a certificate the apiserver does not trust.
use kubesteer_api::keys::annotation::CA_OVERLAP_UNTIL;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::Client;
use kubesteer_certs::{Bundle, Options, Outcome, Pem, Trust};
use serde_json::json;

use crate::error::{Error, Result};
use crate::tls::{certified_key, CertStore};
use kubesteer_api::keys::WEBHOOK_CA_FIELD_MANAGER;

/// Where the certificates live and who trusts them.
#[derive(Clone)]
pub struct SelfManaged {
    pub client: Client,
    pub namespace: String,
    pub secret: String,
    /// Name of both the Mutating and the Validating webhook configuration.
    pub configuration: String,
    pub options: Options,
    /// How often the Secret is checked; the CA overlap is counted in these rounds.
    pub interval: Duration,
    /// The CRD whose conversion goes to this webhook, given the same CA.
    pub conversion: Option<crate::crd_conversion::Conversion>,
}

/// The certificates as stored: the bundle to serve and the CAs to trust.
#[derive(Debug, Clone)]
pub struct Certs {
    pub bundle: Bundle,
    pub trust: Trust,
}

const KEYS: [&str; 4] = ["ca.crt", "ca.key", "tls.crt", "tls.key"];
/// The Secret key of the trusted CAs, the `caBundle` injected into the configurations.
pub const TRUST_KEY: &str = "ca-bundle.crt";
/// How many check intervals a replaced CA stays trusted. Every replica moves to the new CA's
/// certificate within two rounds; the rest is room for rounds that fail to reach the apiserver.
pub const CA_OVERLAP_ROUNDS: u32 = 10;

fn pem_from(data: &BTreeMap<String, ByteString>, cert: &str, key: &str) -> Option<Pem> {
    let text = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .filter(|s| !s.is_empty())
    };
    Some(Pem {
        cert: text(cert)?,
        key: text(key)?,
    })
}

fn secret_data(certs: &Certs) -> BTreeMap<String, ByteString> {
    let bundle = &certs.bundle;
    let values = [
        &bundle.ca.cert,
        &bundle.ca.key,
        &bundle.serving.cert,
        &bundle.serving.key,
    ];
    let mut data: BTreeMap<String, ByteString> = KEYS
        .iter()
        .zip(values)
        .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
        .collect();
    data.insert(
        TRUST_KEY.to_string(),
        ByteString(certs.trust.bundle().into_bytes()),
    );
    data
}

/// `annotations` with the overlap deadline of `trust` set, or removed when there is none.
fn with_overlap(
    mut annotations: BTreeMap<String, String>,
    trust: &Trust,
) -> BTreeMap<String, String> {
    match trust.overlap_until_rfc3339() {
        Some(until) => annotations.insert(CA_OVERLAP_UNTIL.to_string(), until),
        None => annotations.remove(CA_OVERLAP_UNTIL),
    };
    annotations
}

impl SelfManaged {
    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Makes the Secret hold a valid bundle and the CAs to trust, and returns them; never
    /// replaces a valid bundle.
    pub async fn ensure(&self) -> Result<Certs> {
        // Two rounds: a lost race is followed by one re-read of the winner's Secret.
        for _ in 0..3 {
            let existing = self.secrets().get_opt(&self.secret).await?;
            let data = existing
                .as_ref()
                .and_then(|s| s.data.clone())
                .unwrap_or_default();
            let ca = pem_from(&data, "ca.crt", "ca.key");
            let serving = pem_from(&data, "tls.crt", "tls.key");
            let stored = data
                .get(TRUST_KEY)
                .and_then(|b| std::str::from_utf8(&b.0).ok())
                .and_then(|bundle| {
                    let until = existing
                        .as_ref()
                        .and_then(|s| s.metadata.annotations.as_ref())
                        .and_then(|a| a.get(CA_OVERLAP_UNTIL));
                    Trust::parse(bundle, until.map(String::as_str))
                });
            let now = SystemTime::now();
            let (bundle, outcome) = kubesteer_certs::renew(ca.clone(), serving, &self.options, now)
                .map_err(|e| Error::Tls {
                    path: self.secret_ref(),
                    reason: e.to_string(),
                })?;
            let overlap = self.interval.saturating_mul(CA_OVERLAP_ROUNDS);
            let trust = Trust::next(stored.clone(), ca.as_ref(), &bundle, &outcome, now, overlap);
            let certs = Certs { bundle, trust };
            if outcome == Outcome::Kept && stored.as_ref() == Some(&certs.trust) {
                return Ok(certs);
            }
            let written = match existing {
                None => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(self.secret.clone()),
                            namespace: Some(self.namespace.clone()),
                            labels: Some(BTreeMap::from([(
                                "app.kubernetes.io/managed-by".to_string(),
                                "kubesteer-webhook".to_string(),
                            )])),
                            annotations: Some(with_overlap(BTreeMap::new(), &certs.trust)),
                            ..Default::default()
                        },
                        type_: Some("kubernetes.io/tls".into()),
                        data: Some(secret_data(&certs)),
                        ..Default::default()
                    };
                    self.secrets().create(&PostParams::default(), &secret).await
                }
                Some(mut secret) => {
                    // The resourceVersion read above makes this a compare-and-swap.
                    secret.data = Some(secret_data(&certs));
                    let annotations = secret.metadata.annotations.take().unwrap_or_default();
                    secret.metadata.annotations = Some(with_overlap(annotations, &certs.trust));
                    self.secrets()
                        .replace(&self.secret, &PostParams::default(), &secret)
                        .await
                }
            };
            match written {
                Ok(_) => {
                    tracing::info!(secret = %self.secret_ref(), %outcome, trusted_cas = certs.trust.cas.len(), "webhook certificate written");
                    return Ok(certs);
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    tracing::info!(secret = %self.secret_ref(), "another replica wrote the certificate first; using theirs");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Tls {
            path: self.secret_ref(),
            reason: "kept losing update races".into(),
        })
    }

    /// Sets `caBundle` of every webhook in both configurations to `trust`, by server-side apply,
    /// and points the conversion CRD (if any) at this webhook with the same trust.
    pub async fn inject_ca(&self, trust: &Trust) -> Result<()> {
        let names = |hooks: Option<Vec<String>>| hooks.unwrap_or_default();
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Some(config) = mutating.get_opt(&self.configuration).await? {
            let hooks = names(
                config
                    .webhooks
                    .map(|w| w.into_iter().map(|w| w.name).collect()),
            );
            self.apply_ca(&mutating, "MutatingWebhookConfiguration", &hooks, trust)
                .await?;
        }
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Some(config) = validating.get_opt(&self.configuration).await? {
            let hooks = names(
                config
                    .webhooks
                    .map(|w| w.into_iter().map(|w| w.name).collect()),
            );
            self.apply_ca(&validating, "ValidatingWebhookConfiguration", &hooks, trust)
                .await?;
        }
        // Only v1alpha1 reads and writes depend on it, so a failure here does not fail the round.
        if let Some(conversion) = &self.conversion {
            if let Err(e) = conversion.inject(&self.client, &trust.bundle()).await {
                tracing::warn!(crd = %conversion.crd, error = %e, "could not set the CRD's conversion; will retry");
            }
        }
        Ok(())
    }

    /// Applies only `webhooks[*].clientConfig.caBundle`, so the chart keeps owning the rest.
    async fn apply_ca<K>(
        &self,
        api: &Api<K>,
        kind: &str,
        webhooks: &[String],
        trust: &Trust,
    ) -> Result<()>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let bundle = ByteString(trust.bundle().into_bytes());
        let hooks: Vec<_> = webhooks
            .iter()
            .map(|name| json!({"name": name, "clientConfig": {"caBundle": bundle}}))
            .collect();
        let patch = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": self.configuration},
            "webhooks": hooks,
        });
        api.patch(
            &self.configuration,
            &PatchParams::apply(WEBHOOK_CA_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        Ok(())
    }

    /// Keeps the Secret, the served certificate and the caBundles current, every `interval`.
    /// `current` is what is being served and `injected` what the configurations were given.
    pub async fn run(self, store: Arc<CertStore>, mut current: Bundle, mut injected: Trust) {
        loop {
            tokio::time::sleep(self.interval).await;
            let certs = match self.ensure().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "certificate check failed; still serving the old one");
                    continue;
                }
            };
            // Re-applied every round: cheap, and it repairs a caBundle someone else overwrote.
            if let Err(e) = self.inject_ca(&certs.trust).await {
                tracing::warn!(error = %e, "caBundle injection failed; will retry");
                continue;
            }
            let trusted_before = std::mem::replace(&mut injected, certs.trust.clone());
            if certs.bundle.serving == current.serving {
                continue;
            }
            if !switch_now(&trusted_before, &certs.trust, &current, &certs.bundle) {
                tracing::info!("a certificate of a new CA is stored; serving it from the next round, once the apiserver trusts that CA");
                continue;
            }
            match certified_key(
                certs.bundle.serving.cert.as_bytes(),
                certs.bundle.serving.key.as_bytes(),
                &self.secret_ref(),
            ) {
                Ok(key) => {
                    store.set(key);
                    tracing::info!("serving the renewed certificate");
                    current = certs.bundle;
                }
                Err(e) => tracing::warn!(error = %e, "renewed certificate unusable"),
            }
        }
    }

    fn secret_ref(&self) -> String {
        format!("secret {}/{}", self.namespace, self.secret)
    }
}

/// Whether to serve `next` instead of `current` now: when the bundle injected a round ago already
/// trusted its CA, or when the CA of `current` is no longer trusted at all.
pub fn switch_now(trusted_before: &Trust, trust: &Trust, current: &Bundle, next: &Bundle) -> bool {
    trusted_before.trusts(&next.ca.cert) || !trust.trusts(&current.ca.cert)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle() -> Bundle {
        kubesteer_certs::generate(&Options::new("kubesteer-webhook", "kubesteer-system")).unwrap()
    }

    #[test]
    fn a_new_ca_is_served_only_after_a_round_that_trusted_it() {
        let (old, new) = (bundle(), bundle());
        let both = Trust {
            cas: vec![new.ca.cert.clone(), old.ca.cert.clone()],
            overlap_until: Some(SystemTime::now()),
        };
        // The round that found the new CA: the apiserver was told to trust it only just now.
        assert!(!switch_now(&Trust::only(&old.ca), &both, &old, &new));
        // The next round: it has trusted it since the round before.
        assert!(switch_now(&both, &both, &old, &new));
        // A renewed serving certificate of the same CA is served at once.
        let renewed = Bundle {
            ca: old.ca.clone(),
            serving: new.serving.clone(),
        };
        assert!(switch_now(
            &Trust::only(&old.ca),
            &Trust::only(&old.ca),
            &old,
            &renewed
        ));
        // Served from a CA that is no longer trusted at all: nothing to wait for.
        assert!(switch_now(
            &Trust::only(&old.ca),
            &Trust::only(&new.ca),
            &old,
            &new
        ));
    }
}
