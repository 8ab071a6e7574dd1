//! A Scaler from a file, checked as the webhook checks it: v1alpha1 converted to v1beta1 as the
//! apiserver would, then the api crate's own rules, each error naming its field path.
use kubesteer_api::field::summarize;
use kubesteer_api::kind::{Kind, Spec};
use kubesteer_api::scaler::convert::{convert, V1ALPHA1, V1BETA1};
use kubesteer_api::scaler::schedule::Instant;
use kubesteer_api::ScalerSpec;
use serde::Deserialize;
use serde_json::Value;

/// A Scaler read from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileScaler {
    pub name: String,
    pub namespace: String,
    pub spec: ScalerSpec,
}

/// Every Scaler in `text` (YAML or JSON, one or more documents), each checked at `now` as the
/// webhook would; `namespace` is where one without its own would go. Other kinds are skipped.
pub fn read(
    text: &str,
    source: &str,
    namespace: &str,
    now: Instant,
) -> Result<Vec<FileScaler>, String> {
    let mut scalers = Vec::new();
    for (i, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document)
            .map_err(|e| format!("{source}: document {}: {e}", i + 1))?;
        if value.is_null() {
            continue;
        }
        let field = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
        if field("kind") != "Scaler" {
            continue;
        }
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let namespace = value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(namespace)
            .to_string();
        let object = match field("apiVersion") {
            V1BETA1 => value.clone(),
            V1ALPHA1 => convert(&value, V1BETA1).map_err(|e| format!("{source}: {e}"))?,
            other => {
                return Err(format!(
                    "{source}: Scaler {name:?}: apiVersion: Unsupported value: {other:?}: supported values: \"{V1BETA1}\", \"{V1ALPHA1}\""
                ))
            }
        };
        let invalid = |errors: &[kubesteer_api::field::FieldError]| {
            format!(
                "{source}: {}",
                summarize(Kind::Scaler.name(), &name, errors)
            )
        };
        let spec = match Kind::Scaler.spec(&object) {
            Ok(Spec::Scaler(spec)) => spec,
            Ok(_) => {
                return Err(format!(
                    "{source}: Scaler {name:?} did not read as a Scaler"
                ))
            }
            Err(errors) => return Err(invalid(&errors)),
        };
        let mut errors = Spec::Scaler(spec.clone())
            .validate(now)
            .err()
            .unwrap_or_default();
        if errors.is_empty() {
            errors = spec.duplicate_targets(&namespace);
        }
        if !errors.is_empty() {
            return Err(invalid(&errors));
        }
        scalers.push(FileScaler {
            name,
            namespace,
            spec,
        });
    }
    if scalers.is_empty() {
        return Err(format!(
            "{source} holds no Scaler (kind: Scaler, apiVersion {V1BETA1})"
        ));
    }
    Ok(scalers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn now() -> Instant {
        Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0).unwrap()
    }

    #[test]
    fn the_sample_reads_and_other_kinds_are_skipped() {
        let sample = include_str!("../../../config/samples/scaler.yaml");
        let text = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\n---\n{sample}");
        let read = read(&text, "scaler.yaml", "team", now()).unwrap_or_default();
        assert_eq!(read.len(), 1);
        assert_eq!(
            (read[0].name.as_str(), read[0].namespace.as_str()),
            ("office-hours", "team")
        );
        assert_eq!(read[0].spec.time_zone(), "Europe/Berlin");
    }

    #[test]
    fn errors_name_their_field_paths_as_the_webhook_does() {
        let text = r#"
apiVersion: kubesteer.io/v1beta1
kind: Scaler
metadata: {name: bad}
spec:
  scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  timeZone: Mars/Olympus
  windows: [{start: 25, end: "18:00"}]
  override: {replicas: 2, until: "2026-11-26T11:00:00Z"}
"#;
        let error = read(text, "bad.yaml", "team", now())
            .err()
            .unwrap_or_default();
        assert!(
            error.starts_with("bad.yaml: Scaler.kubesteer.io \"bad\" is invalid: ["),
            "{error}"
        );
        for path in [
            "spec.windows[0].start: Invalid value: 25",
            "spec.timeZone: Invalid value: \"Mars/Olympus\"",
            "spec.override.until: Invalid value: \"2026-11-26T11:00:00Z\": must be in the future",
        ] {
            assert!(error.contains(path), "{path} not in {error}");
        }
        let typo = "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: t}\nspec: {scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}], windows: [{start: 9, end: 17, replicas: many}]}\n";
        let error = read(typo, "t.yaml", "team", now())
            .err()
            .unwrap_or_default();
        assert!(error.contains("spec.windows[0].replicas"), "{error}");
        let dup = "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {name: d}\nspec: {scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}, {apiVersion: apps/v1, kind: Deployment, name: web, namespace: team}], windows: [{start: 9, end: 17}]}\n";
        let error = read(dup, "d.yaml", "team", now()).err().unwrap_or_default();
        assert!(
            error.contains("spec.scaleTargetRefs[1]: Duplicate value"),
            "{error}"
        );
    }

    #[test]
    fn a_v1alpha1_scaler_is_converted_first_and_nothing_else_is_no_scaler() {
        let alpha = "apiVersion: kubesteer.io/v1alpha1\nkind: Scaler\nmetadata: {name: a}\nspec: {deployments: [{name: web}], start: 8, end: 18, replicas: 3}\n";
        let read_alpha = read(alpha, "a.yaml", "team", now()).unwrap_or_default();
        assert_eq!(read_alpha.len(), 1);
        assert_eq!(read_alpha[0].spec.scale_target_refs[0].kind, "Deployment");
        let error = read("apiVersion: v1\nkind: ConfigMap\n", "c.yaml", "team", now())
            .err()
            .unwrap_or_default();
        assert!(error.contains("holds no Scaler"), "{error}");
        let error = read("a: [", "broken.yaml", "team", now())
            .err()
            .unwrap_or_default();
        assert!(error.starts_with("broken.yaml: document 1:"), "{error}");
    }
}
