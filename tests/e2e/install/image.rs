//! The project image as `make image` built it (hack/e2e.sh builds it first): every binary runs
//! from it under podman with runc, as user 65532 on a read-only root filesystem, and it carries
//! its OCI labels and stays small.
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kubesteer_tests::output_within;
use serde_json::Value;

fn image() -> String {
    std::env::var("KUBESTEER_IMAGE").unwrap_or_else(|_| "kubesteer:dev".into())
}

fn podman(args: &[&str]) -> Result<String> {
    // A throwaway container of a local image, or an inspect: seconds, at most a few minutes.
    let out = output_within(
        Command::new("podman")
            .args(["--runtime", "/usr/sbin/runc"])
            .args(args),
        None,
        Duration::from_secs(300),
        &format!("podman {}", args.join(" ")),
    )
    .context("running podman (hack/install-prereqs.sh installs it)")?;
    ensure!(
        out.status.success(),
        "podman {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `command` in a throwaway container of the image, as the image's user, read-only.
fn run_in_image(command: &[&str]) -> Result<String> {
    let image = image();
    // Without these podman asks for rlimits above what this machine grants (runc then fails).
    let mut args = vec![
        "run",
        "--rm",
        "--read-only",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        &image,
    ];
    args.extend(command);
    podman(&args)
}

#[test]
fn every_program_runs_from_the_image_read_only() -> Result<()> {
    for binary in [
        "kubesteer-webhook",
        "kubesteer-controller",
        "kubesteer-certs",
    ] {
        let out = run_in_image(&[binary, "--help"])?;
        assert!(
            out.contains(&format!("Usage: {binary}")),
            "{binary} --help printed: {out}"
        );
    }
    let out = run_in_image(&["kubesteer-certs", "generate", "--help"])?;
    assert!(out.contains("--out-dir"), "{out}");
    // The kubectl plugin, by its link.
    let out = run_in_image(&["kubectl-kubesteer", "--help"])?;
    assert!(out.contains("Usage: kubectl kubesteer"), "{out}");
    // The multi-call binary itself, by subcommand.
    let out = run_in_image(&["kubesteer", "controller", "--help"])?;
    assert!(out.contains("Usage: kubesteer-controller"), "{out}");
    Ok(())
}

#[test]
fn the_image_is_small_labelled_and_not_root() -> Result<()> {
    let inspect: Value = serde_json::from_str(&podman(&["image", "inspect", &image()])?)?;
    let image = inspect.get(0).context("no image")?;
    let config = &image["Config"];
    assert_eq!(config["User"], "65532:65532", "runs as 65532");
    let labels = &image["Labels"];
    for label in ["source", "version", "revision", "licenses", "title"] {
        let value = labels[format!("org.opencontainers.image.{label}")]
            .as_str()
            .unwrap_or_default();
        assert!(!value.is_empty(), "label {label} missing: {labels}");
    }
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        kubesteer_tests::workspace_version()?.as_str(),
        "the image's version is the workspace version"
    );
    let size = image["Size"].as_f64().context("no size")? / 1024.0 / 1024.0;
    eprintln!("image size: {size:.1} MiB");
    assert!(size < 25.0, "the image is {size:.1} MiB, over 25 MiB");
    Ok(())
}
