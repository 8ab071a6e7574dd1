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
use kube::api::Patch;

pub mod application;
pub mod memcached;
mod owner;
pub mod scaler;
pub mod welcome;

pub use owner::*;

/// The write of a custom resource's status: a JSON patch that sets the whole of it, so a field
/// left out is removed, as an apply by the one writer of the status would. It costs the apiserver
/// less than that apply (3.7-4.2 against 4.7-5.3 ms of its CPU per Memcached status,
/// `docs/benchmarks.md`).
pub fn status_patch(status: &impl serde::Serialize) -> crate::Result<Patch<()>> {
    let patch = serde_json::json!([{"op": "add", "path": "/status", "value": status}]);
    Ok(Patch::Json(serde_json::from_value(patch)?))
}

/// A Kubernetes time from a UTC instant, to whole seconds as the API stores it, so a status
/// computed twice compares equal.
pub use kubesteer_api::common::to_time as time;

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    #[test]
    fn times_are_whole_seconds() {
        let at = DateTime::parse_from_rfc3339("2025-03-01T09:00:00.750Z")
            .unwrap()
            .with_timezone(&Utc);
        let t = time(at);
        assert_eq!(serde_json::to_value(&t).unwrap(), "2025-03-01T09:00:00Z");
    }
}
