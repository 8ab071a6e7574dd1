#![forbid(unsafe_code)]
#![deny(warnings, rust_2018_idioms)]

use clap::Parser;

/// kubesteer-certs: kubesteer's CA and webhook serving certificates.
#[derive(Debug, Parser)]
#[command(name = "kubesteer-certs", version, about, long_about = None)]
struct Args {}

fn main() {
    let _args = Args::parse();
    println!("kubesteer-certs {}", env!("CARGO_PKG_VERSION"));
}
