//! `kubesteer`: the image's multi-call binary. Called as `kubesteer-webhook`,
//! `kubesteer-controller` or `kubesteer-certs` (links to it) it is that program; called as
//! `kubesteer <webhook|controller|certs> [ARGS]` it runs the named one. Called as
//! `kubectl-kubesteer` it is the kubectl plugin, for `kubectl kubesteer` on a machine that has
//! only the image.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::ExitCode;

#[derive(Debug, PartialEq, Eq)]
enum Tool {
    Webhook,
    Controller,
    Certs,
    Plugin,
}

/// The kubectl plugin's file name: kubectl runs it for `kubectl kubesteer`.
const PLUGIN: &str = "kubectl-kubesteer";

const USAGE: &str = "usage: kubesteer <webhook|controller|certs> [ARGS]... \
                     (or call it through the links kubesteer-webhook, kubesteer-controller, kubesteer-certs)";

impl Tool {
    fn named(name: &OsStr) -> Option<Self> {
        match name.to_str()? {
            "webhook" => Some(Tool::Webhook),
            "controller" => Some(Tool::Controller),
            "certs" => Some(Tool::Certs),
            _ => None,
        }
    }
}

/// Which program to run, and its arguments with its own name first (for clap's messages).
fn route(mut args: Vec<OsString>) -> Result<(Tool, Vec<OsString>), String> {
    let program = args
        .first()
        .and_then(|p| Path::new(p).file_name())
        .map(OsStr::to_os_string)
        .unwrap_or_default();
    if program == PLUGIN {
        return Ok((Tool::Plugin, args));
    }
    if let Some(tool) = program
        .to_str()
        .and_then(|p| p.strip_prefix("kubesteer-"))
        .and_then(|t| Tool::named(OsStr::new(t)))
    {
        return Ok((tool, args));
    }
    if args.len() < 2 {
        return Err(USAGE.to_string());
    }
    let name = args.remove(1);
    let tool = Tool::named(&name)
        .ok_or_else(|| format!("unknown program {:?}; {USAGE}", name.to_string_lossy()))?;
    args[0] = OsString::from(format!("kubesteer-{}", name.to_string_lossy()));
    Ok((tool, args))
}

#[global_allocator]
static ALLOCATOR: kubesteer_runtime::Allocator = kubesteer_runtime::Allocator;

fn main() -> ExitCode {
    match route(std::env::args_os().collect()) {
        Ok((Tool::Webhook, args)) => kubesteer_webhook::cli::run(args),
        Ok((Tool::Controller, args)) => kubesteer_controller::cli::run(args),
        Ok((Tool::Certs, args)) => kubesteer_certs::cli::run(args),
        Ok((Tool::Plugin, args)) => kubesteer_plugin::cli::run(args),
        Err(message) => {
            eprintln!("kubesteer: {message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_link_name_picks_the_program_and_keeps_every_argument() {
        let routed = route(args(&[
            "/usr/local/bin/kubesteer-certs",
            "generate",
            "--help",
        ]));
        assert_eq!(
            routed,
            Ok((
                Tool::Certs,
                args(&["/usr/local/bin/kubesteer-certs", "generate", "--help"])
            ))
        );
        assert_eq!(
            route(args(&["kubesteer-controller"])).map(|r| r.0),
            Ok(Tool::Controller)
        );
        assert_eq!(
            route(args(&[
                "/usr/local/bin/kubectl-kubesteer",
                "preview",
                "-f",
                "-"
            ])),
            Ok((
                Tool::Plugin,
                args(&["/usr/local/bin/kubectl-kubesteer", "preview", "-f", "-"])
            ))
        );
    }

    #[test]
    fn a_subcommand_picks_the_program_and_becomes_its_name() {
        let routed = route(args(&["kubesteer", "webhook", "--addr", "0.0.0.0:8443"]));
        assert_eq!(
            routed,
            Ok((
                Tool::Webhook,
                args(&["kubesteer-webhook", "--addr", "0.0.0.0:8443"])
            ))
        );
    }

    #[test]
    fn no_or_an_unknown_program_is_a_usage_error_naming_it() {
        assert_eq!(route(args(&["kubesteer"])), Err(USAGE.to_string()));
        let error = route(args(&["kubesteer", "scaler"]))
            .err()
            .unwrap_or_default();
        assert!(error.contains("\"scaler\""), "{error}");
        let error = route(args(&["kubesteer-frobnicate", "x"]))
            .err()
            .unwrap_or_default();
        assert!(error.contains("\"x\""), "{error}");
    }
}
