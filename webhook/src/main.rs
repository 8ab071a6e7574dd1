#![forbid(unsafe_code)]
#![deny(warnings, rust_2018_idioms)]

use clap::Parser;

/// kubesteer-webhook: kubesteer's admission webhook: validates and defaults Scaler, Welcome and Memcached.
#[derive(Debug, Parser)]
#[command(name = "kubesteer-webhook", version, about, long_about = None)]
struct Args {}

fn main() {
    let _args = Args::parse();
    println!("kubesteer-webhook {}", env!("CARGO_PKG_VERSION"));
}
