//! One release of the chart, installed for real with the project image on the cluster's real
//! node (hack/node.sh), for the tests that exercise the installed product.
use anyhow::{ensure, Context, Result};

use crate::{
    helm, helm_uninstall, jsonpath, kubectl, kubectl_ok, repo_root, unique, webhook_fields,
};

/// The node `hack/node.sh` registers; hack/real-node-values.yaml places the chart on it.
pub const REAL_NODE: &str = "kubesteer-node";

/// The image `make image` built and `hack/e2e.sh` loaded into the real node.
pub fn image() -> (String, String) {
    let image = std::env::var("KUBESTEER_IMAGE").unwrap_or_else(|_| "kubesteer:dev".into());
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), tag.to_string()),
        _ => (image, "latest".to_string()),
    }
}

/// The values every test's release is installed with: the CRDs are the ones hack/cluster.sh
/// applied, shared by every release of the cluster, not the release's own.
pub const SHARED_CRDS: [&str; 2] = ["--set", "crds.enabled=false"];

/// The real node's Ready condition: "True" when its kubelet reports in.
pub fn real_node_ready() -> Result<String> {
    kubectl_ok(
        &[
            "get",
            "node",
            REAL_NODE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
        None,
    )
}

/// One release of the chart, installed for real, admitting only the namespaces it labels and
/// reconciling only its user namespace, so tests never affect each other.
pub struct Release {
    pub name: String,
    pub namespace: String,
    pub user_ns: String,
}

impl Release {
    pub fn install(prefix: &str, extra: &[&str]) -> Result<Self> {
        Self::install_with_env(prefix, &[], extra)
    }

    /// [`Release::install`] with `controller_env` added to the controller's `extraEnv` (after
    /// the `WATCH_NAMESPACE` every test release sets there), as a user would set its tuning.
    pub fn install_with_env(
        prefix: &str,
        controller_env: &[(&str, &str)],
        extra: &[&str],
    ) -> Result<Self> {
        Self::install_prepared(prefix, controller_env, extra, |_| Ok(Vec::new()))
    }

    /// [`Release::install_with_env`] with `prepare` run first, once the release's names are
    /// known (to make what the install needs, such as a Secret in its namespace); the values it
    /// returns are added to the install's.
    pub fn install_prepared(
        prefix: &str,
        controller_env: &[(&str, &str)],
        extra: &[&str],
        prepare: impl FnOnce(&Release) -> Result<Vec<String>>,
    ) -> Result<Self> {
        let ready = real_node_ready()
            .context("no real node: hack/cluster.sh up starts one when run as root")?;
        ensure!(ready == "True", "node {REAL_NODE} is not Ready ({ready})");
        // A kubelet and containerd report themselves; a kwok node would say kwok.
        let runtime = kubectl_ok(
            &[
                "get",
                "node",
                REAL_NODE,
                "-o",
                "jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}",
            ],
            None,
        )?;
        ensure!(
            runtime.starts_with("v1.") && runtime.contains("containerd://"),
            "node {REAL_NODE} is not a real kubelet: {runtime}"
        );
        let name = unique(prefix);
        let namespace = format!("{name}-system");
        let user_ns = format!("{name}-use");
        kubectl_ok(&["create", "namespace", &user_ns], None)?;
        kubectl_ok(
            &[
                "label",
                "namespace",
                &user_ns,
                &format!("kubesteer.io/e2e={name}"),
            ],
            None,
        )?;
        let release = Self {
            name,
            namespace,
            user_ns,
        };
        let prepared = prepare(&release).with_context(|| release.describe())?;
        let (repository, tag) = image();
        let chart = repo_root().join("charts/kubesteer");
        let chart = chart.to_string_lossy();
        let selector = format!(
            "webhook.namespaceSelector.matchLabels.kubesteer\\.io/e2e={}",
            release.name
        );
        let env: Vec<_> = [("WATCH_NAMESPACE", release.user_ns.as_str())]
            .iter()
            .chain(controller_env)
            .map(|(name, value)| serde_json::json!({"name": name, "value": value}))
            .collect();
        let watch = format!("controller.extraEnv={}", serde_json::Value::from(env));
        let mut args = vec![
            "install",
            &release.name,
            &chart,
            "-n",
            &release.namespace,
            "--create-namespace",
            "--wait",
            "--timeout",
            "180s",
        ];
        let repository = format!("image.repository={repository}");
        let tag = format!("image.tag={tag}");
        let values = repo_root().join("hack/real-node-values.yaml");
        let values = values.to_string_lossy();
        args.extend([
            "-f",
            &values,
            "--set",
            &repository,
            "--set",
            &tag,
            "--set",
            &selector,
            "--set-json",
            &watch,
        ]);
        args.extend(SHARED_CRDS);
        // Reviews from this cluster's apiserver only, as hack/deploy.sh installs the chart.
        let auth = crate::apiserver_auth_values();
        args.extend(auth.iter().map(String::as_str));
        args.extend(extra);
        args.extend(prepared.iter().map(String::as_str));
        helm(&args).with_context(|| release.describe())?;
        release.reach_webhook()?;
        Ok(release)
    }

    /// `helm --wait` sees the webhook's pods Ready, but the apiserver reaches them through the
    /// Service, which kube-proxy may not route yet, and it may not trust the CA the webhook injects
    /// yet: its first calls can time out or fail. Waits up to a minute until a server-side dry run
    /// in the user namespace gets an answer from the webhook, whichever answer it is.
    fn reach_webhook(&self) -> Result<()> {
        let probe = "apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\n\
                     metadata: {name: webhook-probe}\nspec: {name: probe}\n";
        crate::eventually(
            std::time::Duration::from_secs(60),
            "the apiserver to reach the release's webhook",
            || {
                let run = kubectl(
                    &["create", "--dry-run=server", "-n", &self.user_ns, "-f", "-"],
                    Some(probe),
                )?;
                ensure!(
                    !run.stderr.contains("failed calling webhook"),
                    "{}",
                    run.stderr.trim()
                );
                Ok(Some(()))
            },
        )
        .with_context(|| self.describe())
    }

    pub fn fullname(&self) -> String {
        format!("{}-kubesteer", self.name)
    }

    /// What the release's pods are doing, for a failure message.
    pub fn describe(&self) -> String {
        let pods = kubectl(&["get", "pods", "-n", &self.namespace, "-o", "wide"], None)
            .map(|r| r.stdout + &r.stderr)
            .unwrap_or_default();
        let events = kubectl(
            &[
                "get",
                "events",
                "-n",
                &self.namespace,
                "--sort-by=.lastTimestamp",
            ],
            None,
        )
        .map(|r| r.stdout)
        .unwrap_or_default();
        format!("pods:\n{pods}\nevents:\n{events}")
    }

    /// The pods of one component, as `kubectl get pods -o <output>` prints them.
    pub fn component_pods(&self, component: &str, output: &str) -> Result<String> {
        kubectl_ok(
            &[
                "get",
                "pods",
                "-n",
                &self.namespace,
                "-l",
                &format!("app.kubernetes.io/component={component}"),
                "-o",
                output,
            ],
            None,
        )
    }

    /// `(name, node, phase, ready, image)` of the pods of one component.
    pub fn pods(&self, component: &str) -> Result<Vec<[String; 5]>> {
        let out = self.component_pods(
            component,
            "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} \
             {.status.conditions[?(@.type==\"Ready\")].status} {.spec.containers[0].image}\
             {\"\\n\"}{end}",
        )?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 5).then(|| [f[0], f[1], f[2], f[3], f[4]].map(String::from))
            })
            .collect())
    }

    /// Waits up to 90 s for `object` of the user namespace to be Ready.
    pub fn wait_ready(&self, object: &str) -> Result<()> {
        kubectl_ok(
            &[
                "wait",
                "-n",
                &self.user_ns,
                "--for=condition=Ready",
                object,
                "--timeout=90s",
            ],
            None,
        )
        .with_context(|| self.describe())?;
        Ok(())
    }

    /// `helm test`: the project image run against the webhook's Service.
    pub fn helm_test(&self) -> Result<String> {
        crate::helm(&[
            "test",
            &self.name,
            "-n",
            &self.namespace,
            "--timeout",
            "120s",
        ])
        .with_context(|| self.describe())
    }

    pub fn secret_ca(&self) -> Result<String> {
        jsonpath(
            &self.namespace,
            &format!("secret/{}-webhook-tls", self.fullname()),
            "{.data.ca\\.crt}",
        )
    }

    pub fn ca_bundles(&self) -> Result<Vec<String>> {
        webhook_fields(&self.fullname(), "{.clientConfig.caBundle}")
    }

    /// `kubesteer-bench webhook-memory` aimed at the release's webhook Service (its ClusterIP,
    /// its TLS name, the apiserver's client certificate): `attackers` clients send bodies of
    /// `body_bytes` back to back for `seconds` while one sends ordinary reviews.
    pub fn flood_command(
        &self,
        attackers: usize,
        body_bytes: usize,
        seconds: u64,
    ) -> Result<std::process::Command> {
        use base64::Engine as _;
        let service = format!("svc/{}-webhook", self.fullname());
        let ip = jsonpath(&self.namespace, &service, "{.spec.clusterIP}")?;
        let client_dir = crate::apiserver_client_ca()
            .and_then(|ca| ca.parent().map(std::path::PathBuf::from))
            .context("this cluster's apiserver presents no client certificate (hack/cluster.sh)")?;
        let work = crate::target_dir().join("e2e").join(&self.name);
        std::fs::create_dir_all(&work)?;
        let ca = work.join("ca.crt");
        let pem = base64::engine::general_purpose::STANDARD.decode(self.secret_ca()?.trim())?;
        std::fs::write(&ca, pem)?;
        let bodies = repo_root().join("bench/bodies");
        let mut bench = std::process::Command::new(crate::workspace_bin("kubesteer-bench"));
        bench
            .arg("webhook-memory")
            .args(["--addr", &format!("{}:443", ip.trim())])
            .args([
                "--server-name",
                &format!("{}-webhook.{}.svc", self.fullname(), self.namespace),
            ])
            .arg("--ca")
            .arg(&ca)
            .arg("--client-cert")
            .arg(client_dir.join("client.crt"))
            .arg("--client-key")
            .arg(client_dir.join("client.key"))
            .args(["--attackers", &attackers.to_string()])
            .args(["--body-bytes", &body_bytes.to_string()])
            .args(["--seconds", &seconds.to_string()])
            .arg("--review")
            .arg(format!(
                "/validate/memcacheds={}",
                bodies.join("memcached.json").display()
            ))
            .arg("--review")
            .arg(format!(
                "/mutate/scalers={}",
                bodies.join("scaler.json").display()
            ));
        Ok(bench)
    }

    /// Runs [`Release::flood_command`] (reading the memory of `cgroups` too) and returns the
    /// figures it prints.
    pub fn flood(
        &self,
        attackers: usize,
        body_bytes: usize,
        seconds: u64,
        cgroups: &[std::path::PathBuf],
    ) -> Result<serde_json::Value> {
        let mut bench = self.flood_command(attackers, body_bytes, seconds)?;
        for cgroup in cgroups {
            bench.arg("--cgroup").arg(cgroup);
        }
        let out = crate::output_within(
            &mut bench,
            None,
            std::time::Duration::from_secs(seconds + 120),
            "kubesteer-bench webhook-memory",
        )?;
        ensure!(
            out.status.success(),
            "kubesteer-bench webhook-memory: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// Deletes the pod `name` of the release's namespace without waiting; `force`: at once,
    /// without a grace period, as a crashed node's pods go.
    pub fn delete_pod(&self, name: &str, force: bool) -> Result<()> {
        let mut args = vec!["delete", "pod", "-n", &self.namespace, name, "--wait=false"];
        if force {
            args.extend(["--grace-period=0", "--force"]);
        }
        kubectl_ok(&args, None).map(drop)
    }

    pub fn lease_holder(&self) -> Result<String> {
        jsonpath(
            &self.namespace,
            &format!("lease/{}-controller", self.fullname()),
            "{.spec.holderIdentity}",
        )
    }

    /// A Deployment `name` of one nginx replica in the user namespace.
    pub fn create_deployment(&self, name: &str) -> Result<()> {
        crate::create_deployment(&self.user_ns, name, 1)
    }

    /// `kubectl apply` in the user namespace (the install has waited until the apiserver reaches
    /// the webhook, so every answer is the webhook's own).
    pub fn apply(&self, yaml: &str) -> Result<crate::Run> {
        crate::apply(&self.user_ns, yaml)
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        // While the controller still runs, so that it removes its Scaler finalizers.
        let _ = kubectl(
            &[
                "delete",
                "scalers.kubesteer.io",
                "--all",
                "-n",
                &self.user_ns,
                "--timeout=30s",
            ],
            None,
        );
        let _ = helm_uninstall(&self.name, &self.namespace);
        for ns in [&self.user_ns, &self.namespace] {
            let _ = kubectl(&["delete", "namespace", ns, "--wait=false"], None);
        }
    }
}
