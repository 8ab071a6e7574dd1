#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use clap::Parser;
use kubesteer_controller::args::Args;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // ring is the only provider built in; installing it up front keeps every TLS config on it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    match kubesteer_controller::run::run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubesteer-controller: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
