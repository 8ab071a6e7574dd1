//! The chart's RBAC as the apiserver decides it: a release is installed into a fresh namespace
//! and `kubectl auth can-i --as=system:serviceaccount:<ns>:<sa>` is asked, for both
//! ServiceAccounts, a table of what each binary must be allowed and what it must not.
//!
//! The webhook configurations point at 127.0.0.1 and select only namespaces labelled for this
//! release, so the release admits nothing for other tests, and no pod of it needs to run.
use anyhow::{bail, Result};
use kubesteer_tests::release::SHARED_CRDS;
use kubesteer_tests::{helm, helm_uninstall, kubectl, repo_root, unique, Namespace};

/// One installed release, uninstalled (and its namespace deleted) when dropped.
struct Release {
    name: String,
    namespace: String,
}

impl Release {
    fn install(prefix: &str, extra: &[&str]) -> Result<Self> {
        let name = unique(prefix);
        let namespace = format!("{name}-system");
        let chart = repo_root().join("charts/kubesteer");
        let selector = format!("webhook.namespaceSelector.matchLabels.kubesteer\\.io/e2e={name}");
        let mut args = vec![
            "install",
            name.as_str(),
            chart.to_str().expect("utf-8 path"),
            "-n",
            namespace.as_str(),
            "--create-namespace",
            "--set",
            "webhook.url=https://127.0.0.1:9",
            "--set",
            selector.as_str(),
            SHARED_CRDS[0],
            SHARED_CRDS[1],
        ];
        args.extend_from_slice(extra);
        helm(&args)?;
        Ok(Self { name, namespace })
    }

    fn fullname(&self) -> String {
        format!("{}-kubesteer", self.name)
    }

    fn account(&self, component: &str) -> String {
        format!(
            "system:serviceaccount:{}:{}-{component}",
            self.namespace,
            self.fullname()
        )
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = helm_uninstall(&self.name, &self.namespace);
        let _ = kubectl(
            &["delete", "namespace", &self.namespace, "--wait=false"],
            None,
        );
    }
}

/// Whether `user` may do what `args` (as for `kubectl auth can-i`) say.
fn can_i(user: &str, args: &[&str]) -> Result<bool> {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let as_user = format!("--as={user}");
    all.push(&as_user);
    let run = kubectl(&all, None)?;
    match run.stdout.trim() {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => bail!(
            "kubectl {} answered {other:?}: {}",
            all.join(" "),
            run.stderr
        ),
    }
}

/// Asks every row of `table` (expected answer, then the `can-i` arguments) as `user`, and fails
/// with every row whose answer differs.
fn check(user: &str, table: &[(bool, Vec<String>)]) -> Result<()> {
    let mut wrong = Vec::new();
    for (expected, args) in table {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = can_i(user, &args)?;
        if got != *expected {
            let want = if *expected { "must" } else { "must not" };
            wrong.push(format!("{user} {want} be able to: {}", args.join(" ")));
        }
    }
    if !wrong.is_empty() {
        bail!("RBAC differs from the table:\n{}", wrong.join("\n"));
    }
    Ok(())
}

/// A table row: the expected answer and the `can-i` arguments, split on spaces.
fn row(expected: bool, args: &str) -> (bool, Vec<String>) {
    (
        expected,
        args.split_whitespace().map(String::from).collect(),
    )
}

#[test]
fn each_service_account_may_do_what_its_binary_does_and_nothing_more() -> Result<()> {
    let release = Release::install("rbac", &[])?;
    let other = Namespace::new("rbac-other")?;
    let (ns, o, f) = (&release.namespace, other.name(), release.fullname());
    let secret = format!("{f}-webhook-tls");
    let lease = format!("{f}-controller");

    let webhook = vec![
        // Its own webhook configurations, to inject the CA, and no other.
        row(true, &format!("get mutatingwebhookconfigurations/{f}")),
        row(true, &format!("patch mutatingwebhookconfigurations/{f}")),
        row(true, &format!("get validatingwebhookconfigurations/{f}")),
        row(true, &format!("patch validatingwebhookconfigurations/{f}")),
        row(false, "patch mutatingwebhookconfigurations/another-webhook"),
        row(
            false,
            "patch validatingwebhookconfigurations/another-webhook",
        ),
        row(false, "list mutatingwebhookconfigurations"),
        row(false, &format!("delete mutatingwebhookconfigurations/{f}")),
        row(false, "create mutatingwebhookconfigurations"),
        // Its certificate Secret in the release namespace, and no other Secret.
        row(true, &format!("get secrets/{secret} -n {ns}")),
        row(true, &format!("update secrets/{secret} -n {ns}")),
        row(true, &format!("create secrets -n {ns}")),
        row(false, &format!("delete secrets/{secret} -n {ns}")),
        row(false, &format!("get secrets/another-secret -n {ns}")),
        row(false, &format!("list secrets -n {ns}")),
        row(false, &format!("get secrets/{secret} -n {o}")),
        row(false, &format!("list secrets -n {o}")),
        row(false, &format!("create secrets -n {o}")),
        row(false, "list secrets --all-namespaces"),
        // Its checks: SubjectAccessReviews and cluster-wide caches.
        row(true, "create subjectaccessreviews.authorization.k8s.io"),
        // The Scaler CRD's conversion, and no other CRD.
        row(
            true,
            "patch customresourcedefinitions.apiextensions.k8s.io/scalers.kubesteer.io",
        ),
        row(
            false,
            "patch customresourcedefinitions.apiextensions.k8s.io/welcomes.kubesteer.io",
        ),
        row(
            false,
            "delete customresourcedefinitions.apiextensions.k8s.io/scalers.kubesteer.io",
        ),
        row(true, "list scalers.kubesteer.io --all-namespaces"),
        row(true, "watch scalers.kubesteer.io --all-namespaces"),
        row(true, "list deployments.apps --all-namespaces"),
        row(true, "watch deployments.apps --all-namespaces"),
        row(
            true,
            "list horizontalpodautoscalers.autoscaling --all-namespaces",
        ),
        row(
            true,
            "watch horizontalpodautoscalers.autoscaling --all-namespaces",
        ),
        row(true, "watch ingresses.networking.k8s.io --all-namespaces"),
        row(true, "list ingressclasses.networking.k8s.io"),
        row(false, &format!("get ingresses.networking.k8s.io -n {o}")),
        row(false, &format!("patch ingresses.networking.k8s.io -n {o}")),
        // The host claims: a cluster-scoped kind of its own, made, renewed, taken over and
        // given back; and the Applications of the namespace that claimed a host.
        row(true, "create hostclaims.kubesteer.io"),
        row(true, "get hostclaims.kubesteer.io/h.shop.example.com"),
        row(true, "update hostclaims.kubesteer.io/h.shop.example.com"),
        row(true, "delete hostclaims.kubesteer.io/h.shop.example.com"),
        row(true, "list hostclaims.kubesteer.io"),
        row(false, "patch hostclaims.kubesteer.io/h.shop.example.com"),
        row(false, "watch hostclaims.kubesteer.io"),
        row(true, &format!("list applications.kubesteer.io -n {o}")),
        row(false, &format!("get applications.kubesteer.io -n {o}")),
        row(false, &format!("patch applications.kubesteer.io -n {o}")),
        row(false, &format!("patch deployments.apps -n {o}")),
        row(
            false,
            &format!("update deployments.apps --subresource=scale -n {o}"),
        ),
        row(false, &format!("patch scalers.kubesteer.io -n {o}")),
        row(false, &format!("create pods -n {o}")),
        row(
            false,
            &format!("get leases.coordination.k8s.io/{lease} -n {ns}"),
        ),
        row(false, "delete namespaces"),
        row(
            false,
            "create clusterrolebindings.rbac.authorization.k8s.io",
        ),
    ];
    check(&release.account("webhook"), &webhook)?;

    let controller = vec![
        // Welcome credentials are written and deleted, never read back, in any namespace.
        row(true, &format!("create secrets -n {o}")),
        row(true, &format!("patch secrets -n {o}")),
        row(true, &format!("delete secrets -n {o}")),
        row(false, &format!("update secrets -n {o}")),
        row(false, &format!("get secrets -n {o}")),
        row(false, &format!("list secrets -n {o}")),
        row(false, &format!("watch secrets -n {o}")),
        row(false, &format!("get secrets/{secret} -n {ns}")),
        row(false, "get secrets --all-namespaces"),
        row(false, "list secrets --all-namespaces"),
        row(false, "watch secrets --all-namespaces"),
        // What it reconciles, in every namespace.
        row(true, &format!("get deployments.apps -n {o}")),
        row(true, &format!("patch deployments.apps -n {o}")),
        row(true, &format!("create deployments.apps -n {o}")),
        row(
            true,
            &format!("patch deployments.apps --subresource=scale -n {o}"),
        ),
        row(true, "watch deployments.apps --all-namespaces"),
        // Scaler targets of other kinds, and the HPAs a Scaler cooperates with: patch, the verb
        // the webhook asks of a Scaler's author, and no other write.
        row(
            true,
            &format!("patch statefulsets.apps --subresource=scale -n {o}"),
        ),
        row(
            false,
            &format!("update statefulsets.apps --subresource=scale -n {o}"),
        ),
        row(
            false,
            &format!("update horizontalpodautoscalers.autoscaling -n {o}"),
        ),
        row(true, "watch statefulsets.apps --all-namespaces"),
        row(
            true,
            &format!("patch horizontalpodautoscalers.autoscaling -n {o}"),
        ),
        row(
            false,
            &format!("delete horizontalpodautoscalers.autoscaling -n {o}"),
        ),
        row(false, &format!("delete statefulsets.apps -n {o}")),
        // CronJob targets are suspended, never created, updated or deleted.
        row(true, &format!("patch cronjobs.batch -n {o}")),
        row(false, &format!("update cronjobs.batch -n {o}")),
        row(false, &format!("delete cronjobs.batch -n {o}")),
        // DaemonSet targets: asleep by a node selector, in a patch; never deleted.
        row(true, &format!("patch daemonsets.apps -n {o}")),
        row(false, &format!("delete daemonsets.apps -n {o}")),
        // Job targets too: suspended, never made or deleted.
        row(true, &format!("patch jobs.batch -n {o}")),
        row(false, &format!("delete jobs.batch -n {o}")),
        row(false, &format!("create jobs.batch -n {o}")),
        row(true, &format!("patch services -n {o}")),
        row(true, "list pods --all-namespaces"),
        row(true, &format!("patch scalers.kubesteer.io -n {o}")),
        row(
            true,
            &format!("patch scalers.kubesteer.io --subresource=status -n {o}"),
        ),
        row(
            true,
            &format!("patch welcomes.kubesteer.io --subresource=status -n {o}"),
        ),
        row(
            true,
            &format!("patch memcacheds.kubesteer.io --subresource=status -n {o}"),
        ),
        row(
            true,
            &format!("patch applications.kubesteer.io --subresource=status -n {o}"),
        ),
        row(true, &format!("patch ingresses.networking.k8s.io -n {o}")),
        row(true, &format!("delete ingresses.networking.k8s.io -n {o}")),
        row(true, "watch ingresses.networking.k8s.io --all-namespaces"),
        row(false, &format!("update ingresses.networking.k8s.io -n {o}")),
        row(false, "list ingressclasses.networking.k8s.io"),
        row(true, &format!("create events.events.k8s.io -n {o}")),
        row(false, &format!("create pods -n {o}")),
        row(false, &format!("delete pods -n {o}")),
        row(false, &format!("create scalers.kubesteer.io -n {o}")),
        row(false, &format!("delete scalers.kubesteer.io -n {o}")),
        // The host claims are the webhook's alone.
        row(false, "create hostclaims.kubesteer.io"),
        row(false, "update hostclaims.kubesteer.io/h.shop.example.com"),
        row(false, "list hostclaims.kubesteer.io"),
        // Its leader Lease, by name, in the release namespace only.
        row(true, &format!("create leases.coordination.k8s.io -n {ns}")),
        row(
            true,
            &format!("get leases.coordination.k8s.io/{lease} -n {ns}"),
        ),
        row(
            true,
            &format!("update leases.coordination.k8s.io/{lease} -n {ns}"),
        ),
        // Every write after the create is a conditional replace: no patch, no delete.
        row(
            false,
            &format!("patch leases.coordination.k8s.io/{lease} -n {ns}"),
        ),
        row(
            false,
            &format!("delete leases.coordination.k8s.io/{lease} -n {ns}"),
        ),
        row(
            false,
            &format!("get leases.coordination.k8s.io/another-lease -n {ns}"),
        ),
        row(
            false,
            &format!("update leases.coordination.k8s.io/another-lease -n {ns}"),
        ),
        row(false, &format!("list leases.coordination.k8s.io -n {ns}")),
        row(false, &format!("create leases.coordination.k8s.io -n {o}")),
        row(
            false,
            &format!("update leases.coordination.k8s.io/{lease} -n {o}"),
        ),
        // The reviews behind metrics auth (on by default); not the metrics themselves.
        row(true, "create tokenreviews.authentication.k8s.io"),
        row(true, "create subjectaccessreviews.authorization.k8s.io"),
        // The CRDs are the webhook's to point at itself, not the controller's; the controller
        // reads kubesteer's and sets their status.storedVersions (storage version migration).
        row(
            false,
            "patch customresourcedefinitions.apiextensions.k8s.io/scalers.kubesteer.io",
        ),
        row(
            true,
            "get customresourcedefinitions.apiextensions.k8s.io/scalers.kubesteer.io",
        ),
        row(
            true,
            "patch customresourcedefinitions.apiextensions.k8s.io/welcomes.kubesteer.io --subresource=status",
        ),
        row(
            false,
            "patch customresourcedefinitions.apiextensions.k8s.io/ingressroutes.traefik.io --subresource=status",
        ),
        row(false, "list customresourcedefinitions.apiextensions.k8s.io"),
        row(false, "get /metrics"),
        // Nothing of the webhook's, the cluster's or RBAC's.
        row(false, &format!("patch mutatingwebhookconfigurations/{f}")),
        row(false, &format!("patch validatingwebhookconfigurations/{f}")),
        row(false, "delete namespaces"),
        row(false, &format!("delete namespaces/{o}")),
        row(false, "get nodes"),
        row(
            false,
            "create clusterrolebindings.rbac.authorization.k8s.io",
        ),
        row(
            false,
            &format!("create rolebindings.rbac.authorization.k8s.io -n {o}"),
        ),
        row(
            false,
            "delete customresourcedefinitions.apiextensions.k8s.io",
        ),
    ];
    check(&release.account("controller"), &controller)
}

#[test]
fn a_watch_namespace_confines_the_controller_to_that_namespace() -> Result<()> {
    let watched = Namespace::new("rbac-watched")?;
    let other = Namespace::new("rbac-other")?;
    let value = format!("controller.watchNamespace={}", watched.name());
    let release = Release::install("rbacns", &["--set", &value])?;
    let (w, o, ns) = (watched.name(), other.name(), &release.namespace);
    let lease = format!("{}-controller", release.fullname());

    let controller = vec![
        row(true, &format!("patch deployments.apps -n {w}")),
        row(
            true,
            &format!("patch deployments.apps --subresource=scale -n {w}"),
        ),
        row(true, &format!("watch scalers.kubesteer.io -n {w}")),
        row(true, &format!("list pods -n {w}")),
        row(true, &format!("create secrets -n {w}")),
        row(true, &format!("create events.events.k8s.io -n {w}")),
        row(false, &format!("get secrets -n {w}")),
        row(false, &format!("patch deployments.apps -n {o}")),
        row(
            false,
            &format!("patch deployments.apps --subresource=scale -n {o}"),
        ),
        row(false, &format!("watch scalers.kubesteer.io -n {o}")),
        row(false, &format!("create secrets -n {o}")),
        row(false, "list pods --all-namespaces"),
        row(false, "watch deployments.apps --all-namespaces"),
        // The Lease stays in the release namespace.
        row(
            true,
            &format!("update leases.coordination.k8s.io/{lease} -n {ns}"),
        ),
        row(
            false,
            &format!("update leases.coordination.k8s.io/{lease} -n {w}"),
        ),
    ];
    check(&release.account("controller"), &controller)?;

    // The webhook still judges Scalers across the cluster.
    let webhook = vec![row(true, "watch scalers.kubesteer.io --all-namespaces")];
    check(&release.account("webhook"), &webhook)
}
