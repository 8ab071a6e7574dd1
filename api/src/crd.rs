//! The CustomResourceDefinitions, generated from the types.
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ServiceReference,
};
use kube::CustomResourceExt;

use crate::application::hosts::HostClaim;
use crate::{Application, Memcached, Welcome};

/// The Service the committed Scaler CRD sends conversions to until the webhook points it at
/// itself (`kubesteer-webhook --conversion-crd`): the chart's defaults in `make run`.
pub const CONVERSION_SERVICE: (&str, &str) = ("kubesteer-system", "kubesteer-webhook");

/// The Scaler CRD as committed: v1beta1 stored, v1alpha1 served through the conversion webhook.
pub fn scaler() -> Result<CustomResourceDefinition, kube::core::crd::MergeError> {
    let (namespace, name) = CONVERSION_SERVICE;
    crate::scaler::convert::scaler_crd(Some(ServiceReference {
        namespace: namespace.to_string(),
        name: name.to_string(),
        port: Some(443),
        path: None,
    }))
}

/// The kinds users write, in [`crate::kind::ALL`]'s order.
pub fn kinds() -> Result<Vec<CustomResourceDefinition>, kube::core::crd::MergeError> {
    Ok(vec![
        scaler()?,
        Welcome::crd(),
        Memcached::crd(),
        Application::crd(),
    ])
}

/// Every CRD with the file name it is committed under in `charts/kubesteer/files/crds/`: the
/// kinds users write and the webhook's [`HostClaim`].
pub fn all() -> Result<Vec<(String, CustomResourceDefinition)>, kube::core::crd::MergeError> {
    Ok(kinds()?
        .into_iter()
        .chain([HostClaim::crd()])
        .map(|crd| {
            (
                format!("{}.yaml", crd.metadata.name.clone().unwrap_or_default()),
                crd,
            )
        })
        .collect())
}

/// The YAML text of a CRD, as committed.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    Ok(format!(
        "# Generated from api/ by `make manifests`; do not edit.\n{}",
        serde_yaml::to_string(crd)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn committed_crds_match_the_types() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/kubesteer/files/crds");
        for (file, crd) in all().unwrap() {
            let committed = std::fs::read_to_string(dir.join(&file)).unwrap_or_default();
            assert!(
                committed == to_yaml(&crd).unwrap(),
                "{file} is stale: run `make manifests` and commit the result"
            );
        }
    }

    #[test]
    fn every_kind_is_in_the_kubesteer_category_with_its_short_name() {
        let names: Vec<_> = kinds().unwrap().into_iter().map(|c| c.spec.names).collect();
        for n in &names {
            assert_eq!(
                n.categories.as_deref(),
                Some(&["kubesteer".to_string()][..])
            );
        }
        let shorts: Vec<_> = names
            .iter()
            .map(|n| n.short_names.clone().unwrap_or_default().join(","))
            .collect();
        assert_eq!(shorts, ["scl", "wel", "mc", "app"]);
        // The webhook's claims are not among what `kubectl get kubesteer` lists.
        let claims = HostClaim::crd().spec.names;
        assert_eq!(claims.categories, None);
        assert_eq!(claims.short_names, Some(vec!["hclaim".to_string()]));
        assert_eq!(HostClaim::crd().spec.scope, "Cluster");
    }

    #[test]
    fn no_print_column_is_headed_like_another_or_like_name() {
        for (_, crd) in all().unwrap() {
            for version in &crd.spec.versions {
                // kubectl prints NAME first, then each column's name in upper case.
                let mut headers = vec!["NAME".to_string()];
                for column in version.additional_printer_columns.iter().flatten() {
                    let header = column.name.to_uppercase();
                    assert!(
                        !headers.contains(&header),
                        "{}: two columns headed {header}",
                        crd.spec.names.kind
                    );
                    headers.push(header);
                }
            }
        }
    }

    #[test]
    fn every_integer_has_schema_bounds() {
        // Without a maximum an out-of-range int32 can be stored while the webhook is down, and then
        // no list decodes. A bound beyond 2^53 is not one: the apiserver keeps it as an f64, and
        // i64::MAX read back as 2^63 turns into i64::MIN, so every value is refused.
        fn walk(path: &str, schema: &serde_json::Value, unbounded: &mut Vec<String>) {
            let exact = |key: &str| {
                let most = crate::rules::MAX_EXACT as f64;
                schema
                    .get(key)
                    .and_then(|b| b.as_f64())
                    .is_some_and(|b| b.abs() <= most)
            };
            if schema.get("type").and_then(|t| t.as_str()) == Some("integer")
                && !(exact("minimum") && exact("maximum"))
            {
                unbounded.push(path.to_string());
            }
            if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
                for (name, sub) in props {
                    walk(&format!("{path}.{name}"), sub, unbounded);
                }
            }
            if let Some(items) = schema.get("items") {
                walk(&format!("{path}[]"), items, unbounded);
            }
            if let Some(values) = schema.get("additionalProperties") {
                walk(&format!("{path}{{}}"), values, unbounded);
            }
            for key in ["allOf", "anyOf", "oneOf"] {
                for sub in schema
                    .get(key)
                    .and_then(|s| s.as_array())
                    .into_iter()
                    .flatten()
                {
                    walk(path, sub, unbounded);
                }
            }
        }
        let mut integers = 0;
        for (file, crd) in all().unwrap() {
            for version in &crd.spec.versions {
                let schema = serde_json::to_value(&version.schema).unwrap();
                let schema = &schema["openAPIV3Schema"];
                integers += schema.to_string().matches("\"integer\"").count();
                let mut unbounded = Vec::new();
                walk("", schema, &mut unbounded);
                assert!(
                    unbounded.is_empty(),
                    "{file} {}: integers without exact minimum and maximum: {unbounded:?}",
                    version.name
                );
            }
        }
        assert!(integers > 10, "the walk must see the integer fields");
    }

    #[test]
    fn ranges_in_descriptions_are_the_schema_bounds() {
        // Doc comments are text, so a bound changed in rules.rs must show here.
        let range = regex::Regex::new(r"\b(\d+)-(\d+)\b").unwrap();
        let up_to = regex::Regex::new(r"up to (\d+)").unwrap();
        let quoted = regex::Regex::new(r#""[^"]*""#).unwrap();
        fn walk(
            path: &str,
            schema: &serde_json::Value,
            out: &mut Vec<(String, serde_json::Value)>,
        ) {
            out.push((path.to_string(), schema.clone()));
            if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
                for (name, sub) in props {
                    walk(&format!("{path}.{name}"), sub, out);
                }
            }
            if let Some(items) = schema.get("items") {
                walk(&format!("{path}[]"), items, out);
            }
        }
        let mut checked = 0;
        for (file, crd) in all().unwrap() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
            let mut fields = Vec::new();
            walk("", &schema["openAPIV3Schema"], &mut fields);
            for (path, field) in fields {
                let Some(text) = field.get("description").and_then(|d| d.as_str()) else {
                    continue;
                };
                // Examples in quotes ("0 9 * * 1-5") are no bounds.
                let text = quoted.replace_all(text, "");
                let text = text.as_ref();
                let bound = |key: &str| field.get(key).and_then(|v| v.as_f64()).map(|v| v as u64);
                let item_bound = |key: &str| {
                    field["items"]
                        .get(key)
                        .and_then(|v| v.as_f64())
                        .map(|v| v as u64)
                };
                let pairs = [
                    (bound("minimum"), bound("maximum")),
                    (bound("minLength"), bound("maxLength")),
                    (bound("minItems"), bound("maxItems")),
                    (item_bound("minLength"), item_bound("maxLength")),
                ];
                for c in range.captures_iter(text) {
                    let said = (c[1].parse().ok(), c[2].parse().ok());
                    // "an hour 0-23" is a CEL rule, checked by rules.rs's own test.
                    if path.ends_with(".start") || path.ends_with(".end") {
                        continue;
                    }
                    assert!(
                        pairs.contains(&said),
                        "{file} {path}: {:?} is not a bound of {field}",
                        &c[0]
                    );
                    checked += 1;
                }
                for c in up_to.captures_iter(text) {
                    assert_eq!(
                        c[1].parse().ok(),
                        bound("maxItems"),
                        "{file} {path}: {:?}",
                        &c[0]
                    );
                    checked += 1;
                }
            }
        }
        assert!(
            checked >= 8,
            "the walk must see the documented ranges, saw {checked}"
        );
    }

    #[test]
    fn every_field_has_a_description() {
        fn walk(path: &str, schema: &serde_json::Value, missing: &mut Vec<String>) {
            if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
                for (name, sub) in props {
                    let p = format!("{path}.{name}");
                    if sub.get("description").is_none()
                        && !matches!(name.as_str(), "apiVersion" | "kind" | "metadata")
                    {
                        missing.push(p.clone());
                    }
                    walk(&p, sub, missing);
                }
            }
            if let Some(items) = schema.get("items") {
                walk(&format!("{path}[]"), items, missing);
            }
        }
        for (file, crd) in all().unwrap() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
            let mut missing = Vec::new();
            walk("", &schema["openAPIV3Schema"], &mut missing);
            assert!(
                missing.is_empty(),
                "{file}: fields without a description: {missing:?}"
            );
        }
    }
}
