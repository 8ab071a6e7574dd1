//! An Application's Secret references as the chart's pods and the host-run webhook both guard
//! them (tests/e2e/install/release.rs, tests/e2e/webhook/application.rs).
use anyhow::{ensure, Result};

use crate::{jsonpath, merge_patch_as};

/// "bob", who may edit Application `site` in `ns` but not get Secret `db`, whose key `pw` its
/// first env var reads, is denied an image swap (the new image would read the Secret) and a
/// second key of the Secret, each with the field and the missing right named; its image is
/// still "nginx" after both.
pub fn secret_reads_denied_to_bob(ns: &str) -> Result<()> {
    let patch_as_bob = |patch: &str| merge_patch_as("bob", ns, "application/site", patch);
    let run = patch_as_bob(r#"{"spec":{"image":"evil.example/exfiltrate:1"}}"#)?;
    ensure!(!run.ok, "an image swap reads the Secret: {run:?}");
    let want = format!(
        "spec.env[0].valueFrom.secretKeyRef.name: Forbidden: user \"bob\" may not get secrets \"db\" in namespace \"{ns}\""
    );
    ensure!(run.stderr.contains(&want), "{want} not in {}", run.stderr);
    let run = patch_as_bob(
        r#"{"spec":{"env":[{"name":"PW","valueFrom":{"secretKeyRef":{"name":"db","key":"pw"}}},{"name":"ROOT","valueFrom":{"secretKeyRef":{"name":"db","key":"root"}}}]}}"#,
    )?;
    ensure!(!run.ok, "a second key of the Secret: {run:?}");
    ensure!(
        run.stderr
            .contains("spec.env[1].valueFrom.secretKeyRef.name: Forbidden"),
        "{}",
        run.stderr
    );
    let image = jsonpath(ns, "application/site", "{.spec.image}")?;
    ensure!(
        image == "nginx",
        "nothing of the denied edits was stored, but the image is {image:?}"
    );
    Ok(())
}
