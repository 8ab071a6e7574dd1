//! `kubectl` as a user runs it: runs, namespaces that clean up after themselves, grants and
//! impersonation, jsonpath reads.
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use base64::Engine as _;
use chrono::Utc;

/// The repository root, for `config/samples` and the like.
use crate::*;

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

impl Run {
    /// Refused by an admission webhook, with `field` named in the denial.
    pub fn denied_by_webhook_on(&self, field: &str) -> bool {
        !self.ok && self.stderr.contains("denied the request") && self.stderr.contains(field)
    }
}

/// Applies, with `apply`, a Scaler only the validating webhook refuses, and fails unless the
/// webhook denied it naming `spec.timeZone`: the schema takes any string, and only the webhook
/// knows the IANA names.
pub fn webhook_denies_a_bad_time_zone(apply: impl FnOnce(&str) -> Result<Run>) -> Result<()> {
    let bad = apply(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: bad}\n\
         spec: {scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 9, end: 17}], timeZone: Mars/Olympus}\n",
    )?;
    ensure!(
        bad.denied_by_webhook_on("spec.timeZone"),
        "the webhook's denial names the field: {bad:?}"
    );
    Ok(())
}

/// How long a kubectl call may take beyond its own `--timeout`.
const KUBECTL_MARGIN: Duration = Duration::from_secs(60);
/// How long a kubectl call without `--timeout` may take.
const KUBECTL_LIMIT: Duration = Duration::from_secs(180);

/// Runs the pinned kubectl against the local cluster, feeding `stdin` when given. It fails
/// (naming the command line) when kubectl has not finished within its `--timeout` plus a minute,
/// or within 3 minutes without one.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Result<Run> {
    let binary = cache_bin().join("kubectl");
    let mut cmd = Command::new(&binary);
    cmd.arg("--kubeconfig").arg(kubeconfig()).args(args);
    let limit = timeout_flag(args).map_or(KUBECTL_LIMIT, |t| t + KUBECTL_MARGIN);
    let what = format!("kubectl {}", args.join(" "));
    match output_within(&mut cmd, stdin.map(str::as_bytes), limit, &what) {
        Ok(out) => Ok(out.into()),
        Err(e) if !binary.exists() => Err(e.context("run `make control-plane` first")),
        Err(e) => Err(e),
    }
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
        let name = unique(&format!("{prefix}-"));
        kubectl_ok(&["create", "namespace", &name], None)?;
        Ok(Namespace(name))
    }

    /// A new namespace labelled `kubesteer.io/e2e=<id>`, so that the webhook configurations of
    /// the install (or host webhook) `id` apply to it.
    pub fn admitted_by(prefix: &str, id: &str) -> Result<Self> {
        let ns = Self::new(prefix)?;
        let label = format!("kubesteer.io/e2e={id}");
        kubectl_ok(&["label", "namespace", ns.name(), &label], None)?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    /// `kubectl create deployment` of `replicas` nginx pods (kwok runs them) in this namespace.
    pub fn create_deployment(&self, name: &str, replicas: u32) -> Result<()> {
        create_deployment(&self.0, name, replicas)
    }

    /// `kubectl apply -f -` of `yaml` in this namespace.
    pub fn apply(&self, yaml: &str) -> Result<Run> {
        apply(&self.0, yaml)
    }

    /// `kubectl patch --type=merge` of `object` (e.g. `memcached/cache`) in this namespace.
    pub fn merge_patch(&self, object: &str, patch: &str) -> Result<String> {
        merge_patch(&self.0, object, patch)
    }

    /// Waits until the controller has written the status of `object`'s current generation
    /// (`status.observedGeneration`) and returns that generation.
    pub fn wait_observed(&self, object: &str, timeout: Duration) -> Result<String> {
        let generation = jsonpath(&self.0, object, "{.metadata.generation}")?;
        eventually(
            timeout,
            &format!("{object} generation {generation} observed"),
            || {
                let observed = jsonpath(&self.0, object, "{.status.observedGeneration}")?;
                Ok((observed == generation).then_some(()))
            },
        )?;
        Ok(generation)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"], None);
        // The test's controller is gone by now, so Scaler finalizers would hold the namespace
        // in Terminating for ever.
        let scalers = kubectl(
            &["get", "scalers.kubesteer.io", "-n", &self.0, "-o", "name"],
            None,
        );
        for scaler in scalers.iter().flat_map(|r| r.stdout.lines()) {
            let _ = kubectl(
                &[
                    "patch",
                    "-n",
                    &self.0,
                    scaler,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ],
                None,
            );
        }
    }
}

/// Reads one JSONPath of one object.
pub fn jsonpath(ns: &str, resource: &str, path: &str) -> Result<String> {
    kubectl_ok(
        &["get", "-n", ns, resource, "-o", &format!("jsonpath={path}")],
        None,
    )
}

/// The sorted names of the live pods of the owner `instance` in `ns` (its
/// `app.kubernetes.io/instance` label): terminating pods are on their way out and are left out.
pub fn instance_pods(ns: &str, instance: &str) -> Result<Vec<String>> {
    let out = kubectl_ok(
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("app.kubernetes.io/instance={instance}"),
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ],
        None,
    )?;
    let mut names: Vec<String> = out
        .lines()
        .filter(|l| l.split_whitespace().count() == 1)
        .map(|l| l.trim().to_string())
        .collect();
    names.sort();
    Ok(names)
}

/// The notes of the events with `reason` in `ns`, oldest first.
pub fn event_notes(ns: &str, reason: &str) -> Result<Vec<String>> {
    let out = kubectl_ok(
        &[
            "get",
            "events.events.k8s.io",
            "-n",
            ns,
            "--field-selector",
            &format!("reason={reason}"),
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            "jsonpath={range .items[*]}{.note}{\"\\n\"}{end}",
        ],
        None,
    )?;
    Ok(out.lines().map(String::from).collect())
}

/// Applies the committed CRDs as `make install` does (`hack/crds.sh`), and waits until they are
/// established.
pub fn install_crds() -> Result<()> {
    // The script waits up to 60 s for the CRDs to be Established.
    let out = output_within(
        Command::new(repo_root().join("hack/crds.sh"))
            .arg(cached_tool("kubectl"))
            .env("KUBECONFIG", kubeconfig()),
        None,
        Duration::from_secs(180),
        "hack/crds.sh",
    )?;
    if !out.status.success() {
        bail!("hack/crds.sh: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// Waits up to a minute until the CRD `name` is Established. Not `kubectl wait`: it fails at once
/// on a CRD that has no status yet (`accessor error: <nil>`), as a just-created one may not.
pub fn crd_established(name: &str) -> Result<()> {
    eventually(
        Duration::from_secs(60),
        &format!("the CRD {name} to be Established"),
        || {
            let status = kubectl_ok(
                &[
                    "get",
                    "crd",
                    name,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
                ],
                None,
            )?;
            ensure!(status == "True", "Established is {status:?}");
            Ok(Some(()))
        },
    )
}

/// A Role in `ns` with `verbs` on `resource`, bound to `user`.
pub fn grant(ns: &str, role: &str, verbs: &str, resource: &str, user: &str) -> Result<()> {
    kubectl_ok(
        &[
            "create",
            "role",
            role,
            "-n",
            ns,
            &format!("--verb={verbs}"),
            &format!("--resource={resource}"),
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "create",
            "rolebinding",
            role,
            "-n",
            ns,
            &format!("--role={role}"),
            &format!("--user={user}"),
        ],
        None,
    )?;
    Ok(())
}

/// `kubectl apply -f -` of `yaml` in `ns`, as the cluster's admin.
/// `kubectl create deployment` of `replicas` nginx pods (kwok runs them) in `ns`.
pub fn create_deployment(ns: &str, name: &str, replicas: u32) -> Result<()> {
    let replicas = format!("--replicas={replicas}");
    kubectl_ok(
        &[
            "create",
            "deployment",
            name,
            "-n",
            ns,
            "--image=nginx",
            &replicas,
        ],
        None,
    )?;
    Ok(())
}

pub fn apply(ns: &str, yaml: &str) -> Result<Run> {
    kubectl(&["apply", "-n", ns, "-f", "-"], Some(yaml))
}

/// `kubectl patch --type=merge` of `object` (e.g. `memcached/cache`) in `ns`, as the cluster's
/// admin.
pub fn merge_patch(ns: &str, object: &str, patch: &str) -> Result<String> {
    kubectl_ok(
        &["patch", "-n", ns, object, "--type=merge", "-p", patch],
        None,
    )
}

/// `kubectl patch --type=json` of `object` (e.g. `welcome/hello`) in `ns`, as the cluster's admin.
pub fn json_patch(ns: &str, object: &str, patch: &str) -> Result<String> {
    kubectl_ok(
        &["patch", "-n", ns, object, "--type=json", "-p", patch],
        None,
    )
}

/// `kubectl apply` of `yaml` in `ns` as `user`.
pub fn apply_as(user: &str, ns: &str, yaml: &str) -> Result<Run> {
    kubectl(
        &["apply", &format!("--as={user}"), "-n", ns, "-f", "-"],
        Some(yaml),
    )
}

/// `kubectl patch --type=merge` of `object` in `ns` as `user`.
pub fn merge_patch_as(user: &str, ns: &str, object: &str, patch: &str) -> Result<Run> {
    kubectl(
        &[
            "patch",
            &format!("--as={user}"),
            "-n",
            ns,
            object,
            "--type=merge",
            "-p",
            patch,
        ],
        None,
    )
}

/// The webhooks the chart registers: a mutating and a validating one per kind.
pub const WEBHOOKS: usize = 2 * kubesteer_api::kind::ALL.len();

/// A random-enough suffix for names that must not collide between runs.
pub fn unique(prefix: &str) -> String {
    let nanos = Utc::now().timestamp_subsec_nanos();
    format!("{prefix}{:x}{:x}", std::process::id() % 4096, nanos % 65536)
}

/// A copy of the local kubeconfig whose user impersonates `user` with `groups`, so a process
/// run with it has exactly that identity's RBAC.
pub fn impersonating_kubeconfig(user: &str, groups: &[&str], file: &str) -> Result<PathBuf> {
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(kubeconfig())?)?;
    let users = config
        .get_mut("users")
        .and_then(|u| u.as_sequence_mut())
        .context("kubeconfig has no users")?;
    for entry in users {
        if let Some(u) = entry.get_mut("user").and_then(|u| u.as_mapping_mut()) {
            u.insert("as".into(), user.into());
            u.insert(
                "as-groups".into(),
                groups
                    .iter()
                    .map(|g| serde_yaml::Value::from(*g))
                    .collect::<Vec<_>>()
                    .into(),
            );
        }
    }
    let path = target_dir().join("e2e").join(file);
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

/// `jsonpath` of every webhook of both configurations named `name`, one line per webhook.
pub fn webhook_fields(name: &str, jsonpath: &str) -> Result<Vec<String>> {
    let mut all = Vec::new();
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let range = format!("jsonpath={{range .webhooks[*]}}{jsonpath}{{\"\\n\"}}{{end}}");
        let out = kubectl_ok(&["get", kind, name, "-o", &range], None)?;
        all.extend(out.lines().map(String::from));
    }
    Ok(all)
}

/// Standard base64, as Secret data and `caBundle`s are shown.
pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes standard base64, surrounding whitespace ignored.
pub fn unbase64(text: &str) -> Result<Vec<u8>> {
    Ok(base64::engine::general_purpose::STANDARD.decode(text.trim())?)
}

/// The caBundle of the Scaler CRD's conversion webhook (base64), as the apiserver has it.
pub fn conversion_ca_bundle() -> Result<String> {
    kubectl_ok(
        &[
            "get",
            "crd",
            "scalers.kubesteer.io",
            "-o",
            "jsonpath={.spec.conversion.webhook.clientConfig.caBundle}",
        ],
        None,
    )
}
