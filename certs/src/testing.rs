//! Helpers of the crate's unit tests.
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{BasicConstraints as X509BasicConstraints, KeyUsage};

use crate::pem::cert_der;
use crate::{Options, Pem};

pub const HOUR: Duration = Duration::from_secs(60 * 60);
pub const DAY: Duration = Duration::from_secs(24 * 60 * 60);

pub fn opts() -> Options {
    Options::new("kubesteer-webhook", "kubesteer-system")
}

pub fn der(pem: &Pem) -> CertificateDer<'static> {
    cert_der(&pem.cert).unwrap()
}

pub fn unix_now() -> i64 {
    OffsetDateTime::now_utc().unix_timestamp()
}

pub fn basic_constraints(cert: &X509Certificate<'_>) -> X509BasicConstraints {
    cert.basic_constraints().unwrap().unwrap().value.clone()
}

pub fn key_usage(cert: &X509Certificate<'_>) -> KeyUsage {
    *cert.key_usage().unwrap().unwrap().value
}
