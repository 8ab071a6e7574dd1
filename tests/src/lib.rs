//! Helpers for end-to-end tests that drive a real cluster with the real `kubectl`, like a user.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod addons;
pub mod application;
pub mod hosts;
pub mod keda;
pub mod prometheus;
pub mod release;
pub mod soak;

mod deadline;
#[cfg(test)]
mod docs_numbers;
mod helm;
mod kubectl;
mod outage;
mod paths;
mod processes;
mod versions;
mod waits;

pub use deadline::*;
pub use helm::*;
pub use kubectl::*;
pub use outage::*;
pub use paths::*;
pub use processes::*;
pub use versions::*;
pub use waits::*;
