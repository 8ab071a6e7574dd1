//! The three kinds behind one interface, for callers that hold raw JSON (the webhook).
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::field::{FieldError, FieldErrors};
use crate::{ApplicationSpec, MemcachedSpec, ScalerSpec, WelcomeSpec};

/// A kubesteer kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Scaler,
    Welcome,
    Memcached,
    Application,
}

/// Every kind, in a stable order.
pub const ALL: [Kind; 4] = [
    Kind::Scaler,
    Kind::Welcome,
    Kind::Memcached,
    Kind::Application,
];

impl Kind {
    /// The kind, as in `kind:` and the CRD's names.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Scaler => "Scaler",
            Kind::Welcome => "Welcome",
            Kind::Memcached => "Memcached",
            Kind::Application => "Application",
        }
    }

    /// The lowercase plural, as in URLs and RBAC rules.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Scaler => "scalers",
            Kind::Welcome => "welcomes",
            Kind::Memcached => "memcacheds",
            Kind::Application => "applications",
        }
    }

    /// The version the webhook and the controller work with (the stored one).
    pub fn version(self) -> &'static str {
        match self {
            Kind::Scaler => crate::scaler::v1beta1::VERSION,
            Kind::Welcome | Kind::Memcached | Kind::Application => crate::VERSION,
        }
    }

    /// The defaulting patch for a whole object. It never reaches into a list item
    /// ([`crate::defaults::fill_missing`]), so re-applying the same file changes nothing.
    pub fn defaulting_patch(self, object: &Value) -> Result<json_patch::Patch, FieldErrors> {
        let spec = spec_of(object)?;
        let defaulted = match self {
            Kind::Scaler => to_value(parse::<ScalerSpec>(spec)?.defaulted()),
            Kind::Welcome => to_value(parse::<WelcomeSpec>(spec)?.defaulted()),
            Kind::Memcached => to_value(parse::<MemcachedSpec>(spec)?.defaulted()),
            Kind::Application => to_value(parse::<ApplicationSpec>(spec)?.defaulted()),
        };
        Ok(crate::defaults::patch_for(
            object,
            &serde_json::json!({ "spec": defaulted }),
        ))
    }

    /// The whole object with its defaults filled in, as the mutating webhook leaves it.
    pub fn defaulted(self, object: &Value) -> Result<Value, FieldErrors> {
        let patch = self.defaulting_patch(object)?;
        let mut defaulted = object.clone();
        json_patch::patch(&mut defaulted, &patch)
            .map_err(|e| vec![FieldError::invalid("spec", Value::Null, e.to_string())])?;
        Ok(defaulted)
    }

    /// The object's spec, read as this kind's: the errors name the field that does not read.
    pub fn spec(self, object: &Value) -> Result<Spec, FieldErrors> {
        let spec = spec_of(object)?;
        Ok(match self {
            Kind::Scaler => Spec::Scaler(parse(spec)?),
            Kind::Welcome => Spec::Welcome(parse(spec)?),
            Kind::Memcached => Spec::Memcached(parse(spec)?),
            Kind::Application => Spec::Application(parse(spec)?),
        })
    }

    /// The container image the object's pods would run, defaulted; `None` for a kind that runs
    /// no pods (Scaler) or an object whose spec does not parse (validation reports that).
    pub fn image(self, object: &Value) -> Option<String> {
        self.spec(object).ok()?.image()
    }

    /// Checks a whole object: `Ok(warnings)` when it is admitted, every violation otherwise.
    /// `now` is the admission time (a Scaler's `override.until` must lie after it).
    pub fn validate(
        self,
        object: &Value,
        now: crate::scaler::schedule::Instant,
    ) -> Result<Vec<String>, FieldErrors> {
        self.spec(object)?.validate(now)
    }
}

/// Whether an admission request runs the rules and the permission checks at all: a CREATE
/// (no `old` object) does, and so does an UPDATE that changes `spec`. An UPDATE that leaves the
/// spec as it was (labels, annotations, finalizers, owner references; status has a subresource
/// of its own) changes nothing they guard, so it is admitted whoever sends it and whatever rules
/// were tightened since the object was stored: the controller adding its finalizer, a user who
/// may edit the object but not scale its targets labelling it. Which checks a spec change
/// re-runs is each kind's `required_access` ([`crate::access`]).
pub fn rechecks(old: Option<&Value>, new: &Value) -> bool {
    match old {
        Some(old) => old.get("spec") != new.get("spec"),
        None => true,
    }
}

/// A spec of one of the kinds, read once and then checked, asked for its image or handed to
/// the rules that need the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    Scaler(ScalerSpec),
    Welcome(WelcomeSpec),
    Memcached(MemcachedSpec),
    Application(ApplicationSpec),
}

impl Spec {
    /// `Ok(warnings)` when the spec is admitted, every violation otherwise; `now` as in
    /// [`Kind::validate`].
    pub fn validate(
        &self,
        now: crate::scaler::schedule::Instant,
    ) -> Result<Vec<String>, FieldErrors> {
        let (errors, warnings) = match self {
            Spec::Scaler(s) => (s.validate(now), Vec::new()),
            Spec::Welcome(s) => (s.validate(), s.warnings()),
            Spec::Memcached(s) => (s.validate(), Vec::new()),
            Spec::Application(s) => (s.validate(), s.warnings()),
        };
        if errors.is_empty() {
            Ok(warnings)
        } else {
            Err(errors)
        }
    }

    /// The container image its pods would run, defaulted; `None` for a Scaler.
    pub fn image(&self) -> Option<String> {
        match self {
            Spec::Scaler(_) => None,
            Spec::Welcome(s) => Some(s.image().to_string()),
            Spec::Memcached(s) => Some(s.image().to_string()),
            Spec::Application(s) => Some(s.image.clone()),
        }
    }
}

fn spec_of(object: &Value) -> Result<&Value, FieldErrors> {
    match object.get("spec") {
        Some(spec @ Value::Object(_)) => Ok(spec),
        Some(other) => Err(vec![FieldError::invalid(
            "spec",
            type_name(other),
            "must be an object",
        )]),
        None => Err(vec![FieldError::required("spec", "")]),
    }
}

/// Deserializes a spec; a type error names the field it is in. A spec that reads (the usual
/// case) is read once, without tracking paths; only a failing one is read again to find where.
fn parse<T: DeserializeOwned>(spec: &Value) -> Result<T, FieldErrors> {
    if let Ok(parsed) = T::deserialize(spec) {
        return Ok(parsed);
    }
    serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." {
            "spec".to_string()
        } else {
            format!("spec.{path}")
        };
        let message = e.into_inner().to_string();
        // "missing field `image`": the missing field's own path, as the apiserver names it.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
        {
            return vec![FieldError::required(format!("{path}.{field}"), "")];
        }
        vec![FieldError::invalid(
            path,
            "(value omitted)",
            expectation(&message),
        )]
    })
}

/// The "expected ..." part of a serde message; the value itself is dropped so no secret is echoed.
fn expectation(message: &str) -> String {
    match message.split_once(", expected ") {
        Some((_, expected)) => format!("expected {expected}"),
        None if message.starts_with("missing field") => message.to_string(),
        None => "has the wrong type".to_string(),
    }
}

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_plurals_are_the_crds() {
        use kube::Resource;
        let crds = [
            (
                Kind::Scaler,
                crate::Scaler::kind(&()),
                crate::Scaler::plural(&()),
                crate::Scaler::group(&()),
                crate::Scaler::version(&()),
            ),
            (
                Kind::Welcome,
                crate::Welcome::kind(&()),
                crate::Welcome::plural(&()),
                crate::Welcome::group(&()),
                crate::Welcome::version(&()),
            ),
            (
                Kind::Memcached,
                crate::Memcached::kind(&()),
                crate::Memcached::plural(&()),
                crate::Memcached::group(&()),
                crate::Memcached::version(&()),
            ),
            (
                Kind::Application,
                crate::Application::kind(&()),
                crate::Application::plural(&()),
                crate::Application::group(&()),
                crate::Application::version(&()),
            ),
        ];
        for (kind, name, plural, group, version) in crds {
            assert_eq!(kind.name(), name);
            assert_eq!(kind.plural(), plural);
            assert_eq!(crate::GROUP, group, "{name}");
            assert_eq!(kind.version(), version, "{name}");
        }
        assert_eq!(ALL.len(), crate::crd::kinds().unwrap().len());
    }

    fn now() -> crate::scaler::schedule::Instant {
        chrono::DateTime::UNIX_EPOCH
    }

    #[test]
    fn type_errors_name_the_field() {
        let err = Kind::Memcached
            .validate(&json!({"spec": {"size": "three"}}), now())
            .unwrap_err();
        assert_eq!(err[0].path, "spec.size", "{err:?}");
        let err = Kind::Scaler
            .validate(
                &json!({"spec": {"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": 7}], "windows": [{"start": 1, "end": 2}]}}),
                now(),
            )
            .unwrap_err();
        assert_eq!(err[0].path, "spec.scaleTargetRefs[0].name", "{err:?}");
        let err = Kind::Welcome
            .validate(&json!({"spec": {"name": "a", "password": 12345}}), now())
            .unwrap_err();
        assert_eq!(
            err[0].to_string(),
            "spec.password: Invalid value: \"(value omitted)\": expected a string"
        );
        let err = Kind::Welcome
            .validate(
                &json!({"spec": {"password": "hunter2", "name": ["hunter2"]}}),
                now(),
            )
            .unwrap_err();
        assert!(!err[0].to_string().contains("hunter2"), "{err:?}");
        let err = Kind::Welcome
            .validate(&json!({"spec": "x"}), now())
            .unwrap_err();
        assert_eq!(
            err[0].to_string(),
            "spec: Invalid value: \"string\": must be an object"
        );
        let err = Kind::Welcome
            .validate(&json!({"metadata": {}}), now())
            .unwrap_err();
        assert_eq!(err[0].to_string(), "spec: Required value");
        let err = Kind::Application
            .validate(&json!({"spec": {"ingress": {"host": "a.io"}}}), now())
            .unwrap_err();
        assert_eq!(err[0].to_string(), "spec.image: Required value");
        let err = Kind::Application
            .validate(
                &json!({"spec": {"image": "nginx", "ingress": {"path": "/"}}}),
                now(),
            )
            .unwrap_err();
        assert_eq!(err[0].to_string(), "spec.ingress.host: Required value");
    }

    #[test]
    fn defaulting_is_idempotent_for_every_kind() {
        let objects = [
            (
                Kind::Scaler,
                json!({"spec": {"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}], "windows": [{"start": 9, "end": 17, "days": ["Mon"]}]}}),
            ),
            (
                Kind::Scaler,
                json!({"spec": {"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}], "jobs": [{"name": "a", "schedule": "@daily", "replicas": 1}]}}),
            ),
            (
                Kind::Welcome,
                json!({"spec": {"name": "x", "groups": ["a"]}}),
            ),
            (Kind::Memcached, json!({"spec": {}})),
            (
                Kind::Application,
                json!({"spec": {"image": "nginx", "env": [{"name": "A", "value": "1"}], "ingress": {"host": "a.io"}}}),
            ),
        ];
        for (kind, mut object) in objects {
            let patch = kind.defaulting_patch(&object).unwrap();
            assert!(!patch.0.is_empty(), "{kind:?}");
            // A default inside a list item would make every client-side re-apply a change.
            for op in serde_json::to_value(&patch).unwrap().as_array().unwrap() {
                let path = op["path"].as_str().unwrap();
                assert!(
                    !path.split('/').any(|t| t.parse::<usize>().is_ok()),
                    "{kind:?} writes into a list item: {path}"
                );
            }
            let defaulted = kind.defaulted(&object).unwrap();
            json_patch::patch(&mut object, &patch).unwrap();
            assert_eq!(defaulted, object, "{kind:?}");
            assert!(
                kind.defaulting_patch(&object).unwrap().0.is_empty(),
                "{kind:?}"
            );
            assert!(
                kind.validate(&object, now()).is_ok(),
                "{kind:?} defaulted must be valid"
            );
        }
    }
}
