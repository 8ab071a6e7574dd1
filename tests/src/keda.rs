//! The real KEDA operator on the e2e cluster's real node, for tests of kubesteer beside KEDA:
//! `hack/keda.sh` builds it (cached), packs it as an image, and deploys it; [`ensure_keda`] does
//! all of that once per cluster.
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::{
    cached_tool, eventually_every, kubeconfig, kubectl, output_within, repo_root, state_dir,
};

/// The namespace `hack/keda.sh deploy` installs KEDA in.
pub const NAMESPACE: &str = "keda";
/// KEDA's operator Deployment in [`NAMESPACE`].
pub const DEPLOYMENT: &str = "keda-operator";
/// The annotation that pauses a ScaledObject at a replica count: KEDA deletes its HPA and scales
/// the target to that count.
pub const PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";

/// The HPA KEDA makes for the ScaledObject `scaled_object` (owned by it, labelled
/// `scaledobject.keda.sh/name=<scaled_object>`).
pub fn hpa_name(scaled_object: &str) -> String {
    format!("keda-hpa-{scaled_object}")
}

/// Whether KEDA's operator Deployment exists and has an available pod of its current spec.
pub fn keda_available() -> Result<bool> {
    let run = kubectl(
        &[
            "get",
            "deployment",
            DEPLOYMENT,
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.metadata.generation} {.status.observedGeneration} {.status.availableReplicas}",
        ],
        None,
    )?;
    if !run.ok {
        return Ok(false);
    }
    let fields: Vec<&str> = run.stdout.split_whitespace().collect();
    Ok(
        matches!(fields.as_slice(), [generation, observed, available]
        if generation == observed && available.parse::<u32>().unwrap_or(0) >= 1),
    )
}

/// Installs KEDA on the e2e cluster unless it already runs there: builds the operator (cached
/// outside the repository), its image (`$KUBESTEER_STATE/keda-image.tar`, cached), loads it into
/// the real node, and deploys it, waiting until it started its controllers. Needs the real node
/// (root) and, the very first time on a machine, Go and 8-17 minutes for the build.
///
/// Safe to call from every test: tests of one binary wait for each other, test binaries take a
/// lock file in the state directory, and a running KEDA is left alone.
pub fn ensure_keda() -> Result<()> {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    if keda_available()? {
        return Ok(());
    }
    let state = state_dir();
    std::fs::create_dir_all(&state)?;
    let lock = std::fs::File::create(state.join("keda.lock")).context("creating keda.lock")?;
    // Another test binary may be installing it: as long as all of that may take, at most.
    eventually_every(
        KEDA_INSTALL_LIMIT,
        Duration::from_secs(1),
        "keda.lock, held by another test binary installing KEDA",
        // An error ends the wait: only a held lock is waited for.
        || match lock.try_lock() {
            Ok(()) => Ok(Some(Ok(()))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Ok(Some(Err(e))),
        },
    )?
    .context("locking keda.lock")?;
    // Another test binary may have installed it while this one waited.
    if keda_available()? {
        return Ok(());
    }
    let archive = state.join("keda-image.tar");
    let archive = archive.to_string_lossy();
    hack(&state, "keda.sh", &[])?;
    hack(&state, "keda.sh", &["image", &archive])?;
    hack(&state, "node.sh", &["load", &archive])?;
    hack(&state, "keda.sh", &["deploy"])?;
    Ok(())
}

/// How long each step of installing KEDA may take: `hack/keda.sh` builds the operator (8-17
/// minutes the first time on a machine, cached after), `keda.sh image` packs its image, `node.sh
/// load` loads it into the real node, and `keda.sh deploy` waits for the operator (its own
/// deadlines add up to a few minutes).
fn hack_limit(script: &str, args: &[&str]) -> Duration {
    let minutes = match (script, args.first().copied()) {
        ("keda.sh", None) => 40,
        ("keda.sh", Some("image")) => 20,
        ("node.sh", Some("load")) => 10,
        _ => 15,
    };
    Duration::from_secs(60 * minutes)
}

/// The most all of [`ensure_keda`]'s steps may take together.
const KEDA_INSTALL_LIMIT: Duration = Duration::from_secs(60 * (40 + 20 + 10 + 15));

/// Runs `hack/SCRIPT ARGS` against the e2e cluster, failing with its output.
fn hack(state: &Path, script: &str, args: &[&str]) -> Result<()> {
    let out = output_within(
        Command::new(repo_root().join("hack").join(script))
            .args(args)
            .env("KUBECONFIG", kubeconfig())
            .env("KUBESTEER_STATE", state)
            .env("KUBECTL", cached_tool("kubectl")),
        None,
        hack_limit(script, args),
        &format!("hack/{script} {}", args.join(" ")),
    )?;
    if !out.status.success() {
        bail!(
            "hack/{script} {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A ScaledObject `name` scaling the Deployment `target` between `min` and `max` replicas, with
/// one cron trigger (UTC) that asks for `desired` replicas. Its window runs from 1 January 00:00
/// to 31 December 23:59, so the trigger is active at any time but the last minute of a year.
pub fn scaled_object_yaml(name: &str, target: &str, min: u32, max: u32, desired: u32) -> String {
    format!(
        r#"apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {name}
spec:
  scaleTargetRef:
    name: {target}
  minReplicaCount: {min}
  maxReplicaCount: {max}
  triggers:
    - type: cron
      metadata:
        timezone: UTC
        start: "0 0 1 1 *"
        end: "59 23 31 12 *"
        desiredReplicas: "{desired}"
"#
    )
}
