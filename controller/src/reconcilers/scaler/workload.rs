//! A Scaler's target as the controller reads it, shared by the Scaler's reconcile and the
//! inventory of selected targets: what was read of it ([`Current`]) and where its replicas
//! live. Its name and address is the API's
//! [`Target`](kubesteer_api::scaler::target::Target), whose version says where to reach it.
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject};
use kubesteer_api::scaler::savings::{template_requests, PodRequests};
use kubesteer_api::scaler::v1beta1::asleep_by;
use serde_json::Value;

/// One target as read: its metadata and its replicas from `/scale`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Current {
    pub annotations: BTreeMap<String, String>,
    pub resource_version: Option<String>,
    pub replicas: i32,
    /// When the target was created or its pod template last written, whichever is later: a
    /// held target is left alone for the grace period after it (a rollout).
    pub settled_from: Option<DateTime<Utc>>,
    /// The field manager that owns its replicas (who scaled it last), from managedFields.
    pub scaled_by: Option<String>,
    /// Read from the watch's cache rather than from the apiserver: every write of it is then
    /// conditional on its resourceVersion, and a conflict reads it afresh.
    pub cached: bool,
    /// One pod's requests, for the kinds read whole that have a pod template (the savings).
    pub requests: Option<PodRequests>,
}

impl Current {
    pub fn of(meta: &ObjectMeta, replicas: i32) -> Self {
        Self::keeping(meta, replicas, |_| true)
    }

    /// Like [`Current::of`], with only the annotations whose key `keep` accepts.
    pub fn keeping(meta: &ObjectMeta, replicas: i32, keep: impl Fn(&str) -> bool) -> Self {
        let (settled_from, scaled_by) = provenance(meta);
        Self {
            annotations: kept(meta.annotations.iter().flatten(), keep),
            resource_version: meta.resource_version.clone(),
            replicas,
            settled_from,
            scaled_by,
            cached: false,
            requests: None,
        }
    }

    /// With the requests of one pod of `object`'s template, if it has one.
    pub fn with_requests_of(self, object: &DynamicObject) -> Self {
        Self {
            requests: template_requests(&object.data["spec"]),
            ..self
        }
    }
}

/// Copies of the annotations whose key `keep` accepts; an empty map allocates nothing.
pub fn kept<'a>(
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<String, String> {
    annotations
        .into_iter()
        .filter(|(k, _)| keep(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// From a target's managedFields: the later of its creation and the last write by a manager
/// that owns its pod template, and the manager that owns its replicas.
pub fn provenance(meta: &ObjectMeta) -> (Option<DateTime<Utc>>, Option<String>) {
    let created = meta.creation_timestamp.as_ref().map(|t| t.0);
    let owns = |fields: &Value, field: &str| fields["f:spec"].get(field).is_some();
    let mut settled = created
        .and_then(|t| DateTime::from_timestamp(t.as_second(), 0))
        .into_iter()
        .collect::<Vec<_>>();
    let mut scaled_by = None;
    for entry in meta.managed_fields.iter().flatten() {
        let Some(fields) = entry.fields_v1.as_ref().map(|f| &f.0) else {
            continue;
        };
        if owns(fields, "f:template") {
            if let Some(at) = entry
                .time
                .as_ref()
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
            {
                settled.push(at);
            }
        }
        if owns(fields, "f:replicas") {
            scaled_by = entry.manager.clone();
        }
    }
    (settled.into_iter().max(), scaled_by)
}

/// Whether `resource`'s /scale is its own `spec.replicas` (the apps/v1 workloads), so that one
/// merge patch of the object can set the replicas and the record together.
pub fn replicas_in_spec(resource: &ApiResource) -> bool {
    replicas_in_spec_kind(&resource.group, &resource.kind)
}

pub use kubesteer_api::scaler::patches::replicas_in_spec_kind;

/// The `spec.replicas` of an apps/v1 workload (defaulted by the apiserver, so always there); a
/// suspended kind's replicas, 0 while suspended and 1 while not.
pub fn spec_replicas(resource: &ApiResource, object: &DynamicObject) -> Option<i32> {
    if let Some(asleep) = asleep_by(&resource.group, &resource.plural) {
        return Some(if asleep.is_asleep(&object.data["spec"]) {
            0
        } else {
            1
        });
    }
    object.data["spec"]["replicas"]
        .as_i64()
        .and_then(|r| i32::try_from(r).ok())
}
