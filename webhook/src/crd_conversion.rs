//! Points a CRD's conversion at this webhook: `spec.conversion` with the webhook's Service (or
//! URL) and the CA the apiserver must trust, by a merge patch under [`WEBHOOK_CA_FIELD_MANAGER`] (a merge
//! patch, not an apply, so the other of `service` and `url`, written by whoever installed the
//! CRD, is removed: the apiserver wants exactly one).
//!
//! The committed Scaler CRD (`charts/kubesteer/files/crds/`, which `make install` applies) names a
//! placeholder Service and no caBundle, and the chart's rendering of it has no caBundle in
//! self-managed mode; the webhook writes the real ones at start-up and every check round (so a CA
//! rollover reaches the CRD as it reaches the webhook configurations). A failure is
//! logged and retried: admission does not depend on it, only reads and writes of v1alpha1 do.
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use kubesteer_api::keys::WEBHOOK_CA_FIELD_MANAGER;

/// Where the CA for the CRD comes from in files mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// A PEM file, e.g. the mounted Secret's `ca.crt`.
    File(PathBuf),
    /// The PEM itself, as the chart renders it from values.
    Pem(String),
}

/// Where the apiserver reaches the conversion endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The in-cluster Service `namespace/name`, port 443.
    Service { namespace: String, name: String },
    /// A URL such as `https://127.0.0.1:9443` (host runs and tests).
    Url(String),
}

/// The CRD whose conversion this webhook serves, and how it is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    pub crd: String,
    pub endpoint: Endpoint,
}

impl Conversion {
    /// The merge patch that sets the CRD's conversion to this webhook and `ca_pem`.
    pub fn patch(&self, ca_pem: &str) -> Value {
        let path = crate::conversion::PATH;
        let mut client_config = match &self.endpoint {
            Endpoint::Service { namespace, name } => json!({
                "service": {"namespace": namespace, "name": name, "path": path, "port": 443},
                "url": null,
            }),
            Endpoint::Url(url) => json!({
                "url": format!("{}{path}", url.trim_end_matches('/')),
                "service": null,
            }),
        };
        client_config["caBundle"] = json!(ByteString(ca_pem.as_bytes().to_vec()));
        json!({
            "spec": {"conversion": {
                "strategy": "Webhook",
                "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": client_config},
            }},
        })
    }

    /// Applies [`Self::patch`] to the cluster.
    pub async fn inject(&self, client: &Client, ca_pem: &str) -> Result<(), kube::Error> {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        let params = PatchParams {
            field_manager: Some(WEBHOOK_CA_FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        api.patch(&self.crd, &params, &Patch::Merge(&self.patch(ca_pem)))
            .await?;
        Ok(())
    }

    /// Files mode: keeps the CRD trusting the CA from `source`, read again every `interval`
    /// and applied when it changed or the last attempt failed.
    pub async fn keep(self, client: Client, source: CaSource, interval: Duration) {
        let mut applied: Option<String> = None;
        loop {
            let read = match &source {
                CaSource::Pem(pem) => Ok(pem.clone()),
                CaSource::File(file) => std::fs::read_to_string(file),
            };
            match read {
                Ok(pem) if applied.as_deref() != Some(pem.as_str()) => {
                    match self.inject(&client, &pem).await {
                        Ok(()) => {
                            tracing::info!(crd = %self.crd, "conversion webhook and CA set in the CRD");
                            applied = Some(pem);
                        }
                        Err(e) => {
                            tracing::warn!(crd = %self.crd, error = %e, "could not set the CRD's conversion; will retry")
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    source = ?source,
                    error = %e,
                    "could not read the CA for the CRD's conversion; will retry"
                ),
            }
            tokio::time::sleep(interval).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_names_the_service_or_url_and_the_ca() {
        let service = Conversion {
            crd: "scalers.kubesteer.io".into(),
            endpoint: Endpoint::Service {
                namespace: "ops".into(),
                name: "ks-webhook".into(),
            },
        };
        let patch = service.patch("PEM");
        let conversion = &patch["spec"]["conversion"];
        assert_eq!(conversion["strategy"], "Webhook");
        assert_eq!(
            conversion["webhook"]["clientConfig"],
            json!({
                "service": {"namespace": "ops", "name": "ks-webhook", "path": "/convert", "port": 443},
                "url": null,
                "caBundle": "UEVN",
            })
        );
        assert_eq!(
            conversion["webhook"]["conversionReviewVersions"],
            json!(["v1"])
        );
        let url = Conversion {
            endpoint: Endpoint::Url("https://127.0.0.1:9443/".into()),
            ..service
        };
        assert_eq!(
            url.patch("PEM")["spec"]["conversion"]["webhook"]["clientConfig"],
            json!({"url": "https://127.0.0.1:9443/convert", "service": null, "caBundle": "UEVN"})
        );
    }
}
