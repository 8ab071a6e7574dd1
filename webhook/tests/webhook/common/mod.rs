//! A fake cluster and request helpers shared by the tests of this binary.
#![allow(dead_code)]

pub mod client;
pub mod review;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::discovery::ApiResource;
use kubesteer_api::access::Access;
use kubesteer_api::scaler::claims::Claimant;
use kubesteer_api::scaler::target::Target;
use kubesteer_runtime::scale::{Mapping, Unscalable};
use kubesteer_webhook::cluster::Cluster;
use kubesteer_webhook::{router, AppState};
use serde_json::Value;
use tower::ServiceExt;

/// One SubjectAccessReview the fake was asked: the username and the permission.
pub type Asked = (Option<String>, Access);

/// A cluster whose facts the test sets.
#[derive(Default, Clone)]
pub struct FakeCluster {
    /// Namespaces where the requesting user may scale every Deployment.
    pub may_scale_in: Vec<String>,
    /// Secrets the requesting user may get, as (namespace, name).
    pub may_get_secrets: Vec<(String, String)>,
    /// When set, every SubjectAccessReview fails with this error.
    pub sar_error: Option<String>,
    /// Every SubjectAccessReview asked, shared by clones, so tests can count them.
    pub asked: Arc<Mutex<Vec<Asked>>>,
    /// (target namespace, target name) -> claiming Scaler "ns/name".
    pub claims: BTreeMap<(String, String), String>,
    /// Deployments that exist, as (namespace, name).
    pub deployments: Vec<(String, String)>,
    /// (namespace, deployment) -> HPA name.
    pub hpas: BTreeMap<(String, String), String>,
    /// ConfigMaps the requesting user may get, as (namespace, name).
    pub may_get_config_maps: Vec<(String, String)>,
    /// ConfigMaps the requesting user may patch, as (namespace, name).
    pub may_patch_config_maps: Vec<(String, String)>,
    /// Ingresses the requesting user may get, as (namespace, name).
    pub may_get_ingresses: Vec<(String, String)>,
    /// IngressClasses that exist.
    pub ingress_classes: Vec<String>,
    /// Ingresses, as (namespace, name, host, path).
    pub ingresses: Vec<(String, String, String, String)>,
    /// How long each SubjectAccessReview takes to answer.
    pub sar_delay: std::time::Duration,
    /// Namespaces where the requesting user may create Ingresses.
    pub may_create_ingresses_in: Vec<String>,
    /// The host claims, host -> namespace, shared by clones (the HostClaims of the real cluster).
    pub host_claims: Arc<Mutex<BTreeMap<String, String>>>,
    /// When set, every host claim fails with this error (the apiserver could not be asked).
    pub claim_error: Option<String>,
}

impl FakeCluster {
    /// How many SubjectAccessReviews were asked so far.
    pub fn sars(&self) -> usize {
        self.asked.lock().unwrap().len()
    }
}

impl Cluster for FakeCluster {
    async fn permitted(&self, user: &UserInfo, access: &Access) -> Result<bool, String> {
        self.asked
            .lock()
            .unwrap()
            .push((user.username.clone(), access.clone()));
        if !self.sar_delay.is_zero() {
            tokio::time::sleep(self.sar_delay).await;
        }
        if let Some(e) = &self.sar_error {
            return Err(e.clone());
        }
        let ns = &access.namespace;
        Ok(
            match (access.verb, access.resource.as_str(), access.subresource) {
                ("patch", "deployments" | "statefulsets" | "replicasets", "scale") => {
                    access.group == "apps" && self.may_scale_in.contains(ns)
                }
                ("patch", "horizontalpodautoscalers", "") => {
                    access.group == "autoscaling" && self.may_scale_in.contains(ns)
                }
                ("get", "secrets", "") => {
                    access.group.is_empty()
                        && self
                            .may_get_secrets
                            .contains(&(ns.clone(), access.name.clone()))
                }
                ("get", "configmaps", "") => self
                    .may_get_config_maps
                    .contains(&(ns.clone(), access.name.clone())),
                ("patch", "configmaps", "") => self
                    .may_patch_config_maps
                    .contains(&(ns.clone(), access.name.clone())),
                ("create", "ingresses", "") => {
                    access.group == "networking.k8s.io" && self.may_create_ingresses_in.contains(ns)
                }
                ("get", "ingresses", "") => {
                    access.group == "networking.k8s.io"
                        && self
                            .may_get_ingresses
                            .contains(&(ns.clone(), access.name.clone()))
                }
                _ => false,
            },
        )
    }
    fn ingress_class_exists(&self, name: &str) -> Option<bool> {
        Some(self.ingress_classes.iter().any(|c| c == name))
    }
    /// The first of `ingresses` (they are listed oldest first) with a rule for `host`.
    fn host_owner(&self, host: &str, namespace: &str) -> Option<(String, String)> {
        let (ns, name, _, _) = self.ingresses.iter().find(|(_, _, h, _)| h == host)?;
        (ns != namespace).then(|| (ns.clone(), name.clone()))
    }
    async fn claim_host(
        &self,
        host: &str,
        namespace: &str,
        dry_run: bool,
    ) -> Result<Option<String>, String> {
        if let Some(e) = &self.claim_error {
            return Err(e.clone());
        }
        let mut claims = self.host_claims.lock().unwrap();
        match claims.get(host) {
            Some(holder) if holder != namespace => Ok(Some(host.to_string())),
            _ => {
                if !dry_run {
                    claims.insert(host.to_string(), namespace.to_string());
                }
                Ok(None)
            }
        }
    }
    fn ingresses_serving(&self, host: &str, path: &str, me: (&str, &str)) -> Vec<(String, String)> {
        self.ingresses
            .iter()
            .filter(|(ns, name, h, p)| h == host && p == path && (ns.as_str(), name.as_str()) != me)
            .map(|(ns, name, _, _)| (ns.clone(), name.clone()))
            .collect()
    }
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<Mapping, String> {
        Ok(mapping(api_version, kind))
    }
    fn claimant(&self, target: &Target, me: &Claimant) -> Option<String> {
        let other = self
            .claims
            .get(&(target.namespace.clone(), target.name.clone()))?;
        (other != &me.id()).then(|| other.clone())
    }
    fn target_exists(&self, target: &Target) -> Option<bool> {
        (target.kind == "Deployment").then(|| {
            self.deployments
                .iter()
                .any(|(n, d)| *n == target.namespace && *d == target.name)
        })
    }
    fn hpa_for(&self, target: &Target) -> Option<String> {
        self.hpas
            .get(&(target.namespace.clone(), target.name.clone()))
            .cloned()
    }
}

/// The RESTMapper of a plain cluster: apps/v1 Deployments, StatefulSets and ReplicaSets scale,
/// a v1 ConfigMap has no /scale, anything else is unknown.
pub fn mapping(api_version: &str, kind: &str) -> Mapping {
    let refused = (api_version.to_string(), kind.to_string());
    match (api_version, kind) {
        ("apps/v1", "Deployment" | "StatefulSet" | "ReplicaSet") => Ok(ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        }),
        ("v1", "ConfigMap") => Err(Unscalable::NoScaleSubresource {
            api_version: refused.0,
            kind: refused.1,
            plural: "configmaps".into(),
        }),
        _ => Err(Unscalable::UnknownKind {
            api_version: refused.0,
            kind: refused.1,
        }),
    }
}

/// A cluster where "web" exists in "team", alice may scale there, and nothing else is special.
pub fn cluster() -> FakeCluster {
    FakeCluster {
        deployments: vec![("team".into(), "web".into())],
        may_scale_in: vec!["team".into()],
        may_create_ingresses_in: vec!["team".into()],
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
            Value::String(b) => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.decode(b).unwrap()
            }
            other => panic!("unexpected patch encoding {other}"),
        };
        Some(serde_json::from_slice(&bytes).unwrap())
    }
}

/// Handler state around `cluster`, ready to serve; share it to keep its permission cache.
pub fn state(cluster: FakeCluster) -> Arc<AppState<FakeCluster>> {
    Arc::new(AppState::new(cluster))
}

pub async fn send_raw(cluster: FakeCluster, path: &str, body: Vec<u8>) -> Reply {
    send_to(&state(cluster), path, body).await
}

/// Sends through an existing state, as a second request to the same replica.
pub async fn send_to(state: &Arc<AppState<FakeCluster>>, path: &str, body: Vec<u8>) -> Reply {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = router(state.clone()).oneshot(request).await.unwrap();
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
/// The webhook's router for `state`, served over TLS with `key` on a new port of 127.0.0.1 with
/// `limits` until `shutdown`: the address, and the server's task.
pub async fn serve_state(
    state: Arc<AppState<FakeCluster>>,
    key: rustls::sign::CertifiedKey,
    limits: kubesteer_webhook::server::Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use kubesteer_webhook::tls::{server_config, CertStore};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(kubesteer_webhook::server::serve(
        listener,
        server_config(CertStore::new(key)).unwrap(),
        router(state.clone()),
        limits,
        state.health.clone(),
        state.metrics.connections_closed.clone(),
        shutdown,
    ));
    (addr, server)
}

pub fn limits() -> kubesteer_webhook::server::Limits {
    use std::time::Duration;
    kubesteer_webhook::server::Limits {
        handshake: Duration::from_secs(5),
        header: Duration::from_secs(5),
        idle: Duration::from_secs(30),
        request: Duration::from_secs(5),
        max_connections: 64,
        max_connections_per_ip: 64,
        shutdown_delay: Duration::ZERO,
        drain: Duration::from_secs(5),
    }
}

/// A serving key for 127.0.0.1 from a fresh CA, and client roots that trust only that CA.
pub fn local_tls() -> (rustls::sign::CertifiedKey, rustls::RootCertStore) {
    use rustls::pki_types::pem::PemObject as _;
    let mut options = kubesteer_certs::Options::new("kubesteer-webhook", "test");
    options.ips.push("127.0.0.1".parse().unwrap());
    let certs = kubesteer_certs::generate(&options).unwrap();
    let key = kubesteer_webhook::tls::certified_key(
        certs.serving.cert.as_bytes(),
        certs.serving.key.as_bytes(),
        "test",
    )
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(certs.ca.cert.as_bytes()).unwrap())
        .unwrap();
    (key, roots)
}

/// Polls `condition` every 10 ms until it holds; false after `within`.
pub async fn eventually(within: std::time::Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while !condition() {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    true
}
