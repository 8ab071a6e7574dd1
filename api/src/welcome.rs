//! Welcome: a web app that says "Hello <name>", exposed by a Service.
use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{MAX_GENERATION, MAX_INT32, MAX_PORT, MIN_PORT, MIN_REPLICAS};
use crate::field::{check_range, FieldError, FieldErrors};

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
pub const MAX_GROUPS: usize = 32;
pub const MAX_REPLICAS: i32 = 100;
/// User IDs as the seed operator took them.
pub const MIN_USER_ID: i32 = 1;
pub const MAX_USER_ID: i32 = 65535;
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
    printcolumn = r#"{"name":"Name","type":"string","jsonPath":".spec.name","description":"The name the app greets"}"#,
    printcolumn = r#"{"name":"ReadyReplicas","type":"integer","jsonPath":".status.readyReplicas","description":"Ready pods"}"#,
    printcolumn = r#"{"name":"ServiceURL","type":"string","jsonPath":".status.serviceURL","description":"In-cluster URL of the app"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("!(has(self.password) && has(self.passwordSecretRef))").message("password and passwordSecretRef are mutually exclusive"))]
#[serde(rename_all = "camelCase")]
pub struct WelcomeSpec {
    /// The name the app greets: it answers "Hello <name>". 1-63 characters.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,

    /// Numeric user ID of the person, 1-65535.
    #[serde(default, rename = "userID", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_USER_ID, max = MAX_USER_ID))]
    pub user_id: Option<i32>,

    /// Groups the person belongs to: up to 32, unique, each 1-63 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 63)), extend("x-kubernetes-list-type" = "set"))]
    pub groups: Option<Vec<String>>,

    /// Email address of the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(email, length(max = 254))]
    pub email: Option<String>,

    /// Plain password. Admitted with a warning: prefer passwordSecretRef. Kept in the Secret <name>-credentials, never in a pod spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
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
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
}

/// A key in a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
pub struct SecretKeyRef {
    /// Name of the Secret, in the Welcome's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret.
    #[schemars(length(min = 1, max = 253))]
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

/// A plausible email address: one '@', a non-empty local part, a dotted domain, no spaces.
pub fn is_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && local.len() <= 64
        && !domain.contains('@')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        && domain.split('.').count() >= 2
        && domain.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
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
        let chars = self.name.chars().count();
        if chars == 0 {
            errors.push(FieldError::required("spec.name", ""));
        } else if chars > 63 {
            errors.push(FieldError::invalid(
                "spec.name",
                self.name.as_str(),
                "must be no more than 63 characters",
            ));
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
                let n = g.chars().count();
                if n == 0 || n > 63 {
                    errors.push(FieldError::invalid(
                        format!("spec.groups[{i}]"),
                        g.as_str(),
                        "must be 1-63 characters",
                    ));
                } else if !seen.insert(g) {
                    errors.push(FieldError::duplicate(
                        format!("spec.groups[{i}]"),
                        g.as_str(),
                    ));
                }
            }
        }
        if let Some(email) = &self.email {
            if !is_email(email) {
                errors.push(FieldError::invalid(
                    "spec.email",
                    email.as_str(),
                    "must be a valid email address",
                ));
            }
        }
        if let Some(p) = &self.password {
            if p.is_empty() {
                errors.push(FieldError::invalid(
                    "spec.password",
                    "",
                    "must not be empty when given",
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
            crate::field::check_name(&mut errors, "spec.passwordSecretRef.name", &r.name, false);
            if r.key.is_empty() {
                errors.push(FieldError::required("spec.passwordSecretRef.key", ""));
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
            if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
                errors.push(FieldError::invalid(
                    "spec.image",
                    image.as_str(),
                    "must be a container image reference without whitespace",
                ));
            }
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
