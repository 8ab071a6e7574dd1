//! Welcome: a web app that says "Hello <name>", exposed by a Service.
use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field::{FieldError, FieldErrors};
use crate::rules::welcome::{
    EMAIL, MAX_EMAIL, MAX_GROUP, MAX_GROUPS, MAX_NAME, MAX_PASSWORD, MAX_REPLICAS, MAX_USER_ID,
    MIN_GROUP, MIN_NAME, MIN_PASSWORD, MIN_USER_ID,
};
use crate::rules::{
    check_image, check_length, check_name, check_pattern, check_range, MAX_GENERATION, MAX_IMAGE,
    MAX_INT32, MAX_PORT, MAX_SUBDOMAIN, MIN_PORT, MIN_REPLICAS, SECRET_KEY,
};

pub const DEFAULT_REPLICAS: i32 = 1;
pub const DEFAULT_PORT: i32 = 8088;
/// The warning for a plain `spec.password`. The webhook does not move it into a Secret itself:
/// that Secret would have to exist before the Welcome is admitted, and would be left behind when
/// a later admission step refused the Welcome. So the warning says where the text stays.
pub const PLAIN_PASSWORD_WARNING: &str = "spec.password: the plain password stays readable in \
    this Welcome's spec.password (by anyone who may get Welcomes in this namespace, and in etcd \
    unencrypted), in its kubectl.kubernetes.io/last-applied-configuration annotation when applied \
    with client-side kubectl apply, and in apiserver audit logs at the Request level; only the \
    controller's copy is a Secret. Use spec.passwordSecretRef to keep it in a Secret alone";

/// A public image that answers every request with the text in its arguments.
pub const DEFAULT_IMAGE: &str = "hashicorp/http-echo:1.0.0";
/// Key of the password in the `<name>-credentials` Secret.
pub const PASSWORD_KEY: &str = "password";

/// A web app that says "Hello <name>", exposed by a Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kubesteer.io",
    version = "v1alpha1",
    kind = "Welcome",
    namespaced,
    status = "WelcomeStatus",
    shortname = "wel",
    category = "kubesteer",
    doc = "Welcome runs a web app that says \"Hello <name>\" and exposes it with a Service.",
    printcolumn = r#"{"name":"Greets","type":"string","jsonPath":".spec.name","description":"The name the app greets"}"#,
    printcolumn = r#"{"name":"ReadyReplicas","type":"integer","jsonPath":".status.readyReplicas","description":"Ready pods"}"#,
    printcolumn = r#"{"name":"ServiceURL","type":"string","jsonPath":".status.serviceURL","description":"In-cluster URL of the app"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("!(has(self.password) && has(self.passwordSecretRef))").message("password and passwordSecretRef are mutually exclusive"))]
#[serde(rename_all = "camelCase")]
pub struct WelcomeSpec {
    /// The name the app greets: it answers "Hello <name>". 1-63 characters.
    #[schemars(length(min = MIN_NAME, max = MAX_NAME))]
    pub name: String,

    /// Numeric user ID of the person, 1-65535.
    #[serde(default, rename = "userID", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_USER_ID, max = MAX_USER_ID))]
    pub user_id: Option<i32>,

    /// Groups the person belongs to: up to 32, unique, each 1-63 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_GROUPS), inner(length(min = MIN_GROUP, max = MAX_GROUP)), extend("x-kubernetes-list-type" = "set"))]
    pub groups: Option<Vec<String>>,

    /// Email address of the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_EMAIL), regex(pattern = EMAIL.regex))]
    pub email: Option<String>,

    /// Plain password. Admitted with a warning: prefer passwordSecretRef. Kept in the Secret <name>-credentials, never in a pod spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = MIN_PASSWORD, max = MAX_PASSWORD))]
    pub password: Option<String>,

    /// A key of an existing Secret in the same namespace that holds the password. Excludes password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeyRef>,

    /// Number of pods, 0-100. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_REPLICAS))]
    pub replicas: Option<i32>,

    /// Port the app listens on and the Service exposes, 1-65535. Defaults to 8088.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_PORT, max = MAX_PORT))]
    pub port: Option<i32>,

    /// Type of the Service: NodePort (default), ClusterIP or LoadBalancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,

    /// Container image; it gets env NAME and PORT and must serve HTTP on PORT. Defaults to hashicorp/http-echo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_IMAGE), regex(pattern = crate::rules::IMAGE.regex))]
    pub image: Option<String>,
}

/// A key in a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
pub struct SecretKeyRef {
    /// Name of the Secret, in the Welcome's namespace.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), regex(pattern = crate::rules::DNS1123_SUBDOMAIN.regex))]
    pub name: String,
    /// Key within the Secret.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), regex(pattern = SECRET_KEY.regex))]
    pub key: String,
}

/// How the Welcome's Service is exposed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum ServiceType {
    #[default]
    NodePort,
    ClusterIP,
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::NodePort => "NodePort",
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

/// What a Welcome reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct WelcomeStatus {
    /// Number of ready pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub ready_replicas: Option<i32>,
    /// In-cluster URL of the app, e.g. http://hello.default.svc:8088.
    #[serde(
        default,
        rename = "serviceURL",
        skip_serializing_if = "Option::is_none"
    )]
    pub service_url: Option<String>,
    /// The node port, when the Service is of type NodePort or LoadBalancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_PORT, max = MAX_PORT))]
    pub node_port: Option<i32>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// Standard conditions, among them Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// A plausible email address, by [`EMAIL`].
pub fn is_email(s: &str) -> bool {
    EMAIL.is_match(s)
}

impl WelcomeSpec {
    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(DEFAULT_REPLICAS)
    }
    pub fn port(&self) -> i32 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
    pub fn service_type(&self) -> ServiceType {
        self.service_type.unwrap_or_default()
    }
    pub fn image(&self) -> &str {
        self.image.as_deref().unwrap_or(DEFAULT_IMAGE)
    }

    /// The spec with every default filled in.
    pub fn defaulted(&self) -> Self {
        Self {
            replicas: Some(self.replicas()),
            port: Some(self.port()),
            service_type: Some(self.service_type()),
            image: Some(self.image().to_string()),
            ..self.clone()
        }
    }

    /// Advice that does not deny the object.
    /// What the webhook warns about when admitting this spec.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.password.is_some() {
            warnings.push(PLAIN_PASSWORD_WARNING.to_string());
        }
        warnings
    }

    /// Every violation of the field rules, each with its path. Never echoes the password.
    pub fn validate(&self) -> FieldErrors {
        let mut errors = FieldErrors::new();
        if self.name.is_empty() {
            errors.push(FieldError::required("spec.name", ""));
        } else {
            check_length(&mut errors, "spec.name", &self.name, MIN_NAME, MAX_NAME);
        }
        if let Some(uid) = self.user_id {
            check_range(
                &mut errors,
                "spec.userID",
                uid.into(),
                MIN_USER_ID.into(),
                MAX_USER_ID.into(),
            );
        }
        if let Some(groups) = &self.groups {
            if groups.len() > MAX_GROUPS {
                errors.push(FieldError::too_many(
                    "spec.groups",
                    groups.len(),
                    MAX_GROUPS,
                ));
            }
            let mut seen = BTreeSet::new();
            for (i, g) in groups.iter().enumerate() {
                let path = format!("spec.groups[{i}]");
                let before = errors.len();
                check_length(&mut errors, &path, g, MIN_GROUP, MAX_GROUP);
                if errors.len() == before && !seen.insert(g) {
                    errors.push(FieldError::duplicate(path, g.as_str()));
                }
            }
        }
        if let Some(email) = &self.email {
            if email.chars().count() > MAX_EMAIL {
                check_length(&mut errors, "spec.email", email, 0, MAX_EMAIL);
            } else {
                check_pattern(&mut errors, "spec.email", email, &EMAIL);
            }
        }
        if let Some(p) = &self.password {
            let n = p.chars().count();
            if !(MIN_PASSWORD..=MAX_PASSWORD).contains(&n) {
                // The value itself is never echoed.
                errors.push(FieldError::invalid(
                    "spec.password",
                    "(value omitted)",
                    format!("must be {MIN_PASSWORD}-{MAX_PASSWORD} characters"),
                ));
            }
            if self.password_secret_ref.is_some() {
                errors.push(FieldError::forbidden(
                    "spec.passwordSecretRef",
                    "may not be combined with spec.password",
                ));
            }
        }
        if let Some(r) = &self.password_secret_ref {
            check_name(&mut errors, "spec.passwordSecretRef.name", &r.name, false);
            if r.key.is_empty() {
                errors.push(FieldError::required("spec.passwordSecretRef.key", ""));
            } else if r.key.len() > MAX_SUBDOMAIN {
                check_length(
                    &mut errors,
                    "spec.passwordSecretRef.key",
                    &r.key,
                    1,
                    MAX_SUBDOMAIN,
                );
            } else {
                check_pattern(
                    &mut errors,
                    "spec.passwordSecretRef.key",
                    &r.key,
                    &SECRET_KEY,
                );
            }
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
        if let Some(p) = self.port {
            check_range(
                &mut errors,
                "spec.port",
                p.into(),
                MIN_PORT.into(),
                MAX_PORT.into(),
            );
        }
        if let Some(image) = &self.image {
            check_image(&mut errors, image);
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> WelcomeSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_and_idempotence() {
        let d = spec(json!({"name": "kubesteer"})).defaulted();
        assert_eq!(d.replicas, Some(1));
        assert_eq!(d.port, Some(8088));
        assert_eq!(d.service_type, Some(ServiceType::NodePort));
        assert_eq!(d.image.as_deref(), Some(DEFAULT_IMAGE));
        assert_eq!(d.defaulted(), d);
    }

    #[test]
    fn every_violation_is_reported_and_the_password_is_never_echoed() {
        let s = spec(json!({
            "name": "", "userID": 0, "groups": ["a", "a", ""], "email": "not-an-email",
            "password": "hunter2", "passwordSecretRef": {"name": "creds", "key": "pw"},
            "replicas": 101, "port": 70000
        }));
        let m: Vec<String> = s.validate().iter().map(ToString::to_string).collect();
        for want in [
            "spec.name: Required value",
            "spec.userID: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.groups[1]: Duplicate value: \"a\"",
            "spec.groups[2]: Invalid value: \"\": must be 1-63 characters",
            "spec.email: Invalid value: \"not-an-email\": must be a valid email address",
            "spec.passwordSecretRef: Forbidden: may not be combined with spec.password",
            "spec.replicas: Invalid value: 101: must be between 0 and 100, inclusive",
            "spec.port: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ] {
            assert!(m.contains(&want.to_string()), "missing {want:?} in {m:?}");
        }
        assert!(!m.iter().any(|e| e.contains("hunter2")), "{m:?}");
    }

    #[test]
    fn a_password_is_admitted_with_a_warning() {
        let s = spec(json!({"name": "a", "password": "x"}));
        assert!(s.validate().is_empty());
        assert_eq!(s.warnings().len(), 1);
        assert!(spec(json!({"name": "a"})).warnings().is_empty());
    }

    #[test]
    fn emails() {
        for ok in ["a@b.io", "first.last+tag@sub.example.com"] {
            assert!(is_email(ok), "{ok}");
        }
        for bad in [
            "", "a", "a@", "@b.io", "a@b", "a b@c.io", "a@b..io", "a@-b.io", "a@b@c.io",
        ] {
            assert!(!is_email(bad), "{bad}");
        }
    }
}
