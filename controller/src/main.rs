#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: kubesteer_runtime::Allocator = kubesteer_runtime::Allocator;

fn main() -> std::process::ExitCode {
    kubesteer_controller::cli::run(std::env::args_os())
}
