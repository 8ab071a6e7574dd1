//! kubesteer's admission webhook: routes AdmissionReviews by kind to the rules in `api/`.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod admission;
pub mod apiserver_auth;
pub mod args;
pub mod budget;
pub mod cli;
pub mod cluster;
pub mod conversion;
pub mod crd_conversion;
pub mod error;
pub mod hosts;
pub mod metrics;
pub mod permissions;
pub mod review;
pub mod selfmanaged;
pub mod server;
pub mod tls;

pub use admission::{router, AppState};
pub use error::{Error, Result};
