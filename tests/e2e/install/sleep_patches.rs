//! Sleep by a declared patch (`spec.patches`) through the chart's pods: docs/scaler.md's
//! ready-made patches, CloudNativePG hibernation and Argo CD auto-sync off, on CRDs of the same
//! shape. A group of its own: Argo CD's Application CRD shares kubesteer's plural, so it is
//! served only while this group runs.

use anyhow::{ensure, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::{kubectl, kubectl_ok, repo_root};

use super::release::{notes_of, scalers_author, user_get, user_patch, user_wait};

/// A CRD of `kind` (`plural`) in `group`/`version` of any shape, with a `/scale` on
/// `spec.instances` when `scale`.
fn crd(group: &str, version: &str, kind: &str, plural: &str, scale: bool) -> String {
    let subresources = match scale {
        true => "\n      subresources:\n        scale: {specReplicasPath: .spec.instances, statusReplicasPath: .status.instances}",
        false => "",
    };
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {plural}.{group}}}\nspec:\n  group: {group}\n  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}\n  scope: Namespaced\n  versions:\n    - name: {version}\n      served: true\n      storage: true\n      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}{subresources}\n",
        singular = kind.to_lowercase()
    )
}

/// Applies `crd` and waits until it is served.
fn install_crd(yaml: &str, name: &str) -> Result<()> {
    kubectl_ok(&["apply", "-f", "-"], Some(yaml))?;
    let crd = format!("crd/{name}");
    let wait = [
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        crd.as_str(),
    ];
    kubectl_ok(&wait, None)?;
    Ok(())
}

/// A CRD of the same shape as CloudNativePG's Cluster, with its `/scale` on `spec.instances`:
/// cluster-wide, applied by every test that needs it (docs/migrating.md's kube-green Scaler
/// names one too). No kubesteer kind is called Cluster, so it is in nobody's way.
pub(super) fn install_cnpg_cluster_kind() -> Result<()> {
    let yaml = crd("postgresql.cnpg.io", "v1", "Cluster", "clusters", true);
    install_crd(&yaml, "clusters.postgresql.cnpg.io")
}

/// A CRD of the same shape as Argo CD's Application, for as long as it is held. Its plural is
/// kubesteer's Application's too, so while it is served `kubectl get application/NAME` means
/// Argo CD's (as on any cluster that runs both): this group runs alone, after the release's
/// tests, and removes it when done.
struct ArgoApplicationKind;

impl ArgoApplicationKind {
    fn install() -> Result<Self> {
        let yaml = crd(
            "argoproj.io",
            "v1alpha1",
            "Application",
            "applications",
            false,
        );
        install_crd(&yaml, ARGO_CRD)?;
        Ok(Self)
    }
}

const ARGO_CRD: &str = "applications.argoproj.io";

impl Drop for ArgoApplicationKind {
    fn drop(&mut self) {
        let crd = format!("crd/{ARGO_CRD}");
        let _ = kubectl(&["delete", crd.as_str(), "--timeout=60s"], None);
    }
}

/// docs/scaler.md's Scaler with the ready-made patches, as JSON, with `windows` in its spec
/// and no outsideReplicas.
fn ready_made_patches(windows: &str) -> Result<String> {
    let page = std::fs::read_to_string(repo_root().join("docs/scaler.md"))?;
    let block = page
        .split("```yaml\n")
        .filter_map(|b| b.split_once("```").map(|(yaml, _)| yaml))
        .find(|yaml| yaml.contains("name: nights-data"))
        .context("docs/scaler.md's nights-data Scaler")?;
    let mut scaler: serde_json::Value = serde_yaml::from_str(block)?;
    scaler["spec"]["windows"] = serde_yaml::from_str(windows)?;
    scaler["spec"]["timeZone"] = "UTC".into();
    // Given back as they were when it is deleted, not left at outsideReplicas.
    if let Some(spec) = scaler["spec"].as_object_mut() {
        spec.remove("outsideReplicas");
    }
    Ok(scaler.to_string())
}

#[test]
fn a_kind_without_its_own_sleep_sleeps_by_a_declared_patch_and_is_given_back_exactly() -> Result<()>
{
    install_cnpg_cluster_kind()?;
    let _argo = ArgoApplicationKind::install()?;
    let release = Release::install("patches", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    // Created, not applied: no last-applied annotation, so the annotations read as set here.
    kubectl_ok(
        &["create", "-n", n, "-f", "-"],
        Some(
            "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata: {name: pg, annotations: {team: data}}\nspec: {instances: 3}\n---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: shop}\nspec:\n  project: default\n  syncPolicy: {automated: {prune: true, selfHeal: true}}\n",
        ),
    )?;
    let annotations = "{.metadata.annotations}";
    let automated = "{.spec.syncPolicy.automated}";
    let asleep = r#"[{start: "00:00", end: "24:00", replicas: 0}]"#;
    let awake = r#"[{start: "00:00", end: "24:00", replicas: 1}]"#;

    // The webhook: a patch it cannot take back is refused with its field; an author who may not
    // patch the Cluster is refused; a patch for a kind no target is of is only warned of.
    let mut bad: serde_json::Value = serde_json::from_str(&ready_made_patches(asleep)?)?;
    bad["spec"]["patches"][1]["patch"] = "[{op: move, from: /spec/a, path: /spec/b}]".into();
    let run = release.apply(&bad.to_string())?;
    ensure!(
        !run.ok
            && run.stderr.contains("spec.patches[1].patch: Invalid value")
            && run
                .stderr
                .contains("is not supported: use add, replace or remove"),
        "{run:?}"
    );
    let run =
        kubesteer_tests::apply_as(&scalers_author(n, "bob")?, n, &ready_made_patches(asleep)?)?;
    ensure!(
        !run.ok
            && run.stderr.contains("spec.scaleTargetRefs[0]")
            && run.stderr.contains("patch clusters (postgresql.cnpg.io)"),
        "bob may not patch the Cluster: {run:?}"
    );

    // Asleep: both patched, with the record of what was there.
    let sleep_both = || -> Result<()> {
        let run = release.apply(&ready_made_patches(asleep)?)?;
        ensure!(run.ok, "{run:?}");
        let hibernation = "{.metadata.annotations.cnpg\\.io/hibernation}";
        user_wait(&release, "cluster.postgresql.cnpg.io/pg", hibernation, "on")?;
        user_wait(&release, "application.argoproj.io/shop", automated, "")
    };
    sleep_both()?;
    user_wait(
        &release,
        "scaler/nights-data",
        "{.status.targets[*].replicas}",
        "0 0",
    )?;
    // The Cluster's /scale is left alone: it sleeps by the patch, not at 0 instances.
    assert_eq!(
        user_get(
            &release,
            "cluster.postgresql.cnpg.io/pg",
            "{.spec.instances}"
        )?,
        "3"
    );
    let notes = notes_of(n, "Scaled")?;
    assert!(
        notes.contains(&format!("Suspended Cluster {n}/pg")),
        "{notes:?}"
    );
    // Someone turns auto-sync back on while the app sleeps: that is theirs to keep.
    user_patch(
        &release,
        "application.argoproj.io/shop",
        r#"{"spec":{"syncPolicy":{"automated":{"prune":false}}}}"#,
    )?;

    // Awake: the Cluster's patched path and the sleep record gone (the record of its replicas
    // stays while the window holds it, as for any target), the Application's auto-sync as its
    // author left it.
    let run = release.apply(&ready_made_patches(awake)?)?;
    ensure!(run.ok, "{run:?}");
    let woken = "{.metadata.annotations.cnpg\\.io/hibernation}/{.metadata.annotations.kubesteer\\.io/asleep-patch}/{.metadata.annotations.team}";
    user_wait(&release, "cluster.postgresql.cnpg.io/pg", woken, "//data")?;
    user_wait(
        &release,
        "application.argoproj.io/shop",
        "{.metadata.annotations.kubesteer\\.io/asleep-patch}",
        "",
    )?;
    assert_eq!(
        user_get(&release, "application.argoproj.io/shop", automated)?,
        r#"{"prune":false}"#
    );
    let kept = notes_of(n, "PatchKept")?;
    assert!(
        kept.iter().any(|k| k.starts_with(&format!(
            "Left /spec/syncPolicy/automated of Application {n}/shop as it is"
        ))),
        "{kept:?}"
    );

    // Asleep again, then the Scaler deleted: given back from the record alone.
    sleep_both()?;
    kubectl_ok(
        &["delete", "-n", n, "scaler/nights-data", "--timeout=60s"],
        None,
    )
    .with_context(|| release.describe())?;
    user_wait(
        &release,
        "cluster.postgresql.cnpg.io/pg",
        annotations,
        r#"{"team":"data"}"#,
    )?;
    user_wait(
        &release,
        "application.argoproj.io/shop",
        automated,
        r#"{"prune":false}"#,
    )?;
    Ok(())
}
