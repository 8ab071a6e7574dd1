//! The admission endpoints: decode, route by kind, answer with a patch, warnings or a denial.
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{FromRef, Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::admission::Operation;
use kubesteer_api::access::{Access, ImagePolicy};
use kubesteer_api::field::{summarize, FieldError, FieldErrors};
use kubesteer_api::kind::{Kind, Spec, ALL};
use kubesteer_api::scaler::claims::Claimant;
use kubesteer_api::scaler::v1beta1::HpaCooperation;
use kubesteer_api::{ApplicationSpec, ScalerSpec, WelcomeSpec};
use kubesteer_runtime::scale::Unscalable;
use kubesteer_runtime::{exposition, health, Health};
use serde::Deserialize as _;
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
    // An UPDATE that leaves the spec as it was (metadata only) is admitted whoever sends it:
    // nothing the rules or the permission checks guard changes (api's `kind::rechecks`). So the
    // controller's finalizer patch, or a label by a user who may not scale the targets, passes.
    if !kubesteer_api::kind::rechecks(request.old_object.as_ref(), object) {
        return (allowed, "allowed");
    }
    // An object on its way out is not defaulted again; a change of its spec is still checked,
    // or a held object could be edited into nonsense.
    let deleting = object
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_null());
    if deleting && matches!(endpoint, Endpoint::Mutate) {
        return (allowed, "allowed");
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
            Ok(patch) if patch.0.is_empty() => (allowed, "allowed"),
            Ok(patch) => match allowed.clone().with_patch(&patch) {
                Ok(patched) => (patched, "patched"),
                Err(e) => (
                    allowed.deny(format!("patch cannot be encoded: {e}")),
                    "error",
                ),
            },
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
                let me = (namespace.as_str(), name.as_str());
                let (e, w) = (&mut errors, &mut warnings);
                match &spec {
                    Spec::Scaler(spec) => {
                        // Who claims a shared target first: its age and uid decide.
                        let me = Claimant {
                            namespace: namespace.clone(),
                            name: name.clone(),
                            uid: meta(object, "uid").unwrap_or_default().to_string(),
                            created: object
                                .get("metadata")
                                .and_then(|m| m.get("creationTimestamp"))
                                // A null one (a CREATE's) is no time: not read into an error.
                                .filter(|t| !t.is_null())
                                .and_then(|t| Time::deserialize(t).ok())
                                .map(|t| t.0),
                        };
                        scaler_rules(state, request, spec, &me, e, w).await
                    }
                    Spec::Welcome(spec) => welcome_rules(state, request, spec, me.0, e).await,
                    Spec::Application(spec) => {
                        application_rules(state, request, spec, me, e, w).await
                    }
                    Spec::Memcached(_) => {}
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

/// The Scaler rules that need the cluster or the Scaler's namespace: targets that are one
/// once resolved, permission on every target, claims, and advice.
async fn scaler_rules<C: Cluster>(
    state: &AppState<C>,
    request: &Request,
    spec: &ScalerSpec,
    me: &Claimant,
    errors: &mut FieldErrors,
    warnings: &mut Vec<String>,
) {
    let duplicates = spec.duplicate_targets(&me.namespace);
    if !duplicates.is_empty() {
        errors.extend(duplicates);
        return;
    }
    if state.scalers_own_namespace_only {
        let outside = spec.beyond_own_namespace(&me.namespace);
        if !outside.is_empty() {
            errors.extend(outside);
            return;
        }
    }
    let cluster = &state.cluster;
    // Each target's and selected kind's kind through the RESTMapper: one the cluster cannot
    // scale is denied here.
    let selected = spec
        .selector
        .as_ref()
        .map(|s| s.kinds())
        .unwrap_or_default();
    let named = spec.scale_target_refs.iter().enumerate().map(|(i, t)| {
        (
            format!("spec.scaleTargetRefs[{i}].kind"),
            &t.api_version,
            &t.kind,
        )
    });
    let chosen = selected.iter().enumerate().map(|(i, (v, k))| {
        let path = match spec.selector.as_ref().and_then(|s| s.kinds.as_ref()) {
            Some(_) => format!("spec.selector.kinds[{i}].kind"),
            None => "spec.selector".to_string(),
        };
        (path, v, k)
    });
    let mut resources = std::collections::BTreeMap::new();
    for (path, api_version, kind) in named.chain(chosen) {
        match cluster.resolve(api_version, kind).await {
            Ok(Ok(resource)) => {
                resources.insert((api_version.clone(), kind.clone()), resource.plural);
            }
            Ok(Err(why)) => {
                errors.push(FieldError::invalid(path, kind.as_str(), why.to_string()));
            }
            Err(e) => {
                errors.push(FieldError::forbidden(
                    path,
                    format!(
                        "could not look the kind up in the cluster's discovery, try again: {e}"
                    ),
                ));
            }
        }
    }
    if !errors.is_empty() {
        return;
    }
    let mut required = spec.required_access(&me.namespace, |api_version, kind| {
        resources
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
    });
    // A target whose HPA is a KEDA ScaledObject's is paused through that ScaledObject, which
    // its author must be able to do too: a named one whose HPA is KEDA's now, and, where the
    // cluster serves KEDA, any a selector may pick.
    if spec.hpa_cooperation() == HpaCooperation::Enabled {
        let mut keda_namespaces = std::collections::BTreeMap::new();
        for (i, (target, ns)) in spec.targets(&me.namespace).enumerate() {
            if cluster.keda_scales(&target.target(ns)) {
                keda_namespaces
                    .entry(ns.to_string())
                    .or_insert(format!("spec.scaleTargetRefs[{i}]"));
            }
        }
        if let Some(selector) = &spec.selector {
            let keda = cluster.resolve("keda.sh/v1alpha1", "ScaledObject").await;
            if matches!(
                keda,
                Ok(Err(Unscalable::NoScaleSubresource { .. })) | Ok(Ok(_))
            ) {
                let searched: Vec<&str> = match selector.listed_namespaces(&me.namespace) {
                    Some(listed) => listed.into_iter().collect(),
                    None => vec![""],
                };
                for ns in searched {
                    keda_namespaces
                        .entry(ns.to_string())
                        .or_insert("spec.selector".to_string());
                }
            }
        }
        required.extend(
            keda_namespaces
                .into_iter()
                .map(|(ns, path)| (path, Access::patch_scaled_objects(&ns))),
        );
    }
    // Targets are unique (checked above), so each SubjectAccessReview is asked once.
    let answers = ask_all(state, request, &required).await;
    let mut refused = std::collections::BTreeSet::new();
    for ((path, access), answer) in required.iter().zip(answers) {
        // Anything about a target the author may not scale would tell them whether it exists.
        if !permitted(request, path, access, answer, errors) {
            refused.insert(path.clone());
        }
    }
    let cooperate = spec.hpa_cooperation() == HpaCooperation::Enabled;
    for (i, (target, ns)) in spec.targets(&me.namespace).enumerate() {
        let path = format!("spec.scaleTargetRefs[{i}]");
        if refused.contains(&path) {
            continue;
        }
        let target = target.target(ns);
        if let Some(other) = cluster.claimant(&target, me) {
            errors.push(FieldError::forbidden(
                path.clone(),
                format!("{target} is already scaled by Scaler {other}"),
            ));
        } else if let Some(other) = cluster.holder(&target, me) {
            warnings.push(format!(
                "{path}: {target} is scaled now by Scaler {other}, which does not name it; it lets it go to this Scaler"
            ));
        }
        if cluster.target_exists(&target) == Some(false) {
            warnings.push(format!(
                "{path}: {target} does not exist yet; it is scaled once it appears"
            ));
        }
        if let Some(hpa) = cluster.hpa_for(&target) {
            warnings.push(if cooperate {
                format!(
                    "{path}: {target} is scaled by HorizontalPodAutoscaler {hpa}; the Scaler sets that HPA's minReplicas (recording and restoring the original) instead of the replicas"
                )
            } else {
                format!(
                    "{path}: {target} is also scaled by HorizontalPodAutoscaler {hpa}; with hpaCooperation Disabled they will fight over replicas"
                )
            });
        }
    }
}

/// The Welcome rule that needs the cluster: its author may read the Secret it references.
async fn welcome_rules<C: Cluster>(
    state: &AppState<C>,
    request: &Request,
    spec: &WelcomeSpec,
    namespace: &str,
    errors: &mut FieldErrors,
) {
    let old = request
        .old_object
        .as_ref()
        .and_then(read_spec::<WelcomeSpec>);
    if let Some((path, access)) = spec.required_access(namespace, old.as_ref()) {
        let answer = state
            .permissions
            .check(&state.cluster, &request.user_info, &access)
            .await;
        permitted(request, &path, &access, answer, errors);
    }
}

/// The Application rules that need the cluster: its author may read every Secret and ConfigMap
/// its environment takes values from; advice about its IngressClass and about another Ingress
/// that serves the same host and path, named only to an author who may get it.
async fn application_rules<C: Cluster>(
    state: &AppState<C>,
    request: &Request,
    spec: &ApplicationSpec,
    me: (&str, &str),
    errors: &mut FieldErrors,
    warnings: &mut Vec<String>,
) {
    let old = request
        .old_object
        .as_ref()
        .and_then(read_spec::<ApplicationSpec>);
    if let Some(refused) = spec.path_type_refused(old.as_ref(), state.implementation_specific_paths)
    {
        errors.push(refused);
    }
    let required = spec.required_access(me.0, old.as_ref());
    let (cluster, user) = (&state.cluster, &request.user_info);
    let answers = ask_all(state, request, &required).await;
    for ((path, access), answer) in required.iter().zip(answers) {
        permitted(request, path, access, answer, errors);
    }
    let Some(ingress) = spec.ingress.as_ref().filter(|_| errors.is_empty()) else {
        return;
    };
    if let Some(host) = spec.new_host(old.as_ref()).filter(|_| !state.host_sharing) {
        if let Some((ns, name)) = cluster.host_owner(host, me.0) {
            // Named only to an author who may read that Ingress.
            let readable = state
                .permissions
                .check(cluster, user, &Access::get_ingress(&ns, &name))
                .await
                == Ok(true);
            let owner = format!("{ns}/{name}");
            errors.push(kubesteer_api::application::host_taken(
                host,
                readable.then_some(owner.as_str()),
            ));
            return;
        }
    }
    if let Some(class) = &ingress.class_name {
        if cluster.ingress_class_exists(class) == Some(false) {
            warnings.push(format!(
                "spec.ingress.className: no IngressClass {class:?} exists in this cluster; no Ingress controller serves the Ingress until one does"
            ));
        }
    }
    let path = ingress.path();
    for (ns, name) in cluster.ingresses_serving(&ingress.host, path, me) {
        let access = Access::get_ingress(&ns, &name);
        // An Ingress the author may not read is not named, nor is it said that it exists.
        if state.permissions.check(cluster, user, &access).await == Ok(true) {
            warnings.push(format!(
                "spec.ingress.host: Ingress {ns}/{name} already serves host {:?} path {path:?}; the Ingress controller picks one of them",
                ingress.host
            ));
        }
    }
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
