//! The Scaler: its two versions, conversion between them, and what the webhook and the
//! controller compute from it.
//!
//! - [`v1beta1`]: the stored version, the one both binaries read (re-exported as
//!   [`crate::Scaler`]); [`v1alpha1`]: the tutorial's version, served only at the API edge.
//! - [`convert`]: lossless conversion both ways, for the webhook's `/convert`.
//! - [`schedule`]: windows, cron and holidays as instants; [`plan`]: a Scaler's week, the
//!   replicas each target should have when.
//! - [`selector`]: targets picked by kind, labels and namespaces; [`claims`]: which of several
//!   Scalers owns a shared target (the index both binaries keep).
pub mod claims;
pub mod convert;
pub mod plan;
pub mod schedule;
pub mod selector;
pub mod v1alpha1;
pub mod v1beta1;
