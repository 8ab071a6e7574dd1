//! Every admission rule, default, warning and malformed input, through the router (no TLS, no cluster).

use std::sync::Arc;

use crate::common::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

fn applied(review: &serde_json::Value, patch: &json_patch::Patch) -> serde_json::Value {
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, patch).unwrap();
    object
}

#[tokio::test]
async fn memcached_gets_every_default_and_a_second_pass_is_empty() {
    let review = fixture("memcached-create.json");
    let reply = send(cluster(), "/mutate/memcacheds", &review).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.allowed());
    assert_eq!(reply.response()["patchType"], "JSONPatch");
    let patch = reply.patch().expect("a patch");
    assert!(
        patch
            .0
            .iter()
            .all(|op| matches!(op, json_patch::PatchOperation::Add(_))),
        "only adds: {patch:?}"
    );
    let object = applied(&review, &patch);
    assert_eq!(object["spec"]["size"], 1);
    assert_eq!(object["spec"]["port"], 11211);
    assert_eq!(object["spec"]["memoryMB"], 64);
    assert_eq!(
        object["spec"]["image"],
        kubesteer_api::memcached::DEFAULT_IMAGE
    );
    assert_eq!(object["spec"]["resources"]["requests"]["cpu"], "100m");
    let mut again = review.clone();
    again["request"]["object"] = object;
    let reply = send(cluster(), "/mutate/memcacheds", &again).await;
    assert!(reply.allowed());
    assert!(
        reply.patch().is_none(),
        "reinvocation must give no patch: {}",
        reply.body
    );
}

#[tokio::test]
async fn scaler_defaults_fill_time_zone_and_suspend_but_never_a_target() {
    let targets = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "other"}]);
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": targets, "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled"}),
    );
    let reply = send(cluster(), "/mutate/scalers", &review).await;
    let object = applied(&review, &reply.patch().unwrap());
    // A default inside a list item would make every client-side re-apply a change.
    assert_eq!(object["spec"]["scaleTargetRefs"], targets);
    assert_eq!(object["spec"]["timeZone"], "UTC");
    assert_eq!(object["spec"]["suspend"], false);
}

#[tokio::test]
async fn welcome_defaults_keep_what_is_given() {
    let review = with_spec(
        "welcome-create.json",
        json!({"name": "kubesteer", "port": 9000}),
    );
    let reply = send(cluster(), "/mutate/welcomes", &review).await;
    let object = applied(&review, &reply.patch().unwrap());
    assert_eq!(object["spec"]["port"], 9000);
    assert_eq!(object["spec"]["replicas"], 1);
    assert_eq!(object["spec"]["serviceType"], "NodePort");
    assert_eq!(
        object["spec"]["image"],
        kubesteer_api::welcome::DEFAULT_IMAGE
    );
}

#[tokio::test]
async fn a_denial_lists_every_violation_with_its_path() {
    let review = with_spec(
        "memcached-create.json",
        json!({"size": -1, "port": 70000, "memoryMB": 0}),
    );
    let reply = send(cluster(), "/validate/memcacheds", &review).await;
    assert!(!reply.allowed());
    assert_eq!(reply.response()["status"]["code"], 422);
    let m = reply.message();
    assert!(
        m.starts_with("Memcached.kubesteer.io \"cache\" is invalid: ["),
        "{m}"
    );
    for want in [
        "spec.size: Invalid value: -1",
        "spec.port: Invalid value: 70000",
        "spec.memoryMB: Invalid value: 0",
    ] {
        assert!(m.contains(want), "{want} missing in {m}");
    }
}

#[tokio::test]
async fn scaler_field_rules_deny_with_paths() {
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}], "windows": [{"start": 25, "end": "25:00"}], "hpaCooperation": "Disabled", "timeZone": "Nowhere/City"}),
    );
    let reply = send(cluster(), "/validate/scalers", &review).await;
    assert!(!reply.allowed());
    let m = reply.message();
    for want in [
        "spec.windows[0].start: Invalid value: 25: must be an hour 0-23 or \\\"HH:MM\\\""
            .replace("\\\"", "\""),
        "spec.windows[0].end: Invalid value: \"25:00\"".to_string(),
        "spec.scaleTargetRefs[1]: Duplicate value".to_string(),
        "spec.timeZone: Invalid value: \"Nowhere/City\"".to_string(),
    ] {
        assert!(m.contains(&want), "{want} missing in {m}");
    }
}

#[tokio::test]
async fn targets_that_resolve_to_one_deployment_are_denied_as_duplicates() {
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team"}], "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled"}),
    );
    let reply = send(cluster(), "/validate/scalers", &review).await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(
        m.contains(
            "spec.scaleTargetRefs[1]: Duplicate value: {\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"web\",\"namespace\":\"team\"}"
        ),
        "{m}"
    );
}

#[tokio::test]
async fn an_invalid_update_is_denied() {
    let reply = send(
        cluster(),
        "/validate/memcacheds",
        &fixture("memcached-update.json"),
    )
    .await;
    assert!(!reply.allowed());
    assert!(
        reply.message().contains("spec.size: Invalid value: 500"),
        "{}",
        reply.message()
    );
}

#[tokio::test]
async fn a_plain_password_is_admitted_with_a_warning_that_does_not_echo_it() {
    let review = with_spec(
        "welcome-create.json",
        json!({"name": "kubesteer", "password": "hunter2"}),
    );
    let reply = send(cluster(), "/validate/welcomes", &review).await;
    assert!(reply.allowed());
    let warnings = reply.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("passwordSecretRef"));
    assert!(!reply.body.contains("hunter2"));
}

#[tokio::test]
async fn a_cross_namespace_target_needs_permission_to_scale_there() {
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "prod"}], "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled"}),
    );
    let reply = send(cluster(), "/validate/scalers", &review).await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(m.contains("spec.scaleTargetRefs[0]: Forbidden: user \"alice\" may not patch deployments/scale (apps) \"web\" in namespace \"prod\""), "{m}");
    let allowed = FakeCluster {
        may_scale_in: vec!["team".into(), "prod".into()],
        deployments: vec![("prod".into(), "web".into())],
        ..cluster()
    };
    let reply = send(allowed, "/validate/scalers", &review).await;
    assert!(reply.allowed(), "{}", reply.body);
}

#[tokio::test]
async fn where_scalers_keep_to_their_namespace_a_selector_elsewhere_is_refused() {
    let review = with_spec(
        "scaler-create.json",
        json!({"selector": {"namespaces": ["team", "prod"]}, "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled"}),
    );
    let allowed = FakeCluster {
        may_scale_in: vec!["team".into(), "prod".into()],
        ..cluster()
    };
    let reply = send(allowed.clone(), "/validate/scalers", &review).await;
    assert!(reply.allowed(), "{}", reply.body);
    let mut state = kubesteer_webhook::AppState::new(allowed);
    state.scalers_own_namespace_only = true;
    let reply = send_to(
        &Arc::new(state),
        "/validate/scalers",
        serde_json::to_vec(&review).unwrap(),
    )
    .await;
    assert!(!reply.allowed());
    assert!(
        reply.message().contains("spec.selector.namespaces[1]: Forbidden: this installation allows Scalers to reach their own namespace only"),
        "{}",
        reply.message()
    );
}

#[tokio::test]
async fn a_target_claimed_by_another_scaler_is_denied_with_its_name() {
    let mut c = cluster();
    c.claims
        .insert(("team".into(), "web".into()), "team/nightly".into());
    let reply = send(
        c.clone(),
        "/validate/scalers",
        &fixture("scaler-create.json"),
    )
    .await;
    assert!(!reply.allowed());
    assert!(
        reply
            .message()
            .contains("already scaled by Scaler team/nightly"),
        "{}",
        reply.message()
    );
    c.claims
        .insert(("team".into(), "web".into()), "team/office-hours".into());
    let reply = send(c, "/validate/scalers", &fixture("scaler-create.json")).await;
    assert!(
        reply.allowed(),
        "a Scaler does not conflict with itself on UPDATE: {}",
        reply.body
    );
}

#[tokio::test]
async fn missing_targets_and_hpas_are_warnings() {
    let mut c = FakeCluster {
        may_scale_in: vec!["team".into()],
        ..Default::default()
    };
    c.hpas
        .insert(("team".into(), "web".into()), "web-hpa".into());
    let reply = send(c, "/validate/scalers", &fixture("scaler-create.json")).await;
    assert!(reply.allowed());
    let w = reply.warnings();
    assert!(w.iter().any(|w| w.contains("does not exist yet")), "{w:?}");
    assert!(
        w.iter()
            .any(|w| w.contains("HorizontalPodAutoscaler web-hpa")),
        "{w:?}"
    );
}

#[tokio::test]
async fn cron_mode_is_accepted_and_mixed_modes_are_not() {
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}], "jobs": [{"name": "up", "schedule": "0 8 * * 1-5", "replicas": 5}]}),
    );
    assert!(send(cluster(), "/validate/scalers", &review)
        .await
        .allowed());
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}], "windows": [{"start": 1, "end": 2}], "jobs": [{"name": "up", "schedule": "@hourly", "replicas": 5}]}),
    );
    let reply = send(cluster(), "/validate/scalers", &review).await;
    assert!(
        reply
            .message()
            .contains("spec.windows: Forbidden: may not be combined with spec.jobs"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn hpa_cooperation_needs_patch_on_the_namespace_hpas_and_any_scalable_kind_is_checked() {
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "namespace": "data"}], "windows": [{"start": 9, "end": 17}]}),
    );
    let c = FakeCluster {
        may_scale_in: vec!["team".into()],
        ..Default::default()
    };
    let reply = send(c.clone(), "/validate/scalers", &review).await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(m.contains("spec.scaleTargetRefs[0]: Forbidden: user \"alice\" may not patch statefulsets/scale (apps) \"db\" in namespace \"data\""), "{m}");
    assert!(m.contains("spec.scaleTargetRefs[0]: Forbidden: user \"alice\" may not patch horizontalpodautoscalers (autoscaling) in namespace \"data\""), "{m}");
    assert_eq!(c.sars(), 2, "the scale and the HPAs of the namespace");
    let granted = FakeCluster {
        may_scale_in: vec!["data".into()],
        ..Default::default()
    };
    let reply = send(granted, "/validate/scalers", &review).await;
    assert!(reply.allowed(), "{}", reply.body);
}

#[tokio::test]
async fn a_kind_without_scale_or_unknown_is_denied_at_its_kind() {
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"},
            {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w"}
        ], "windows": [{"start": 9, "end": 17}]}),
    );
    let c = cluster();
    let reply = send(c.clone(), "/validate/scalers", &review).await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(m.contains("spec.scaleTargetRefs[0].kind: Invalid value: \"ConfigMap\": ConfigMap (v1) has no /scale subresource, so it cannot be scaled"), "{m}");
    assert!(m.contains("spec.scaleTargetRefs[1].kind: Invalid value: \"Widget\": the cluster serves no kind \"Widget\" in \"example.com/v1\""), "{m}");
    assert_eq!(
        c.sars(),
        0,
        "nothing is asked about a kind that cannot be scaled"
    );
}

#[tokio::test]
async fn a_kind_with_a_declared_patch_asks_patch_on_the_object_and_a_calendar_its_configmap() {
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}],
        "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled",
        "excludeCalendar": {"name": "holidays"},
        "patches": [
            {"target": {"kind": "ConfigMap"}, "patch": "{metadata: {labels: {asleep: \"yes\"}}}"},
            {"target": {"group": "example.com", "kind": "Widget"}, "patch": "[{op: remove, path: /spec/x}]"}
        ]}),
    );
    let c = cluster();
    let reply = send(c.clone(), "/validate/scalers", &review).await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(m.contains("spec.scaleTargetRefs[0]: Forbidden: user \"alice\" may not patch configmaps \"settings\" in namespace \"team\""), "{m}");
    assert!(m.contains("spec.excludeCalendar.name: Forbidden: user \"alice\" may not get configmaps \"holidays\" in namespace \"team\""), "{m}");
    assert!(
        !m.contains("has no /scale"),
        "a declared patch makes it a target: {m}"
    );
    let may = |name: &str| vec![("team".to_string(), name.to_string())];
    let granted = FakeCluster {
        may_get_config_maps: may("holidays"),
        may_patch_config_maps: may("settings"),
        ..cluster()
    };
    let reply = send(granted, "/validate/scalers", &review).await;
    assert!(reply.allowed(), "{}", reply.body);
    let warnings = reply.warnings();
    assert!(
        warnings.iter().any(|w| w
            .starts_with("spec.patches[1].target: no target in spec.scaleTargetRefs is a Widget")),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn a_wrong_kind_is_rejected_on_every_endpoint() {
    for path in ["/validate/scalers", "/mutate/scalers"] {
        let reply = send(cluster(), path, &fixture("pod-create.json")).await;
        assert!(!reply.allowed());
        assert!(
            reply
                .message()
                .contains("this endpoint admits Scaler.kubesteer.io, not /Pod"),
            "{}",
            reply.body
        );
    }
    let reply = send(
        cluster(),
        "/validate/welcomes",
        &fixture("scaler-create.json"),
    )
    .await;
    assert!(!reply.allowed());
    assert!(
        reply
            .message()
            .contains("admits Welcome.kubesteer.io, not kubesteer.io/Scaler"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn an_object_being_deleted_may_drop_its_finalizers_even_if_invalid() {
    let mut review = fixture("memcached-update.json");
    review["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    // Stored invalid (the webhook was down); the update only drops finalizers.
    review["request"]["oldObject"]["spec"] = review["request"]["object"]["spec"].clone();
    for path in ["/mutate/memcacheds", "/validate/memcacheds"] {
        let reply = send(cluster(), path, &review).await;
        assert!(reply.allowed(), "{}", reply.body);
        assert!(reply.patch().is_none());
    }
}

#[tokio::test]
async fn an_object_being_deleted_cannot_have_its_spec_edited_into_nonsense() {
    let mut review = fixture("memcached-update.json");
    review["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_ne!(
        review["request"]["object"]["spec"],
        review["request"]["oldObject"]["spec"]
    );
    let reply = send(cluster(), "/validate/memcacheds", &review).await;
    assert!(!reply.allowed(), "{}", reply.body);
    assert!(reply.message().contains("spec.size"), "{}", reply.body);
    // Defaults are not added to an object on its way out.
    let reply = send(cluster(), "/mutate/memcacheds", &review).await;
    assert!(reply.allowed() && reply.patch().is_none(), "{}", reply.body);
}

#[tokio::test]
async fn delete_is_always_allowed() {
    let mut review = fixture("memcached-update.json");
    review["request"]["operation"] = json!("DELETE");
    review["request"]["object"] = json!(null);
    assert!(send(cluster(), "/validate/memcacheds", &review)
        .await
        .allowed());
}

#[tokio::test]
async fn a_wrongly_typed_field_is_named_not_panicked_on() {
    let review = with_spec("memcached-create.json", json!({"size": "three"}));
    for path in ["/mutate/memcacheds", "/validate/memcacheds"] {
        let reply = send(cluster(), path, &review).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(!reply.allowed());
        assert!(
            reply.message().contains("spec.size: Invalid value"),
            "{}",
            reply.body
        );
    }
}

#[tokio::test]
async fn malformed_bodies_get_400_with_a_reason() {
    for body in [&b"not json"[..], b"{}", b"[]", b"{\"request\": 5}", b""] {
        let reply = send_raw(cluster(), "/validate/scalers", body.to_vec()).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{:?} -> {}",
            String::from_utf8_lossy(body),
            reply.body
        );
        assert!(
            reply.body.starts_with("not an AdmissionReview"),
            "{}",
            reply.body
        );
    }
    let reply = send(cluster(), "/validate/pods", &fixture("scaler-create.json")).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let mut review = fixture("memcached-create.json");
    review["request"]["object"]["metadata"]["annotations"] =
        json!({"big": "x".repeat(kubesteer_webhook::admission::MAX_BODY_BYTES)});
    let reply = send(cluster(), "/validate/memcacheds", &review).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn metrics_count_reviews_by_kind_operation_and_result() {
    let state = Arc::new(kubesteer_webhook::AppState::new(cluster()));
    // A watch of the cluster that has not listed yet.
    let watch = state.health.watch("Deployment");
    let app = kubesteer_webhook::router(state.clone());
    let body = serde_json::to_vec(&fixture("memcached-update.json")).unwrap();
    let req = Request::post("/validate/memcacheds")
        .body(Body::from(body))
        .unwrap();
    assert_eq!(
        app.clone().oneshot(req).await.unwrap().status(),
        StatusCode::OK
    );
    let res = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let text =
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(
        text.contains("kubesteer_webhook_reviews_total{kind=\"Memcached\",endpoint=\"validate\",operation=\"UPDATE\",result=\"denied\"} 1"),
        "{text}"
    );
    assert!(text.contains("kubesteer_webhook_review_duration_seconds_count{kind=\"Memcached\",endpoint=\"validate\"} 1"), "{text}");
    let res = app
        .clone()
        .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let res = app
        .clone()
        .oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "a watch has not listed yet"
    );
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "the Deployment watch has not listed yet");
    watch.observe(&Ok(kube::runtime::watcher::Event::<()>::InitDone));
    let res = app
        .oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK, "every watch has listed");
}

#[tokio::test]
async fn a_same_namespace_target_needs_permission_too() {
    let denied = FakeCluster {
        may_scale_in: vec![],
        ..cluster()
    };
    let reply = send(
        denied.clone(),
        "/validate/scalers",
        &fixture("scaler-create.json"),
    )
    .await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(
        m.contains("spec.scaleTargetRefs[0]: Forbidden: user \"alice\" may not patch deployments/scale (apps) \"web\" in namespace \"team\""),
        "{m}"
    );
    let asked = denied.asked.lock().unwrap().clone();
    assert_eq!(
        asked,
        vec![(
            Some("alice".to_string()),
            kubesteer_api::access::Access::scale_deployment("team", "web")
        )],
        "one review, with the target's name"
    );
    let reply = send(
        cluster(),
        "/validate/scalers",
        &fixture("scaler-create.json"),
    )
    .await;
    assert!(reply.allowed(), "{}", reply.body);
    assert!(reply.warnings().is_empty(), "{:?}", reply.warnings());
}

#[tokio::test]
async fn every_target_is_checked_and_the_denial_names_the_one_missing() {
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "prod"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "db"}], "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled"}),
    );
    let c = cluster();
    let reply = send(c.clone(), "/validate/scalers", &review).await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(m.contains("spec.scaleTargetRefs[1]: Forbidden: user \"alice\" may not patch deployments/scale (apps) \"api\" in namespace \"prod\""), "{m}");
    assert!(
        !m.contains("spec.scaleTargetRefs[0]") && !m.contains("spec.scaleTargetRefs[2]"),
        "{m}"
    );
    assert_eq!(c.sars(), 3, "one review per target");
}

#[tokio::test]
async fn a_failed_review_denies_and_says_why() {
    let c = FakeCluster {
        sar_error: Some("apiserver unreachable".into()),
        ..cluster()
    };
    let reply = send(c, "/validate/scalers", &fixture("scaler-create.json")).await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(
        m.contains("spec.scaleTargetRefs[0]: Forbidden: could not check whether user \"alice\" may patch deployments/scale (apps) \"web\" in namespace \"team\": apiserver unreachable"),
        "{m}"
    );
}

#[tokio::test]
async fn granted_permissions_are_cached_and_denials_briefly() {
    let c = cluster();
    let state = state(c.clone());
    let body = serde_json::to_vec(&fixture("scaler-create.json")).unwrap();
    for _ in 0..3 {
        assert!(send_to(&state, "/validate/scalers", body.clone())
            .await
            .allowed());
    }
    assert_eq!(c.sars(), 1, "the grant is reused");
    assert_eq!(state.permissions.len().await, 1);
    let mut bob = fixture("scaler-create.json");
    bob["request"]["userInfo"]["username"] = json!("bob");
    let bob = serde_json::to_vec(&bob).unwrap();
    assert!(send_to(&state, "/validate/scalers", bob).await.allowed());
    assert_eq!(c.sars(), 2, "another user is asked for");
    let mut groups = fixture("scaler-create.json");
    groups["request"]["userInfo"]["groups"] = json!(["system:authenticated", "admins"]);
    let groups = serde_json::to_vec(&groups).unwrap();
    assert!(send_to(&state, "/validate/scalers", groups).await.allowed());
    assert_eq!(c.sars(), 3, "other groups are another identity");

    let denied = FakeCluster {
        may_scale_in: vec![],
        ..cluster()
    };
    let state = kubesteer_webhook::admission::AppState::new(denied.clone());
    let state = Arc::new(state);
    for _ in 0..2 {
        assert!(!send_to(&state, "/validate/scalers", body.clone())
            .await
            .allowed());
    }
    assert_eq!(
        denied.sars(),
        1,
        "a denial is kept for a fifth of the TTL (2 s), so a new grant counts within it"
    );
}

/// A cluster where alice may scale every Deployment in `team`, and alice.
fn alice_may_scale_in_team() -> (FakeCluster, k8s_openapi::api::authentication::v1::UserInfo) {
    let cluster = FakeCluster {
        may_scale_in: vec!["team".into()],
        ..Default::default()
    };
    let user = k8s_openapi::api::authentication::v1::UserInfo {
        username: Some("alice".into()),
        ..Default::default()
    };
    (cluster, user)
}

#[tokio::test]
async fn the_permission_cache_is_bounded_and_expires() {
    use kubesteer_api::access::Access;
    use kubesteer_webhook::permissions::Permissions;
    let (c, user) = alice_may_scale_in_team();
    let ttl = std::time::Duration::from_millis(200);
    let cache = Permissions::new(ttl, 2);
    for name in ["a", "b"] {
        let access = Access::scale_deployment("team", name);
        assert_eq!(cache.check(&c, &user, &access).await, Ok(true));
    }
    let granted = std::time::Instant::now();
    let access = Access::scale_deployment("team", "c");
    assert_eq!(cache.check(&c, &user, &access).await, Ok(true));
    assert_eq!(cache.len().await, 2, "never more than the capacity");
    let asked = c.sars();
    cache
        .check(&c, &user, &Access::scale_deployment("team", "c"))
        .await
        .unwrap();
    assert_eq!(c.sars(), asked, "the newest is kept");
    // Asked again in the last fifth of the grant's TTL, and not before.
    let deadline = granted + std::time::Duration::from_secs(5);
    loop {
        cache
            .check(&c, &user, &Access::scale_deployment("team", "c"))
            .await
            .unwrap();
        let checked = std::time::Instant::now();
        if c.sars() > asked {
            assert!(
                checked.duration_since(granted) >= ttl - ttl / 5,
                "a grant was asked again {:?} after it was given, before the last fifth of its TTL",
                checked.duration_since(granted)
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a grant in use was never asked again"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(c.sars(), asked + 1, "a grant in use is asked again once");
    cache
        .check(&c, &user, &Access::scale_deployment("team", "c"))
        .await
        .unwrap();
    assert_eq!(c.sars(), asked + 1, "the answer is a fresh grant");
}

#[tokio::test]
async fn a_grant_asked_again_before_it_expires_stands_on_errors_and_falls_on_a_denial() {
    use kubesteer_api::access::Access;
    use kubesteer_webhook::permissions::Permissions;
    let (granting, user) = alice_may_scale_in_team();
    let failing = FakeCluster {
        sar_error: Some("the apiserver did not answer".into()),
        asked: granting.asked.clone(),
        ..Default::default()
    };
    let denying = FakeCluster {
        asked: granting.asked.clone(),
        ..Default::default()
    };
    let ttl = std::time::Duration::from_secs(1);
    let cache = Permissions::new(ttl, 16);
    // Each attempt uses a grant of its own; one that a slow machine let expire before its
    // checks were done proves nothing, and is tried again.
    for attempt in 0..5 {
        let access = Access::scale_deployment("team", &format!("web-{attempt}"));
        let granted = std::time::Instant::now();
        assert_eq!(cache.check(&granting, &user, &access).await, Ok(true));
        std::thread::sleep(ttl - ttl / 8);
        let asked = granting.sars();
        let on_error = cache.check(&failing, &user, &access).await;
        let again = cache.check(&failing, &user, &access).await;
        let on_denial = cache.check(&denying, &user, &access).await;
        let after_denial = cache.check(&failing, &user, &access).await;
        if granted.elapsed() >= ttl {
            continue;
        }
        assert_eq!(
            on_error,
            Ok(true),
            "a failed check leaves a valid grant standing"
        );
        assert_eq!(again, Ok(true));
        assert_eq!(
            granting.sars(),
            asked + 3,
            "each check in the last fifth asks again, until a denial"
        );
        assert_eq!(on_denial, Ok(false), "a denial counts at once");
        assert_eq!(
            after_denial,
            Ok(false),
            "and takes the grant away; it is kept briefly, not asked again"
        );
        return;
    }
    panic!("no attempt finished its checks within the grant's TTL");
}

#[tokio::test]
async fn nothing_about_a_target_the_user_may_not_scale_is_told() {
    let mut c = FakeCluster::default();
    c.claims
        .insert(("prod".into(), "web".into()), "prod/nightly".into());
    c.hpas
        .insert(("prod".into(), "api".into()), "api-hpa".into());
    let review = with_spec(
        "scaler-create.json",
        json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "prod"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "prod"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gone", "namespace": "prod"}], "windows": [{"start": 9, "end": 17}], "hpaCooperation": "Disabled"}),
    );
    let reply = send(c, "/validate/scalers", &review).await;
    assert!(!reply.allowed());
    assert!(reply.warnings().is_empty(), "{:?}", reply.warnings());
    let m = reply.message();
    for secret in [
        "does not exist",
        "nightly",
        "HorizontalPodAutoscaler",
        "already scaled",
    ] {
        assert!(!m.contains(secret), "{secret:?} told in {m}");
    }
    assert_eq!(
        m.matches("Forbidden: user \"alice\" may not patch").count(),
        3,
        "{m}"
    );
}

fn welcome_with_secret(secret: &str) -> serde_json::Value {
    with_spec(
        "welcome-create.json",
        json!({"name": "kubesteer", "passwordSecretRef": {"name": secret, "key": "pw"}}),
    )
}

#[tokio::test]
async fn a_welcome_secret_ref_needs_get_on_that_secret() {
    let reply = send(
        cluster(),
        "/validate/welcomes",
        &welcome_with_secret("creds"),
    )
    .await;
    assert!(!reply.allowed());
    let m = reply.message();
    assert!(
        m.contains("Welcome.kubesteer.io \"hello\" is invalid: spec.passwordSecretRef.name: Forbidden: user \"alice\" may not get secrets \"creds\" in namespace \"team\""),
        "{m}"
    );
    let c = FakeCluster {
        may_get_secrets: vec![("team".into(), "creds".into())],
        ..cluster()
    };
    let reply = send(
        c.clone(),
        "/validate/welcomes",
        &welcome_with_secret("creds"),
    )
    .await;
    assert!(reply.allowed(), "{}", reply.body);
    assert_eq!(
        *c.asked.lock().unwrap(),
        vec![(
            Some("alice".to_string()),
            kubesteer_api::access::Access::get_secret("team", "creds")
        )]
    );
    let c = cluster();
    let reply = send(
        c.clone(),
        "/validate/welcomes",
        &fixture("welcome-create.json"),
    )
    .await;
    assert!(reply.allowed(), "{}", reply.body);
    assert_eq!(c.sars(), 0, "no ref, nothing to ask");
}

#[tokio::test]
async fn a_welcome_update_checks_the_secret_only_when_the_ref_changes() {
    let update = |old: &str, new: &str| {
        let mut review = welcome_with_secret(new);
        review["request"]["operation"] = json!("UPDATE");
        review["request"]["oldObject"] = welcome_with_secret(old)["request"]["object"].clone();
        review["request"]["object"]["spec"]["replicas"] = json!(2);
        review
    };
    let c = cluster();
    let reply = send(c.clone(), "/validate/welcomes", &update("creds", "creds")).await;
    assert!(
        reply.allowed(),
        "an unrelated edit by another user: {}",
        reply.body
    );
    assert_eq!(c.sars(), 0);
    let reply = send(
        c.clone(),
        "/validate/welcomes",
        &update("creds", "admin-token"),
    )
    .await;
    assert!(!reply.allowed());
    assert!(
        reply
            .message()
            .contains("spec.passwordSecretRef.name: Forbidden: user \"alice\" may not get secrets \"admin-token\""),
        "{}",
        reply.message()
    );
    let mut no_old = update("creds", "creds");
    no_old["request"]["oldObject"] = json!(null);
    assert!(!send(cluster(), "/validate/welcomes", &no_old)
        .await
        .allowed());
}

#[tokio::test]
async fn the_image_policy_refuses_other_images_on_create_and_on_change_only() {
    let mut state = kubesteer_webhook::AppState::new(cluster());
    state.images = kubesteer_api::access::ImagePolicy::new([
        "registry.example.com/".to_string(),
        "hashicorp/http-echo:".to_string(),
    ]);
    let state = Arc::new(state);
    let send = |review: serde_json::Value| {
        let state = state.clone();
        async move {
            send_to(
                &state,
                "/validate/welcomes",
                serde_json::to_vec(&review).unwrap(),
            )
            .await
        }
    };

    let evil = with_spec(
        "welcome-create.json",
        json!({"name": "x", "image": "evil.example/exfiltrate:1"}),
    );
    let reply = send(evil.clone()).await;
    assert!(!reply.allowed());
    assert!(
        reply.message().contains("spec.image")
            && reply
                .message()
                .contains("\"evil.example/exfiltrate:1\" is not allowed"),
        "{}",
        reply.message()
    );
    // The default image is checked too, and this policy allows it.
    let default = with_spec("welcome-create.json", json!({"name": "x"}));
    assert!(send(default).await.allowed());
    let ours = with_spec(
        "welcome-create.json",
        json!({"name": "x", "image": "registry.example.com/team/hello:2"}),
    );
    assert!(send(ours.clone()).await.allowed());

    // An UPDATE that keeps an image admitted before the policy is allowed; one that changes to
    // a refused image is not.
    let mut kept = evil.clone();
    kept["request"]["operation"] = json!("UPDATE");
    kept["request"]["oldObject"] = evil["request"]["object"].clone();
    kept["request"]["object"]["metadata"]["labels"] = json!({"edited": "yes"});
    assert!(send(kept).await.allowed());
    let mut changed = evil.clone();
    changed["request"]["operation"] = json!("UPDATE");
    changed["request"]["oldObject"] = ours["request"]["object"].clone();
    assert!(!send(changed).await.allowed());
}

#[tokio::test]
async fn an_application_gets_its_defaults_outside_its_env_list() {
    let review = fixture("application-create.json");
    let reply = send(cluster(), "/mutate/applications", &review).await;
    let object = applied(&review, &reply.patch().expect("a patch"));
    let spec = &object["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["port"], 8080);
    assert_eq!(spec["servicePort"], 80);
    assert_eq!(spec["ingress"]["path"], "/");
    assert_eq!(spec["ingress"]["pathType"], "Prefix");
    assert_eq!(spec["env"], review["request"]["object"]["spec"]["env"]);
}

#[tokio::test]
async fn an_application_reads_only_what_its_author_may_and_hears_of_ingresses_it_may_read() {
    let review = fixture("application-create.json");
    let base = FakeCluster {
        may_get_secrets: vec![("team".into(), "pw".into())],
        ingress_classes: vec!["nginx".into()],
        ingresses: vec![(
            "team".into(),
            "legacy".into(),
            "example.foo.com".into(),
            "/".into(),
        )],
        ..cluster()
    };
    let validate = |c: FakeCluster| {
        let review = review.clone();
        async move { send(c, "/validate/applications", &review).await }
    };

    // The Ingress on the same host is not the author's to read: not a word about it.
    let reply = validate(base.clone()).await;
    assert!(reply.allowed(), "{}", reply.body);
    assert!(reply.warnings().is_empty(), "{:?}", reply.warnings());

    let may_read = FakeCluster {
        may_get_ingresses: vec![("team".into(), "legacy".into())],
        ..base.clone()
    };
    let reply = validate(may_read).await;
    assert!(reply.allowed(), "{}", reply.body);
    assert_eq!(
        reply.warnings(),
        vec!["spec.ingress.host: Ingress team/legacy already serves host \"example.foo.com\" path \"/\"; the Ingress controller picks one of them"]
    );

    let no_class = FakeCluster {
        ingress_classes: Vec::new(),
        ..base.clone()
    };
    let reply = validate(no_class).await;
    assert!(reply.allowed(), "{}", reply.body);
    assert!(
        reply.warnings()[0].starts_with("spec.ingress.className: no IngressClass \"nginx\""),
        "{:?}",
        reply.warnings()
    );

    let no_secret = FakeCluster {
        may_get_secrets: Vec::new(),
        ..base
    };
    let reply = validate(no_secret).await;
    assert!(!reply.allowed());
    assert!(
        reply.message().contains("spec.env[0].valueFrom.secretKeyRef.name: Forbidden: user \"alice\" may not get secrets \"pw\" in namespace \"team\""),
        "{}",
        reply.message()
    );
}

/// A Scaler UPDATE by a user who may edit Scalers but scale nothing: `old` and `new` specs.
fn scaler_update(old: serde_json::Value, new: serde_json::Value) -> serde_json::Value {
    let mut review = with_spec("scaler-create.json", new);
    review["request"]["operation"] = json!("UPDATE");
    let mut before = review["request"]["object"].clone();
    before["spec"] = old;
    review["request"]["oldObject"] = before;
    review
}

#[tokio::test]
async fn a_metadata_only_scaler_update_is_admitted_without_asking_and_a_spec_change_is_checked() {
    let spec = json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                      "windows": [{"start": 9, "end": 17}], "timeZone": "UTC", "suspend": false});
    // alice may scale nothing anywhere: she may still label the Scaler, and the controller may
    // add its finalizer, whatever either may do to the targets.
    let nobody = FakeCluster::default();
    let mut labelled = scaler_update(spec.clone(), spec.clone());
    labelled["request"]["object"]["metadata"]["labels"] = json!({"team": "web"});
    labelled["request"]["object"]["metadata"]["finalizers"] =
        json!([kubesteer_api::keys::RESTORE_TARGETS_FINALIZER]);
    for path in ["/mutate/scalers", "/validate/scalers"] {
        let reply = send(nobody.clone(), path, &labelled).await;
        assert!(reply.allowed(), "{path}: {}", reply.body);
        assert!(reply.patch().is_none(), "{path}: {}", reply.body);
    }
    assert_eq!(nobody.sars(), 0, "no SubjectAccessReview for metadata");
    // A spec admitted long ago whose override has expired since: still labelable.
    let mut expired = spec.clone();
    expired["override"] = json!({"replicas": 2, "until": "2020-01-01T00:00:00Z"});
    let reply = send(
        nobody.clone(),
        "/validate/scalers",
        &scaler_update(expired.clone(), expired),
    )
    .await;
    assert!(reply.allowed(), "{}", reply.body);
    // A change of the windows changes what happens to the targets: every target is asked again.
    let mut later = spec.clone();
    later["windows"] = json!([{"start": 10, "end": 18}]);
    let reply = send(
        nobody.clone(),
        "/validate/scalers",
        &scaler_update(spec.clone(), later.clone()),
    )
    .await;
    assert!(!reply.allowed(), "{}", reply.body);
    let m = reply.message();
    assert!(m.contains("spec.scaleTargetRefs[0]: Forbidden: user \"alice\" may not patch deployments/scale (apps) \"web\" in namespace \"team\""), "{m}");
    assert!(
        m.contains("may not patch horizontalpodautoscalers (autoscaling) in namespace \"team\""),
        "{m}"
    );
    // Someone who may scale there may make that change.
    let reply = send(cluster(), "/validate/scalers", &scaler_update(spec, later)).await;
    assert!(reply.allowed(), "{}", reply.body);
}

#[tokio::test]
async fn a_scalers_author_is_recorded_by_the_webhook_and_cannot_be_forged() {
    use kubesteer_api::keys::annotation::AUTHOR;
    let spec = json!({"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                      "windows": [{"start": 9, "end": 17}], "timeZone": "UTC", "suspend": false});
    let patched = |review: &serde_json::Value, reply: &Reply| {
        let mut object = review["request"]["object"].clone();
        if let Some(patch) = reply.patch() {
            json_patch::patch(&mut object, &patch).unwrap();
        }
        object
    };
    // Created: the request's user is the author, as JSON of their userInfo.
    let create = with_spec("scaler-create.json", spec.clone());
    let reply = send(cluster(), "/mutate/scalers", &create).await;
    assert!(reply.allowed(), "{}", reply.body);
    let stored = patched(&create, &reply);
    let author = stored["metadata"]["annotations"][AUTHOR]
        .as_str()
        .unwrap_or_default();
    let user: serde_json::Value = serde_json::from_str(author).unwrap();
    assert_eq!(user["username"], create["request"]["userInfo"]["username"]);

    // Someone else labels it and writes themselves in as the author: the mutation puts the
    // author back, and validation refuses the forged value should anything write it after.
    let mut forged = scaler_update(spec.clone(), spec.clone());
    forged["request"]["oldObject"] = stored.clone();
    forged["request"]["object"] = stored.clone();
    forged["request"]["object"]["metadata"]["labels"] = json!({"team": "web"});
    forged["request"]["object"]["metadata"]["annotations"][AUTHOR] =
        json!(r#"{"username":"cluster-admin","groups":["system:masters"]}"#);
    let reply = send(cluster(), "/mutate/scalers", &forged).await;
    assert!(reply.allowed(), "{}", reply.body);
    assert_eq!(
        patched(&forged, &reply)["metadata"]["annotations"][AUTHOR],
        author
    );
    let reply = send(cluster(), "/validate/scalers", &forged).await;
    assert!(!reply.allowed(), "{}", reply.body);
    assert!(
        reply
            .message()
            .contains("metadata.annotations[kubesteer.io/author]: Forbidden"),
        "{}",
        reply.message()
    );
}

#[tokio::test]
async fn identical_checks_at_once_cost_one_review_and_a_denial_is_kept_briefly() {
    use kubesteer_api::access::Access;
    use kubesteer_webhook::permissions::Permissions;
    let (granting, user) = alice_may_scale_in_team();
    let slow = FakeCluster {
        sar_delay: std::time::Duration::from_millis(50),
        ..granting.clone()
    };
    let cache = Permissions::new(std::time::Duration::from_secs(10), 64);
    // 50 reviews of the same question at once (a flood of one forged review, say): one asks.
    let access = Access::scale_deployment("team", "web");
    let answers =
        futures::future::join_all((0..50).map(|_| cache.check(&slow, &user, &access))).await;
    assert!(answers.iter().all(|a| *a == Ok(true)), "{answers:?}");
    assert_eq!(
        slow.sars(),
        1,
        "one SubjectAccessReview for 50 identical checks"
    );
    // A denied question, asked at once by many, is asked once and kept for a fifth of the TTL.
    let denied = Access::scale_deployment("prod", "web");
    let answers =
        futures::future::join_all((0..20).map(|_| cache.check(&slow, &user, &denied))).await;
    assert!(answers.iter().all(|a| *a == Ok(false)), "{answers:?}");
    assert_eq!(slow.sars(), 2);
    let short = Permissions::new(std::time::Duration::from_millis(500), 64);
    assert_eq!(short.check(&granting, &user, &denied).await, Ok(false));
    assert_eq!(short.check(&granting, &user, &denied).await, Ok(false));
    assert_eq!(granting.sars(), 3, "the denial is kept");
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert_eq!(short.check(&granting, &user, &denied).await, Ok(false));
    assert_eq!(
        granting.sars(),
        4,
        "and asked again after a fifth of the TTL (100 ms)"
    );
    // Different users, or different questions, are never folded together.
    let bob = k8s_openapi::api::authentication::v1::UserInfo {
        username: Some("bob".into()),
        ..user.clone()
    };
    let answers = futures::future::join_all([
        cache.check(&slow, &bob, &access),
        cache.check(&slow, &user, &Access::scale_deployment("team", "api")),
    ])
    .await;
    assert_eq!(answers, [Ok(true), Ok(true)]);
    assert_eq!(slow.sars(), 6);
}

#[tokio::test]
async fn an_application_with_an_ingress_needs_its_authors_right_to_create_one() {
    let review = fixture("application-create.json");
    assert!(review["request"]["object"]["spec"]["ingress"].is_object());
    let no_ingresses = FakeCluster {
        may_get_secrets: vec![("team".into(), "pw".into())],
        ingress_classes: vec!["nginx".into()],
        may_create_ingresses_in: Vec::new(),
        ..cluster()
    };
    let reply = send(no_ingresses, "/validate/applications", &review).await;
    assert!(!reply.allowed(), "{}", reply.body);
    assert!(
        reply.message().contains("spec.ingress: Forbidden: user \"alice\" may not create ingresses (networking.k8s.io) in namespace \"team\""),
        "{}",
        reply.message()
    );
}

#[tokio::test]
async fn implementation_specific_ingress_paths_are_refused_unless_the_cluster_allows_them() {
    let mut review = fixture("application-create.json");
    review["request"]["object"]["spec"]["ingress"]["pathType"] = json!("ImplementationSpecific");
    let c = FakeCluster {
        may_get_secrets: vec![("team".into(), "pw".into())],
        ingress_classes: vec!["nginx".into()],
        ..cluster()
    };
    let reply = send(c.clone(), "/validate/applications", &review).await;
    assert!(!reply.allowed(), "{}", reply.body);
    assert!(
        reply
            .message()
            .contains("spec.ingress.pathType: Forbidden: ImplementationSpecific"),
        "{}",
        reply.message()
    );
    let mut allowing = kubesteer_webhook::admission::AppState::new(c);
    allowing.implementation_specific_paths = true;
    let body = serde_json::to_vec(&review).unwrap();
    let reply = send_to(&Arc::new(allowing), "/validate/applications", body).await;
    assert!(reply.allowed(), "{}", reply.body);
}

#[tokio::test]
async fn a_host_belongs_to_the_namespace_that_serves_it_first() {
    let review = fixture("application-create.json");
    let taken = FakeCluster {
        may_get_secrets: vec![("team".into(), "pw".into())],
        ingress_classes: vec!["nginx".into()],
        ingresses: vec![(
            "shop".into(),
            "login".into(),
            "example.foo.com".into(),
            "/login".into(),
        )],
        ..cluster()
    };
    // Served from namespace shop first: denied, without naming what the author may not read.
    let reply = send(taken.clone(), "/validate/applications", &review).await;
    assert!(!reply.allowed(), "{}", reply.body);
    let m = reply.message();
    assert!(m.contains("spec.ingress.host: Forbidden: host \"example.foo.com\" is served by an Ingress of another namespace"), "{m}");
    assert!(!m.contains("shop"), "{m}");
    // Named to an author who may read it.
    let readable = FakeCluster {
        may_get_ingresses: vec![("shop".into(), "login".into())],
        ..taken.clone()
    };
    let m = send(readable, "/validate/applications", &review)
        .await
        .message();
    assert!(m.contains("is served by Ingress shop/login"), "{m}");
    // Where the cluster allows sharing, admitted.
    let mut sharing = kubesteer_webhook::admission::AppState::new(taken.clone());
    sharing.host_sharing = true;
    let body = serde_json::to_vec(&review).unwrap();
    let reply = send_to(&Arc::new(sharing), "/validate/applications", body).await;
    assert!(reply.allowed(), "{}", reply.body);
    // An UPDATE that keeps the host is not asked again (the object was admitted before).
    let mut update = review.clone();
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    update["request"]["object"]["spec"]["replicas"] = json!(3);
    let reply = send(taken, "/validate/applications", &update).await;
    assert!(reply.allowed(), "{}", reply.body);
}

#[tokio::test]
async fn a_new_host_is_claimed_once_and_another_namespace_is_told_it_is_taken() {
    let review = fixture("application-create.json");
    let c = FakeCluster {
        may_get_secrets: vec![("team".into(), "pw".into()), ("other".into(), "pw".into())],
        may_create_ingresses_in: vec!["team".into(), "other".into()],
        ingress_classes: vec!["nginx".into()],
        ..cluster()
    };
    // A dry run from another namespace claims nothing.
    let mut other = review.clone();
    other["request"]["namespace"] = json!("other");
    other["request"]["object"]["metadata"]["namespace"] = json!("other");
    let mut dry = other.clone();
    dry["request"]["dryRun"] = json!(true);
    let reply = send(c.clone(), "/validate/applications", &dry).await;
    assert!(reply.allowed(), "{}", reply.body);
    assert!(c.host_claims.lock().unwrap().is_empty());
    // The first namespace to ask gets the host; the next is denied on the field.
    let reply = send(c.clone(), "/validate/applications", &review).await;
    assert!(reply.allowed(), "{}", reply.body);
    let holder = c
        .host_claims
        .lock()
        .unwrap()
        .get("example.foo.com")
        .cloned();
    assert_eq!(holder.as_deref(), Some("team"));
    let reply = send(c.clone(), "/validate/applications", &other).await;
    assert!(!reply.allowed(), "{}", reply.body);
    let m = reply.message();
    assert!(
        m.contains(
            "spec.ingress.host: Forbidden: host \"example.foo.com\" belongs to another namespace"
        ),
        "{m}"
    );
    // Where the cluster allows sharing, nothing is claimed or asked.
    let mut sharing = kubesteer_webhook::admission::AppState::new(c.clone());
    sharing.host_sharing = true;
    let body = serde_json::to_vec(&other).unwrap();
    let reply = send_to(&Arc::new(sharing), "/validate/applications", body).await;
    assert!(reply.allowed(), "{}", reply.body);
    // When the claim cannot be asked, the review is denied, naming the field and the reason.
    let failing = FakeCluster {
        claim_error: Some("hostclaims.kubesteer.io is forbidden".into()),
        ..c
    };
    let m = send(failing, "/validate/applications", &other)
        .await
        .message();
    assert!(m.contains("spec.ingress.host: Forbidden: could not check which namespace host \"example.foo.com\" belongs to: hostclaims.kubesteer.io is forbidden"), "{m}");
}
