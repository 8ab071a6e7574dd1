//! Memcached: a Deployment of memcached pods behind a headless Service.
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, ContainerPort, Service, ServiceSpec};
use kube::{Resource, ResourceExt};
use kubesteer_api::{Memcached, MemcachedStatus};

use crate::children::{self, child_meta, ListedPod};
use crate::reconcilers::{previous_conditions, time, Observed, Owner, Rollout};
use crate::Result;

pub const KIND: &str = "Memcached";
/// The `app.kubernetes.io/name` of everything a Memcached owns.
pub const APP: &str = "memcached";
/// memcached's own uid in the official image, so files it writes stay its own.
const MEMCACHED_UID: i64 = 11211;
const PORT_NAME: &str = "memcached";
/// How long a status write that only reports progress may wait for more of it.
const STATUS_GRACE: Duration = Duration::from_secs(30);
/// How long new names in `status.nodes` alone may wait for a change `kubectl get` shows while
/// the Memcached is not Ready (a Ready one's every change is written at once): the names of
/// pods created and not ready yet, or of an unready pod replaced.
const POD_NAMES_GRACE: Duration = Duration::from_secs(300);

impl Owner for Memcached {
    const KIND: &'static str = KIND;
    const APP: &'static str = APP;
    const STATUS_GRACE: Duration = STATUS_GRACE;
    const POD_NAMES_GRACE: Duration = POD_NAMES_GRACE;
    type Prepared = ();

    fn deployment(&self, _: &()) -> Result<Deployment> {
        deployment(self)
    }

    fn service(&self) -> Result<Service> {
        service(self)
    }

    fn status_from(&self, children: &Observed<'_>, now: DateTime<Utc>) -> MemcachedStatus {
        status(self, children.deployment, &children.pods, now)
    }

    fn only_pod_names_differ(old: &MemcachedStatus, new: &MemcachedStatus) -> bool {
        let unnamed = |s: &MemcachedStatus| MemcachedStatus {
            nodes: Vec::new(),
            ..s.clone()
        };
        old.nodes != new.nodes && unnamed(old) == unnamed(new)
    }
}

/// The Deployment a Memcached wants.
pub fn deployment(mc: &Memcached) -> Result<Deployment> {
    let name = mc.name_any();
    let spec = &mc.spec;
    let port = spec.port();
    let probe = children::tcp_probe(PORT_NAME);
    let container = Container {
        name: "memcached".into(),
        image: Some(spec.image().to_string()),
        args: Some(vec![
            "-m".into(),
            spec.memory_mb().to_string(),
            "-p".into(),
            port.to_string(),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.into()),
            container_port: port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        resources: Some(spec.resources()),
        liveness_probe: Some(probe.clone()),
        readiness_probe: Some(probe),
        security_context: Some(children::restricted_security_context(MEMCACHED_UID)),
        ..Container::default()
    };
    Ok(children::deployment(
        child_meta(KIND, mc, name.clone(), children::labels(APP, &name))?,
        APP,
        spec.size(),
        container,
    ))
}

/// The headless Service a Memcached wants: clients need every pod's endpoint.
pub fn service(mc: &Memcached) -> Result<Service> {
    let headless = ServiceSpec {
        cluster_ip: Some("None".into()),
        ..ServiceSpec::default()
    };
    children::service(KIND, mc, APP, mc.spec.port(), PORT_NAME, headless)
}

/// The status a Memcached reports, from its Deployment and its live pods.
pub fn status(
    mc: &Memcached,
    deployment: &Deployment,
    pods: &[ListedPod],
    now: chrono::DateTime<chrono::Utc>,
) -> MemcachedStatus {
    let now = time(now);
    let generation = mc.meta().generation;
    let previous = previous_conditions(mc);
    let size = mc.spec.size();
    let rollout = Rollout::of(deployment, size).with_pods(deployment, pods);
    let ready = rollout.ready;

    let conditions = rollout.conditions(deployment, generation, now, previous);

    let mut nodes: Vec<String> = pods.iter().map(|p| p.name.clone()).collect();
    nodes.sort();
    MemcachedStatus {
        nodes,
        ready_replicas: Some(ready),
        observed_generation: generation,
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::Caches;
    use crate::fixtures::{self, Call};
    use crate::reconcilers::{name_conflict_conditions, reconcile, NAME_CONFLICT_REQUEUE};
    use k8s_openapi::api::apps::v1::Deployment;
    use kubesteer_api::keys::annotation;
    use kubesteer_runtime::queue::Action;
    use serde_json::json;
    use std::sync::Arc;

    fn memcached(spec: serde_json::Value) -> Memcached {
        serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1alpha1", "kind": "Memcached",
            "metadata": {"name": "cache", "namespace": "team", "uid": "mc-uid", "generation": 2},
            "spec": spec,
        }))
        .unwrap()
    }

    fn deployment_with(status: serde_json::Value) -> serde_json::Value {
        let mut d =
            serde_json::to_value(deployment(&memcached(json!({"size": 2}))).unwrap()).unwrap();
        d["metadata"]["generation"] = json!(1);
        d["status"] = status;
        d
    }

    #[test]
    fn the_deployment_is_the_seeds_with_a_restricted_context() {
        let d = serde_json::to_value(
            deployment(&memcached(
                json!({"size": 3, "port": 11311, "memoryMB": 128}),
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(d["apiVersion"], "apps/v1");
        assert_eq!(d["spec"]["replicas"], 3);
        assert_eq!(
            d["spec"]["selector"]["matchLabels"],
            json!({"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": "cache"})
        );
        assert_eq!(
            d["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "kubesteer"
        );
        let owner = &d["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "Memcached");
        assert_eq!(owner["controller"], true);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], kubesteer_api::memcached::DEFAULT_IMAGE);
        assert_eq!(c["args"], json!(["-m", "128", "-p", "11311"]));
        assert_eq!(c["ports"][0]["containerPort"], 11311);
        assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], "memcached");
        assert_eq!(c["livenessProbe"]["tcpSocket"]["port"], "memcached");
        assert_eq!(c["resources"]["requests"]["cpu"], "100m");
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(sc["runAsUser"], 11211);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    }

    #[test]
    fn the_service_is_headless_on_the_port() {
        let s = serde_json::to_value(service(&memcached(json!({}))).unwrap()).unwrap();
        assert_eq!(s["spec"]["clusterIP"], "None");
        assert_eq!(s["spec"]["ports"][0]["port"], 11211);
        assert_eq!(s["spec"]["selector"]["app.kubernetes.io/instance"], "cache");
    }

    const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/team/deployments/cache?&force=true&fieldManager=kubesteer-controller";
    const STATUS: &str = "/apis/kubesteer.io/v1alpha1/namespaces/team/memcacheds/cache/status?&fieldManager=kubesteer-controller";
    // A child missing from the cache is created (a POST), which never writes an existing object.
    const CREATE_DEPLOYMENT: &str =
        "/apis/apps/v1/namespaces/team/deployments?&fieldManager=kubesteer-controller";
    const CREATE_SERVICE: &str =
        "/api/v1/namespaces/team/services?&fieldManager=kubesteer-controller";
    const GET_DEPLOYMENT: &str = "/apis/apps/v1/namespaces/team/deployments/cache";
    const GET_SERVICE: &str = "/api/v1/namespaces/team/services/cache";

    /// The Deployment as the apiserver keeps it after the controller applied it, with `status`.
    fn applied_deployment(mc: &Memcached, status: serde_json::Value) -> serde_json::Value {
        let mut d =
            serde_json::to_value(children::stamped(&deployment(mc).unwrap()).unwrap()).unwrap();
        d["metadata"]["generation"] = json!(1);
        d["metadata"]["uid"] = json!("d-uid");
        d["spec"]["progressDeadlineSeconds"] = json!(600);
        d["status"] = status;
        d
    }

    fn applied_service(mc: &Memcached) -> serde_json::Value {
        let mut s =
            serde_json::to_value(children::stamped(&service(mc).unwrap()).unwrap()).unwrap();
        s["spec"]["clusterIPs"] = json!(["None"]);
        s["spec"]["type"] = json!("ClusterIP");
        s
    }

    /// Caches holding the Deployment applied for `mc` with `deployment_status`, its Service,
    /// and the pods named `pods`, with its pod template checked, as after the controller
    /// applied it.
    fn world(mc: &Memcached, deployment_status: serde_json::Value, pods: &[&str]) -> Caches {
        let caches = world_with(applied_deployment(mc, deployment_status), mc, pods);
        checked(&caches, mc);
        caches
    }

    /// Notes the template of the Deployment applied for `mc` as checked.
    fn checked(caches: &Caches, mc: &Memcached) {
        let applied: Deployment =
            serde_json::from_value(applied_deployment(mc, json!({}))).unwrap();
        caches
            .of(APP)
            .notes
            .templates
            .assume_checked(&deployment(mc).unwrap(), &applied);
    }

    fn world_with(deployment: serde_json::Value, mc: &Memcached, pods: &[&str]) -> Caches {
        fixtures::caches(APP, |w| {
            fixtures::put(&mut w.deployments, deployment);
            fixtures::put(&mut w.services, applied_service(mc));
            for pod in pods {
                fixtures::put_pod(&mut w.pods, cached_pod(pod));
            }
        })
    }

    /// Pods named `names`, as the pods cache lists them when their status is not known.
    fn listed(names: &[&str]) -> Vec<ListedPod> {
        let pod = |n: &&str| ListedPod {
            name: n.to_string(),
            ready: false,
            created: None,
        };
        names.iter().map(pod).collect()
    }

    fn cached_pod(name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team",
            "labels": {"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": "cache"}}})
    }

    const READY: fn() -> serde_json::Value = || {
        json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
            "conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]})
    };

    #[tokio::test]
    async fn a_new_memcached_gets_its_deployment_and_service_applied_and_its_status_patched() {
        let mc = memcached(json!({"size": 2}));
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            // Children missing from the cache are created without a read first: a create never
            // writes a same-named object.
            Call::post(CREATE_DEPLOYMENT)
                .body(|b| {
                    assert_eq!(b["kind"], "Deployment");
                    assert_eq!(b["spec"]["replicas"], 2);
                    let fingerprint = &b["metadata"]["annotations"][annotation::APPLIED];
                    assert_eq!(fingerprint.as_str().map(str::len), Some(16), "{b}");
                })
                .created_as(deployment_with(json!({}))),
            Call::post(CREATE_SERVICE)
                .body(|b| {
                    assert_eq!(b["kind"], "Service");
                    assert_eq!(b["spec"]["clusterIP"], "None");
                })
                .created(),
            Call::event("team")
                .body(|b| {
                    assert_eq!(b["type"], "Normal");
                    assert_eq!(b["reason"], "Created");
                    assert_eq!(b["note"], "Created Deployment cache, Service cache");
                    assert_eq!(b["regarding"]["kind"], "Memcached");
                    assert_eq!(b["regarding"]["name"], "cache");
                })
                .respond_with_body(),
            // No status yet: the Deployment's watch event brings the reconcile that writes it.
        ]);
        let action = reconcile(Arc::new(mc), ctx.clone()).await.unwrap();
        assert_eq!(action, Action::await_change());
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn reconciles_before_the_watches_bring_their_writes_back_do_not_make_them_again() {
        let mut mc = memcached(json!({"size": 2}));
        mc.metadata.resource_version = Some("1".into());
        let mc = Arc::new(mc);
        let clock = fixtures::FixedClock::usual();
        let (ctx, verifier) = fixtures::context_on(clock.clone(), Caches::empty());
        let created: Deployment =
            serde_json::from_value(applied_deployment(&mc, json!({}))).unwrap();
        let first = status(
            &mc,
            &created,
            &[],
            ctx.clock.now() + chrono::TimeDelta::seconds(5),
        );
        let check_first = first.clone();
        let scenario = verifier.run(vec![
            Call::post(CREATE_DEPLOYMENT).created_as(applied_deployment(&mc, json!({}))),
            Call::post(CREATE_SERVICE).created(),
            Call::event("team").respond_with_body(),
            // The second reconcile: the children are the creates' answers, and the status is
            // written once.
            Call::patch(STATUS)
                .body(move |b| assert_eq!(b["status"], json!(check_first)))
                .respond_status_of(mc.as_ref()),
            // Someone else's write got to the cache first: the status is written again.
            Call::patch(STATUS).respond_status_of(mc.as_ref()),
            // Once the watches brought the children (and they went), they are created again.
            Call::post(CREATE_DEPLOYMENT).already_exists(),
            Call::post(CREATE_SERVICE).already_exists(),
            Call::get(GET_SERVICE).respond(applied_service(&mc)),
            Call::get(GET_DEPLOYMENT).respond(applied_deployment(&mc, json!({}))),
        ]);
        // The first reconcile creates both children; their watch events bring the next ones,
        // which find neither in the cache yet, nor the status write in the Memcached.
        for _ in 0..3 {
            let action = reconcile(mc.clone(), ctx.clone()).await.unwrap();
            assert_eq!(action, Action::await_change());
            // Seconds pass between them: the written conditions keep their transition times.
            *clock.0.lock().unwrap() += chrono::TimeDelta::seconds(5);
        }
        let notes = ctx.caches.of(APP).notes;
        assert_eq!(notes.unseen.len(), 2);
        assert_eq!(ctx.tracked().2, 1);

        // Someone else's write (a label, say) reaches the cache before the status write: the
        // cached status is the one to go by again, and the status is written again.
        let mut labelled = (*mc).clone();
        labelled.metadata.resource_version = Some("2".into());
        reconcile(Arc::new(labelled), ctx.clone()).await.unwrap();
        assert_eq!(ctx.tracked().2, 1);
        // The Memcached's watch brings the status write: the note goes, nothing is written.
        let mut settled = (*mc).clone();
        settled.metadata.resource_version = Some("3".into());
        settled.status = Some(first);
        let settled = Arc::new(settled);
        reconcile(settled.clone(), ctx.clone()).await.unwrap();
        assert_eq!(ctx.tracked().2, 0);

        notes.unseen.seen(&created);
        notes
            .unseen
            .seen(&serde_json::from_value::<Service>(applied_service(&mc)).unwrap());
        assert!(notes.unseen.is_empty());
        reconcile(settled, ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn the_first_status_is_written_at_once_without_waiting_for_the_grace() {
        let mc = memcached(json!({"size": 2}));
        let caches = world(&mc, json!({}), &["cache-a"]);
        let (ctx, verifier) = fixtures::context_cached(caches);
        let scenario = verifier.run(vec![Call::patch(STATUS)
            .body(|b| {
                assert_eq!(b["status"]["conditions"][0]["type"], "Ready");
                assert_eq!(b["status"]["conditions"][0]["status"], "False");
                assert_eq!(b["status"]["nodes"], json!(["cache-a"]));
            })
            .respond_status_of(&mc)]);
        assert_eq!(
            reconcile(Arc::new(mc), ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    /// A Memcached of 2 whose first status was written before its first pod came, reconciled
    /// with its Deployment at `deployment_status` and its pods `pods`: nothing is written until
    /// `grace` has passed since the first reconcile, and then the status with `ready` pods.
    async fn progress_is_held(
        deployment_status: serde_json::Value,
        pods: &[&str],
        ready: i32,
        grace: std::time::Duration,
    ) {
        let mut mc = memcached(json!({"size": 2}));
        let caches = world(&mc, deployment_status, pods);
        let clock = fixtures::FixedClock::usual();
        let d: Deployment = serde_json::from_value(applied_deployment(&mc, json!({}))).unwrap();
        mc.status = Some(status(&mc, &d, &[], fixtures::at("2025-03-03T11:59:00Z")));
        let (ctx, verifier) = fixtures::context_on(clock.clone(), caches);
        // Only the write after the grace: the earlier reconciles send nothing.
        let scenario = verifier.run(vec![Call::patch(STATUS)
            .body(move |b| {
                assert_eq!(b["status"]["readyReplicas"], ready);
                assert_eq!(b["status"]["observedGeneration"], 2);
                assert_eq!(b["status"]["conditions"][0]["type"], "Ready");
                assert_eq!(b["status"]["conditions"][0]["status"], "False");
            })
            .respond_status_of(&mc)]);
        let mc = Arc::new(mc);
        let five = std::time::Duration::from_secs(5);
        assert_eq!(
            reconcile(mc.clone(), ctx.clone()).await.unwrap(),
            Action::requeue(grace)
        );
        *clock.0.lock().unwrap() += chrono::TimeDelta::from_std(grace - five).unwrap();
        assert_eq!(
            reconcile(mc.clone(), ctx.clone()).await.unwrap(),
            Action::requeue(five),
            "the wait counts from the first time"
        );
        *clock.0.lock().unwrap() += chrono::TimeDelta::from_std(five).unwrap();
        assert_eq!(
            reconcile(mc, ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn pods_becoming_ready_are_written_at_most_every_grace() {
        let one_ready = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1});
        progress_is_held(one_ready, &["cache-a", "cache-b"], 1, STATUS_GRACE).await;
    }

    #[tokio::test]
    async fn new_names_of_pods_alone_wait_longer_for_a_change_kubectl_get_shows() {
        progress_is_held(json!({}), &["cache-a"], 0, POD_NAMES_GRACE).await;
    }

    #[test]
    fn only_new_names_of_pods_count_as_a_rename() {
        let mc = memcached(json!({"size": 2}));
        let d: Deployment = serde_json::from_value(applied_deployment(&mc, json!({}))).unwrap();
        let at = fixtures::at(fixtures::USUAL);
        let old = status(&mc, &d, &listed(&["cache-a"]), at);
        let renamed = status(&mc, &d, &listed(&["cache-b"]), at);
        assert!(Memcached::only_pod_names_differ(&old, &renamed));
        assert!(!Memcached::only_pod_names_differ(&old, &old));
        let mut counted = renamed.clone();
        counted.ready_replicas = Some(1);
        assert!(!Memcached::only_pod_names_differ(&old, &counted));
    }

    #[tokio::test]
    async fn once_ready_a_replaced_pod_is_written_at_once() {
        let mut mc = memcached(json!({"size": 2}));
        let ready: Deployment = serde_json::from_value(applied_deployment(&mc, READY())).unwrap();
        let two = &listed(&["cache-a", "cache-b"]);
        mc.status = Some(status(
            &mc,
            &ready,
            two,
            fixtures::at("2025-03-03T11:00:00Z"),
        ));
        let caches = world(&mc, READY(), &["cache-a", "cache-c"]);
        let (ctx, verifier) = fixtures::context_cached(caches);
        let scenario = verifier.run(vec![Call::patch(STATUS)
            .body(|b| assert_eq!(b["status"]["nodes"], json!(["cache-a", "cache-c"])))
            .respond_status_of(&mc)]);
        assert_eq!(
            reconcile(Arc::new(mc), ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn becoming_ready_or_losing_it_is_written_at_once() {
        let mc = memcached(json!({"size": 2}));
        let ready: Deployment = serde_json::from_value(applied_deployment(&mc, READY())).unwrap();
        let mut was_ready = mc.clone();
        was_ready.status = Some(status(
            &mc,
            &ready,
            &listed(&["cache-a", "cache-b"]),
            fixtures::at("2025-03-03T11:00:00Z"),
        ));
        for (mc, deployment, ready_now) in [
            (mc, READY(), "True"),
            (
                was_ready,
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}),
                "False",
            ),
        ] {
            let (ctx, verifier) =
                fixtures::context_cached(world(&mc, deployment, &["cache-a", "cache-b"]));
            let scenario = verifier.run(vec![Call::patch(STATUS)
                .body(move |b| assert_eq!(b["status"]["conditions"][0]["status"], ready_now))
                .respond_status_of(&mc)]);
            assert_eq!(
                reconcile(Arc::new(mc), ctx.clone()).await.unwrap(),
                Action::await_change()
            );
            scenario.finish(ctx).await;
        }
    }

    #[tokio::test]
    async fn cached_children_as_wanted_are_not_written_and_pods_come_from_the_cache_sorted() {
        let mc = memcached(json!({"size": 2}));
        let caches = world(&mc, READY(), &["cache-b", "cache-a"]);
        let (ctx, verifier) = fixtures::context_cached(caches.clone());
        let scenario = verifier.run(vec![Call::patch(STATUS)
            .body(|b| {
                assert_eq!(b["status"]["nodes"], json!(["cache-a", "cache-b"]));
                assert_eq!(b["status"]["readyReplicas"], 2);
                let conditions: Vec<(String, String)> = b["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        (
                            c["type"].as_str().unwrap().to_string(),
                            c["status"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect();
                assert_eq!(
                    conditions,
                    [
                        ("Ready", "True"),
                        ("Available", "True"),
                        ("Progressing", "False"),
                        ("Degraded", "False")
                    ]
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                );
            })
            .respond_status_of(&mc)]);
        reconcile(Arc::new(mc.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        // The same world again, with that status: not a single request.
        let mut settled = mc;
        let d: Deployment = serde_json::from_value(applied_deployment(&settled, READY())).unwrap();
        let (ctx, verifier) = fixtures::context_cached(caches);
        settled.status = Some(status(
            &settled,
            &d,
            &listed(&["cache-a", "cache-b"]),
            ctx.clock.now(),
        ));
        let scenario = verifier.run(vec![]);
        reconcile(Arc::new(settled), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    /// The apply of a size-2 Memcached's Deployment, answered as applied.
    fn applied_for_size_2(mc: &Memcached) -> Call {
        Call::patch(DEPLOYMENT)
            .body(|b| assert_eq!(b["spec"]["replicas"], 2))
            .respond(applied_deployment(mc, READY()))
    }

    #[tokio::test]
    async fn a_hand_scaled_or_outdated_cached_deployment_is_applied_again() {
        let mc = memcached(json!({"size": 2}));
        let mut scaled = applied_deployment(&mc, READY());
        scaled["spec"]["replicas"] = json!(5);
        // Applied for size 3 before the Memcached went to size 2: its fingerprint differs too.
        let outdated = applied_deployment(&memcached(json!({"size": 3})), READY());
        for cached in [scaled, outdated] {
            let (ctx, verifier) =
                fixtures::context_cached(world_with(cached, &mc, &["cache-a", "cache-b"]));
            let scenario = verifier.run(vec![
                applied_for_size_2(&mc),
                Call::patch(STATUS).respond_status_of(&mc),
            ]);
            reconcile(Arc::new(mc.clone()), ctx.clone()).await.unwrap();
            scenario.finish(ctx).await;
        }
    }

    #[tokio::test]
    async fn the_first_apply_to_a_created_deployment_moves_its_fields_to_the_apply_entry() {
        let mc = memcached(json!({"size": 2}));
        let mut scaled = applied_deployment(&mc, READY());
        scaled["spec"]["replicas"] = json!(5);
        let (ctx, verifier) =
            fixtures::context_cached(world_with(scaled, &mc, &["cache-a", "cache-b"]));
        // What the apply answers: the create's fields are still in an Update entry, where no
        // apply can remove them.
        let mut answer = applied_deployment(&mc, READY());
        answer["metadata"]["resourceVersion"] = json!("41");
        let read = json!([
            {"manager": "kubesteer-controller", "operation": "Apply", "apiVersion": "apps/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubesteer-controller", "operation": "Update", "apiVersion": "apps/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:paused": {}}}},
        ]);
        answer["metadata"]["managedFields"] = read.clone();
        let scenario = verifier.run(vec![
            Call::patch(DEPLOYMENT).respond(answer),
            Call::patch(&format!(
                "{GET_DEPLOYMENT}?&fieldManager=kubesteer-controller"
            ))
            .body(move |b| {
                // Replaced only if they are still what was read.
                assert_eq!(
                    b[0],
                    json!({"op": "test", "path": "/metadata/managedFields", "value": read})
                );
                assert_eq!(b[1]["path"], "/metadata/managedFields");
                let entries = b[1]["value"].as_array().unwrap();
                assert_eq!(entries.len(), 1, "{b}");
                assert_eq!(entries[0]["operation"], "Apply");
                assert_eq!(
                    entries[0]["fieldsV1"],
                    json!({"f:spec": {"f:replicas": {}, "f:paused": {}}})
                );
            })
            .respond(applied_deployment(&mc, READY())),
            // Applied again: now whatever it leaves out is removed.
            applied_for_size_2(&mc),
            Call::patch(STATUS).respond_status_of(&mc),
        ]);
        reconcile(Arc::new(mc.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_fold_refused_as_the_deployment_was_written_since_reads_it_again_and_folds() {
        let mc = memcached(json!({"size": 2}));
        let mut scaled = applied_deployment(&mc, READY());
        scaled["spec"]["replicas"] = json!(5);
        let (ctx, verifier) =
            fixtures::context_cached(world_with(scaled, &mc, &["cache-a", "cache-b"]));
        // Its managed fields as the apply's answer has them, and as a GET finds them after a
        // label written by another manager.
        let fields = |labeller: bool| {
            let mut entries = vec![
                json!({"manager": "kubesteer-controller", "operation": "Apply",
                 "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:replicas": {}}}}),
                json!({"manager": "kubesteer-controller", "operation": "Update",
                 "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:paused": {}}}}),
            ];
            if labeller {
                entries.push(json!({"manager": "kubectl-label", "operation": "Update",
                 "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}}));
            }
            json!(entries)
        };
        let created = |version: &str, labeller: bool| {
            let mut object = applied_deployment(&mc, READY());
            object["metadata"]["resourceVersion"] = json!(version);
            object["metadata"]["managedFields"] = fields(labeller);
            object
        };
        let fold = |labeller: bool| {
            let read = fields(labeller);
            Call::patch(&format!(
                "{GET_DEPLOYMENT}?&fieldManager=kubesteer-controller"
            ))
            .body(move |b| {
                assert_eq!(
                    b[0],
                    json!({"op": "test", "path": "/metadata/managedFields", "value": read})
                );
                // The create's entry folded into the Apply one; another manager's kept.
                let kept = if labeller { 2 } else { 1 };
                assert_eq!(b[1]["value"].as_array().unwrap().len(), kept, "{b}");
            })
        };
        // Someone labels the Deployment between the apply and the fold: the test of the managed
        // fields fails (422), and the fold is made again on what was written, keeping theirs.
        let scenario = verifier.run(vec![
            Call::patch(DEPLOYMENT).respond(created("41", false)),
            fold(false).error(
                422,
                "the server rejected our request due to an error in our request",
            ),
            Call::get(GET_DEPLOYMENT).respond(created("42", true)),
            fold(true).respond(applied_deployment(&mc, READY())),
            applied_for_size_2(&mc),
            Call::patch(STATUS).respond_status_of(&mc),
        ]);
        reconcile(Arc::new(mc.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_hand_edited_pod_template_missing_from_the_cache_is_read_once_and_applied_again() {
        let mc = memcached(json!({"size": 2}));
        let mut edited = applied_deployment(&mc, READY());
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("someone/else:1");
        let caches = world_with(edited.clone(), &mc, &["cache-a", "cache-b"]);
        let (ctx, verifier) = fixtures::context_cached(caches.clone());
        // The cache holds only the template's fingerprint, never checked: the live one is read.
        let scenario = verifier.run(vec![
            Call::get(GET_DEPLOYMENT).respond(edited),
            Call::patch(DEPLOYMENT)
                .body(|b| {
                    let image = &b["spec"]["template"]["spec"]["containers"][0]["image"];
                    assert_eq!(image, kubesteer_api::memcached::DEFAULT_IMAGE);
                })
                .respond(applied_deployment(&mc, READY())),
            Call::patch(STATUS).respond_status_of(&mc),
        ]);
        reconcile(Arc::new(mc.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
        assert_eq!(caches.of(APP).notes.templates.len(), 1);

        // A controller that starts on caches as wanted reads each template once, then nothing.
        let caches = world_with(
            applied_deployment(&mc, READY()),
            &mc,
            &["cache-a", "cache-b"],
        );
        let (ctx, verifier) = fixtures::context_cached(caches.clone());
        let mut settled = mc;
        let d: Deployment = serde_json::from_value(applied_deployment(&settled, READY())).unwrap();
        settled.status = Some(status(
            &settled,
            &d,
            &listed(&["cache-a", "cache-b"]),
            ctx.clock.now(),
        ));
        let settled = Arc::new(settled);
        let scenario = verifier.run(vec![
            Call::get(GET_DEPLOYMENT).respond(applied_deployment(&settled, READY()))
        ]);
        reconcile(settled.clone(), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
        let (ctx, verifier) = fixtures::context_cached(caches);
        let scenario = verifier.run(vec![]);
        reconcile(settled, ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn only_a_recreated_child_is_announced_and_errors_keep_their_status_code() {
        let mc = memcached(json!({"size": 2}));
        let caches = fixtures::caches(APP, |w| {
            fixtures::put(&mut w.deployments, applied_deployment(&mc, json!({})));
        });
        checked(&caches, &mc);
        let (ctx, verifier) = fixtures::context_cached(caches);
        let scenario = verifier.run(vec![
            Call::post(CREATE_SERVICE).created(),
            Call::event("team")
                .body(|b| assert_eq!(b["note"], "Created Service cache"))
                .respond_with_body(),
        ]);
        reconcile(Arc::new(mc.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        // A conflicting apply is retried quietly, as with `Api::patch`.
        let mut scaled = applied_deployment(&mc, json!({}));
        scaled["spec"]["replicas"] = json!(5);
        let (ctx, verifier) = fixtures::context_cached(world_with(scaled, &mc, &[]));
        let scenario = verifier.run(vec![Call::patch(DEPLOYMENT).conflict()]);
        assert_eq!(
            reconcile(Arc::new(mc), ctx.clone()).await.unwrap(),
            Action::requeue(crate::context::CONFLICT_REQUEUE)
        );
        scenario.finish(ctx).await;
    }

    /// A Deployment named like the Memcached that someone else made: no owner reference.
    fn hand_made_deployment() -> serde_json::Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "cache", "namespace": "team", "uid": "users-uid", "labels": {"app": "cache"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "cache"}},
                "template": {"metadata": {"labels": {"app": "cache"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}})
    }

    fn assert_name_conflict(b: &serde_json::Value) {
        let ready = &b["status"]["conditions"][0];
        assert_eq!(ready["type"], "Ready", "{b}");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "NameConflict");
        assert_eq!(
            ready["message"],
            "Deployment cache exists and is not controlled by this Memcached; it is left untouched"
        );
    }

    fn assert_name_conflict_event(b: &serde_json::Value) {
        assert_eq!(b["type"], "Warning");
        assert_eq!(b["reason"], "NameConflict");
        assert_eq!(
            b["note"],
            "Deployment cache exists and is not controlled by this Memcached; it is left untouched"
        );
        assert_eq!(b["regarding"]["name"], "cache");
    }

    #[tokio::test]
    async fn a_foreign_deployment_unseen_by_the_watch_is_not_applied_but_reported() {
        let mc = memcached(json!({"size": 2}));
        let (ctx, verifier) = fixtures::context();
        // The create finds the name taken (409, nothing written); the Deployment read then is not
        // this Memcached's, so no write goes to it. The Service, free, is created as usual.
        let scenario = verifier.run(vec![
            Call::post(CREATE_DEPLOYMENT).already_exists(),
            Call::post(CREATE_SERVICE).created(),
            Call::get(GET_DEPLOYMENT).respond(hand_made_deployment()),
            Call::event("team")
                .body(|b| assert_eq!(b["note"], "Created Service cache"))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(assert_name_conflict)
                .respond_status_of(&mc),
            Call::event("team")
                .body(assert_name_conflict_event)
                .respond_with_body(),
        ]);
        assert_eq!(
            reconcile(Arc::new(mc), ctx.clone()).await.unwrap(),
            Action::requeue(NAME_CONFLICT_REQUEUE),
            "an unlabelled object's going brings no watch event: look again later"
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_child_gone_between_the_refused_create_and_the_read_is_tried_again() {
        let mc = memcached(json!({"size": 2}));
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::post(CREATE_DEPLOYMENT).already_exists(),
            Call::post(CREATE_SERVICE).created(),
            Call::get(GET_DEPLOYMENT).not_found(),
        ]);
        assert_eq!(
            reconcile(Arc::new(mc), ctx.clone()).await.unwrap(),
            Action::requeue(crate::context::CONFLICT_REQUEUE),
            "the create's 409 stands, and is retried like any conflict"
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_cached_deployment_controlled_by_another_owner_is_not_applied_but_reported() {
        let mc = memcached(json!({"size": 2}));
        // Our labels, but controlled by an earlier Memcached of that name (or forged).
        let mut foreign = applied_deployment(&mc, READY());
        foreign["metadata"]["ownerReferences"][0]["uid"] = json!("another-uid");
        let caches = world_with(foreign, &mc, &[]);
        let (ctx, verifier) = fixtures::context_cached(caches.clone());
        let scenario = verifier.run(vec![
            Call::patch(STATUS)
                .body(assert_name_conflict)
                .respond_status_of(&mc),
            Call::event("team")
                .body(assert_name_conflict_event)
                .respond_with_body(),
        ]);
        reconcile(Arc::new(mc.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        // Already reported: the next look sends nothing at all.
        let (ctx, verifier) = fixtures::context_cached(caches);
        let mut reported = mc;
        reported.status = Some(MemcachedStatus {
            observed_generation: Some(2),
            conditions: name_conflict_conditions(
                KIND,
                &[],
                &[children::NameConflict::new("Deployment", "cache")],
                Some(2),
                time(ctx.clock.now()),
            ),
            ..MemcachedStatus::default()
        });
        let scenario = verifier.run(vec![]);
        assert_eq!(
            reconcile(Arc::new(reported), ctx.clone()).await.unwrap(),
            Action::requeue(NAME_CONFLICT_REQUEUE)
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn its_own_deployment_missing_from_a_cold_cache_is_found_and_not_written_again() {
        let mc = memcached(json!({"size": 2}));
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::post(CREATE_DEPLOYMENT).already_exists(),
            Call::post(CREATE_SERVICE).already_exists(),
            Call::get(GET_SERVICE).respond(applied_service(&mc)),
            Call::get(GET_DEPLOYMENT).respond(applied_deployment(&mc, READY())),
            Call::patch(STATUS)
                .body(|b| assert_eq!(b["status"]["conditions"][0]["reason"], "AllPodsReady"))
                .respond_status_of(&mc),
        ]);
        assert_eq!(
            reconcile(Arc::new(mc), ctx.clone()).await.unwrap(),
            Action::await_change()
        );
        scenario.finish(ctx).await;
    }

    #[test]
    fn a_stalled_rollout_is_degraded_and_transition_times_are_kept() {
        let mut mc = memcached(json!({"size": 2}));
        let stalled: Deployment = serde_json::from_value(deployment_with(json!({
            "observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "too slow"}]
        })))
        .unwrap();
        let t0 = chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let first = status(&mc, &stalled, &[], t0);
        let degraded = first
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .unwrap();
        assert_eq!(degraded.status, "True");
        assert_eq!(degraded.message, "too slow");
        mc.status = Some(first.clone());
        let later = status(&mc, &stalled, &[], t0 + chrono::TimeDelta::minutes(5));
        assert_eq!(
            later, first,
            "lastTransitionTime must stay while nothing changes"
        );
    }
}
