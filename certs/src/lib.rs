//! kubesteer's CA and webhook serving certificates, on rcgen: the CA ([`ca`]), the serving
//! certificate and the rustls configuration that serves it ([`serving`]), when either is
//! replaced ([`renewal`]), where they are kept ([`storage`]), the CAs a caBundle trusts during
//! a CA rollover ([`trust`]), an HTTPS probe against the CA ([`probe`]), and the apiserver's
//! client certificate for calling webhooks with its CA ([`client`]).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod ca;
pub mod cli;
pub mod client;
mod error;
mod options;
mod pem;
pub mod probe;
pub mod renewal;
pub mod serving;
pub mod storage;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tls_server;
pub mod trust;

pub use ca::{generate_ca, CA_COMMON_NAME};
pub use client::{ensure_client_dir, issue_client, ClientIdentity, ClientOutcome};
pub use error::{Error, Result};
pub use options::Options;
pub use pem::{Bundle, Pem};
pub use renewal::{ca_needs_renewal, check, renew, Outcome, Renewal};
pub use serving::{generate, issue_serving, server_config};
pub use storage::{
    ensure_dir, read_dir, write_dir, CA_CERT_FILE, CA_KEY_FILE, SERVING_CERT_FILE, SERVING_KEY_FILE,
};
pub use trust::Trust;
