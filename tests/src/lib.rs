//! Helpers for end-to-end tests that drive a real cluster with the real `kubectl`, like a user.
#![forbid(unsafe_code)]
#![deny(warnings, rust_2018_idioms)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The repository root, for `config/samples` and the like.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cache_bin() -> PathBuf {
    let cache = std::env::var_os("KUBESTEER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/kubesteer")
        });
    cache.join("bin")
}

/// The kubeconfig of the local cluster that `hack/cluster.sh up` wrote.
pub fn kubeconfig() -> PathBuf {
    std::env::var_os("KUBESTEER_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".kubesteer/kubeconfig"))
}

/// The result of one kubectl call.
#[derive(Debug)]
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// Runs the pinned kubectl against the local cluster, feeding `stdin` when given.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Result<Run> {
    let mut cmd = Command::new(cache_bin().join("kubectl"));
    cmd.arg("--kubeconfig").arg(kubeconfig()).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .context("starting kubectl; run `make control-plane` first")?;
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .context("kubectl stdin")?
            .write_all(input.as_bytes())?;
    }
    Ok(child.wait_with_output()?.into())
}

/// Like [`kubectl`], but fails with kubectl's stderr when the call fails.
pub fn kubectl_ok(args: &[&str], stdin: Option<&str>) -> Result<String> {
    let run = kubectl(args, stdin)?;
    if !run.ok {
        bail!("kubectl {} failed: {}", args.join(" "), run.stderr);
    }
    Ok(run.stdout)
}

/// A namespace of its own for one test, deleted (without waiting) when dropped.
pub struct Namespace(pub String);

impl Namespace {
    pub fn new(prefix: &str) -> Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .subsec_nanos();
        let name = format!(
            "{prefix}-{:x}{:x}",
            std::process::id() % 4096,
            nanos % 65536
        );
        kubectl_ok(&["create", "namespace", &name], None)?;
        Ok(Namespace(name))
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    /// `kubectl apply -f -` of `yaml` in this namespace.
    pub fn apply(&self, yaml: &str) -> Result<Run> {
        kubectl(&["apply", "-n", &self.0, "-f", "-"], Some(yaml))
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"], None);
    }
}

/// Polls `check` until it returns `Some`, or fails after `timeout` with the last observation.
pub fn eventually<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last error: {last}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Reads one JSONPath of one object.
pub fn jsonpath(ns: &str, resource: &str, path: &str) -> Result<String> {
    kubectl_ok(
        &["get", "-n", ns, resource, "-o", &format!("jsonpath={path}")],
        None,
    )
}
