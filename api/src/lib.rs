//! kubesteer's domain crate: the custom resources and every rule about them, shared by the
//! webhook, the controller and the plugin.
//!
//! The types of each kind and version (a file per kind; the Scaler's in `scaler/`, with each
//! version's types apart from what they do: `v1beta1.rs` and `v1beta1_impl.rs`), their
//! defaults and validation, and the domain logic both binaries must agree on: the Scaler's
//! schedule and plan (`scaler::schedule`, `scaler::plan`), which Scaler owns a shared target
//! (`scaler::claims`), which rights an author needs ([`access`]) and conversion between
//! versions (`scaler::convert`). Everything here is pure, with no I/O, no async runtime, no
//! HTTP and no CLI; what the binaries share at run time is the `kubesteer-runtime` crate
//! (runtime/).
//! [`rules`] holds every field limit once (the schema attributes, the CEL rules and the
//! validation read it); [`keys`] every name written into the cluster (annotations, labels,
//! finalizer, field manager, condition types and reasons).
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms)]
// The doc comments of the CRD types are also their schema's descriptions, which `kubectl explain`
// prints as plain text: "Hello <name>" and bare URLs are meant as written there.
#![allow(rustdoc::invalid_html_tags, rustdoc::bare_urls)]

pub mod access;
pub mod application;
pub mod common;
pub mod crd;
pub mod defaults;
pub mod field;
pub mod keys;
pub mod kind;
pub mod memcached;
pub mod rules;
pub mod scaler;
pub mod welcome;

pub use application::{Application, ApplicationSpec, ApplicationStatus};
pub use memcached::{Memcached, MemcachedSpec, MemcachedStatus};
/// Scaler as the webhook and the controller see it: v1beta1, the stored version. v1alpha1
/// ([`scaler::v1alpha1`]) exists only at the API edge, through [`scaler::convert`].
pub use scaler::v1beta1::{Scaler, ScalerSpec, ScalerStatus};
pub use welcome::{Welcome, WelcomeSpec, WelcomeStatus};

/// The API group of every kubesteer kind.
pub const GROUP: &str = "kubesteer.io";
/// The served and stored version of Welcome, Memcached and Application (Scaler: [`scaler::convert::V1BETA1`]).
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every kubesteer object.
pub const API_VERSION: &str = "kubesteer.io/v1alpha1";

#[cfg(test)]
mod tests {
    #[test]
    fn the_api_version_is_group_and_version() {
        assert_eq!(
            super::API_VERSION,
            format!("{}/{}", super::GROUP, super::VERSION)
        );
    }
}
