//! `status`: every kubesteer object with its Ready reason, and the installation: the webhook's
//! and controller's pods, the leader, the serving certificate's expiry and whether every webhook
//! configuration (and the Scaler CRD's conversion) trusts the CA that signed it.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};
use kubesteer_api::kind::ALL;
use kubesteer_api::scaler::schedule::Instant;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::CertificateDer;

use crate::cluster::{kubesteer_resource, ready_of, Connection};
use crate::table::{age, table};
use crate::{Error, Result};

/// The suffix of every webhook kubesteer registers (`validate.scalers.kubesteer.io`).
const WEBHOOK_SUFFIX: &str = ".kubesteer.io";
const COMPONENT: &str = "app.kubernetes.io/component";
/// The controller's Lease name when its Deployment does not say.
const DEFAULT_LEASE: &str = "kubesteer-controller";
/// Where the chart names the Secret a self-managing webhook keeps its certificate in.
const CERT_SECRET_ENV: &str = "KUBESTEER_CERT_SECRET";
/// Less than this left on a certificate is worth a warning.
const EXPIRY_WARNING_DAYS: i64 = 30;

/// What `status` says; `all` lists objects in every namespace.
pub async fn status(connection: &Connection, all: bool, now: Instant) -> Result<String> {
    let (client, namespace) = connection.connect().await?;
    let mut out = String::new();
    objects(&client, &namespace, all, now, &mut out).await?;
    out.push('\n');
    installation(&client, now, &mut out).await?;
    Ok(out)
}

async fn objects(
    client: &Client,
    namespace: &str,
    all: bool,
    now: Instant,
    out: &mut String,
) -> Result<()> {
    let mut rows = Vec::new();
    for kind in ALL {
        let resource = kubesteer_resource(kind);
        let api: Api<DynamicObject> = if all {
            Api::all_with(client.clone(), &resource)
        } else {
            Api::namespaced_with(client.clone(), namespace, &resource)
        };
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(e) if Error::is_code(&e, 404) => {
                let _ = writeln!(out, "{}: not installed (no CRD)", kind.plural());
                continue;
            }
            Err(e) if Error::is_code(&e, 403) => {
                let _ = writeln!(out, "{}: not allowed to list", kind.plural());
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for o in list.items {
            let (ready, reason, message) = ready_of(o.data.get("status"))
                .unwrap_or_else(|| ("Unknown".into(), "-".into(), String::new()));
            let created = o
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .unwrap_or_else(|| now.timestamp());
            let mut row = Vec::new();
            if all {
                row.push(o.namespace().unwrap_or_default());
            }
            row.extend([
                format!("{}/{}", kind.name().to_ascii_lowercase(), o.name_any()),
                ready,
                reason,
                age(now.timestamp() - created),
                shorten(&message, 90),
            ]);
            rows.push(row);
        }
    }
    if rows.is_empty() {
        let place = if all {
            "any namespace".to_string()
        } else {
            format!("namespace {namespace}")
        };
        let _ = writeln!(out, "No kubesteer objects in {place}.");
    } else {
        let mut headers = Vec::new();
        if all {
            headers.push("NAMESPACE");
        }
        headers.extend(["OBJECT", "READY", "REASON", "AGE", "MESSAGE"]);
        out.push_str(&table(&headers, &rows));
    }
    Ok(())
}

fn shorten(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= max {
        line.to_string()
    } else {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// A webhook configuration's view of the webhook.
struct Registered {
    what: String,
    service: Option<(String, String)>,
    url: Option<String>,
    ca_bundle: Option<Vec<u8>>,
}

async fn registered(client: &Client) -> Result<Vec<Registered>> {
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    // Each configuration's kubesteer webhooks, as (configuration, webhook name, client config).
    let mut webhooks = Vec::new();
    for c in list_or_empty(mutating.list(&ListParams::default()).await)? {
        let name = format!("mutatingwebhookconfiguration/{}", c.name_any());
        for w in c.webhooks.into_iter().flatten() {
            webhooks.push((name.clone(), w.name, w.client_config));
        }
    }
    for c in list_or_empty(validating.list(&ListParams::default()).await)? {
        let name = format!("validatingwebhookconfiguration/{}", c.name_any());
        for w in c.webhooks.into_iter().flatten() {
            webhooks.push((name.clone(), w.name, w.client_config));
        }
    }
    let mut found: Vec<Registered> = webhooks
        .into_iter()
        .filter(|(_, webhook, _)| webhook.ends_with(WEBHOOK_SUFFIX))
        .map(|(configuration, webhook, cc)| Registered {
            what: format!("{configuration} {webhook}"),
            service: cc.service.map(|s| (s.namespace, s.name)),
            url: cc.url,
            ca_bundle: cc.ca_bundle.map(|b| b.0),
        })
        .collect();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.get_opt("scalers.kubesteer.io").await {
        Ok(Some(crd)) => {
            if let Some(cc) = crd
                .spec
                .conversion
                .and_then(|c| c.webhook)
                .and_then(|w| w.client_config)
            {
                found.push(Registered {
                    what: "crd/scalers.kubesteer.io conversion".to_string(),
                    service: cc.service.map(|s| (s.namespace, s.name)),
                    url: cc.url,
                    ca_bundle: cc.ca_bundle.map(|b| b.0),
                });
            }
        }
        Ok(None) => {}
        Err(e) if Error::is_code(&e, 403) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(found)
}

fn list_or_empty<T: Clone>(result: kube::Result<kube::core::ObjectList<T>>) -> Result<Vec<T>> {
    match result {
        Ok(list) => Ok(list.items),
        Err(e) if Error::is_code(&e, 403) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// The certificates in a PEM bundle, as DER.
fn certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(|c| c.ok())
        .map(|c| c.as_ref().to_vec())
        .collect()
}

/// Until when a DER certificate is valid, as Unix seconds.
fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

fn expiry(label: &str, der: Option<&Vec<u8>>, now: Instant) -> (String, bool) {
    match der.and_then(|d| not_after(d)) {
        None => (format!("{label}: unreadable"), false),
        Some(t) => {
            let left = t - now.timestamp();
            let at = chrono::DateTime::from_timestamp(t, 0)
                .map(crate::when::rfc3339)
                .unwrap_or_default();
            if left <= 0 {
                (format!("{label}: EXPIRED at {at}"), false)
            } else {
                let ok = left > EXPIRY_WARNING_DAYS * 86400;
                let note = if ok { "" } else { " (renew soon)" };
                (format!("{label}: expires {at}, in {}{note}", age(left)), ok)
            }
        }
    }
}

/// The Secret with the webhook's certificate: the one it keeps itself (self-managed, named in
/// KUBESTEER_CERT_SECRET), else the one mounted as its `tls` volume.
fn cert_secret(webhook: &Deployment) -> Option<String> {
    let pod = webhook.spec.as_ref()?.template.spec.as_ref()?;
    let kept = pod
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == CERT_SECRET_ENV)
        .and_then(|e| e.value.clone());
    kept.or_else(|| {
        pod.volumes
            .iter()
            .flatten()
            .filter(|v| v.name == "tls")
            .find_map(|v| v.secret.as_ref()?.secret_name.clone())
    })
}

/// Whether a caBundle (PEM) holds the webhook's CA (DER), in words, and whether that is fine.
fn bundle_verdict(ca: Option<&[u8]>, bundle: &[u8]) -> (String, bool) {
    let bundle = certificates(bundle);
    match (ca, bundle.is_empty()) {
        (_, true) => ("empty caBundle".to_string(), false),
        (Some(ca), false) if bundle.iter().any(|c| c.as_slice() == ca) => {
            ("matches the webhook's CA".to_string(), true)
        }
        (Some(_), false) => (
            "MISMATCH: does not hold the webhook's CA".to_string(),
            false,
        ),
        (None, false) => (
            format!("{} certificate(s); no CA to compare with", bundle.len()),
            true,
        ),
    }
}

async fn installation(client: &Client, now: Instant, out: &mut String) -> Result<()> {
    let registered = registered(client).await?;
    if registered.is_empty() {
        let _ = writeln!(out, "Webhook: no webhook configuration names a *.kubesteer.io webhook; kubesteer's webhook is not installed");
        return Ok(());
    }
    let services: BTreeSet<(String, String)> = registered
        .iter()
        .filter_map(|r| r.service.clone())
        .collect();
    let urls: BTreeSet<String> = registered.iter().filter_map(|r| r.url.clone()).collect();
    for url in &urls {
        let _ = writeln!(
            out,
            "Webhook: at {url} (outside the cluster: no pods to show)"
        );
    }
    let mut problems = Vec::new();
    // The CA each service's Secret holds, for its own registrations.
    let mut cas: BTreeMap<(String, String), Vec<u8>> = BTreeMap::new();
    for (namespace, service) in &services {
        let _ = writeln!(out, "Webhook: service {namespace}/{service}");
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let selector = format!("{COMPONENT} in (webhook,controller)");
        let list = list_or_empty(pods.list(&ListParams::default().labels(&selector)).await)?;
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|p| {
                let statuses = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.clone())
                    .unwrap_or_default();
                let ready = statuses.iter().filter(|c| c.ready).count();
                let restarts: i32 = statuses.iter().map(|c| c.restart_count).sum();
                vec![
                    p.name_any(),
                    p.labels().get(COMPONENT).cloned().unwrap_or_default(),
                    format!("{ready}/{}", statuses.len()),
                    p.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default(),
                    restarts.to_string(),
                    p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default(),
                ]
            })
            .collect();
        if rows.is_empty() {
            problems.push(format!("no webhook or controller pods in {namespace}"));
        } else {
            out.push_str(&table(
                &["POD", "COMPONENT", "READY", "STATUS", "RESTARTS", "NODE"],
                &rows,
            ));
        }
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        let deployments = list_or_empty(
            deployments
                .list(
                    &ListParams::default().labels(&format!("{COMPONENT} in (webhook,controller)")),
                )
                .await,
        )?;
        // The leader, from the Lease the controller's Deployment names.
        let lease_name = deployments
            .iter()
            .filter(|d| d.labels().get(COMPONENT).map(String::as_str) == Some("controller"))
            .flat_map(|d| {
                d.spec
                    .as_ref()
                    .and_then(|s| s.template.spec.as_ref())
                    .map(|s| s.containers.clone())
                    .unwrap_or_default()
            })
            .flat_map(|c| c.env.unwrap_or_default())
            .find(|e| e.name == "KUBESTEER_LEASE_NAME")
            .and_then(|e| e.value)
            .unwrap_or_else(|| DEFAULT_LEASE.to_string());
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        match leases.get_opt(&lease_name).await {
            Ok(Some(lease)) => {
                let spec = lease.spec.unwrap_or_default();
                let holder = spec.holder_identity.unwrap_or_else(|| "nobody".into());
                let renewed = spec
                    .renew_time
                    .map(|t| format!(", renewed {} ago", age(now.timestamp() - t.0.as_second())))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "Leader: {holder} (lease {namespace}/{lease_name}{renewed})"
                );
            }
            Ok(None) => {
                let _ = writeln!(out, "Leader: none (no lease {namespace}/{lease_name} yet)");
            }
            Err(e) if Error::is_code(&e, 403) => {
                let _ = writeln!(
                    out,
                    "Leader: not allowed to read lease {namespace}/{lease_name}"
                );
            }
            Err(e) => return Err(e.into()),
        }
        // The certificate, from the Secret the webhook keeps (self-managed) or mounts.
        let webhook = deployments
            .iter()
            .find(|d| d.labels().get(COMPONENT).map(String::as_str) == Some("webhook"));
        let Some(secret_name) = webhook.and_then(cert_secret) else {
            let _ = writeln!(
                out,
                "Certificate: the webhook's Deployment names no certificate Secret"
            );
            continue;
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        match secrets.get_opt(&secret_name).await {
            Ok(Some(secret)) => {
                let data = secret.data.unwrap_or_default();
                let serving = data.get("tls.crt").map(|b| certificates(&b.0));
                let ca_certs = data.get("ca.crt").map(|b| certificates(&b.0));
                let (line, ok) = expiry(
                    &format!("Certificate ({namespace}/{secret_name})"),
                    serving.as_ref().and_then(|c| c.first()),
                    now,
                );
                let _ = writeln!(out, "{line}");
                if !ok {
                    problems.push(line);
                }
                if let Some(first) = ca_certs.as_ref().and_then(|c| c.first()) {
                    let (line, ok) = expiry("CA", Some(first), now);
                    let _ = writeln!(out, "{line}");
                    if !ok {
                        problems.push(line);
                    }
                    cas.insert((namespace.clone(), service.clone()), first.clone());
                }
            }
            Ok(None) => problems.push(format!(
                "the webhook's Secret {namespace}/{secret_name} does not exist"
            )),
            Err(e) if Error::is_code(&e, 403) => {
                let _ = writeln!(
                    out,
                    "Certificate: not allowed to read Secret {namespace}/{secret_name}"
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Each registration trusts the CA that signed the serving certificate.
    let mut rows = Vec::new();
    for r in &registered {
        let ca = r.service.as_ref().and_then(|s| cas.get(s));
        let (verdict, ok) = bundle_verdict(
            ca.map(Vec::as_slice),
            r.ca_bundle.as_deref().unwrap_or_default(),
        );
        if !ok {
            problems.push(format!("{}: {verdict}", r.what));
        }
        rows.push(vec![r.what.clone(), verdict]);
    }
    let _ = writeln!(out);
    out.push_str(&table(&["REGISTRATION", "CABUNDLE"], &rows));
    if !problems.is_empty() {
        let _ = writeln!(out, "\nProblems:");
        for p in problems {
            let _ = writeln!(out, "  - {p}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(days: u64) -> String {
        let mut opts = kubesteer_certs::Options::new("kubesteer-webhook", "kubesteer-system");
        opts.ca_validity = std::time::Duration::from_secs(days * 86400);
        kubesteer_certs::generate_ca(&opts)
            .map(|p| p.cert)
            .unwrap_or_default()
    }

    #[test]
    fn a_bundle_matches_when_it_holds_the_ca_also_during_a_rollover() {
        let (current, old) = (ca(365), ca(365));
        let der = certificates(current.as_bytes())
            .into_iter()
            .next()
            .unwrap_or_default();
        assert_eq!(
            bundle_verdict(Some(&der), current.as_bytes()),
            ("matches the webhook's CA".to_string(), true)
        );
        let both = format!("{old}\n{current}");
        assert!(bundle_verdict(Some(&der), both.as_bytes()).1);
        let (verdict, ok) = bundle_verdict(Some(&der), old.as_bytes());
        assert!(!ok && verdict.starts_with("MISMATCH"), "{verdict}");
        assert!(!bundle_verdict(Some(&der), b"").1);
        assert!(bundle_verdict(None, old.as_bytes()).1);
    }

    #[test]
    fn certificates_near_their_end_are_problems() {
        let now = chrono::Utc::now();
        let der = |days| certificates(ca(days).as_bytes()).into_iter().next();
        let (line, ok) = expiry("CA", der(365).as_ref(), now);
        assert!(
            ok && line.starts_with("CA: expires ") && line.contains(", in 36"),
            "{line}"
        );
        let (line, ok) = expiry("CA", der(10).as_ref(), now);
        assert!(!ok && line.ends_with("(renew soon)"), "{line}");
        assert_eq!(
            expiry("CA", None, now),
            ("CA: unreadable".to_string(), false)
        );
    }

    #[test]
    fn the_certificate_secret_is_the_kept_one_else_the_mounted_one() {
        let deployment = |pod: serde_json::Value| -> Deployment {
            serde_json::from_value(serde_json::json!({
                "spec": {"selector": {}, "template": {"spec": pod}}
            }))
            .unwrap_or_default()
        };
        let kept = deployment(serde_json::json!({"containers": [{"name": "w", "env": [
            {"name": "KUBESTEER_CERT_MODE", "value": "self-managed"},
            {"name": "KUBESTEER_CERT_SECRET", "value": "r-kubesteer-webhook-tls"}
        ]}]}));
        assert_eq!(
            cert_secret(&kept).as_deref(),
            Some("r-kubesteer-webhook-tls")
        );
        let mounted = deployment(
            serde_json::json!({"containers": [{"name": "w"}], "volumes": [
                {"name": "apiserver-client-ca", "configMap": {"name": "ca"}},
                {"name": "tls", "secret": {"secretName": "r-kubesteer-webhook-cert"}}
            ]}),
        );
        assert_eq!(
            cert_secret(&mounted).as_deref(),
            Some("r-kubesteer-webhook-cert")
        );
        assert_eq!(
            cert_secret(&deployment(serde_json::json!({"containers": []}))),
            None
        );
    }

    #[test]
    fn long_messages_are_cut_to_one_line() {
        assert_eq!(shorten("a\nb", 10), "a");
        assert_eq!(shorten("abcdef", 4), "abc…");
    }
}
