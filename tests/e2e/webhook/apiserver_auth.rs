//! Reviews only from the apiserver. hack/cluster.sh gives the local apiserver a client certificate
//! for webhooks (its AdmissionConfiguration's kubeconfig, user "*"), and a chart install is given
//! that CA (`webhook.apiserverAuth.clientCA`). A review posted straight to the webhook pod from
//! the host, claiming `system:masters`, is refused with 401 unless it comes with the apiserver's
//! certificate, while everything sent through the apiserver is admitted, defaulted and denied by
//! the webhook as ever.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::{
    apiserver_client_ca, helm, helm_run, jsonpath, kubectl_ok, output_within, repo_root, unbase64,
    unique, webhook_denies_a_bad_time_zone,
};
use serde_yaml::Value;

fn render(extra: &[&str]) -> Result<Vec<Value>> {
    let chart = repo_root().join("charts/kubesteer");
    let mut args = vec![
        "template",
        "r",
        chart.to_str().unwrap_or_default(),
        "-n",
        "ns",
    ];
    args.extend_from_slice(extra);
    let out = helm(&args)?;
    out.split("\n---")
        .map(|doc| serde_yaml::from_str::<Value>(doc).context("helm template's YAML"))
        .filter(|doc| !matches!(doc, Ok(Value::Null)))
        .collect()
}

fn webhook_pod(docs: &[Value]) -> &Value {
    docs.iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "r-kubesteer-webhook")
        .map(|d| &d["spec"]["template"]["spec"])
        .unwrap_or(&Value::Null)
}

fn env_of(pod: &Value, name: &str) -> Option<String> {
    pod["containers"][0]["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(String::from))
}

#[test]
fn the_chart_gives_the_webhook_the_client_ca_only_when_asked() -> Result<()> {
    let plain = render(&[])?;
    let pod = webhook_pod(&plain);
    assert_eq!(env_of(pod, "KUBESTEER_APISERVER_CLIENT_CA"), None);
    assert!(!serde_yaml::to_string(&plain)?.contains("apiserver-client-ca"));

    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let ca = format!("webhook.apiserverAuth.clientCA={pem}");
    let docs = render(&[
        "--set",
        &ca,
        "--set",
        "webhook.apiserverAuth.allowedNames={kube-apiserver,apiserver.example}",
    ])?;
    let config_map = docs
        .iter()
        .find(|d| {
            d["kind"] == "ConfigMap" && d["metadata"]["name"] == "r-kubesteer-apiserver-client-ca"
        })
        .context("no ConfigMap r-kubesteer-apiserver-client-ca")?;
    assert_eq!(config_map["data"]["ca.crt"].as_str(), Some(pem));
    let pod = webhook_pod(&docs);
    assert_eq!(
        env_of(pod, "KUBESTEER_APISERVER_CLIENT_CA").as_deref(),
        Some("/apiserver-client-ca/ca.crt")
    );
    assert_eq!(
        env_of(pod, "KUBESTEER_APISERVER_CLIENT_NAMES").as_deref(),
        Some("kube-apiserver,apiserver.example")
    );
    let mounts = &pod["containers"][0]["volumeMounts"];
    assert!(
        mounts
            .as_sequence()
            .is_some_and(|m| m.iter().any(|m| m["mountPath"] == "/apiserver-client-ca")),
        "{mounts:?}"
    );
    let volume = pod["volumes"]
        .as_sequence()
        .and_then(|v| v.iter().find(|v| v["name"] == "apiserver-client-ca"))
        .context("no apiserver-client-ca volume")?;
    assert_eq!(
        volume["configMap"]["name"],
        "r-kubesteer-apiserver-client-ca"
    );

    // An existing ConfigMap instead, beside the provided mode's own TLS volume.
    let docs = render(&[
        "--set",
        "webhook.apiserverAuth.clientCAConfigMap=apiserver-ca",
        "--set",
        "certs.mode=provided",
        "--set",
        "certs.provided.secretName=tls",
        "--set",
        "certs.provided.caBundle=x",
    ])?;
    assert!(!docs
        .iter()
        .any(|d| d["metadata"]["name"] == "r-kubesteer-apiserver-client-ca"));
    let volumes = webhook_pod(&docs)["volumes"]
        .as_sequence()
        .context("no volumes")?
        .iter()
        .map(|v| v["name"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>();
    assert_eq!(volumes, ["tls", "apiserver-client-ca"]);

    let chart = repo_root().join("charts/kubesteer");
    let chart = chart.to_str().unwrap_or_default();
    for (set, why) in [
        (
            vec!["--set", "webhook.apiserverAuth.allowedNames={x}"],
            "allowedNames needs clientCA or clientCAConfigMap",
        ),
        (
            vec![
                "--set",
                "webhook.apiserverAuth.clientCA=a",
                "--set",
                "webhook.apiserverAuth.clientCAConfigMap=b",
            ],
            "not both",
        ),
        (
            vec!["--set", "webhook.apiserverAuth.clientCa=a"],
            "clientCa",
        ),
    ] {
        let mut args = vec!["template", "r", chart];
        args.extend(&set);
        let run = helm_run(&args)?;
        ensure!(!run.ok, "{set:?} rendered");
        assert!(run.stderr.contains(why), "{set:?}: {}", run.stderr);
    }
    Ok(())
}

/// The answer to an HTTPS request to the webhook pod at `ip`, by its Service's name (so the
/// serving certificate is checked against `server_ca`): a POST of `body`, or a GET without one,
/// with `client` (certificate, key) when given. The HTTP status and the body.
fn call(
    name: &str,
    ip: &str,
    server_ca: &Path,
    client: Option<(&Path, &Path)>,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String)> {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "10", "--cacert"])
        .arg(server_ca)
        .args(["--resolve", &format!("{name}:9443:{ip}")])
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://{name}:9443{path}"));
    if body.is_some() {
        curl.args([
            "-H",
            "content-type: application/json",
            "--data-binary",
            "@-",
        ]);
    }
    if let Some((cert, key)) = client {
        curl.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    // curl's own --max-time, and 10 s more.
    let out = output_within(
        &mut curl,
        Some(body.unwrap_or_default().as_bytes()),
        Duration::from_secs(20),
        &format!("curl https://{name}:9443{path}"),
    )?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let Some((answer, status)) = text.rsplit_once('\n') else {
        bail!(
            "curl gave no status: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let status = status
        .trim()
        .parse()
        .with_context(|| format!("curl: {}", String::from_utf8_lossy(&out.stderr)))?;
    Ok((status, answer.to_string()))
}

/// A Scaler review as any pod could write it: the body claims `system:masters`.
fn forged_review(namespace: &str) -> String {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "forged-1",
            "kind": {"group": "kubesteer.io", "version": "v1beta1", "kind": "Scaler"},
            "resource": {"group": "kubesteer.io", "version": "v1beta1", "resource": "scalers"},
            "name": "probe", "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "object": {
                "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
                "metadata": {"name": "probe", "namespace": namespace},
                "spec": {
                    "scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                    "windows": [{"start": 9, "end": 17}]
                }
            },
            "dryRun": false
        }
    })
    .to_string()
}

/// A file of its own under the system's temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(prefix: &str, contents: &[u8]) -> Result<Self> {
        let path = std::env::temp_dir().join(unique(prefix));
        std::fs::write(&path, contents)?;
        Ok(Self(path))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn only_the_apiserver_gets_reviews_answered() -> Result<()> {
    let client_ca = apiserver_client_ca().context(
        "this cluster's apiserver has no client certificate for webhooks: start it with hack/cluster.sh (which makes one in $KUBESTEER_STATE/apiserver-client)",
    )?;
    // Release::install gives the chart this cluster's client CA (apiserver_auth_values).
    let release = Release::install("auth", &[])?;
    let fullname = release.fullname();

    let pods = release.pods("webhook")?;
    ensure!(!pods.is_empty(), "no webhook pods\n{}", release.describe());
    let env = kubectl_ok(
        &[
            "get",
            "deployment",
            "-n",
            &release.namespace,
            &format!("{fullname}-webhook"),
            "-o",
            "jsonpath={.spec.template.spec.containers[0].env[?(@.name==\"KUBESTEER_APISERVER_CLIENT_CA\")].value}",
        ],
        None,
    )?;
    assert_eq!(env, "/apiserver-client-ca/ca.crt");

    // Through the apiserver, which presents its certificate: mutated, denied and admitted.
    let memcached = release.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {}\n",
    )?;
    ensure!(
        memcached.ok,
        "a Memcached is admitted: {}",
        memcached.stderr
    );
    assert_eq!(
        jsonpath(
            &release.user_ns,
            "memcached/cache",
            "{.spec.size} {.spec.port}"
        )?,
        "1 11211",
        "the mutating webhook's defaults were applied"
    );
    webhook_denies_a_bad_time_zone(|yaml| release.apply(yaml))?;
    let good = release.apply(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: good}\n\
         spec: {scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 9, end: 17}]}\n",
    )?;
    ensure!(good.ok, "a good Scaler is admitted: {}", good.stderr);

    // Straight to each webhook pod from the host, as any pod could.
    let server_ca = TempFile::new("webhook-ca", &unbase64(&release.secret_ca()?)?)?;
    let name = format!("{fullname}-webhook.{}.svc", release.namespace);
    let review = forged_review(&release.user_ns);
    let dir = client_ca.parent().context("client CA directory")?;
    let apiserver = (dir.join("client.crt"), dir.join("client.key"));
    for pod in &pods {
        let ip = kubectl_ok(
            &[
                "get",
                "pod",
                "-n",
                &release.namespace,
                &pod[0],
                "-o",
                "jsonpath={.status.podIP}",
            ],
            None,
        )?;
        for path in ["/validate/scalers", "/mutate/scalers"] {
            let (status, body) = call(&name, &ip, &server_ca.0, None, path, Some(&review))?;
            assert_eq!(status, 401, "{path} on {}: {body}", pod[0]);
            assert!(body.contains("--apiserver-client-ca"), "{body}");
        }
        // What the kubelet and scrapers call needs no certificate.
        let (status, body) = call(&name, &ip, &server_ca.0, None, "/readyz", None)?;
        assert_eq!(
            (status, body.as_str()),
            (200, "ok"),
            "/readyz on {}",
            pod[0]
        );
        // With the apiserver's certificate the same bytes are answered: it is the certificate
        // that decides.
        let (status, body) = call(
            &name,
            &ip,
            &server_ca.0,
            Some((&apiserver.0, &apiserver.1)),
            "/validate/scalers",
            Some(&review),
        )?;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"uid\":\"forged-1\""), "{body}");
    }
    Ok(())
}
