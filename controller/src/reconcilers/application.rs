//! Application: a Deployment of the user's image, a ClusterIP Service in front of it and, when
//! `spec.ingress` is set, an Ingress routing a host and path to that Service.
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, SeccompProfile, SecurityContext, Service, ServiceSpec,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use kube::{Resource, ResourceExt};
use kubesteer_api::{Application, ApplicationStatus};

use crate::children::{self, child_meta, ListedPod};
use crate::reconcilers::{previous_conditions, time, Observed, Owner, Rollout};
use crate::Result;

pub const KIND: &str = "Application";
/// The `app.kubernetes.io/name` of everything an Application owns.
pub const APP: &str = "application";
const PORT_NAME: &str = "http";
const CONTAINER: &str = "app";
/// How long a status write that only reports progress may wait for more of it.
const STATUS_GRACE: Duration = Duration::from_secs(30);

impl Owner for Application {
    const KIND: &'static str = KIND;
    const APP: &'static str = APP;
    const STATUS_GRACE: Duration = STATUS_GRACE;
    const OWNS_INGRESS: bool = true;
    type Prepared = ();

    fn deployment(&self, _: &()) -> Result<Deployment> {
        deployment(self)
    }

    fn service(&self) -> Result<Service> {
        let cluster_ip = ServiceSpec {
            type_: Some("ClusterIP".into()),
            ..ServiceSpec::default()
        };
        let port = self.spec.service_port();
        children::service(KIND, self, APP, port, PORT_NAME, cluster_ip)
    }

    fn ingress(&self) -> Result<Option<Ingress>> {
        ingress(self)
    }

    fn status_from(&self, children: &Observed<'_>, now: DateTime<Utc>) -> ApplicationStatus {
        status(
            self,
            children.namespace,
            children.deployment,
            &children.pods,
            children.ingress,
            now,
        )
    }
}

/// The Deployment an Application wants: one container of its image on its port, ready once the
/// port accepts connections. The image is the user's, so no user id is imposed; privilege
/// escalation is off and the runtime's default seccomp profile on.
pub fn deployment(app: &Application) -> Result<Deployment> {
    let name = app.name_any();
    let spec = &app.spec;
    let env = spec.env();
    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.into()),
            container_port: spec.port(),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        env: (!env.is_empty()).then(|| env.to_vec()),
        resources: spec.resources.clone(),
        readiness_probe: Some(children::tcp_probe(PORT_NAME)),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["NET_RAW".into()]),
                ..Capabilities::default()
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    Ok(children::deployment(
        child_meta(KIND, app, name.clone(), children::labels(APP, &name))?,
        APP,
        spec.replicas(),
        container,
    ))
}

/// The Ingress an Application wants, if it has `spec.ingress`: one rule for its host and path to
/// its Service, with TLS for the host when asked.
pub fn ingress(app: &Application) -> Result<Option<Ingress>> {
    let Some(want) = &app.spec.ingress else {
        return Ok(None);
    };
    let name = app.name_any();
    let backend = IngressBackend {
        service: Some(IngressServiceBackend {
            name: name.clone(),
            port: Some(ServiceBackendPort {
                number: Some(app.spec.service_port()),
                ..ServiceBackendPort::default()
            }),
        }),
        ..IngressBackend::default()
    };
    let rule = IngressRule {
        host: Some(want.host.clone()),
        http: Some(HTTPIngressRuleValue {
            paths: vec![HTTPIngressPath {
                path: Some(want.path().to_string()),
                path_type: want.path_type().as_str().into(),
                backend,
            }],
        }),
    };
    let tls = want.tls.as_ref().map(|t| {
        vec![IngressTLS {
            hosts: Some(vec![want.host.clone()]),
            secret_name: Some(t.secret_name.clone()),
        }]
    });
    Ok(Some(Ingress {
        metadata: child_meta(KIND, app, name.clone(), children::labels(APP, &name))?,
        spec: Some(IngressSpec {
            ingress_class_name: want.class_name.clone(),
            rules: Some(vec![rule]),
            tls,
            ..IngressSpec::default()
        }),
        ..Ingress::default()
    }))
}

/// The status an Application reports, from its Deployment, its live pods and its Ingress.
pub fn status(
    app: &Application,
    namespace: &str,
    deployment: &Deployment,
    pods: &[ListedPod],
    ingress: Option<&Ingress>,
    now: DateTime<Utc>,
) -> ApplicationStatus {
    let generation = app.meta().generation;
    let rollout = Rollout::of(deployment, app.spec.replicas()).with_pods(deployment, pods);
    let conditions =
        rollout.conditions(deployment, generation, time(now), previous_conditions(app));
    let load_balancer = ingress
        .and_then(|i| i.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
        .and_then(|published| published.first())
        .and_then(|lb| lb.ip.clone().or_else(|| lb.hostname.clone()));
    ApplicationStatus {
        ready_replicas: Some(rollout.ready),
        url: Some(app.spec.url(&app.name_any(), namespace)),
        load_balancer,
        observed_generation: generation,
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn application(spec: serde_json::Value) -> Application {
        let mut app = Application::new("site", serde_json::from_value(spec).unwrap());
        app.metadata.namespace = Some("team".into());
        app.metadata.uid = Some("uid-1".into());
        app.metadata.generation = Some(2);
        app
    }

    #[test]
    fn the_deployment_runs_the_image_on_the_port_with_the_env() {
        let app = application(json!({
            "image": "registry.example.com/site:1", "replicas": 3, "port": 9000,
            "env": [{"name": "MODE", "value": "prod"}],
        }));
        let d = serde_json::to_value(deployment(&app).unwrap()).unwrap();
        assert_eq!(d["spec"]["replicas"], 3);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.example.com/site:1");
        assert_eq!(c["ports"][0]["containerPort"], 9000);
        assert_eq!(c["env"], json!([{"name": "MODE", "value": "prod"}]));
        assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], "http");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(d["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            d["metadata"]["labels"]["app.kubernetes.io/name"],
            "application"
        );
    }

    #[test]
    fn the_service_is_cluster_ip_on_the_service_port() {
        let app = application(json!({"image": "nginx"}));
        let s = serde_json::to_value(app.service().unwrap()).unwrap();
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["ports"][0]["port"], 80);
        assert_eq!(s["spec"]["ports"][0]["targetPort"], "http");
    }

    #[test]
    fn the_ingress_routes_host_and_path_to_the_service() {
        assert!(ingress(&application(json!({"image": "nginx"})))
            .unwrap()
            .is_none());
        let app = application(json!({"image": "nginx", "servicePort": 8081, "ingress": {
            "host": "example.foo.com", "path": "/shop", "pathType": "Exact",
            "className": "nginx", "tls": {"secretName": "site-tls"}
        }}));
        let i = serde_json::to_value(ingress(&app).unwrap().unwrap()).unwrap();
        assert_eq!(i["spec"]["ingressClassName"], "nginx");
        let rule = &i["spec"]["rules"][0];
        assert_eq!(rule["host"], "example.foo.com");
        let path = &rule["http"]["paths"][0];
        assert_eq!(path["path"], "/shop");
        assert_eq!(path["pathType"], "Exact");
        assert_eq!(
            path["backend"]["service"],
            json!({"name": "site", "port": {"number": 8081}})
        );
        assert_eq!(
            i["spec"]["tls"],
            json!([{"hosts": ["example.foo.com"], "secretName": "site-tls"}])
        );
        assert_eq!(i["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    }

    #[test]
    fn the_status_has_the_url_the_address_and_the_four_conditions() {
        let app = application(json!({"image": "nginx", "ingress": {"host": "a.io"}}));
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"generation": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                "conditions": [{"type": "Available", "status": "True"}]}
        }))
        .unwrap();
        let i: Ingress = serde_json::from_value(json!({
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
        }))
        .unwrap();
        let s = status(&app, "team", &d, &[], Some(&i), Utc::now());
        assert_eq!(s.url.as_deref(), Some("http://a.io/"));
        assert_eq!(s.load_balancer.as_deref(), Some("203.0.113.7"));
        assert_eq!(s.ready_replicas, Some(1));
        assert_eq!(s.observed_generation, Some(2));
        let state: Vec<(&str, &str)> = s
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            state,
            [
                ("Ready", "True"),
                ("Available", "True"),
                ("Progressing", "False"),
                ("Degraded", "False")
            ]
        );
        let no_ingress = application(json!({"image": "nginx", "servicePort": 8080}));
        let s = status(&no_ingress, "team", &d, &[], None, Utc::now());
        assert_eq!(s.url.as_deref(), Some("http://site.team.svc:8080"));
        assert_eq!(s.load_balancer, None);
    }

    #[test]
    fn an_application_is_ready_once_its_pods_are_before_its_deployments_status_says_so() {
        use kubesteer_api::keys::condition::{FALSE, READY, TRUE};
        let app = application(json!({"image": "nginx", "replicas": 2}));
        let d = fixtures::new_deployment(2);
        let pod = fixtures::new_pod;
        let ready = |pods: &[ListedPod]| {
            let s = status(&app, "team", &d, pods, None, Utc::now());
            let ready = s.conditions.iter().find(|c| c.type_ == READY).unwrap();
            (s.ready_replicas, ready.status.clone())
        };
        assert_eq!(ready(&[]), (Some(0), FALSE.to_string()));
        assert_eq!(
            ready(&[pod("site-a", true), pod("site-b", false)]),
            (Some(1), FALSE.to_string())
        );
        assert_eq!(
            ready(&[pod("site-a", true), pod("site-b", true)]),
            (Some(2), TRUE.to_string())
        );
    }
}
