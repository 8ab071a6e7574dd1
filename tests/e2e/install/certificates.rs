//! The Helm chart on the real cluster: install, self-managed certificates, the chart's RBAC for
//! both binaries (run locally, impersonating the chart's ServiceAccounts), upgrade, rotation and
//! uninstall.
use std::time::Duration;

use anyhow::{Context, Result};
use kubesteer_tests::release::SHARED_CRDS;
use kubesteer_tests::{
    eventually, free_port, helm, helm_uninstall, impersonating_kubeconfig, json_patch, jsonpath,
    kubectl, kubectl_ok, output_within, repo_root, unique, webhook_denies_a_bad_time_zone,
    webhook_fields, Daemon, Namespace, WEBHOOKS,
};

const MC: &str = "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\n";

/// One release of the chart, with its webhook served by a local process in self-managed mode.
struct Release {
    name: String,
    namespace: String,
    id: String,
    port: u16,
    webhook: Option<Daemon>,
}

impl Release {
    fn install(prefix: &str, extra: &[&str]) -> Result<Self> {
        let name = unique(prefix);
        let namespace = format!("{name}-system");
        let id = name.clone();
        let port = free_port()?;
        let chart = repo_root().join("charts/kubesteer");
        let mut args = vec![
            "install".to_string(),
            name.clone(),
            chart.to_string_lossy().into_owned(),
        ];
        for a in ["-n", &namespace, "--create-namespace"] {
            args.push(a.to_string());
        }
        args.push("--set".into());
        args.push(format!("webhook.url=https://127.0.0.1:{port}"));
        args.extend(SHARED_CRDS.map(String::from));
        args.push("--set".into());
        args.push(format!(
            "webhook.namespaceSelector.matchLabels.kubesteer\\.io/e2e={id}"
        ));
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        helm(&refs)?;
        Ok(Self {
            name,
            namespace,
            id,
            port,
            webhook: None,
        })
    }

    fn fullname(&self) -> String {
        format!("{}-kubesteer", self.name)
    }

    fn service_account(&self, component: &str) -> String {
        format!(
            "system:serviceaccount:{}:{}-{component}",
            self.namespace,
            self.fullname()
        )
    }

    fn kubeconfig_as(&self, component: &str) -> Result<std::path::PathBuf> {
        let groups = [
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated",
        ];
        impersonating_kubeconfig(
            &self.service_account(component),
            &groups,
            &format!("{}-{component}.kubeconfig", self.name),
        )
    }

    fn secret(&self) -> String {
        format!("{}-webhook-tls", self.fullname())
    }

    /// Starts the webhook as the chart's webhook ServiceAccount, in self-managed mode.
    fn start_webhook(&mut self) -> Result<()> {
        self.webhook = Some(self.spawn_webhook(self.port, "webhook")?);
        Ok(())
    }

    /// One webhook replica on `port`, returned once it serves.
    fn spawn_webhook(&self, port: u16, log: &str) -> Result<Daemon> {
        let kubeconfig = self.kubeconfig_as("webhook")?;
        let args: Vec<String> = [
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--cert-mode",
            "self-managed",
            "--namespace",
            &self.namespace,
            "--cert-secret",
            &self.secret(),
            "--service",
            &format!("{}-webhook", self.fullname()),
            "--webhook-configuration",
            &self.fullname(),
            "--cert-ip",
            "127.0.0.1",
            "--cert-check-interval",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let daemon = Daemon::spawn(
            "kubesteer-webhook",
            &args,
            &kubeconfig,
            &format!("{}-{log}", self.name),
        )?;
        eventually(Duration::from_secs(30), "webhook serving", || {
            Ok(daemon
                .logs()
                .contains("serving admission reviews")
                .then_some(()))
        })
        .with_context(|| daemon.logs())?;
        Ok(daemon)
    }

    fn secret_key(&self, key: &str) -> Result<String> {
        jsonpath(
            &self.namespace,
            &format!("secret/{}", self.secret()),
            &format!("{{.data.{}}}", key.replace('.', "\\.")),
        )
    }

    fn ca_bundles(&self) -> Result<Vec<String>> {
        webhook_fields(&self.fullname(), "{.clientConfig.caBundle}")
    }

    /// A namespace that this release's webhook configurations apply to.
    fn user_namespace(&self) -> Result<Namespace> {
        Namespace::admitted_by("helm-use", &self.id)
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        self.webhook.take();
        let _ = helm_uninstall(&self.name, &self.namespace);
        let _ = kubectl(
            &["delete", "namespace", &self.namespace, "--wait=false"],
            None,
        );
    }
}

#[test]
fn install_upgrade_and_uninstall_with_self_managed_certificates() -> Result<()> {
    let mut release = Release::install("ks", &[])?;
    release.start_webhook()?;
    let ca = release.secret_key("ca.crt")?;
    assert!(!ca.is_empty(), "the Secret holds the CA");
    for key in ["ca.key", "tls.crt", "tls.key"] {
        assert!(!release.secret_key(key)?.is_empty(), "{key} missing");
    }
    let bundles = eventually(Duration::from_secs(10), "caBundles", || {
        let b = release.ca_bundles()?;
        Ok((b.len() == WEBHOOKS && b.iter().all(|x| *x == ca)).then_some(b))
    })?;
    assert_eq!(
        bundles.len(),
        WEBHOOKS,
        "both configurations, one webhook per kind each"
    );

    let ns = release.user_namespace()?;
    let stored = eventually(Duration::from_secs(20), "defaulted Memcached", || {
        let run = ns.apply(&format!("{MC}metadata: {{name: cache}}\nspec: {{}}\n"))?;
        Ok(run.ok.then_some(()))
    });
    stored?;
    assert_eq!(
        jsonpath(ns.name(), "memcached/cache", "{.spec.size}")?,
        "1",
        "defaulted through the chart's configuration"
    );
    // A rule that only the validating webhook knows (the schema refuses an image with a space
    // before the webhook is asked).
    webhook_denies_a_bad_time_zone(|yaml| ns.apply(yaml))?;

    // The controller, as the chart's controller ServiceAccount, makes a Memcached converge.
    let controller_kubeconfig = release.kubeconfig_as("controller")?;
    let args: Vec<String> = [
        "--namespace",
        ns.name(),
        "--metrics-addr",
        "127.0.0.1:0",
        "--leader-election",
        "--lease-namespace",
        &release.namespace,
        "--lease-name",
        &format!("{}-controller", release.fullname()),
        "--identity",
        "e2e-helm",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let controller = Daemon::spawn(
        "kubesteer-controller",
        &args,
        &controller_kubeconfig,
        &format!("{}-controller", release.name),
    )?;
    let ready = eventually(
        Duration::from_secs(90),
        "Memcached ready under the chart's RBAC",
        || {
            let r = jsonpath(ns.name(), "memcached/cache", "{.status.readyReplicas}")?;
            Ok((r == "1").then_some(r))
        },
    );
    ready.with_context(|| controller.logs())?;
    assert!(
        kubectl(
            &["get", "deployment/cache", "service/cache", "-n", ns.name()],
            None
        )?
        .ok
    );
    // A Welcome's credentials Secret is created and, with the password gone, deleted, by a
    // controller that may not read Secrets.
    let run = ns.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\nmetadata: {name: hello}\nspec: {name: helm, password: not-read-back}\n",
    )?;
    assert!(run.ok, "{run:?}");
    let secret_exists = || -> Result<bool> {
        Ok(kubectl(&["get", "-n", ns.name(), "secret/hello-credentials"], None)?.ok)
    };
    eventually(Duration::from_secs(60), "the credentials Secret", || {
        Ok(secret_exists()?.then_some(()))
    })
    .with_context(|| controller.logs())?;
    json_patch(
        ns.name(),
        "welcome/hello",
        r#"[{"op":"remove","path":"/spec/password"}]"#,
    )?;
    eventually(
        Duration::from_secs(60),
        "the credentials Secret deleted",
        || Ok((!secret_exists()?).then_some(())),
    )
    .with_context(|| controller.logs())?;
    assert!(
        !controller.logs().contains("forbidden"),
        "{}",
        controller.logs()
    );
    let can = kubectl(
        &[
            "auth",
            "can-i",
            "get",
            "secrets",
            "-n",
            "kube-system",
            "--as",
            &release.service_account("controller"),
        ],
        None,
    )?;
    assert_eq!(
        can.stdout.trim(),
        "no",
        "the controller must not read Secrets in kube-system"
    );
    let can = kubectl(
        &[
            "auth",
            "can-i",
            "list",
            "secrets",
            "-n",
            "kube-system",
            "--as",
            &release.service_account("webhook"),
        ],
        None,
    )?;
    assert_eq!(
        can.stdout.trim(),
        "no",
        "the webhook must not read Secrets in kube-system"
    );
    drop(controller);

    // An upgrade with changed values keeps the CA, and admission keeps working.
    let chart = repo_root().join("charts/kubesteer");
    helm(&[
        "upgrade",
        &release.name,
        &chart.to_string_lossy(),
        "-n",
        &release.namespace,
        "--reuse-values",
        "--set",
        "webhook.timeoutSeconds=7",
    ])?;
    assert_eq!(
        release.secret_key("ca.crt")?,
        ca,
        "helm upgrade must keep the CA"
    );
    let timeout = kubectl_ok(
        &[
            "get",
            "validatingwebhookconfiguration",
            &release.fullname(),
            "-o",
            "jsonpath={.webhooks[0].timeoutSeconds}",
        ],
        None,
    )?;
    assert_eq!(timeout, "7");
    assert!(
        release.ca_bundles()?.iter().all(|b| *b == ca),
        "caBundles survive the upgrade"
    );
    let after = ns.apply(&format!(
        "{MC}metadata: {{name: after-upgrade}}\nspec: {{}}\n"
    ))?;
    assert!(after.ok, "{after:?}");

    // Uninstall removes everything but the CRDs.
    release.webhook.take();
    helm_uninstall(&release.name, &release.namespace)?;
    let selector = format!("app.kubernetes.io/instance={}", release.name);
    let left = kubectl_ok(
        &[
            "get",
            "deploy,svc,sa,secret,role,rolebinding,pdb,lease",
            "-n",
            &release.namespace,
            "-l",
            &selector,
            "-o",
            "name",
        ],
        None,
    )?;
    assert_eq!(left.trim(), "", "namespaced objects left behind");
    let left = kubectl_ok(&["get", "clusterrole,clusterrolebinding,mutatingwebhookconfiguration,validatingwebhookconfiguration", "-l", &selector, "-o", "name"], None)?;
    assert_eq!(left.trim(), "", "cluster objects left behind");
    assert!(kubectl(
        &["get", "secret", &release.secret(), "-n", &release.namespace],
        None
    )?
    .stderr
    .contains("NotFound"));
    assert!(kubectl_ok(
        &["get", "crd", "memcacheds.kubesteer.io", "-o", "name"],
        None
    )?
    .contains("memcacheds"));
    Ok(())
}

#[test]
fn a_broken_serving_certificate_is_renewed_while_admissions_keep_succeeding() -> Result<()> {
    let mut release = Release::install("rot", &[])?;
    release.start_webhook()?;
    let ca = release.secret_key("ca.crt")?;
    let first = release.secret_key("tls.crt")?;
    let ns = release.user_namespace()?;
    eventually(Duration::from_secs(20), "first admission", || {
        Ok(ns
            .apply(&format!("{MC}metadata: {{name: warmup}}\nspec: {{}}\n"))?
            .ok
            .then_some(()))
    })?;
    // Replace the serving certificate with one the CA never signed: it must be reissued.
    let foreign =
        "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmdhcmJhZ2UKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";
    kubectl_ok(
        &[
            "patch",
            "secret",
            &release.secret(),
            "-n",
            &release.namespace,
            "--type=merge",
            "-p",
            &format!(r#"{{"data":{{"tls.crt":"{foreign}"}}}}"#),
        ],
        None,
    )?;
    let mut admitted = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let renewed = loop {
        let run = ns.apply(&format!(
            "{MC}metadata: {{name: during-{admitted}}}\nspec: {{}}\n"
        ))?;
        assert!(run.ok, "an admission failed during renewal: {run:?}");
        admitted += 1;
        let now = release.secret_key("tls.crt")?;
        if now != first && now != foreign {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the serving certificate was not renewed"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for i in 0..10 {
        let run = ns.apply(&format!("{MC}metadata: {{name: after-{i}}}\nspec: {{}}\n"))?;
        assert!(run.ok, "{run:?}");
    }
    assert_ne!(renewed, first);
    assert_eq!(release.secret_key("ca.crt")?, ca, "renewal keeps the CA");
    assert!(release
        .webhook
        .as_ref()
        .map(Daemon::logs)
        .unwrap_or_default()
        .contains("serving the renewed certificate"));
    Ok(())
}

#[test]
fn two_replicas_starting_at_once_share_one_certificate() -> Result<()> {
    let release = Release::install("dup", &[])?;
    let ports = (free_port()?, free_port()?);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| release.spawn_webhook(ports.0, "replica-a"));
        let b = s.spawn(|| release.spawn_webhook(ports.1, "replica-b"));
        (a.join(), b.join())
    });
    let (a, b) = (
        a.map_err(|_| anyhow::anyhow!("replica a panicked"))??,
        b.map_err(|_| anyhow::anyhow!("replica b panicked"))??,
    );
    let dir = kubesteer_tests::target_dir()
        .join("e2e")
        .join(&release.name);
    std::fs::create_dir_all(&dir)?;
    let ca = kubectl_ok(
        &[
            "get",
            "secret",
            &release.secret(),
            "-n",
            &release.namespace,
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ],
        None,
    )?;
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, kubesteer_tests::unbase64(&ca)?)?;
    // Both replicas serve a certificate that the one CA in the Secret (and the caBundles) trusts.
    for port in [ports.0, ports.1] {
        let url = format!("https://127.0.0.1:{port}/healthz");
        let out = output_within(
            std::process::Command::new("curl")
                .args([
                    "-sf",
                    "--max-time",
                    "3",
                    "--cacert",
                    &ca_file.to_string_lossy(),
                ])
                .arg(&url),
            None,
            Duration::from_secs(13),
            &format!("curl {url}"),
        )?;
        assert!(
            out.status.success(),
            "replica on {port} serves a certificate the CA does not sign:\n{}\n{}",
            a.logs(),
            b.logs()
        );
    }
    assert!(release.ca_bundles()?.iter().all(|x| *x == ca));
    Ok(())
}
