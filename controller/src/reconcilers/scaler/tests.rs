//! The Scaler's reconcile against a mock apiserver: scenarios end to end through
//! `reconcile`, one request at a time.
use super::*;
use crate::fixtures::{self, at, Call, USUAL};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubesteer_runtime::scale::Unscalable;
use serde_json::json;

pub(super) const STATUS: &str = "/apis/kubesteer.io/v1beta1/namespaces/team/scalers/nightly/status?&fieldManager=kubesteer-controller";
pub(super) const WEB: &str = "/apis/apps/v1/namespaces/team/deployments/web";
pub(super) const API: &str = "/apis/apps/v1/namespaces/other/deployments/api";
pub(super) const SCALER: &str = "/apis/kubesteer.io/v1beta1/namespaces/team/scalers/nightly?";
pub(super) const HPAS: &str = "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers?";
pub(super) const ME: &str = "team/nightly";

/// The object at `base`, patched (metadata or /scale) by the controller.
pub(super) fn patch_of(base: &str) -> String {
    format!("{base}?&fieldManager=kubesteer-controller")
}

pub(super) fn scale_of(base: &str) -> String {
    format!("{base}/scale")
}

/// A context at `now` whose RESTMapper knows Deployments and StatefulSets.
pub(super) async fn ctx_at(now: &str) -> (Arc<ScalerContext>, fixtures::Verifier) {
    let (ctx, verifier) = fixtures::context_at(at(now));
    let ctx = Arc::new(ScalerContext::new(ctx));
    for (kind, plural) in [
        ("Deployment", "deployments"),
        ("StatefulSet", "statefulsets"),
    ] {
        let resource = ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        ctx.mapper.remember("apps/v1", kind, Ok(resource)).await;
    }
    (ctx, verifier)
}

pub(super) fn scaler(spec: Value) -> Scaler {
    serde_json::from_value(json!({
        "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
        "metadata": {"name": "nightly", "namespace": "team", "uid": "scl-uid", "generation": 3,
                     "finalizers": [RESTORE_TARGETS_FINALIZER]},
        "spec": spec,
    }))
    .unwrap()
}

pub(super) fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name})
}

/// Deployment web, 09:00-17:00 UTC at 5 replicas, not cooperating with HPAs.
pub(super) fn nine_to_five() -> Scaler {
    scaler(json!({"scaleTargetRefs": [deployment("web")],
                      "windows": [{"start": 9, "end": 17, "replicas": 5}],
                      "hpaCooperation": "Disabled"}))
}

/// A target's metadata, with this Scaler's record of `original` replicas.
pub(super) fn meta(ns: &str, name: &str, original: Option<i32>) -> Value {
    let mut m = json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": "41"},
    });
    if let Some(o) = original {
        m["metadata"]["annotations"] = json!({
            annotation::ORIGINAL_REPLICAS: o.to_string(),
            annotation::ORIGINAL_REPLICAS_OWNER: ME,
        });
    }
    m
}

pub(super) fn scale(ns: &str, name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": "41"},
        "spec": {"replicas": replicas}, "status": {"replicas": replicas},
    })
}

/// Whether `base` is an apps/v1 workload, read and written as one object.
pub(super) fn is_apps(base: &str) -> bool {
    base.starts_with("/apis/apps/v1/")
}

/// The reads of a target: an apps/v1 workload whole; another kind's metadata and /scale.
pub(super) fn reads(base: &str, metadata: Value, replicas: i32) -> Vec<Call> {
    if is_apps(base) {
        return vec![Call::get(base).respond(written(metadata, &json!({}), replicas))];
    }
    let ns = metadata["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    let name = metadata["metadata"]["name"].as_str().unwrap().to_string();
    vec![
        Call::get(base).respond(metadata),
        Call::get(&scale_of(base)).respond(scale(&ns, &name, replicas)),
    ]
}

/// The reads of a target that does not exist.
pub(super) fn absent(base: &str) -> Vec<Call> {
    if is_apps(base) {
        return vec![Call::get(base).not_found()];
    }
    vec![
        Call::get(base).not_found(),
        Call::get(&scale_of(base)).not_found(),
    ]
}

/// The object (a Deployment or StatefulSet) as a merge patch of its record and replicas
/// left it.
pub(super) fn written(before: Value, patch: &Value, replicas: i32) -> Value {
    let mut object = annotated(before, patch);
    object["spec"] = json!({"replicas": replicas});
    object
}

/// The metadata after a merge patch of its annotations.
pub(super) fn annotated(mut before: Value, patch: &Value) -> Value {
    if let Some(a) = patch["metadata"]["annotations"].as_object() {
        for (k, v) in a {
            if v.is_null() {
                if let Some(m) = before["metadata"]["annotations"].as_object_mut() {
                    m.remove(k);
                }
            } else {
                before["metadata"]["annotations"][k] = v.clone();
            }
        }
    }
    before
}

/// The merge patch of this Scaler's record of `original` replicas, conditional on version 41.
pub(super) fn recorded(original: &str) -> Value {
    json!({"metadata": {"resourceVersion": "41", "annotations": {
        annotation::ORIGINAL_REPLICAS: original, annotation::ORIGINAL_REPLICAS_OWNER: ME,
    }}})
}

pub(super) fn calls(groups: Vec<Vec<Call>>) -> Vec<Call> {
    groups.into_iter().flatten().collect()
}

#[tokio::test]
async fn opening_the_window_records_the_original_replicas_once_and_scales() {
    let (ctx, verifier) = ctx_at(USUAL).await;
    let record = recorded("2");
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![
            Call::patch(&patch_of(WEB))
                // The record and the replicas in one write, conditional on the read.
                .body({
                    let mut r = record.clone();
                    r["spec"] = json!({"replicas": 5});
                    move |b| assert_eq!(b, &r)
                })
                .respond(written(meta("team", "web", None), &record, 5)),
            Call::event("team")
                .body(|b| {
                    assert_eq!(b["reason"], "Scaled");
                    assert_eq!(b["type"], "Normal");
                    assert_eq!(
                        b["note"],
                        "Scaled Deployment team/web from 2 to 5 replicas; recorded 2 to restore"
                    );
                    assert_eq!(b["regarding"]["kind"], "Scaler");
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    let s = &b["status"];
                    assert_eq!(s["active"], true);
                    assert_eq!(
                        s["nextTransitions"][0],
                        json!({"time": "2025-03-03T17:00:00Z"})
                    );
                    assert_eq!(s["lastTransition"], "2025-03-03T09:00:00Z");
                    assert_eq!(
                        s["targets"],
                        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                    "namespace": "team", "replicas": 5, "originalReplicas": 2}])
                    );
                    assert_eq!(s["observedGeneration"], 3);
                    assert_eq!(s["conditions"][0]["reason"], "WindowOpen");
                    assert_eq!(s["conditions"][0]["status"], "True");
                })
                .respond_status_of(&nine_to_five()),
        ],
    ]));
    let action = reconcile(Arc::new(nine_to_five()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(5 * 3600) - PREFETCH_LEAD),
        "requeued at the closing boundary"
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn woken_just_before_a_boundary_it_reads_first_and_only_writes_at_the_boundary() {
    let (ctx, verifier) = ctx_at("2025-03-03T08:59:59.850Z").await;
    let mut s = nine_to_five();
    s.status = Some(ScalerStatus {
        next_transitions: vec![Transition {
            time: time(at("2025-03-03T09:00:00Z")),
            replicas: Some(5),
        }],
        ..ScalerStatus::default()
    });
    let record = recorded("2");
    // One read, before the boundary; the write uses it.
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![
            Call::patch(&patch_of(WEB))
                .body(|b| assert_eq!(b["spec"]["replicas"], 5))
                .respond(written(meta("team", "web", None), &record, 5)),
            Call::event("team").respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["lastTransition"], "2025-03-03T09:00:00Z");
                    assert_eq!(b["status"]["active"], true);
                })
                .respond_status_of(&nine_to_five()),
        ],
    ]));
    let started = std::time::Instant::now();
    let action = reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    // The fixed clock stands still: the reconcile waited the 150 ms to the boundary itself.
    assert!(started.elapsed() >= Duration::from_millis(150));
    // (Measured from the clock after the writes, which the fixed clock keeps 150 ms early.)
    assert_eq!(
        action,
        Action::requeue(Duration::from_millis(8 * 3600 * 1000 + 150) - PREFETCH_LEAD)
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn closing_the_window_restores_the_recorded_replicas_and_removes_the_record_in_one_write() {
    let (ctx, verifier) = ctx_at("2025-03-03T17:00:00Z").await;
    let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 5),
            vec![
                Call::patch(&patch_of(WEB))
                    // The replicas back and the record gone in one write, conditional on the read.
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!({"metadata": {"resourceVersion": "41", "annotations": {
                                annotation::ORIGINAL_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null,
                            }}, "spec": {"replicas": 2}})
                        )
                    })
                    .respond(written(meta("team", "web", None), &json!({}), 2)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "Restored");
                        assert_eq!(b["note"], "Restored Deployment team/web from 5 to 2 replicas");
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["active"], false);
                        assert_eq!(
                            s["nextTransitions"][0],
                            json!({"time": "2025-03-04T09:00:00Z", "replicas": 5})
                        );
                        assert_eq!(s["lastTransition"], "2025-03-03T17:00:00Z");
                        assert_eq!(s["targets"][0]["replicas"], 2);
                        assert!(s["targets"][0].get("originalReplicas").is_none(), "{s}");
                        assert_eq!(s["conditions"][0]["reason"], "WindowClosed");
                    })
                    .respond_status_of(&nine_to_five()),
            ],
        ]));
    let action = reconcile(Arc::new(nine_to_five()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(16 * 3600) - PREFETCH_LEAD)
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn closing_goes_to_outside_replicas_when_set() {
    let s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "windows": [{"start": 9, "end": 17, "replicas": 5}], "outsideReplicas": 1,
            "hpaCooperation": "Disabled"}));
    let (ctx, verifier) = ctx_at("2025-03-03T18:00:00Z").await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", Some(2)), 5),
        vec![
            Call::patch(&patch_of(WEB))
                .body(|b| assert_eq!(b["spec"]["replicas"], 1))
                .respond(written(meta("team", "web", None), &json!({}), 1)),
            Call::event("team")
                .body(|b| {
                    assert_eq!(
                        b["note"],
                        "Restored Deployment team/web from 5 to 1 replicas"
                    )
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(
                        b["status"]["nextTransitions"][1],
                        json!({"time": "2025-03-04T17:00:00Z", "replicas": 1}),
                        "a closing shows the outside replicas"
                    )
                })
                .respond_status_of(&s),
        ],
    ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_manual_change_inside_the_window_is_reverted_and_the_original_kept() {
    let (ctx, verifier) = ctx_at("2025-03-03T10:30:00Z").await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", Some(2)), 7),
        vec![
            Call::patch(&patch_of(&scale_of(WEB)))
                .body(|b| {
                    assert_eq!(
                        b,
                        &json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 5}})
                    )
                })
                .respond(scale("team", "web", 5)),
            Call::event("team")
                .body(|b| assert!(b["note"].as_str().unwrap().contains("from 7 back to 5")))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["targets"][0]["originalReplicas"], 2);
                    assert_eq!(b["status"]["targets"][0]["replicas"], 5);
                })
                .respond_status_of(&nine_to_five()),
        ],
    ]));
    reconcile(Arc::new(nine_to_five()), ctx.clone())
        .await
        .unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_closed_window_makes_no_target_writes_and_requeues_at_the_next_boundary() {
    let now = "2025-03-03T06:15:30Z";
    let (ctx, verifier) = ctx_at(now).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![Call::patch(STATUS)
            .body(|b| {
                assert_eq!(b["status"]["active"], false);
                assert_eq!(
                    b["status"]["nextTransitions"][0]["time"],
                    "2025-03-03T09:00:00Z"
                );
                assert_eq!(b["status"]["targets"][0]["replicas"], 2);
            })
            .respond_status_of(&nine_to_five())],
    ]));
    let action = reconcile(Arc::new(nine_to_five()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(2 * 3600 + 44 * 60 + 30) - PREFETCH_LEAD)
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_missing_target_is_reported_and_the_others_are_still_scaled() {
    let s = scaler(json!({"scaleTargetRefs": [deployment("web"),
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "other"}],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "hpaCooperation": "Disabled"}));
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
            absent(WEB),
            reads(API, meta("other", "api", None), 1),
            vec![
                Call::patch(&patch_of(API))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 3))
                    .respond(written(meta("other", "api", Some(1)), &json!({}), 3)),
                Call::event("team")
                    .body(|b| assert_eq!(b["reason"], "Scaled"))
                    .respond_with_body(),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "TargetNotFound");
                        assert_eq!(b["type"], "Warning");
                        assert_eq!(b["note"], "Deployment team/web not found");
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["conditions"][0]["status"], "False");
                        assert_eq!(s["conditions"][0]["reason"], "TargetNotFound");
                        assert_eq!(
                            s["targets"][0],
                            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team"})
                        );
                        assert_eq!(s["targets"][1]["replicas"], 3);
                    })
                    .respond_status_of(&s),
            ],
        ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn one_failing_target_never_blocks_the_others_and_is_shown_on_its_entry() {
    let refusal = "Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: 3";
    let s = scaler(json!({"scaleTargetRefs": [deployment("web"),
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "other"}],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "hpaCooperation": "Disabled"}));
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 1),
        vec![Call::patch(&patch_of(WEB)).error(422, refusal)],
        reads(API, meta("other", "api", None), 1),
        vec![
            Call::patch(&patch_of(API))
                .body(|b| assert_eq!(b["spec"]["replicas"], 3))
                .respond(written(meta("other", "api", Some(1)), &json!({}), 3)),
            Call::event("team")
                .body(|b| assert_eq!(b["reason"], "Scaled"))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(move |b| {
                    let s = &b["status"];
                    assert_eq!(s["conditions"][0]["reason"], "TargetFailed");
                    let error = s["targets"][0]["error"].as_str().unwrap();
                    assert!(error.contains(refusal), "{error}");
                    assert_eq!(s["targets"][0]["name"], "web");
                    assert_eq!(s["targets"][1]["replicas"], 3);
                    assert!(s["targets"][1].get("error").is_none());
                })
                .respond_status_of(&s),
            Call::event("team")
                .body(move |b| {
                    assert_eq!(b["reason"], "ReconcileFailed");
                    assert_eq!(b["type"], "Warning");
                    let note = b["note"].as_str().unwrap();
                    assert!(note.contains("Deployment team/web: "), "{note}");
                    assert!(note.contains(refusal), "{note}");
                    assert!(note.ends_with("(1 target(s) failed)"), "{note}");
                })
                .respond_with_body(),
        ],
    ]));
    let failed = reconcile(Arc::new(s), ctx.clone()).await.unwrap_err();
    assert!(failed.admission_denial().is_none(), "{failed}");
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_deleted_scaler_lets_go_of_a_target_the_apiserver_refuses_and_restores_the_others() {
    let mut s = scaler(json!({"scaleTargetRefs": [deployment("web"),
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "other"}],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "hpaCooperation": "Disabled"}));
    s.metadata.deletion_timestamp = Some(time(at(USUAL)));
    let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z").await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", Some(2)), 3),
        vec![Call::patch(&patch_of(WEB)).error(403, "forbidden")],
        vec![Call::event("team")
            .body(|b| {
                assert_eq!(b["reason"], "RestoreFailed");
                let note = b["note"].as_str().unwrap();
                assert!(
                    note.starts_with("Deployment team/web could not be given back"),
                    "{note}"
                );
            })
            .respond_with_body()],
        reads(API, meta("other", "api", Some(1)), 3),
        vec![
            Call::patch(&patch_of(API))
                .body(|b| assert_eq!(b["spec"]["replicas"], 1))
                .respond(written(meta("other", "api", None), &json!({}), 1)),
            Call::event("team")
                .body(|b| assert_eq!(b["reason"], "Restored"))
                .respond_with_body(),
            Call::patch(SCALER)
                .body(|b| assert_eq!(b[1]["op"], "remove"))
                .respond(serde_json::to_value(nine_to_five()).unwrap()),
        ],
    ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_deleted_scaler_keeps_its_finalizer_while_a_restore_can_still_succeed() {
    let mut s = nine_to_five();
    s.metadata.deletion_timestamp = Some(time(at(USUAL)));
    let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z").await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", Some(2)), 5),
        vec![
            Call::patch(&patch_of(WEB)).error(503, "etcd is down"),
            Call::event("team")
                .body(|b| assert_eq!(b["reason"], "ReconcileFailed"))
                .respond_with_body(),
        ],
    ]));
    let failed = reconcile(Arc::new(s), ctx.clone()).await.unwrap_err();
    assert!(failed.is_unavailable(), "{failed}");
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_dry_run_says_what_it_would_write_and_writes_nothing() {
    let mut s = nine_to_five();
    s.spec.dry_run = Some(true);
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "DryRun");
                        assert_eq!(b["type"], "Normal");
                        assert_eq!(
                            b["note"],
                            "Dry run, not done: Scaled Deployment team/web from 2 to 5 replicas; recorded 2 to restore"
                        );
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let s = &b["status"];
                        assert_eq!(s["conditions"][0]["reason"], "DryRun");
                        assert_eq!(s["conditions"][0]["status"], "True");
                        assert_eq!(s["active"], true);
                        assert_eq!(s["targets"][0]["replicas"], 2, "as it is");
                        assert!(s["targets"][0].get("originalReplicas").is_none());
                    })
                    .respond_status_of(&s),
            ],
        ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

/// web's metadata, created at `created`, its template last written by `deployer` at
/// `deployed` and its replicas owned by `scaler`.
pub(super) fn managed_meta(created: &str, deployed: &str, scaler: &str) -> Value {
    let mut m = meta("team", "web", None);
    m["metadata"]["creationTimestamp"] = json!(created);
    m["metadata"]["managedFields"] = json!([
        {"manager": "argocd", "operation": "Apply", "apiVersion": "apps/v1", "time": deployed,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {}}}}},
        {"manager": scaler, "operation": "Update", "apiVersion": "apps/v1", "time": deployed,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}, "subresource": "scale"},
    ]);
    m
}

#[test]
fn provenance_reads_the_last_template_write_and_who_owns_the_replicas() {
    let m: ObjectMeta = serde_json::from_value(
        managed_meta("2025-01-01T00:00:00Z", "2025-03-03T19:00:00Z", "ci-bot")["metadata"].clone(),
    )
    .unwrap();
    assert_eq!(
        provenance(&m),
        (Some(at("2025-03-03T19:00:00Z")), Some("ci-bot".to_string()))
    );
    let bare: ObjectMeta = serde_json::from_value(json!({"name": "web",
            "creationTimestamp": "2025-01-01T00:00:00Z"}))
    .unwrap();
    assert_eq!(provenance(&bare), (Some(at("2025-01-01T00:00:00Z")), None));
}

#[tokio::test]
async fn outside_every_window_a_held_target_scaled_up_is_set_back() {
    let mut s = nine_to_five();
    s.spec.outside_replicas = Some(1);
    s.spec.outside = Some(kubesteer_api::scaler::v1beta1::Outside {
        mode: Some(kubesteer_api::scaler::v1beta1::OutsideMode::Hold),
        grace_period: Some("15m".into()),
    });
    // A CI deploy at 19:00 left web at 4; at 20:00 the grace period is over.
    let (ctx, verifier) = ctx_at("2025-03-03T20:00:00Z").await;
    let scenario = verifier.run(calls(vec![
            reads(
                WEB,
                managed_meta("2025-01-01T00:00:00Z", "2025-03-03T19:00:00Z", "ci-bot"),
                4,
            ),
            vec![
                Call::patch(&patch_of(&scale_of(WEB)))
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 1}})
                        )
                    })
                    .respond(scale("team", "web", 1)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "Held");
                        assert_eq!(
                            b["note"],
                            "Set Deployment team/web back from 4 to 1 replicas outside every window (scaled up by ci-bot)"
                        );
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| assert_eq!(b["status"]["targets"][0]["replicas"], 1))
                    .respond_status_of(&s),
            ],
        ]));
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;

    // At 19:05, inside the grace period: nothing written, looked at again at 19:15.
    let (ctx, verifier) = ctx_at("2025-03-03T19:05:00Z").await;
    let scenario = verifier.run(calls(vec![
        reads(
            WEB,
            managed_meta("2025-01-01T00:00:00Z", "2025-03-03T19:00:00Z", "ci-bot"),
            4,
        ),
        vec![Call::patch(STATUS).respond_status_of(&s)],
    ]));
    let action = reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(600) - PREFETCH_LEAD)
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_scaler_starting_outside_every_window_sets_its_targets_at_once_then_leaves_them() {
    let mut s = nine_to_five();
    s.spec.outside_replicas = Some(0);
    // Created at 20:00, its window nine hours away: web goes to 0 now, not after tomorrow's.
    let (ctx, verifier) = ctx_at("2025-03-03T20:00:00Z").await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![
            Call::patch(&patch_of(&scale_of(WEB)))
                .body(|b| assert_eq!(b["spec"]["replicas"], 0))
                .respond(scale("team", "web", 0)),
            Call::event("team")
                .body(|b| {
                    assert_eq!(b["reason"], "Scaled");
                    assert_eq!(
                        b["note"],
                        "Scaled Deployment team/web from 2 to 0 replicas: the Scaler starts outside every window"
                    );
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["targets"][0]["replicas"], 0);
                    // As after a closing window: nothing recorded, nothing to give back.
                    assert!(b["status"]["targets"][0].get("originalReplicas").is_none());
                    assert_eq!(b["status"]["observedGeneration"], 3);
                })
                .respond_status_of(&s),
        ],
    ]));
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;

    // Its spec acted on, Release leaves alone a target scaled up since, as after any close.
    s.status = Some(kubesteer_api::scaler::v1beta1::ScalerStatus {
        observed_generation: Some(3),
        ..Default::default()
    });
    let (ctx, verifier) = ctx_at("2025-03-03T21:00:00Z").await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![Call::patch(STATUS)
            .body(|b| assert_eq!(b["status"]["targets"][0]["replicas"], 2))
            .respond_status_of(&s)],
    ]));
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;

    // Without outsideReplicas there is nothing to set: a new spec leaves web as it is.
    s.status = None;
    s.spec.outside_replicas = None;
    let (ctx, verifier) = ctx_at("2025-03-03T20:00:00Z").await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![Call::patch(STATUS)
            .body(|b| assert_eq!(b["status"]["targets"][0]["replicas"], 2))
            .respond_status_of(&s)],
    ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_cron_job_is_suspended_while_its_replicas_would_be_0_and_resumed_after() {
    const REPORT: &str = "/apis/batch/v1/namespaces/team/cronjobs/report";
    let s = scaler(
        json!({"scaleTargetRefs": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "report"}],
            "windows": [{"start": 9, "end": 17, "replicas": 0}], "hpaCooperation": "Disabled"}),
    );
    let cron = |suspend: bool, original: Option<&str>| {
        let mut c = json!({"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "report", "namespace": "team", "resourceVersion": "41"},
                "spec": {"schedule": "0 * * * *", "suspend": suspend}});
        if let Some(o) = original {
            c["metadata"]["annotations"] = json!({annotation::ORIGINAL_REPLICAS: o,
                    annotation::ORIGINAL_REPLICAS_OWNER: ME});
        }
        c
    };
    async fn remember(ctx: &ScalerContext) {
        ctx.mapper
            .remember(
                "batch/v1",
                "CronJob",
                Ok(ApiResource {
                    group: "batch".into(),
                    version: "v1".into(),
                    api_version: "batch/v1".into(),
                    kind: "CronJob".into(),
                    plural: "cronjobs".into(),
                }),
            )
            .await
    }
    let (ctx, verifier) = ctx_at(USUAL).await;
    remember(&ctx).await;
    let scenario = verifier.run(vec![
            Call::get(REPORT).respond(cron(false, None)),
            Call::patch(&patch_of(REPORT))
                .body(|b| {
                    assert_eq!(
                        b,
                        &json!({"metadata": {"resourceVersion": "41", "annotations": {
                            annotation::ORIGINAL_REPLICAS: "1", annotation::ORIGINAL_REPLICAS_OWNER: ME}},
                            "spec": {"suspend": true}})
                    )
                })
                .respond(cron(true, Some("1"))),
            Call::event("team")
                .body(|b| assert_eq!(b["note"], "Suspended CronJob team/report"))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["targets"][0]["replicas"], 0);
                    assert_eq!(b["status"]["targets"][0]["originalReplicas"], 1);
                })
                .respond_status_of(&s),
        ]);
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;

    let (ctx, verifier) = ctx_at("2025-03-03T18:00:00Z").await;
    remember(&ctx).await;
    let scenario = verifier.run(vec![
            Call::get(REPORT).respond(cron(true, Some("1"))),
            Call::patch(&patch_of(REPORT))
                .body(|b| {
                    assert_eq!(b["spec"], json!({"suspend": false}));
                    assert_eq!(b["metadata"]["resourceVersion"], "41");
                    assert_eq!(
                        b["metadata"]["annotations"],
                        json!({annotation::ORIGINAL_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null})
                    );
                })
                .respond(cron(false, None)),
            Call::event("team")
                .body(|b| {
                    assert_eq!(b["reason"], "Restored");
                    assert_eq!(b["note"], "Resumed CronJob team/report");
                })
                .respond_with_body(),
            Call::patch(STATUS).respond_status_of(&s),
        ]);
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_target_that_stays_missing_is_not_announced_again() {
    let mut s = nine_to_five();
    let now = at("2025-03-03T07:00:00Z");
    let missing = condition(
        READY,
        false,
        "TargetNotFound",
        "Deployment team/web not found",
        Some(3),
        time(at("2025-03-03T06:00:00Z")),
        &[],
    );
    let schedule = s.spec.plan(now).unwrap();
    s.status = Some(ScalerStatus {
        active: Some(false),
        next_transitions: schedule
            .next
            .iter()
            .map(|t| Transition {
                time: time(t.at),
                replicas: t.replicas,
            })
            .collect(),
        last_transition: schedule.last.map(time),
        targets: vec![TargetStatus {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            namespace: "team".into(),
            ..TargetStatus::default()
        }],
        target_count: Some(1),
        observed_generation: Some(3),
        conditions: vec![missing],
        ..ScalerStatus::default()
    });
    let (ctx, verifier) = ctx_at("2025-03-03T07:00:00Z").await;
    let scenario = verifier.run(absent(WEB));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_conflict_is_retried_with_a_fresh_read() {
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![Call::patch(&patch_of(WEB)).conflict()],
        reads(WEB, meta("team", "web", None), 3),
        vec![
            Call::patch(&patch_of(WEB))
                .body(|b| {
                    assert_eq!(
                        b["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS],
                        "3"
                    )
                })
                .respond(written(meta("team", "web", Some(3)), &json!({}), 5)),
            Call::event("team").respond_with_body(),
            Call::patch(STATUS).respond_status_of(&nine_to_five()),
        ],
    ]));
    reconcile(Arc::new(nine_to_five()), ctx.clone())
        .await
        .unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_new_scaler_first_gets_its_finalizer() {
    let mut s = nine_to_five();
    s.metadata.finalizers = None;
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(vec![Call::patch(SCALER)
            .body(|b| {
                assert_eq!(
                    b,
                    &json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                            {"op": "add", "path": "/metadata/finalizers", "value": [RESTORE_TARGETS_FINALIZER]}])
                )
            })
            .respond(serde_json::to_value(nine_to_five()).unwrap())]);
    assert_eq!(
        reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
        Action::await_change()
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_denied_write_backs_off_and_shows_the_webhooks_message_once() {
    let denial = "admission webhook \"vscalers.kubesteer.io\" denied the request: Scaler \"nightly\" is invalid: spec.scaleTargetRefs[0]: Forbidden: no";
    let mut s = nine_to_five();
    s.metadata.finalizers = None;
    let (ctx, verifier) = ctx_at(USUAL).await;
    let shown = json!([{"type": "Ready", "status": "False", "reason": "AdmissionDenied",
                            "message": denial, "observedGeneration": 3,
                            "lastTransitionTime": USUAL}]);
    let want = shown.clone();
    let scenario = verifier.run(vec![
            Call::patch(SCALER).error(422, denial),
            Call::event("team").body(move |b| {
                assert_eq!(b["type"], "Warning");
                assert_eq!(b["reason"], "AdmissionDenied");
                assert_eq!(b["note"], denial);
            }),
            Call::patch("/apis/kubesteer.io/v1beta1/namespaces/team/scalers/nightly/status?&force=true&fieldManager=kubesteer-controller-denial")
                .body(move |b| assert_eq!(b["status"]["conditions"], want))
                .respond_status_of(&s),
        ]);
    let error = reconcile(Arc::new(s.clone()), ctx.clone())
        .await
        .expect_err("denied");
    assert_eq!(error.admission_denial(), Some(denial));
    assert!(!error.is_conflict(), "a denial is no conflict: {error}");
    // Backed off as a failure (1 s, then 2 s, ...), not retried at once as a conflict.
    let first = error_policy(Arc::new(s.clone()), &error, ctx.clone());
    assert_eq!(first, Action::requeue(Duration::from_secs(1)));
    assert_eq!(
        error_policy(Arc::new(s.clone()), &error, ctx.clone()),
        Action::requeue(Duration::from_secs(2))
    );
    scenario.finish(ctx).await;

    // Once the status shows the message, a second denial writes no status again.
    let mut shown_already = s.clone();
    shown_already.status = Some(serde_json::from_value(json!({"conditions": shown})).unwrap());
    let (ctx, verifier) = ctx_at("2025-03-03T12:00:02Z").await;
    let scenario = verifier.run(vec![
        Call::patch(SCALER).error(422, denial),
        Call::event("team"),
    ]);
    assert!(reconcile(Arc::new(shown_already), ctx.clone())
        .await
        .is_err());
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn deleting_an_active_scaler_restores_its_targets_then_lets_go() {
    let mut s = nine_to_five();
    s.metadata.deletion_timestamp = Some(time(at(USUAL)));
    let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z").await;
    let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(2)), 5),
            vec![
                Call::patch(&patch_of(WEB))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 2))
                    .respond(written(meta("team", "web", None), &json!({}), 2)),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(b["reason"], "Restored");
                        assert_eq!(b["note"], "Restored Deployment team/web from 5 to 2 replicas");
                    })
                    .respond_with_body(),
                Call::patch(SCALER)
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!([{"op": "test", "path": "/metadata/finalizers/0", "value": RESTORE_TARGETS_FINALIZER},
                                    {"op": "remove", "path": "/metadata/finalizers/0"}])
                        )
                    })
                    .respond(serde_json::to_value(nine_to_five()).unwrap()),
            ],
        ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn cron_mode_catches_up_on_the_most_recent_past_firing() {
    let s = scaler(
        json!({"scaleTargetRefs": [deployment("web")], "timeZone": "Europe/Berlin",
        "hpaCooperation": "Disabled", "jobs": [
            {"name": "morning", "schedule": "0 8 * * *", "replicas": 4},
            {"name": "night", "schedule": "0 20 * * *", "replicas": 1},
        ]}),
    );
    // 12:00 UTC is 13:00 in Berlin: "morning" fired at 07:00 UTC, "night" fires at 19:00 UTC.
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![
            Call::patch(&patch_of(WEB))
                .body(|b| {
                    assert_eq!(
                        b["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS],
                        "2"
                    )
                })
                .body(|b| assert_eq!(b["spec"]["replicas"], 4))
                .respond(written(meta("team", "web", Some(2)), &json!({}), 4)),
            Call::event("team").respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    let s = &b["status"];
                    assert_eq!(s["active"], true);
                    assert_eq!(s["lastTransition"], "2025-03-03T07:00:00Z");
                    assert_eq!(
                        s["nextTransitions"][0],
                        json!({"time": "2025-03-03T19:00:00Z", "replicas": 1})
                    );
                    assert_eq!(s["conditions"][0]["reason"], "JobFired");
                })
                .respond_status_of(&s),
        ],
    ]));
    let action = reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(7 * 3600) - PREFETCH_LEAD)
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_suspended_scaler_only_reads() {
    let s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "windows": [{"start": 9, "end": 17}], "suspend": true}));
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![Call::patch(STATUS)
            .body(|b| {
                assert_eq!(b["status"]["active"], false);
                assert!(b["status"].get("nextTransitions").is_none(), "{b}");
                assert_eq!(b["status"]["conditions"][0]["reason"], "Suspended");
            })
            .respond_status_of(&s)],
    ]));
    assert_eq!(
        reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
        Action::await_change()
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_suspended_scaler_gives_back_a_target_dropped_from_its_spec() {
    let mut s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "suspend": true,
            "hpaCooperation": "Disabled"}));
    s.status = Some(ScalerStatus {
        targets: [("team", "web"), ("other", "api")]
            .into_iter()
            .map(|(ns, name)| TargetStatus {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: name.into(),
                namespace: ns.into(),
                replicas: Some(3),
                original_replicas: Some(1),
                horizontal_pod_autoscaler: None,
                scaled_object: None,
                error: None,
            })
            .collect(),
        ..ScalerStatus::default()
    });
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", Some(1)), 3),
            reads(API, meta("other", "api", Some(1)), 3),
            vec![
                Call::patch(&patch_of(API))
                    .body(|b| {
                        assert_eq!(
                            b["metadata"]["annotations"],
                            json!({annotation::ORIGINAL_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null})
                        )
                    })
                    .body(|b| assert_eq!(b["spec"]["replicas"], 1))
                    .respond(written(meta("other", "api", None), &json!({}), 1)),
                Call::event("team")
                    .body(|b| assert_eq!(b["note"], "Restored Deployment other/api from 3 to 1 replicas"))
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(
                            b["status"]["targets"],
                            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                    "namespace": "team", "replicas": 3, "originalReplicas": 1}])
                        );
                    })
                    .respond_status_of(&s),
            ],
        ]));
    assert_eq!(
        reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
        Action::await_change()
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_stale_record_of_a_deleted_scaler_is_replaced_not_trusted() {
    let mut stale = meta("team", "web", Some(2));
    stale["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS_OWNER] = json!("team/gone");
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
            reads(WEB, stale, 5),
            vec![
                Call::get("/apis/kubesteer.io/v1beta1/namespaces/team/scalers/gone").not_found(),
                Call::patch(&patch_of(WEB))
                    .body(|b| {
                        assert_eq!(
                            b["metadata"]["annotations"],
                            json!({annotation::ORIGINAL_REPLICAS: "5", annotation::ORIGINAL_REPLICAS_OWNER: ME})
                        );
                    })
                    .respond(meta("team", "web", Some(5))),
                Call::event("team").respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| assert_eq!(b["status"]["targets"][0]["originalReplicas"], 5))
                    .respond_status_of(&nine_to_five()),
            ],
        ]));
    reconcile(Arc::new(nine_to_five()), ctx.clone())
        .await
        .unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_target_another_live_scaler_scales_is_left_alone_and_reported() {
    let mut theirs = meta("team", "web", Some(4));
    theirs["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS_OWNER] = json!("team/daily");
    let mut daily = serde_json::to_value(nine_to_five()).unwrap();
    daily["metadata"]["name"] = json!("daily");
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, theirs, 2),
        vec![
            Call::get("/apis/kubesteer.io/v1beta1/namespaces/team/scalers/daily").respond(daily),
            Call::event("team")
                .body(|b| {
                    assert_eq!(b["type"], "Warning");
                    assert_eq!(b["reason"], "TargetClaimed");
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    let s = &b["status"];
                    assert_eq!(s["conditions"][0]["reason"], "TargetClaimed");
                    assert_eq!(
                        s["conditions"][0]["message"],
                        "Deployment team/web is scaled by Scaler team/daily"
                    );
                    assert_eq!(s["targets"][0]["replicas"], 2);
                })
                .respond_status_of(&nine_to_five()),
        ],
    ]));
    reconcile(Arc::new(nine_to_five()), ctx.clone())
        .await
        .unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_stored_never_firing_schedule_is_reported_not_searched() {
    // Stored while the webhook was down: the controller must neither panic nor spin on it.
    let s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "jobs": [{"name": "feb30", "schedule": "0 0 30 2 *", "replicas": 2}]}));
    let (ctx, verifier) = ctx_at(USUAL).await;
    let message =
        "spec.jobs[0].schedule: Invalid value: \"0 0 30 2 *\": never fires within 5 years";
    let scenario = verifier.run(vec![
        Call::event("team")
            .body(move |b| assert_eq!(b["note"], message))
            .respond_with_body(),
        Call::patch(STATUS)
            .body(move |b| {
                assert_eq!(b["status"]["active"], false);
                assert_eq!(b["status"]["conditions"][0]["reason"], "InvalidSchedule");
                assert_eq!(b["status"]["conditions"][0]["message"], message);
            })
            .respond_status_of(&s),
    ]);
    assert_eq!(
        reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
        Action::await_change()
    );
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_scaler_whose_author_lost_the_right_to_scale_writes_nothing_and_says_so() {
    let mut s = nine_to_five();
    s.metadata.annotations = Some(BTreeMap::from([(
        annotation::AUTHOR.to_string(),
        r#"{"username":"alice","groups":["dev"]}"#.to_string(),
    )]));
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(vec![
        // The one right the spec needs (no HPA cooperation): asked as alice, refused.
        Call::post("/apis/authorization.k8s.io/v1/subjectaccessreviews?")
            .body(|b| {
                assert_eq!(b["spec"]["user"], "alice");
                assert_eq!(b["spec"]["groups"], json!(["dev"]));
                let r = &b["spec"]["resourceAttributes"];
                assert_eq!(r["verb"], "patch");
                assert_eq!(r["resource"], "deployments");
                assert_eq!(r["subresource"], "scale");
                assert_eq!(r["name"], "web");
            })
            .respond(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                            "spec": {}, "status": {"allowed": false}})),
        // No read or write of the target: told, and the status says why.
        Call::event("team")
            .body(|b| {
                assert_eq!(b["reason"], "Forbidden");
                assert_eq!(b["type"], "Warning");
            })
            .respond_with_body(),
        Call::patch(STATUS)
            .body(|b| {
                let c = &b["status"]["conditions"][0];
                assert_eq!(c["status"], "False");
                assert_eq!(c["reason"], "Forbidden");
                let m = c["message"].as_str().unwrap_or_default();
                assert!(
                    m.contains("spec.scaleTargetRefs[0]: the spec's author, user \"alice\", may no longer patch deployments/scale (apps) \"web\""),
                    "{m}"
                );
            })
            .respond_status_of(&s),
    ]);
    assert_eq!(
        reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap(),
        Action::requeue(rights::RECHECK)
    );
    let text = ctx.metrics.encode().unwrap();
    assert!(
        text.contains(r#"kubesteer_scaler_forbidden{namespace="team",scaler="nightly"} 1"#),
        "{text}"
    );
    scenario.finish(ctx).await;
}

pub(super) const HPA: &str =
    "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers/web-hpa";
pub(super) const HPA_PATCH: &str = "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers/web-hpa?&fieldManager=kubesteer-controller";

/// HPA web-hpa of Deployment web at `min` (max 10), with this Scaler's record of `original`.
pub(super) fn hpa(min: i32, original: Option<i32>) -> Value {
    let mut h = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web-hpa", "namespace": "team", "resourceVersion": "7"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": min, "maxReplicas": 10},
    });
    if let Some(o) = original {
        h["metadata"]["annotations"] = json!({
            annotation::ORIGINAL_MIN_REPLICAS: o.to_string(),
            annotation::ORIGINAL_REPLICAS_OWNER: ME,
        });
    }
    h
}

#[tokio::test]
async fn an_hpa_gets_its_min_replicas_raised_and_restored_instead_of_the_replicas() {
    let s = scaler(json!({"scaleTargetRefs": [deployment("web")],
            "windows": [{"start": 9, "end": 17, "replicas": 5}]}));
    let list = |h: Value| json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscalerList", "metadata": {}, "items": [h]});

    // Inside the window: minReplicas 2 → 5, the original recorded; the Deployment untouched.
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::get(HPAS).respond(list(hpa(2, None))),
                Call::patch(HPA_PATCH)
                    .body(|b| {
                        assert_eq!(
                            b,
                            &json!({"metadata": {"resourceVersion": "7", "annotations": {
                                annotation::ORIGINAL_MIN_REPLICAS: "2", annotation::ORIGINAL_REPLICAS_OWNER: ME}},
                                "spec": {"minReplicas": 5}})
                        )
                    })
                    .respond(hpa(5, Some(2))),
                Call::event("team")
                    .body(|b| {
                        assert_eq!(
                            b["note"],
                            "Set HorizontalPodAutoscaler team/web-hpa minReplicas from 2 to 5 for Deployment team/web; it scales the target"
                        )
                    })
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        assert_eq!(b["status"]["targets"][0]["horizontalPodAutoscaler"], "web-hpa");
                        assert_eq!(b["status"]["targets"][0]["replicas"], 2);
                    })
                    .respond_status_of(&s),
            ],
        ]));
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;

    // After the window: minReplicas back to 2 and the record gone.
    let (ctx, verifier) = ctx_at("2025-03-03T18:00:00Z").await;
    let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 5),
            vec![
                Call::get(HPAS).respond(list(hpa(5, Some(2)))),
                Call::patch(HPA_PATCH)
                    .body(|b| {
                        assert_eq!(b["spec"]["minReplicas"], 2);
                        assert_eq!(
                            b["metadata"]["annotations"],
                            json!({annotation::ORIGINAL_MIN_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null})
                        );
                    })
                    .respond(hpa(2, None)),
                Call::event("team")
                    .body(|b| assert_eq!(b["note"], "Restored HorizontalPodAutoscaler team/web-hpa minReplicas from 5 to 2"))
                    .respond_with_body(),
                Call::patch(STATUS).respond_status_of(&s),
            ],
        ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn an_hpa_raised_before_cooperation_was_switched_off_is_restored_by_its_recorded_name() {
    // Raised to 5 while hpaCooperation was Enabled; now Disabled inside the window.
    let mut s = nine_to_five();
    s.status = Some(ScalerStatus {
        targets: vec![TargetStatus {
            horizontal_pod_autoscaler: Some("web-hpa".into()),
            ..TargetStatus::from(&named_in_spec(&s, "team")[0])
        }],
        ..ScalerStatus::default()
    });
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
            reads(WEB, meta("team", "web", None), 2),
            vec![
                Call::get(HPA).respond(hpa(5, Some(2))),
                Call::patch(HPA_PATCH)
                    .body(|b| {
                        assert_eq!(b["spec"]["minReplicas"], 2);
                        assert_eq!(
                            b["metadata"]["annotations"],
                            json!({annotation::ORIGINAL_MIN_REPLICAS: null, annotation::ORIGINAL_REPLICAS_OWNER: null})
                        );
                    })
                    .respond(hpa(2, None)),
                Call::event("team")
                    .body(|b| assert_eq!(b["note"], "Restored HorizontalPodAutoscaler team/web-hpa minReplicas from 5 to 2"))
                    .respond_with_body(),
                Call::patch(&patch_of(WEB))
                    .body(|b| assert_eq!(b["spec"]["replicas"], 5))
                    .respond(written(meta("team", "web", Some(2)), &json!({}), 5)),
                Call::event("team")
                    .body(|b| assert_eq!(b["reason"], "Scaled"))
                    .respond_with_body(),
                Call::patch(STATUS)
                    .body(|b| {
                        let entry = &b["status"]["targets"][0];
                        assert!(entry.get("horizontalPodAutoscaler").is_none(), "{entry}");
                        assert_eq!(entry["replicas"], 5);
                    })
                    .respond_status_of(&s),
            ],
        ]));
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;

    // An HPA recorded but gone, or no longer carrying this Scaler's record, is left alone.
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", Some(2)), 5),
        vec![
            Call::get(HPA).respond(hpa(3, None)),
            Call::patch(STATUS).respond_status_of(&s),
        ],
    ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_stateful_set_gets_its_record_and_replicas_in_one_write() {
    let db = "/apis/apps/v1/namespaces/team/statefulsets/db";
    let s = scaler(
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}],
            "windows": [{"start": 9, "end": 17, "replicas": 3}], "hpaCooperation": "Disabled"}),
    );
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(db, meta("team", "db", None), 1),
        vec![
            Call::patch(&patch_of(db))
                .body(|b| assert_eq!(b["spec"]["replicas"], 3))
                .respond(written(meta("team", "db", Some(1)), &json!({}), 3)),
            Call::event("team")
                .body(|b| {
                    assert_eq!(
                        b["note"],
                        "Scaled StatefulSet team/db from 1 to 3 replicas; recorded 1 to restore"
                    )
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| assert_eq!(b["status"]["targets"][0]["kind"], "StatefulSet"))
                .respond_status_of(&s),
        ],
    ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_custom_kind_gets_its_record_first_then_its_replicas_through_scale() {
    let workers = "/apis/example.com/v1/namespaces/team/workers/w";
    let s = scaler(
        json!({"scaleTargetRefs": [{"apiVersion": "example.com/v1", "kind": "Worker", "name": "w"}],
            "windows": [{"start": 9, "end": 17, "replicas": 4}], "hpaCooperation": "Disabled"}),
    );
    let (ctx, verifier) = ctx_at(USUAL).await;
    ctx.mapper
        .remember(
            "example.com/v1",
            "Worker",
            Ok(ApiResource {
                group: "example.com".into(),
                version: "v1".into(),
                api_version: "example.com/v1".into(),
                kind: "Worker".into(),
                plural: "workers".into(),
            }),
        )
        .await;
    let record = recorded("1");
    let scenario = verifier.run(calls(vec![
        reads(workers, meta("team", "w", None), 1),
        vec![
            // Its /scale may be anything, so the record goes first, on its own.
            Call::patch(&patch_of(workers))
                .body({
                    let r = record.clone();
                    move |b| assert_eq!(b, &r)
                })
                .respond(annotated(meta("team", "w", None), &record)),
            Call::patch(&patch_of(&scale_of(workers)))
                .body(|b| assert_eq!(b, &json!({"spec": {"replicas": 4}})))
                .respond(scale("team", "w", 4)),
            Call::event("team")
                .body(|b| {
                    assert_eq!(
                        b["note"],
                        "Scaled Worker team/w from 1 to 4 replicas; recorded 1 to restore"
                    )
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| assert_eq!(b["status"]["targets"][0]["replicas"], 4))
                .respond_status_of(&s),
        ],
    ]));
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_target_that_cannot_be_scaled_is_reported_without_touching_it() {
    let s = scaler(
        json!({"scaleTargetRefs": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm"}],
            "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled"}),
    );
    let (ctx, verifier) = ctx_at(USUAL).await;
    ctx.mapper
        .remember(
            "v1",
            "ConfigMap",
            Err(Unscalable::NoScaleSubresource {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                plural: "configmaps".into(),
            }),
        )
        .await;
    let message =
        "ConfigMap team/cm: ConfigMap (v1) has no /scale subresource, so it cannot be scaled; declare a patch for it in spec.patches to put it to sleep";
    let scenario = verifier.run(vec![
        Call::event("team")
            .body(move |b| {
                assert_eq!(b["reason"], "TargetNotScalable");
                assert_eq!(b["note"], message);
            })
            .respond_with_body(),
        Call::patch(STATUS)
            .body(|b| assert_eq!(b["status"]["conditions"][0]["reason"], "TargetNotScalable"))
            .respond_status_of(&s),
    ]);
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn overlapping_windows_scale_to_the_highest_and_a_holiday_restores() {
    let s = scaler(
        json!({"scaleTargetRefs": [deployment("web")], "hpaCooperation": "Disabled",
            "windows": [{"start": 9, "end": 17, "replicas": 2}, {"start": 11, "end": 13, "replicas": 6}]}),
    );
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", Some(1)), 2),
        vec![
            Call::patch(&patch_of(&scale_of(WEB)))
                .body(|b| assert_eq!(b["spec"]["replicas"], 6))
                .respond(scale("team", "web", 6)),
            Call::event("team").respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(
                        b["status"]["nextTransitions"],
                        json!([{"time": "2025-03-03T13:00:00Z", "replicas": 2},
                                   {"time": "2025-03-03T17:00:00Z"},
                                   {"time": "2025-03-04T09:00:00Z", "replicas": 2}])
                    )
                })
                .respond_status_of(&s),
        ],
    ]));
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;

    let mut holiday = s;
    holiday.spec.exclude_dates = Some(vec!["2025-03-03".into()]);
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", Some(1)), 6),
        vec![
            Call::patch(&patch_of(WEB))
                .body(|b| assert_eq!(b["spec"]["replicas"], 1))
                .respond(written(meta("team", "web", None), &json!({}), 1)),
            Call::event("team").respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["conditions"][0]["reason"], "ExcludedDate");
                    assert_eq!(
                        b["status"]["nextTransitions"][0],
                        json!({"time": "2025-03-04T09:00:00Z", "replicas": 2})
                    );
                })
                .respond_status_of(&holiday),
        ],
    ]));
    reconcile(Arc::new(holiday), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[test]
fn the_backoff_of_a_failed_scaler_never_outlasts_its_next_transition() {
    let mut s = nine_to_five();
    // Applied up to the 09:00 opening.
    s.status = Some(ScalerStatus {
        last_transition: Some(time(at("2025-03-03T09:00:00Z"))),
        ..ScalerStatus::default()
    });
    let long = Duration::from_secs(300);
    assert_eq!(
        retry_delay(long, &s, at("2025-03-03T16:58:00Z"), true),
        Duration::from_secs(120),
        "capped by the 17:00 closing"
    );
    assert_eq!(
        retry_delay(long, &s, at(USUAL), true),
        long,
        "nothing owed, nothing near"
    );
    // Past 17:00 with the closing not applied: an outage retries often, a bad request does not.
    let after = at("2025-03-03T17:00:40Z");
    assert_eq!(retry_delay(long, &s, after, true), OUTAGE_RETRY);
    assert_eq!(retry_delay(long, &s, after, false), long);
    let mut suspended = s.clone();
    suspended.spec.suspend = Some(true);
    assert_eq!(retry_delay(long, &suspended, after, true), long);
    assert_eq!(
        next_action(None, false, after),
        Action::requeue(NO_TRANSITION_RECHECK)
    );
    assert_eq!(next_action(None, true, after), Action::await_change());
}

pub(super) fn web() -> Target {
    Target::deployment("team", "web")
}

pub(super) fn current(replicas: i32, annotations: &[(&str, &str)]) -> Current {
    Current {
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        resource_version: Some("41".into()),
        replicas,
        ..Current::default()
    }
}

#[test]
fn targets_map_to_the_scalers_that_name_them() {
    let mut claims = ClaimIndex::default();
    let mut other_ns = scaler(json!({"scaleTargetRefs": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "api", "namespace": "other"}],
            "windows": [{"start": 1, "end": 2}]}));
    other_ns.metadata.name = Some("cross".into());
    claims.upsert(&nine_to_five());
    claims.upsert(&other_ns);
    let object = |ns: &str, name: &str| -> k8s_openapi::api::apps::v1::Deployment {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap()
    };
    let names = |refs: Vec<ObjectRef<Scaler>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
    assert_eq!(
        names(scalers_targeting(
            &claims,
            "apps/v1",
            "Deployment",
            &object("team", "web")
        )),
        vec!["nightly"]
    );
    assert_eq!(
        names(scalers_targeting(
            &claims,
            "apps/v1",
            "StatefulSet",
            &object("other", "api")
        )),
        vec!["cross"]
    );
    assert!(
        scalers_targeting(&claims, "apps/v1", "Deployment", &object("other", "api")).is_empty()
    );
}

/// `s` named `name`, created at `created` with `uid`.
pub(super) fn aged(mut s: Scaler, name: &str, created: &str, uid: &str) -> Scaler {
    s.metadata.name = Some(name.into());
    s.metadata.uid = Some(uid.into());
    s.metadata.creation_timestamp = Some(time(at(created)));
    s
}

#[tokio::test]
async fn a_younger_scaler_leaves_a_shared_target_to_the_older_and_says_so_once() {
    let older = aged(nine_to_five(), "early", "2025-03-01T00:00:00Z", "uid-b");
    let me = aged(nine_to_five(), "nightly", "2025-03-02T00:00:00Z", "uid-a");
    let (ctx, verifier) = ctx_at(USUAL).await;
    let mut follow = kubesteer_runtime::claims::follow(&ctx.claims);
    follow(&kube::runtime::watcher::Event::Apply(older));
    follow(&kube::runtime::watcher::Event::Apply(me.clone()));
    let written = Arc::new(std::sync::Mutex::new(Value::Null));
    let message = "Deployment team/web is owned by Scaler team/early, which is older; it is left alone until that one lets go";
    let scenario = verifier.run(calls(vec![
        // Read for the status only: no write to the target.
        reads(WEB, meta("team", "web", None), 5),
        vec![
            Call::event("team")
                .body(move |b| {
                    assert_eq!(b["reason"], "Conflict");
                    assert_eq!(b["note"], message);
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body({
                    let written = written.clone();
                    move |b| {
                        let c = &b["status"]["conditions"][0];
                        assert_eq!(
                            (&c["status"], &c["reason"]),
                            (&json!("False"), &json!("Conflict"))
                        );
                        assert_eq!(c["message"], message);
                        *written.lock().unwrap() = b["status"].clone();
                    }
                })
                .respond_status_of(&me),
        ],
    ]));
    reconcile(Arc::new(me.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;

    // Reconciled again in the same conflict: no event, no write, the target untouched.
    let mut again = me;
    again.status = Some(serde_json::from_value(written.lock().unwrap().clone()).unwrap());
    let (ctx2, verifier) = ctx_at("2025-03-03T12:00:05Z").await;
    let mut follow = kubesteer_runtime::claims::follow(&ctx2.claims);
    for s in [
        aged(nine_to_five(), "early", "2025-03-01T00:00:00Z", "uid-b"),
        again.clone(),
    ] {
        follow(&kube::runtime::watcher::Event::Apply(s));
    }
    let scenario = verifier.run(reads(WEB, meta("team", "web", None), 5));
    reconcile(Arc::new(again), ctx2.clone()).await.unwrap();
    scenario.finish(ctx2).await;
}

#[tokio::test]
async fn the_older_scaler_takes_a_shared_target_over_with_the_replicas_recorded() {
    // The younger scaled it first (the older claimed it later, with the webhook down).
    let me = aged(nine_to_five(), "nightly", "2025-03-01T00:00:00Z", "uid-z");
    let younger = aged(nine_to_five(), "late", "2025-03-02T00:00:00Z", "uid-a");
    let mut theirs = meta("team", "web", Some(2));
    theirs["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS_OWNER] = json!("team/late");
    let (ctx, verifier) = ctx_at(USUAL).await;
    let expected = json!({
        "metadata": {"resourceVersion": "41", "annotations": {annotation::ORIGINAL_REPLICAS_OWNER: ME}},
    });
    let scenario = verifier.run(calls(vec![
        reads(WEB, theirs.clone(), 4),
        vec![
            Call::get("/apis/kubesteer.io/v1beta1/namespaces/team/scalers/late")
                .respond(serde_json::to_value(&younger).unwrap()),
            Call::patch(&patch_of(WEB))
                .body({
                    let mut p = expected.clone();
                    p["spec"] = json!({"replicas": 5});
                    move |b| assert_eq!(b, &p)
                })
                .respond(written(theirs, &expected, 5)),
            Call::event("team").respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["targets"][0]["originalReplicas"], 2);
                    assert_eq!(b["status"]["targets"][0]["replicas"], 5);
                    assert_eq!(b["status"]["conditions"][0]["reason"], "WindowOpen");
                })
                .respond_status_of(&me),
        ],
    ]));
    reconcile(Arc::new(me), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_cleanup_that_lost_the_race_to_a_gone_scaler_is_quiet() {
    let mut s = nine_to_five();
    s.metadata.deletion_timestamp = Some(time(at(USUAL)));
    let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z").await;
    let scenario = verifier.run(calls(vec![
        reads(WEB, meta("team", "web", None), 2),
        vec![Call::patch(SCALER).not_found()],
    ]));
    assert_eq!(
        reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
        Action::await_change()
    );
    scenario.finish(ctx).await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_scaler_keeps_its_finalizer_until_the_workloads_have_listed() {
    let mut s = nine_to_five();
    s.metadata.deletion_timestamp = Some(time(at(USUAL)));
    let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z").await;
    // Their watches start, but their apiserver never answers: no list within the wait.
    let (_apiserver, _stop) = fixtures::start_inventory(&ctx.inventory);
    // The failure is told in a Warning event; no target is touched, the finalizer stays.
    let scenario = verifier.run(vec![Call::event("team").body(|b| {
        assert_eq!(b["type"], "Warning");
        assert!(
            b["note"].as_str().unwrap().contains("has not listed yet"),
            "{b}"
        );
    })]);
    let error = reconcile(Arc::new(s), ctx.clone()).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("Deployment and StatefulSet watch has not listed yet"),
        "{error}"
    );
    scenario.finish(ctx).await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_scaler_lets_go_once_the_workloads_have_listed() {
    let mut s = nine_to_five();
    s.metadata.deletion_timestamp = Some(time(at(USUAL)));
    let (ctx, verifier) = ctx_at("2025-03-03T12:00:01Z").await;
    let (mut apiserver, _stop) = fixtures::start_inventory(&ctx.inventory);
    // The lists (Deployments, StatefulSets, HPAs) answer empty; the watches after them wait.
    let lists = tokio::spawn(async move {
        let (mut answered, mut watches) = (0, Vec::new());
        while let Some((request, reply)) = apiserver.next_request().await {
            if fixtures::is_watch(&request) {
                watches.push(reply);
                continue;
            }
            reply.send_response(fixtures::empty_list());
            answered += 1;
            if answered == 3 {
                return (apiserver, watches);
            }
        }
        panic!("the inventory's apiserver went away")
    });
    // Listed, web is not there: nothing to give back, and the finalizer goes.
    let scenario = verifier.run(vec![Call::patch(SCALER)
        .body(|b| assert_eq!(b[1]["op"], "remove"))
        .respond(serde_json::to_value(nine_to_five()).unwrap())]);
    assert_eq!(
        reconcile(Arc::new(s), ctx.clone()).await.unwrap(),
        Action::await_change()
    );
    assert!(ctx.inventory.workloads_listed());
    drop(lists.await);
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_kind_with_a_declared_patch_sleeps_by_one_conditional_json_patch_with_its_record() {
    use kubesteer_api::scaler::patches;
    const PG: &str = "/apis/postgresql.cnpg.io/v1/namespaces/team/clusters/pg";
    let s = scaler(json!({
        "scaleTargetRefs": [{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": "pg"}],
        "windows": [{"start": 9, "end": 17, "replicas": 0}], "hpaCooperation": "Disabled",
        "patches": [{"target": {"group": "postgresql.cnpg.io", "kind": "Cluster"},
                     "patch": "{metadata: {annotations: {cnpg.io/hibernation: \"on\"}}}"}]
    }));
    let pg = json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": "pg", "namespace": "team", "resourceVersion": "7",
                     "annotations": {"team": "data"}},
        "spec": {"instances": 3}});
    let (ctx, verifier) = ctx_at(USUAL).await;
    // It has a /scale (spec.instances); the declared patch is used instead.
    let resource = ApiResource {
        group: "postgresql.cnpg.io".into(),
        version: "v1".into(),
        api_version: "postgresql.cnpg.io/v1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    ctx.mapper
        .remember("postgresql.cnpg.io/v1", "Cluster", Ok(resource))
        .await;
    let before = pg.clone();
    let edits = s.spec.patches.as_ref().unwrap()[0].edits().unwrap();
    let mut asleep = patches::put_to_sleep(&pg, &edits, ME).unwrap();
    asleep["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS] = json!("1");
    asleep["metadata"]["annotations"][annotation::ORIGINAL_REPLICAS_OWNER] = json!(ME);
    asleep["metadata"]["resourceVersion"] = json!("8");
    let scenario = verifier.run(vec![
        // Its metadata (asleep or not), then the object itself for the write.
        Call::get(PG).respond(pg.clone()),
        Call::get(PG).respond(pg.clone()),
        Call::patch(&patch_of(PG))
            .body(move |b| {
                assert_eq!(
                    b[0],
                    json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "7"}),
                    "conditional on the object as read"
                );
                let ops: json_patch::Patch = serde_json::from_value(b.clone()).unwrap();
                let mut after = before.clone();
                json_patch::patch(&mut after, &ops).unwrap();
                let annotations = &after["metadata"]["annotations"];
                assert_eq!(annotations["cnpg.io/hibernation"], "on");
                assert_eq!(annotations[annotation::ORIGINAL_REPLICAS], "1");
                assert_eq!(annotations[annotation::ORIGINAL_REPLICAS_OWNER], ME);
                assert_eq!(after["spec"]["instances"], 3, "never through /scale");
                let woken = patches::wake(&after);
                assert_eq!(woken.object["metadata"]["annotations"]["team"], "data");
                assert!(woken.object["metadata"]["annotations"]
                    .get("cnpg.io/hibernation")
                    .is_none());
            })
            .respond(asleep),
        Call::event("team")
            .body(|b| assert_eq!(b["note"], "Suspended Cluster team/pg"))
            .respond_with_body(),
        Call::patch(STATUS)
            .body(|b| assert_eq!(b["status"]["targets"][0]["replicas"], 0))
            .respond_status_of(&s),
    ]);
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    scenario.finish(ctx).await;
}

/// web at 3 replicas whose pods request 100m and 64Mi, read whole.
fn web_with_requests() -> Vec<Call> {
    let mut object = written(meta("team", "web", None), &json!({}), 3);
    object["spec"]["template"] = json!({"spec": {"containers": [
        {"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    ]}});
    vec![Call::get(WEB).respond(object)]
}

/// Deployment web, 09:00-17:00 UTC at 1 replica.
fn quiet_days(dry_run: bool) -> Scaler {
    scaler(json!({"scaleTargetRefs": [deployment("web")],
                  "windows": [{"start": 9, "end": 17, "replicas": 1}],
                  "hpaCooperation": "Disabled", "dryRun": dry_run}))
}

#[tokio::test]
async fn the_savings_are_the_replicas_taken_away_times_the_pods_requests() {
    let (ctx, verifier) = ctx_at(USUAL).await;
    let record = recorded("3");
    let scenario = verifier.run(calls(vec![
        web_with_requests(),
        vec![
            Call::patch(&patch_of(WEB)).respond(written(meta("team", "web", None), &record, 1)),
            Call::event("team").respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    let savings = &b["status"]["savings"];
                    assert_eq!(
                        savings["now"],
                        json!({"pods": 2, "cpuMillicores": 200, "memoryBytes": 128 << 20})
                    );
                    assert!(savings.get("potential").is_none());
                    assert_eq!(savings["since"], "2025-03-03T12:00:00Z", "from the write");
                    assert_eq!(savings["countedTo"], savings["since"]);
                    assert_eq!(savings["total"]["podHours"], 0.0);
                })
                .respond_status_of(&quiet_days(false)),
        ],
    ]));
    reconcile(Arc::new(quiet_days(false)), ctx.clone())
        .await
        .unwrap();
    scenario.finish(ctx).await;
}

#[tokio::test]
async fn a_dry_run_counts_the_savings_it_would_make_and_writes_nothing() {
    let (ctx, verifier) = ctx_at(USUAL).await;
    let scenario = verifier.run(calls(vec![
        web_with_requests(),
        vec![
            Call::event("team")
                .body(|b| assert_eq!(b["reason"], "DryRun"))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    let savings = &b["status"]["savings"];
                    assert_eq!(savings["potential"], true);
                    assert_eq!(
                        savings["now"],
                        json!({"pods": 2, "cpuMillicores": 200, "memoryBytes": 128 << 20})
                    );
                    assert_eq!(b["status"]["targets"][0]["replicas"], 3, "as it is");
                })
                .respond_status_of(&quiet_days(true)),
        ],
    ]));
    reconcile(Arc::new(quiet_days(true)), ctx.clone())
        .await
        .unwrap();
    scenario.finish(ctx).await;
}
