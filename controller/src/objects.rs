//! Building blocks of owned objects: labels, owner references, security context, time.
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSpec, PodTemplateSpec, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::client::Body;
use kube::core::object::HasStatus;
use kube::core::{NamespaceResourceScope, Status};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};
use kubesteer_api::common::{condition, READY};
use kubesteer_api::{MemcachedStatus, WelcomeStatus};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::cache::NameConflict;
use crate::{Context, Error, Result};

pub const NAME_LABEL: &str = "app.kubernetes.io/name";
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "kubesteer";
/// The reason of the Ready condition and of the Warning event when a child's name is taken.
pub const NAME_CONFLICT: &str = "NameConflict";

/// The labels of every object owned by instance `instance` of app `app`.
pub fn labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    let mut l = selector_labels(app, instance);
    l.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    l
}

/// The labels a Deployment selects its pods by; they never change, as a selector cannot.
pub fn selector_labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), app.to_string()),
        (INSTANCE_LABEL.to_string(), instance.to_string()),
    ])
}

/// `selector_labels` as a label selector string.
pub fn selector_string(app: &str, instance: &str) -> String {
    format!("{NAME_LABEL}={app},{INSTANCE_LABEL}={instance}")
}

/// The label selector of everything kubesteer owns of `app`, for watches.
pub fn owned_by_kubesteer(app: &str) -> String {
    format!("{NAME_LABEL}={app},{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// The namespace and name of a namespaced custom resource.
pub fn namespace_and_name<K: Resource>(kind: &'static str, obj: &K) -> Result<(String, String)> {
    let name = obj.name_any();
    let ns = obj.namespace().ok_or_else(|| Error::MissingField {
        kind,
        name: name.clone(),
        what: "namespace",
    })?;
    Ok((ns, name))
}

/// Metadata of a child named `name`, labelled, and controlled by `owner` so GC deletes it.
pub fn child_meta<K>(
    kind: &'static str,
    owner: &K,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta>
where
    K: Resource<DynamicType = ()>,
{
    let owner_ref = owner
        .controller_owner_ref(&())
        .ok_or_else(|| Error::MissingField {
            kind,
            name: owner.name_any(),
            what: "uid",
        })?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: owner.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref]),
        ..ObjectMeta::default()
    })
}
/// A Deployment spec of `replicas` pods of one `container`, labelled for `app`/`instance`.
pub fn deployment_spec(
    app: &str,
    instance: &str,
    replicas: i32,
    container: Container,
) -> DeploymentSpec {
    DeploymentSpec {
        replicas: Some(replicas),
        selector: LabelSelector {
            match_labels: Some(selector_labels(app, instance)),
            ..LabelSelector::default()
        },
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels(app, instance)),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: vec![container],
                // Owned workloads never talk to the apiserver: no token for an image to steal.
                automount_service_account_token: Some(false),
                ..PodSpec::default()
            }),
        },
        ..DeploymentSpec::default()
    }
}

/// The restricted Pod Security Standard for a container running as `user`.
pub fn restricted_security_context(user: i64) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(user),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..SecurityContext::default()
    }
}

/// Server-side apply under kubesteer's one field manager, taking over fields from hand edits.
pub fn apply_params() -> PatchParams {
    PatchParams::apply(crate::FIELD_MANAGER).force()
}

/// A create under kubesteer's field manager: unlike an apply, it never touches an existing object.
/// Only for Secrets, which the controller may not read; other children are created by
/// `create_by_apply`, so that their fields belong to the manager's Apply entry and a later apply
/// can remove them (a POST's fields stay with an Update entry that no apply clears).
pub fn create_params() -> PostParams {
    PostParams {
        field_manager: Some(crate::FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

/// An object as the apiserver stored it after a server-side apply.
pub struct Applied<K> {
    pub object: K,
    /// Whether this apply created the object, rather than finding it there.
    pub created: bool,
}

/// Server-side applies the namespaced `obj`. Unlike `Api::patch` it keeps the answer's status
/// code, as 201 Created is the one exact sign that the object did not exist before.
pub async fn apply<K>(client: &Client, obj: &K) -> Result<Applied<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    apply_with(client, obj, &apply_params()).await
}

/// Server-side applies `obj`, which was just read as missing, without force: should someone else
/// have made an object of that name meanwhile, a field both set answers 409 Conflict instead of
/// being taken over.
pub async fn create_by_apply<K>(client: &Client, obj: &K) -> Result<Applied<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    apply_with(client, obj, &PatchParams::apply(crate::FIELD_MANAGER)).await
}

async fn apply_with<K>(client: &Client, obj: &K, params: &PatchParams) -> Result<Applied<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    let missing = |what| Error::MissingField {
        kind: "child",
        name: obj.name_any(),
        what,
    };
    let ns = obj
        .meta()
        .namespace
        .as_deref()
        .ok_or_else(|| missing("namespace"))?;
    let name = obj.meta().name.as_deref().ok_or_else(|| missing("name"))?;
    let request = kube::core::Request::new(K::url_path(&(), Some(ns)))
        .patch(name, params, &Patch::Apply(obj))
        .map_err(kube::Error::BuildRequest)?;
    let response = client.send(request.map(Body::from)).await?;
    let code = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await?;
    if code >= 400 {
        // The same error `Api::patch` gives, so conflicts and the like are recognised alike.
        let status = serde_json::from_slice::<Status>(&bytes).unwrap_or_else(|_| {
            Status::failure(
                &String::from_utf8_lossy(&bytes),
                "Failed to parse error data",
            )
            .with_code(code)
        });
        return Err(kube::Error::Api(status.boxed()).into());
    }
    Ok(Applied {
        object: serde_json::from_slice(&bytes)?,
        created: code == 201,
    })
}

/// How often a blocked owner looks again: a foreign object may lack our labels, so no event comes.
pub const NAME_CONFLICT_REQUEUE: std::time::Duration = std::time::Duration::from_secs(60);

/// `previous` with Ready turned False, reason `NameConflict`, naming every conflicting object.
pub fn name_conflict_conditions(
    owner_kind: &str,
    previous: &[Condition],
    conflicts: &[NameConflict],
    generation: Option<i64>,
    now: Time,
) -> Vec<Condition> {
    let message = conflicts
        .iter()
        .map(|c| c.describe(owner_kind))
        .collect::<Vec<_>>()
        .join("; ");
    let ready = condition(
        READY,
        false,
        NAME_CONFLICT,
        message,
        generation,
        now,
        previous,
    );
    let mut conditions: Vec<Condition> = previous.to_vec();
    match conditions.iter_mut().find(|c| c.type_ == READY) {
        Some(c) => *c = ready,
        None => conditions.insert(0, ready),
    }
    conditions
}

/// The note of a "Created" event naming `children` (e.g. "Deployment cache"), if any.
pub fn created_note(children: &[String]) -> Option<String> {
    (!children.is_empty()).then(|| format!("Created {}", children.join(", ")))
}

/// A server-side apply patch of a custom resource's status.
pub fn status_patch<K>(status: &impl serde::Serialize) -> Patch<serde_json::Value>
where
    K: Resource<DynamicType = ()>,
{
    Patch::Apply(serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    }))
}

/// A Kubernetes time from a UTC instant, to whole seconds as the API stores it, so a status
/// computed twice compares equal.
pub fn time(at: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(at.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The status of an owner kind: conditions and the generation they describe.
pub trait OwnerStatus: Default + Clone + PartialEq + Serialize {
    fn conditions(&self) -> &[Condition];
    fn observe(&mut self, generation: Option<i64>, conditions: Vec<Condition>);
}

impl OwnerStatus for MemcachedStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn observe(&mut self, generation: Option<i64>, conditions: Vec<Condition>) {
        self.observed_generation = generation;
        self.conditions = conditions;
    }
}

impl OwnerStatus for WelcomeStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn observe(&mut self, generation: Option<i64>, conditions: Vec<Condition>) {
        self.observed_generation = generation;
        self.conditions = conditions;
    }
}

/// Reports taken child names of `owner` as Ready=False NameConflict, with a Warning event when
/// that is news, and looks again after `NAME_CONFLICT_REQUEUE`.
pub async fn report_conflicts<K>(
    ctx: &Context,
    kind: &'static str,
    owner: &K,
    conflicts: &[NameConflict],
) -> Result<Action>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + HasStatus
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::Status: OwnerStatus,
{
    let (ns, name) = namespace_and_name(kind, owner)?;
    let generation = owner.meta().generation;
    let mut status = owner.status().cloned().unwrap_or_default();
    let conditions = name_conflict_conditions(
        kind,
        status.conditions(),
        conflicts,
        generation,
        time(ctx.clock.now()),
    );
    status.observe(generation, conditions);
    if owner.status() != Some(&status) {
        let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(&name, &apply_params(), &status_patch::<K>(&status))
            .await?;
        ctx.status_written(kind, owner);
        let note = conflicts
            .iter()
            .map(|c| c.describe(kind))
            .collect::<Vec<_>>()
            .join("; ");
        ctx.publish(owner, EventType::Warning, NAME_CONFLICT, note)
            .await;
    }
    Ok(Action::requeue(NAME_CONFLICT_REQUEUE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_whole_seconds() {
        let at = DateTime::parse_from_rfc3339("2025-03-01T09:00:00.750Z")
            .unwrap()
            .with_timezone(&Utc);
        let t = time(at);
        assert_eq!(serde_json::to_value(&t).unwrap(), "2025-03-01T09:00:00Z");
    }
}
