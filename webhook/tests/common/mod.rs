//! A fake cluster and request helpers shared by the handler tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::authentication::v1::UserInfo;
use kubesteer_webhook::cluster::Cluster;
use kubesteer_webhook::{router, AppState};
use serde_json::Value;
use tower::ServiceExt;

/// A cluster whose facts the test sets.
#[derive(Default, Clone)]
pub struct FakeCluster {
    /// Namespaces where the requesting user may scale.
    pub may_scale_in: Vec<String>,
    /// (target namespace, target name) -> claiming Scaler "ns/name".
    pub claims: BTreeMap<(String, String), String>,
    /// Deployments that exist, as (namespace, name).
    pub deployments: Vec<(String, String)>,
    /// (namespace, deployment) -> HPA name.
    pub hpas: BTreeMap<(String, String), String>,
}

impl Cluster for FakeCluster {
    async fn may_scale(&self, _user: &UserInfo, namespace: &str) -> Result<bool, String> {
        Ok(self.may_scale_in.iter().any(|n| n == namespace))
    }
    fn claimant(&self, target: (&str, &str), me: (&str, &str)) -> Option<String> {
        let other = self
            .claims
            .get(&(target.0.to_string(), target.1.to_string()))?;
        (other != &format!("{}/{}", me.0, me.1)).then(|| other.clone())
    }
    fn deployment_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        Some(
            self.deployments
                .iter()
                .any(|(n, d)| n == namespace && d == name),
        )
    }
    fn hpa_for(&self, namespace: &str, name: &str) -> Option<String> {
        self.hpas
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn ready(&self) -> bool {
        true
    }
}

/// A cluster where "web" exists in "team" and nothing else is special.
pub fn cluster() -> FakeCluster {
    FakeCluster {
        deployments: vec![("team".into(), "web".into())],
        ..Default::default()
    }
}

pub fn fixture(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A fixture with its object's spec replaced.
pub fn with_spec(name: &str, spec: Value) -> Value {
    let mut review = fixture(name);
    review["request"]["object"]["spec"] = spec;
    review
}

pub struct Reply {
    pub status: StatusCode,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    pub fn response(&self) -> Value {
        self.json()["response"].clone()
    }
    pub fn allowed(&self) -> bool {
        self.response()["allowed"].as_bool().unwrap()
    }
    pub fn message(&self) -> String {
        self.response()["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
    pub fn warnings(&self) -> Vec<String> {
        serde_json::from_value(self.response()["warnings"].clone()).unwrap_or_default()
    }
    /// The JSON patch, decoded from whichever encoding the response used.
    pub fn patch(&self) -> Option<json_patch::Patch> {
        let raw = &self.response()["patch"];
        let bytes: Vec<u8> = match raw {
            Value::Null => return None,
            Value::Array(a) => a.iter().map(|b| b.as_u64().unwrap() as u8).collect(),
            other => panic!("unexpected patch encoding {other}"),
        };
        Some(serde_json::from_slice(&bytes).unwrap())
    }
}

pub async fn send_raw(cluster: FakeCluster, path: &str, body: Vec<u8>) -> Reply {
    let state = Arc::new(AppState::new(cluster));
    state
        .tls_ready
        .store(true, std::sync::atomic::Ordering::Release);
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = router(state).oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub async fn send(cluster: FakeCluster, path: &str, review: &Value) -> Reply {
    send_raw(cluster, path, serde_json::to_vec(review).unwrap()).await
}

/// Server limits for the TLS tests: generous timeouts, no shutdown delay.
pub fn limits() -> kubesteer_webhook::server::Limits {
    use std::time::Duration;
    kubesteer_webhook::server::Limits {
        handshake: Duration::from_secs(5),
        idle: Duration::from_secs(30),
        request: Duration::from_secs(5),
        max_connections: 64,
        shutdown_delay: Duration::ZERO,
        drain: Duration::from_secs(5),
    }
}
