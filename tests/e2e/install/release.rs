//! The real install: `helm install` of the chart with the project image, whose webhook and
//! controller pods run on the cluster's real kubelet node (hack/node.sh), reached by the apiserver
//! through the webhook's Service, as on any cluster.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use kubesteer_tests::release::{image, Release, REAL_NODE};
use kubesteer_tests::{
    eventually, helm, helm_uninstall, instance_pods, jsonpath, kubectl, kubectl_ok, repo_root,
    unique, webhook_denies_a_bad_time_zone, workspace_version, WEBHOOKS,
};

/// Every pod of `component` runs the project image on the real node, Running and Ready.
pub(super) fn on_real_node(release: &Release, component: &str, replicas: usize) -> Result<()> {
    let (repository, tag) = image();
    let pods = eventually(
        Duration::from_secs(90),
        &format!("{replicas} ready {component} pods"),
        || {
            let pods = release.pods(component)?;
            let ready = pods.iter().filter(|p| p[2] == "Running" && p[3] == "True");
            Ok((ready.count() == replicas && pods.len() == replicas).then_some(pods))
        },
    )
    .with_context(|| release.describe())?;
    for [name, node, _, _, image] in &pods {
        assert_eq!(node, REAL_NODE, "{name} runs on the real node");
        assert_eq!(
            *image,
            format!("{repository}:{tag}"),
            "{name} runs the image"
        );
        // kwok pods have no process and no log: this one's log comes from the kubelet.
        let logs = kubectl_ok(&["logs", "-n", &release.namespace, name], None)?;
        assert!(!logs.trim().is_empty(), "{name} logged nothing");
        // Its first line says which release it is: the workspace version.
        let first = logs.lines().next().unwrap_or_default();
        let starting = format!("kubesteer-{component} {} starting", workspace_version()?);
        assert!(first.contains(&starting), "{name}'s first line: {first}");
    }
    Ok(())
}

#[test]
fn helm_install_runs_the_image_on_the_real_node() -> Result<()> {
    let release = Release::install("inst", &[])?;
    on_real_node(&release, "webhook", 2)?;
    on_real_node(&release, "controller", 2)?;
    // The webhook's /version through its Service (the apiserver's proxy), without a client
    // certificate, as a user checks what runs.
    let version: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &[
            "get",
            "--raw",
            &format!(
                "/api/v1/namespaces/{}/services/https:{}-webhook:443/proxy/version",
                release.namespace,
                release.fullname()
            ),
        ],
        None,
    )?)?;
    assert_eq!(
        version["version"],
        workspace_version()?.as_str(),
        "{version}"
    );

    // The webhook pod made the CA and serving certificate and patched both caBundles.
    let ca = release.secret_ca()?;
    assert!(!ca.is_empty(), "the Secret holds the CA");
    eventually(Duration::from_secs(30), "both caBundles", || {
        let b = release.ca_bundles()?;
        Ok((b.len() == WEBHOOKS && b.iter().all(|x| *x == ca)).then_some(()))
    })?;
    let service = kubectl_ok(
        &[
            "get",
            "validatingwebhookconfiguration",
            &release.fullname(),
            "-o",
            "jsonpath={.webhooks[0].clientConfig.service.name} {.webhooks[0].clientConfig.url}",
        ],
        None,
    )?;
    assert_eq!(
        service.trim(),
        format!("{}-webhook", release.fullname()),
        "reached through the Service, not a URL"
    );

    // Denied and defaulted through the in-cluster Service.
    // A bad time zone: only the webhook knows the IANA names, so the denial is its own.
    webhook_denies_a_bad_time_zone(|yaml| release.apply(yaml))?;
    let good = release.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {}\n",
    )?;
    assert!(good.ok, "a good Memcached is admitted: {}", good.stderr);
    let spec = jsonpath(
        &release.user_ns,
        "memcached/cache",
        "{.spec.size} {.spec.port} {.spec.memoryMB}",
    )?;
    assert_eq!(spec, "1 11211 64", "the webhook stored the defaults");

    // The in-cluster controller holds the Lease and reconciles it.
    let holder = release.lease_holder()?;
    assert!(
        release.pods("controller")?.iter().any(|p| p[0] == holder),
        "a controller pod holds the Lease, not {holder:?}"
    );
    release.wait_ready("memcached/cache")?;

    // `helm test` runs the project image against the webhook's Service.
    let out = release.helm_test()?;
    assert!(out.contains("Succeeded"), "helm test: {out}");
    // The hook that ran is the project image's probe, not curl.
    let hooks = helm(&["get", "hooks", &release.name, "-n", &release.namespace])?;
    let (repository, tag) = image();
    assert!(
        hooks.contains(&format!("image: \"{repository}:{tag}\""))
            && hooks.contains("kubesteer-certs"),
        "the test pod runs the project image's probe: {hooks}"
    );

    // `helm upgrade` keeps the CA; new webhook pods serve certificates under it.
    helm(&[
        "upgrade",
        &release.name,
        &repo_root().join("charts/kubesteer").to_string_lossy(),
        "-n",
        &release.namespace,
        "--reuse-values",
        "--set",
        "webhook.logJson=false",
        "--wait",
        "--timeout",
        "180s",
    ])
    .with_context(|| release.describe())?;
    assert_eq!(release.secret_ca()?, ca, "the CA survives helm upgrade");
    assert!(release.ca_bundles()?.iter().all(|x| *x == ca));
    let denied = release.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: big}\nspec: {size: 101}\n",
    )?;
    assert!(
        !denied.ok && denied.stderr.contains("spec.size"),
        "still denied after the upgrade: {}",
        denied.stderr
    );

    // `helm uninstall` leaves no webhook configuration that would refuse writes.
    helm_uninstall(&release.name, &release.namespace)?;
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        eventually(Duration::from_secs(30), "no webhook configuration", || {
            let run = kubectl(&["get", kind, &release.fullname()], None)?;
            Ok((!run.ok && run.stderr.contains("NotFound")).then_some(()))
        })?;
    }
    let after = release.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: after}\nspec: {size: 1}\n",
    )?;
    assert!(after.ok, "writes succeed after uninstall: {}", after.stderr);
    Ok(())
}

/// The CA certificates of a base64 PEM bundle, as the apiserver and jsonpath show `caBundle`.
fn cas_of(bundle: &str) -> Result<Vec<String>> {
    let pem = String::from_utf8(kubesteer_tests::unbase64(bundle)?)?;
    Ok(pem
        .split_inclusive("-----END CERTIFICATE-----")
        .map(str::trim)
        .filter(|c| c.starts_with("-----BEGIN CERTIFICATE-----"))
        .map(str::to_string)
        .collect())
}

#[test]
fn a_ca_rollover_under_load_fails_no_admission() -> Result<()> {
    // A CA of 90 s is replaced when a third is left, at 60 s; with checks every 2 s the old CA
    // stays trusted for 10 rounds, 20 s.
    let env = r#"[{"name": "KUBESTEER_CA_VALIDITY", "value": "90s"}, {"name": "KUBESTEER_CERT_CHECK_INTERVAL", "value": "2s"}]"#;
    let release = Release::install("carot", &["--set-json", &format!("webhook.extraEnv={env}")])?;
    on_real_node(&release, "webhook", 2)?;
    let fullname = release.fullname();
    let trust_of_secret = || {
        jsonpath(
            &release.namespace,
            &format!("secret/{fullname}-webhook-tls"),
            "{.data.ca-bundle\\.crt}",
        )
    };
    // The CAs of each webhook's caBundle.
    let every_bundle = || -> Result<Vec<Vec<String>>> {
        release.ca_bundles()?.iter().map(|b| cas_of(b)).collect()
    };
    let first = cas_of(&release.secret_ca()?)?;
    ensure!(first.len() == 1, "one CA in ca.crt: {first:?}");
    let load = Load::start(&release.user_ns, 2);

    let both = eventually(
        Duration::from_secs(120),
        "the CA replaced, old and new trusted",
        || {
            let trust = cas_of(&trust_of_secret()?)?;
            Ok((trust.len() == 2 && trust[1] == first[0]).then_some(trust))
        },
    )?;
    eventually(
        Duration::from_secs(10),
        "both CAs in every caBundle",
        || {
            let all = every_bundle()?;
            Ok((!all.is_empty() && all.iter().all(|cas| *cas == both)).then_some(()))
        },
    )?;
    let rolled = load.admitted();
    eventually(
        Duration::from_secs(60),
        "the old CA dropped from every caBundle",
        || {
            let all = every_bundle()?;
            Ok((!all.is_empty() && all.iter().all(|cas| cas[..] == both[..1])).then_some(()))
        },
    )?;
    // Writes go on against the new CA alone.
    let dropped = load.admitted();
    eventually(
        Duration::from_secs(60),
        "writes admitted after the drop",
        || Ok((load.admitted() >= dropped + 30).then_some(())),
    )?;
    let (admitted, failures) = load.finish();
    eprintln!(
        "CA rollover: {} writes admitted during the overlap, {} after it, {admitted} in all",
        dropped - rolled,
        admitted - dropped
    );
    if !failures.is_empty() {
        bail!(
            "{} of {} writes failed across the CA rollover; first: {}",
            failures.len(),
            admitted + failures.len(),
            failures[0]
        );
    }
    assert!(dropped > rolled, "the load ran during the overlap");
    Ok(())
}

/// A client applying objects of all three kinds as fast as it can, counting failed admissions.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(ns: &str, workers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..workers)
            .map(|w| {
                let (stop, ok, failures, ns) =
                    (stop.clone(), ok.clone(), failures.clone(), ns.to_string());
                std::thread::spawn(move || {
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        seq += 1;
                        // A new annotation each round, so every apply is a write the webhooks see.
                        let yaml = format!(
                            "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\n\
                             metadata: {{name: s{w}, annotations: {{seq: \"{seq}\"}}}}\n\
                             spec: {{scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web{w}}}], windows: [{{start: 9, end: 17}}]}}\n---\n\
                             apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\n\
                             metadata: {{name: m{w}, annotations: {{seq: \"{seq}\"}}}}\n\
                             spec: {{size: 0}}\n---\n\
                             apiVersion: kubesteer.io/v1alpha1\nkind: Welcome\n\
                             metadata: {{name: w{w}, annotations: {{seq: \"{seq}\"}}}}\n\
                             spec: {{name: load, replicas: 0}}\n"
                        );
                        match kubectl(&["apply", "-n", &ns, "-f", "-"], Some(&yaml)) {
                            Ok(run) if run.ok => {
                                ok.fetch_add(3, Ordering::Relaxed);
                            }
                            Ok(run) => failures
                                .lock()
                                .map(|mut f| f.push(run.stderr))
                                .unwrap_or(()),
                            Err(e) => failures
                                .lock()
                                .map(|mut f| f.push(e.to_string()))
                                .unwrap_or(()),
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            ok,
            failures,
            threads,
        }
    }

    fn admitted(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    /// Stops the client and returns (admitted writes, failures).
    fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        let failures = self.failures.lock().map(|f| f.clone()).unwrap_or_default();
        (self.ok.load(Ordering::Relaxed), failures)
    }
}

#[test]
fn webhook_rolling_restart_under_load_fails_no_admission_and_the_leader_hands_over() -> Result<()> {
    let release = Release::install("roll", &[])?;
    on_real_node(&release, "webhook", 2)?;
    on_real_node(&release, "controller", 2)?;

    let load = Load::start(&release.user_ns, 3);
    let warm = load.admitted();
    eventually(Duration::from_secs(60), "the load client admitted", || {
        Ok((load.admitted() >= warm + 30).then_some(()))
    })?;
    let deployment = format!("deployment/{}-webhook", release.fullname());
    let old: Vec<String> = release
        .pods("webhook")?
        .into_iter()
        .map(|p| p[0].clone())
        .collect();
    let before = load.admitted();
    kubectl_ok(
        &["rollout", "restart", "-n", &release.namespace, &deployment],
        None,
    )?;
    kubectl_ok(
        &[
            "rollout",
            "status",
            "-n",
            &release.namespace,
            &deployment,
            "--timeout=180s",
        ],
        None,
    )
    .with_context(|| release.describe())?;
    // Until the old pods are gone, they are still draining: keep the load on until then.
    eventually(Duration::from_secs(90), "the old webhook pods gone", || {
        let pods = release.pods("webhook")?;
        Ok((!pods.iter().any(|p| old.contains(&p[0])) && pods.len() == 2).then_some(()))
    })?;
    let during = load.admitted() - before;
    let (admitted, failures) = load.finish();
    eprintln!("rolling restart: {during} writes admitted during it, {admitted} in all");
    if !failures.is_empty() {
        bail!(
            "{} of {} writes failed during the rolling restart; first: {}",
            failures.len(),
            admitted + failures.len(),
            failures[0]
        );
    }
    assert!(
        during >= 30,
        "the load ran during the restart ({during} writes)"
    );
    on_real_node(&release, "webhook", 2)?;

    // The controller's leader pod is deleted: the standby takes the Lease within 15 s.
    let leader = release.lease_holder()?;
    let pods = release.pods("controller")?;
    ensure!(
        pods.iter().any(|p| p[0] == leader),
        "leader {leader} is not a controller pod"
    );
    let deleted = Instant::now();
    release.delete_pod(&leader, false)?;
    let next = eventually(Duration::from_secs(30), "a new Lease holder", || {
        let holder = release.lease_holder()?;
        Ok((!holder.is_empty() && holder != leader).then_some(holder))
    })?;
    let handover = deleted.elapsed();
    eprintln!("leader handover from {leader} to {next} in {handover:?}");
    assert!(
        handover < Duration::from_secs(15),
        "the standby took over in {handover:?}"
    );
    // The new leader reconciles.
    let run = release.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: after-handover}\nspec: {size: 1}\n",
    )?;
    assert!(run.ok, "{}", run.stderr);
    release.wait_ready("memcached/after-handover")?;
    Ok(())
}

/// One JSONPath of an object in the release's user namespace.
pub(super) fn user_get(release: &Release, object: &str, path: &str) -> Result<String> {
    jsonpath(&release.user_ns, object, path)
}

/// A merge patch of `object` in the release's user namespace, as the cluster's admin.
pub(super) fn user_patch(release: &Release, object: &str, patch: &str) -> Result<String> {
    kubesteer_tests::merge_patch(&release.user_ns, object, patch)
}

/// Waits until `path` of `object` in the user namespace reads `want`.
pub(super) fn user_wait(release: &Release, object: &str, path: &str, want: &str) -> Result<()> {
    eventually(
        Duration::from_secs(90),
        &format!("{object} {path} = {want}"),
        || Ok((user_get(release, object, path)? == want).then_some(())),
    )
    .with_context(|| release.describe())
}

/// The logs of every pod of `component`, each line prefixed with its pod.
fn component_logs(release: &Release, component: &str) -> Result<String> {
    kubectl_ok(
        &[
            "logs",
            "-n",
            &release.namespace,
            "-l",
            &format!("app.kubernetes.io/component={component}"),
            "--prefix",
            "--tail=-1",
        ],
        None,
    )
}

/// The installed product as a user gets it: the chart's own pods, under the chart's
/// ServiceAccounts and RBAC, behind the in-cluster webhook, reconcile every kind with the
/// defaults: the samples of `config/samples/` (Memcached, Welcome, Application and a Scaler of a
/// Deployment) Ready, and a Scaler with the default `hpaCooperation` scaling a StatefulSet and an
/// HPA-managed Deployment, giving them back when it is deleted. A user who may edit Scalers but
/// scale nothing may label one and may not change its windows. The webhook denies none of the
/// controller's writes all along.
#[test]
fn the_charts_pods_reconcile_every_kind_through_their_own_webhook() -> Result<()> {
    let release = Release::install("tier", &[])?;
    let ns = release.user_ns.clone();
    let n = ns.as_str();
    release.create_deployment("web")?;
    release.create_deployment("api")?;
    let workloads = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  replicas: 1\n  serviceName: db\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec: {containers: [{name: c, image: registry.k8s.io/pause:3.10}]}\n---\n\
        apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: api}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}\n  minReplicas: 1\n  maxReplicas: 10\n  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]\n";
    let run = release.apply(workloads)?;
    ensure!(run.ok, "{run:?}");

    // The samples, as `make run` applies them, and a Scaler of the other two kinds of target.
    let samples = repo_root().join("config/samples");
    kubectl_ok(&["apply", "-n", n, "-f", &samples.to_string_lossy()], None)?;
    let fleet = format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: fleet}}\nspec:\n  scaleTargetRefs:\n  - {{apiVersion: apps/v1, kind: StatefulSet, name: db}}\n  - {{apiVersion: apps/v1, kind: Deployment, name: api}}\n  windows: [{}]\n",
        window(-1, 1, 3)
    );
    let run = release.apply(&fleet)?;
    ensure!(run.ok, "{run:?}");
    kubectl_ok(
        &[
            "wait",
            "-n",
            n,
            "--for=condition=Ready",
            "--timeout=120s",
            "memcached/cache",
            "welcome/hello",
            "application/application-sample",
            "scaler/office-hours",
            "scaler/fleet",
        ],
        None,
    )
    .with_context(|| release.describe())?;
    // The chart's controller sees the Memcached's pods through its own pod watch, under its own
    // RBAC: its status names the 3 of them.
    let nodes_name_pods = |count: usize| {
        eventually(
            Duration::from_secs(90),
            &format!("memcached/cache's status.nodes naming its {count} pods"),
            || {
                let pods = instance_pods(n, "cache")?;
                let nodes = user_get(&release, "memcached/cache", "{.status.nodes[*]}")?;
                Ok((pods.len() == count && nodes == pods.join(" ")).then_some(()))
            },
        )
        .with_context(|| release.describe())
    };
    nodes_name_pods(3)?;
    // A size change: the first apply to the Deployment it created, which moves the create's
    // fields to its Apply entry while the deployment controller writes the Deployment's status.
    user_patch(&release, "memcached/cache", r#"{"spec":{"size":2}}"#)?;
    user_wait(&release, "deployment/cache", "{.spec.replicas}", "2")?;
    nodes_name_pods(2)?;
    for scaler in ["office-hours", "fleet"] {
        let finalizers = user_get(
            &release,
            &format!("scaler/{scaler}"),
            "{.metadata.finalizers}",
        )?;
        assert!(
            finalizers.contains("kubesteer.io/restore-targets"),
            "{scaler} got its finalizer: {finalizers}"
        );
    }
    // The StatefulSet through its /scale, the HPA-managed Deployment through its HPA.
    user_wait(&release, "statefulset/db", "{.spec.replicas}", "3")?;
    user_wait(&release, "hpa/api", "{.spec.minReplicas}", "3")?;
    user_wait(
        &release,
        "scaler/fleet",
        "{.status.targets[0].replicas} {.status.targets[1].horizontalPodAutoscaler}",
        "3 api",
    )?;
    // The HPA, not the Scaler, brings its Deployment up to the new minimum.
    user_wait(&release, "deployment/api", "{.spec.replicas}", "3")?;
    // The sample's Deployment holds what its Scaler says, whatever the hour in Berlin.
    let told = user_get(
        &release,
        "scaler/office-hours",
        "{.status.targets[0].replicas}",
    )?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", &told)?;

    // bob may edit Scalers and scale nothing: a label passes, a change of the windows does not.
    kubesteer_tests::grant(
        n,
        "scaler-editor",
        "get,list,update,patch",
        "scalers.kubesteer.io",
        "bob",
    )?;
    kubectl_ok(
        &["label", "--as=bob", "-n", n, "scaler/fleet", "team=storage"],
        None,
    )
    .context("a metadata edit needs no right on the targets")?;
    assert_eq!(
        user_get(&release, "scaler/fleet", "{.metadata.labels.team}")?,
        "storage"
    );
    let run = kubectl(
        &[
            "patch",
            "--as=bob",
            "-n",
            n,
            "scaler/fleet",
            "--type=merge",
            "-p",
            r#"{"spec":{"windows":[{"start":"00:00","end":"24:00","replicas":9}]}}"#,
        ],
        None,
    )?;
    assert!(
        !run.ok,
        "bob may not re-schedule targets he may not scale: {run:?}"
    );
    assert!(
        run.stderr.contains(&format!(
            "spec.scaleTargetRefs[0]: Forbidden: user \"bob\" may not patch statefulsets/scale (apps) \"db\" in namespace \"{n}\""
        )),
        "{}",
        run.stderr
    );

    // hpaCooperation switched off inside the window: the HPA the Scaler raised gets its own
    // minReplicas back, found by the name the status recorded, and the Deployment is held itself.
    user_patch(
        &release,
        "scaler/fleet",
        r#"{"spec":{"hpaCooperation":"Disabled"}}"#,
    )?;
    user_wait(&release, "hpa/api", "{.spec.minReplicas}", "1")?;
    user_wait(
        &release,
        "hpa/api",
        "{.metadata.annotations.kubesteer\\.io/original-min-replicas}",
        "",
    )?;
    user_wait(
        &release,
        "scaler/fleet",
        "{.status.targets[1].horizontalPodAutoscaler}{.status.targets[1].replicas}",
        "3",
    )?;

    // Deleting the Scalers gives every target back.
    kubectl_ok(
        &[
            "delete",
            "-n",
            n,
            "scaler/fleet",
            "scaler/office-hours",
            "--timeout=60s",
        ],
        None,
    )
    .with_context(|| release.describe())?;
    user_wait(&release, "statefulset/db", "{.spec.replicas}", "1")?;
    user_wait(&release, "hpa/api", "{.spec.minReplicas}", "1")?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", "1")?;

    // Not one of the controller's writes was denied, by the webhook or anything else.
    let account = format!("serviceaccount:{}:", release.namespace);
    let webhook = component_logs(&release, "webhook")?;
    let denied: Vec<&str> = webhook
        .lines()
        .filter(|l| l.contains("denied") && l.contains(&account))
        .collect();
    assert!(
        denied.is_empty(),
        "the webhook denied the controller: {denied:#?}"
    );
    assert!(
        webhook
            .lines()
            .any(|l| l.contains("denied") && l.contains("bob")),
        "the webhook's denials are in its log (bob's is)"
    );
    let controller = component_logs(&release, "controller")?;
    assert!(
        !controller.contains("denied the request"),
        "the controller was denied: {}",
        controller
            .lines()
            .filter(|l| l.contains("denied the request"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Nor did any reconcile fail.
    let failed: Vec<&str> = controller
        .lines()
        .filter(|l| l.contains("reconcile failed"))
        .collect();
    assert!(
        failed.is_empty(),
        "reconciles of the chart's controller failed: {failed:#?}"
    );
    let reasons = kubectl_ok(
        &[
            "get",
            "events",
            "-n",
            n,
            "-o",
            "jsonpath={.items[*].reason}",
        ],
        None,
    )?;
    assert!(
        !reasons.contains("AdmissionDenied") && !reasons.contains("ReconcileFailed"),
        "no failed reconcile: {reasons}"
    );
    Ok(())
}

/// The controller's tuning set as the chart's README says, through `controller.extraEnv`: the
/// chart's controller pod reports the debounce and bound it took from `KUBESTEER_DEBOUNCE` and
/// `KUBESTEER_DEBOUNCE_MAX`, and under them a Memcached whose Deployment keeps changing faster
/// than the debounce still gets its spec change, within the bound, with no failed reconcile.
#[test]
fn the_charts_controller_takes_its_debounce_from_extra_env() -> Result<()> {
    use crate::owners::debounce::{spec_change_lands_through_churn, DEBOUNCE, DEBOUNCE_MAX};
    let debounce = format!("{}s", DEBOUNCE.as_secs());
    let bound = format!("{}s", DEBOUNCE_MAX.as_secs());
    let env = [
        ("KUBESTEER_DEBOUNCE", debounce.as_str()),
        ("KUBESTEER_DEBOUNCE_MAX", bound.as_str()),
    ];
    let release = Release::install_with_env("tune", &env, &[])?;
    on_real_node(&release, "controller", 2)?;
    let logs = || component_logs(&release, "controller");
    // The leader logs it once its watches are registered, as it turns Ready.
    let started = eventually(
        Duration::from_secs(30),
        "the controller's \"controllers started\" line",
        || {
            let logs = logs()?;
            let line = logs.lines().find(|l| l.contains("controllers started"));
            Ok(line.and_then(|l| l.find('{').map(|at| l[at..].to_string())))
        },
    )?;
    let started: serde_json::Value =
        serde_json::from_str(&started).with_context(|| format!("not JSON: {started}"))?;
    ensure!(
        started["debounce"] == debounce.as_str() && started["debounce_max"] == bound.as_str(),
        "the controller did not take the chart's extraEnv: {started}"
    );
    spec_change_lands_through_churn(&release.user_ns, logs).with_context(|| release.describe())
}

/// A ValidatingAdmissionPolicy that refuses any change of `frozen`'s replicas in `ns`: a refusal
/// by the apiserver that no retry changes, deleted with the guard.
struct Freeze(String);

impl Freeze {
    fn new(ns: &str) -> Result<Self> {
        let name = format!("{ns}-freeze");
        let policy = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {{name: {name}}}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}\n    resourceRules: [{{apiGroups: [apps], apiVersions: [v1], operations: [UPDATE], resources: [deployments, deployments/scale]}}]\n  validations:\n  - expression: \"object.metadata.name != 'frozen' || object.spec.replicas == oldObject.spec.replicas\"\n    message: frozen keeps its replicas\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: {name}}}\nspec:\n  policyName: {name}\n  validationActions: [Deny]\n"
        );
        kubectl_ok(&["apply", "-f", "-"], Some(&policy))?;
        Ok(Self(name))
    }
}

impl Drop for Freeze {
    fn drop(&mut self) {
        for kind in [
            "validatingadmissionpolicybinding",
            "validatingadmissionpolicy",
        ] {
            let _ = kubectl(&["delete", kind, &self.0, "--ignore-not-found"], None);
        }
    }
}

#[test]
fn a_target_the_apiserver_refuses_never_holds_up_the_others_nor_the_deletion() -> Result<()> {
    let release = Release::install("frz", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    for name in ["web", "frozen"] {
        release.create_deployment(name)?;
    }
    let scaler = |replicas: u32| {
        format!(
            "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: pair}}\nspec:\n  hpaCooperation: Disabled\n  scaleTargetRefs:\n  - {{apiVersion: apps/v1, kind: Deployment, name: frozen}}\n  - {{apiVersion: apps/v1, kind: Deployment, name: web}}\n  windows: [{}]\n",
            window(-1, 1, replicas)
        )
    };
    let run = release.apply(&scaler(3))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "deployment/frozen", "{.spec.replicas}", "3")?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", "3")?;

    // From now on the apiserver refuses any change of frozen's replicas.
    let _freeze = Freeze::new(n)?;
    eventually(Duration::from_secs(30), "the policy in force", || {
        let run = kubectl(
            // Admission without a change: a probe that went through must not make the next
            // one a no-op.
            &[
                "scale",
                "-n",
                n,
                "deployment/frozen",
                "--replicas=9",
                "--dry-run=server",
            ],
            None,
        )?;
        Ok(run
            .stderr
            .contains("frozen keeps its replicas")
            .then_some(()))
    })?;
    let run = release.apply(&scaler(4))?;
    ensure!(run.ok, "{run:?}");
    // web follows; frozen's failure is on its own status entry and in the Ready condition.
    user_wait(&release, "deployment/web", "{.spec.replicas}", "4")?;
    user_wait(
        &release,
        "scaler/pair",
        "{.status.conditions[?(@.type==\"Ready\")].reason} {.status.targets[1].replicas}",
        "TargetFailed 4",
    )?;
    let error = user_get(&release, "scaler/pair", "{.status.targets[0].error}")?;
    assert!(
        error.contains("frozen keeps its replicas"),
        "frozen's entry says why: {error}"
    );

    // Deleted, the Scaler gives web back and lets go of frozen, saying so.
    kubectl_ok(&["delete", "-n", n, "scaler/pair", "--timeout=60s"], None)
        .with_context(|| release.describe())?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", "1")?;
    assert_eq!(
        user_get(&release, "deployment/frozen", "{.spec.replicas}")?,
        "3"
    );
    let notes = notes_of(n, "RestoreFailed")?;
    assert!(
        notes
            .iter()
            .any(|m| m.starts_with("Deployment ") && m.contains("/frozen could not be given back")),
        "a RestoreFailed event names frozen: {notes:?}"
    );
    Ok(())
}

/// The probes of a tenant using the controller's rights, against the chart's own webhook pods:
/// bob may edit Applications but not read the Secret one of them reads, nor create Ingresses;
/// a host another namespace serves first is that namespace's, and two namespaces racing for a
/// new host get exactly one Application admitted.
#[test]
fn the_charts_webhook_stops_the_image_swap_the_second_key_and_the_foreign_host() -> Result<()> {
    let release = Release::install("prb", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    let app = "apiVersion: kubesteer.io/v1alpha1\nkind: Application\n";
    kubesteer_tests::grant(
        n,
        "app-editor",
        "get,list,create,update,patch",
        "applications.kubesteer.io",
        "bob",
    )?;
    let run = release.apply(&format!(
        "{app}metadata: {{name: site}}\nspec:\n  image: nginx\n  env:\n  - {{name: PW, valueFrom: {{secretKeyRef: {{name: db, key: pw}}}}}}\n"
    ))?;
    ensure!(run.ok, "the admin may: {run:?}");
    kubesteer_tests::application::secret_reads_denied_to_bob(n)?;

    // An Application with an Ingress needs the right to create one.
    let host = format!("{}.example.com", unique("shop"));
    let with_ingress = |name: &str| {
        format!(
            "{app}metadata: {{name: {name}}}\nspec: {{image: nginx, ingress: {{host: {host}, path: /login, pathType: Exact}}}}\n"
        )
    };
    let run = kubesteer_tests::apply_as("bob", n, &with_ingress("bobs"))?;
    assert!(!run.ok, "{run:?}");
    let want = format!(
        "spec.ingress: Forbidden: user \"bob\" may not create ingresses (networking.k8s.io) in namespace \"{n}\""
    );
    assert!(run.stderr.contains(&want), "{want} not in {}", run.stderr);

    // The host is another namespace's once an Ingress there serves it.
    let shop = kubesteer_tests::Namespace::new("prb-shop")?;
    kubectl_ok(
        &["apply", "-n", shop.name(), "-f", "-"],
        Some(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: login}}\nspec:\n  rules:\n  - host: {host}\n    http:\n      paths:\n      - {{path: /login, pathType: Exact, backend: {{service: {{name: x, port: {{number: 80}}}}}}}}\n"
        )),
    )?;
    let named = format!(
        "spec.ingress.host: Forbidden: host \"{host}\" is served by Ingress {}/login",
        shop.name()
    );
    eventually(
        Duration::from_secs(30),
        "the webhook pods to see the other namespace's Ingress",
        || {
            let run = release.apply(&with_ingress("hijack"))?;
            Ok((!run.ok && run.stderr.contains(&named)).then_some(()))
        },
    )
    .with_context(|| release.describe())?;

    // One namespace per host, decided by the chart's webhook pods under their own RBAC: the
    // host claims are HostClaims, which only that ServiceAccount may write.
    let a = kubesteer_tests::Namespace::admitted_by("prb-hosts-a", &release.name)?;
    let b = kubesteer_tests::Namespace::admitted_by("prb-hosts-b", &release.name)?;
    kubesteer_tests::hosts::one_namespace_per_host(&a, &b).with_context(|| release.describe())?;
    Ok(())
}

#[test]
fn a_dry_run_scaler_reports_and_writes_nothing_until_switched_off() -> Result<()> {
    let release = Release::install("dry", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    release.create_deployment("web")?;
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: preview}}\nspec:\n  dryRun: true\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n  windows: [{}]\n",
        window(-1, 1, 3)
    ))?;
    ensure!(run.ok, "{run:?}");
    user_wait(
        &release,
        "scaler/preview",
        "{.status.conditions[?(@.type==\"Ready\")].reason} {.status.targets[0].replicas}",
        "DryRun 1",
    )?;
    let notes = notes_of(n, "DryRun")?;
    assert!(
        notes.iter().any(|m| m
            == &format!(
                "Dry run, not done: Scaled Deployment {n}/web from 1 to 3 replicas; recorded 1 to restore"
            )),
        "{notes:?}"
    );
    assert_eq!(
        user_get(&release, "deployment/web", "{.spec.replicas}")?,
        "1"
    );
    assert_eq!(
        user_get(
            &release,
            "deployment/web",
            "{.metadata.annotations.kubesteer\\.io/original-replicas}"
        )?,
        "",
        "no record either"
    );
    // Switched off, the current state is applied at once.
    user_patch(&release, "scaler/preview", r#"{"spec":{"dryRun":false}}"#)?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", "3")?;
    Ok(())
}

#[test]
fn a_held_scaler_sets_back_a_target_scaled_up_outside_its_windows() -> Result<()> {
    let release = Release::install("hold", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    release.create_deployment("web")?;
    // A window two hours from now: outside it, web is held at 1.
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: nights}}\nspec:\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n  windows: [{}]\n  outsideReplicas: 1\n  outside: {{mode: Hold, gracePeriod: 0s}}\n",
        window(2, 3, 3)
    ))?;
    ensure!(run.ok, "{run:?}");
    user_wait(
        &release,
        "scaler/nights",
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "True",
    )?;
    // A nightly deploy scales it up: set back, naming who did it.
    kubectl_ok(&["scale", "-n", n, "deployment/web", "--replicas=4"], None)?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", "1")?;
    let notes = notes_of(n, "Held")?;
    assert!(
        notes.iter().any(|m| m.starts_with(&format!(
            "Set Deployment {n}/web back from 4 to 1 replicas outside every window (scaled up by kubectl"
        ))),
        "{notes:?}"
    );
    Ok(())
}

/// Created outside every window, a Scaler with outsideReplicas sets its targets there at once
/// (not after the next window closes), and so does an edit; then Release leaves them alone.
#[test]
fn a_scaler_created_or_edited_outside_every_window_acts_at_once() -> Result<()> {
    let release = Release::install("start", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    release.create_deployment("web")?;
    kubectl_ok(&["scale", "-n", n, "deployment/web", "--replicas=2"], None)?;
    // Its window opens in six hours.
    let scaler = |outside: u32| {
        format!(
            "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: evening}}\nspec:\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n  windows: [{}]\n  outsideReplicas: {outside}\n",
            window(6, 7, 3)
        )
    };
    let run = release.apply(&scaler(0))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "deployment/web", "{.spec.replicas}", "0")?;
    let notes = notes_of(n, "Scaled")?;
    assert!(
        notes.iter().any(|m| m
            == &format!(
                "Scaled Deployment {n}/web from 2 to 0 replicas: the Scaler starts outside every window"
            )),
        "{notes:?}"
    );
    // As after a closing window, nothing is recorded to give back.
    let annotations = kubectl_ok(
        &[
            "get",
            "-n",
            n,
            "deployment/web",
            "-o",
            "jsonpath={.metadata.annotations}",
        ],
        None,
    )?;
    assert!(
        !annotations.contains("kubesteer.io/original-replicas"),
        "{annotations}"
    );
    // Edited outside every window: the new outsideReplicas at once.
    let run = release.apply(&scaler(1))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "deployment/web", "{.spec.replicas}", "1")?;
    Ok(())
}

/// A workload a GitOps tool applies server-side (Argo CD and Flux force their fields): while a
/// manifest sets `replicas`, each sync takes the field back and the Scaler scales it back inside
/// its window, a fight on every sync; without `replicas` in the manifest, a sync leaves the
/// Scaler's replicas alone, and the window's close gives back the replicas from before.
#[test]
fn a_gitops_sync_fights_the_scaler_only_while_its_manifest_sets_replicas() -> Result<()> {
    let release = Release::install("gitops", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    let manifest = |replicas: Option<u32>| {
        let replicas = replicas
            .map(|r| format!("  replicas: {r}\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: site}}\nspec:\n{replicas}\
             \x20 selector: {{matchLabels: {{app: site}}}}\n  template:\n    metadata: {{labels: {{app: site}}}}\n\
             \x20   spec: {{containers: [{{name: site, image: nginx}}]}}\n"
        )
    };
    // A sync as Argo CD makes it: server-side, forcing the fields its manifest sets.
    let sync = |replicas: Option<u32>| {
        kubectl_ok(
            &[
                "apply",
                "-n",
                n,
                "--server-side",
                "--force-conflicts",
                "--field-manager=argocd-controller",
                "-f",
                "-",
            ],
            Some(&manifest(replicas)),
        )
    };
    sync(Some(2))?;
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: busy}}\nspec:\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: site}}]\n  windows: [{}]\n",
        window(-1, 2, 4)
    ))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "deployment/site", "{.spec.replicas}", "4")?;
    let managers = |path: &str| -> Result<String> {
        kubectl_ok(
            &[
                "get",
                "-n",
                n,
                "deployment/site",
                "--show-managed-fields",
                "-o",
                "json",
            ],
            None,
        )
        .map(|json| {
            let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
            v["metadata"]["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["fieldsV1"]["f:spec"].get(path).is_some())
                .filter_map(|m| m["manager"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    // The Scaler's write took the field from the GitOps tool.
    assert_eq!(managers("f:replicas")?, "kubesteer-controller");
    // A sync of a manifest with replicas takes it back, and the Scaler scales it back.
    sync(Some(2))?;
    let back = format!("Scaled Deployment {n}/site from 2 back to 4 replicas");
    eventually(Duration::from_secs(90), &back, || {
        Ok(notes_of(n, "Scaled")?.contains(&back).then_some(()))
    })?;
    user_wait(&release, "deployment/site", "{.spec.replicas}", "4")?;
    assert_eq!(managers("f:replicas")?, "kubesteer-controller");
    // What the user sets so the two don't fight: no replicas in the manifest. The sync after
    // the Scaler's last write leaves them at 4, and so does every one after it.
    sync(None)?;
    sync(None)?;
    assert_eq!(
        user_get(&release, "deployment/site", "{.spec.replicas}")?,
        "4"
    );
    assert_eq!(managers("f:replicas")?, "kubesteer-controller");
    // The window closed (the Scaler deleted): the replicas from before it are given back.
    kubectl_ok(&["delete", "-n", n, "scaler/busy", "--timeout=60s"], None)?;
    user_wait(&release, "deployment/site", "{.spec.replicas}", "2")?;
    Ok(())
}

#[test]
fn a_cron_job_is_suspended_while_its_replicas_would_be_0_and_resumed_after() -> Result<()> {
    let release = Release::install("cron", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    kubectl_ok(
        &[
            "create",
            "cronjob",
            "report",
            "-n",
            n,
            "--image=registry.k8s.io/pause:3.10",
            "--schedule=0 0 1 1 *",
        ],
        None,
    )?;
    // A Job, suspended the same way.
    kubectl_ok(
        &[
            "create",
            "job",
            "backfill",
            "-n",
            n,
            "--image=registry.k8s.io/pause:3.10",
        ],
        None,
    )?;
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: quiet}}\nspec:\n  scaleTargetRefs: [{{apiVersion: batch/v1, kind: CronJob, name: report}}]\n  windows: [{}]\n",
        // docs/scaler.md's whole-day window: open from 00:00 to the end of the day, every day.
        r#"{start: "00:00", end: "24:00", replicas: 0}"#
    ))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "cronjob/report", "{.spec.suspend}", "true")?;
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: idle}}\nspec:\n  scaleTargetRefs: [{{apiVersion: batch/v1, kind: Job, name: backfill}}]\n  windows: [{}]\n",
        r#"{start: "00:00", end: "24:00", replicas: 0}"#
    ))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "job/backfill", "{.spec.suspend}", "true")?;
    // A DaemonSet, asleep by a node selector no node has; its own selector stays.
    kubectl_ok(
        &["apply", "-n", n, "-f", "-"],
        Some(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec:\n      nodeSelector: {kubernetes.io/os: linux}\n      containers: [{name: agent, image: registry.k8s.io/pause:3.10}]\n",
        ),
    )?;
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: dark}}\nspec:\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: DaemonSet, name: agent}}]\n  windows: [{}]\n",
        r#"{start: "00:00", end: "24:00", replicas: 0}"#
    ))?;
    ensure!(run.ok, "{run:?}");
    let selector = "{.spec.template.spec.nodeSelector}";
    user_wait(
        &release,
        "daemonset/agent",
        selector,
        r#"{"kubernetes.io/os":"linux","kubesteer.io/asleep":"true"}"#,
    )?;
    // Open for good: no change ahead, not even at midnight.
    user_wait(
        &release,
        "scaler/quiet",
        "{.status.active}/{.status.nextTransitions[*].time}",
        "true/",
    )?;
    user_wait(
        &release,
        "scaler/quiet",
        "{.status.targets[0].kind} {.status.targets[0].replicas} {.status.targets[0].originalReplicas}",
        "CronJob 0 1",
    )?;
    let notes = notes_of(n, "Scaled")?;
    assert!(
        notes.contains(&format!("Suspended CronJob {n}/report")),
        "{notes:?}"
    );
    eventually(Duration::from_secs(30), "the Job's Scaled event", || {
        let notes = kubesteer_tests::event_notes(n, "Scaled")?;
        Ok(notes
            .contains(&format!("Suspended Job {n}/backfill"))
            .then_some(()))
    })?;
    kubectl_ok(
        &[
            "delete",
            "-n",
            n,
            "scaler/quiet",
            "scaler/idle",
            "scaler/dark",
            "--timeout=60s",
        ],
        None,
    )
    .with_context(|| release.describe())?;
    user_wait(&release, "cronjob/report", "{.spec.suspend}", "false")?;
    user_wait(&release, "job/backfill", "{.spec.suspend}", "false")?;
    user_wait(
        &release,
        "daemonset/agent",
        selector,
        r#"{"kubernetes.io/os":"linux"}"#,
    )?;

    // docs/migrating.md's Scalers, as written, pass the CRD and the chart's webhook (a server-side
    // dry run: nothing is stored). api/tests/migrating.rs checks what their schedules do. The
    // kube-green one names a CloudNativePG Cluster.
    super::sleep_patches::install_cnpg_cluster_kind()?;
    for yaml in migration_guide_scalers()? {
        let run = kubectl(
            &["apply", "--dry-run=server", "-n", n, "-f", "-"],
            Some(&yaml),
        )?;
        ensure!(
            run.ok && run.stdout.contains("created (server dry run)"),
            "{yaml}\n{run:?}"
        );
    }
    Ok(())
}

/// The Scalers of docs/migrating.md, one YAML document each.
fn migration_guide_scalers() -> Result<Vec<String>> {
    let page = std::fs::read_to_string(kubesteer_tests::repo_root().join("docs/migrating.md"))?;
    let scalers: Vec<String> = page
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split_once("```").map(|(yaml, _)| yaml.to_string()))
        .filter(|yaml| yaml.contains("kind: Scaler"))
        .collect();
    ensure!(scalers.len() >= 6, "found {} Scalers", scalers.len());
    Ok(scalers)
}

/// One window, in YAML, from `from` to `to` hours from now, at `replicas`.
fn window(from: i64, to: i64, replicas: u32) -> String {
    let now = kubesteer_tests::unix_now() as i64;
    let at = |hours: i64| kubesteer_tests::hh_mm(now.saturating_add(hours * 3600).max(0) as u64);
    format!(
        "{{start: \"{}\", end: \"{}\", replicas: {replicas}}}",
        at(from),
        at(to)
    )
}

/// The notes of the events of `reason` in `ns`, once there is one.
pub(super) fn notes_of(ns: &str, reason: &str) -> Result<Vec<String>> {
    eventually(
        Duration::from_secs(30),
        &format!("a {reason} event"),
        || {
            let notes = kubesteer_tests::event_notes(ns, reason)?;
            Ok((!notes.is_empty()).then_some(notes))
        },
    )
}

/// The Targets column of `kubectl get scaler` for `name` in the user namespace.
fn targets_column(release: &Release, name: &str) -> Result<String> {
    let run = kubectl_ok(
        &[
            "get",
            "-n",
            &release.user_ns,
            "scaler",
            name,
            "--no-headers",
        ],
        None,
    )?;
    let header = kubectl_ok(&["get", "-n", &release.user_ns, "scaler", name], None)?;
    let columns: Vec<&str> = header
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let at = columns
        .iter()
        .position(|c| *c == "TARGETS")
        .context("a TARGETS column")?;
    Ok(run
        .split_whitespace()
        .nth(at)
        .unwrap_or_default()
        .to_string())
}

#[test]
fn a_selector_scales_what_matches_picks_up_newcomers_gives_back_leavers_and_yields_to_names(
) -> Result<()> {
    let release = Release::install("sel", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    for name in ["web-a", "web-b", "keep", "db"] {
        release.create_deployment(name)?;
        let tier = if name == "db" { "db" } else { "web" };
        kubectl_ok(
            &[
                "label",
                "-n",
                n,
                &format!("deployment/{name}"),
                &format!("tier={tier}"),
            ],
            None,
        )?;
    }
    let scaler = |name: &str, replicas: u32, targets: &str| {
        format!(
            "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: {name}}}\nspec:\n{targets}  windows: [{}]\n",
            window(-1, 1, replicas)
        )
    };
    let selector = "  selector: {matchLabels: {tier: web}, exclude: [{name: keep}]}\n";
    let run = release.apply(&scaler("fleet", 3, selector))?;
    ensure!(run.ok, "{run:?}");
    for web in ["web-a", "web-b"] {
        user_wait(
            &release,
            &format!("deployment/{web}"),
            "{.spec.replicas}",
            "3",
        )?;
    }
    user_wait(&release, "scaler/fleet", "{.status.targetCount}", "2")?;
    assert_eq!(targets_column(&release, "fleet")?, "2");
    // One event for the selected targets, not one each.
    let notes = notes_of(n, "Scaled")?;
    assert!(
        notes
            .iter()
            .any(|m| m.starts_with("2 selected targets: Scaled Deployment ")),
        "{notes:?}"
    );
    assert_eq!(
        user_get(&release, "deployment/keep", "{.spec.replicas}")?,
        "1",
        "excluded by name"
    );
    assert_eq!(
        user_get(&release, "deployment/db", "{.spec.replicas}")?,
        "1",
        "another tier"
    );

    // A newcomer that matches is picked up from the watch; a leaver is given back.
    release.create_deployment("web-c")?;
    kubectl_ok(&["label", "-n", n, "deployment/web-c", "tier=web"], None)?;
    user_wait(&release, "deployment/web-c", "{.spec.replicas}", "3")?;
    kubectl_ok(&["label", "-n", n, "deployment/web-b", "tier-"], None)?;
    user_wait(&release, "deployment/web-b", "{.spec.replicas}", "1")?;
    user_wait(&release, "scaler/fleet", "{.status.targetCount}", "2")?;

    // A younger Scaler with the same selector picks nothing: the older one scales them.
    let run = release.apply(&scaler("younger", 5, selector))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "scaler/younger", "{.status.targetCount}", "0")?;
    assert_eq!(
        user_get(&release, "deployment/web-a", "{.spec.replicas}")?,
        "3"
    );
    kubectl_ok(
        &["delete", "-n", n, "scaler/younger", "--timeout=60s"],
        None,
    )?;

    // A Scaler that names a target beats any selector: the fleet lets web-a go to it.
    let named = "  scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web-a}]\n";
    let run = release.apply(&scaler("named", 4, named))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "deployment/web-a", "{.spec.replicas}", "4")?;
    user_wait(&release, "scaler/fleet", "{.status.targetCount}", "1")?;

    // The author must be able to scale every selected kind wherever the selector searches.
    kubesteer_tests::grant(
        n,
        "scaler-author",
        "get,list,create,update,patch",
        "scalers.kubesteer.io",
        "carol",
    )?;
    let run = kubesteer_tests::apply_as("carol", n, &scaler("carols", 0, selector))?;
    assert!(!run.ok, "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "spec.selector: Forbidden: user \"carol\" may not patch deployments/scale (apps) in namespace \"{n}\""
        )),
        "{}",
        run.stderr
    );
    let everywhere = "  selector: {namespaceSelector: {matchLabels: {env: dev}}}\n";
    let run = kubesteer_tests::apply_as("carol", n, &scaler("carols", 0, everywhere))?;
    assert!(!run.ok, "{run:?}");
    assert!(
        run.stderr.contains("spec.selector.namespaceSelector: Forbidden: user \"carol\" may not patch deployments/scale (apps) in every namespace"),
        "{}",
        run.stderr
    );

    // Deleted, the fleet gives back what it scaled.
    kubectl_ok(&["delete", "-n", n, "scaler/fleet", "--timeout=60s"], None)
        .with_context(|| release.describe())?;
    user_wait(&release, "deployment/web-c", "{.spec.replicas}", "1")?;
    assert_eq!(
        user_get(&release, "deployment/web-a", "{.spec.replicas}")?,
        "4",
        "still the named Scaler's"
    );
    Ok(())
}

#[test]
fn a_target_keda_scales_is_paused_through_its_scaled_object_and_resumed_after() -> Result<()> {
    use kubesteer_tests::keda;
    keda::ensure_keda()?;
    let release = Release::install("keda", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    release.create_deployment("web")?;
    kubectl_ok(
        &["apply", "-n", n, "-f", "-"],
        Some(&keda::scaled_object_yaml("web", "web", 1, 3, 2)),
    )?;
    let hpa = keda::hpa_name("web");
    user_wait(
        &release,
        &format!("hpa/{hpa}"),
        "{.metadata.ownerReferences[0].kind}",
        "ScaledObject",
    )?;
    // Off now: KEDA is told to hold web at 0, instead of the HPA's minReplicas it would undo.
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: quiet}}\nspec:\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n  windows: [{}]\n",
        window(-1, 1, 0)
    ))?;
    ensure!(run.ok, "{run:?}");
    let paused = format!(
        "{{.metadata.annotations.{}}}",
        keda::PAUSED_REPLICAS.replace('.', "\\.")
    );
    user_wait(&release, "scaledobject/web", &paused, "0")?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", "0")?;
    user_wait(
        &release,
        "scaler/quiet",
        "{.status.targets[0].scaledObject}",
        "web",
    )?;
    eventually(
        Duration::from_secs(60),
        "KEDA to delete its HPA while paused",
        || {
            let run = kubectl(&["get", "-n", n, "hpa", &hpa], None)?;
            Ok((!run.ok).then_some(()))
        },
    )?;
    let notes = notes_of(n, "Scaled")?;
    assert!(
        notes.contains(&format!(
            "Paused ScaledObject {n}/web at 0 replicas for Deployment {n}/web; KEDA scales the target"
        )),
        "{notes:?}"
    );
    // Deleted, the Scaler gives the ScaledObject back as it was: KEDA scales web again.
    kubectl_ok(&["delete", "-n", n, "scaler/quiet", "--timeout=60s"], None)
        .with_context(|| release.describe())?;
    user_wait(&release, "scaledobject/web", &paused, "")?;
    user_wait(
        &release,
        &format!("hpa/{hpa}"),
        "{.metadata.ownerReferences[0].kind}",
        "ScaledObject",
    )?;
    Ok(())
}

/// A Scaler stops when the author of its spec loses a right the spec needs, within a minute,
/// and resumes when the right is back, through the chart's pods (the controller asks the
/// apiserver about the author the webhook recorded): alice may manage Scalers and scale
/// Deployments in her namespace; her Scaler holds web at 1 outside its window; her right to
/// scale is taken away, web is scaled up by hand and stays there, and once her right is back the
/// Scaler sets it back.
#[test]
fn a_scaler_stops_when_its_authors_right_goes_and_resumes_when_it_is_back() -> Result<()> {
    let release = Release::install("rights", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    release.create_deployment("web")?;
    let alice = scalers_author(n, "alice")?;
    let sa = format!("{n}:alice");
    kubectl_ok(
        &[
            "create",
            "role",
            "scale",
            "-n",
            n,
            "--verb=patch",
            "--resource=deployments.apps/scale",
        ],
        None,
    )?;
    let grant = [
        "create",
        "rolebinding",
        "alice-scale",
        "-n",
        n,
        "--role=scale",
        "--serviceaccount",
        sa.as_str(),
    ];
    kubectl_ok(&grant, None)?;
    let ready = "{.status.conditions[?(@.type==\"Ready\")].status} {.status.conditions[?(@.type==\"Ready\")].reason}";
    let run = kubesteer_tests::apply_as(
        &alice,
        n,
        &format!(
            "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: nights}}\nspec:\n  hpaCooperation: Disabled\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n  windows: [{}]\n  outsideReplicas: 1\n  outside: {{mode: Hold, gracePeriod: 0s}}\n",
            window(2, 3, 3)
        ),
    )?;
    ensure!(run.ok, "alice may create her Scaler: {run:?}");
    let author = user_get(
        &release,
        "scaler/nights",
        "{.metadata.annotations.kubesteer\\.io/author}",
    )?;
    ensure!(
        author.contains(&format!("\"username\":\"{alice}\"")),
        "the webhook recorded alice as the author: {author:?}"
    );
    eventually(Duration::from_secs(60), "the Scaler ready", || {
        Ok((user_get(&release, "scaler/nights", ready)?.starts_with("True")).then_some(()))
    })
    .with_context(|| release.describe())?;

    // Her right to scale goes: within a minute the Scaler says so.
    kubectl_ok(&["delete", "rolebinding", "alice-scale", "-n", n], None)?;
    let revoked = Instant::now();
    eventually(
        Duration::from_secs(60),
        "the Scaler to stop for its author's missing right",
        || Ok((user_get(&release, "scaler/nights", ready)? == "False Forbidden").then_some(())),
    )
    .with_context(|| release.describe())?;
    eprintln!(
        "stopped {:.1} s after the right went",
        revoked.elapsed().as_secs_f64()
    );
    let message = user_get(
        &release,
        "scaler/nights",
        "{.status.conditions[?(@.type==\"Ready\")].message}",
    )?;
    ensure!(
        message.contains("may no longer patch deployments/scale (apps) \"web\""),
        "{message}"
    );
    let notes = notes_of(n, "Forbidden")?;
    ensure!(notes.contains(&message), "{notes:?}");

    // Scaled up by hand while she may not scale: the Scaler writes nothing. The hand scale
    // itself starts a pass (the Scaler watches its held targets) and the Scaler asks again
    // every RECHECK, so web is watched for longer than that.
    kubectl_ok(&["scale", "-n", n, "deployment/web", "--replicas=4"], None)?;
    let watched = Duration::from_secs(45);
    let until = Instant::now() + watched;
    while Instant::now() < until {
        let replicas = user_get(&release, "deployment/web", "{.spec.replicas}")?;
        ensure!(
            replicas == "4",
            "the Scaler wrote {replicas} replicas for an author without the right"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // The right comes back: the Scaler resumes and holds web at 1 again.
    kubectl_ok(&grant, None)?;
    user_wait(&release, "deployment/web", "{.spec.replicas}", "1")?;
    eventually(Duration::from_secs(60), "the Scaler ready again", || {
        Ok((user_get(&release, "scaler/nights", ready)?.starts_with("True")).then_some(()))
    })
    .with_context(|| release.describe())
}

/// The provided-certificates mode installed for real: the user's CA and serving certificate
/// (made here by `kubesteer-certs generate`, as any CA would) in a Secret of the release
/// namespace before the install. The webhook pods serve that certificate, both webhook
/// configurations carry that CA, no certificate Secret of the webhook's own appears, and every
/// check goes through the Service: a denial only the webhook knows, defaults stored, the chart's
/// controller reconciling, and `helm test`.
#[test]
fn a_release_with_provided_certificates_serves_them() -> Result<()> {
    let dir = kubesteer_tests::target_dir().join("e2e").join("provided");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let release = Release::install_prepared("prov", &[], &[], |r| {
        let mut generate =
            std::process::Command::new(kubesteer_tests::workspace_bin("kubesteer-certs"));
        generate
            .arg("generate")
            .args(["--service", &format!("{}-webhook", r.fullname())])
            .args(["--namespace", &r.namespace])
            .arg("--out-dir")
            .arg(&dir);
        let out = kubesteer_tests::output_within(
            &mut generate,
            None,
            Duration::from_secs(60),
            "kubesteer-certs generate",
        )?;
        ensure!(
            out.status.success(),
            "kubesteer-certs generate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        kubectl_ok(&["create", "namespace", &r.namespace], None)?;
        let cert = dir.join("tls.crt");
        let key = dir.join("tls.key");
        kubectl_ok(
            &[
                "create",
                "secret",
                "tls",
                "my-tls",
                "-n",
                &r.namespace,
                &format!("--cert={}", cert.display()),
                &format!("--key={}", key.display()),
            ],
            None,
        )?;
        Ok(vec![
            "--set".into(),
            "certs.mode=provided".into(),
            "--set".into(),
            "certs.provided.secretName=my-tls".into(),
            "--set-file".into(),
            format!("certs.provided.caBundle={}", dir.join("ca.crt").display()),
        ])
    })?;
    on_real_node(&release, "webhook", 2)?;
    let ca = kubesteer_tests::base64(&std::fs::read(dir.join("ca.crt"))?);
    let bundles = release.ca_bundles()?;
    ensure!(
        bundles.len() == WEBHOOKS && bundles.iter().all(|b| *b == ca),
        "every webhook carries the provided CA: {bundles:?}"
    );
    let own = kubectl(
        &[
            "get",
            "secret",
            &format!("{}-webhook-tls", release.fullname()),
            "-n",
            &release.namespace,
        ],
        None,
    )?;
    ensure!(
        !own.ok && own.stderr.contains("NotFound"),
        "the webhook made no certificate of its own: {own:?}"
    );

    webhook_denies_a_bad_time_zone(|yaml| release.apply(yaml))?;
    let good = release.apply(
        "apiVersion: kubesteer.io/v1alpha1\nkind: Memcached\nmetadata: {name: cache}\nspec: {}\n",
    )?;
    ensure!(good.ok, "a good Memcached is admitted: {}", good.stderr);
    let spec = jsonpath(&release.user_ns, "memcached/cache", "{.spec.size}")?;
    ensure!(spec == "1", "the webhook stored the defaults: {spec:?}");
    release.wait_ready("memcached/cache")?;
    let out = release.helm_test()?;
    ensure!(out.contains("Succeeded"), "helm test: {out}");

    // Renewal: a new serving certificate from the same CA (one more DNS name makes
    // kubesteer-certs renew it) written into the Secret.
    let admitted = renewal_under_load(&release, || {
        let mut renew =
            std::process::Command::new(kubesteer_tests::workspace_bin("kubesteer-certs"));
        renew
            .arg("generate")
            .args(["--service", &format!("{}-webhook", release.fullname())])
            .args(["--namespace", &release.namespace])
            .args(["--dns", "renewed.kubesteer.invalid"])
            .arg("--out-dir")
            .arg(&dir);
        let out =
            kubesteer_tests::output_within(&mut renew, None, Duration::from_secs(60), "renew")?;
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        ensure!(
            out.status.success() && said.starts_with("renewed"),
            "{said}"
        );
        let secret = kubectl_ok(
            &[
                "create",
                "secret",
                "tls",
                "my-tls",
                "-n",
                &release.namespace,
                &format!("--cert={}", dir.join("tls.crt").display()),
                &format!("--key={}", dir.join("tls.key").display()),
                "--dry-run=client",
                "-o",
                "yaml",
            ],
            None,
        )?;
        kubectl_ok(&["apply", "-f", "-"], Some(&secret))?;
        fingerprint(&std::fs::read_to_string(dir.join("tls.crt"))?)
    })?;
    eprintln!("provided-mode renewal: {admitted} writes admitted, 0 failed");
    Ok(())
}

/// The SHA-256 fingerprint of the PEM certificate `pem`, as openssl prints it.
pub(super) fn fingerprint(pem: &str) -> Result<String> {
    let out = kubesteer_tests::output_within(
        std::process::Command::new("openssl").args(["x509", "-noout", "-fingerprint", "-sha256"]),
        Some(pem.as_bytes()),
        Duration::from_secs(20),
        "openssl x509",
    )?;
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    ensure!(
        out.status.success() && said.contains('='),
        "openssl x509: {said:?}"
    );
    Ok(said)
}

/// Renews the webhook's serving certificate with `renew` (which returns the new certificate's
/// [`fingerprint`]) while a steady writer applies objects of three kinds: every webhook pod
/// serves the new certificate without a restart (the kubelet updates the mounted files within a
/// minute or so, or the self-managed webhook reloads its Secret) and no admission fails. The
/// writes admitted meanwhile.
pub(super) fn renewal_under_load(
    release: &Release,
    renew: impl FnOnce() -> Result<String>,
) -> Result<usize> {
    let webhook_pods = |path: &str| release.component_pods("webhook", &format!("jsonpath={path}"));
    let restarts = || webhook_pods("{.items[*].status.containerStatuses[0].restartCount}");
    let before = restarts()?;
    let load = Load::start(&release.user_ns, 2);
    let wanted = renew()?;
    let service = format!("{}-webhook.{}.svc", release.fullname(), release.namespace);
    let served = |ip: &str| -> Result<String> {
        let out = kubesteer_tests::output_within(
            std::process::Command::new("openssl").args([
                "s_client",
                "-connect",
                &format!("{ip}:9443"),
                "-servername",
                &service,
            ]),
            Some(b""),
            Duration::from_secs(20),
            "openssl s_client",
        )?;
        fingerprint(&String::from_utf8_lossy(&out.stdout))
    };
    eventually(
        Duration::from_secs(180),
        "every webhook pod serving the renewed certificate",
        || {
            let ips = webhook_pods("{.items[*].status.podIP}")?;
            let ips: Vec<&str> = ips.split_whitespace().collect();
            let mut all = Vec::new();
            for ip in &ips {
                all.push(served(ip)?);
            }
            Ok((ips.len() == 2 && all.iter().all(|s| *s == wanted)).then_some(()))
        },
    )
    .with_context(|| release.describe())?;
    let (admitted, failures) = load.finish();
    ensure!(
        failures.is_empty(),
        "{} admissions failed during the renewal: {failures:?}",
        failures.len()
    );
    ensure!(admitted > 0, "the writer wrote nothing");
    ensure!(restarts()? == before, "no webhook pod restarted");
    Ok(admitted)
}

/// With `controller.impersonation.serviceAccount`, the chart's controller writes each Scaler's
/// targets as that ServiceAccount of the Scaler's namespace: what the account may patch is
/// scaled, what it may not is refused by the apiserver itself, naming the account, and nothing
/// is written to it.
#[test]
fn an_impersonating_controller_writes_as_the_scalers_namespace_account() -> Result<()> {
    let release = Release::install(
        "imp",
        &["--set", "controller.impersonation.serviceAccount=scaler"],
    )?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    release.create_deployment("web")?;
    release.create_deployment("db")?;
    kubectl_ok(&["create", "serviceaccount", "scaler", "-n", n], None)?;
    // The namespace's owners let it scale web, and only web.
    kubectl_ok(
        &[
            "create",
            "role",
            "scale-web",
            "-n",
            n,
            "--verb=get,patch",
            "--resource=deployments.apps,deployments.apps/scale",
            "--resource-name=web",
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "create",
            "rolebinding",
            "scale-web",
            "-n",
            n,
            "--role=scale-web",
            &format!("--serviceaccount={n}:scaler"),
        ],
        None,
    )?;
    let run = release.apply(&format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: both}}\nspec:\n  scaleTargetRefs:\n    - {{apiVersion: apps/v1, kind: Deployment, name: web}}\n    - {{apiVersion: apps/v1, kind: Deployment, name: db}}\n  windows: [{}]\n",
        window(-1, 2, 3)
    ))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "deployment/web", "{.spec.replicas}", "3")?;
    let account = format!("system:serviceaccount:{n}:scaler");
    eventually(
        Duration::from_secs(60),
        "db's status entry refused as the namespace's account",
        || {
            let error = user_get(
                &release,
                "scaler/both",
                "{.status.targets[?(@.name==\"db\")].error}",
            )?;
            Ok((error.contains("forbidden") && error.contains(&account)).then_some(()))
        },
    )
    .with_context(|| release.describe())?;
    ensure!(
        user_get(&release, "deployment/db", "{.spec.replicas}")? == "1",
        "db was scaled although the account may not"
    );
    Ok(())
}

/// An iCalendar file of one all-day event on the days `first..end` (`YYYYMMDD`, DTEND
/// exclusive), and a yearly one.
fn holiday_calendar(first: &str, end: &str) -> String {
    format!(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//kubesteer//e2e//EN\r\nBEGIN:VEVENT\r\nUID:company-day\r\nSUMMARY:Company day\r\nDTSTART;VALUE=DATE:{first}\r\nDTEND;VALUE=DATE:{end}\r\nEND:VEVENT\r\nBEGIN:VEVENT\r\nUID:new-year\r\nSUMMARY:New Year\r\nDTSTART;VALUE=DATE:20200101\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
}

/// A ConfigMap `holidays` in `ns` whose `holidays.ics` is `ics`, made or replaced.
fn put_calendar(ns: &str, ics: &str) -> Result<()> {
    let map = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "holidays"},
        "data": {"holidays.ics": ics},
    });
    kubectl_ok(&["apply", "-n", ns, "-f", "-"], Some(&map.to_string()))?;
    Ok(())
}

#[test]
fn holidays_from_an_icalendar_configmap_keep_a_window_closed_and_show_in_the_plugin() -> Result<()>
{
    let release = Release::install("calendar", &[])?;
    let n = release.user_ns.clone();
    let n = n.as_str();
    release.create_deployment("web")?;
    // Yesterday to tomorrow, in UTC, are the company's days off (midnight may pass meanwhile).
    let now = chrono::Utc::now();
    let day = |offset: i64| {
        (now + chrono::Duration::days(offset))
            .format("%Y%m%d")
            .to_string()
    };
    let scaler = |replicas: u32| {
        format!(
            "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: office}}\nspec:\n  hpaCooperation: Disabled\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n  timeZone: UTC\n  windows: [{{start: \"00:00\", end: \"24:00\", replicas: {replicas}}}]\n  excludeCalendar: {{name: holidays}}\n"
        )
    };
    let ready = "{.status.conditions[?(@.type==\"Ready\")].reason}";

    // No ConfigMap yet: the Scaler writes nothing and says why.
    let run = release.apply(&scaler(3))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "scaler/office", ready, "CalendarUnreadable")?;
    assert_eq!(
        user_get(&release, "deployment/web", "{.spec.replicas}")?,
        "1"
    );

    // Today is a holiday: outside every window, so web keeps its replicas.
    put_calendar(n, &holiday_calendar(&day(-1), &day(2)))?;
    let run = release.apply(&scaler(2))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "scaler/office", ready, "ExcludedDate")?;
    let message = user_get(
        &release,
        "scaler/office",
        "{.status.conditions[?(@.type==\"Ready\")].message}",
    )?;
    ensure!(
        message.contains("is excluded (calendar: Company day)"),
        "{message}"
    );
    assert_eq!(
        user_get(&release, "deployment/web", "{.spec.replicas}")?,
        "1"
    );

    // The plugin shows the holiday, read from the same ConfigMap.
    let plugin = kubesteer_tests::workspace_bin("kubectl-kubesteer");
    let mut command = std::process::Command::new(&plugin);
    command
        .args(["preview", "scaler/office", "-n", n, "--days", "2"])
        .env("KUBECONFIG", kubesteer_tests::kubeconfig());
    let preview = kubesteer_tests::output_within(
        &mut command,
        None,
        Duration::from_secs(30),
        "kubectl-kubesteer preview",
    )?;
    let shown = String::from_utf8_lossy(&preview.stdout);
    ensure!(
        preview.status.success() && shown.contains("holiday: calendar: Company day"),
        "{shown}{}",
        String::from_utf8_lossy(&preview.stderr)
    );

    // The days move to next week in the ConfigMap: the next pass (the spec edited, or within
    // 5 minutes) opens the window.
    put_calendar(n, &holiday_calendar(&day(7), &day(9)))?;
    let run = release.apply(&scaler(3))?;
    ensure!(run.ok, "{run:?}");
    user_wait(&release, "deployment/web", "{.spec.replicas}", "3")?;

    // An author who may not read the ConfigMap is refused, naming the field.
    let run = kubesteer_tests::apply_as(
        &scalers_author(n, "carol")?,
        n,
        &scaler(4).replace("name: office", "name: carols"),
    )?;
    ensure!(
        !run.ok
            && run.stderr.contains("spec.excludeCalendar.name")
            && run.stderr.contains("get configmaps \"holidays\""),
        "carol may not read the calendar: {run:?}"
    );
    Ok(())
}

/// A ServiceAccount `name` of `ns` that may only read and write Scalers there (a Role
/// `scalers`, made once per namespace), as its user name for `--as`.
pub(super) fn scalers_author(ns: &str, name: &str) -> Result<String> {
    kubectl_ok(&["create", "serviceaccount", name, "-n", ns], None)?;
    let role = [
        "create",
        "role",
        "scalers",
        "-n",
        ns,
        "--verb=get,list,watch,create,update,patch,delete",
        "--resource=scalers.kubesteer.io",
    ];
    if !kubectl(&["get", "role", "scalers", "-n", ns], None)?.ok {
        kubectl_ok(&role, None)?;
    }
    let binding = format!("{name}-scalers");
    let sa = format!("{ns}:{name}");
    kubectl_ok(
        &[
            "create",
            "rolebinding",
            &binding,
            "-n",
            ns,
            "--role=scalers",
            "--serviceaccount",
            &sa,
        ],
        None,
    )?;
    Ok(format!("system:serviceaccount:{ns}:{name}"))
}
