//! Storage version migration: once an object has been stored at a version, its CRD lists that
//! version in `status.storedVersions` for good, and the version can never be dropped. The
//! leader rewrites every object of a kubesteer CRD whose `storedVersions` holds more than its
//! storage version (an empty merge patch: the apiserver reads the object, finds nothing to
//! change, and stores it again, now at the storage version), then sets `storedVersions` to the
//! storage version alone, conditional on the CRD being as read, so that a storage version
//! changed meanwhile is not forgotten. Idempotent: a CRD already migrated costs one GET.
//! (As Knative's and Tekton's storage version migrators and cert-manager's
//! `migrate-api-version` do.)
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use kubesteer_api::keys::CONTROLLER_FIELD_MANAGER;
use kubesteer_api::kind::ALL;
use kubesteer_api::GROUP;
use serde_json::json;
use tracing::{info, warn};

use crate::{is_status, Result};

/// Objects read per page.
const PAGE: u32 = 200;
/// A progress line every this many objects.
const PROGRESS_EVERY: usize = 500;
/// Attempts of a whole migration before giving up until the next start.
const ATTEMPTS: u32 = 5;

/// What one CRD's migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migrated {
    /// Its `storedVersions` was the storage version alone already.
    Already,
    /// This many objects were stored again, and `storedVersions` went from `from` to `to`.
    Rewrote {
        objects: usize,
        from: Vec<String>,
        to: String,
    },
    /// The CRD is not installed.
    Absent,
}

/// Migrates every kubesteer CRD, each on its own; a failure is retried with backoff a few
/// times, then left to the next leader (it is logged, and the controllers run meanwhile).
pub async fn migrate_all(client: Client) {
    for kind in ALL {
        let crd = format!("{}.{GROUP}", kind.plural());
        let mut delay = Duration::from_secs(1);
        for attempt in 1..=ATTEMPTS {
            match migrate(&client, &crd).await {
                Ok(Migrated::Rewrote { objects, from, to }) => {
                    info!(%crd, objects, ?from, %to, "stored versions migrated");
                    break;
                }
                Ok(_) => break,
                Err(e) if attempt < ATTEMPTS => {
                    warn!(%crd, attempt, error = %e, "storage version migration failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => {
                    warn!(%crd, error = %e, "storage version migration failed; the next leader tries again")
                }
            }
        }
    }
}

/// Migrates the objects of the CRD `name` to its storage version.
pub async fn migrate(client: &Client, name: &str) -> Result<Migrated> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd) = crds.get_opt(name).await? else {
        return Ok(Migrated::Absent);
    };
    let Some(storage) = crd.spec.versions.iter().find(|v| v.storage) else {
        return Ok(Migrated::Already);
    };
    let stored = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    if stored.iter().all(|v| *v == storage.name) {
        return Ok(Migrated::Already);
    }
    info!(crd = %name, from = ?stored, to = %storage.name, "storage version migration started");
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: storage.name.clone(),
        api_version: format!("{}/{}", crd.spec.group, storage.name),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let params = PatchParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let mut objects = 0;
    let mut page = ListParams::default().limit(PAGE);
    loop {
        let list = all.list_metadata(&page).await?;
        for object in &list.items {
            let object_name = object.name_any();
            let api: Api<DynamicObject> = match object.namespace() {
                Some(ns) => Api::namespaced_with(client.clone(), &ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            // Nothing changes, so admission admits it without a rule (api::kind::rechecks),
            // and the apiserver stores the object again at the storage version.
            match api
                .patch(&object_name, &params, &Patch::Merge(json!({})))
                .await
            {
                Ok(_) => objects += 1,
                // Deleted meanwhile: nothing left to migrate.
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e.into()),
            }
            if objects > 0 && objects % PROGRESS_EVERY == 0 {
                info!(crd = %name, objects, "storage version migration in progress");
            }
        }
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => page = page.continue_token(&next),
            None => break,
        }
    }
    // Only if the CRD is as read: a storage version switched meanwhile may have had objects
    // stored at the old one since, and must stay listed.
    let status = json!({
        "metadata": {"resourceVersion": crd.resource_version()},
        "status": {"storedVersions": [storage.name]},
    });
    crds.patch_status(name, &params, &Patch::Merge(status))
        .await?;
    Ok(Migrated::Rewrote {
        objects,
        from: stored,
        to: storage.name.clone(),
    })
}
