//! `kubectl kubesteer`: a Scaler's days as a picture (`preview`), why a workload has the
//! replicas it has (`why`), the everyday writes (`override`, `suspend`, `resume`, `wake`) and
//! the installation's health (`status`), and what the Scalers saved (`savings`).
//!
//! Every rule and the schedule come from the api crate, the controller's and the webhook's own,
//! so the plugin never disagrees with them; writes are plain merge patches through the
//! apiserver, so RBAC and the webhook judge them as they judge `kubectl patch`.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod cli;
pub mod cluster;
pub mod file;
pub mod preview;
pub mod savings;
pub mod status;
pub mod svg;
pub mod table;
pub mod text;
pub mod week;
pub mod when;
pub mod why;
pub mod write;

/// What went wrong, as the user is told.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input (a file, a time, a name, a flag); nothing was sent.
    #[error("error: {0}")]
    Input(String),
    /// The apiserver, or a webhook through it, refused; its own message, as kubectl prints it.
    #[error("Error from server ({reason}): {message}")]
    Server { reason: String, message: String },
    /// The cluster could not be reached or answered nonsense.
    #[error("error: {0}")]
    Client(String),
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => Error::Server {
                reason: if status.reason.is_empty() {
                    status.code.to_string()
                } else {
                    status.reason.clone()
                },
                message: status.message.clone(),
            },
            other => Error::Client(other.to_string()),
        }
    }
}

impl Error {
    /// Whether the apiserver answered with this HTTP code.
    pub fn is_code(e: &kube::Error, code: u16) -> bool {
        matches!(e, kube::Error::Api(s) if s.code == code)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
