//! kubesteer's custom resources, shared by the webhook and the controller.
//!
//! Everything here is pure: types, defaults, validation and schedule math, with no I/O; the
//! one exception, the run-time pieces both binaries share (logging, signals, readiness and
//! watches), sits behind the `runtime` feature.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod access;
pub mod common;
pub mod crd;
pub mod defaults;
pub mod field;
pub mod kind;
pub mod memcached;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod scaler;
pub mod schedule;
pub mod welcome;

pub use memcached::{Memcached, MemcachedSpec, MemcachedStatus};
pub use scaler::{Scaler, ScalerSpec, ScalerStatus};
pub use welcome::{Welcome, WelcomeSpec, WelcomeStatus};

/// The API group of every kubesteer kind.
pub const GROUP: &str = "kubesteer.io";
/// The served and stored version.
pub const VERSION: &str = "v1alpha1";
