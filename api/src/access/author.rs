//! Who set a Scaler's spec, kept on the Scaler so that the controller can check, for as long as
//! the Scaler acts, that they still hold the rights its admission required
//! ([`ScalerSpec::required_access`](crate::ScalerSpec::required_access)).
//!
//! The webhook writes [`AUTHOR`] (the admission request's `userInfo` as JSON) on CREATE and on
//! every UPDATE that changes the spec ([`crate::kind::rechecks`]). On any other UPDATE it keeps
//! what was there, absent staying absent, whoever sends it: nobody but the webhook sets the
//! annotation, and validation refuses an object whose annotation is not [`after`]'s ([`check`]). A Scaler
//! admitted before kubesteer recorded authors has none until its spec next changes; the
//! controller checks nothing for it.
use std::time::Duration;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use k8s_openapi::api::authentication::v1::UserInfo;
use serde_json::Value;

use crate::field::FieldError;
use crate::keys::annotation::AUTHOR;

/// How often the controller asks again, at the longest, whether a Scaler's recorded author still
/// holds the rights its spec needs.
pub const RECHECK: Duration = Duration::from_secs(30);
/// How long the controller trusts the apiserver's yes about an author's right; a no is asked
/// again after [`DENIAL_TTL`]. A Scaler stops within `RECHECK + GRANT_TTL` of a right going.
pub const GRANT_TTL: Duration = Duration::from_secs(20);
pub const DENIAL_TTL: Duration = Duration::from_secs(10);

/// The field path of the annotation in errors.
pub const FIELD: &str = "metadata.annotations[kubesteer.io/author]";

/// The annotation as `object` has it.
pub fn of(object: &Value) -> Option<&str> {
    object
        .get("metadata")?
        .get("annotations")?
        .get(AUTHOR)?
        .as_str()
}

/// What the annotation must say once `object` (`old` before, on UPDATE) is admitted from
/// `user`: `user` when the spec is new or changes, what `old` said otherwise.
pub fn after(old: Option<&Value>, object: &Value, user: &UserInfo) -> Option<String> {
    if crate::kind::rechecks(old, object) {
        serde_json::to_string(user).ok()
    } else {
        old.and_then(of).map(str::to_string)
    }
}

/// The operations that make `object`'s annotation say `want` (none when it does).
pub fn patch(object: &Value, want: Option<&str>) -> Vec<PatchOperation> {
    if of(object) == want {
        return Vec::new();
    }
    let at = PointerBuf::from_tokens(["metadata", "annotations", AUTHOR]);
    let Some(want) = want else {
        return vec![PatchOperation::Remove(RemoveOperation { path: at })];
    };
    // The annotation, or the annotations holding it, or the metadata holding those: whichever
    // is the first missing (or not an object).
    let metadata = object.get("metadata").filter(|m| m.is_object());
    let annotations = metadata
        .and_then(|m| m.get("annotations"))
        .filter(|a| a.is_object());
    let (path, value) = match (metadata, annotations) {
        (_, Some(_)) => (at, Value::String(want.to_string())),
        (Some(_), None) => (
            PointerBuf::from_tokens(["metadata", "annotations"]),
            serde_json::json!({ AUTHOR: want }),
        ),
        (None, None) => (
            PointerBuf::from_tokens(["metadata"]),
            serde_json::json!({ "annotations": { AUTHOR: want } }),
        ),
    };
    vec![PatchOperation::Add(AddOperation { path, value })]
}

/// The error when `object` holds an annotation that the webhook would not have written (one
/// absent is no error: the controller then checks nothing, as for a Scaler admitted before
/// authors were recorded).
pub fn check(old: Option<&Value>, object: &Value, user: &UserInfo) -> Option<FieldError> {
    let have = of(object)?;
    (Some(have) != after(old, object, user).as_deref()).then(|| {
        FieldError::forbidden(
            FIELD,
            "set by kubesteer's webhook only, to whoever last changed the spec",
        )
    })
}

/// The identity an annotation holds.
pub fn read(annotation: &str) -> Result<UserInfo, String> {
    serde_json::from_str(annotation).map_err(|e| format!("{FIELD} is not an identity: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alice() -> UserInfo {
        UserInfo {
            username: Some("alice".into()),
            groups: Some(vec!["dev".into(), "system:authenticated".into()]),
            ..Default::default()
        }
    }

    fn apply(object: &Value, ops: Vec<PatchOperation>) -> Value {
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &ops).unwrap();
        patched
    }

    #[test]
    fn a_new_or_changed_spec_records_its_author_and_anything_else_keeps_the_old_one() {
        let created = json!({"metadata": {"name": "s"}, "spec": {"a": 1}});
        let want = after(None, &created, &alice());
        let stored = apply(&created, patch(&created, want.as_deref()));
        assert_eq!(read(of(&stored).unwrap()).unwrap(), alice());
        assert_eq!(check(None, &stored, &alice()), None);

        // Bob labels it, and tries to make himself the author: the old author stays.
        let bob = UserInfo {
            username: Some("bob".into()),
            ..Default::default()
        };
        let mut labelled = stored.clone();
        labelled["metadata"]["labels"] = json!({"team": "x"});
        labelled["metadata"]["annotations"][AUTHOR] = json!("{\"username\":\"root\"}");
        let want = after(Some(&stored), &labelled, &bob);
        assert_eq!(want.as_deref(), of(&stored));
        assert!(check(Some(&stored), &labelled, &bob).is_some());
        let kept = apply(&labelled, patch(&labelled, want.as_deref()));
        assert_eq!(of(&kept), of(&stored));
        assert_eq!(check(Some(&stored), &kept, &bob), None);

        // Bob changes the spec: he is the author now.
        let mut edited = kept.clone();
        edited["spec"]["a"] = json!(2);
        let want = after(Some(&kept), &edited, &bob);
        let edited = apply(&edited, patch(&edited, want.as_deref()));
        assert_eq!(read(of(&edited).unwrap()).unwrap(), bob);
    }

    #[test]
    fn a_scaler_with_no_author_keeps_none_until_its_spec_changes() {
        let old = json!({"metadata": {"annotations": {"x": "y"}}, "spec": {"a": 1}});
        let mut forged = old.clone();
        forged["metadata"]["annotations"][AUTHOR] = json!("{}");
        assert_eq!(after(Some(&old), &forged, &alice()), None);
        let cleaned = apply(&forged, patch(&forged, None));
        assert_eq!(cleaned, old);
        assert!(read("not json").unwrap_err().contains(FIELD));
        let bare = json!({"spec": {}});
        let recorded = apply(&bare, patch(&bare, Some("{}")));
        assert_eq!(of(&recorded), Some("{}"));
    }
}
