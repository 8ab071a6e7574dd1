//! `kubectl-kubesteer`: kubectl runs it for `kubectl kubesteer ...`.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    kubesteer_plugin::cli::run(std::env::args_os())
}
