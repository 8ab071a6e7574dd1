#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

fn main() -> std::process::ExitCode {
    kubesteer_webhook::cli::run(std::env::args_os())
}
