//! kubesteer's controller: one kube-runtime `Controller` per kind, reconciling what Scaler,
//! Memcached, Welcome and Application own. The domain is in `reconcilers/` (one file per kind, one shape) and
//! `children.rs` (building, caching and applying what the owners own).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod args;
pub mod children;
pub mod cli;
pub mod context;
pub mod reconcilers;
pub mod run;
pub mod storage;

pub use reconcilers::{memcached, scaler, welcome};

pub mod metrics;

#[cfg(test)]
pub mod fixtures;

pub use context::{Clock, Context, SystemClock};

/// Everything that can go wrong in the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),

    #[error("{kind} {name:?} has no {what}")]
    MissingField {
        kind: &'static str,
        name: String,
        what: &'static str,
    },

    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),

    /// A cached object that cannot be read back (never expected: it was packed in this process).
    #[error("cache: {0}")]
    Cache(String),

    #[error("metrics server: {0}")]
    Io(#[from] std::io::Error),

    #[error("metrics certificate: {0}")]
    Certs(#[from] kubesteer_certs::Error),

    #[error(transparent)]
    Logging(#[from] kubesteer_runtime::logging::Error),

    /// Changes to some of a Scaler's targets failed (each shown on its status entry) while the
    /// others were made; retried as the first failure says.
    #[error("{target}: {first} ({count} target(s) failed)")]
    Targets {
        count: usize,
        target: String,
        first: Box<Error>,
    },

    /// The apiserver could not say whether a Scaler's author still holds its rights; retried,
    /// and nothing is written meanwhile.
    #[error("checking the rights of the Scaler's author: {0}")]
    Rights(String),

    /// A watch whose first list a reconcile needs has not listed in time; retried.
    #[error("the {0} watch has not listed yet")]
    Unlisted(&'static str),

    /// Another error whose text held a secret, with that secret blanked out.
    #[error("{message}")]
    Redacted {
        label: &'static str,
        message: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A short, bounded label for the errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::MissingField { .. } => "missing_field",
            Error::Serialize(_) => "serialize",
            Error::Cache(_) => "cache",
            Error::Io(_) => "io",
            Error::Certs(_) => "certs",
            Error::Logging(_) => "logging",
            Error::Targets { .. } => "targets",
            Error::Unlisted(_) => "unlisted",
            Error::Rights(_) => "rights",
            Error::Redacted { label, .. } => label,
        }
    }

    /// Whether the apiserver was unreachable or unable to serve ([`is_unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Kube(e) => is_unavailable(e),
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.is_unavailable(),
                kube::runtime::finalizer::Error::AddFinalizer(e)
                | kube::runtime::finalizer::Error::RemoveFinalizer(e) => is_unavailable(e),
                _ => false,
            },
            Error::Targets { first, .. } => first.is_unavailable(),
            _ => false,
        }
    }

    /// The apiserver's message when an admission webhook denied one of the controller's writes
    /// (`admission webhook "..." denied the request: ...`): no retry soon changes that, so it
    /// backs off and is shown on the object (`Ready=False`, reason `AdmissionDenied`).
    pub fn admission_denial(&self) -> Option<&str> {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Kube(e) => admission_denial(e),
            Error::Finalizer(e) => match e.as_ref() {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.admission_denial(),
                F::AddFinalizer(e) | F::RemoveFinalizer(e) => admission_denial(e),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether the apiserver refused a write because the object changed meanwhile.
    pub fn is_conflict(&self) -> bool {
        match self {
            Error::Kube(e) => is_status(e, 409),
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.is_conflict(),
                kube::runtime::finalizer::Error::AddFinalizer(e)
                | kube::runtime::finalizer::Error::RemoveFinalizer(e) => {
                    // A failed `test` op of the finalizer patch is a conflict in all but name;
                    // an admission webhook's denial (also 422) is not, and backs off.
                    is_status(e, 409) || (is_status(e, 422) && admission_denial(e).is_none())
                }
                _ => false,
            },
            _ => false,
        }
    }
}

impl From<kube::runtime::finalizer::Error<Error>> for Error {
    fn from(e: kube::runtime::finalizer::Error<Error>) -> Self {
        Error::Finalizer(Box::new(e))
    }
}

/// Whether a kube error says that the apiserver could not be reached or could not serve now,
/// as during its restart, rather than that the request was wrong.
pub fn is_unavailable(e: &kube::Error) -> bool {
    match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        _ => false,
    }
}

/// The message of a kube error that is an admission webhook's denial.
pub fn admission_denial(e: &kube::Error) -> Option<&str> {
    match e {
        kube::Error::Api(s)
            if s.message.starts_with("admission webhook ")
                && s.message.contains(" denied the request") =>
        {
            Some(&s.message)
        }
        _ => None,
    }
}

/// Whether a kube error is an apiserver status with this code.
pub fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}
