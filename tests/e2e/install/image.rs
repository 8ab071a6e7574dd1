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

/// The image's binary has the functions the webhook runs while it answers reviews
/// (`webhook/hot-code.order`, written by `hack/hot-code.sh`) linked first, one after the other,
/// which keeps the webhook's resident code to a few of the kernel's fault-around windows:
/// `hack/hot-code-link.rs` asks lld for the order and `hack/cc-link.sh` resolves the list's
/// demangled names to the link's own symbols. (The image's copy is stripped; `make image` keeps
/// the unstripped one in target/.)
#[test]
fn the_image_binary_links_the_webhooks_hot_code_first() -> Result<()> {
    let binary = kubesteer_tests::target_dir().join("x86_64-unknown-linux-gnu/image/kubesteer");
    let list = kubesteer_tests::repo_root().join("webhook/hot-code.order");
    let list = std::fs::read_to_string(&list).with_context(|| list.display().to_string())?;
    let hot: std::collections::HashSet<&str> = list.lines().collect();
    let out = output_within(
        Command::new("nm")
            .args(["-n", "-C", "--defined-only"])
            .arg(&binary),
        None,
        Duration::from_secs(120),
        &format!("nm {}", binary.display()),
    )
    .context("running nm (hack/install-prereqs.sh installs binutils)")?;
    ensure!(
        out.status.success(),
        "nm {}: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let symbols = String::from_utf8_lossy(&out.stdout);
    // The functions in address order ("ADDRESS TYPE NAME", the name may hold spaces).
    let functions: Vec<&str> = symbols
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ' ');
            let (_, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
            matches!(kind, "t" | "T" | "w" | "W").then_some(name)
        })
        .collect();
    let at: Vec<usize> = (0..functions.len())
        .filter(|&i| hot.contains(functions[i]))
        .collect();
    ensure!(
        at.len() * 2 >= hot.len(),
        "{} of the {} functions in webhook/hot-code.order are in {}: the list is stale, run \
         hack/hot-code.sh",
        at.len(),
        hot.len(),
        binary.display()
    );
    // First: nearly all of them among the first as many functions of the binary (hand-written
    // assembly, such as ring's, keeps its own place).
    let first = at.iter().filter(|&&i| i < at.len()).count();
    ensure!(
        first * 10 >= at.len() * 9,
        "only {first} of the {} listed functions are among the binary's first {}",
        at.len(),
        at.len()
    );
    Ok(())
}
