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
    // Walks only what has defaults, emitting what `fill_missing` would add: no copy of the
    // object and no diff of the whole of it (metadata with its managedFields can be large).
    let mut ops = Vec::new();
    missing(
        object,
        defaulted,
        &mut json_patch::jsonptr::PointerBuf::new(),
        &mut ops,
    );
    json_patch::Patch(ops)
}

/// The operations that fill into `have` (at `at`) every field of `want` it lacks or holds as
/// null: an add for a missing field, a replace for a null one, recursing into objects only.
fn missing(
    have: &Value,
    want: &Value,
    at: &mut json_patch::jsonptr::PointerBuf,
    ops: &mut Vec<json_patch::PatchOperation>,
) {
    use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
    let (Value::Object(have), Value::Object(want)) = (have, want) else {
        return;
    };
    for (key, value) in want {
        at.push_back(key.as_str());
        match have.get(key) {
            None => ops.push(PatchOperation::Add(AddOperation {
                path: at.clone(),
                value: value.clone(),
            })),
            Some(Value::Null) => ops.push(PatchOperation::Replace(ReplaceOperation {
                path: at.clone(),
                value: value.clone(),
            })),
            Some(existing) => missing(existing, value, at, ops),
        }
        at.pop_back();
    }
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

    /// Any JSON: scalars, lists and nested objects over a few keys, so that objects share keys.
    fn json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-c/~]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                proptest::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// The patch turns an object into exactly what `fill_missing` makes of it.
        #[test]
        fn the_patch_does_what_fill_missing_does(object in json(), defaulted in json()) {
            let mut filled = object.clone();
            fill_missing(&mut filled, &defaulted);
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &patch_for(&object, &defaulted)).unwrap();
            proptest::prop_assert_eq!(patched, filled);
        }
    }
}
