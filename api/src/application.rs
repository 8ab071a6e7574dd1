//! Application: the kubebuilder tutorial's fourth kind, a Deployment with its ClusterIP Service
//! and, when asked, an Ingress in front of it.
pub mod hosts;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use crate::field::{FieldError, FieldErrors};
use crate::rules::application::{
    not_an_ip_rule, DOTTED_NUMBERS, ENV_NAME, HOST, MAX_ENV, MAX_ENV_NAME, MAX_PATH, MAX_REPLICAS,
    PATH,
};
use crate::rules::{
    check_image, check_length, check_name, check_pattern, check_range, MAX_GENERATION, MAX_IMAGE,
    MAX_INT32, MAX_PORT, MAX_SUBDOMAIN, MIN_PORT, MIN_REPLICAS,
};

pub const DEFAULT_REPLICAS: i32 = 1;
/// The container port of the tutorial's app.
pub const DEFAULT_PORT: i32 = 8080;
pub const DEFAULT_SERVICE_PORT: i32 = 80;
pub const DEFAULT_PATH: &str = "/";
pub const DEFAULT_PATH_TYPE: PathType = PathType::Prefix;

/// An app: a Deployment of one container, a ClusterIP Service in front of it and, with
/// `spec.ingress`, an Ingress that routes a host and path to that Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kubesteer.io",
    version = "v1alpha1",
    kind = "Application",
    namespaced,
    status = "ApplicationStatus",
    shortname = "app",
    category = "kubesteer",
    doc = "Application runs a container image as a Deployment behind a ClusterIP Service and, with spec.ingress, an Ingress.",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image","description":"Container image"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"Ready pods"}"#,
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".status.url","description":"Where the app answers: the Ingress URL, else the in-cluster Service URL"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    /// Container image, e.g. registry.example.com/team/app:1.0 (lowercase repository, optional tag and digest). Required.
    #[schemars(length(min = 1, max = MAX_IMAGE), regex(pattern = crate::rules::IMAGE.regex))]
    pub image: String,

    /// Number of pods, 0-100. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_REPLICAS))]
    pub replicas: Option<i32>,

    /// Port the container listens on, 1-65535; the Service forwards to it. Defaults to 8080.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_PORT, max = MAX_PORT))]
    pub port: Option<i32>,

    /// Port of the ClusterIP Service (and the Ingress backend), 1-65535. Defaults to 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_PORT, max = MAX_PORT))]
    pub service_port: Option<i32>,

    /// Environment variables of the container, at most 128, names unique. A value from a Secret or ConfigMap (valueFrom) needs the author's permission to get that object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "env_schema")]
    pub env: Option<Vec<EnvVar>>,

    /// Compute resources of the container. No default: the namespace's LimitRange applies.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::common::deserialize_resources"
    )]
    #[schemars(schema_with = "crate::common::resources_schema")]
    pub resources: Option<ResourceRequirements>,

    /// An Ingress (networking.k8s.io/v1) named as the Application, routing host and path to the Service. Removing it deletes the Ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressSpec>,
}

/// How the Application is reached from outside the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    /// Host name, e.g. example.foo.com: a lowercase DNS-1123 subdomain, optionally with one leading "*." wildcard label. Not an IP address.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), regex(pattern = HOST.regex))]
    #[x_kube(validation = Rule::new(not_an_ip_rule()).message(DOTTED_NUMBERS.message))]
    pub host: String,

    /// HTTP path, starting with "/", without whitespace or any of ; { } $ ". Defaults to "/".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_PATH), regex(pattern = PATH.regex))]
    pub path: Option<String>,

    /// How the path matches: Prefix (default), Exact or ImplementationSpecific.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_type: Option<PathType>,

    /// The IngressClass that serves the Ingress, e.g. nginx. Unset: the cluster's default class. A name that no IngressClass has is admitted with a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), regex(pattern = crate::rules::DNS1123_SUBDOMAIN.regex))]
    pub class_name: Option<String>,

    /// TLS for the host, with the certificate in a Secret of this namespace; the URL is then https.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<IngressTls>,
}

/// The TLS certificate of an Application's host.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngressTls {
    /// Name of the kubernetes.io/tls Secret, in the Application's namespace, that holds the certificate.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), regex(pattern = crate::rules::DNS1123_SUBDOMAIN.regex))]
    pub secret_name: String,
}

/// How an Ingress path matches, as in networking.k8s.io/v1.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum PathType {
    #[default]
    Prefix,
    Exact,
    ImplementationSpecific,
}

impl PathType {
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::Prefix => "Prefix",
            PathType::Exact => "Exact",
            PathType::ImplementationSpecific => "ImplementationSpecific",
        }
    }
}

/// What an Application reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    /// Number of ready pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub ready_replicas: Option<i32>,
    /// Where the app answers: https://host/path with TLS, http://host/path with an Ingress, else the in-cluster Service URL http://name.namespace.svc:servicePort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The address (IP or host name) the Ingress controller published for the Ingress, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<String>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// Standard conditions: Ready, Available, Progressing and Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Why an env var with both a value and a valueFrom is refused.
const VALUE_AND_VALUE_FROM: &str = "may not be specified when `value` is not empty";
/// Why a valueFrom without exactly one source is refused.
const ONE_SOURCE: &str =
    "must specify exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef and fileKeyRef";
/// Why a valueFrom.fileKeyRef is refused.
const NO_FILE_KEY_REF: &str = "the Application's pod has no volumes to read a file from";

/// `env`: the core EnvVar list, at most [`MAX_ENV`], keyed by name so that server-side apply
/// merges it entry by entry.
fn env_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut item = generator.subschema_for::<EnvVar>();
    if let Some(name) = item
        .get_mut("properties")
        .and_then(|p| p.get_mut("name"))
        .and_then(|n| n.as_object_mut())
    {
        name.insert("maxLength".into(), MAX_ENV_NAME.into());
        name.insert("pattern".into(), ENV_NAME.regex.into());
    }
    item.insert(
        "x-kubernetes-validations".into(),
        serde_json::json!([
            {
                "rule": "!has(self.valueFrom) || !has(self.value) || self.value == ''",
                "message": VALUE_AND_VALUE_FROM,
                "fieldPath": ".valueFrom",
            },
            {
                "rule": "!has(self.valueFrom) || [has(self.valueFrom.secretKeyRef), has(self.valueFrom.configMapKeyRef), has(self.valueFrom.fieldRef), has(self.valueFrom.resourceFieldRef), has(self.valueFrom.fileKeyRef)].filter(x, x).size() == 1",
                "message": ONE_SOURCE,
                "fieldPath": ".valueFrom",
            },
            {
                "rule": "!has(self.valueFrom) || !has(self.valueFrom.fileKeyRef)",
                "message": NO_FILE_KEY_REF,
                "fieldPath": ".valueFrom.fileKeyRef",
            },
        ]),
    );
    schemars::json_schema!({
        "type": "array",
        "nullable": true,
        "maxItems": MAX_ENV,
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    })
}

impl IngressSpec {
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or(DEFAULT_PATH)
    }
    pub fn path_type(&self) -> PathType {
        self.path_type.unwrap_or(DEFAULT_PATH_TYPE)
    }

    /// The URL the Ingress serves the app at.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}{}", self.host, self.path())
    }

    fn defaulted(&self) -> Self {
        Self {
            path: Some(self.path().to_string()),
            path_type: Some(self.path_type()),
            ..self.clone()
        }
    }
}

/// The error when another namespace already serves `host`: a host belongs to the namespace
/// that serves it first (as OpenShift's route admission decides), since many Ingress controllers
/// merge one host's rules across namespaces and a second namespace could take over its paths.
/// `owner` names that namespace's Ingress only to an author who may read it.
pub fn host_taken(host: &str, owner: Option<&str>) -> FieldError {
    let by = match owner {
        Some(ingress) => format!("Ingress {ingress}"),
        None => "an Ingress of another namespace".to_string(),
    };
    FieldError::forbidden(
        "spec.ingress.host",
        format!("host {host:?} is served by {by}; a host belongs to the namespace that serves it first (the chart's webhook.allowHostSharing lifts this)"),
    )
}

/// The error when another namespace holds the claim ([`hosts`]) of `host`, or of `by`: a wildcard
/// that covers it, or a host that it, a wildcard, covers. The namespace is not named: the claim
/// is the webhook's record, readable by cluster administrators (`kubectl get leases` in its
/// namespace).
pub fn host_claimed(host: &str, by: &str) -> FieldError {
    let what = if by == host {
        format!("host {host:?} belongs to another namespace")
    } else {
        format!("host {host:?} overlaps {by:?}, which belongs to another namespace")
    };
    FieldError::forbidden(
        "spec.ingress.host",
        format!("{what}; a host belongs to the namespace that serves it first (the chart's webhook.allowHostSharing lifts this)"),
    )
}

impl ApplicationSpec {
    /// Whether the Ingress part is new or changed since `old` (always on CREATE, `old` None).
    pub fn ingress_changed(&self, old: Option<&ApplicationSpec>) -> bool {
        old.is_none_or(|o| o.ingress != self.ingress)
    }

    /// The host to check for ownership: on CREATE, and when an UPDATE brings a new host.
    pub fn new_host(&self, old: Option<&ApplicationSpec>) -> Option<&str> {
        let host = &self.ingress.as_ref()?.host;
        let before = old.and_then(|o| o.ingress.as_ref()).map(|i| &i.host);
        (before != Some(host)).then_some(host.as_str())
    }

    /// The error when the Ingress part asks for `ImplementationSpecific` paths where the cluster
    /// does not allow them (the webhook's `--allow-implementation-specific-paths`): with it, an
    /// Ingress controller reads the path its own way (as a regular expression, in some), beyond
    /// what the path rule checks. On CREATE and when the Ingress part changes, so an object
    /// admitted before stays editable.
    pub fn path_type_refused(
        &self,
        old: Option<&ApplicationSpec>,
        allowed: bool,
    ) -> Option<FieldError> {
        let ingress = self.ingress.as_ref()?;
        let changed = self.ingress_changed(old);
        (changed && !allowed && ingress.path_type() == PathType::ImplementationSpecific).then(|| {
            FieldError::forbidden(
                "spec.ingress.pathType",
                "ImplementationSpecific lets the Ingress controller read the path its own way; this cluster allows Prefix and Exact (the chart's webhook.allowImplementationSpecificPaths)",
            )
        })
    }

    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(DEFAULT_REPLICAS)
    }
    pub fn port(&self) -> i32 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
    pub fn service_port(&self) -> i32 {
        self.service_port.unwrap_or(DEFAULT_SERVICE_PORT)
    }
    pub fn env(&self) -> &[EnvVar] {
        self.env.as_deref().unwrap_or_default()
    }

    /// Where the app answers: the Ingress's URL, else the Service's in the cluster.
    pub fn url(&self, name: &str, namespace: &str) -> String {
        match &self.ingress {
            Some(ingress) => ingress.url(),
            None => format!("http://{name}.{namespace}.svc:{}", self.service_port()),
        }
    }

    /// The spec with every default filled in; nothing inside a list item.
    pub fn defaulted(&self) -> Self {
        Self {
            replicas: Some(self.replicas()),
            port: Some(self.port()),
            service_port: Some(self.service_port()),
            ingress: self.ingress.as_ref().map(IngressSpec::defaulted),
            ..self.clone()
        }
    }

    /// Every violation of the field rules, each with its path.
    pub fn validate(&self) -> FieldErrors {
        let mut errors = FieldErrors::new();
        if self.image.is_empty() {
            errors.push(FieldError::required("spec.image", ""));
        } else {
            check_image(&mut errors, &self.image);
        }
        if let Some(r) = self.replicas {
            check_range(
                &mut errors,
                "spec.replicas",
                r.into(),
                MIN_REPLICAS.into(),
                MAX_REPLICAS.into(),
            );
        }
        for (path, port) in [
            ("spec.port", self.port),
            ("spec.servicePort", self.service_port),
        ] {
            if let Some(p) = port {
                check_range(
                    &mut errors,
                    path,
                    p.into(),
                    MIN_PORT.into(),
                    MAX_PORT.into(),
                );
            }
        }
        self.validate_env(&mut errors);
        if let Some(resources) = &self.resources {
            crate::common::check_resources(&mut errors, "spec.resources", resources);
        }
        if let Some(ingress) = &self.ingress {
            ingress.validate(&mut errors);
        }
        errors
    }

    fn validate_env(&self, errors: &mut FieldErrors) {
        let env = self.env();
        if env.len() > MAX_ENV {
            errors.push(FieldError::too_many("spec.env", env.len(), MAX_ENV));
        }
        let mut seen = BTreeSet::new();
        for (i, var) in env.iter().enumerate() {
            let path = format!("spec.env[{i}].name");
            if var.name.is_empty() {
                errors.push(FieldError::required(path, ""));
                continue;
            }
            if var.name.len() > MAX_ENV_NAME {
                check_length(errors, &path, &var.name, 1, MAX_ENV_NAME);
            } else {
                check_pattern(errors, &path, &var.name, &ENV_NAME);
            }
            if !seen.insert(var.name.as_str()) {
                errors.push(FieldError::duplicate(path, var.name.as_str()));
            }
            let Some(from) = &var.value_from else {
                continue;
            };
            let path = format!("spec.env[{i}].valueFrom");
            if var.value.as_deref().is_some_and(|v| !v.is_empty()) {
                errors.push(FieldError::forbidden(path.clone(), VALUE_AND_VALUE_FROM));
            }
            let sources = [
                from.secret_key_ref.is_some(),
                from.config_map_key_ref.is_some(),
                from.field_ref.is_some(),
                from.resource_field_ref.is_some(),
                from.file_key_ref.is_some(),
            ];
            if sources.iter().filter(|s| **s).count() != 1 {
                errors.push(FieldError::invalid(
                    path.clone(),
                    "(value omitted)",
                    ONE_SOURCE,
                ));
            }
            if from.file_key_ref.is_some() {
                errors.push(FieldError::forbidden(
                    format!("{path}.fileKeyRef"),
                    NO_FILE_KEY_REF,
                ));
            }
            if let Some(r) = &from.secret_key_ref {
                check_name(errors, format!("{path}.secretKeyRef.name"), &r.name, false);
            }
            if let Some(r) = &from.config_map_key_ref {
                check_name(
                    errors,
                    format!("{path}.configMapKeyRef.name"),
                    &r.name,
                    false,
                );
            }
        }
    }

    /// Advice that does not deny the object: none that needs no cluster.
    pub fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

impl IngressSpec {
    fn validate(&self, errors: &mut FieldErrors) {
        let host = "spec.ingress.host";
        if self.host.is_empty() {
            errors.push(FieldError::required(host, ""));
        } else if self.host.len() > MAX_SUBDOMAIN {
            check_length(errors, host, &self.host, 1, MAX_SUBDOMAIN);
        } else if DOTTED_NUMBERS.is_match(&self.host) {
            let message = DOTTED_NUMBERS.message;
            errors.push(FieldError::invalid(host, self.host.as_str(), message));
        } else {
            check_pattern(errors, host, &self.host, &HOST);
        }
        if let Some(path) = &self.path {
            if path.chars().count() > MAX_PATH {
                check_length(errors, "spec.ingress.path", path, 1, MAX_PATH);
            } else {
                check_pattern(errors, "spec.ingress.path", path, &PATH);
            }
        }
        if let Some(class) = &self.class_name {
            check_name(errors, "spec.ingress.className", class, false);
        }
        if let Some(tls) = &self.tls {
            check_name(
                errors,
                "spec.ingress.tls.secretName",
                &tls.secret_name,
                false,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ApplicationSpec {
        serde_json::from_value(v).unwrap()
    }

    fn messages(s: &ApplicationSpec) -> Vec<String> {
        s.validate().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn defaults_are_the_tutorials_and_idempotent() {
        let d = spec(json!({"image": "nginx", "ingress": {"host": "example.foo.com"}})).defaulted();
        assert_eq!(d.replicas, Some(1));
        assert_eq!(d.port, Some(8080));
        assert_eq!(d.service_port, Some(80));
        let ingress = d.ingress.clone().unwrap();
        assert_eq!(ingress.path.as_deref(), Some("/"));
        assert_eq!(ingress.path_type, Some(PathType::Prefix));
        assert_eq!(ingress.class_name, None, "no class: the cluster's default");
        assert_eq!(d.defaulted(), d);
        assert!(d.validate().is_empty(), "{:?}", d.validate());
        let zero = spec(json!({"image": "nginx", "replicas": 0})).defaulted();
        assert_eq!(zero.replicas, Some(0), "0 is a value, not a missing field");
        assert_eq!(zero.ingress, None);
    }

    #[test]
    fn a_path_that_could_inject_ingress_configuration_is_refused() {
        for bad in ["/a;b", "/{x}", "/a$", "/a\"b", "/login;} location / {"] {
            let s = spec(json!({"image": "nginx", "ingress": {"host": "a.io", "path": bad}}));
            let errors = s.validate();
            assert!(
                errors.iter().any(|e| e.path == "spec.ingress.path"
                    && e.to_string().contains("any of ; { } $ \"")),
                "{bad}: {errors:?}"
            );
        }
        for good in ["/", "/shop/cart", "/a%20b", "/a-b_c.d~e"] {
            let s = spec(json!({"image": "nginx", "ingress": {"host": "a.io", "path": good}}));
            assert!(s.validate().is_empty(), "{good}");
        }
    }

    #[test]
    fn implementation_specific_paths_need_the_clusters_leave() {
        let s = spec(
            json!({"image": "nginx", "ingress": {"host": "a.io", "pathType": "ImplementationSpecific"}}),
        );
        let refused = s.path_type_refused(None, false).expect("refused");
        assert_eq!(refused.path, "spec.ingress.pathType");
        assert!(s.path_type_refused(None, true).is_none(), "allowed");
        assert!(
            s.path_type_refused(Some(&s), false).is_none(),
            "unchanged since admitted"
        );
        let prefix = spec(json!({"image": "nginx", "ingress": {"host": "a.io"}}));
        assert!(prefix.path_type_refused(None, false).is_none());
        assert!(
            s.path_type_refused(Some(&prefix), false).is_some(),
            "changed to it"
        );
    }

    #[test]
    fn urls() {
        let s = spec(json!({"image": "nginx"}));
        assert_eq!(s.url("web", "team"), "http://web.team.svc:80");
        let s = spec(json!({"image": "nginx", "ingress": {"host": "a.io", "path": "/x"}}));
        assert_eq!(s.url("web", "team"), "http://a.io/x");
        let s = spec(
            json!({"image": "nginx", "ingress": {"host": "a.io", "tls": {"secretName": "t"}}}),
        );
        assert_eq!(s.url("web", "team"), "https://a.io/");
    }

    #[test]
    fn every_violation_is_reported_with_its_path() {
        let s = spec(json!({
            "image": "",
            "replicas": 101, "port": 0, "servicePort": 65536,
            "env": [
                {"name": "A", "value": "1"}, {"name": "A", "value": "2"}, {"name": "B=C"},
                {"name": "S", "value": "x", "valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k"}}},
            ],
            "ingress": {"host": "Example.com", "path": "x", "className": "Nginx", "tls": {"secretName": ""}}
        }));
        let m = messages(&s);
        for want in [
            "spec.image: Required value",
            "spec.replicas: Invalid value: 101: must be between 0 and 100, inclusive",
            "spec.port: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.servicePort: Invalid value: 65536: must be between 1 and 65535, inclusive",
            "spec.env[1].name: Duplicate value: \"A\"",
            "spec.env[3].valueFrom: Forbidden: may not be specified when `value` is not empty",
            "spec.ingress.tls.secretName: Required value",
        ] {
            assert!(m.contains(&want.to_string()), "missing {want:?} in {m:?}");
        }
        for path in [
            "spec.env[2].name: Invalid value: \"B=C\"",
            "spec.env[3].valueFrom.secretKeyRef.name: Invalid value",
            "spec.ingress.host: Invalid value: \"Example.com\"",
            "spec.ingress.path: Invalid value: \"x\"",
            "spec.ingress.className: Invalid value: \"Nginx\"",
        ] {
            assert!(
                m.iter().any(|e| e.starts_with(path)),
                "missing {path:?} in {m:?}"
            );
        }
    }

    #[test]
    fn hosts_as_the_ingress_api_takes_them() {
        for ok in ["example.foo.com", "*.foo.com", "a", "a-b.c"] {
            let s = spec(json!({"image": "nginx", "ingress": {"host": ok}}));
            assert!(s.validate().is_empty(), "{ok}: {:?}", s.validate());
        }
        for bad in [
            "*", "a.*.com", "*.*.a", "10.0.0.1", "-a.com", "a..b", "a_b.com", "::1",
        ] {
            let s = spec(json!({"image": "nginx", "ingress": {"host": bad}}));
            let m = messages(&s);
            assert!(
                m.len() == 1 && m[0].starts_with("spec.ingress.host: Invalid value"),
                "{bad}: {m:?}"
            );
        }
    }

    #[test]
    fn env_from_the_downward_api_is_fine_and_one_source_is_required() {
        let s = spec(json!({"image": "nginx", "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "EMPTY"},
            {"name": "with space inside", "value": "ok"},
        ]}));
        assert!(s.validate().is_empty(), "{:?}", s.validate());
        let s = spec(json!({"image": "nginx", "env": [{"name": "X", "valueFrom": {}}]}));
        assert_eq!(
            messages(&s),
            vec!["spec.env[0].valueFrom: Invalid value: \"(value omitted)\": must specify exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef and fileKeyRef"]
        );
    }
}
