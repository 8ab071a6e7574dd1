//! Scaler v1beta1 against the real apiserver, controller-manager, webhook and controller: a
//! StatefulSet scaled through its `/scale`, an HPA cooperated with through its minReplicas,
//! a holiday (excludeDates) inside an open window, an override, overlapping windows, a kind
//! without `/scale` denied, and the `Next` column.
use std::time::Duration;

use anyhow::Result;
use chrono::{Duration as TimeDelta, Utc};
use kubesteer_tests::{
    eventually, hh_mm, jsonpath, kubectl_ok, rfc3339, unix_now, ControllerProcess, Namespace,
    Webhook,
};

const WAIT: Duration = Duration::from_secs(90);

/// A v1beta1 Scaler `name` of the apps/v1 `kind` named `target`, with the rest of the spec.
fn scaler(name: &str, kind: &str, target: &str, rest: &str) -> String {
    format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: {name}}}\nspec:\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: {kind}, name: {target}}}]\n{rest}"
    )
}

/// A window open from an hour ago to an hour from now, at `replicas`.
fn open_window(replicas: u32) -> String {
    let now = unix_now();
    format!(
        "{{start: \"{}\", end: \"{}\", replicas: {replicas}}}",
        hh_mm(now - 3600),
        hh_mm(now + 3600)
    )
}

fn get(ns: &Namespace, object: &str, path: &str) -> Result<String> {
    jsonpath(ns.name(), object, path)
}

fn wait_for(ns: &Namespace, object: &str, path: &str, want: &str) -> Result<()> {
    eventually(WAIT, &format!("{object} {path} = {want}"), || {
        Ok((get(ns, object, path)? == want).then_some(()))
    })
}

fn stateful_set(ns: &Namespace, name: &str, replicas: u32) -> Result<()> {
    let yaml = format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n  serviceName: {name}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: registry.k8s.io/pause:3.10}}]}}\n"
    );
    let run = ns.apply(&yaml)?;
    anyhow::ensure!(run.ok, "{run:?}");
    Ok(())
}

#[test]
fn a_stateful_set_is_scaled_through_its_scale_subresource_and_given_back() -> Result<()> {
    let webhook = Webhook::start("b1-sts")?;
    let ns = webhook.namespace("b1-sts")?;
    let _controller = ControllerProcess::start(ns.name())?;
    stateful_set(&ns, "db", 1)?;
    let yaml = scaler(
        "db",
        "StatefulSet",
        "db",
        &format!(
            "  hpaCooperation: Disabled\n  windows: [{}]\n",
            open_window(3)
        ),
    );
    let run = ns.apply(&yaml)?;
    assert!(run.ok, "{run:?}");
    wait_for(&ns, "statefulset/db", "{.spec.replicas}", "3")?;
    wait_for(
        &ns,
        "scaler/db",
        "{.status.targets[0].kind}/{.status.targets[0].name}={.status.targets[0].replicas} from {.status.targets[0].originalReplicas}",
        "StatefulSet/db=3 from 1",
    )?;
    assert_eq!(
        get(
            &ns,
            "statefulset/db",
            "{.metadata.annotations.kubesteer\\.io/original-replicas}"
        )?,
        "1"
    );
    kubectl_ok(
        &["delete", "-n", ns.name(), "scaler/db", "--wait=true"],
        None,
    )?;
    wait_for(&ns, "statefulset/db", "{.spec.replicas}", "1")?;
    assert_eq!(
        get(
            &ns,
            "statefulset/db",
            "{.metadata.annotations.kubesteer\\.io/original-replicas}{.metadata.annotations.kubesteer\\.io/original-replicas-owner}"
        )?,
        "",
        "the record is gone with the Scaler"
    );
    Ok(())
}

#[test]
fn an_hpa_gets_its_min_replicas_raised_in_the_window_and_restored_after() -> Result<()> {
    let webhook = Webhook::start("b1-hpa")?;
    let ns = webhook.namespace("b1-hpa")?;
    let _controller = ControllerProcess::start(ns.name())?;
    ns.create_deployment("web", 1)?;
    let hpa = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: web}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  minReplicas: 1\n  maxReplicas: 10\n  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]\n";
    let run = ns.apply(hpa)?;
    assert!(run.ok, "{run:?}");
    let yaml = scaler(
        "web",
        "Deployment",
        "web",
        &format!("  windows: [{}]\n", open_window(4)),
    );
    let run = ns.apply(&yaml)?;
    assert!(run.ok, "{run:?}");
    assert!(
        run.stderr.contains("minReplicas"),
        "the author is told the HPA will be used: {run:?}"
    );
    wait_for(&ns, "hpa/web", "{.spec.minReplicas}", "4")?;
    assert_eq!(
        get(
            &ns,
            "hpa/web",
            "{.metadata.annotations.kubesteer\\.io/original-min-replicas}"
        )?,
        "1"
    );
    wait_for(
        &ns,
        "scaler/web",
        "{.status.targets[0].horizontalPodAutoscaler}",
        "web",
    )?;
    // The HPA, not the Scaler, brings the Deployment up to its new minimum.
    wait_for(&ns, "deployment/web", "{.spec.replicas}", "4")?;
    assert_eq!(
        get(
            &ns,
            "deployment/web",
            "{.metadata.annotations.kubesteer\\.io/original-replicas}"
        )?,
        "",
        "the Deployment's replicas were left to the HPA"
    );
    // Someone who may edit the HPA sets its record past its maxReplicas (10): the restore
    // brings it within, rather than failing with 422 and holding the Scaler's deletion forever.
    kubectl_ok(
        &[
            "annotate",
            "-n",
            ns.name(),
            "hpa/web",
            "--overwrite",
            "kubesteer.io/original-min-replicas=999",
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "delete",
            "-n",
            ns.name(),
            "scaler/web",
            "--wait=true",
            "--timeout=60s",
        ],
        None,
    )?;
    wait_for(&ns, "hpa/web", "{.spec.minReplicas}", "10")?;
    assert_eq!(
        get(
            &ns,
            "hpa/web",
            "{.metadata.annotations.kubesteer\\.io/original-min-replicas}"
        )?,
        ""
    );
    Ok(())
}

/// A time zone in which it is now about noon, so that "today" is the same day for the whole
/// test wherever the clock stands (Etc/GMT-N is UTC+N).
fn noon_zone() -> (String, String) {
    let now = Utc::now();
    let hour = i64::from(chrono::Timelike::hour(&now));
    let offset = (12 - hour).clamp(-12, 14);
    let zone = match offset {
        0 => "Etc/UTC".to_string(),
        o if o > 0 => format!("Etc/GMT-{o}"),
        o => format!("Etc/GMT+{}", -o),
    };
    let today = (now + TimeDelta::hours(offset))
        .format("%Y-%m-%d")
        .to_string();
    (zone, today)
}

#[test]
fn on_an_excluded_date_the_window_stays_closed_until_midnight() -> Result<()> {
    let webhook = Webhook::start("b1-hol")?;
    let ns = webhook.namespace("b1-hol")?;
    let _controller = ControllerProcess::start(ns.name())?;
    ns.create_deployment("web", 1)?;
    let (zone, today) = noon_zone();
    // Open all day, every day, but today is a holiday.
    let yaml = scaler(
        "holiday",
        "Deployment",
        "web",
        &format!(
            "  hpaCooperation: Disabled\n  timeZone: {zone}\n  windows: [{{start: \"00:00\", end: \"24:00\", replicas: 3}}]\n  excludeDates: [\"{today}\"]\n"
        ),
    );
    let run = ns.apply(&yaml)?;
    assert!(run.ok, "{run:?}");
    wait_for(
        &ns,
        "scaler/holiday",
        "{.status.conditions[0].reason}/{.status.active}",
        "ExcludedDate/false",
    )?;
    assert_eq!(get(&ns, "deployment/web", "{.spec.replicas}")?, "1");
    // The next transition is the window opening at the next local midnight.
    let next = get(&ns, "scaler/holiday", "{.status.nextTransitions[0].time}")?;
    let next = chrono::DateTime::parse_from_rfc3339(&next)?.to_utc();
    let until = next - Utc::now();
    assert!(
        until > TimeDelta::hours(9) && until < TimeDelta::hours(15),
        "next transition {next} should be the coming local midnight"
    );
    assert_eq!(
        get(
            &ns,
            "scaler/holiday",
            "{.status.nextTransitions[0].replicas}"
        )?,
        "3"
    );

    // The same Scaler without the holiday scales at once.
    let yaml = scaler(
        "holiday",
        "Deployment",
        "web",
        &format!(
            "  hpaCooperation: Disabled\n  timeZone: {zone}\n  windows: [{{start: \"00:00\", end: \"24:00\", replicas: 3}}]\n  excludeDates: [\"--01-01\"]\n"
        ),
    );
    if !today.ends_with("-01-01") {
        assert!(ns.apply(&yaml)?.ok);
        wait_for(&ns, "deployment/web", "{.spec.replicas}", "3")?;
    }
    Ok(())
}

#[test]
fn an_override_holds_the_replicas_until_its_time_and_one_in_the_past_is_denied() -> Result<()> {
    let webhook = Webhook::start("b1-ovr")?;
    let ns = webhook.namespace("b1-ovr")?;
    let _controller = ControllerProcess::start(ns.name())?;
    ns.create_deployment("web", 1)?;
    let now = unix_now();
    // The window is closed now (it opens in two hours); the override holds 2 for an hour.
    let closed = format!(
        "{{start: \"{}\", end: \"{}\", replicas: 5}}",
        hh_mm(now + 2 * 3600),
        hh_mm(now + 3 * 3600)
    );
    let until = rfc3339(now + 3600);
    let yaml = scaler(
        "hold",
        "Deployment",
        "web",
        &format!(
            "  hpaCooperation: Disabled\n  windows: [{closed}]\n  override: {{replicas: 2, until: \"{until}\"}}\n"
        ),
    );
    let run = ns.apply(&yaml)?;
    assert!(run.ok, "{run:?}");
    wait_for(&ns, "deployment/web", "{.spec.replicas}", "2")?;
    wait_for(
        &ns,
        "scaler/hold",
        "{.status.conditions[0].reason} {.status.override.replicas} {.status.nextTransitions[0].time}",
        &format!("Override 2 {until}"),
    )?;

    let past = rfc3339(now - 60);
    let yaml = scaler(
        "late",
        "Deployment",
        "web",
        &format!(
            "  hpaCooperation: Disabled\n  windows: [{closed}]\n  override: {{replicas: 2, until: \"{past}\"}}\n"
        ),
    );
    let run = ns.apply(&yaml)?;
    assert!(!run.ok, "{run:?}");
    assert!(
        run.stderr.contains("spec.override.until") && run.stderr.contains("must be in the future"),
        "{run:?}"
    );
    Ok(())
}

#[test]
fn overlapping_windows_give_the_highest_replicas_and_the_next_column_shows_the_change() -> Result<()>
{
    let webhook = Webhook::start("b1-ovl")?;
    let ns = webhook.namespace("b1-ovl")?;
    let _controller = ControllerProcess::start(ns.name())?;
    ns.create_deployment("web", 1)?;
    let now = unix_now();
    let small = open_window(2);
    // Open now too, closing 30 minutes from now: 4 until then, then the other window's 2.
    let big = format!(
        "{{start: \"{}\", end: \"{}\", replicas: 4}}",
        hh_mm(now - 3600),
        hh_mm(now + 1800)
    );
    let yaml = scaler(
        "both",
        "Deployment",
        "web",
        &format!("  hpaCooperation: Disabled\n  windows: [{small}, {big}]\n"),
    );
    assert!(ns.apply(&yaml)?.ok);
    wait_for(&ns, "deployment/web", "{.spec.replicas}", "4")?;
    let next = rfc3339(now + 1800 - (now + 1800) % 60);
    wait_for(
        &ns,
        "scaler/both",
        "{.status.nextTransitions[0].time}={.status.nextTransitions[0].replicas}",
        &format!("{next}=2"),
    )?;
    let table = kubectl_ok(&["get", "-n", ns.name(), "scalers"], None)?;
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains("NEXT"), "{table}");
    assert!(table.contains(&next), "{table}");
    Ok(())
}

#[test]
fn a_kind_without_a_scale_subresource_is_denied_naming_the_field() -> Result<()> {
    let webhook = Webhook::start("b1-kind")?;
    let ns = webhook.namespace("b1-kind")?;
    let yaml = format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: cm}}\nspec:\n  scaleTargetRefs: [{{apiVersion: v1, kind: ConfigMap, name: settings}}]\n  windows: [{}]\n",
        open_window(1)
    );
    let run = ns.apply(&yaml)?;
    assert!(!run.ok, "{run:?}");
    assert!(
        run.stderr.contains("spec.scaleTargetRefs[0].kind")
            && run.stderr.contains("has no /scale subresource"),
        "{run:?}"
    );
    Ok(())
}
