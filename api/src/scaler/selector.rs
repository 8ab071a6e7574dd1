//! A Scaler's `spec.selector`: targets chosen by kind, label and namespace, for fleets ("scale
//! everything in these namespaces at night, except..."), as kube-downscaler users know it but
//! written in a CRD whose author's permissions are checked.
//!
//! The types, their validation and the matching live here, pure; the controller keeps the
//! inventory of objects that may match (from watches) and the webhook checks the permissions.
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::core::{Selector, SelectorExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field::{FieldError, FieldErrors, Sub};
use crate::rules::scaler::{
    API_VERSION, KIND, MAX_API_VERSION, MAX_EXCLUSIONS, MAX_KIND, MAX_SELECTED_KINDS,
    MAX_SELECTED_NAMESPACES,
};
use crate::rules::{check_length, check_name, check_pattern, MAX_LABEL, MAX_SUBDOMAIN};

/// The kinds a selector picks when it names none.
pub const DEFAULT_KINDS: [(&str, &str); 2] =
    [("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")];

/// Targets chosen by kind, label and namespace instead of by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct TargetSelector {
    /// The kinds selected. Defaults to apps/v1 Deployment and StatefulSet. Any kind with a /scale subresource may be named, and batch/v1 CronJob and Job and apps/v1 DaemonSet (put to sleep instead of scaled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SELECTED_KINDS))]
    pub kinds: Option<Vec<SelectedKind>>,
    /// Labels every selected object carries. With neither matchLabels nor matchExpressions, every object of the kinds in the namespaces is selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Label requirements every selected object meets (In, NotIn, Exists, DoesNotExist), as in a Deployment's selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
    /// The namespaces searched. Defaults to the Scaler's own. Each other namespace needs its author's permission to scale the kinds there. Cannot be combined with namespaceSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SELECTED_NAMESPACES), extend("x-kubernetes-list-type" = "set"))]
    pub namespaces: Option<Vec<String>>,
    /// The namespaces searched, by their labels, including namespaces created later; needs its author's permission to scale the kinds in every namespace. Cannot be combined with namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Objects never selected, even when they match: by name (and optionally kind and namespace) or by labels. This, not an annotation on the workload, is how one workload opts out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_EXCLUSIONS))]
    pub exclude: Option<Vec<Exclusion>>,
}

/// A kind a selector picks.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectedKind {
    /// API version of the kind, e.g. "apps/v1".
    #[schemars(length(min = 1, max = MAX_API_VERSION), regex(pattern = API_VERSION.regex))]
    pub api_version: String,
    /// The kind, e.g. "Deployment".
    #[schemars(length(min = 1, max = MAX_KIND), regex(pattern = KIND.regex))]
    pub kind: String,
}

impl SelectedKind {
    /// The API group: "" for the core group.
    pub fn group(&self) -> &str {
        crate::scaler::target::group_of(&self.api_version)
    }
}

/// Objects a selector leaves out. Every field given must match; name or matchLabels is required.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct Exclusion {
    /// The object's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN))]
    pub name: Option<String>,
    /// The object's kind; any selected kind when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_KIND))]
    pub kind: Option<String>,
    /// The object's namespace; any selected namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL))]
    pub namespace: Option<String>,
    /// Labels the object carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
}

/// Where a selector searches.
#[derive(Debug, Clone)]
pub enum Scope {
    /// These namespaces.
    Listed(BTreeSet<String>),
    /// Every namespace whose labels match.
    Labelled(Selector),
}

impl Scope {
    /// Whether the namespace `ns`, with `labels` (None when not known), is searched.
    pub fn contains(&self, ns: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        match self {
            Scope::Listed(names) => names.contains(ns),
            Scope::Labelled(selector) => labels.is_some_and(|l| selector.matches(l)),
        }
    }
}

/// A selector compiled for matching, its namespaces resolved against the Scaler's own.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// The kinds, as (group, kind).
    pub kinds: BTreeSet<(String, String)>,
    pub scope: Scope,
    labels: Selector,
    exclude: Vec<Excluded>,
}

/// An exclusion compiled: name, kind, namespace (each any when None) and labels.
type Excluded = (Option<String>, Option<String>, Option<String>, Selector);

impl Matcher {
    /// Whether the object `group`/`kind` `ns`/`name` with `labels` is selected; `ns_labels` are
    /// its namespace's labels, when known.
    pub fn selects(
        &self,
        (group, kind): (&str, &str),
        ns: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
        ns_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        self.kinds.contains(&(group.to_string(), kind.to_string()))
            && self.scope.contains(ns, ns_labels)
            && self.labels.matches(labels)
            && !self.exclude.iter().any(|(n, k, s, l)| {
                n.as_deref().is_none_or(|n| n == name)
                    && k.as_deref().is_none_or(|k| k == kind)
                    && s.as_deref().is_none_or(|s| s == ns)
                    && l.matches(labels)
            })
    }
}

/// `matchLabels` and `matchExpressions` as one selector.
fn label_selector(
    labels: &Option<BTreeMap<String, String>>,
    expressions: &Option<Vec<LabelSelectorRequirement>>,
) -> Result<Selector, String> {
    Selector::try_from(LabelSelector {
        match_labels: labels.clone(),
        match_expressions: expressions.clone(),
    })
    .map_err(|e| e.to_string())
}

impl TargetSelector {
    /// The kinds selected, as (apiVersion, kind).
    pub fn kinds(&self) -> Vec<(String, String)> {
        match &self.kinds {
            Some(kinds) => kinds
                .iter()
                .map(|k| (k.api_version.clone(), k.kind.clone()))
                .collect(),
            None => DEFAULT_KINDS
                .iter()
                .map(|(v, k)| (v.to_string(), k.to_string()))
                .collect(),
        }
    }

    /// The namespaces listed (the Scaler's own by default), None with a namespaceSelector.
    pub fn listed_namespaces<'a>(&'a self, own: &'a str) -> Option<BTreeSet<&'a str>> {
        if self.namespace_selector.is_some() {
            return None;
        }
        Some(match &self.namespaces {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => BTreeSet::from([own]),
        })
    }

    /// The selector compiled, or why it cannot be (validation reports the same).
    pub fn matcher(&self, own_namespace: &str) -> Result<Matcher, String> {
        let scope = match (
            &self.namespace_selector,
            self.listed_namespaces(own_namespace),
        ) {
            (Some(s), _) => {
                Scope::Labelled(Selector::try_from(s.clone()).map_err(|e| e.to_string())?)
            }
            (None, listed) => Scope::Listed(
                listed
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            ),
        };
        let exclude = self
            .exclude
            .iter()
            .flatten()
            .map(|e| {
                Ok((
                    e.name.clone(),
                    e.kind.clone(),
                    e.namespace.clone(),
                    label_selector(&e.match_labels, &None)?,
                ))
            })
            .collect::<Result<_, String>>()?;
        Ok(Matcher {
            kinds: self
                .kinds()
                .iter()
                .map(|(v, k)| (crate::scaler::target::group_of(v).to_string(), k.clone()))
                .collect(),
            scope,
            labels: label_selector(&self.match_labels, &self.match_expressions)?,
            exclude,
        })
    }

    /// Every violation, each with its path under `spec.selector`.
    pub fn validate(&self, errors: &mut FieldErrors) {
        const AT: &str = "spec.selector";
        if let Some(kinds) = &self.kinds {
            if kinds.is_empty() {
                errors.push(FieldError::required(
                    format!("{AT}.kinds"),
                    "name at least one kind, or leave kinds out",
                ));
            } else if kinds.len() > MAX_SELECTED_KINDS {
                errors.push(FieldError::too_many(
                    format!("{AT}.kinds"),
                    kinds.len(),
                    MAX_SELECTED_KINDS,
                ));
            }
            let mut seen = BTreeSet::new();
            for (i, k) in kinds.iter().enumerate() {
                let path = format!("{AT}.kinds[{i}]");
                check_kind_ref(errors, &path, &k.api_version, &k.kind);
                if !seen.insert(k) {
                    errors.push(FieldError::duplicate(
                        path,
                        serde_json::to_value(k).unwrap_or_default(),
                    ));
                }
            }
        }
        check_labels(errors, &format!("{AT}.matchLabels"), &self.match_labels);
        if let Err(e) = label_selector(&None, &self.match_expressions) {
            errors.push(FieldError::invalid(
                format!("{AT}.matchExpressions"),
                serde_json::to_value(&self.match_expressions).unwrap_or_default(),
                e,
            ));
        }
        match (&self.namespaces, &self.namespace_selector) {
            (Some(_), Some(_)) => errors.push(FieldError::forbidden(
                format!("{AT}.namespaceSelector"),
                "may not be combined with spec.selector.namespaces",
            )),
            (Some(names), None) => {
                if names.is_empty() {
                    errors.push(FieldError::required(
                        format!("{AT}.namespaces"),
                        "name at least one namespace, or leave namespaces out for the Scaler's own",
                    ));
                } else if names.len() > MAX_SELECTED_NAMESPACES {
                    errors.push(FieldError::too_many(
                        format!("{AT}.namespaces"),
                        names.len(),
                        MAX_SELECTED_NAMESPACES,
                    ));
                }
                let mut seen = BTreeSet::new();
                for (i, n) in names.iter().enumerate() {
                    let path = format!("{AT}.namespaces[{i}]");
                    check_name(errors, &path, n, true);
                    if !seen.insert(n) {
                        errors.push(FieldError::duplicate(path, n.as_str()));
                    }
                }
            }
            (None, Some(s)) => {
                check_labels(
                    errors,
                    &format!("{AT}.namespaceSelector.matchLabels"),
                    &s.match_labels,
                );
                if let Err(e) = Selector::try_from(s.clone()) {
                    errors.push(FieldError::invalid(
                        format!("{AT}.namespaceSelector"),
                        serde_json::to_value(s).unwrap_or_default(),
                        e.to_string(),
                    ));
                }
            }
            (None, None) => {}
        }
        if let Some(exclude) = &self.exclude {
            if exclude.len() > MAX_EXCLUSIONS {
                errors.push(FieldError::too_many(
                    format!("{AT}.exclude"),
                    exclude.len(),
                    MAX_EXCLUSIONS,
                ));
            }
            for (i, e) in exclude.iter().enumerate() {
                let path = format!("{AT}.exclude[{i}]");
                if e.name.is_none() && e.match_labels.is_none() {
                    errors.push(FieldError::required(
                        format!("{path}.name"),
                        "an exclusion names an object or its labels (matchLabels)",
                    ));
                }
                if let Some(n) = &e.name {
                    check_name(errors, format!("{path}.name"), n, false);
                }
                if let Some(k) = &e.kind {
                    if k.len() > MAX_KIND {
                        check_length(errors, format!("{path}.kind"), k, 1, MAX_KIND);
                    } else {
                        check_pattern(errors, format!("{path}.kind"), k, &KIND);
                    }
                }
                if let Some(n) = &e.namespace {
                    check_name(errors, format!("{path}.namespace"), n, true);
                }
                check_labels(errors, &format!("{path}.matchLabels"), &e.match_labels);
            }
        }
    }
}

/// Checks a target's or a selected kind's `apiVersion` and `kind` at `path` (written only into
/// an error).
pub fn check_kind_ref(
    errors: &mut FieldErrors,
    path: impl std::fmt::Display,
    api_version: &str,
    kind: &str,
) {
    let at = Sub(&path, "apiVersion");
    if api_version.is_empty() {
        errors.push(FieldError::required(at.to_string(), ""));
    } else if api_version.len() > MAX_API_VERSION {
        check_length(errors, at, api_version, 1, MAX_API_VERSION);
    } else {
        check_pattern(errors, at, api_version, &API_VERSION);
    }
    let at = Sub(&path, "kind");
    if kind.is_empty() {
        errors.push(FieldError::required(at.to_string(), ""));
    } else if kind.len() > MAX_KIND {
        check_length(errors, at, kind, 1, MAX_KIND);
    } else {
        check_pattern(errors, at, kind, &KIND);
    }
}

/// Checks label keys and values as the apiserver checks an object's labels.
fn check_labels(errors: &mut FieldErrors, path: &str, labels: &Option<BTreeMap<String, String>>) {
    for (k, v) in labels.iter().flatten() {
        let at = format!("{path}[{k}]");
        let (prefix, name) = match k.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if let Some(p) = prefix {
            check_name(errors, &at, p, false);
        }
        if name.is_empty() || name.len() > MAX_LABEL || !crate::rules::LABEL_NAME.is_match(name) {
            errors.push(FieldError::invalid(
                at.clone(),
                k.as_str(),
                crate::rules::LABEL_NAME.message,
            ));
        }
        if v.len() > MAX_LABEL || !(v.is_empty() || crate::rules::LABEL_NAME.is_match(v)) {
            errors.push(FieldError::invalid(at, v.as_str(), "a label value must be empty or up to 63 characters: alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(v: serde_json::Value) -> TargetSelector {
        serde_json::from_value(v).expect("a selector")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn by_default_it_picks_deployments_and_statefulsets_in_the_scalers_namespace() {
        let m = selector(json!({})).matcher("team").expect("compiles");
        let none = labels(&[]);
        assert!(m.selects(("apps", "Deployment"), "team", "web", &none, None));
        assert!(m.selects(("apps", "StatefulSet"), "team", "db", &none, None));
        assert!(!m.selects(("apps", "ReplicaSet"), "team", "rs", &none, None));
        assert!(!m.selects(("apps", "Deployment"), "other", "web", &none, None));
    }

    #[test]
    fn labels_namespaces_and_exclusions_decide() {
        let m = selector(json!({
            "kinds": [{"apiVersion": "batch/v1", "kind": "CronJob"}, {"apiVersion": "apps/v1", "kind": "Deployment"}],
            "matchLabels": {"tier": "web"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}],
            "namespaces": ["a", "b"],
            "exclude": [{"name": "keep"}, {"matchLabels": {"pinned": "true"}}, {"name": "x", "namespace": "b", "kind": "CronJob"}],
        }))
        .matcher("own")
        .expect("compiles");
        let web = labels(&[("tier", "web")]);
        assert!(m.selects(("apps", "Deployment"), "a", "web", &web, None));
        assert!(m.selects(("batch", "CronJob"), "b", "nightly", &web, None));
        assert!(!m.selects(("apps", "Deployment"), "own", "web", &web, None));
        assert!(!m.selects(
            ("apps", "Deployment"),
            "a",
            "web",
            &labels(&[("tier", "db")]),
            None
        ));
        assert!(!m.selects(
            ("apps", "Deployment"),
            "a",
            "web",
            &labels(&[("tier", "web"), ("env", "prod")]),
            None
        ));
        assert!(!m.selects(("apps", "Deployment"), "a", "keep", &web, None));
        assert!(!m.selects(
            ("apps", "Deployment"),
            "a",
            "web",
            &labels(&[("tier", "web"), ("pinned", "true")]),
            None
        ));
        assert!(!m.selects(("batch", "CronJob"), "b", "x", &web, None));
        assert!(m.selects(("apps", "Deployment"), "b", "x", &web, None));
    }

    #[test]
    fn a_namespace_selector_needs_the_namespaces_labels() {
        let m = selector(json!({"namespaceSelector": {"matchLabels": {"env": "dev"}}}))
            .matcher("own")
            .expect("compiles");
        let none = labels(&[]);
        assert!(m.selects(
            ("apps", "Deployment"),
            "x",
            "web",
            &none,
            Some(&labels(&[("env", "dev")]))
        ));
        assert!(!m.selects(("apps", "Deployment"), "x", "web", &none, Some(&none)));
        assert!(!m.selects(("apps", "Deployment"), "x", "web", &none, None));
    }

    #[test]
    fn every_bad_field_is_named() {
        let s = selector(json!({
            "kinds": [{"apiVersion": "apps/v1", "kind": "deployment"}, {"apiVersion": "apps/v1", "kind": "deployment"}],
            "matchLabels": {"bad key!": "v"},
            "matchExpressions": [{"key": "env", "operator": "In"}],
            "namespaces": ["Bad_NS"],
            "namespaceSelector": {},
            "exclude": [{"kind": "Deployment"}],
        }));
        let mut errors = FieldErrors::new();
        s.validate(&mut errors);
        let paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.selector.kinds[0].kind",
                "spec.selector.kinds[1].kind",
                "spec.selector.kinds[1]",
                "spec.selector.matchLabels[bad key!]",
                "spec.selector.matchExpressions",
                "spec.selector.namespaceSelector",
                "spec.selector.exclude[0].name",
            ]
        );
    }
}
