//! One fuzz input through the whole review path, and the invariants its answer keeps.
//! Shared by the fuzz target (webhook/fuzz) and the corpus replay test (tests/webhook/corpus.rs),
//! so it names crates only, never `super`.
use base64::Engine as _;
use futures::executor::block_on;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::Operation;
use kubesteer_api::access::Access;
use kubesteer_api::kind::Kind;
use kubesteer_api::scaler::claims::Claimant;
use kubesteer_api::scaler::target::Target;
use kubesteer_runtime::scale::Mapping;
use kubesteer_webhook::admission::{answer, Endpoint};
use kubesteer_webhook::cluster::Cluster;
use kubesteer_webhook::error::ApiError;
use kubesteer_webhook::review::{Answer, Review};
use kubesteer_webhook::AppState;
use serde_json::Value;

/// The eight endpoints; an input's first byte picks one.
pub const ENDPOINTS: [(Endpoint, Kind); 8] = [
    (Endpoint::Mutate, Kind::Scaler),
    (Endpoint::Validate, Kind::Scaler),
    (Endpoint::Mutate, Kind::Memcached),
    (Endpoint::Validate, Kind::Memcached),
    (Endpoint::Mutate, Kind::Welcome),
    (Endpoint::Validate, Kind::Welcome),
    (Endpoint::Mutate, Kind::Application),
    (Endpoint::Validate, Kind::Application),
];

/// A cluster with one fact of each sort, so every cluster rule has a branch to take.
/// Namespace "team": Deployment "web" exists, "claimed" is scaled by Scaler team/owner,
/// "autoscaled" has an HPA; anyone may scale there and read Secret team/pw, except the user
/// "sar-error", whose SubjectAccessReviews fail.
pub struct FuzzCluster;

impl Cluster for FuzzCluster {
    async fn permitted(&self, user: &UserInfo, access: &Access) -> Result<bool, String> {
        if user.username.as_deref() == Some("sar-error") {
            return Err("the apiserver did not answer".into());
        }
        Ok(access.namespace == "team"
            && (access.subresource == "scale"
                || access.resource == "horizontalpodautoscalers"
                || access.name == "pw"))
    }
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<Mapping, String> {
        Ok(super::mapping(api_version, kind))
    }
    fn claimant(&self, target: &Target, me: &Claimant) -> Option<String> {
        let claimed = (target.namespace.as_str(), target.name.as_str()) == ("team", "claimed");
        (claimed && me.id() != "team/owner").then(|| "team/owner".into())
    }
    fn target_exists(&self, target: &Target) -> Option<bool> {
        Some((target.namespace.as_str(), target.name.as_str()) == ("team", "web"))
    }
    fn hpa_for(&self, target: &Target) -> Option<String> {
        let autoscaled =
            (target.namespace.as_str(), target.name.as_str()) == ("team", "autoscaled");
        autoscaled.then(|| "web-hpa".into())
    }
    fn ingress_class_exists(&self, name: &str) -> Option<bool> {
        Some(name == "nginx")
    }
    fn ingresses_serving(&self, host: &str, path: &str, me: (&str, &str)) -> Vec<(String, String)> {
        let taken = host == "taken.example.com" && path == "/" && me != ("team", "site");
        taken
            .then(|| ("team".into(), "site".into()))
            .into_iter()
            .collect()
    }
}

/// The endpoint an input goes to and the body it sends.
pub fn split(input: &[u8]) -> Option<((Endpoint, Kind), &[u8])> {
    let (first, body) = input.split_first()?;
    Some((ENDPOINTS[usize::from(*first) % ENDPOINTS.len()], body))
}

/// Sends `input` through the review path and panics if the answer breaks an invariant.
pub fn check(input: &[u8]) {
    let Some(((endpoint, kind), body)) = split(input) else {
        return;
    };
    let reply = send(endpoint, kind, body);
    let review = match reply {
        Ok(review) => review,
        // What the apiserver sends always parses; the rest is its caller's mistake, a 400.
        Err(ApiError::BadReview(_)) => return,
        Err(e) => panic!("a known endpoint answered {e}"),
    };
    let sent: Review = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("answered a body that is not a review: {e}"));
    let Review {
        api_version,
        kind: review_kind,
        request,
    } = sent;
    let request = request.unwrap_or_else(|| panic!("answered a review without a request"));
    assert_eq!(review.response.uid, request.uid, "the answer's uid");

    // What the apiserver reads: the handler's JSON body.
    let json: Value = serde_json::to_vec(&review)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| panic!("the answer does not serialize to JSON"));
    // The apiserver wants its own apiVersion back (v1 today; kube does not check what it echoes).
    assert_eq!(json["apiVersion"], api_version.as_str());
    assert_eq!(json["kind"], review_kind.as_str());
    assert_eq!(json["response"]["uid"], request.uid.as_str());
    let allowed = json["response"]["allowed"]
        .as_bool()
        .unwrap_or_else(|| panic!("no allowed in {json}"));
    if !allowed {
        assert!(
            !json["response"]["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "a denial says why: {json}"
        );
    }
    let Some(patch) = patch_of(&json) else {
        return;
    };
    assert!(allowed, "a denial carries no patch: {json}");
    assert_eq!(endpoint, Endpoint::Mutate, "only mutate patches: {json}");
    assert_eq!(json["response"]["patchType"], "JSONPatch");
    assert!(
        matches!(request.operation, Operation::Create | Operation::Update),
        "{:?} is not patched",
        request.operation
    );
    let object = request
        .object
        .clone()
        .unwrap_or_else(|| panic!("a patch without an object"));
    // A Scaler's author (api's `access::author`): the one annotation the webhook writes.
    let author = format!(
        "/metadata/annotations/{}",
        kubesteer_api::keys::annotation::AUTHOR.replace('/', "~1")
    );
    let (authors, defaults): (Vec<_>, Vec<_>) = patch
        .0
        .iter()
        .partition(|op| op.path().as_str().starts_with("/metadata"));
    for op in authors {
        assert_eq!(
            kind,
            Kind::Scaler,
            "only a Scaler records its author: {op:?}"
        );
        // The author's annotation, or the annotations or metadata missing around it.
        let only_the_author = |value: &Value| {
            let keys: Vec<_> = value
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(keys, [kubesteer_api::keys::annotation::AUTHOR], "{op:?}");
        };
        match op {
            json_patch::PatchOperation::Add(add) if add.path.as_str() == "/metadata" => {
                only_the_author(&add.value["annotations"])
            }
            json_patch::PatchOperation::Add(add)
                if add.path.as_str() == "/metadata/annotations" =>
            {
                only_the_author(&add.value)
            }
            json_patch::PatchOperation::Add(add) => assert_eq!(add.path.as_str(), author),
            json_patch::PatchOperation::Remove(r) => assert_eq!(r.path.as_str(), author),
            other => panic!("the author is added or removed: {other:?}"),
        }
    }
    for op in defaults {
        let (path, before) = match op {
            json_patch::PatchOperation::Add(add) => (add.path.as_str(), None),
            json_patch::PatchOperation::Replace(r) => (r.path.as_str(), Some(&Value::Null)),
            other => panic!("defaulting only adds: {other:?}"),
        };
        assert!(
            path.starts_with("/spec/"),
            "defaulting stays in spec: {path}"
        );
        assert_eq!(
            object.pointer(path),
            before,
            "defaulting fills only what is missing or null: {path}"
        );
        // A default stored in a list item makes every client-side re-apply a change.
        let mut prefix = String::new();
        for token in path.split('/').skip(1) {
            assert!(
                !object.pointer(&prefix).is_some_and(Value::is_array),
                "defaulting never writes into a list item: {path}"
            );
            prefix = format!("{prefix}/{token}");
        }
    }
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch)
        .unwrap_or_else(|e| panic!("the patch does not apply: {e}: {patch:?}"));
    // The apiserver may call again with the patched object (reinvocationPolicy): no new patch.
    let mut request = request;
    request.object = Some(patched);
    let again = Review {
        api_version,
        kind: review_kind,
        request: Some(request),
    };
    let again = serde_json::to_vec(&again).unwrap_or_default();
    let second = send(endpoint, kind, &again)
        .ok()
        .and_then(|r| serde_json::to_value(r).ok())
        .unwrap_or_else(|| panic!("the patched object gets no answer"));
    assert_eq!(second["response"]["allowed"], true, "{second}");
    assert!(
        patch_of(&second).is_none(),
        "defaulting is idempotent, yet a second pass patches: {second}"
    );
}

/// One review through the path the HTTP handler takes, with a fresh state so an input's
/// answer never depends on the inputs before it.
pub fn send(endpoint: Endpoint, kind: Kind, body: &[u8]) -> Result<Answer, ApiError> {
    let state = AppState::new(FuzzCluster);
    block_on(answer(&state, endpoint, kind.plural(), body))
}

/// The JSON patch in a serialized response, if any; base64, as Go's `[]byte`.
fn patch_of(review: &Value) -> Option<json_patch::Patch> {
    let raw = review["response"].get("patch")?;
    if raw.is_null() {
        return None;
    }
    let bytes = raw
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_else(|| panic!("patch is not base64: {raw}"));
    Some(
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("the patch is not a JSONPatch: {e}")),
    )
}
