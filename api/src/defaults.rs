//! Defaulting as a JSON patch that only adds what is missing.
use serde_json::Value;

/// Copies into `object` every field of `defaulted` that `object` lacks or holds as null.
/// Present values are never touched, so the result only ever adds. A list that is present is
/// left whole, items included: a default stored inside a list item makes every client-side
/// re-apply a change (kubectl replaces a CRD's lists wholesale), so GitOps tools would see
/// drift for ever; such defaults are resolved when read instead.
pub fn fill_missing(object: &mut Value, defaulted: &Value) {
    if let (Value::Object(have), Value::Object(want)) = (object, defaulted) {
        for (key, value) in want {
            match have.get_mut(key) {
                Some(Value::Null) | None => {
                    have.insert(key.clone(), value.clone());
                }
                Some(existing) => fill_missing(existing, value),
            }
        }
    }
}

/// The RFC 6902 patch that adds to `object` what `defaulted` has and it lacks.
pub fn patch_for(object: &Value, defaulted: &Value) -> json_patch::Patch {
    // Only the top-level fields that have defaults are copied and compared: the rest of the
    // object (metadata with its managedFields, status) can be large and never changes here.
    let part: serde_json::Map<String, Value> = defaulted
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(key, _)| Some((key.clone(), object.get(key)?.clone())))
        .collect();
    let part = Value::Object(part);
    let mut filled = part.clone();
    fill_missing(&mut filled, defaulted);
    json_patch::diff(&part, &filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_missing_fields_are_added() {
        let object = json!({"spec": {"size": 0, "deps": [{"name": "a"}, {"name": "b", "namespace": "x"}], "port": null}, "extra": 1});
        let defaulted = json!({"spec": {"size": 1, "port": 11211, "image": "m", "deps": [{"name": "a", "namespace": "ns"}, {"name": "b", "namespace": "ns"}]}});
        let patch = patch_for(&object, &defaulted);
        let ops = serde_json::to_value(&patch).unwrap();
        let paths: Vec<&str> = ops
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["path"].as_str().unwrap())
            .collect();
        assert!(paths.contains(&"/spec/image"), "{ops}");
        assert!(paths.contains(&"/spec/port"), "{ops}");
        assert_eq!(
            paths.len(),
            2,
            "size 0 must stay, and nothing goes into a list item: {ops}"
        );
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert!(
            patch_for(&patched, &defaulted).0.is_empty(),
            "a second pass must be empty"
        );
    }

    #[test]
    fn keys_with_slashes_are_escaped() {
        let patch = patch_for(
            &json!({"labels": {}}),
            &json!({"labels": {"app.kubernetes.io/name": "x"}}),
        );
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(ops[0]["path"], "/labels/app.kubernetes.io~1name");
    }
}
