#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

kubesteer_runtime::main!(kubesteer_controller::cli::run);
