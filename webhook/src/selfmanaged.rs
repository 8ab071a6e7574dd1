//! Self-managed certificates: the webhook keeps its own CA and serving certificate in a Secret,
//! renews them under the rules of `kubesteer-certs`, and injects the CA into its two webhook
//! configurations. Replicas share the Secret: whoever loses a create or update race re-reads it.
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
use kubesteer_certs::{Bundle, Options, Outcome, Pem};
use serde_json::json;

use crate::error::{Error, Result};
use crate::tls::{certified_key, CertStore};

/// The field manager that owns `caBundle`, and nothing else, in the webhook configurations.
pub const FIELD_MANAGER: &str = "kubesteer-webhook-cabundle";

/// Where the certificates live and who trusts them.
#[derive(Clone)]
pub struct SelfManaged {
    pub client: Client,
    pub namespace: String,
    pub secret: String,
    /// Name of both the Mutating and the Validating webhook configuration.
    pub configuration: String,
    pub options: Options,
}

const KEYS: [&str; 4] = ["ca.crt", "ca.key", "tls.crt", "tls.key"];

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

fn secret_data(bundle: &Bundle) -> BTreeMap<String, ByteString> {
    let values = [
        &bundle.ca.cert,
        &bundle.ca.key,
        &bundle.serving.cert,
        &bundle.serving.key,
    ];
    KEYS.iter()
        .zip(values)
        .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
        .collect()
}

impl SelfManaged {
    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Makes the Secret hold a valid bundle and returns it; never replaces a valid one.
    pub async fn ensure(&self) -> Result<Bundle> {
        // Two rounds: a lost race is followed by one re-read of the winner's Secret.
        for _ in 0..3 {
            let existing = self.secrets().get_opt(&self.secret).await?;
            let data = existing
                .as_ref()
                .and_then(|s| s.data.clone())
                .unwrap_or_default();
            let ca = pem_from(&data, "ca.crt", "ca.key");
            let serving = pem_from(&data, "tls.crt", "tls.key");
            let (bundle, outcome) =
                kubesteer_certs::renew(ca, serving, &self.options, SystemTime::now()).map_err(
                    |e| Error::Tls {
                        path: self.secret_ref(),
                        reason: e.to_string(),
                    },
                )?;
            if outcome == Outcome::Kept {
                return Ok(bundle);
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
                            ..Default::default()
                        },
                        type_: Some("kubernetes.io/tls".into()),
                        data: Some(secret_data(&bundle)),
                        ..Default::default()
                    };
                    self.secrets().create(&PostParams::default(), &secret).await
                }
                Some(mut secret) => {
                    // The resourceVersion read above makes this a compare-and-swap.
                    secret.data = Some(secret_data(&bundle));
                    self.secrets()
                        .replace(&self.secret, &PostParams::default(), &secret)
                        .await
                }
            };
            match written {
                Ok(_) => {
                    tracing::info!(secret = %self.secret_ref(), %outcome, "webhook certificate written");
                    return Ok(bundle);
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

    /// Sets `caBundle` of every webhook in both configurations, by server-side apply.
    pub async fn inject_ca(&self, ca: &Pem) -> Result<()> {
        let names = |hooks: Option<Vec<String>>| hooks.unwrap_or_default();
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Some(config) = mutating.get_opt(&self.configuration).await? {
            let hooks = names(
                config
                    .webhooks
                    .map(|w| w.into_iter().map(|w| w.name).collect()),
            );
            self.apply_ca(&mutating, "MutatingWebhookConfiguration", &hooks, ca)
                .await?;
        }
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Some(config) = validating.get_opt(&self.configuration).await? {
            let hooks = names(
                config
                    .webhooks
                    .map(|w| w.into_iter().map(|w| w.name).collect()),
            );
            self.apply_ca(&validating, "ValidatingWebhookConfiguration", &hooks, ca)
                .await?;
        }
        Ok(())
    }

    /// Applies only `webhooks[*].clientConfig.caBundle`, so the chart keeps owning the rest.
    async fn apply_ca<K>(
        &self,
        api: &Api<K>,
        kind: &str,
        webhooks: &[String],
        ca: &Pem,
    ) -> Result<()>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let bundle = ByteString(ca.cert.as_bytes().to_vec());
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
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        Ok(())
    }

    /// Keeps the Secret, the served certificate and the caBundles current, every `interval`.
    pub async fn run(self, store: Arc<CertStore>, mut current: Bundle, interval: Duration) {
        loop {
            tokio::time::sleep(interval).await;
            let bundle = match self.ensure().await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, "certificate check failed; still serving the old one");
                    continue;
                }
            };
            if bundle.serving != current.serving {
                match certified_key(
                    bundle.serving.cert.as_bytes(),
                    bundle.serving.key.as_bytes(),
                    &self.secret_ref(),
                ) {
                    Ok(key) => {
                        store.set(key);
                        tracing::info!("serving the renewed certificate");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "renewed certificate unusable");
                        continue;
                    }
                }
            }
            // Re-applied every round: cheap, and it repairs a caBundle someone else overwrote.
            if let Err(e) = self.inject_ca(&bundle.ca).await {
                tracing::warn!(error = %e, "caBundle injection failed; will retry");
            }
            current = bundle;
        }
    }

    fn secret_ref(&self) -> String {
        format!("secret {}/{}", self.namespace, self.secret)
    }
}
