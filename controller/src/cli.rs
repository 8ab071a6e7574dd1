//! The `kubesteer-controller` command line: [`run`] runs the controller on the given arguments
//! (the first is the program name), for the `kubesteer-controller` binary and the image's
//! multi-call `kubesteer`.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use crate::args::Args;

/// Runs `kubesteer-controller` with `args` (program name first) until a termination signal.
#[tokio::main]
pub async fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    // ring is the only provider built in; installing it up front keeps every TLS config on it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse_from(args);
    match crate::run::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubesteer-controller: {e}");
            ExitCode::FAILURE
        }
    }
}
