//! The review path alone, for profiling: one body answered `count` times by
//! `kubesteer_webhook::admission::answer`, in process, without HTTP or TLS. Every permission is
//! granted and every target exists, so a Scaler takes the path of an authorized user.
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::discovery::ApiResource;
use kubesteer_api::access::Access;
use kubesteer_api::scaler::target::Target;
use kubesteer_runtime::scale::Mapping;
use kubesteer_webhook::admission::{answer, Endpoint};
use kubesteer_webhook::cluster::Cluster;
use kubesteer_webhook::AppState;
use serde_json::{json, Value};

/// A cluster that grants everything and knows every apps/v1 kind.
pub(crate) struct Granting;

impl Cluster for Granting {
    async fn permitted(&self, _: &UserInfo, _: &Access) -> Result<bool, String> {
        Ok(true)
    }
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<Mapping, String> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Ok(Ok(ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        }))
    }
    fn target_exists(&self, _: &Target) -> Option<bool> {
        Some(true)
    }
    fn ingress_class_exists(&self, _: &str) -> Option<bool> {
        Some(true)
    }
}

/// Answers the review in `body` `count` times at `/<endpoint>/<plural>`; the figures and the
/// last answer's `allowed`, so a body that is refused shows as such.
pub async fn run(body: &Path, plural: &str, endpoint: &str, count: u64) -> Result<Value> {
    let endpoint = match endpoint {
        "validate" => Endpoint::Validate,
        "mutate" => Endpoint::Mutate,
        other => bail!("--endpoint must be validate or mutate, not {other:?}"),
    };
    let body = std::fs::read(body).with_context(|| format!("reading {}", body.display()))?;
    let state = AppState::new(Granting);
    let started = Instant::now();
    let mut allowed = None;
    for _ in 0..count {
        let review = answer(&state, endpoint, plural, &body)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        allowed = Some(review.response.allowed);
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(json!({
        "count": count,
        "seconds": seconds,
        "reviews_per_second": count as f64 / seconds,
        "allowed": allowed,
    }))
}
