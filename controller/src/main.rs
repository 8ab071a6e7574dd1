#![forbid(unsafe_code)]
#![deny(warnings, rust_2018_idioms)]

use clap::Parser;

/// kubesteer-controller: kubesteer's controller: reconciles what Scaler, Welcome and Memcached own.
#[derive(Debug, Parser)]
#[command(name = "kubesteer-controller", version, about, long_about = None)]
struct Args {}

fn main() {
    let _args = Args::parse();
    println!("kubesteer-controller {}", env!("CARGO_PKG_VERSION"));
}
