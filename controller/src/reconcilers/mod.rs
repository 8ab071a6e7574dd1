//! The reconcilers, one file per kind, all in one shape: desired children, applied only where
//! they differ from the cached ones ([`crate::children::ensure`]), then the status from the
//! children. The kinds that own a Deployment and a Service (Memcached, Welcome) state only what
//! they want, through [`Owner`]; [`reconcile`] does the rest. Scaler owns nothing and scales
//! targets it does not own (anything with `/scale`, and CronJobs), so it has a reconcile of its
//! own (`scaler/`).
//!
//! Adding an owner kind `Cache`: a file `reconcilers/cache.rs` with `impl Owner for Cache` (its
//! Deployment, its Service, its status), `pub mod cache;` here, and one line of registration in
//! the list of owner kinds in `run::controllers`:
//!
//! ```text
//! owned::<Cache>(health, &ctx, ns, owner_settings, stop.clone()).boxed(),
//! ```
//!
//! which watches its objects and their children, fills the caches [`Owner::APP`] names, and runs
//! [`reconcile::<Cache>`](reconcile) with [`error_policy::<Cache>`](error_policy) from the
//! controller's queue (`runtime::queue`).
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use kube::Resource;

pub mod application;
pub mod memcached;
mod owner;
pub mod scaler;
pub mod welcome;

pub use owner::*;

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
