//! The Helm chart as an operator meets it: lint, render in each certificate mode, and read what
//! would be applied. The last test installs and upgrades a release on the local cluster.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kubesteer_tests::release::SHARED_CRDS;
use kubesteer_tests::{
    helm_run, kubectl_ok, repo_root, webhook_fields, workspace_version, Namespace,
};
use serde_yaml::Value;

const NS: &str = "kubesteer-system";
const RELEASE: &str = "ks";
const FULLNAME: &str = "ks-kubesteer";
const CA_PEM: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUKubesteer\n-----END CERTIFICATE-----\n";

fn chart() -> PathBuf {
    repo_root().join("charts/kubesteer")
}

/// `helm template` of the chart with `extra` arguments, as one YAML value per document.
fn render(extra: &[&str]) -> Result<Vec<Value>> {
    let chart = chart();
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NS,
    ];
    args.extend_from_slice(extra);
    let run = helm_run(&args)?;
    if !run.ok {
        bail!("helm template {extra:?} failed: {}", run.stderr);
    }
    let mut docs = Vec::new();
    for text in run.stdout.split("\n---\n") {
        let doc: Value = serde_yaml::from_str(text).with_context(|| format!("parsing {text}"))?;
        if !doc.is_null() {
            docs.push(doc);
        }
    }
    Ok(docs)
}

/// The error of a `helm template` that must fail.
fn render_error(extra: &[&str]) -> Result<String> {
    let chart = chart();
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NS,
    ];
    args.extend_from_slice(extra);
    let run = helm_run(&args)?;
    if run.ok {
        bail!("helm template {extra:?} succeeded but should have failed");
    }
    Ok(run.stderr)
}

fn all<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind} {name}");
    found[0]
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().map(|x| str_of(x).to_string()).collect())
        .unwrap_or_default()
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"] == name)
}

fn env_value(container: &Value, name: &str) -> Option<String> {
    env(container, name).map(|e| str_of(&e["value"]).to_string())
}

fn container<'a>(docs: &'a [Value], deployment: &str) -> &'a Value {
    &one(docs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]
}

/// Both webhook configurations' webhooks, with the kind they belong to.
fn webhooks(docs: &[Value]) -> Vec<(&'static str, &Value)> {
    let mut out = Vec::new();
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let config = one(docs, kind, FULLNAME);
        for hook in config["webhooks"].as_sequence().expect("webhooks") {
            out.push((kind, hook));
        }
    }
    out
}

/// Each rule flattened to `group resource verb [resourceName]` lines, to compare whole roles.
fn grants(role: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_sequence().expect("rules") {
        let names = strings(&rule["resourceNames"]);
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    if names.is_empty() {
                        out.insert(format!("{group} {resource} {verb}"));
                    }
                    for name in &names {
                        out.insert(format!("{group} {resource} {verb} {name}"));
                    }
                }
            }
        }
    }
    out
}

fn expand(groups: &[&str], resources: &[&str], verbs: &[&str], name: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for g in groups {
        for r in resources {
            for v in verbs {
                out.push(match name {
                    Some(n) => format!("{g} {r} {v} {n}"),
                    None => format!("{g} {r} {v}"),
                });
            }
        }
    }
    out
}

fn ca_file(name: &str) -> Result<PathBuf> {
    let dir = kubesteer_tests::target_dir().join("chart-tests");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(name);
    std::fs::write(&path, CA_PEM)?;
    Ok(path)
}

/// What the local end-to-end tests install: the locally built image, on the tainted real node.
const REAL_NODE: &[&str] = &[
    "--set",
    "image.repository=kubesteer",
    "--set",
    "image.tag=dev",
    "--set",
    "image.pullPolicy=Never",
    "--set",
    "nodeSelector.kubesteer\\.io/real-node=true",
    "--set",
    "tolerations[0].key=kubesteer.io/real-node,tolerations[0].operator=Equal,tolerations[0].value=true,tolerations[0].effect=NoSchedule",
];

fn pod_spec<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let doc = one(docs, kind, name);
    if kind == "Pod" {
        &doc["spec"]
    } else {
        &doc["spec"]["template"]["spec"]
    }
}

/// Every pod the chart renders: both Deployments' templates and the `helm test` Pod.
fn pods(docs: &[Value]) -> Vec<(&'static str, &Value)> {
    vec![
        (
            "webhook",
            pod_spec(docs, "Deployment", &format!("{FULLNAME}-webhook")),
        ),
        (
            "controller",
            pod_spec(docs, "Deployment", &format!("{FULLNAME}-controller")),
        ),
        (
            "test",
            pod_spec(docs, "Pod", &format!("{FULLNAME}-test-webhook-readyz")),
        ),
    ]
}

#[test]
fn lint_is_clean_in_every_mode() -> Result<()> {
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let modes: [&[&str]; 7] = [
        &[],
        &["--set", "networkPolicy.enabled=true"],
        &["--set", "controller.watchNamespace=apps"],
        REAL_NODE,
        &["--set", "certs.mode=certManager"],
        &[
            "--set",
            "certs.mode=provided",
            "--set",
            "certs.provided.secretName=my-tls",
        ],
        &["--set", "webhook.url=https://127.0.0.1:9443"],
    ];
    for extra in modes {
        for strict in [false, true] {
            let mut args = vec!["lint", chart];
            if strict {
                args.push("--strict");
            }
            args.extend_from_slice(extra);
            let run = helm_run(&args)?;
            assert!(run.ok, "helm {args:?}: {}{}", run.stdout, run.stderr);
            assert!(run.stdout.contains("0 chart(s) failed"), "{}", run.stdout);
            for bad in ["[WARNING]", "[ERROR]"] {
                assert!(!run.stdout.contains(bad), "helm {args:?}: {}", run.stdout);
            }
        }
    }
    Ok(())
}

#[test]
fn every_webhook_fails_closed_quickly_and_skips_system_namespaces() -> Result<()> {
    for extra in [
        &[][..],
        &["--set", "certs.mode=certManager"],
        &[
            "--set",
            "certs.mode=provided",
            "--set",
            "certs.provided.secretName=my-tls",
        ],
    ] {
        let docs = render(extra)?;
        let hooks = webhooks(&docs);
        assert_eq!(hooks.len(), kubesteer_tests::WEBHOOKS);
        for (kind, hook) in hooks {
            let name = str_of(&hook["name"]);
            assert_eq!(hook["failurePolicy"], "Fail", "{name}");
            // An Application's review claims its host (a Lease), except in a dry run.
            let writes = name == "validate.applications.kubesteer.io";
            let side_effects = if writes { "NoneOnDryRun" } else { "None" };
            assert_eq!(hook["sideEffects"], side_effects, "{name}");
            assert_eq!(hook["timeoutSeconds"].as_u64(), Some(5), "{name}");
            assert_eq!(hook["matchPolicy"], "Equivalent", "{name}");
            let (prefix, path) = if kind.starts_with("Mutating") {
                ("default", "mutate")
            } else {
                ("validate", "validate")
            };
            let plural = strings(&hook["rules"][0]["resources"]).remove(0);
            let known = kubesteer_api::kind::ALL
                .iter()
                .any(|k| k.plural() == plural);
            assert!(known, "{plural}");
            assert_eq!(name, format!("{prefix}.{plural}.kubesteer.io"));
            let service = &hook["clientConfig"]["service"];
            assert_eq!(service["name"], format!("{FULLNAME}-webhook").as_str());
            assert_eq!(service["namespace"], NS);
            assert_eq!(service["port"].as_u64(), Some(443));
            assert_eq!(service["path"], format!("/{path}/{plural}").as_str());
            let expr = &hook["namespaceSelector"]["matchExpressions"][0];
            assert_eq!(expr["key"], "kubernetes.io/metadata.name");
            assert_eq!(expr["operator"], "NotIn");
            let excluded = strings(&expr["values"]);
            assert!(
                excluded.contains(&"kube-system".to_string()),
                "{excluded:?}"
            );
            assert!(excluded.contains(&NS.to_string()), "{excluded:?}");
        }
    }
    Ok(())
}

#[test]
fn self_managed_is_the_default_and_renders_no_ca_bundle() -> Result<()> {
    let docs = render(&[])?;
    for (_, hook) in webhooks(&docs) {
        // Rendering any caBundle, even empty, would let `helm upgrade` wipe the injected one.
        assert!(hook["clientConfig"].get("caBundle").is_none(), "{hook:?}");
    }
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let config = one(&docs, kind, FULLNAME);
        assert!(
            config["metadata"].get("annotations").is_none(),
            "{config:?}"
        );
    }
    assert!(all(&docs, "Certificate").is_empty());
    assert!(all(&docs, "Issuer").is_empty());

    let webhook = container(&docs, &format!("{FULLNAME}-webhook"));
    assert_eq!(
        env_value(webhook, "KUBESTEER_CERT_MODE").as_deref(),
        Some("self-managed")
    );
    let secret = format!("{FULLNAME}-webhook-tls");
    assert_eq!(
        env_value(webhook, "KUBESTEER_CERT_SECRET"),
        Some(secret.clone())
    );
    // The chart owns the Secret but renders none of what the webhook writes into it: a `helm
    // rollback` to a revision rendered before the webhook wrote it would empty it otherwise.
    let owned = one(&docs, "Secret", &secret);
    assert!(
        owned.get("data").is_none() && owned.get("stringData").is_none(),
        "{owned:?}"
    );
    assert_eq!(
        env_value(webhook, "KUBESTEER_SERVICE"),
        Some(format!("{FULLNAME}-webhook"))
    );
    assert_eq!(
        env_value(webhook, "KUBESTEER_WEBHOOK_CONFIGURATION").as_deref(),
        Some(FULLNAME)
    );
    let pod_ns = env(webhook, "POD_NAMESPACE").expect("POD_NAMESPACE");
    assert_eq!(
        pod_ns["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert!(webhook.get("volumeMounts").is_none());
    let pod = &one(&docs, "Deployment", &format!("{FULLNAME}-webhook"))["spec"]["template"]["spec"];
    assert!(pod.get("volumes").is_none());
    Ok(())
}

#[test]
fn two_hardened_replicas_of_each_with_probes_and_disruption_budgets() -> Result<()> {
    let docs = render(&[])?;
    // The controller's port serves HTTPS with metrics auth, which is on by default.
    for (component, port, scheme) in [("webhook", 9443, "HTTPS"), ("controller", 8080, "HTTPS")] {
        let name = format!("{FULLNAME}-{component}");
        let deployment = one(&docs, "Deployment", &name);
        assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(2), "{name}");
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], name.as_str());
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["runAsUser"].as_u64(), Some(65532));
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let anti = &pod["affinity"]["podAntiAffinity"]
            ["preferredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(
            anti["podAffinityTerm"]["topologyKey"],
            "kubernetes.io/hostname"
        );
        assert_eq!(
            anti["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"],
            component
        );

        let c = &pod["containers"][0];
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true, "{name}");
        assert_eq!(sc["runAsUser"].as_u64(), Some(65532), "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{name}");
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        // One image for both; each Deployment names its binary.
        assert_eq!(
            c["image"],
            format!("ghcr.io/kubesteer/kubesteer:{}", workspace_version()?),
            "{name}"
        );
        assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{name}");
        assert_eq!(
            strings(&c["command"]),
            [format!("kubesteer-{component}")],
            "{name}"
        );
        assert_eq!(c["ports"][0]["containerPort"].as_u64(), Some(port));
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let get = &c[probe]["httpGet"];
            assert_eq!(get["path"], path, "{name} {probe}");
            assert_eq!(get["scheme"], scheme, "{name} {probe}");
            assert_eq!(get["port"], c["ports"][0]["name"], "{name} {probe}");
        }

        let pdb = one(&docs, "PodDisruptionBudget", &name);
        assert_eq!(pdb["spec"]["minAvailable"].as_u64(), Some(1));
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"],
            deployment["spec"]["selector"]["matchLabels"]
        );
        one(&docs, "ServiceAccount", &name);
    }

    let controller = container(&docs, &format!("{FULLNAME}-controller"));
    assert_eq!(
        env_value(controller, "KUBESTEER_LEADER_ELECTION").as_deref(),
        Some("true")
    );
    assert_eq!(
        env_value(controller, "KUBESTEER_LEASE_NAME"),
        Some(format!("{FULLNAME}-controller"))
    );
    assert!(env(controller, "POD_NAME").is_some());
    assert!(env(controller, "POD_NAMESPACE").is_some());

    let service = one(&docs, "Service", &format!("{FULLNAME}-webhook"));
    assert_eq!(service["spec"]["ports"][0]["port"].as_u64(), Some(443));
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "https");
    let webhook_deployment = one(&docs, "Deployment", &format!("{FULLNAME}-webhook"));
    assert_eq!(
        service["spec"]["selector"],
        webhook_deployment["spec"]["selector"]["matchLabels"]
    );
    Ok(())
}

#[test]
fn a_single_replica_gets_no_disruption_budget_and_many_need_leader_election() -> Result<()> {
    let docs = render(&[
        "--set",
        "webhook.replicas=1",
        "--set",
        "controller.replicas=1",
    ])?;
    assert!(all(&docs, "PodDisruptionBudget").is_empty());

    let err = render_error(&["--set", "controller.leaderElection=false"])?;
    assert!(err.contains("leaderElection"), "{err}");
    let docs = render(&[
        "--set",
        "controller.leaderElection=false",
        "--set",
        "controller.replicas=1",
    ])?;
    assert!(docs.iter().all(|d| !(d["kind"] == "Role"
        && d["metadata"]["name"] == format!("{FULLNAME}-controller").as_str())));
    Ok(())
}

#[test]
fn rbac_grants_exactly_what_each_binary_uses() -> Result<()> {
    let docs = render(&[])?;
    let secret = format!("{FULLNAME}-webhook-tls");

    let mut webhook: BTreeSet<String> = BTreeSet::new();
    webhook.extend(expand(
        &["authorization.k8s.io"],
        &["subjectaccessreviews"],
        &["create"],
        None,
    ));
    // Reflectors only: a list, then a watch; nothing is read one by one.
    webhook.extend(expand(
        &["kubesteer.io"],
        &["scalers"],
        &["list", "watch"],
        None,
    ));
    webhook.extend(expand(
        &["apps"],
        &["deployments"],
        &["list", "watch"],
        None,
    ));
    webhook.extend(expand(
        &["autoscaling"],
        &["horizontalpodautoscalers"],
        &["list", "watch"],
        None,
    ));
    webhook.extend(expand(
        &["networking.k8s.io"],
        &["ingresses", "ingressclasses"],
        &["list", "watch"],
        None,
    ));
    // The host claims, and whether one still holds: the claiming namespace's Applications,
    // listed then.
    webhook.extend(expand(
        &["kubesteer.io"],
        &["hostclaims"],
        &["create", "get", "list", "update", "delete"],
        None,
    ));
    webhook.extend(expand(
        &["kubesteer.io"],
        &["applications"],
        &["list"],
        None,
    ));
    let configs = expand(
        &["admissionregistration.k8s.io"],
        &[
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ],
        &["get", "patch"],
        Some(FULLNAME),
    );
    // The Scaler CRD's conversion, pointed at itself.
    webhook.extend(expand(
        &["apiextensions.k8s.io"],
        &["customresourcedefinitions"],
        &["get", "patch"],
        Some("scalers.kubesteer.io"),
    ));
    let mut self_managed = webhook.clone();
    self_managed.extend(configs);
    assert_eq!(
        grants(one(&docs, "ClusterRole", &format!("{FULLNAME}-webhook"))),
        self_managed
    );

    // Secrets: create cannot name its object; everything else is limited to the cert Secret.
    let secrets = one(&docs, "Role", &format!("{FULLNAME}-webhook"));
    assert_eq!(secrets["metadata"]["namespace"], NS);
    let mut expected: BTreeSet<String> = expand(&[""], &["secrets"], &["create"], None)
        .into_iter()
        .collect();
    expected.extend(expand(
        &[""],
        &["secrets"],
        &["get", "update"],
        Some(&secret),
    ));
    assert_eq!(grants(secrets), expected);

    let kinds = kubesteer_api::kind::ALL.map(|k| k.plural());
    let status: Vec<String> = kinds.iter().map(|k| format!("{k}/status")).collect();
    let finalizers: Vec<String> = kinds.iter().map(|k| format!("{k}/finalizers")).collect();
    let status: Vec<&str> = status.iter().map(String::as_str).collect();
    let finalizers: Vec<&str> = finalizers.iter().map(String::as_str).collect();
    let write = [
        "get", "list", "watch", "create", "patch", "update", "delete",
    ];
    let mut controller: BTreeSet<String> = BTreeSet::new();
    controller.extend(expand(
        &["kubesteer.io"],
        &kinds,
        &["get", "list", "watch", "patch", "update"],
        None,
    ));
    controller.extend(expand(
        &["kubesteer.io"],
        &status,
        &["get", "patch", "update"],
        None,
    ));
    controller.extend(expand(&["kubesteer.io"], &finalizers, &["update"], None));
    controller.extend(expand(&["apps"], &["deployments"], &write, None));
    // Scaler targets of the built-in scalable kinds, through /scale, and the HPAs it cooperates with.
    controller.extend(expand(
        &["apps"],
        &["statefulsets", "replicasets", "daemonsets"],
        &["get", "list", "watch", "patch"],
        None,
    ));
    controller.extend(expand(
        &["apps"],
        &[
            "deployments/scale",
            "statefulsets/scale",
            "replicasets/scale",
        ],
        &["get", "patch"],
        None,
    ));
    controller.extend(expand(
        &["autoscaling"],
        &["horizontalpodautoscalers"],
        &["get", "list", "watch", "patch"],
        None,
    ));
    controller.extend(expand(&[""], &["services"], &write, None));
    // An Application's Ingress: applied, and deleted when spec.ingress goes; never updated.
    controller.extend(expand(
        &["networking.k8s.io"],
        &["ingresses"],
        &["get", "list", "watch", "create", "patch", "delete"],
        None,
    ));
    // Welcome credentials are written, never read.
    controller.extend(expand(
        &[""],
        &["secrets"],
        &["create", "patch", "delete"],
        None,
    ));
    controller.extend(expand(&[""], &["pods"], &["get", "list", "watch"], None));
    controller.extend(expand(
        &["events.k8s.io", ""],
        &["events"],
        &["create", "patch"],
        None,
    ));
    // CronJobs: suspended by Scalers, and watched (metadata) once a selector names them.
    controller.extend(expand(
        &["batch"],
        &["cronjobs", "jobs"],
        &["get", "list", "watch", "patch"],
        None,
    ));
    // KEDA's ScaledObjects, paused instead of their HPAs.
    controller.extend(expand(
        &["keda.sh"],
        &["scaledobjects"],
        &["get", "patch"],
        None,
    ));
    // Kinds put to sleep by a declared patch (controller.sleepPatchTargets' defaults).
    controller.extend(expand(
        &["postgresql.cnpg.io"],
        &["clusters"],
        &["get", "patch"],
        None,
    ));
    controller.extend(expand(
        &["argoproj.io"],
        &["applications"],
        &["get", "patch"],
        None,
    ));
    // A Scaler's calendar (spec.excludeCalendar), read by name.
    controller.extend(expand(&[""], &["configmaps"], &["get"], None));
    // A selector's namespaceSelector reads the namespaces' labels.
    controller.extend(expand(&[""], &["namespaces"], &["list", "watch"], None));
    // Storage version migration: the kubesteer CRDs by name, their status only.
    for crd in ["scalers", "welcomes", "memcacheds", "applications"] {
        let name = format!("{crd}.kubesteer.io");
        for (resource, verb) in [
            ("customresourcedefinitions", "get"),
            ("customresourcedefinitions/status", "patch"),
        ] {
            controller.extend(expand(
                &["apiextensions.k8s.io"],
                &[resource],
                &[verb],
                Some(&name),
            ));
        }
    }
    assert_eq!(
        grants(one(&docs, "ClusterRole", &format!("{FULLNAME}-controller"))),
        controller
    );
    // Whether each Scaler's author still holds the rights its spec needs.
    assert_eq!(
        grants(one(
            &docs,
            "ClusterRole",
            &format!("{FULLNAME}-controller-authors")
        )),
        expand(
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
            &["create"],
            None
        )
        .into_iter()
        .collect()
    );
    // The leader Lease: create cannot name its object; everything else names the one Lease.
    let lease = one(&docs, "Role", &format!("{FULLNAME}-controller-lease"));
    assert_eq!(lease["metadata"]["namespace"], NS);
    let mut expected: BTreeSet<String> =
        expand(&["coordination.k8s.io"], &["leases"], &["create"], None)
            .into_iter()
            .collect();
    expected.extend(expand(
        &["coordination.k8s.io"],
        &["leases"],
        &["get", "update"],
        Some(&format!("{FULLNAME}-controller")),
    ));
    assert_eq!(grants(lease), expected);
    let custom = render(&["--set", "controller.leaseName=my-lease"])?;
    assert!(grants(one(
        &custom,
        "Role",
        &format!("{FULLNAME}-controller-lease")
    ))
    .contains("coordination.k8s.io leases update my-lease"));
    let no_election = render(&[
        "--set",
        "controller.leaderElection=false",
        "--set",
        "controller.replicas=1",
    ])?;
    assert!(no_election
        .iter()
        .all(|d| d["metadata"]["name"] != format!("{FULLNAME}-controller-lease").as_str()));

    for (binding, role, sa) in [
        ("ClusterRoleBinding", "webhook", "webhook"),
        ("ClusterRoleBinding", "controller", "controller"),
        ("ClusterRoleBinding", "controller-authors", "controller"),
        ("RoleBinding", "webhook", "webhook"),
        ("RoleBinding", "controller-lease", "controller"),
    ] {
        let name = format!("{FULLNAME}-{role}");
        let b = one(&docs, binding, &name);
        assert_eq!(b["roleRef"]["name"], name.as_str());
        assert_eq!(
            b["subjects"][0]["name"],
            format!("{FULLNAME}-{sa}").as_str()
        );
        assert_eq!(b["subjects"][0]["namespace"], NS);
    }
    // No rule anywhere lets either binary read Secrets beyond the webhook's own, or touch RBAC.
    for doc in all(&docs, "ClusterRole")
        .into_iter()
        .chain(all(&docs, "Role"))
    {
        for grant in grants(doc) {
            let read_secrets = grant.starts_with(" secrets get")
                || grant.starts_with(" secrets list")
                || grant.starts_with(" secrets watch");
            assert!(
                !read_secrets || grant == format!(" secrets get {secret}"),
                "{grant}"
            );
            assert!(!grant.starts_with("rbac.authorization.k8s.io"), "{grant}");
            assert!(!grant.contains('*'), "{grant}");
        }
    }

    // Only the self-managed webhook writes certificates and webhook configurations.
    for extra in [
        &["--set", "certs.mode=certManager"][..],
        &[
            "--set",
            "certs.mode=provided",
            "--set",
            "certs.provided.secretName=my-tls",
        ],
    ] {
        let docs = render(extra)?;
        assert_eq!(
            grants(one(&docs, "ClusterRole", &format!("{FULLNAME}-webhook"))),
            webhook,
            "{extra:?}"
        );
        assert!(docs.iter().all(|d| !(d["kind"] == "Role"
            && d["metadata"]["name"] == format!("{FULLNAME}-webhook").as_str())));
    }
    Ok(())
}

#[test]
fn cert_manager_mode_issues_a_certificate_and_injects_its_ca() -> Result<()> {
    let docs = render(&["--set", "certs.mode=certManager"])?;
    let certificate = format!("{FULLNAME}-webhook");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let config = one(&docs, kind, FULLNAME);
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NS}/{certificate}").as_str()
        );
    }
    for (_, hook) in webhooks(&docs) {
        assert!(hook["clientConfig"].get("caBundle").is_none());
    }

    let cert = one(&docs, "Certificate", &certificate);
    let svc = format!("{FULLNAME}-webhook");
    assert_eq!(
        strings(&cert["spec"]["dnsNames"]),
        [
            svc.clone(),
            format!("{svc}.{NS}"),
            format!("{svc}.{NS}.svc"),
            format!("{svc}.{NS}.svc.cluster.local"),
        ]
    );
    let secret = str_of(&cert["spec"]["secretName"]).to_string();
    assert!(cert["spec"]["duration"].is_string());
    assert!(cert["spec"]["renewBefore"].is_string());

    // The chart's own chain: self-signed Issuer -> CA Certificate -> CA Issuer -> serving cert.
    let ca_issuer = format!("{FULLNAME}-ca");
    assert_eq!(cert["spec"]["issuerRef"]["name"], ca_issuer.as_str());
    assert_eq!(cert["spec"]["issuerRef"]["kind"], "Issuer");
    let issuer = one(&docs, "Issuer", &ca_issuer);
    let ca = one(&docs, "Certificate", &ca_issuer);
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(issuer["spec"]["ca"]["secretName"], ca["spec"]["secretName"]);
    let selfsigned = str_of(&ca["spec"]["issuerRef"]["name"]);
    assert!(one(&docs, "Issuer", selfsigned)["spec"]
        .get("selfSigned")
        .is_some());

    let webhook = container(&docs, &format!("{FULLNAME}-webhook"));
    assert_eq!(
        env_value(webhook, "KUBESTEER_CERT_MODE").as_deref(),
        Some("files")
    );
    assert_eq!(
        env_value(webhook, "KUBESTEER_TLS_CERT_FILE").as_deref(),
        Some("/tls/tls.crt")
    );
    assert_eq!(
        env_value(webhook, "KUBESTEER_TLS_KEY_FILE").as_deref(),
        Some("/tls/tls.key")
    );
    assert!(env(webhook, "KUBESTEER_CERT_SECRET").is_none());
    assert_eq!(webhook["volumeMounts"][0]["mountPath"], "/tls");
    assert_eq!(webhook["volumeMounts"][0]["readOnly"], true);
    let pod = &one(&docs, "Deployment", &format!("{FULLNAME}-webhook"))["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], secret.as_str());

    // With an issuer of the user's, the chart makes none of its own.
    let docs = render(&[
        "--set",
        "certs.mode=certManager",
        "--set",
        "certs.certManager.issuerRef.name=corp-ca",
        "--set",
        "certs.certManager.issuerRef.kind=ClusterIssuer",
    ])?;
    assert!(all(&docs, "Issuer").is_empty());
    assert_eq!(all(&docs, "Certificate").len(), 1);
    let cert = one(&docs, "Certificate", &certificate);
    assert_eq!(cert["spec"]["issuerRef"]["name"], "corp-ca");
    assert_eq!(cert["spec"]["issuerRef"]["kind"], "ClusterIssuer");
    assert_eq!(cert["spec"]["issuerRef"]["group"], "cert-manager.io");
    Ok(())
}

#[test]
fn provided_mode_mounts_the_secret_and_renders_its_ca() -> Result<()> {
    let ca = ca_file("provided-ca.crt")?;
    let set_file = format!("certs.provided.caBundle={}", ca.display());
    let docs = render(&[
        "--set",
        "certs.mode=provided",
        "--set",
        "certs.provided.secretName=my-tls",
        "--set-file",
        &set_file,
    ])?;
    let encoded = kubesteer_tests::base64(CA_PEM.as_bytes());
    for (_, hook) in webhooks(&docs) {
        assert_eq!(hook["clientConfig"]["caBundle"], encoded.as_str());
    }
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        assert!(one(&docs, kind, FULLNAME)["metadata"]
            .get("annotations")
            .is_none());
    }
    assert!(all(&docs, "Certificate").is_empty());
    let webhook = container(&docs, &format!("{FULLNAME}-webhook"));
    assert_eq!(
        env_value(webhook, "KUBESTEER_CERT_MODE").as_deref(),
        Some("files")
    );
    assert_eq!(webhook["volumeMounts"][0]["mountPath"], "/tls");
    let pod = &one(&docs, "Deployment", &format!("{FULLNAME}-webhook"))["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "my-tls");

    let err = render_error(&["--set", "certs.mode=provided"])?;
    assert!(err.contains("secretName"), "{err}");
    Ok(())
}

/// What `make run` and the webhook end-to-end tests render: the configurations alone, by URL.
/// `value` with every number as a float, as the apiserver reads a JSON schema's numbers.
fn same_numbers(value: &Value) -> Value {
    match value {
        Value::Number(n) => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        Value::Sequence(items) => Value::Sequence(items.iter().map(same_numbers).collect()),
        Value::Mapping(map) => Value::Mapping(
            map.iter()
                .map(|(k, v)| (k.clone(), same_numbers(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The CRDs are templates, so `helm upgrade` upgrades them: the committed files with the chart's
/// labels, kept on uninstall and rollback, the Scaler's conversion pointed at the release's
/// webhook with the CA of each certificate mode; off with crds.enabled=false.
#[test]
fn crds_are_the_committed_files_upgraded_and_kept_by_the_release() -> Result<()> {
    let docs = render(&[])?;
    let crds = all(&docs, "CustomResourceDefinition");
    let mut names: Vec<_> = crds
        .iter()
        .map(|c| str_of(&c["metadata"]["name"]))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "applications.kubesteer.io",
            "hostclaims.kubesteer.io",
            "memcacheds.kubesteer.io",
            "scalers.kubesteer.io",
            "welcomes.kubesteer.io"
        ]
    );
    let version = workspace_version()?;
    for crd in &crds {
        let name = str_of(&crd["metadata"]["name"]);
        let file = chart().join(format!("files/crds/{name}.yaml"));
        let committed: Value = serde_yaml::from_str(&std::fs::read_to_string(&file)?)?;
        let meta = &crd["metadata"];
        assert_eq!(
            meta["annotations"]["helm.sh/resource-policy"], "keep",
            "{name}"
        );
        assert_eq!(
            meta["labels"]["app.kubernetes.io/version"],
            version.as_str()
        );
        assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "Helm");
        // The schema is the committed one (helm's toYaml writes 65535.0 as 65535, the same
        // number to the apiserver); only the conversion's client is the release's.
        for part in ["versions", "names", "group", "scope"] {
            assert!(
                same_numbers(&crd["spec"][part]) == same_numbers(&committed["spec"][part]),
                "{name}: spec.{part} is not the committed file's"
            );
        }
    }
    let scaler = one(&docs, "CustomResourceDefinition", "scalers.kubesteer.io");
    let client = &scaler["spec"]["conversion"]["webhook"]["clientConfig"];
    assert_eq!(
        client["service"]["name"],
        format!("{FULLNAME}-webhook").as_str()
    );
    assert_eq!(client["service"]["namespace"], NS);
    assert_eq!(client["service"]["path"], "/convert");
    // Self-managed: no caBundle; the webhook writes it, so no upgrade or rollback takes it away.
    assert!(client.get("caBundle").is_none(), "{client:?}");

    let docs = render(&["--set", "certs.mode=certManager"])?;
    let scaler = one(&docs, "CustomResourceDefinition", "scalers.kubesteer.io");
    assert_eq!(
        scaler["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NS}/{FULLNAME}-webhook").as_str()
    );
    let ca = ca_file("crd-ca.crt")?;
    let docs = render(&[
        "--set",
        "webhook.url=https://127.0.0.1:9999",
        "--set-file",
        &format!("webhook.caBundle={}", ca.display()),
        "--set",
        "crds.keep=false",
    ])?;
    let scaler = one(&docs, "CustomResourceDefinition", "scalers.kubesteer.io");
    let client = &scaler["spec"]["conversion"]["webhook"]["clientConfig"];
    assert_eq!(client["url"], "https://127.0.0.1:9999/convert");
    assert!(client.get("service").is_none());
    assert_eq!(
        client["caBundle"],
        kubesteer_tests::base64(CA_PEM.as_bytes()).as_str()
    );
    assert!(
        scaler["metadata"].get("annotations").is_none(),
        "{scaler:?}"
    );

    let docs = render(&["--set", "crds.enabled=false"])?;
    assert!(all(&docs, "CustomResourceDefinition").is_empty());
    Ok(())
}

#[test]
fn url_mode_renders_only_the_configurations_for_a_local_webhook() -> Result<()> {
    let ca = ca_file("url-ca.crt")?;
    let set_file = format!("webhook.caBundle={}", ca.display());
    let docs = render(&[
        "--show-only",
        "templates/webhook-configurations.yaml",
        "--set",
        "webhook.url=https://127.0.0.1:9999",
        "--set-file",
        &set_file,
        "--set",
        "webhook.namespaceSelector.matchLabels.kubesteer\\.io/e2e=abc",
    ])?;
    assert_eq!(docs.len(), 2);
    let encoded = kubesteer_tests::base64(CA_PEM.as_bytes());
    let hooks = webhooks(&docs);
    assert_eq!(hooks.len(), kubesteer_tests::WEBHOOKS);
    for (kind, hook) in hooks {
        let plural = strings(&hook["rules"][0]["resources"]).remove(0);
        let path = if kind.starts_with("Mutating") {
            "mutate"
        } else {
            "validate"
        };
        let client = &hook["clientConfig"];
        assert_eq!(
            client["url"],
            format!("https://127.0.0.1:9999/{path}/{plural}").as_str()
        );
        assert!(client.get("service").is_none());
        assert_eq!(client["caBundle"], encoded.as_str());
        assert_eq!(
            hook["namespaceSelector"]["matchLabels"]["kubesteer.io/e2e"],
            "abc"
        );
        assert!(hook["namespaceSelector"].get("matchExpressions").is_none());
    }
    Ok(())
}

#[test]
fn the_schema_refuses_nonsense() -> Result<()> {
    for (set, complaint) in [
        ("certs.mode=vault", "/certs/mode"),
        ("webhook.failurePolicy=Sometimes", "/webhook/failurePolicy"),
        ("webhook.timeoutSeconds=0", "/webhook/timeoutSeconds"),
        ("webhook.timeoutSeconds=31", "/webhook/timeoutSeconds"),
        ("webhook.replicas=0", "/webhook/replicas"),
        ("controller.replicas=0", "/controller/replicas"),
        (
            "controller.leaderElection=yes",
            "/controller/leaderElection",
        ),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("image.repository=", "/image/repository"),
        // The per-component images are gone; setting one must not pass silently.
        ("image.webhook.repository=x", "webhook"),
        ("nodeSelector.zone[0]=a", "/nodeSelector/zone"),
        ("tolerations=oops", "/tolerations"),
        (
            "webhook.preStopSleepSeconds=-1",
            "/webhook/preStopSleepSeconds",
        ),
        (
            "webhook.drainTimeoutSeconds=0",
            "/webhook/drainTimeoutSeconds",
        ),
        ("tests.interval=soon", "/tests/interval"),
        ("tests.image.repository=curl", "image"),
        ("webhook.url=http://insecure", "/webhook/url"),
        ("webhok.replicas=3", "webhok"),
    ] {
        let err = render_error(&["--set", set])?;
        assert!(err.contains("schema"), "{set}: {err}");
        assert!(err.contains(complaint), "{set}: {err}");
    }
    Ok(())
}

fn template_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            template_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

#[test]
fn no_template_generates_certificates_at_render_time() -> Result<()> {
    let mut files = Vec::new();
    template_files(&chart().join("templates"), &mut files)?;
    assert!(files.len() > 5, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        for function in [
            "genCA",
            "genSelfSignedCert",
            "genSignedCert",
            "genPrivateKey",
            "buildCustomCert",
        ] {
            assert!(
                !text.contains(function),
                "{} uses {function}",
                file.display()
            );
        }
    }
    Ok(())
}

fn test_pod(extra: &[&str]) -> Result<Value> {
    let mut args = vec!["--show-only", "templates/tests/test-webhook-readyz.yaml"];
    args.extend_from_slice(extra);
    let docs = render(&args)?;
    assert_eq!(docs.len(), 1);
    Ok(docs[0].clone())
}

/// The volume the test Pod reads `/ca/ca.crt` from.
fn test_ca_volume(pod: &Value) -> &Value {
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/ca");
    assert_eq!(c["volumeMounts"][0]["readOnly"], true);
    let name = &c["volumeMounts"][0]["name"];
    let volumes = pod["spec"]["volumes"].as_sequence().expect("volumes");
    let volume = volumes
        .iter()
        .find(|v| &v["name"] == name)
        .expect("the mounted volume");
    let source = volume
        .get("secret")
        .or_else(|| volume.get("configMap"))
        .expect("a Secret or ConfigMap volume");
    // Only the CA certificate: the self-managed Secret also holds the CA's private key.
    let items = source["items"].as_sequence().expect("items");
    assert_eq!(items.len(), 1, "{source:?}");
    assert_eq!(items[0]["key"], "ca.crt");
    assert_eq!(items[0]["path"], "ca.crt");
    volume
}

#[test]
fn helm_test_probes_the_webhook_readyz_with_the_project_image_and_its_ca() -> Result<()> {
    let pod = test_pod(&[])?;
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    assert_eq!(pod["spec"]["enableServiceLinks"], true);
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        c["image"],
        format!("ghcr.io/kubesteer/kubesteer:{}", workspace_version()?)
    );
    assert_eq!(strings(&c["command"]), ["kubesteer-certs"]);
    let args = strings(&c["args"]);
    assert_eq!(args[0], "probe", "{args:?}");
    for arg in [
        format!("--url=https://{FULLNAME}-webhook.{NS}.svc:443/readyz"),
        // The Service's cluster IP as the kubelet expands it: the local cluster has no DNS.
        "--connect-to=$(KS_KUBESTEER_WEBHOOK_SERVICE_HOST)".to_string(),
        "--ca-file=/ca/ca.crt".to_string(),
        "--retries=30".to_string(),
        "--interval=2s".to_string(),
        "--timeout=5s".to_string(),
    ] {
        assert!(args.contains(&arg), "{arg} missing from {args:?}");
    }
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["runAsUser"].as_u64(), Some(65532));
    assert!(pod["spec"].get("nodeSelector").is_none());
    assert!(pod["spec"].get("tolerations").is_none());

    // selfManaged: the CA the webhook keeps in its Secret.
    let volume = test_ca_volume(&pod);
    assert_eq!(
        volume["secret"]["secretName"],
        format!("{FULLNAME}-webhook-tls").as_str()
    );

    // certManager: the ca.crt cert-manager writes beside the serving certificate.
    let pod = test_pod(&["--set", "certs.mode=certManager"])?;
    assert_eq!(
        test_ca_volume(&pod)["secret"]["secretName"],
        format!("{FULLNAME}-webhook-cert").as_str()
    );

    // provided without a caBundle: the ca.crt of the user's Secret, if it has one.
    let provided = [
        "--set",
        "certs.mode=provided",
        "--set",
        "certs.provided.secretName=my-tls",
    ];
    let pod = test_pod(&provided)?;
    assert_eq!(test_ca_volume(&pod)["secret"]["secretName"], "my-tls");
    assert!(render(&provided)?.iter().all(|d| d["kind"] != "ConfigMap"));

    // A rendered caBundle is what the apiserver trusts, so the test trusts it too.
    let ca = ca_file("test-pod-ca.crt")?;
    for (mode, key) in [
        ("provided", "certs.provided.caBundle"),
        ("provided", "webhook.caBundle"),
        ("certManager", "webhook.caBundle"),
    ] {
        let mode_arg = format!("certs.mode={mode}");
        let set_file = format!("{key}={}", ca.display());
        let extra = [
            "--set",
            mode_arg.as_str(),
            "--set",
            "certs.provided.secretName=my-tls",
            "--set-file",
            set_file.as_str(),
        ];
        let docs = render(&extra)?;
        let config_map = one(&docs, "ConfigMap", &format!("{FULLNAME}-test-ca"));
        assert_eq!(config_map["metadata"]["namespace"], NS);
        assert_eq!(config_map["data"]["ca.crt"], CA_PEM, "{mode} {key}");
        let pod = one(&docs, "Pod", &format!("{FULLNAME}-test-webhook-readyz"));
        assert_eq!(
            test_ca_volume(pod)["configMap"]["name"],
            format!("{FULLNAME}-test-ca").as_str(),
            "{mode} {key}"
        );
    }
    // selfManaged trusts its own Secret even with webhook.caBundle given (it patches the CA in).
    let set_file = format!("webhook.caBundle={}", ca.display());
    let docs = render(&["--set-file", &set_file])?;
    assert!(docs.iter().all(|d| d["kind"] != "ConfigMap"));
    let pod = one(&docs, "Pod", &format!("{FULLNAME}-test-webhook-readyz"));
    assert!(test_ca_volume(pod).get("secret").is_some());
    Ok(())
}

#[test]
fn one_image_runs_every_container() -> Result<()> {
    let docs = render(REAL_NODE)?;
    for (component, pod) in pods(&docs) {
        let c = &pod["containers"][0];
        assert_eq!(c["image"], "kubesteer:dev", "{component}");
        assert_eq!(c["imagePullPolicy"], "Never", "{component}");
        let binary = match component {
            "test" => "kubesteer-certs".to_string(),
            other => format!("kubesteer-{other}"),
        };
        assert_eq!(strings(&c["command"]), [binary], "{component}");
    }
    let docs = render(&["--set", "image.tag="])?;
    for (component, pod) in pods(&docs) {
        assert_eq!(
            pod["containers"][0]["image"],
            format!("ghcr.io/kubesteer/kubesteer:{}", workspace_version()?),
            "{component}: the tag defaults to the appVersion"
        );
    }
    Ok(())
}

#[test]
fn placement_applies_to_every_pod_and_components_add_to_it() -> Result<()> {
    let docs = render(REAL_NODE)?;
    let real_node = serde_yaml::from_str::<Value>(
        "{key: kubesteer.io/real-node, operator: Equal, value: 'true', effect: NoSchedule}",
    )?;
    for (component, pod) in pods(&docs) {
        assert_eq!(
            pod["nodeSelector"]["kubesteer.io/real-node"], "true",
            "{component}"
        );
        assert_eq!(
            pod["tolerations"].as_sequence().map(Vec::as_slice),
            Some(std::slice::from_ref(&real_node)),
            "{component}"
        );
    }

    // A component's nodeSelector key wins; its tolerations come after the top-level ones.
    let mut extra = REAL_NODE.to_vec();
    extra.extend_from_slice(&[
        "--set",
        "nodeSelector.zone=a",
        "--set",
        "webhook.nodeSelector.zone=b",
        "--set",
        "webhook.nodeSelector.disk=ssd",
        "--set",
        "webhook.tolerations[0].key=dedicated,webhook.tolerations[0].operator=Exists",
        "--set",
        "controller.nodeSelector.kubesteer\\.io/real-node=false",
    ]);
    let docs = render(&extra)?;
    let placed = pods(&docs);
    let webhook = placed[0].1;
    assert_eq!(
        webhook["nodeSelector"],
        serde_yaml::from_str::<Value>("{disk: ssd, kubesteer.io/real-node: 'true', zone: b}")?
    );
    let tolerations = webhook["tolerations"].as_sequence().expect("tolerations");
    assert_eq!(tolerations.len(), 2);
    assert_eq!(tolerations[0], real_node);
    assert_eq!(tolerations[1]["key"], "dedicated");
    let controller = placed[1].1;
    assert_eq!(
        controller["nodeSelector"],
        serde_yaml::from_str::<Value>("{kubesteer.io/real-node: 'false', zone: a}")?
    );
    assert_eq!(
        controller["tolerations"].as_sequence().map(Vec::len),
        Some(1)
    );
    // The test Pod has no component values: the top-level ones alone.
    let test = placed[2].1;
    assert_eq!(
        test["nodeSelector"],
        serde_yaml::from_str::<Value>("{kubesteer.io/real-node: 'true', zone: a}")?
    );
    assert_eq!(test["tolerations"].as_sequence().map(Vec::len), Some(1));

    // Nothing set, nothing rendered.
    let docs = render(&[])?;
    for (component, pod) in pods(&docs) {
        assert!(pod.get("nodeSelector").is_none(), "{component}");
        assert!(pod.get("tolerations").is_none(), "{component}");
    }
    Ok(())
}

#[test]
fn the_webhook_restarts_without_dropping_admissions() -> Result<()> {
    let docs = render(&[])?;
    let name = format!("{FULLNAME}-webhook");
    let deployment = one(&docs, "Deployment", &name);
    let strategy = &deployment["spec"]["strategy"];
    assert_eq!(strategy["type"], "RollingUpdate");
    assert_eq!(
        strategy["rollingUpdate"]["maxUnavailable"].as_u64(),
        Some(0)
    );
    assert_eq!(strategy["rollingUpdate"]["maxSurge"].as_u64(), Some(1));
    let pod = &deployment["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .expect("a native preStop sleep: the image has no shell");
    assert_eq!(pre_stop, 5);
    assert!(c["lifecycle"]["preStop"].get("exec").is_none());
    let ready = &c["readinessProbe"];
    assert_eq!(ready["periodSeconds"].as_u64(), Some(2));
    assert_eq!(ready["failureThreshold"].as_u64(), Some(1));
    assert_eq!(
        env_value(c, "KUBESTEER_SHUTDOWN_DELAY").as_deref(),
        Some("5s")
    );
    assert_eq!(
        env_value(c, "KUBESTEER_DRAIN_TIMEOUT").as_deref(),
        Some("10s")
    );
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    assert!(grace > pre_stop + 5 + 10, "{grace}");
    one(&docs, "PodDisruptionBudget", &name);

    let docs = render(&[
        "--set",
        "webhook.preStopSleepSeconds=0",
        "--set",
        "webhook.shutdownDelaySeconds=3",
        "--set",
        "webhook.drainTimeoutSeconds=4",
        "--set",
        "webhook.terminationGracePeriodSeconds=8",
    ])?;
    let pod = &one(&docs, "Deployment", &name)["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert!(c.get("lifecycle").is_none(), "{c:?}");
    assert_eq!(
        env_value(c, "KUBESTEER_SHUTDOWN_DELAY").as_deref(),
        Some("3s")
    );
    assert_eq!(pod["terminationGracePeriodSeconds"].as_u64(), Some(8));

    let err = render_error(&["--set", "webhook.terminationGracePeriodSeconds=20"])?;
    assert!(
        err.contains("terminationGracePeriodSeconds (20) must exceed"),
        "{err}"
    );
    Ok(())
}

/// Removes a release of the chart when a test ends, however it ends.
struct Release<'a> {
    name: String,
    ns: &'a Namespace,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let _ = helm_run(&["uninstall", &self.name, "--namespace", self.ns.name()]);
    }
}

/// On the real apiserver: everything the chart renders is accepted, and a `helm upgrade` leaves the
/// caBundle that the self-managed webhook patched into the configurations alone.
#[test]
fn helm_upgrade_keeps_the_self_managed_ca_bundle() -> Result<()> {
    let ns = Namespace::new("chart-upgrade")?;
    let release = Release {
        name: ns.name().to_string(),
        ns: &ns,
    };
    let chart = chart();
    let install = |verb: &str, timeout: &str| -> Result<()> {
        let run = helm_run(&[
            verb,
            &release.name,
            chart.to_str().unwrap(),
            "--namespace",
            ns.name(),
            SHARED_CRDS[0],
            SHARED_CRDS[1],
            // The release must admit nothing: no webhook runs behind it in this cluster.
            "--set",
            "webhook.namespaceSelector.matchLabels.kubesteer\\.io/chart-upgrade-test=none",
            "--set",
            &format!("webhook.timeoutSeconds={timeout}"),
        ])?;
        if !run.ok {
            bail!("helm {verb}: {}", run.stderr);
        }
        Ok(())
    };
    install("install", "5")?;
    let config = format!("{}-kubesteer", release.name);
    let injected = kubesteer_tests::base64(CA_PEM.as_bytes());
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let patch: Vec<String> = (0..kubesteer_api::kind::ALL.len())
            .map(|i| {
                format!(
                    r#"{{"op":"add","path":"/webhooks/{i}/clientConfig/caBundle","value":"{injected}"}}"#
                )
            })
            .collect();
        kubectl_ok(
            &[
                "patch",
                kind,
                &config,
                "--type=json",
                "-p",
                &format!("[{}]", patch.join(",")),
            ],
            None,
        )?;
    }

    install("upgrade", "7")?;
    let lines = webhook_fields(&config, "{.timeoutSeconds} {.clientConfig.caBundle}")?;
    assert_eq!(
        lines,
        vec![format!("7 {injected}"); kubesteer_tests::WEBHOOKS],
        "both configurations"
    );
    drop(release);
    Ok(())
}

#[test]
fn watch_namespace_confines_the_controller_to_a_role_there() -> Result<()> {
    let cluster_wide = render(&[])?;
    assert!(env(
        container(&cluster_wide, &format!("{FULLNAME}-controller")),
        "WATCH_NAMESPACE"
    )
    .is_none());
    let cluster_rules = grants(one(
        &cluster_wide,
        "ClusterRole",
        &format!("{FULLNAME}-controller"),
    ));

    for watched in ["apps", NS] {
        let docs = render(&["--set", &format!("controller.watchNamespace={watched}")])?;
        assert_eq!(
            env_value(
                container(&docs, &format!("{FULLNAME}-controller")),
                "WATCH_NAMESPACE"
            )
            .as_deref(),
            Some(watched)
        );
        let name = format!("{FULLNAME}-controller");
        assert!(
            docs.iter().all(
                |d| !(d["kind"] == "ClusterRole" || d["kind"] == "ClusterRoleBinding")
                    || d["metadata"]["name"] != name.as_str()
            ),
            "no cluster-wide controller rights with watchNamespace={watched}"
        );
        let role = docs
            .iter()
            .find(|d| {
                d["kind"] == "Role"
                    && d["metadata"]["name"] == name.as_str()
                    && d["metadata"]["namespace"] == watched
            })
            .context("the controller's Role in the watched namespace")?;
        // The same rules, namespaced, but for the cluster-wide storage version migration,
        // which a controller of one namespace does not run, and the namespaces' labels, which
        // only a selector over namespaces reads.
        let namespaced: BTreeSet<String> = cluster_rules
            .iter()
            .filter(|r| !r.starts_with("apiextensions.k8s.io ") && !r.starts_with(" namespaces "))
            .cloned()
            .collect();
        assert_eq!(grants(role), namespaced, "the same rules, namespaced");
        let binding = docs
            .iter()
            .find(|d| {
                d["kind"] == "RoleBinding"
                    && d["metadata"]["name"] == name.as_str()
                    && d["metadata"]["namespace"] == watched
            })
            .context("the controller's RoleBinding in the watched namespace")?;
        assert_eq!(binding["roleRef"]["kind"], "Role");
        assert_eq!(binding["roleRef"]["name"], name.as_str());
        assert_eq!(binding["subjects"][0]["name"], name.as_str());
        assert_eq!(binding["subjects"][0]["namespace"], NS);
        // The Lease Role stays in the release namespace, under a name of its own.
        let lease = one(&docs, "Role", &format!("{FULLNAME}-controller-lease"));
        assert_eq!(lease["metadata"]["namespace"], NS);
        // The webhook judges Scalers across the cluster whatever the controller watches.
        one(&docs, "ClusterRole", &format!("{FULLNAME}-webhook"));
    }
    assert!(
        render_error(&["--set", "controller.watchNamespace=Not_A_Namespace"])?
            .contains("watchNamespace")
    );
    Ok(())
}

#[test]
fn metrics_auth_is_on_by_default_with_its_reviews_and_a_reader_role() -> Result<()> {
    let controller = format!("{FULLNAME}-controller");
    let auth = format!("{FULLNAME}-controller-metrics-auth");
    let reader = format!("{FULLNAME}-metrics-reader");
    for (extra, on) in [
        (&[][..], true),
        (&["--set", "controller.metrics.auth=true"][..], true),
        (&["--set", "controller.metrics.auth=false"][..], false),
    ] {
        let docs = render(extra)?;
        let c = container(&docs, &controller);
        assert_eq!(
            env_value(c, "KUBESTEER_METRICS_AUTH").as_deref(),
            Some(if on { "true" } else { "false" }),
            "{extra:?}"
        );
        assert_eq!(c["ports"][0]["containerPort"].as_u64(), Some(8080));
        for probe in ["livenessProbe", "readinessProbe"] {
            assert_eq!(
                c[probe]["httpGet"]["scheme"],
                if on { "HTTPS" } else { "HTTP" },
                "{extra:?} {probe}"
            );
        }
        // Scrapers are bound to the reader role either way; it grants nothing else.
        let role = one(&docs, "ClusterRole", &reader);
        assert_eq!(
            role["rules"],
            serde_yaml::from_str::<Value>("[{nonResourceURLs: [/metrics], verbs: [get]}]")?
        );
        let reviews = docs
            .iter()
            .filter(|d| d["metadata"]["name"] == auth.as_str())
            .collect::<Vec<_>>();
        if !on {
            assert!(reviews.is_empty(), "{extra:?}");
            continue;
        }
        let mut expected: BTreeSet<String> = BTreeSet::new();
        expected.extend(expand(
            &["authentication.k8s.io"],
            &["tokenreviews"],
            &["create"],
            None,
        ));
        expected.extend(expand(
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
            &["create"],
            None,
        ));
        assert_eq!(grants(one(&docs, "ClusterRole", &auth)), expected);
        let binding = one(&docs, "ClusterRoleBinding", &auth);
        assert_eq!(binding["roleRef"]["name"], auth.as_str());
        assert_eq!(binding["subjects"][0]["name"], controller.as_str());
        assert_eq!(binding["subjects"][0]["namespace"], NS);
    }
    // The reviews are cluster-scoped, so a watched namespace keeps this ClusterRole.
    let docs = render(&["--set", "controller.watchNamespace=apps"])?;
    one(&docs, "ClusterRoleBinding", &auth);
    assert!(render_error(&["--set", "controller.metrics.auth=yes"])?.contains("auth"));
    assert!(render_error(&["--set", "controller.metrics.secure=true"])?.contains("secure"));
    Ok(())
}

#[test]
fn network_policies_are_opt_in_and_open_only_the_webhook_and_scraped_metrics() -> Result<()> {
    assert!(all(&render(&[])?, "NetworkPolicy").is_empty());

    let docs = render(&["--set", "networkPolicy.enabled=true"])?;
    assert_eq!(all(&docs, "NetworkPolicy").len(), 2);
    for component in ["webhook", "controller"] {
        let policy = one(&docs, "NetworkPolicy", &format!("{FULLNAME}-{component}"));
        assert_eq!(policy["metadata"]["namespace"], NS);
        let selector = &policy["spec"]["podSelector"]["matchLabels"];
        let deployment = one(&docs, "Deployment", &format!("{FULLNAME}-{component}"));
        assert_eq!(
            selector, &deployment["spec"]["selector"]["matchLabels"],
            "{component}: selects exactly its Deployment's pods"
        );
        assert_eq!(strings(&policy["spec"]["policyTypes"]), ["Ingress"]);
        let rules = policy["spec"]["ingress"].as_sequence().expect("ingress");
        assert_eq!(rules.len(), 1, "{component}: one ingress rule");
        let ports = rules[0]["ports"].as_sequence().expect("ports");
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0]["protocol"], "TCP");
        let container = container(&docs, &format!("{FULLNAME}-{component}"));
        let port = &container["ports"][0]["containerPort"];
        assert_eq!(&ports[0]["port"], port, "{component}: its container port");
    }
    // The apiserver's source address is unknown: the webhook port is open to every source.
    let webhook = one(&docs, "NetworkPolicy", &format!("{FULLNAME}-webhook"));
    assert!(webhook["spec"]["ingress"][0]["from"].is_null());
    assert_eq!(webhook["spec"]["ingress"][0]["ports"][0]["port"], 9443);
    // Metrics only from the selected namespaces, by default `monitoring`.
    let controller = one(&docs, "NetworkPolicy", &format!("{FULLNAME}-controller"));
    let from = controller["spec"]["ingress"][0]["from"]
        .as_sequence()
        .expect("from");
    assert_eq!(from.len(), 1);
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    assert!(from[0]["podSelector"].is_null());
    assert_eq!(controller["spec"]["ingress"][0]["ports"][0]["port"], 8080);

    let docs = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.metricsNamespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=null",
        "--set",
        "networkPolicy.metricsNamespaceSelector.matchLabels.scrape=yes",
    ])?;
    let controller = one(&docs, "NetworkPolicy", &format!("{FULLNAME}-controller"));
    let selector = &controller["spec"]["ingress"][0]["from"][0]["namespaceSelector"];
    assert_eq!(selector["matchLabels"]["scrape"], "yes");
    assert!(selector["matchLabels"]["kubernetes.io/metadata.name"].is_null());
    assert!(render_error(&["--set", "networkPolicy.open=true"])?.contains("open"));
    Ok(())
}

#[test]
fn allowed_images_reach_the_webhook_and_none_means_any() -> Result<()> {
    let webhook = format!("{FULLNAME}-webhook");
    let docs = render(&[])?;
    assert_eq!(
        env(container(&docs, &webhook), "KUBESTEER_ALLOWED_IMAGES"),
        None
    );
    let docs = render(&[
        "--set-json",
        r#"webhook.allowedImages=["registry.example.com/","hashicorp/http-echo:"]"#,
    ])?;
    assert_eq!(
        env_value(container(&docs, &webhook), "KUBESTEER_ALLOWED_IMAGES").as_deref(),
        Some("registry.example.com/,hashicorp/http-echo:")
    );
    // The webhook's two Ingress switches: off unless their value says so.
    for (value, var) in [
        ("webhook.allowHostSharing", "KUBESTEER_ALLOW_HOST_SHARING"),
        (
            "webhook.allowImplementationSpecificPaths",
            "KUBESTEER_ALLOW_IMPLEMENTATION_SPECIFIC_PATHS",
        ),
    ] {
        assert_eq!(
            env(container(&render(&[])?, &webhook), var),
            None,
            "{value}"
        );
        let docs = render(&["--set", &format!("{value}=true")])?;
        assert_eq!(
            env_value(container(&docs, &webhook), var).as_deref(),
            Some("true"),
            "{value}"
        );
    }
    // Scalers across namespaces: allowed unless the value says no.
    let own_only = "KUBESTEER_SCALERS_OWN_NAMESPACE_ONLY";
    assert_eq!(env(container(&render(&[])?, &webhook), own_only), None);
    let docs = render(&["--set", "webhook.scalersAcrossNamespaces=false"])?;
    assert_eq!(
        env_value(container(&docs, &webhook), own_only).as_deref(),
        Some("true")
    );
    // The bound on SubjectAccessReviews: 50 per second, bursts of 100, unless set; never 0.
    let sar = |docs: &[Value]| {
        [
            "KUBESTEER_SUBJECT_ACCESS_REVIEW_QPS",
            "KUBESTEER_SUBJECT_ACCESS_REVIEW_BURST",
        ]
        .map(|var| env_value(container(docs, &webhook), var))
    };
    assert_eq!(
        sar(&render(&[])?),
        [Some("50".to_string()), Some("100".to_string())]
    );
    let docs = render(&[
        "--set",
        "webhook.subjectAccessReviews.qps=5",
        "--set",
        "webhook.subjectAccessReviews.burst=7",
    ])?;
    assert_eq!(sar(&docs), [Some("5".to_string()), Some("7".to_string())]);
    // The memory budget of request bodies in flight: 16Mi unless set.
    assert_eq!(
        env_value(
            container(&render(&[])?, &webhook),
            "KUBESTEER_REQUEST_BODY_BUDGET"
        )
        .as_deref(),
        Some("16Mi")
    );
    let docs = render(&["--set", "webhook.requestBodyBudget=32Mi"])?;
    assert_eq!(
        env_value(container(&docs, &webhook), "KUBESTEER_REQUEST_BODY_BUDGET").as_deref(),
        Some("32Mi")
    );
    // A bound of 0 would deny every review.
    let refused = render_error(&["--set", "webhook.subjectAccessReviews.qps=0"])?;
    assert!(refused.contains("qps"), "{refused}");
    Ok(())
}

#[test]
fn extra_scale_targets_grant_the_controller_their_scale_and_nothing_else() -> Result<()> {
    let base = grants(one(
        &render(&[])?,
        "ClusterRole",
        &format!("{FULLNAME}-controller"),
    ));
    let docs = render(&[
        "--set",
        "controller.extraScaleTargets[0].group=example.com",
        "--set",
        "controller.extraScaleTargets[0].resource=widgets",
    ])?;
    let with = grants(one(&docs, "ClusterRole", &format!("{FULLNAME}-controller")));
    let added: BTreeSet<String> = with.difference(&base).cloned().collect();
    // The objects watched when a selector names the kind; their /scale written.
    let mut want: BTreeSet<String> = expand(
        &["example.com"],
        &["widgets"],
        &["get", "list", "watch", "patch"],
        None,
    )
    .into_iter()
    .collect();
    want.extend(expand(
        &["example.com"],
        &["widgets/scale"],
        &["get", "patch"],
        None,
    ));
    assert_eq!(added, want);
    assert!(base.is_subset(&with));
    Ok(())
}

use super::monitoring::MONITORING;

fn chart_file(name: &str) -> Result<String> {
    let path = chart().join("files").join(name);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// Whether `selector` (matchLabels) selects an object with `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let want = selector["matchLabels"].as_mapping().expect("matchLabels");
    !want.is_empty() && want.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn monitoring_is_off_by_default() -> Result<()> {
    let docs = render(&[])?;
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(all(&docs, kind).is_empty(), "{kind} rendered by default");
    }
    for name in [
        format!("{FULLNAME}-controller-metrics"),
        format!("{FULLNAME}-dashboard"),
        format!("{FULLNAME}-metrics-scraper"),
        format!("{FULLNAME}-metrics-scraper-token"),
    ] {
        assert!(
            !docs.iter().any(|d| d["metadata"]["name"] == name.as_str()),
            "{name} rendered by default"
        );
    }
    Ok(())
}

#[test]
fn the_service_monitor_scrapes_every_controller_replica_with_the_metrics_reader_token() -> Result<()>
{
    let docs = render(&[
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.labels.release=prom",
    ])?;
    let monitor = one(&docs, "ServiceMonitor", &format!("{FULLNAME}-controller"));
    assert_eq!(monitor["metadata"]["labels"]["release"], "prom");
    assert_eq!(
        strings(&monitor["spec"]["namespaceSelector"]["matchNames"]),
        [NS]
    );
    // It selects the metrics Service, and that Service every controller pod's metrics port.
    let service = one(&docs, "Service", &format!("{FULLNAME}-controller-metrics"));
    assert!(selects(
        &monitor["spec"]["selector"],
        &service["metadata"]["labels"]
    ));
    let deployment = one(&docs, "Deployment", &format!("{FULLNAME}-controller"));
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let service_selector = service["spec"]["selector"].as_mapping().expect("selector");
    assert!(service_selector
        .iter()
        .all(|(k, v)| pod_labels.get(k) == Some(v)));
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
    let port = &service["spec"]["ports"][0];
    let ports = container(&docs, &format!("{FULLNAME}-controller"))["ports"]
        .as_sequence()
        .expect("ports");
    assert!(ports.iter().any(|p| p["name"] == port["targetPort"]));
    let endpoints = monitor["spec"]["endpoints"]
        .as_sequence()
        .expect("endpoints");
    assert_eq!(endpoints.len(), 1);
    let endpoint = &endpoints[0];
    assert_eq!(endpoint["port"], port["name"]);
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["honorLabels"], true);
    // HTTPS with the token of the chart's scraper, which may get /metrics and nothing else.
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);
    assert_eq!(endpoint["authorization"]["type"], "Bearer");
    let token = format!("{FULLNAME}-metrics-scraper-token");
    assert_eq!(
        endpoint["authorization"]["credentials"]["name"],
        token.as_str()
    );
    assert_eq!(endpoint["authorization"]["credentials"]["key"], "token");
    let secret = one(&docs, "Secret", &token);
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    let scraper = format!("{FULLNAME}-metrics-scraper");
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        scraper.as_str()
    );
    one(&docs, "ServiceAccount", &scraper);
    let binding = one(&docs, "ClusterRoleBinding", &scraper);
    let reader = format!("{FULLNAME}-metrics-reader");
    assert_eq!(binding["roleRef"]["name"], reader.as_str());
    assert_eq!(binding["subjects"][0]["name"], scraper.as_str());
    assert_eq!(binding["subjects"][0]["namespace"], NS);
    let role = one(&docs, "ClusterRole", &reader);
    assert_eq!(strings(&role["rules"][0]["nonResourceURLs"]), ["/metrics"]);
    assert_eq!(strings(&role["rules"][0]["verbs"]), ["get"]);
    assert_eq!(role["rules"].as_sequence().map(Vec::len), Some(1));

    // The webhook's: its Service's port, its certificate checked against the release's CA.
    let monitor = one(&docs, "ServiceMonitor", &format!("{FULLNAME}-webhook"));
    let service = one(&docs, "Service", &format!("{FULLNAME}-webhook"));
    assert!(selects(
        &monitor["spec"]["selector"],
        &service["metadata"]["labels"]
    ));
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], service["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["tlsConfig"]["serverName"],
        format!("{FULLNAME}-webhook.{NS}.svc").as_str()
    );
    let ca = &endpoint["tlsConfig"]["ca"]["secret"];
    assert_eq!(ca["name"], format!("{FULLNAME}-webhook-tls").as_str());
    assert_eq!(ca["key"], "ca.crt");
    assert!(endpoint.get("authorization").is_none());

    // A token Secret of one's own: no scraper identity of the chart's.
    let docs = render(&[
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.tokenSecret.name=prometheus-token",
    ])?;
    let monitor = one(&docs, "ServiceMonitor", &format!("{FULLNAME}-controller"));
    assert_eq!(
        monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["name"],
        "prometheus-token"
    );
    assert!(all(&docs, "Secret")
        .iter()
        .all(|s| s["type"] != "kubernetes.io/service-account-token"));
    assert!(!docs
        .iter()
        .any(|d| d["metadata"]["name"] == scraper.as_str()));

    // Metrics without auth: plain HTTP, no token at all.
    let docs = render(&[
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "controller.metrics.auth=false",
    ])?;
    let monitor = one(&docs, "ServiceMonitor", &format!("{FULLNAME}-controller"));
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "http");
    assert!(endpoint.get("authorization").is_none());
    assert!(!docs
        .iter()
        .any(|d| d["metadata"]["name"] == scraper.as_str()));

    // cert-manager's Secret, or the provided CA's ConfigMap.
    let ca = |extra: &[&str]| -> Result<Value> {
        let mut args = vec!["--set", "monitoring.serviceMonitor.enabled=true"];
        args.extend_from_slice(extra);
        let docs = render(&args)?;
        let monitor = one(&docs, "ServiceMonitor", &format!("{FULLNAME}-webhook"));
        Ok(monitor["spec"]["endpoints"][0]["tlsConfig"]["ca"].clone())
    };
    let cm = ca(&["--set", "certs.mode=certManager"])?;
    assert_eq!(
        cm["secret"]["name"],
        format!("{FULLNAME}-webhook-cert").as_str()
    );
    let provided = ca(&[
        "--set",
        "certs.mode=provided",
        "--set",
        "certs.provided.secretName=mine",
        "--set",
        &format!("certs.provided.caBundle={CA_PEM}"),
    ])?;
    let configmap = format!("{FULLNAME}-test-ca");
    assert_eq!(provided["configMap"]["name"], configmap.as_str());
    assert_eq!(provided["configMap"]["key"], "ca.crt");
    Ok(())
}

#[test]
fn the_prometheus_rule_is_the_alerts_file_promtool_tests() -> Result<()> {
    let docs = render(&[
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.prometheusRule.labels.release=prom",
    ])?;
    let rule = one(&docs, "PrometheusRule", FULLNAME);
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    let file: Value = serde_yaml::from_str(&chart_file("alerts.yaml")?)?;
    assert_eq!(rule["spec"], file);
    let alerts: Vec<String> = file["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules"))
        .map(|r| str_of(&r["alert"]).to_string())
        .collect();
    for alert in [
        "KubesteerScalerTransitionOverdue",
        "KubesteerScalerTransitionLate",
        "KubesteerScalerTargetFailing",
        "KubesteerScalerForbidden",
        "KubesteerNoLeader",
        "KubesteerWebhookDenyingUnusually",
        "KubesteerWebhookErrors",
        "KubesteerWebhookUnreachable",
        "KubesteerWebhookCertificateExpiring",
    ] {
        assert!(alerts.iter().any(|a| a == alert), "{alert} in {alerts:?}");
    }
    Ok(())
}

#[test]
fn the_grafana_dashboard_is_a_labelled_config_map_of_the_dashboard_file() -> Result<()> {
    let docs = render(MONITORING)?;
    let map = one(&docs, "ConfigMap", &format!("{FULLNAME}-dashboard"));
    assert_eq!(map["metadata"]["namespace"], NS);
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    let rendered: serde_json::Value = serde_json::from_str(str_of(&map["data"]["kubesteer.json"]))?;
    let file: serde_json::Value = serde_json::from_str(&chart_file("dashboard.json")?)?;
    assert_eq!(rendered, file);
    assert_eq!(file["uid"], "kubesteer");
    // Another sidecar label instead (values merge: the default one is dropped with null), a
    // folder, the sidecar's namespace.
    let docs = render(&[
        "--set",
        "monitoring.grafanaDashboard.enabled=true",
        "--set-json",
        r#"monitoring.grafanaDashboard.labels={"dashboards":"kubesteer","grafana_dashboard":null}"#,
        "--set",
        "monitoring.grafanaDashboard.annotations.grafana_folder=Platform",
        "--set",
        "monitoring.grafanaDashboard.namespace=monitoring",
    ])?;
    let map = one(&docs, "ConfigMap", &format!("{FULLNAME}-dashboard"));
    assert_eq!(map["metadata"]["namespace"], "monitoring");
    assert_eq!(map["metadata"]["labels"]["dashboards"], "kubesteer");
    assert!(map["metadata"]["labels"].get("grafana_dashboard").is_none());
    assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "Platform");
    // Nonsense is refused by the schema.
    let refused = render_error(&["--set", "monitoring.serviceMonitor.interval=often"])?;
    assert!(refused.contains("interval"), "{refused}");
    Ok(())
}
