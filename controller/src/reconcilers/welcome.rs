//! Welcome: a web app that says "Hello `<name>`", its Service, and a Secret for a plain password.
use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Probe, Secret,
    SecretKeySelector, Service, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use kubesteer_api::keys::{annotation, reason, CONTROLLER_FIELD_MANAGER};
use kubesteer_api::welcome::{ServiceType, PASSWORD_KEY};
use kubesteer_api::{Welcome, WelcomeStatus};
use kubesteer_runtime::queue::Action;

use crate::children::{self, child_meta, ListedPod, NameConflict, Packed};
use crate::reconcilers::{previous_conditions, time, Observed, Owner, Prepared, Rollout};
use crate::{is_status, Context, Error, Result};

pub const KIND: &str = "Welcome";
/// The `app.kubernetes.io/name` of everything a Welcome owns.
pub const APP: &str = "welcome";
/// The distroless "nonroot" uid, which the default image runs fine as.
const APP_UID: i64 = 65532;
const PORT_NAME: &str = "http";

// Secrets are not watched (the controller may not read them), so a deleted or edited credentials
// Secret is put back by this periodic reconcile instead.
const CREDENTIALS_RESYNC: Duration = Duration::from_secs(300);

/// Name of the Secret that keeps a Welcome's plain password.
pub fn secret_name(welcome: &str) -> String {
    format!("{welcome}-credentials")
}

impl Owner for Welcome {
    const KIND: &'static str = KIND;
    const APP: &'static str = APP;
    /// The uid of the credentials Secret, while the Welcome has a plain password.
    type Prepared = Option<String>;

    /// The Secret comes first, so the pods never start with a dangling secretKeyRef.
    async fn prepare(
        &self,
        ctx: &Context,
        ns: &str,
        name: &str,
    ) -> Result<Prepared<Option<String>>> {
        let mut prepared = Prepared::default();
        match secret(self)? {
            Some(s) => match ensure_secret(ctx, self, ns, name, &s).await? {
                Ok((uid, was_created)) => {
                    if was_created {
                        prepared
                            .created
                            .push(format!("Secret {}", secret_name(name)));
                    }
                    prepared.value = Some(uid);
                }
                Err(conflict) => prepared.conflicts.push(conflict),
            },
            None => remove_own_secret(ctx, self, ns, name).await?,
        }
        Ok(prepared)
    }

    fn deployment(&self, credentials_uid: &Option<String>) -> Result<Deployment> {
        deployment(self, credentials_uid.as_deref())
    }

    fn service(&self) -> Result<Service> {
        service(self)
    }

    fn status_from(&self, children: &Observed<'_>, now: DateTime<Utc>) -> WelcomeStatus {
        status(
            self,
            children.namespace,
            children.deployment,
            children.service,
            &children.pods,
            now,
        )
    }

    fn settled(&self, credentials_uid: &Option<String>) -> Action {
        match credentials_uid {
            Some(_) => Action::requeue(CREDENTIALS_RESYNC),
            None => Action::await_change(),
        }
    }

    fn redact(&self, result: Result<Action>) -> Result<Action> {
        redact(result, self.spec.password.as_deref())
    }
}

/// Keeps the password out of an error, which ends up in a Warning event and the log.
fn redact(result: Result<Action>, password: Option<&str>) -> Result<Action> {
    match (result, password) {
        (Err(e), Some(p)) if !p.is_empty() && e.to_string().contains(p) => Err(Error::Redacted {
            label: e.metric_label(),
            message: e.to_string().replace(p, "<redacted>"),
        }),
        (result, _) => result,
    }
}

/// Writes the credentials Secret unread (no `get` allowed), creating or guard-patching only its own.
async fn ensure_secret(
    ctx: &Context,
    welcome: &Welcome,
    ns: &str,
    name: &str,
    desired: &Secret,
) -> Result<Result<(String, bool), NameConflict>> {
    let owner_uid = welcome
        .meta()
        .uid
        .clone()
        .ok_or_else(|| Error::MissingField {
            kind: KIND,
            name: name.to_string(),
            what: "uid",
        })?;
    let secret_name = secret_name(name);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let vouched = ctx
        .caches
        .of(APP)
        .deployments
        .get(&Packed::key(name, ns))
        .map(|p| p.object())
        .transpose()?
        .is_some_and(|d| {
            children::controlled_by(d.meta(), &owner_uid)
                && d.annotations().contains_key(annotation::CREDENTIALS_UID)
        });
    let conflict = || NameConflict::new("Secret", &secret_name);
    let uid_of = |s: Secret| {
        s.metadata.uid.ok_or_else(|| Error::MissingField {
            kind: "Secret",
            name: secret_name.clone(),
            what: "uid",
        })
    };
    // The patch goes first only when the Deployment vouches for a Secret: one request either way.
    let patch = guarded_patch(desired, &owner_uid)?;
    let params = PatchParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    if vouched {
        match secrets.patch(&secret_name, &params, &patch).await {
            Ok(s) => return Ok(Ok((uid_of(s)?, false))),
            // Deleted: put back below. A failed `test` (422) is decided by the create.
            Err(e) if is_status(&e, 404) || is_status(&e, 422) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match secrets.create(&children::create_params(), desired).await {
        Ok(s) => return Ok(Ok((uid_of(s)?, true))),
        Err(e) if is_status(&e, 409) => {}
        Err(e) => return Err(e.into()),
    }
    // It exists: ours (a cache not filled yet) only if the guarded patch passes its tests.
    match secrets.patch(&secret_name, &params, &patch).await {
        Ok(s) => Ok(Ok((uid_of(s)?, false))),
        Err(e) if is_status(&e, 422) => Ok(Err(conflict())),
        Err(e) => Err(e.into()),
    }
}

/// A JSON patch of data and labels whose `test` ops (422 if failed) require our controller ref.
fn guarded_patch(desired: &Secret, owner_uid: &str) -> Result<Patch<serde_json::Value>> {
    let ops = serde_json::json!([
        {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": owner_uid},
        {"op": "test", "path": "/metadata/ownerReferences/0/controller", "value": true},
        {"op": "add", "path": "/data", "value": desired.data},
        {"op": "add", "path": "/metadata/labels", "value": desired.metadata.labels},
    ]);
    Ok(Patch::Json(serde_json::from_value(ops)?))
}

/// Deletes the credentials Secret once the password is gone, without reading it: only when the
/// live Deployment of this Welcome names its uid, and only if the Secret still has that uid, so a
/// user's own Secret of that name is never touched.
async fn remove_own_secret(ctx: &Context, welcome: &Welcome, ns: &str, name: &str) -> Result<()> {
    let secret_name = secret_name(name);
    if welcome
        .spec
        .password_secret_ref
        .as_ref()
        .is_some_and(|r| r.name == secret_name)
    {
        return Ok(());
    }
    // The cached Deployment will do: the uid precondition below guards against a stale one.
    let Some(live) = ctx
        .caches
        .of(APP)
        .deployments
        .get(&Packed::key(name, ns))
        .map(|p| p.object())
        .transpose()?
    else {
        return Ok(());
    };
    let controlled = live
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == welcome.meta().uid.as_ref());
    let Some(uid) = live
        .annotations()
        .get(annotation::CREDENTIALS_UID)
        .filter(|_| controlled)
    else {
        return Ok(());
    };
    let only_that_secret = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match secrets.delete(&secret_name, &only_that_secret).await {
        Ok(_) => {
            let note = format!("Deleted Secret {secret_name}, as spec.password was removed");
            ctx.publish(welcome, EventType::Normal, reason::DELETED, note)
                .await;
            Ok(())
        }
        // Gone already, or the name now belongs to another Secret (the uid differs): leave it.
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The credentials Secret, when the Welcome has a plain password.
pub fn secret(welcome: &Welcome) -> Result<Option<Secret>> {
    let Some(password) = &welcome.spec.password else {
        return Ok(None);
    };
    let name = welcome.name_any();
    Ok(Some(Secret {
        metadata: child_meta(
            KIND,
            welcome,
            secret_name(&name),
            children::labels(APP, &name),
        )?,
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            PASSWORD_KEY.to_string(),
            ByteString(password.clone().into_bytes()),
        )])),
        ..Secret::default()
    }))
}

/// Whether `image` is hashicorp/http-echo, whose command line sets the text and the port.
fn is_http_echo(image: &str) -> bool {
    let repository = image.split(['@']).next().unwrap_or(image);
    let repository = match repository.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => repository,
    };
    repository == "hashicorp/http-echo" || repository.ends_with("/hashicorp/http-echo")
}

/// The Deployment a Welcome wants; the password only ever enters it as a secretKeyRef to the
/// credentials Secret, whose uid (`credentials_uid`) it then records.
pub fn deployment(welcome: &Welcome, credentials_uid: Option<&str>) -> Result<Deployment> {
    let name = welcome.name_any();
    let spec = &welcome.spec;
    let port = spec.port();
    let mut env = vec![
        EnvVar {
            name: "NAME".into(),
            value: Some(spec.name.clone()),
            ..EnvVar::default()
        },
        EnvVar {
            name: "PORT".into(),
            value: Some(port.to_string()),
            ..EnvVar::default()
        },
    ];
    let password_ref = match (&spec.password, &spec.password_secret_ref) {
        (Some(_), _) => Some((secret_name(&name), PASSWORD_KEY.to_string())),
        (None, Some(r)) => Some((r.name.clone(), r.key.clone())),
        (None, None) => None,
    };
    if let Some((secret, key)) = password_ref {
        env.push(EnvVar {
            name: "PASSWORD".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret,
                    key,
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        });
    }
    let args = is_http_echo(spec.image()).then(|| {
        vec![
            "-listen=:$(PORT)".to_string(),
            "-text=Hello $(NAME)".to_string(),
        ]
    });
    let container = Container {
        name: "welcome".into(),
        image: Some(spec.image().to_string()),
        args,
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.into()),
            container_port: port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/".into()),
                port: IntOrString::String(PORT_NAME.into()),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(10),
            ..Probe::default()
        }),
        liveness_probe: Some(children::tcp_probe(PORT_NAME)),
        security_context: Some(children::restricted_security_context(APP_UID)),
        ..Container::default()
    };
    let mut metadata = child_meta(KIND, welcome, name.clone(), children::labels(APP, &name))?;
    if let (Some(_), Some(uid)) = (&spec.password, credentials_uid) {
        metadata.annotations = Some(BTreeMap::from([(
            annotation::CREDENTIALS_UID.to_string(),
            uid.to_string(),
        )]));
    }
    Ok(children::deployment(
        metadata,
        APP,
        spec.replicas(),
        container,
    ))
}

/// The Service a Welcome wants, of its serviceType, on its port.
pub fn service(welcome: &Welcome) -> Result<Service> {
    let shape = ServiceSpec {
        type_: Some(welcome.spec.service_type().as_str().into()),
        ..ServiceSpec::default()
    };
    children::service(KIND, welcome, APP, welcome.spec.port(), PORT_NAME, shape)
}

/// The status a Welcome reports, from its Deployment, its live pods and its Service.
pub fn status(
    welcome: &Welcome,
    ns: &str,
    deployment: &Deployment,
    service: &Service,
    pods: &[ListedPod],
    now: chrono::DateTime<chrono::Utc>,
) -> WelcomeStatus {
    let generation = welcome.meta().generation;
    let rollout = Rollout::of(deployment, welcome.spec.replicas()).with_pods(deployment, pods);
    let ready = rollout.ready;
    let ready_condition =
        rollout.ready_condition(generation, time(now), previous_conditions(welcome));
    let node_port = match welcome.spec.service_type() {
        ServiceType::ClusterIP => None,
        ServiceType::NodePort | ServiceType::LoadBalancer => service
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .and_then(|p| p.first())
            .and_then(|p| p.node_port),
    };
    WelcomeStatus {
        ready_replicas: Some(ready),
        service_url: Some(format!(
            "http://{}.{ns}.svc:{}",
            welcome.name_any(),
            welcome.spec.port()
        )),
        node_port,
        observed_generation: generation,
        conditions: vec![ready_condition],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, Call};
    use crate::reconcilers::{reconcile, NAME_CONFLICT_REQUEUE};
    use serde_json::json;
    use std::sync::Arc;

    const SECRET: &str = "hunter2-is-not-a-password";

    fn welcome(spec: serde_json::Value) -> Welcome {
        serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1alpha1", "kind": "Welcome",
            "metadata": {"name": "hello", "namespace": "team", "uid": "wel-uid", "generation": 1},
            "spec": spec,
        }))
        .unwrap()
    }

    const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/team/deployments/hello?&force=true&fieldManager=kubesteer-controller";
    const SECRET_CREATE: &str =
        "/api/v1/namespaces/team/secrets?&fieldManager=kubesteer-controller";
    const SECRET_PATCH: &str =
        "/api/v1/namespaces/team/secrets/hello-credentials?&fieldManager=kubesteer-controller";
    // A Deployment or Service missing from the cache is created (a POST).
    const DEPLOYMENT_CREATE: &str =
        "/apis/apps/v1/namespaces/team/deployments?&fieldManager=kubesteer-controller";
    const SERVICE_CREATE: &str =
        "/api/v1/namespaces/team/services?&fieldManager=kubesteer-controller";
    const SECRET_URL: &str = "/api/v1/namespaces/team/secrets/hello-credentials";
    const STATUS: &str = "/apis/kubesteer.io/v1alpha1/namespaces/team/welcomes/hello/status?&fieldManager=kubesteer-controller";

    fn with_node_port(mut service: serde_json::Value) -> serde_json::Value {
        service["spec"]["ports"][0]["nodePort"] = json!(30123);
        service
    }

    #[test]
    fn the_default_image_gets_its_text_and_port_from_env() {
        let d = serde_json::to_value(
            deployment(&welcome(json!({"name": "kubesteer"})), Some("ignored")).unwrap(),
        )
        .unwrap();
        assert!(d["metadata"].get("annotations").is_none(), "{d}");
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], kubesteer_api::welcome::DEFAULT_IMAGE);
        assert_eq!(
            c["args"],
            json!(["-listen=:$(PORT)", "-text=Hello $(NAME)"])
        );
        assert_eq!(
            c["env"],
            json!([{"name": "NAME", "value": "kubesteer"}, {"name": "PORT", "value": "8088"}])
        );
        assert_eq!(c["ports"][0]["containerPort"], 8088);
        assert_eq!(c["securityContext"]["runAsNonRoot"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        let own = serde_json::to_value(
            deployment(
                &welcome(json!({"name": "x", "image": "registry.local/me/app:1"})),
                None,
            )
            .unwrap(),
        )
        .unwrap();
        assert!(own["spec"]["template"]["spec"]["containers"][0]
            .get("args")
            .is_none());
    }

    #[test]
    fn http_echo_is_recognised_with_any_tag_or_registry() {
        for yes in [
            "hashicorp/http-echo",
            "hashicorp/http-echo:1.0.0",
            "docker.io/hashicorp/http-echo:latest",
            "hashicorp/http-echo@sha256:abc",
        ] {
            assert!(is_http_echo(yes), "{yes}");
        }
        for no in ["nginx", "localhost:5000/app", "hashicorp/http-echo-fork:1"] {
            assert!(!is_http_echo(no), "{no}");
        }
    }

    #[test]
    fn a_password_secret_ref_is_used_as_is() {
        let d = serde_json::to_value(
            deployment(
                &welcome(json!({"name": "x", "passwordSecretRef": {"name": "mine", "key": "pw"}})),
                None,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["env"][2],
            json!({"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "pw", "optional": false}}})
        );
    }

    /// The credentials Secret as the apiserver returns it from an apply.
    fn stored_secret(w: &Welcome, uid: &str) -> serde_json::Value {
        let mut s = serde_json::to_value(secret(w).unwrap().unwrap()).unwrap();
        s["metadata"]["uid"] = json!(uid);
        s
    }

    /// The live Deployment of a Welcome that had a password kept in the Secret with `uid`.
    fn live_with_password(uid: &str) -> serde_json::Value {
        let had = welcome(json!({"name": "kubesteer", "password": SECRET}));
        serde_json::to_value(children::stamped(&deployment(&had, Some(uid)).unwrap()).unwrap())
            .unwrap()
    }

    /// A context whose caches hold the Deployment `live`, and the Service `svc` if given.
    fn with_cached(
        live: serde_json::Value,
        svc: Option<&Service>,
    ) -> (Arc<Context>, fixtures::Verifier) {
        let caches = fixtures::caches(APP, |w| {
            fixtures::put(&mut w.deployments, live);
            if let Some(svc) = svc {
                fixtures::put(&mut w.services, serde_json::to_value(svc).unwrap());
            }
        });
        fixtures::context_cached(caches)
    }

    fn no_password_in(b: &serde_json::Value) {
        let text = b.to_string();
        assert!(!text.contains(SECRET), "the password leaked into {text}");
    }

    #[tokio::test]
    async fn a_password_goes_into_an_owned_secret_and_the_deployment_only_references_it() {
        let w = welcome(json!({"name": "kubesteer", "password": SECRET}));
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            // No Deployment vouches for a Secret yet: a create, which takes nothing over.
            Call::post(SECRET_CREATE)
                .body(|b| {
                    assert_eq!(b["kind"], "Secret");
                    assert_eq!(b["type"], "Opaque");
                    assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "wel-uid");
                    let encoded = b["data"][PASSWORD_KEY].as_str().unwrap();
                    let bytes: ByteString = serde_json::from_value(json!(encoded)).unwrap();
                    assert_eq!(bytes.0, SECRET.as_bytes());
                })
                .created_as(stored_secret(&w, "sec-uid")),
            Call::post(DEPLOYMENT_CREATE)
                .body(|b| {
                    no_password_in(b);
                    assert_eq!(
                        b["spec"]["template"]["spec"]["containers"][0]["env"][2],
                        json!({"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "hello-credentials", "key": PASSWORD_KEY, "optional": false}}})
                    );
                    assert_eq!(
                        b["metadata"]["annotations"][annotation::CREDENTIALS_UID],
                        "sec-uid",
                        "the Deployment records which Secret is the controller's"
                    );
                })
                .created(),
            // Deployment and Service are ensured together, the Deployment first.
            Call::post(SERVICE_CREATE)
                .body(|b| assert_eq!(b["spec"]["type"], "NodePort"))
                .created_as(with_node_port(serde_json::to_value(service(&welcome(json!({"name": "kubesteer"}))).unwrap()).unwrap())),
            Call::event("team")
                .body(|b| {
                    no_password_in(b);
                    assert_eq!(b["type"], "Normal");
                    assert_eq!(b["reason"], "Created");
                    assert_eq!(b["note"], "Created Secret hello-credentials, Deployment hello, Service hello");
                    assert_eq!(b["regarding"]["name"], "hello");
                })
                .created(),
            // No status yet: the new children's watch events bring the reconcile that writes it.
        ]);
        let action = reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        assert_eq!(
            action,
            Action::requeue(CREDENTIALS_RESYNC),
            "the unwatched Secret is resynced"
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_settled_welcome_with_a_password_writes_nothing_new_and_never_reads_the_secret() {
        let mut w =
            welcome(json!({"name": "kubesteer", "password": SECRET, "serviceType": "ClusterIP"}));
        let live = children::stamped(&deployment(&w, Some("sec-uid")).unwrap()).unwrap();
        let svc = children::stamped(&service(&w).unwrap()).unwrap();
        let (ctx, verifier) = with_cached(serde_json::to_value(&live).unwrap(), Some(&svc));
        // As after the controller applied it: its template was checked then.
        ctx.caches
            .of(APP)
            .notes
            .templates
            .assume_checked(&live, &live);
        w.status = Some(status(&w, "team", &live, &svc, &[], ctx.clock.now()));
        // The Secret is patched blind, as it cannot be read, but only if it is this Welcome's;
        // its children are as wanted.
        let scenario = verifier.run(vec![Call::patch(SECRET_PATCH)
            .body(|b| {
                assert_eq!(
                    b[0],
                    json!({"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": "wel-uid"})
                );
                assert_eq!(
                    b[1],
                    json!({"op": "test", "path": "/metadata/ownerReferences/0/controller", "value": true})
                );
                assert_eq!(b[2]["path"], "/data");
                assert_eq!(b[3]["path"], "/metadata/labels");
            })
            .respond(stored_secret(&w, "sec-uid"))]);
        reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_removed_password_deletes_the_secret_the_deployment_vouches_for() {
        let w = welcome(json!({"name": "kubesteer", "serviceType": "ClusterIP"}));
        let (ctx, verifier) = with_cached(live_with_password("sec-uid"), None);
        let scenario = verifier.run(vec![
            Call::delete(&format!("{SECRET_URL}?"))
                .body(|b| assert_eq!(b["preconditions"], json!({"uid": "sec-uid"}), "{b}"))
                .respond(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})),
            Call::event("team")
                .body(|b| {
                    assert_eq!(b["type"], "Normal");
                    assert_eq!(b["reason"], "Deleted");
                    assert_eq!(b["note"], "Deleted Secret hello-credentials, as spec.password was removed");
                })
                .respond_with_body(),
            Call::patch(DEPLOYMENT)
                .body(|b| {
                    let env = &b["spec"]["template"]["spec"]["containers"][0]["env"];
                    assert_eq!(env.as_array().unwrap().len(), 2, "{env}");
                    let annotations = b["metadata"]["annotations"].as_object().unwrap();
                    assert!(!annotations.contains_key(annotation::CREDENTIALS_UID), "{b}");
                })
                .respond_with_body(),
            Call::post(SERVICE_CREATE)
                .body(|b| assert_eq!(b["spec"]["type"], "ClusterIP"))
                .created(),
            Call::event("team")
                .body(|b| assert_eq!(b["note"], "Created Service hello"))
                .respond_with_body(),
            // The status waits for the new Service's watch event.
        ]);
        let action = reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        assert_eq!(action, Action::await_change());
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_secret_that_replaced_the_controllers_own_is_left_alone() {
        let w = welcome(json!({"name": "kubesteer"}));
        let (ctx, verifier) = with_cached(live_with_password("sec-uid"), None);
        let scenario =
            verifier.run(vec![
            Call::delete(&format!("{SECRET_URL}?")).error(
                409,
                "Precondition failed: UID in precondition: sec-uid, UID in object meta: users-uid",
            ),
            Call::patch(DEPLOYMENT).respond_with_body(),
            Call::post(SERVICE_CREATE).created(),
            Call::event("team")
                .body(|b| assert!(b["note"].as_str().unwrap().ends_with("Service hello"), "{b}"))
                .respond_with_body(),
        ]);
        reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn without_the_deployments_word_no_secret_is_deleted() {
        let w = welcome(json!({"name": "kubesteer"}));
        // A passwordSecretRef to the user's own Secret of that name, just removed: no annotation.
        let users = serde_json::to_value(
            deployment(&welcome(json!({"name": "kubesteer", "passwordSecretRef": {"name": "hello-credentials", "key": "password"}})), None).unwrap(),
        )
        .unwrap();
        let (ctx, verifier) = with_cached(users, None);
        let scenario = verifier.run(vec![
            Call::patch(DEPLOYMENT).respond_with_body(),
            Call::post(SERVICE_CREATE).created(),
            Call::event("team")
                .body(|b| {
                    assert!(
                        b["note"].as_str().unwrap().ends_with("Service hello"),
                        "{b}"
                    )
                })
                .respond_with_body(),
        ]);
        reconcile(Arc::new(w.clone()), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;

        // A Deployment of that name that this Welcome does not control: not even written.
        let mut foreign = live_with_password("sec-uid");
        foreign["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
        let (ctx, verifier) = with_cached(foreign, None);
        let scenario = verifier.run(vec![
            Call::post(SERVICE_CREATE).created(),
            Call::event("team")
                .body(|b| assert!(b["note"].as_str().unwrap().ends_with("Service hello"), "{b}"))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    assert_eq!(b["status"]["conditions"][0]["reason"], "NameConflict");
                    assert_eq!(
                        b["status"]["conditions"][0]["message"],
                        "Deployment hello exists and is not controlled by this Welcome; it is left untouched"
                    );
                })
                .respond_status_of(&w),
            Call::event("team")
                .body(|b| {
                    assert_eq!(b["type"], "Warning");
                    assert_eq!(b["reason"], "NameConflict");
                })
                .respond_with_body(),
        ]);
        assert_eq!(
            reconcile(Arc::new(w), ctx.clone()).await.unwrap(),
            Action::requeue(NAME_CONFLICT_REQUEUE)
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_foreign_secret_of_the_credentials_name_is_never_written_nor_read_by_pods() {
        let w = welcome(json!({"name": "kubesteer", "password": SECRET}));
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::post(SECRET_CREATE).already_exists(),
            // The guarded patch's tests fail: the Secret is not this Welcome's, and is unchanged.
            Call::patch(SECRET_PATCH).error(
                422,
                "the server rejected our request due to an error in our request",
            ),
            // No Deployment: its pods would read someone else's Secret as the password.
            Call::post(SERVICE_CREATE).created(),
            Call::event("team")
                .body(|b| assert!(b["note"].as_str().unwrap().ends_with("Service hello"), "{b}"))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| {
                    no_password_in(b);
                    let ready = &b["status"]["conditions"][0];
                    assert_eq!(ready["status"], "False");
                    assert_eq!(ready["reason"], "NameConflict");
                    assert_eq!(
                        ready["message"],
                        "Secret hello-credentials exists and is not controlled by this Welcome; it is left untouched"
                    );
                })
                .respond_status_of(&w),
            Call::event("team")
                .body(|b| {
                    no_password_in(b);
                    assert_eq!(b["type"], "Warning");
                    assert_eq!(b["reason"], "NameConflict");
                    assert!(b["note"].as_str().unwrap().starts_with("Secret hello-credentials"));
                })
                .respond_with_body(),
        ]);
        assert_eq!(
            reconcile(Arc::new(w), ctx.clone()).await.unwrap(),
            Action::requeue(NAME_CONFLICT_REQUEUE)
        );
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn its_own_secret_unvouched_by_a_cold_cache_passes_the_guard_and_is_kept() {
        let w = welcome(json!({"name": "kubesteer", "password": SECRET}));
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::post(SECRET_CREATE).already_exists(),
            Call::patch(SECRET_PATCH).respond(stored_secret(&w, "sec-uid")),
            Call::post(DEPLOYMENT_CREATE)
                .body(|b| {
                    assert_eq!(
                        b["metadata"]["annotations"][annotation::CREDENTIALS_UID],
                        "sec-uid"
                    )
                })
                .created(),
            Call::post(SERVICE_CREATE).created(),
            Call::event("team")
                .body(|b| {
                    assert!(
                        b["note"].as_str().unwrap().ends_with("Service hello"),
                        "{b}"
                    )
                })
                .respond_with_body(),
        ]);
        reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_vouched_secret_replaced_by_someone_elses_is_reported_not_taken_over() {
        let w = welcome(json!({"name": "kubesteer", "password": SECRET}));
        let (ctx, verifier) = with_cached(live_with_password("sec-uid"), None);
        let refused = || Call::patch(SECRET_PATCH).error(422, "test operation failed");
        let scenario = verifier.run(vec![
            refused(),
            Call::post(SECRET_CREATE).already_exists(),
            refused(),
            Call::post(SERVICE_CREATE).created(),
            Call::event("team")
                .body(|b| {
                    assert!(
                        b["note"].as_str().unwrap().ends_with("Service hello"),
                        "{b}"
                    )
                })
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| assert_eq!(b["status"]["conditions"][0]["reason"], "NameConflict"))
                .respond_status_of(&w),
            Call::event("team").respond_with_body(),
        ]);
        reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_users_own_secret_of_that_name_is_left_alone() {
        let w = welcome(
            json!({"name": "kubesteer", "passwordSecretRef": {"name": "hello-credentials", "key": "pw"}}),
        );
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::post(DEPLOYMENT_CREATE).created(),
            Call::post(SERVICE_CREATE).created(),
            Call::event("team")
                .body(|b| {
                    assert!(
                        b["note"].as_str().unwrap().ends_with("Service hello"),
                        "{b}"
                    )
                })
                .respond_with_body(),
        ]);
        reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_failure_that_echoes_the_password_is_reported_without_it() {
        let w = welcome(json!({"name": "kubesteer", "password": SECRET}));
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::post(SECRET_CREATE)
                .error(422, &format!("data[password]: Invalid value: {SECRET:?}")),
            Call::event("team")
                .body(|b| {
                    no_password_in(b);
                    assert_eq!(b["type"], "Warning");
                    assert_eq!(b["reason"], "ReconcileFailed");
                    assert!(b["note"].as_str().unwrap().contains("<redacted>"), "{b}");
                })
                .respond_with_body(),
        ]);
        let err = reconcile(Arc::new(w), ctx.clone()).await.unwrap_err();
        assert!(!err.to_string().contains(SECRET), "{err}");
        assert_eq!(err.metric_label(), "kube");
        scenario.finish(ctx).await;
    }
    #[test]
    fn a_welcome_is_ready_once_its_pods_are_before_its_deployments_status_says_so() {
        use kubesteer_api::keys::condition::{FALSE, READY, TRUE};
        let w = welcome(json!({"name": "kubesteer", "serviceType": "ClusterIP"}));
        let svc = service(&w).unwrap();
        let d = fixtures::new_deployment(1);
        let pod = |ready| fixtures::new_pod("hello-a", ready);
        let ready = |pods: &[ListedPod]| {
            let s = status(&w, "team", &d, &svc, pods, chrono::Utc::now());
            let ready = s.conditions.iter().find(|c| c.type_ == READY).unwrap();
            (s.ready_replicas, ready.status.clone())
        };
        assert_eq!(ready(&[]), (Some(0), FALSE.to_string()));
        assert_eq!(ready(&[pod(false)]), (Some(0), FALSE.to_string()));
        assert_eq!(ready(&[pod(true)]), (Some(1), TRUE.to_string()));
    }
}
