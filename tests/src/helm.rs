//! `helm` as a user runs it.
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The repository root, for `config/samples` and the like.
use crate::*;

/// Runs the pinned helm against the local cluster.
pub fn helm_run(args: &[&str]) -> Result<Run> {
    let out = Command::new(cached_tool("helm"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args)
        .output()
        .context("running helm; run `make control-plane` first")?;
    Ok(out.into())
}

/// Like [`helm_run`], but fails with helm's stderr when the call fails; helm's stdout.
pub fn helm(args: &[&str]) -> Result<String> {
    let run = helm_run(args)?;
    if !run.ok {
        bail!("helm {} failed: {}", args.join(" "), run.stderr);
    }
    Ok(run.stdout)
}
