//! Building children: labels, owner references, the pod template every owner kind shares.
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecurityContext,
    Service, ServicePort, ServiceSpec, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use kubesteer_api::keys::label;

use crate::{Error, Result};

/// The labels of every object owned by instance `instance` of app `app`.
pub fn labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    let mut l = selector_labels(app, instance);
    l.insert(label::MANAGED_BY.into(), label::MANAGED_BY_VALUE.into());
    l
}

/// The labels a Deployment selects its pods by; they never change, as a selector cannot.
pub fn selector_labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (label::NAME.to_string(), app.to_string()),
        (label::INSTANCE.to_string(), instance.to_string()),
    ])
}

/// `selector_labels` as a label selector string.
pub fn selector_string(app: &str, instance: &str) -> String {
    format!("{}={app},{}={instance}", label::NAME, label::INSTANCE)
}

/// The label selector of everything kubesteer owns of `app`, for watches.
pub fn owned_by_kubesteer(app: &str) -> String {
    format!(
        "{}={app},{}={}",
        label::NAME,
        label::MANAGED_BY,
        label::MANAGED_BY_VALUE
    )
}

/// The namespace and name of a namespaced custom resource.
pub fn namespace_and_name<K: Resource>(kind: &'static str, obj: &K) -> Result<(String, String)> {
    let name = obj.name_any();
    let ns = ResourceExt::namespace(obj).ok_or_else(|| Error::MissingField {
        kind,
        name: name.clone(),
        what: "namespace",
    })?;
    Ok((ns, name))
}

/// Metadata of a child named `name`, labelled, and controlled by `owner` so GC deletes it.
pub fn child_meta<K>(
    kind: &'static str,
    owner: &K,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta>
where
    K: Resource<DynamicType = ()>,
{
    let owner_ref = owner
        .controller_owner_ref(&())
        .ok_or_else(|| Error::MissingField {
            kind,
            name: owner.name_any(),
            what: "uid",
        })?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: ResourceExt::namespace(owner),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref]),
        ..ObjectMeta::default()
    })
}

/// The Service in front of an owner's pods: one TCP `port` named `port_name`, pointing at the
/// pods' port of that name; `shape` sets the rest (type, headless).
pub fn service<K>(
    kind: &'static str,
    owner: &K,
    app: &str,
    port: i32,
    port_name: &str,
    shape: ServiceSpec,
) -> Result<Service>
where
    K: Resource<DynamicType = ()>,
{
    let name = owner.meta().name.clone().unwrap_or_default();
    Ok(Service {
        metadata: child_meta(kind, owner, name.clone(), labels(app, &name))?,
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(app, &name)),
            ports: Some(vec![ServicePort {
                name: Some(port_name.into()),
                port,
                target_port: Some(IntOrString::String(port_name.into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..shape
        }),
        ..Service::default()
    })
}
/// A Deployment with `metadata` (its name is the instance) of `replicas` pods of one
/// `container`, labelled for `app` and that instance.
pub fn deployment(
    metadata: ObjectMeta,
    app: &str,
    replicas: i32,
    container: Container,
) -> Deployment {
    // Every caller builds `metadata` with `child_meta`, which always names the child.
    let instance = metadata.name.clone().unwrap_or_default();
    let instance = instance.as_str();
    let spec = DeploymentSpec {
        replicas: Some(replicas),
        selector: LabelSelector {
            match_labels: Some(selector_labels(app, instance)),
            ..LabelSelector::default()
        },
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels(app, instance)),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: vec![container],
                // Owned workloads never talk to the apiserver: no token for an image to steal.
                automount_service_account_token: Some(false),
                ..PodSpec::default()
            }),
        },
        ..DeploymentSpec::default()
    };
    Deployment {
        metadata,
        spec: Some(spec),
        ..Deployment::default()
    }
}

/// A probe that opens a TCP connection to the container port named `port`, every 10 s.
pub fn tcp_probe(port: &str) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::String(port.into()),
            ..TCPSocketAction::default()
        }),
        period_seconds: Some(10),
        ..Probe::default()
    }
}

/// The restricted Pod Security Standard for a container running as `user`.
pub fn restricted_security_context(user: i64) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(user),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..SecurityContext::default()
    }
}
