//! The crate's errors, and the HTTP errors handlers return.
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("TLS material in {path}: {reason}")]
    Tls { path: String, reason: String },
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("kubernetes client: {0}")]
    Kube(#[from] kube::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An HTTP-level failure: the body was not something the webhook can answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("not an AdmissionReview: {0}")]
    BadReview(String),
    #[error("not a ConversionReview: {0}")]
    BadConversionReview(String),
    #[error("no such endpoint: {0}")]
    NotFound(String),
    #[error("admission reviews are answered only for the apiserver: present a client certificate from the CA in --apiserver-client-ca")]
    NoClientCertificate,
    #[error("client certificate {0} is not one of --apiserver-client-names")]
    ClientNotAllowed(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match self {
            ApiError::BadReview(_) | ApiError::BadConversionReview(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::NoClientCertificate => StatusCode::UNAUTHORIZED,
            ApiError::ClientNotAllowed(_) => StatusCode::FORBIDDEN,
        };
        (status, self.to_string()).into_response()
    }
}
