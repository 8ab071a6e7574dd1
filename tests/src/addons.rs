//! Third-party components the e2e tests run on the cluster's real node, each built (cached
//! outside the repository), packed as images and deployed by a script of `hack/`: KEDA,
//! cert-manager and the Prometheus Operator. [`ensure`] does all of that once per cluster.
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::{
    cached_tool, eventually_every, kubeconfig, kubectl, output_within, repo_root, state_dir,
};

/// One component and the script of `hack/` that builds, packs and deploys it.
pub struct Addon {
    /// `keda.sh`: `hack/SCRIPT` builds it, `SCRIPT image DIR` packs its images (printing each
    /// archive) and `SCRIPT deploy` deploys it and waits until it runs.
    pub script: &'static str,
    /// The most its first build may take, in minutes (a cached build takes none).
    pub build_minutes: u64,
    /// The Deployments `(namespace, name)` that run it: when each has an available pod of its
    /// current spec, it is not installed again.
    pub deployments: &'static [(&'static str, &'static str)],
}

/// Whether the Deployment `name` of `namespace` exists and has an available pod of its current
/// spec.
pub fn deployment_available(namespace: &str, name: &str) -> Result<bool> {
    let run = kubectl(
        &[
            "get",
            "deployment",
            name,
            "-n",
            namespace,
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

impl Addon {
    fn available(&self) -> Result<bool> {
        for (namespace, name) in self.deployments {
            if !deployment_available(namespace, name)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The most all of [`ensure`]'s steps may take together: the build, packing the images,
    /// loading them and deploying.
    fn limit(&self) -> Duration {
        Duration::from_secs(60 * (self.build_minutes + 20 + 10 + 15))
    }
}

/// Installs `addon` on the e2e cluster unless it already runs there: builds it, packs its images
/// (archives in the state directory, kept while newer than the binaries), loads them into the
/// real node, and deploys it. Needs the real node (root) and, the very first time on a machine,
/// Go and the minutes of its build.
///
/// Safe to call from every test: tests of one binary wait for each other, test binaries take a
/// lock file in the state directory, and a running component is left alone.
pub fn ensure(addon: &Addon) -> Result<()> {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    if addon.available()? {
        return Ok(());
    }
    let state = state_dir();
    std::fs::create_dir_all(&state)?;
    let lock_name = format!("{}.lock", addon.script.trim_end_matches(".sh"));
    let lock = std::fs::File::create(state.join(&lock_name))
        .with_context(|| format!("creating {lock_name}"))?;
    // Another test binary may be installing it: as long as all of that may take, at most.
    eventually_every(
        addon.limit(),
        Duration::from_secs(1),
        &format!("{lock_name}, held by another test binary installing it"),
        // An error ends the wait: only a held lock is waited for.
        || match lock.try_lock() {
            Ok(()) => Ok(Some(Ok(()))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Ok(Some(Err(e))),
        },
    )?
    .with_context(|| format!("locking {lock_name}"))?;
    // Another test binary may have installed it while this one waited.
    if addon.available()? {
        return Ok(());
    }
    let minutes = |m: u64| Duration::from_secs(60 * m);
    hack(&state, addon.script, &[], minutes(addon.build_minutes))?;
    let dir = state.to_string_lossy();
    let archives = hack(&state, addon.script, &["image", &dir], minutes(20))?;
    for archive in archives.lines().filter(|l| !l.trim().is_empty()) {
        hack(&state, "node.sh", &["load", archive.trim()], minutes(10))?;
    }
    hack(&state, addon.script, &["deploy"], minutes(15))?;
    Ok(())
}

/// Runs `hack/SCRIPT ARGS` against the e2e cluster within `limit`, failing with its output;
/// its stdout.
fn hack(state: &Path, script: &str, args: &[&str], limit: Duration) -> Result<String> {
    let out = output_within(
        Command::new(repo_root().join("hack").join(script))
            .args(args)
            .env("KUBECONFIG", kubeconfig())
            .env("KUBESTEER_STATE", state)
            .env("KUBECTL", cached_tool("kubectl"))
            .env("HELM", cached_tool("helm")),
        None,
        limit,
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
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// KEDA's operator (`hack/keda.sh`): 8-17 minutes to build the first time.
pub const KEDA: Addon = Addon {
    script: "keda.sh",
    build_minutes: 40,
    deployments: &[("keda", "keda-operator")],
};

/// cert-manager's controller, cainjector and webhook (`hack/cert-manager.sh`), from its own
/// chart: 6-12 minutes to build the first time.
pub const CERT_MANAGER: Addon = Addon {
    script: "cert-manager.sh",
    build_minutes: 40,
    deployments: &[
        ("cert-manager", "cert-manager"),
        ("cert-manager", "cert-manager-cainjector"),
        ("cert-manager", "cert-manager-webhook"),
    ],
};

/// The Prometheus Operator (`hack/prometheus-operator.sh`): 5-10 minutes to build the first
/// time. Prometheus itself comes from `hack/build-control-plane.sh monitoring`.
pub const PROMETHEUS_OPERATOR: Addon = Addon {
    script: "prometheus-operator.sh",
    build_minutes: 40,
    deployments: &[("monitoring", "prometheus-operator")],
};

/// `hack/SCRIPT ARGS`'s stdout, trimmed: what a script says about what it builds.
fn script_says(script: &str, args: &[&str]) -> Result<String> {
    Ok(hack(&state_dir(), script, args, Duration::from_secs(60))?
        .trim()
        .to_string())
}

/// cmctl, cert-manager's command line, as `hack/cert-manager.sh` built it (cached).
pub fn cmctl() -> Result<std::path::PathBuf> {
    Ok(script_says(CERT_MANAGER.script, &[])?
        .lines()
        .last()
        .context("hack/cert-manager.sh printed no path")?
        .into())
}

/// The image of Prometheus `hack/prometheus-operator.sh image` packed, for a Prometheus object's
/// `spec.image`, and its version, for `spec.version`.
pub fn prometheus_image() -> Result<(String, String)> {
    let image = script_says(PROMETHEUS_OPERATOR.script, &["prometheus-image"])?;
    let version = image
        .rsplit_once(':')
        .map(|(_, tag)| tag.to_string())
        .context("an image without a tag")?;
    Ok((image, version))
}
