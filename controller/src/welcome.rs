//! Welcome: a web app that says "Hello <name>", its Service, and a Secret for a plain password.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, PodSpec, PodTemplateSpec, Probe,
    Secret, SecretKeySelector, Service, ServicePort, ServiceSpec, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, Patch};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use kubesteer_api::common::{condition, READY};
use kubesteer_api::welcome::{ServiceType, PASSWORD_KEY};
use kubesteer_api::{Welcome, WelcomeStatus};

use crate::objects::{self, apply_params, child_meta, namespace_and_name, status_patch};
use crate::{is_status, Context, Result};

pub const KIND: &str = "Welcome";
/// The `app.kubernetes.io/name` of everything a Welcome owns.
pub const APP: &str = "welcome";
/// The distroless "nonroot" uid, which the default image runs fine as.
const APP_UID: i64 = 65532;
const PORT_NAME: &str = "http";

/// Name of the Secret that keeps a Welcome's plain password.
pub fn secret_name(welcome: &str) -> String {
    format!("{welcome}-credentials")
}

/// The controller's reconcile function for Welcome.
pub async fn reconcile(welcome: Arc<Welcome>, ctx: Arc<Context>) -> Result<Action> {
    ctx.reconcile(KIND, welcome.as_ref(), apply(&welcome, &ctx))
        .await
}

pub fn error_policy(welcome: Arc<Welcome>, error: &crate::Error, ctx: Arc<Context>) -> Action {
    ctx.error_policy(KIND, welcome.as_ref(), error)
}

async fn apply(welcome: &Welcome, ctx: &Context) -> Result<Action> {
    if welcome.meta().deletion_timestamp.is_some() {
        // Garbage collection removes the children; recreating them would only race it.
        return Ok(Action::await_change());
    }
    let (ns, name) = namespace_and_name(KIND, welcome)?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    // The Secret comes first, so the pods never start with a dangling secretKeyRef.
    match secret(welcome)? {
        Some(s) => {
            secrets
                .patch(&secret_name(&name), &apply_params(), &Patch::Apply(s))
                .await?;
        }
        None => remove_own_secret(&secrets, welcome, &name).await?,
    }
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let deployment = deployments
        .patch(&name, &apply_params(), &Patch::Apply(deployment(welcome)?))
        .await?;
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    let service = services
        .patch(&name, &apply_params(), &Patch::Apply(service(welcome)?))
        .await?;
    let status = status(welcome, &ns, &deployment, &service, ctx.clock.now());
    if welcome.status.as_ref() != Some(&status) {
        let api: Api<Welcome> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(&name, &apply_params(), &status_patch::<Welcome>(&status))
            .await?;
    }
    Ok(Action::await_change())
}

/// Deletes the credentials Secret once the password is gone, but only when this Welcome
/// controls it: a user's own Secret of that name is never touched.
async fn remove_own_secret(secrets: &Api<Secret>, welcome: &Welcome, name: &str) -> Result<()> {
    let secret_name = secret_name(name);
    let existing = match secrets.get(&secret_name).await {
        Ok(s) => s,
        Err(e) if is_status(&e, 404) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let ours = existing
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == welcome.meta().uid.as_ref());
    if ours {
        match secrets.delete(&secret_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
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
            objects::labels(APP, &name),
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

/// The Deployment a Welcome wants; the password only ever enters it as a secretKeyRef.
pub fn deployment(welcome: &Welcome) -> Result<Deployment> {
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
        liveness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String(PORT_NAME.into()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(10),
            ..Probe::default()
        }),
        security_context: Some(objects::restricted_security_context(APP_UID)),
        ..Container::default()
    };
    Ok(Deployment {
        metadata: child_meta(KIND, welcome, name.clone(), objects::labels(APP, &name))?,
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas()),
            selector: LabelSelector {
                match_labels: Some(objects::selector_labels(APP, &name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(objects::labels(APP, &name)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    })
}

/// The Service a Welcome wants, of its serviceType, on its port.
pub fn service(welcome: &Welcome) -> Result<Service> {
    let name = welcome.name_any();
    Ok(Service {
        metadata: child_meta(KIND, welcome, name.clone(), objects::labels(APP, &name))?,
        spec: Some(ServiceSpec {
            type_: Some(welcome.spec.service_type().as_str().into()),
            selector: Some(objects::selector_labels(APP, &name)),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.into()),
                port: welcome.spec.port(),
                target_port: Some(IntOrString::String(PORT_NAME.into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

/// The status a Welcome reports, from its Deployment and Service.
pub fn status(
    welcome: &Welcome,
    ns: &str,
    deployment: &Deployment,
    service: &Service,
    now: chrono::DateTime<chrono::Utc>,
) -> WelcomeStatus {
    let previous: &[Condition] = welcome
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let generation = welcome.meta().generation;
    let wanted = welcome.spec.replicas();
    let ds = deployment.status.clone().unwrap_or_default();
    let ready = ds.ready_replicas.unwrap_or(0);
    let observed =
        ds.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0);
    let rolled_out = observed
        && ds.updated_replicas.unwrap_or(0) == wanted
        && ds.replicas.unwrap_or(0) == wanted
        && ready == wanted;
    let message = format!("{ready}/{wanted} pods ready");
    let ready_condition = if rolled_out {
        condition(
            READY,
            true,
            "AllPodsReady",
            message,
            generation,
            objects::time(now),
            previous,
        )
    } else {
        condition(
            READY,
            false,
            "PodsNotReady",
            message,
            generation,
            objects::time(now),
            previous,
        )
    };
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
    use serde_json::json;

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
    const SERVICE: &str =
        "/api/v1/namespaces/team/services/hello?&force=true&fieldManager=kubesteer-controller";
    const SECRET_APPLY: &str = "/api/v1/namespaces/team/secrets/hello-credentials?&force=true&fieldManager=kubesteer-controller";
    const SECRET_URL: &str = "/api/v1/namespaces/team/secrets/hello-credentials";
    const STATUS: &str = "/apis/kubesteer.io/v1alpha1/namespaces/team/welcomes/hello/status?&force=true&fieldManager=kubesteer-controller";

    fn with_node_port(mut service: serde_json::Value) -> serde_json::Value {
        service["spec"]["ports"][0]["nodePort"] = json!(30123);
        service
    }

    #[test]
    fn the_default_image_gets_its_text_and_port_from_env() {
        let d = serde_json::to_value(deployment(&welcome(json!({"name": "kubesteer"}))).unwrap())
            .unwrap();
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
            deployment(&welcome(
                json!({"name": "x", "image": "registry.local/me/app:1"}),
            ))
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
            deployment(&welcome(
                json!({"name": "x", "passwordSecretRef": {"name": "mine", "key": "pw"}}),
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["env"][2],
            json!({"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "pw", "optional": false}}})
        );
    }

    #[tokio::test]
    async fn a_password_goes_into_an_owned_secret_and_the_deployment_only_references_it() {
        let w = welcome(json!({"name": "kubesteer", "password": SECRET}));
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::patch(SECRET_APPLY)
                .body(|b| {
                    assert_eq!(b["kind"], "Secret");
                    assert_eq!(b["type"], "Opaque");
                    assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "wel-uid");
                    let encoded = b["data"][PASSWORD_KEY].as_str().unwrap();
                    let bytes: ByteString = serde_json::from_value(json!(encoded)).unwrap();
                    assert_eq!(bytes.0, SECRET.as_bytes());
                })
                .respond_with_body(),
            Call::patch(DEPLOYMENT)
                .body(|b| {
                    let text = b.to_string();
                    assert!(!text.contains(SECRET), "the password leaked into {text}");
                    assert_eq!(
                        b["spec"]["template"]["spec"]["containers"][0]["env"][2],
                        json!({"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "hello-credentials", "key": PASSWORD_KEY, "optional": false}}})
                    );
                })
                .respond_with_body(),
            Call::patch(SERVICE)
                .body(|b| assert_eq!(b["spec"]["type"], "NodePort"))
                .respond(with_node_port(serde_json::to_value(service(&welcome(json!({"name": "kubesteer"}))).unwrap()).unwrap())),
            Call::patch(STATUS)
                .body(|b| {
                    assert!(!b.to_string().contains(SECRET));
                    assert_eq!(b["status"]["serviceURL"], "http://hello.team.svc:8088");
                    assert_eq!(b["status"]["nodePort"], 30123);
                    assert_eq!(b["status"]["readyReplicas"], 0);
                    assert_eq!(b["status"]["conditions"][0]["status"], "False");
                })
                .respond_status_of(&w),
        ]);
        reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }

    #[tokio::test]
    async fn a_removed_password_deletes_the_owned_secret() {
        let w = welcome(json!({"name": "kubesteer", "serviceType": "ClusterIP"}));
        let owned = serde_json::to_value(
            secret(&welcome(json!({"name": "kubesteer", "password": SECRET})))
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        let (ctx, verifier) = fixtures::context();
        let scenario = verifier.run(vec![
            Call::get(SECRET_URL).respond(owned),
            Call::delete(&format!("{SECRET_URL}?")).respond(json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})),
            Call::patch(DEPLOYMENT)
                .body(|b| {
                    let env = &b["spec"]["template"]["spec"]["containers"][0]["env"];
                    assert_eq!(env.as_array().unwrap().len(), 2, "{env}");
                })
                .respond_with_body(),
            Call::patch(SERVICE)
                .body(|b| assert_eq!(b["spec"]["type"], "ClusterIP"))
                .respond_with_body(),
            Call::patch(STATUS)
                .body(|b| assert!(b["status"].get("nodePort").is_none(), "{b}"))
                .respond_status_of(&w),
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
            Call::get(SECRET_URL).respond(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "hello-credentials", "namespace": "team"}})),
            Call::patch(DEPLOYMENT).respond_with_body(),
            Call::patch(SERVICE).respond_with_body(),
            Call::patch(STATUS).respond_status_of(&w),
        ]);
        reconcile(Arc::new(w), ctx.clone()).await.unwrap();
        scenario.finish(ctx).await;
    }
}
