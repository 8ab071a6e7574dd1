//! The admission endpoints: decode, route by kind, answer with a patch, warnings or a denial.
//! Each kind's rules that need the cluster are in its own module, behind one trait, `Rules`.
mod application;
mod memcached;
mod scaler;
mod welcome;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{FromRef, Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use kube::core::admission::Operation;
use kubesteer_api::access::{author, Access, ImagePolicy};
use kubesteer_api::field::{summarize, FieldError, FieldErrors};
use kubesteer_api::kind::{Kind, Spec, ALL};
use kubesteer_runtime::{exposition, health, Health};
use serde_json::Value;

use crate::budget::{Budget, Received};
use crate::cluster::Cluster;
use crate::error::ApiError;
use crate::metrics::{KindLabels, Metrics, ReviewLabels};
use crate::permissions::Permissions;
use crate::review::{cut, meta, Answer, Request, Response, Review};

pub use crate::budget::MAX_BODY_BYTES;

/// Shared state of the handlers.
pub struct AppState<C> {
    pub cluster: C,
    /// Granted permissions of requesting users, asked of `cluster` and cached briefly.
    pub permissions: Permissions,
    pub metrics: Metrics,
    /// Readiness: the cluster's watches, and shutdown, which makes endpoints drop this replica
    /// while it still serves. Nothing is registered in a new state, so it is ready.
    pub health: Health,
    /// The images owned pods may run (`--allowed-images`); empty allows any.
    pub images: ImagePolicy,
    /// Whether an Application's Ingress may use ImplementationSpecific paths.
    pub implementation_specific_paths: bool,
    /// Whether an Application may have an Ingress for a host another namespace serves.
    pub host_sharing: bool,
    /// Whether a Scaler may reach only its own namespace (the chart's
    /// `webhook.scalersAcrossNamespaces: false`).
    pub scalers_own_namespace_only: bool,
    /// Bytes of request bodies read at once (`--request-body-budget`), for every POST route.
    pub budget: Budget,
}

impl<C> FromRef<Arc<AppState<C>>> for Budget {
    fn from_ref(state: &Arc<AppState<C>>) -> Budget {
        state.budget.clone()
    }
}

impl<C: Cluster> AppState<C> {
    pub fn new(cluster: C) -> Self {
        let metrics = Metrics::default();
        Self {
            cluster,
            permissions: Permissions::default().counted(metrics.subject_access_reviews.clone()),
            metrics,
            health: Health::default(),
            images: ImagePolicy::default(),
            implementation_specific_paths: false,
            host_sharing: false,
            scalers_own_namespace_only: false,
            budget: Budget::default(),
        }
    }
}

/// Which of the two webhooks a review was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Mutate,
    Validate,
}

impl Endpoint {
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Mutate => "mutate",
            Endpoint::Validate => "validate",
        }
    }
}

/// The webhook's routes: `/mutate/<plural>`, `/validate/<plural>`, `/convert`, health and metrics.
/// Bodies are read within `state.budget` ([`Received`]).
pub fn router<C: Cluster>(state: Arc<AppState<C>>) -> Router {
    Router::new()
        .route("/mutate/{plural}", post(mutate::<C>))
        .route("/validate/{plural}", post(validate::<C>))
        .route(crate::conversion::PATH, post(crate::conversion::convert))
        .route("/metrics", get(metrics::<C>))
        .with_state(state.clone())
        .merge(health::routes(state.health.clone()))
}

async fn metrics<C: Cluster>(
    State(state): State<Arc<AppState<C>>>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    exposition::respond(&headers, state.metrics.encode())
}

async fn mutate<C: Cluster>(
    state: State<Arc<AppState<C>>>,
    plural: Path<String>,
    body: Received,
) -> Result<Json<Answer>, ApiError> {
    review(state, plural, body, Endpoint::Mutate).await
}

async fn validate<C: Cluster>(
    state: State<Arc<AppState<C>>>,
    plural: Path<String>,
    body: Received,
) -> Result<Json<Answer>, ApiError> {
    review(state, plural, body, Endpoint::Validate).await
}

async fn review<C: Cluster>(
    State(state): State<Arc<AppState<C>>>,
    Path(plural): Path<String>,
    body: Received,
    endpoint: Endpoint,
) -> Result<Json<Answer>, ApiError> {
    let started = Instant::now();
    let kind = kind_of(endpoint, &plural)?;
    let review = crate::budget::apart(&body, read).await?;
    answered(&state, kind, endpoint, review, started)
        .await
        .map(Json)
}

/// The whole review path without HTTP: a raw body sent to `/<endpoint>/<plural>` in, the
/// AdmissionReview answered (or why the body cannot be answered) out. Cluster facts and
/// permission checks come from `state.cluster`; the fuzz target (webhook/fuzz) calls this.
pub async fn answer<C: Cluster>(
    state: &AppState<C>,
    endpoint: Endpoint,
    plural: &str,
    body: &[u8],
) -> Result<Answer, ApiError> {
    let started = Instant::now();
    let kind = kind_of(endpoint, plural)?;
    answered(state, kind, endpoint, read(body)?, started).await
}

/// The kind `/<endpoint>/<plural>` admits.
fn kind_of(endpoint: Endpoint, plural: &str) -> Result<Kind, ApiError> {
    ALL.into_iter()
        .find(|k| k.plural() == plural)
        .ok_or_else(|| ApiError::NotFound(format!("/{}/{plural}", endpoint.name())))
}

/// The review in a body, as far as `review.rs` reads one.
fn read(body: &[u8]) -> Result<Review, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadReview(e.to_string()))
}

/// The answer to a review read, logged and counted.
async fn answered<C: Cluster>(
    state: &AppState<C>,
    kind: Kind,
    endpoint: Endpoint,
    review: Review,
    started: Instant,
) -> Result<Answer, ApiError> {
    let Some(request) = review.request else {
        return Err(ApiError::BadReview(
            "the review carries no request".to_string(),
        ));
    };
    let (response, result) = decide(state, kind, endpoint, &request).await;
    let operation = request.operation_name();
    if !response.allowed {
        tracing::info!(
            kind = kind.name(),
            endpoint = endpoint.name(),
            // Names are the sender's: a name of megabytes is no reason for a log line of them.
            namespace = cut(request.namespace.clone().unwrap_or_default(), 256),
            name = cut(request.name.clone(), 256),
            user = cut(request.user_info.username.clone().unwrap_or_default(), 256),
            reason = response.message(),
            "denied"
        );
    }
    state
        .metrics
        .reviews
        .get_or_create(&ReviewLabels {
            kind: kind.name(),
            endpoint: endpoint.name(),
            operation,
            result,
        })
        .inc();
    state
        .metrics
        .duration
        .get_or_create(&KindLabels {
            kind: kind.name(),
            endpoint: endpoint.name(),
        })
        .observe(started.elapsed().as_secs_f64());
    Ok(Answer {
        api_version: review.api_version,
        kind: review.kind,
        response,
    })
}

/// The answer to one request, and its result label for metrics.
async fn decide<C: Cluster>(
    state: &AppState<C>,
    kind: Kind,
    endpoint: Endpoint,
    request: &Request,
) -> (Response, &'static str) {
    let allowed = Response::allow(&request.uid);
    if request.kind.group != kubesteer_api::GROUP || request.kind.kind != kind.name() {
        let got = format!("{}/{}", request.kind.group, request.kind.kind);
        let message = format!(
            "this endpoint admits {}.{}, not {got}",
            kind.name(),
            kubesteer_api::GROUP
        );
        return (allowed.deny(message), "wrong-kind");
    }
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return (allowed, "allowed");
    }
    let Some(object) = &request.object else {
        return (allowed.deny("the review carries no object"), "denied");
    };
    let old = request.old_object.as_ref();
    // A Scaler records who set its spec, for the controller to check their rights while it acts
    // (api's `access::author`): the mutation writes it, the validation refuses any other value.
    let mut author_ops = Vec::new();
    if kind == Kind::Scaler {
        match endpoint {
            Endpoint::Mutate => {
                let want = author::after(old, object, &request.user_info);
                author_ops = author::patch(object, want.as_deref());
            }
            Endpoint::Validate => {
                if let Some(error) = author::check(old, object, &request.user_info) {
                    let name = meta(object, "name").unwrap_or_default();
                    return (
                        allowed.deny(summarize(kind.name(), name, &[error])),
                        "denied",
                    );
                }
            }
        }
    }
    // An UPDATE that leaves the spec as it was (metadata only) is admitted whoever sends it:
    // nothing the rules or the permission checks guard changes (api's `kind::rechecks`). So the
    // controller's finalizer patch, or a label by a user who may not scale the targets, passes.
    if !kubesteer_api::kind::rechecks(old, object) {
        return patched(allowed, author_ops);
    }
    // An object on its way out is not defaulted again; a change of its spec is still checked,
    // or a held object could be edited into nonsense.
    let deleting = object
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_null());
    if deleting && matches!(endpoint, Endpoint::Mutate) {
        return patched(allowed, author_ops);
    }
    let value = object;
    let namespace = request
        .namespace
        .as_deref()
        .or_else(|| meta(object, "namespace"))
        .unwrap_or_default()
        .to_string();
    let name = if request.name.is_empty() {
        meta(object, "name")
            .or_else(|| meta(object, "generateName"))
            .unwrap_or_default()
            .to_string()
    } else {
        request.name.clone()
    };
    match endpoint {
        Endpoint::Mutate => match kind.defaulting_patch(value) {
            Ok(patch) => {
                author_ops.extend(patch.0);
                patched(allowed, author_ops)
            }
            Err(errors) => (
                allowed.deny(summarize(kind.name(), &name, &errors)),
                "denied",
            ),
        },
        Endpoint::Validate => {
            // The spec is read once: for its own rules, its image and the cluster's rules.
            let spec = match kind.spec(value) {
                Ok(spec) => spec,
                Err(errors) => {
                    return (
                        allowed.deny(summarize(kind.name(), &name, &errors)),
                        "denied",
                    )
                }
            };
            let (mut errors, mut warnings) = match spec.validate(chrono::Utc::now()) {
                Ok(warnings) => (FieldErrors::new(), warnings),
                Err(errors) => (errors, Vec::new()),
            };
            if let Some(error) = image_refused(state, kind, request, &spec) {
                errors.push(error);
            }
            if errors.is_empty() {
                let mut on = Admitting {
                    state,
                    request,
                    object,
                    namespace: &namespace,
                    name: &name,
                    errors: &mut errors,
                    warnings: &mut warnings,
                };
                match &spec {
                    Spec::Scaler(spec) => spec.check(&mut on).await,
                    Spec::Welcome(spec) => spec.check(&mut on).await,
                    Spec::Memcached(spec) => spec.check(&mut on).await,
                    Spec::Application(spec) => spec.check(&mut on).await,
                }
            }
            if errors.is_empty() {
                let mut response = allowed;
                if !warnings.is_empty() {
                    response.warnings = Some(warnings);
                }
                (response, "allowed")
            } else {
                (
                    allowed.deny(summarize(kind.name(), &name, &errors)),
                    "denied",
                )
            }
        }
    }
}

/// `allowed` with `ops` as its JSON patch, when there are any.
fn patched(allowed: Response, ops: Vec<json_patch::PatchOperation>) -> (Response, &'static str) {
    if ops.is_empty() {
        return (allowed, "allowed");
    }
    match allowed.clone().with_patch(&json_patch::Patch(ops)) {
        Ok(patched) => (patched, "patched"),
        Err(e) => (
            allowed.deny(format!("patch cannot be encoded: {e}")),
            "error",
        ),
    }
}

/// The error when the image the object's pods would run is refused by the image policy: on
/// CREATE, and on UPDATE when the image changes, so an object admitted before a stricter policy
/// can still be edited otherwise (and lose its finalizers).
fn image_refused<C>(
    state: &AppState<C>,
    kind: Kind,
    request: &Request,
    spec: &Spec,
) -> Option<FieldError> {
    let image = spec.image()?;
    let old = request.old_object.as_ref().and_then(|o| kind.image(o));
    if old.as_deref() == Some(image.as_str()) {
        return None;
    }
    state.images.check(&image)
}

/// One kind's rules that need more than its spec: the cluster, the author's permissions, the
/// webhook's flags or the old object. Each kind implements them on its spec type, in its own
/// module; [`decide`] calls them once the spec's own rules (api's `Spec::validate`) and the image
/// policy passed. A denial goes to `errors`, advice to `warnings`.
trait Rules {
    /// Adds to `on.errors` and `on.warnings`; none by default (a kind whose rules need no
    /// cluster).
    async fn check<C: Cluster>(&self, _on: &mut Admitting<'_, C>) {}
}

/// The review a kind's [`Rules`] judge: the state, the request, its object, and the object's
/// namespace and name (the request's, else the object's own, else its generateName).
struct Admitting<'a, C> {
    state: &'a AppState<C>,
    request: &'a Request,
    object: &'a Value,
    namespace: &'a str,
    name: &'a str,
    errors: &'a mut FieldErrors,
    warnings: &'a mut Vec<String>,
}

/// Asks whether the author holds each permission of `required`, all at once.
async fn ask_all<C: Cluster>(
    state: &AppState<C>,
    request: &Request,
    required: &[(String, Access)],
) -> Vec<Result<bool, String>> {
    let user = &request.user_info;
    futures::future::join_all(
        required
            .iter()
            .map(|(_, access)| state.permissions.check(&state.cluster, user, access)),
    )
    .await
}

/// The object's spec as `T`, if it reads as one.
fn read_spec<T: serde::de::DeserializeOwned>(object: &Value) -> Option<T> {
    object.get("spec").and_then(|s| T::deserialize(s).ok())
}

/// Whether a permission check passed; if not, the denial naming `path` and what is missing.
fn permitted(
    request: &Request,
    path: &str,
    access: &Access,
    answer: Result<bool, String>,
    errors: &mut FieldErrors,
) -> bool {
    let user = request.user_info.username.as_deref().unwrap_or("(unknown)");
    let detail = match answer {
        Ok(true) => return true,
        Ok(false) => format!("user {user:?} may not {access}"),
        Err(e) => format!("could not check whether user {user:?} may {access}: {e}"),
    };
    errors.push(FieldError::forbidden(path, detail));
    false
}
