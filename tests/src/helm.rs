//! `helm` as a user runs it.
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Result};

/// The repository root, for `config/samples` and the like.
use crate::*;

/// How long a helm call may take beyond its own `--timeout`.
const HELM_MARGIN: Duration = Duration::from_secs(60);
/// helm's own default `--timeout` (of `--wait` and of hooks): 5 minutes.
const HELM_DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs the pinned helm against the local cluster. It fails (naming the command line) when helm
/// has not finished within its `--timeout` (5 minutes by default, as helm's own) plus a minute.
pub fn helm_run(args: &[&str]) -> Result<Run> {
    let binary = cached_tool("helm");
    let mut cmd = Command::new(&binary);
    cmd.arg("--kubeconfig").arg(kubeconfig()).args(args);
    let limit = timeout_flag(args).unwrap_or(HELM_DEFAULT_TIMEOUT) + HELM_MARGIN;
    let what = format!("helm {}", args.join(" "));
    match output_within(&mut cmd, None, limit, &what) {
        Ok(out) => Ok(out.into()),
        Err(e) if !binary.exists() => Err(e.context("run `make control-plane` first")),
        Err(e) => Err(e),
    }
}

/// `helm uninstall --wait` of release `name` in `namespace`.
pub fn helm_uninstall(name: &str, namespace: &str) -> Result<String> {
    helm(&["uninstall", name, "-n", namespace, "--wait"])
}

/// Like [`helm_run`], but fails with helm's stderr when the call fails; helm's stdout.
pub fn helm(args: &[&str]) -> Result<String> {
    let run = helm_run(args)?;
    if !run.ok {
        bail!("helm {} failed: {}", args.join(" "), run.stderr);
    }
    Ok(run.stdout)
}
