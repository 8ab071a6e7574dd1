//! The crate's errors.
use std::path::PathBuf;

/// Everything that can go wrong while making, reading or writing certificates.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),

    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },

    #[error("{what} is too long to represent as a certificate date")]
    Validity { what: &'static str },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("TLS configuration failed: {0}")]
    Tls(#[from] rustls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
