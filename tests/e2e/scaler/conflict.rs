//! Two Scalers that claim one Deployment, as a race or a create while the webhook is down lets
//! happen: the older owns it, the younger reports `Conflict` naming the owner once and leaves the
//! Deployment alone, and takes over as soon as the owner is deleted or lets the Deployment go.
use std::time::Duration;

use anyhow::{Context as _, Result};
use kubesteer_tests::{
    eventually, hh_mm, jsonpath, kubectl, kubectl_ok, parse_rfc3339, unix_now, ControllerProcess,
    Namespace, Webhook,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
const OWNER: &str = "{.metadata.annotations.kubesteer\\.io/original-replicas-owner}";
const ORIGINAL: &str = "{.metadata.annotations.kubesteer\\.io/original-replicas}";

/// A Scaler `name` of `targets` whose window is open now, at `replicas`.
fn open_window(name: &str, targets: &str, replicas: u32) -> String {
    let now = unix_now();
    format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: {name}}}\nspec: {{scaleTargetRefs: [{targets}], windows: [{{start: \"{}\", end: \"{}\", replicas: {replicas}}}]}}\n",
        hh_mm(now - 3600),
        hh_mm(now + 3600)
    )
}

fn replicas(ns: &Namespace, deployment: &str) -> Result<String> {
    jsonpath(
        ns.name(),
        &format!("deployment/{deployment}"),
        "{.spec.replicas}",
    )
}

/// `reason|message` of a Scaler's Ready condition.
fn ready(ns: &Namespace, scaler: &str) -> Result<String> {
    jsonpath(
        ns.name(),
        &format!("scaler/{scaler}"),
        "{.status.conditions[?(@.type==\"Ready\")].reason}|{.status.conditions[?(@.type==\"Ready\")].message}",
    )
}

/// Creates `yaml` once the clock is past the second `older` was created in, so the new Scaler
/// is younger by its creationTimestamp (which has whole seconds), not only by its uid.
fn create_younger_than(ns: &Namespace, older: &str, yaml: &str) -> Result<()> {
    let created = parse_rfc3339(&jsonpath(
        ns.name(),
        &format!("scaler/{older}"),
        "{.metadata.creationTimestamp}",
    )?)?;
    eventually(Duration::from_secs(5), "the next second", || {
        Ok((kubesteer_tests::now_seconds() >= created + 1.0).then_some(()))
    })?;
    kubectl_ok(&["create", "-n", ns.name(), "-f", "-"], Some(yaml))?;
    Ok(())
}

/// The Conflict events about Scaler `scaler`, each with how often it was published.
fn conflict_events(ns: &Namespace, scaler: &str) -> Result<Vec<(String, i64)>> {
    let list: Value = serde_json::from_str(&kubectl_ok(
        &[
            "get",
            "events.events.k8s.io",
            "-n",
            ns.name(),
            "--field-selector",
            "reason=Conflict",
            "-o",
            "json",
        ],
        None,
    )?)?;
    Ok(list["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter(|e| e["regarding"]["name"] == scaler)
        .map(|e| {
            let note = e["note"].as_str().unwrap_or_default().to_string();
            (note, e["series"]["count"].as_i64().unwrap_or(1))
        })
        .collect())
}

/// Waits until `younger` reports the conflict with `older` and the Deployment `web` is at
/// `owner_replicas` under `older`'s record; returns the Conflict message.
fn wait_conflict(
    ns: &Namespace,
    younger: &str,
    older: &str,
    owner_replicas: &str,
) -> Result<String> {
    let owner = format!("{}/{older}", ns.name());
    let message = eventually(WAIT, &format!("{younger} in conflict"), || {
        let r = ready(ns, younger)?;
        Ok(r.strip_prefix("Conflict|").map(String::from))
    })?;
    assert!(
        message.contains(&format!("Scaler {owner}, which is older")),
        "{message}"
    );
    assert_eq!(
        jsonpath(
            ns.name(),
            &format!("scaler/{younger}"),
            "{.status.conditions[?(@.type==\"Ready\")].status}"
        )?,
        "False"
    );
    assert_eq!(replicas(ns, "web")?, owner_replicas);
    assert_eq!(jsonpath(ns.name(), "deployment/web", OWNER)?, owner);
    Ok(message)
}

/// Waits until `scaler` holds `web` at `want` replicas, recorded as its own with `original`.
fn wait_owned(ns: &Namespace, scaler: &str, want: &str, original: &str) -> Result<()> {
    let owner = format!("{}/{scaler}", ns.name());
    eventually(WAIT, &format!("web scaled by {scaler}"), || {
        let now = (
            replicas(ns, "web")?,
            jsonpath(ns.name(), "deployment/web", OWNER)?,
            jsonpath(ns.name(), "deployment/web", ORIGINAL)?,
        );
        Ok((now == (want.to_string(), owner.clone(), original.to_string())).then_some(()))
    })?;
    eventually(WAIT, &format!("{scaler} ready"), || {
        Ok(ready(ns, scaler)?.starts_with("WindowOpen|").then_some(()))
    })
}

#[test]
fn the_older_scaler_owns_a_shared_target_and_the_younger_takes_over_when_it_is_deleted(
) -> Result<()> {
    let webhook = Webhook::start("scl-conflict")?;
    let ns = webhook.namespace("scl-conflict")?;
    let _controller = ControllerProcess::start(ns.name())?;
    ns.create_deployment("web", 1)?;
    assert!(
        ns.apply(&open_window(
            "first",
            "{apiVersion: apps/v1, kind: Deployment, name: web}",
            3
        ))?
        .ok
    );
    wait_owned(&ns, "first", "3", "1")?;

    // Through the webhook, a second claim is denied (its claims index names the owner). A dry
    // run stores nothing, so it is asked until the apiserver sees the namespace's new label.
    let second = open_window(
        "second",
        "{apiVersion: apps/v1, kind: Deployment, name: web}",
        5,
    );
    let denied = eventually(WAIT, "the webhook's claim denial", || {
        let run = kubectl(
            &["create", "--dry-run=server", "-n", ns.name(), "-f", "-"],
            Some(&second),
        )?;
        Ok((!run.ok).then_some(run))
    })?;
    let want = format!(
        "spec.scaleTargetRefs[0]: Forbidden: Deployment {0}/web is already scaled by Scaler {0}/first",
        ns.name()
    );
    assert!(denied.stderr.contains(&want), "{}", denied.stderr);

    // With the webhook out of the way (the namespace no longer selected), both get in.
    let label = format!("{}-", kubesteer_api::keys::label::E2E);
    kubectl_ok(&["label", "namespace", ns.name(), &label], None)?;
    let created = eventually(WAIT, "the second Scaler past the webhook", || {
        let run = kubectl(
            &["create", "--dry-run=server", "-n", ns.name(), "-f", "-"],
            Some(&second),
        )?;
        Ok(run.ok.then_some(()))
    });
    created?;
    create_younger_than(&ns, "first", &second)?;

    let message = wait_conflict(&ns, "second", "first", "3")?;
    // More reconciles in the same conflict (a spec change, a touched Deployment) say nothing new.
    ns.merge_patch("scaler/second", r#"{"spec":{"replicas":6}}"#)?;
    ns.wait_observed("scaler/second", WAIT)?;
    kubectl_ok(
        &["annotate", "-n", ns.name(), "deployment/web", "touched=1"],
        None,
    )?;
    ns.merge_patch("scaler/second", r#"{"spec":{"replicas":5}}"#)?;
    ns.wait_observed("scaler/second", WAIT)?;
    assert_eq!(ready(&ns, "second")?, format!("Conflict|{message}"));
    assert_eq!(replicas(&ns, "web")?, "3", "only the owner scales it");
    assert_eq!(
        conflict_events(&ns, "second")?,
        vec![(message, 1)],
        "one Conflict event, published once"
    );
    assert_eq!(conflict_events(&ns, "first")?, vec![]);

    // The owner goes: it gives the Deployment back, and the younger takes it over at once
    // (its window runs for another hour, so no timer would have woken it).
    kubectl_ok(
        &["delete", "-n", ns.name(), "scaler/first", "--timeout=60s"],
        None,
    )?;
    wait_owned(&ns, "second", "5", "1")?;
    Ok(())
}

#[test]
fn the_younger_scaler_takes_over_when_the_older_stops_claiming_the_target() -> Result<()> {
    // No webhook selects this namespace: both Scalers get in, as while the webhook is down.
    let ns = Namespace::new("scl-letgo")?;
    let _controller = ControllerProcess::start(ns.name())?;
    ns.create_deployment("web", 2)?;
    ns.create_deployment("api", 1)?;
    assert!(
        ns.apply(&open_window(
            "early",
            "{apiVersion: apps/v1, kind: Deployment, name: web}",
            4
        ))?
        .ok
    );
    wait_owned(&ns, "early", "4", "2")?;
    create_younger_than(
        &ns,
        "early",
        &open_window(
            "late",
            "{apiVersion: apps/v1, kind: Deployment, name: web}",
            7,
        ),
    )?;
    wait_conflict(&ns, "late", "early", "4")?;

    // The owner drops web for api: it restores web, and the younger takes web over.
    ns.merge_patch(
        "scaler/early",
        r#"{"spec":{"scaleTargetRefs":[{"apiVersion":"apps/v1","kind":"Deployment","name":"api"}]}}"#,
    )?;
    wait_owned(&ns, "late", "7", "2")?;
    eventually(WAIT, "api scaled by early", || {
        Ok((replicas(&ns, "api")? == "4").then_some(()))
    })?;
    assert_eq!(conflict_events(&ns, "late")?.len(), 1);
    Ok(())
}
