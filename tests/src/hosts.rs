//! One namespace per Ingress host, raced and handed over: the scenario that the host-run webhook
//! (tests/e2e/webhook/application.rs) and the chart's pods (tests/e2e/install/release.rs) both
//! pass. Two namespaces apply an Application for the same new host at the same moment, many
//! times over, and exactly one is admitted each time; a wildcard and the hosts it covers belong
//! to one namespace, an Ingress made by hand for a wildcard too; a dry run claims nothing; a claim whose namespace still serves the host
//! holds past its in-flight time, and one whose Application is gone is taken over.
use std::time::{Duration, SystemTime};

use anyhow::{ensure, Context, Result};
use kubesteer_api::application::hosts::{claim_name, IN_FLIGHT};

use crate::{eventually, kubectl, kubectl_ok, parse_rfc3339, unique, Namespace, Run};

/// How many times the two namespaces race for a new host.
pub const ROUNDS: usize = 10;

/// An Application `name` with an Ingress for `host`.
pub fn application(name: &str, host: &str) -> String {
    format!(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Application\nmetadata: {{name: {name}}}\nspec: {{image: nginx, ingress: {{host: '{host}'}}}}\n"
    )
}

/// Whether `run` was denied by the webhook because the host (or `by`, overlapping it) is another
/// namespace's.
fn denied_for_the_host(run: &Run, by: &str) -> bool {
    !run.ok
        && run.denied_by_webhook_on("spec.ingress.host")
        && (run.stderr.contains("belongs to another namespace")
            || run.stderr.contains("is served by"))
        && run.stderr.contains(by)
}

/// The whole scenario, for namespaces `a` and `b` admitted by one webhook.
pub fn one_namespace_per_host(a: &Namespace, b: &Namespace) -> Result<()> {
    let domain = format!("{}.example.com", unique("hosts"));
    // The first host, whose claim is looked at again once it is past its in-flight time.
    let first = format!("first.{domain}");
    let run = a.apply(&application("first", &first))?;
    ensure!(run.ok, "{run:?}");

    for round in 0..ROUNDS {
        let host = format!("race{round}.{domain}");
        // Both kubectl processes start within microseconds of each other; each takes tens of
        // milliseconds to reach the apiserver, so their admissions overlap.
        let yaml = application(&format!("race{round}"), &host);
        let (ra, rb) = std::thread::scope(|s| {
            let yaml = yaml.as_str();
            let ta = s.spawn(move || a.apply(yaml));
            let tb = s.spawn(move || b.apply(yaml));
            (ta.join(), tb.join())
        });
        let ra = ra.map_err(|_| anyhow::anyhow!("namespace a's apply panicked"))??;
        let rb = rb.map_err(|_| anyhow::anyhow!("namespace b's apply panicked"))??;
        let admitted = usize::from(ra.ok) + usize::from(rb.ok);
        ensure!(
            admitted == 1,
            "round {round}: {admitted} of 2 admitted for host {host}\na: {ra:?}\nb: {rb:?}"
        );
        let loser = if ra.ok { &rb } else { &ra };
        ensure!(
            denied_for_the_host(loser, &host),
            "round {round}: the other was not denied for the host: {loser:?}"
        );
    }

    // A wildcard and the hosts it covers are one namespace's, whichever came first.
    let cases = [
        (a, b, format!("*.w1.{domain}"), format!("shop.w1.{domain}")),
        (b, a, format!("shop.w2.{domain}"), format!("*.w2.{domain}")),
    ];
    for (i, (owner, other, taken, overlapping)) in cases.iter().enumerate() {
        let run = owner.apply(&application(&format!("wild{i}"), taken))?;
        ensure!(run.ok, "{run:?}");
        let run = other.apply(&application(&format!("wild{i}"), overlapping))?;
        ensure!(
            denied_for_the_host(&run, taken),
            "{overlapping} overlaps another namespace's {taken}: {run:?}"
        );
    }

    // An Ingress made by hand for a wildcard, seen through the webhook's cache: the hosts under
    // it are its namespace's too.
    let ingress = format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: wild3}}\nspec:\n  rules:\n  - host: '*.w3.{domain}'\n    http:\n      paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: x, port: {{number: 80}}}}}}}}\n"
    );
    kubectl_ok(&["apply", "-n", a.name(), "-f", "-"], Some(&ingress))?;
    let under = format!("shop.w3.{domain}");
    let mut tries = 0;
    eventually(
        Duration::from_secs(30),
        "the webhook's cache to see the wildcard Ingress",
        || {
            // A new object each try: an UPDATE that keeps its host is not asked again.
            tries += 1;
            let run = b.apply(&application(&format!("under{tries}"), &under))?;
            Ok(denied_for_the_host(&run, &under).then_some(()))
        },
    )?;

    // A dry run claims nothing (sideEffects: NoneOnDryRun).
    let dry = format!("dry.{domain}");
    let run = kubectl(
        &["apply", "--dry-run=server", "-n", b.name(), "-f", "-"],
        Some(&application("dry", &dry)),
    )?;
    ensure!(run.ok, "{run:?}");
    let run = a.apply(&application("dry", &dry))?;
    ensure!(
        run.ok,
        "a host only dry-run by another namespace is free: {run:?}"
    );

    // Past its in-flight time the first claim holds because namespace a still serves the host.
    let claim = claim_name(&first).context("the first host's claim name")?;
    let margin = Duration::from_secs(30);
    eventually(
        IN_FLIGHT + margin,
        "the first host's claim to be past its in-flight time",
        || {
            let renewed = claim_field(&claim, "renewTime")?;
            let age = now()? - parse_rfc3339(renewed.trim())?;
            Ok((age > IN_FLIGHT.as_secs_f64() + 1.0).then_some(()))
        },
    )?;
    let run = b.apply(&application("first", &first))?;
    ensure!(
        denied_for_the_host(&run, &first),
        "a claim whose namespace serves the host holds: {run:?}"
    );
    // Once a's Application is gone, the host is free for b.
    kubectl_ok(
        &[
            "delete",
            "application",
            "first",
            "-n",
            a.name(),
            "--wait=true",
            "--timeout=60s",
        ],
        None,
    )?;
    eventually(
        Duration::from_secs(30),
        "namespace b to get the freed host",
        || {
            let run = b.apply(&application("first", &first))?;
            Ok(run.ok.then_some(()))
        },
    )?;
    let holder = claim_field(&claim, "namespace")?;
    ensure!(
        holder.trim() == b.name(),
        "the claim is b's now: {holder:?}"
    );
    Ok(())
}

/// A field of the HostClaim `claim`'s spec.
fn claim_field(claim: &str, field: &str) -> Result<String> {
    let path = format!("jsonpath={{.spec.{field}}}");
    kubectl_ok(&["get", "hostclaim", claim, "-o", &path], None)
}

/// Seconds since the Unix epoch.
fn now() -> Result<f64> {
    Ok(SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_secs_f64())
}
