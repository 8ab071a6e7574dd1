//! A mock apiserver for reconcile tests: each scenario lists the exact calls it expects, in
//! order, and fails on a missing, different or extra call.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tower_test::mock::{self, Handle};

use crate::children::{Caches, ListedPod, Packed, PackedWriter, PodsWriter, Writers};
use crate::metrics::Metrics;
use crate::{Clock, Context};
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::watcher::Event;

/// A clock the test sets.
pub struct FixedClock(pub Mutex<DateTime<Utc>>);

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// The usual test time: a Monday at noon.
pub const USUAL: &str = "2025-03-03T12:00:00Z";

impl FixedClock {
    /// A clock at the usual test time (2025-03-03T12:00:00Z, a Monday) that the test may move.
    pub fn usual() -> Arc<Self> {
        Arc::new(Self(Mutex::new(at(USUAL))))
    }
}

/// A Deployment of `replicas` just created (generation 1) whose pods the controller-manager has
/// not counted yet: no status.
pub fn new_deployment(replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"generation": 1, "creationTimestamp": USUAL},
        "spec": {"replicas": replicas, "selector": {}, "template": {}},
    }))
    .unwrap()
}

/// A pod `name` of a [`new_deployment`], ready or not, as the pods cache lists it.
pub fn new_pod(name: &str, ready: bool) -> ListedPod {
    ListedPod {
        name: name.into(),
        ready,
        created: Some(at(USUAL).timestamp() + 1),
    }
}

pub fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc()
}

/// A context on a mock apiserver, at 2025-03-03T12:00:00Z (a Monday).
pub fn context() -> (Arc<Context>, Verifier) {
    context_at(at(USUAL))
}

pub fn context_at(now: DateTime<Utc>) -> (Arc<Context>, Verifier) {
    context_with(now, Caches::empty())
}

/// A context at the usual test time whose watch caches are `caches`.
pub fn context_cached(caches: Caches) -> (Arc<Context>, Verifier) {
    context_with(at(USUAL), caches)
}

/// A context whose watch caches are `caches`.
pub fn context_with(now: DateTime<Utc>, caches: Caches) -> (Arc<Context>, Verifier) {
    context_on(Arc::new(FixedClock(Mutex::new(now))), caches)
}

/// A context on `clock`, which the test may move.
pub fn context_on(clock: Arc<FixedClock>, caches: Caches) -> (Arc<Context>, Verifier) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let ctx = Context::new(
        client,
        Arc::new(Metrics::default()),
        clock,
        Some("test".into()),
        caches,
    );
    (Arc::new(ctx), Verifier(handle))
}

/// Caches of `app` filled by `fill`, as watches would have filled them.
pub fn caches(app: &'static str, fill: impl FnOnce(&mut Writers)) -> Caches {
    let caches = Caches::empty();
    let mut writers = caches.register(app);
    fill(&mut writers);
    caches
}

/// Puts `object` into a cache of children.
pub fn put<K>(writer: &mut PackedWriter<K>, object: Value)
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    let object: K = serde_json::from_value(object).unwrap();
    writer.apply_watcher_event(&Event::Apply(Packed::pack(&object).unwrap()));
}

/// Puts a pod's metadata into the pod cache.
pub fn put_pod(writer: &mut PodsWriter, object: Value) {
    writer.apply_watcher_event(&Event::Apply(serde_json::from_value(object).unwrap()));
}

type Check = Box<dyn FnOnce(&Value) + Send>;

enum Reply {
    Json(StatusCode, Value),
    EchoBody(StatusCode),
    WithStatus(Value),
}

/// One expected call and the apiserver's answer to it.
pub struct Call {
    method: Method,
    uri: String,
    check: Option<Check>,
    reply: Reply,
}

impl Call {
    fn new(method: Method, uri: &str) -> Self {
        Self {
            method,
            uri: uri.to_string(),
            check: None,
            reply: Reply::EchoBody(StatusCode::OK),
        }
    }
    pub fn get(uri: &str) -> Self {
        Self::new(Method::GET, uri)
    }
    pub fn patch(uri: &str) -> Self {
        Self::new(Method::PATCH, uri)
    }
    pub fn post(uri: &str) -> Self {
        Self::new(Method::POST, uri)
    }
    pub fn delete(uri: &str) -> Self {
        Self::new(Method::DELETE, uri)
    }
    /// An event published in `ns`, whose reason and note the check may inspect.
    pub fn event(ns: &str) -> Self {
        Self::post(&format!("/apis/events.k8s.io/v1/namespaces/{ns}/events?"))
    }
    /// Asserts on the request body, parsed as JSON.
    /// Checks the request body; a second check runs after the first.
    pub fn body(mut self, check: impl FnOnce(&Value) + Send + 'static) -> Self {
        self.check = Some(match self.check.take() {
            Some(first) => Box::new(move |b: &Value| {
                first(b);
                check(b)
            }),
            None => Box::new(check),
        });
        self
    }
    pub fn respond(mut self, body: Value) -> Self {
        self.reply = Reply::Json(StatusCode::OK, body);
        self
    }
    /// Answers with the request body, as an apiserver accepting the write would, roughly.
    pub fn respond_with_body(mut self) -> Self {
        self.reply = Reply::EchoBody(StatusCode::OK);
        self
    }
    /// Answers an apply with 201 Created and the request body: the object did not exist.
    pub fn created(mut self) -> Self {
        self.reply = Reply::EchoBody(StatusCode::CREATED);
        self
    }
    /// Answers an apply with 201 Created and `body`.
    pub fn created_as(mut self, body: Value) -> Self {
        self.reply = Reply::Json(StatusCode::CREATED, body);
        self
    }
    /// Answers with an apiserver error status.
    pub fn error(mut self, code: u16, message: &str) -> Self {
        self.reply = Reply::Json(
            StatusCode::from_u16(code).unwrap(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": message, "reason": "Invalid", "code": code}),
        );
        self
    }
    /// Answers a status patch with `object` carrying the status that was sent.
    pub fn respond_status_of(mut self, object: &impl serde::Serialize) -> Self {
        self.reply = Reply::WithStatus(serde_json::to_value(object).unwrap());
        self
    }
    pub fn not_found(mut self) -> Self {
        self.reply = Reply::Json(
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "not found", "reason": "NotFound", "code": 404}),
        );
        self
    }
    /// Answers a create with 409 AlreadyExists: an object of that name is there.
    pub fn already_exists(mut self) -> Self {
        self.reply = Reply::Json(
            StatusCode::CONFLICT,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "already exists", "reason": "AlreadyExists", "code": 409}),
        );
        self
    }
    pub fn conflict(mut self) -> Self {
        self.reply = Reply::Json(
            StatusCode::CONFLICT,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "the object has been modified", "reason": "Conflict", "code": 409}),
        );
        self
    }
}

pub struct Verifier(Handle<Request<Body>, Response<Body>>);

/// A running scenario; `finish` waits for it and fails on any extra call.
pub struct Scenario(JoinHandle<()>);

impl Verifier {
    pub fn run(self, calls: Vec<Call>) -> Scenario {
        let mut handle = self.0;
        Scenario(tokio::spawn(async move {
            for (i, call) in calls.into_iter().enumerate() {
                let (request, send) = handle
                    .next_request()
                    .await
                    .unwrap_or_else(|| panic!("call {i} never came: {} {}", call.method, call.uri));
                assert_eq!(
                    (request.method(), request.uri().to_string()),
                    (&call.method, call.uri.clone()),
                    "call {i}"
                );
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: Value = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).unwrap()
                };
                // A JSON patch (a status write) is checked as what it makes of an empty object,
                // `{"status": ...}`, when it applies to one.
                let body = match serde_json::from_value::<json_patch::Patch>(body.clone()) {
                    Ok(patch) => {
                        let mut made = json!({});
                        match json_patch::patch(&mut made, &patch) {
                            Ok(()) => made,
                            Err(_) => body,
                        }
                    }
                    Err(_) => body,
                };
                if let Some(check) = call.check {
                    check(&body);
                }
                let (status, reply) = match call.reply {
                    Reply::Json(status, v) => (status, v),
                    Reply::EchoBody(status) => (status, body),
                    Reply::WithStatus(mut object) => {
                        object["status"] = body["status"].clone();
                        (StatusCode::OK, object)
                    }
                };
                send.send_response(
                    Response::builder()
                        .status(status)
                        .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                        .unwrap(),
                );
            }
            if let Some((request, _)) = handle.next_request().await {
                panic!("unexpected call: {} {}", request.method(), request.uri());
            }
        }))
    }
}

impl Scenario {
    /// Drops the context (and so the client) and waits for the scenario to end cleanly.
    pub async fn finish<C>(self, ctx: Arc<C>) {
        drop(ctx);
        tokio::time::timeout(Duration::from_secs(5), self.0)
            .await
            .expect("the scenario did not end: is a client still alive?")
            .expect("the scenario failed");
    }
}

/// The requests of a mock apiserver, answered (or not) by the test.
pub type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// Starts `inventory`'s watches' runner on a mock apiserver of its own, as a run of the
/// controllers does; returns its handle and the sender that stops the watches.
pub fn start_inventory(
    inventory: &crate::scaler::inventory::Inventory,
) -> (ApiHandle, tokio::sync::watch::Sender<bool>) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let (wake, _woken) = futures::channel::mpsc::unbounded();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let health = kubesteer_runtime::health::Health::new(Duration::from_secs(60));
    inventory.start(Client::new(service, "default"), health, None, wake, stop);
    (handle, stop_tx)
}

/// The apiserver's answer to a list: no objects.
pub fn empty_list() -> Response<Body> {
    let body = json!({"apiVersion": "v1", "kind": "List",
                      "metadata": {"resourceVersion": "1"}, "items": []});
    Response::new(Body::from(body.to_string().into_bytes()))
}

/// Whether `request` is a watch (not the list before it).
pub fn is_watch(request: &Request<Body>) -> bool {
    request
        .uri()
        .query()
        .unwrap_or_default()
        .contains("watch=true")
}
