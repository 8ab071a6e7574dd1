//! The permissions a CR's author must hold for what the CR makes the system do.
pub mod author;

use std::fmt;

use crate::field::FieldError;
use crate::{ApplicationSpec, ScalerSpec, WelcomeSpec};

/// One permission, as the resource attributes of a SubjectAccessReview.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Access {
    pub verb: &'static str,
    /// API group; empty for the core group.
    pub group: String,
    pub resource: String,
    /// Empty when the permission is on the resource itself.
    pub subresource: &'static str,
    pub namespace: String,
    pub name: String,
}

impl Access {
    /// `patch` on `deployments/scale` of one Deployment: what the controller does to a target.
    pub fn scale_deployment(namespace: &str, name: &str) -> Self {
        Self::scale("apps", "deployments", namespace, name)
    }

    /// `patch` on `<resource>/scale` of one object: what the controller does to a target (it
    /// patches the replicas, through `/scale` or, for the apps/v1 workloads, with its record in
    /// one merge patch of the object), and what the chart grants it on every scalable kind.
    /// A kind suspended instead of scaled (a CronJob or Job) has no `/scale`: `patch` on the
    /// object.
    pub fn scale(group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        let suspended = crate::scaler::v1beta1::suspended_instead(group, resource);
        Self {
            verb: "patch",
            group: group.into(),
            resource: resource.into(),
            subresource: if suspended { "" } else { "scale" },
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// `patch` on one object: what the controller does to a target of a kind the Scaler puts to
    /// sleep by a declared patch (`spec.patches`), and what its author must be allowed to do.
    pub fn patch_object(group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        Self {
            subresource: "",
            ..Self::scale(group, resource, namespace, name)
        }
    }

    /// `patch` on the HorizontalPodAutoscalers of a namespace: what the controller does to the
    /// HPA of a target when it cooperates with it (a merge patch of its minReplicas), and the
    /// verb the chart grants it there.
    pub fn patch_autoscalers(namespace: &str) -> Self {
        Self {
            verb: "patch",
            group: "autoscaling".into(),
            resource: "horizontalpodautoscalers".into(),
            subresource: "",
            namespace: namespace.into(),
            name: String::new(),
        }
    }

    /// `patch` on the KEDA ScaledObjects of a namespace: what the controller does, instead of
    /// setting an HPA's minReplicas, to a target whose HPA a ScaledObject owns (KEDA's
    /// `paused-replicas` annotation). Asked where the cluster serves KEDA.
    pub fn patch_scaled_objects(namespace: &str) -> Self {
        Self {
            verb: "patch",
            group: "keda.sh".into(),
            resource: "scaledobjects".into(),
            subresource: "",
            namespace: namespace.into(),
            name: String::new(),
        }
    }

    /// `get` on one Secret: what the controller does with a referenced password.
    pub fn get_secret(namespace: &str, name: &str) -> Self {
        Self::get_core("secrets", namespace, name)
    }

    /// `get` on one ConfigMap: what an owned pod does with an environment variable from it.
    pub fn get_config_map(namespace: &str, name: &str) -> Self {
        Self::get_core("configmaps", namespace, name)
    }

    /// `get` on one Ingress: what a warning naming it tells.
    pub fn get_ingress(namespace: &str, name: &str) -> Self {
        Self {
            group: "networking.k8s.io".into(),
            ..Self::get_core("ingresses", namespace, name)
        }
    }

    /// `create` on the Ingresses of a namespace: what the controller does for an Application
    /// with `spec.ingress`, which its author must be able to do as well.
    pub fn create_ingresses(namespace: &str) -> Self {
        Self {
            verb: "create",
            ..Self::get_ingress(namespace, "")
        }
    }

    fn get_core(resource: &'static str, namespace: &str, name: &str) -> Self {
        Self {
            verb: "get",
            group: String::new(),
            resource: resource.into(),
            subresource: "",
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// Reads like `patch deployments/scale (apps) "web" in namespace "team"`.
impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        if !self.group.is_empty() {
            write!(f, " ({})", self.group)?;
        }
        if self.name.is_empty() && self.namespace.is_empty() {
            write!(f, " in every namespace")
        } else if self.name.is_empty() {
            write!(f, " in namespace {:?}", self.namespace)
        } else {
            write!(f, " {:?} in namespace {:?}", self.name, self.namespace)
        }
    }
}

/// The container images that owned pods may run, set by the cluster's admin (the chart's
/// `webhook.allowedImages`): a list of prefixes, as Gatekeeper's allowed repositories, compared
/// with the reference as written (`nginx` is not `docker.io/library/nginx`). End an entry with
/// `/`, `:` or `@` so that `registry.example.com/` does not also allow `registry.example.com.evil`.
/// An empty list allows any image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImagePolicy {
    allowed: Vec<String>,
}

impl ImagePolicy {
    /// A policy of the non-empty entries of `allowed`, trimmed.
    pub fn new(allowed: impl IntoIterator<Item = String>) -> Self {
        Self {
            allowed: allowed
                .into_iter()
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect(),
        }
    }

    pub fn allows(&self, image: &str) -> bool {
        self.allowed.is_empty() || self.allowed.iter().any(|p| image.starts_with(p.as_str()))
    }

    /// The error at `spec.image` when the policy refuses `image`.
    pub fn check(&self, image: &str) -> Option<FieldError> {
        (!self.allows(image)).then(|| {
            FieldError::forbidden(
                "spec.image",
                format!(
                    "image {image:?} is not allowed in this cluster; allowed are images starting with {}",
                    self.allowed
                        .iter()
                        .map(|p| format!("{p:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
    }
}

impl ScalerSpec {
    /// Every target's field path and the permissions its author needs, on CREATE and on an
    /// UPDATE that changes the spec (any spec field decides what happens to the targets; see
    /// [`crate::kind::rechecks`]): `patch` on the target's scale subresource, and, while the
    /// Scaler cooperates with HorizontalPodAutoscalers (the default), `patch` on the HPAs of the
    /// target's namespace. A target of a kind put to sleep by a declared patch needs `patch` on
    /// the object itself. These are the verbs the controller uses, and the chart grants it.
    /// `resource_of` maps a target to its resource (plural) through the cluster's RESTMapper; a
    /// target it cannot map is left to the caller, which denies it as unknown.
    pub fn required_access(
        &self,
        own_namespace: &str,
        resource_of: impl Fn(&str, &str) -> Option<String>,
    ) -> Vec<(String, Access)> {
        let cooperate = self.hpa_cooperation() == crate::scaler::v1beta1::HpaCooperation::Enabled;
        let mut seen = std::collections::BTreeSet::new();
        let mut access = Vec::new();
        for (i, (target, ns)) in self.targets(own_namespace).enumerate() {
            let path = format!("spec.scaleTargetRefs[{i}]");
            if let Some(resource) = resource_of(&target.api_version, &target.kind) {
                let (group, name) = (target.group(), &target.name);
                let right = match self.patch_for(group, &target.kind) {
                    Some(_) => Access::patch_object(group, &resource, ns, name),
                    None => Access::scale(group, &resource, ns, name),
                };
                access.push((path.clone(), right));
            }
            if cooperate && seen.insert(ns) {
                access.push((path, Access::patch_autoscalers(ns)));
            }
        }
        // The calendar is read with the controller's rights: its author must be able to read it.
        if let Some(calendar) = &self.exclude_calendar {
            access.push((
                "spec.excludeCalendar.name".to_string(),
                Access::get_config_map(own_namespace, &calendar.name),
            ));
        }
        // A selector: every selected kind in every listed namespace, by no name (all of them,
        // including those created later); with a namespaceSelector, in every namespace ("").
        if let Some(selector) = &self.selector {
            let namespaces: Vec<&str> = match selector.listed_namespaces(own_namespace) {
                Some(listed) => listed.into_iter().collect(),
                None => vec![""],
            };
            let at = match (&selector.namespaces, &selector.namespace_selector) {
                (_, Some(_)) => "spec.selector.namespaceSelector".to_string(),
                (Some(_), None) => "spec.selector.namespaces".to_string(),
                (None, None) => "spec.selector".to_string(),
            };
            for (i, (api_version, kind)) in selector.kinds().iter().enumerate() {
                let Some(resource) = resource_of(api_version, kind) else {
                    continue;
                };
                let group = crate::scaler::target::group_of(api_version);
                for ns in &namespaces {
                    let path = match &selector.kinds {
                        Some(_) => format!("spec.selector.kinds[{i}]"),
                        None => at.clone(),
                    };
                    access.push((path, Access::scale(group, &resource, ns, "")));
                }
            }
            for ns in namespaces {
                if cooperate && seen.insert(ns) {
                    access.push((at.clone(), Access::patch_autoscalers(ns)));
                }
            }
        }
        access
    }
}

impl WelcomeSpec {
    /// The Secret permission to check: on CREATE, and on an UPDATE that points the ref at
    /// another Secret or key, or changes the image that runs with the password (an image swap
    /// would read a Secret its author may not), so unrelated edits by others stay possible.
    pub fn required_access(
        &self,
        own_namespace: &str,
        old: Option<&WelcomeSpec>,
    ) -> Option<(String, Access)> {
        let r = self.password_secret_ref.as_ref()?;
        let unchanged = old.is_some_and(|o| {
            o.password_secret_ref.as_ref() == Some(r) && o.image() == self.image()
        });
        (!unchanged).then(|| {
            (
                "spec.passwordSecretRef.name".to_string(),
                Access::get_secret(own_namespace, &r.name),
            )
        })
    }
}

impl ApplicationSpec {
    /// The Secrets and ConfigMaps the pods would read through `env`, each with its field path:
    /// on CREATE all of them; on UPDATE every one of them when the image changes (what runs with
    /// them is then someone else's choice), and otherwise those the old spec did not read
    /// already, a new key of the same object included (so others can still edit the rest).
    pub fn required_access(
        &self,
        own_namespace: &str,
        old: Option<&ApplicationSpec>,
    ) -> Vec<(String, Access)> {
        let reads = |spec: &ApplicationSpec| -> Vec<(String, Access, String)> {
            let mut reads = Vec::new();
            for (i, var) in spec.env().iter().enumerate() {
                let Some(from) = &var.value_from else {
                    continue;
                };
                if let Some(r) = &from.secret_key_ref {
                    reads.push((
                        format!("spec.env[{i}].valueFrom.secretKeyRef.name"),
                        Access::get_secret(own_namespace, &r.name),
                        r.key.clone(),
                    ));
                }
                if let Some(r) = &from.config_map_key_ref {
                    reads.push((
                        format!("spec.env[{i}].valueFrom.configMapKeyRef.name"),
                        Access::get_config_map(own_namespace, &r.name),
                        r.key.clone(),
                    ));
                }
            }
            reads
        };
        let before: Vec<(Access, String)> = match old {
            Some(o) if o.image == self.image => {
                reads(o).into_iter().map(|(_, a, k)| (a, k)).collect()
            }
            _ => Vec::new(),
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut required: Vec<(String, Access)> = reads(self)
            .into_iter()
            .filter(|(_, access, key)| {
                !before.iter().any(|(a, k)| a == access && k == key) && seen.insert(access.clone())
            })
            .map(|(path, access, _)| (path, access))
            .collect();
        // The Ingress is created with the controller's rights; its author needs their own, on
        // CREATE and whenever the Ingress changes (host, path, class).
        if self.ingress.is_some() && self.ingress_changed(old) {
            required.push((
                "spec.ingress".to_string(),
                Access::create_ingresses(own_namespace),
            ));
        }
        required
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_image_policy_allows_by_prefix_and_an_empty_one_allows_any() {
        use super::ImagePolicy;
        let any = ImagePolicy::new(Vec::new());
        assert!(any.allows("anything:latest") && any.check("x").is_none());
        let policy = ImagePolicy::new([
            "registry.example.com/".to_string(),
            " hashicorp/http-echo:".to_string(),
            "".to_string(),
        ]);
        assert!(policy.allows("registry.example.com/team/app:1"));
        assert!(policy.allows("hashicorp/http-echo:1.0"));
        assert!(!policy.allows("registry.example.com.evil/app"));
        assert!(!policy.allows("hashicorp/http-echo-evil:1"));
        let error = policy.check("evil/exfiltrate:1").expect("refused");
        assert_eq!(error.path, "spec.image");
        assert!(
            error
                .to_string()
                .contains("\"evil/exfiltrate:1\" is not allowed"),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .contains("\"registry.example.com/\", \"hashicorp/http-echo:\""),
            "{error}"
        );
    }

    use super::*;
    use crate::welcome::SecretKeyRef;

    fn welcome(secret: Option<&str>) -> WelcomeSpec {
        WelcomeSpec {
            name: "x".into(),
            password_secret_ref: secret.map(|s| SecretKeyRef {
                name: s.into(),
                key: "pw".into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_v1beta1_target_needs_its_scale_and_the_autoscalers_unless_cooperation_is_off() {
        let mut spec: crate::scaler::v1beta1::ScalerSpec =
            serde_json::from_value(serde_json::json!({
                "scaleTargetRefs": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"},
                    {"apiVersion": "example.com/v1", "kind": "Unknown", "name": "x"},
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "prod"}
                ],
                "windows": [{"start": 1, "end": 2}]
            }))
            .unwrap();
        let resource_of = |_: &str, kind: &str| match kind {
            "StatefulSet" => Some("statefulsets".to_string()),
            "Deployment" => Some("deployments".to_string()),
            _ => None,
        };
        let shown: Vec<String> = spec
            .required_access("team", resource_of)
            .iter()
            .map(|(path, a)| format!("{path}: {a}"))
            .collect();
        assert_eq!(
            shown,
            [
                "spec.scaleTargetRefs[0]: patch statefulsets/scale (apps) \"db\" in namespace \"team\"",
                "spec.scaleTargetRefs[0]: patch horizontalpodautoscalers (autoscaling) in namespace \"team\"",
                "spec.scaleTargetRefs[2]: patch deployments/scale (apps) \"web\" in namespace \"prod\"",
                "spec.scaleTargetRefs[2]: patch horizontalpodautoscalers (autoscaling) in namespace \"prod\"",
            ]
        );
        spec.hpa_cooperation = Some(crate::scaler::v1beta1::HpaCooperation::Disabled);
        assert_eq!(spec.required_access("team", resource_of).len(), 2);
    }

    #[test]
    fn a_selector_needs_every_kind_in_every_namespace_it_searches() {
        let resource_of = |_: &str, kind: &str| match kind {
            "StatefulSet" => Some("statefulsets".to_string()),
            "Deployment" => Some("deployments".to_string()),
            _ => None,
        };
        let shown = |spec: serde_json::Value| -> Vec<String> {
            let spec: crate::scaler::v1beta1::ScalerSpec =
                serde_json::from_value(spec).expect("a spec");
            spec.required_access("team", resource_of)
                .iter()
                .map(|(path, a)| format!("{path}: {a}"))
                .collect()
        };
        assert_eq!(
            shown(serde_json::json!({"selector": {}, "hpaCooperation": "Disabled"})),
            [
                "spec.selector: patch deployments/scale (apps) in namespace \"team\"",
                "spec.selector: patch statefulsets/scale (apps) in namespace \"team\"",
            ]
        );
        assert_eq!(
            shown(serde_json::json!({"selector": {"kinds": [{"apiVersion": "apps/v1", "kind": "Deployment"}], "namespaces": ["a", "b"]}})),
            [
                "spec.selector.kinds[0]: patch deployments/scale (apps) in namespace \"a\"",
                "spec.selector.kinds[0]: patch deployments/scale (apps) in namespace \"b\"",
                "spec.selector.namespaces: patch horizontalpodautoscalers (autoscaling) in namespace \"a\"",
                "spec.selector.namespaces: patch horizontalpodautoscalers (autoscaling) in namespace \"b\"",
            ]
        );
        assert_eq!(
            shown(serde_json::json!({"selector": {"namespaceSelector": {"matchLabels": {"env": "dev"}}}, "hpaCooperation": "Disabled"})),
            [
                "spec.selector.namespaceSelector: patch deployments/scale (apps) in every namespace",
                "spec.selector.namespaceSelector: patch statefulsets/scale (apps) in every namespace",
            ]
        );
    }

    #[test]
    fn a_secret_ref_is_checked_on_create_and_when_it_changes() {
        let want = Some((
            "spec.passwordSecretRef.name".to_string(),
            Access::get_secret("team", "creds"),
        ));
        assert_eq!(welcome(Some("creds")).required_access("team", None), want);
        assert_eq!(
            welcome(Some("creds")).required_access("team", Some(&welcome(None))),
            want
        );
        assert_eq!(
            welcome(Some("creds")).required_access("team", Some(&welcome(Some("old")))),
            want
        );
        assert_eq!(
            welcome(Some("creds")).required_access("team", Some(&welcome(Some("creds")))),
            None
        );
        // Another key of the same Secret, or another image running with the password: asked.
        let mut other_key = welcome(Some("creds"));
        other_key.password_secret_ref.as_mut().unwrap().key = "admin".into();
        assert_eq!(
            other_key.required_access("team", Some(&welcome(Some("creds")))),
            want
        );
        let mut swapped = welcome(Some("creds"));
        swapped.image = Some("evil.example/exfiltrate:1".into());
        assert_eq!(
            swapped.required_access("team", Some(&welcome(Some("creds")))),
            want
        );
        assert_eq!(welcome(None).required_access("team", None), None);
        assert_eq!(
            Access::get_secret("team", "creds").to_string(),
            "get secrets \"creds\" in namespace \"team\""
        );
    }

    #[test]
    fn an_application_needs_get_on_every_new_secret_and_config_map_its_env_reads() {
        use crate::ApplicationSpec;
        let app = |env: serde_json::Value| -> ApplicationSpec {
            serde_json::from_value(serde_json::json!({"image": "nginx", "env": env})).unwrap()
        };
        let both = app(serde_json::json!([
            {"name": "PLAIN", "value": "x"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
            {"name": "PW2", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw2"}}},
            {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
        ]));
        assert_eq!(
            both.required_access("team", None),
            vec![
                (
                    "spec.env[2].valueFrom.secretKeyRef.name".to_string(),
                    Access::get_secret("team", "db")
                ),
                (
                    "spec.env[4].valueFrom.configMapKeyRef.name".to_string(),
                    Access::get_config_map("team", "cfg")
                ),
            ]
        );
        let only_secret = app(serde_json::json!([
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
        ]));
        // A second key of a Secret already read is a new read: its author must be able to get it.
        let new = both.required_access("team", Some(&only_secret));
        assert_eq!(
            new.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
            [
                Access::get_secret("team", "db"),
                Access::get_config_map("team", "cfg")
            ],
            "{new:?}"
        );
        assert_eq!(new[0].0, "spec.env[3].valueFrom.secretKeyRef.name");
        assert!(both.required_access("team", Some(&both)).is_empty());
        // Another image runs with the same Secrets: every one of them is asked again.
        let mut swapped = both.clone();
        swapped.image = "evil.example/exfiltrate:1".into();
        assert_eq!(
            swapped.required_access("team", Some(&both)),
            both.required_access("team", None)
        );
        assert_eq!(
            Access::get_ingress("web", "site").to_string(),
            "get ingresses (networking.k8s.io) \"site\" in namespace \"web\""
        );
        // An Ingress needs its author's own right to create one, when it is new or changes.
        let exposed: ApplicationSpec = serde_json::from_value(
            serde_json::json!({"image": "nginx", "ingress": {"host": "shop.example.com"}}),
        )
        .unwrap();
        let want = vec![("spec.ingress".to_string(), Access::create_ingresses("team"))];
        assert_eq!(exposed.required_access("team", None), want);
        assert!(exposed.required_access("team", Some(&exposed)).is_empty());
        let mut moved = exposed.clone();
        moved.ingress.as_mut().unwrap().path = Some("/login".into());
        assert_eq!(moved.required_access("team", Some(&exposed)), want);
        assert_eq!(
            Access::create_ingresses("team").to_string(),
            "create ingresses (networking.k8s.io) in namespace \"team\""
        );
    }
}
