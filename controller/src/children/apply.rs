//! Applying: only what differs, and never to an object this owner does not control
//! (`NameConflict`).
use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::client::Body;
use kube::core::{NamespaceResourceScope, Status};
use kube::{Api, Client, Resource, ResourceExt};
use kubesteer_api::keys::{annotation, CONTROLLER_FIELD_MANAGER};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::*;
use crate::{is_status, Context, Error, Result};

/// A namespaced kind the controller writes whole: what [`apply`], [`create`] and [`ensure`] need.
pub trait Namespaced:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
{
}

impl<K> Namespaced for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
{
}

/// Server-side apply under kubesteer's one field manager, taking over fields from hand edits.
pub fn apply_params() -> PatchParams {
    PatchParams::apply(CONTROLLER_FIELD_MANAGER).force()
}

/// A create under kubesteer's field manager. It never touches an existing object (409
/// AlreadyExists), and it costs the apiserver less than half of what a server-side apply that
/// creates costs (1.3 against 2.7-2.9 ms of its CPU per Deployment, `docs/benchmarks.md`).
pub fn create_params() -> PostParams {
    PostParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

/// A write under kubesteer's field manager that is not an apply (a JSON or merge patch).
pub fn write_params() -> PatchParams {
    PatchParams {
        field_manager: Some(CONTROLLER_FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// An object as the apiserver stored it after a server-side apply.
pub struct Applied<K> {
    pub object: K,
    /// Whether this apply created the object, rather than finding it there.
    pub created: bool,
}

/// How often the fold of a created child's fields into its Apply entry is tried. Each try after
/// the first follows a write by someone else that changed the managed fields since they were
/// read (a new manager, or one whose entry's time turned to another second), and reads them
/// again.
const FOLD_ATTEMPTS: u32 = 4;

/// Server-side applies the namespaced `obj`. Unlike `Api::patch` it keeps the answer's status
/// code, as 201 Created is the one exact sign that the object did not exist before.
///
/// A child made by [`create`] has its fields in the manager's Update entry, which no apply
/// clears; the first apply to it finds that entry in its answer, folds it into the Apply entry
/// ([`upgraded`]) and applies again, so that what this apply left out is removed (as a client-go
/// client does with `csaupgrade`). Only an object's first apply after its create pays for that.
/// The fold replaces the managed fields only if they are still as they were read (a `test` of
/// exactly what it replaces, not of the resourceVersion: another writer's change that leaves
/// the managed fields alone, a status or an annotation written again within the second, loses
/// nothing by the fold); when they changed, they are read again, as many times as
/// `FOLD_ATTEMPTS` allows.
pub async fn apply<K>(client: &Client, obj: &K) -> Result<Applied<K>>
where
    K: Namespaced,
{
    let applied = apply_with(client, obj, &apply_params()).await?;
    let meta = applied.object.meta();
    let Some(mut entries) = upgraded(meta) else {
        return Ok(applied);
    };
    let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return Ok(applied);
    };
    let api = Api::<K>::namespaced(client.clone(), ns);
    let mut read = meta.managed_fields.clone();
    let mut attempt = 1;
    loop {
        // Only the fields' owners change, and only if no one changed them in between.
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "test", "path": "/metadata/managedFields", "value": read},
            {"op": "replace", "path": "/metadata/managedFields", "value": entries},
        ]))?;
        match api
            .patch(name, &write_params(), &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => break,
            // The test failed: the managed fields changed since. Read them again; nothing is
            // left to fold if the object is gone or someone folded them.
            Err(e) if is_status(&e, 422) && attempt < FOLD_ATTEMPTS => {
                attempt += 1;
                let Some(live) = api.get_opt(name).await? else {
                    return Ok(applied);
                };
                let Some(again) = upgraded(live.meta()) else {
                    return Ok(applied);
                };
                entries = again;
                read = live.meta().managed_fields.clone();
            }
            Err(e) => return Err(e.into()),
        }
    }
    let again = apply_with(client, obj, &apply_params()).await?;
    Ok(Applied {
        object: again.object,
        created: applied.created,
    })
}

/// `meta`'s managed fields with kubesteer's Update entries (its creates' and merge patches')
/// folded into its Apply entry, but for a Scaler's record, which stays in an Update entry; None
/// when there is nothing to fold.
pub fn upgraded(meta: &ObjectMeta) -> Option<Vec<ManagedFieldsEntry>> {
    let entries = meta.managed_fields.as_ref()?;
    let ours = |e: &ManagedFieldsEntry, operation: &str| {
        e.manager.as_deref() == Some(CONTROLLER_FIELD_MANAGER)
            && e.operation.as_deref() == Some(operation)
            && e.subresource.as_deref().unwrap_or_default().is_empty()
    };
    let mut fold = Value::Object(Default::default());
    let mut kept = Vec::new();
    for update in entries.iter().filter(|e| ours(e, "Update")) {
        let Some(FieldsV1(fields)) = &update.fields_v1 else {
            continue;
        };
        let mut fields = fields.clone();
        if let Some(record) = split_off_annotations(&mut fields, &annotation::SCALER_RECORD) {
            kept.push(ManagedFieldsEntry {
                fields_v1: Some(FieldsV1(record)),
                ..update.clone()
            });
        }
        union(&mut fold, &fields);
    }
    if fold.as_object().is_none_or(|f| f.is_empty()) {
        return None;
    }
    let mut out: Vec<ManagedFieldsEntry> = entries
        .iter()
        .filter(|e| !ours(e, "Update"))
        .cloned()
        .collect();
    match out.iter_mut().find(|e| ours(e, "Apply")) {
        Some(apply) => match &mut apply.fields_v1 {
            Some(FieldsV1(into)) => union(into, &fold),
            none => *none = Some(FieldsV1(fold)),
        },
        None => out.push(ManagedFieldsEntry {
            api_version: entries
                .iter()
                .find(|e| ours(e, "Update"))
                .and_then(|e| e.api_version.clone()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fold)),
            manager: Some(CONTROLLER_FIELD_MANAGER.into()),
            operation: Some("Apply".into()),
            subresource: None,
            time: None,
        }),
    }
    out.extend(kept);
    Some(out)
}

/// Takes the annotations named in `keys` out of the field set `fields` (the managedFields'
/// `FieldsV1` tree), returning them as a field set of their own.
fn split_off_annotations(fields: &mut Value, keys: &[&str]) -> Option<Value> {
    let annotations = fields
        .get_mut("f:metadata")?
        .get_mut("f:annotations")?
        .as_object_mut()?;
    let taken: serde_json::Map<String, Value> = keys
        .iter()
        .filter_map(|k| {
            let key = format!("f:{k}");
            annotations.remove(&key).map(|v| (key, v))
        })
        .collect();
    // An emptied map would own the annotations themselves, so it goes too, and so does
    // metadata left with nothing.
    if annotations.keys().all(|k| k == ".") {
        if let Some(metadata) = fields.get_mut("f:metadata").and_then(Value::as_object_mut) {
            metadata.remove("f:annotations");
            if metadata.is_empty() {
                if let Some(fields) = fields.as_object_mut() {
                    fields.remove("f:metadata");
                }
            }
        }
    }
    (!taken.is_empty())
        .then(|| serde_json::json!({"f:metadata": {"f:annotations": Value::Object(taken)}}))
}

/// Adds the field set `from` to `into`, both in the managedFields' `FieldsV1` form: a tree of
/// path elements, so a union is a deep merge of the two trees.
fn union(into: &mut Value, from: &Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        for (key, value) in from {
            match into.get_mut(key) {
                Some(existing) => union(existing, value),
                None => {
                    into.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

/// Creates the namespaced `obj` (a POST under kubesteer's field manager); 409 AlreadyExists when
/// an object of that name exists, whoever made it, and then nothing was written.
pub async fn create<K>(client: &Client, obj: &K) -> Result<Applied<K>>
where
    K: Namespaced,
{
    let ns = obj.meta().namespace.as_deref().ok_or(Error::MissingField {
        kind: "child",
        name: obj.name_any(),
        what: "namespace",
    })?;
    let object = Api::<K>::namespaced(client.clone(), ns)
        .create(&create_params(), obj)
        .await?;
    Ok(Applied {
        object,
        created: true,
    })
}

async fn apply_with<K>(client: &Client, obj: &K, params: &PatchParams) -> Result<Applied<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    let missing = |what| Error::MissingField {
        kind: "child",
        name: obj.name_any(),
        what,
    };
    let ns = obj
        .meta()
        .namespace
        .as_deref()
        .ok_or_else(|| missing("namespace"))?;
    let name = obj.meta().name.as_deref().ok_or_else(|| missing("name"))?;
    let request = kube::core::Request::new(K::url_path(&(), Some(ns)))
        .patch(name, params, &Patch::Apply(obj))
        .map_err(kube::Error::BuildRequest)?;
    let response = client.send(request.map(Body::from)).await?;
    let code = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await?;
    if code >= 400 {
        // The same error `Api::patch` gives, so conflicts and the like are recognised alike.
        let status = serde_json::from_slice::<Status>(&bytes).unwrap_or_else(|_| {
            Status::failure(
                &String::from_utf8_lossy(&bytes),
                "Failed to parse error data",
            )
            .with_code(code)
        });
        return Err(kube::Error::Api(status.boxed()).into());
    }
    Ok(Applied {
        object: serde_json::from_slice(&bytes)?,
        created: code == 201,
    })
}

/// FNV-1a, 64 bits, in hex: stable across builds and Rust versions.
pub fn fingerprint(bytes: &[u8]) -> String {
    format!("{:016x}", fingerprint_u64(bytes))
}

/// FNV-1a, 64 bits.
pub fn fingerprint_u64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `desired` with its fingerprint annotation, as it is applied.
pub fn stamped<K: Resource + Clone + Serialize>(desired: &K) -> Result<K> {
    let mut stamped = desired.clone();
    let hash = fingerprint(&serde_json::to_vec(desired)?);
    stamped
        .annotations_mut()
        .insert(annotation::APPLIED.into(), hash);
    Ok(stamped)
}

/// An object of a child's name that this owner does not control, so it is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameConflict {
    pub kind: String,
    pub name: String,
}

impl NameConflict {
    pub fn new(kind: &str, name: &str) -> Self {
        Self {
            kind: kind.to_string(),
            name: name.to_string(),
        }
    }

    /// What a user reads in the condition and the event.
    pub fn describe(&self, owner_kind: &str) -> String {
        format!(
            "{} {} exists and is not controlled by this {owner_kind}; it is left untouched",
            self.kind, self.name
        )
    }
}

/// What `ensure` made of a child: the controller's own, as wanted, or someone else's.
pub enum Ensured<K> {
    Ours(Applied<Arc<K>>),
    Foreign(NameConflict),
}

/// Whether `meta` has a controller owner reference with the uid `owner_uid`.
pub fn controlled_by(meta: &ObjectMeta, owner_uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

/// Makes `desired` so, writing only what differs and never an object its owner does not control.
/// `notes` remember which cached pod templates were found as wanted (see [`Packed`]) and which
/// children were created but not cached yet ([`Unseen`]).
pub async fn ensure<K>(
    ctx: &Context,
    cache: &PackedStore<K>,
    notes: &Notes,
    desired: &K,
) -> Result<Ensured<K>>
where
    K: Namespaced + Send + Sync + 'static,
{
    let Notes { templates, unseen } = notes;
    let desired = stamped(desired)?;
    let name = desired.name_any();
    let kind = K::kind(&()).to_string();
    let owner_uid = desired
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
        .ok_or_else(|| Error::MissingField {
            kind: "child",
            name: name.clone(),
            what: "metadata.ownerReferences (controller)",
        })?;
    let namespace = ResourceExt::namespace(&desired).unwrap_or_default();
    let wanted = serde_json::to_value(&desired)?;
    let mut wanted_rest = wanted.clone();
    let wanted_template = take_template(&mut wanted_rest)?;
    let key = Packed::<K>::key(&name, &namespace);
    let template_key = CheckedTemplates::key(&namespace, &name);
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let ours = |object: K, created| {
        Ok(Ensured::Ours(Applied {
            object: Arc::new(object),
            created,
        }))
    };
    // Records that the live template of `object` (as the apiserver answered) contains the wanted.
    let checked = |object: &K| -> Result<()> {
        if let Some(wanted) = wanted_template {
            if let Some(live) = take_template(&mut serde_json::to_value(object)?)? {
                templates.record(template_key, Checked { wanted, live }, cache);
            }
        }
        Ok(())
    };
    if let Some(cached) = cache.get(&key) {
        let object = cached.object()?;
        if !controlled_by(object.meta(), &owner_uid) {
            return Ok(Ensured::Foreign(NameConflict::new(&kind, &name)));
        }
        if contains(&cached.value()?, &wanted_rest) {
            let template_as_wanted = match (&wanted_template, cached.template()) {
                (None, _) => true,
                (Some(wanted), Some(live)) => templates.is_checked(template_key, *wanted, live),
                (Some(_), None) => false,
            };
            if template_as_wanted {
                ctx.metrics.child(&kind, false);
                return ours(object, false);
            }
            // A template not checked yet (a restart, or a hand edit): read it in full once.
            if let Some(live) = api.get_opt(&name).await? {
                if contains(&serde_json::to_value(&live)?, &wanted) {
                    checked(&live)?;
                    ctx.metrics.child(&kind, false);
                    return ours(object, false);
                }
            }
        }
        ctx.metrics.child(&kind, true);
        let applied = apply(&ctx.client, &desired).await?;
        checked(&applied.object)?;
        return ours(applied.object, applied.created);
    }
    // Not cached: new, or missed by the label-filtered watch (someone else's object of that name)
    // or not seen by it yet. A child this controller created and its watch has not brought yet
    // is as the create's answer had it; anything else is created, and only when something is
    // there already, read.
    let live = match unseen.get(&desired) {
        Some(noted) => K::clone(&noted),
        None => match create(&ctx.client, &desired).await {
            Ok(applied) => {
                ctx.metrics.child(&kind, true);
                checked(&applied.object)?;
                let object = Arc::new(applied.object);
                unseen.created(object.clone());
                return Ok(Ensured::Ours(Applied {
                    object,
                    created: applied.created,
                }));
            }
            // An object of that name exists: nothing was written.
            Err(Error::Kube(e)) if is_status(&e, 409) => api.get_opt(&name).await?.ok_or(e)?,
            Err(e) => return Err(e),
        },
    };
    if !controlled_by(live.meta(), &owner_uid) {
        return Ok(Ensured::Foreign(NameConflict::new(&kind, &name)));
    }
    let drifted = !contains(&serde_json::to_value(&live)?, &wanted);
    ctx.metrics.child(&kind, drifted);
    if !drifted {
        checked(&live)?;
        return ours(live, false);
    }
    let applied = apply(&ctx.client, &desired).await?;
    checked(&applied.object)?;
    ours(applied.object, false)
}

/// Whether `actual` has every field of `desired` with an equal value. The apiserver only adds
/// to what was applied (defaults, status, metadata), so an object that still contains what was
/// applied needs no new apply. Lists must match in length, so a removed entry is noticed; an
/// empty list or map stands for an absent one, as the apiserver omits those.
pub fn contains(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => d.iter().all(|(k, dv)| match a.get(k) {
            Some(av) => contains(av, dv),
            None => is_empty(dv),
        }),
        (Value::Array(a), Value::Array(d)) => {
            a.len() == d.len() && a.iter().zip(d).all(|(av, dv)| contains(av, dv))
        }
        (Value::Null, d) => is_empty(d),
        (a, d) => a == d,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(entries: Value) -> ObjectMeta {
        serde_json::from_value(json!({"name": "web", "managedFields": entries})).unwrap()
    }

    #[test]
    fn a_creates_fields_join_the_apply_entry_but_a_scalers_record_and_others_fields_stay() {
        let kcm = json!({"manager": "kube-controller-manager", "operation": "Update",
            "apiVersion": "apps/v1", "subresource": "status", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:replicas": {}}}});
        let hand = json!({"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:paused": {}}}});
        let meta = meta(json!([
            {"manager": CONTROLLER_FIELD_MANAGER, "operation": "Apply", "apiVersion": "apps/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": CONTROLLER_FIELD_MANAGER, "operation": "Update", "apiVersion": "apps/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {
                "f:metadata": {"f:annotations": {".": {}, "f:kubesteer.io/applied": {},
                    "f:kubesteer.io/original-replicas": {}}},
                "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"web\"}": {".": {}, "f:env": {}}}}}}}},
            kcm, hand,
        ]));
        let entries = serde_json::to_value(upgraded(&meta).unwrap()).unwrap();
        assert_eq!(
            entries,
            json!([
                {"manager": CONTROLLER_FIELD_MANAGER, "operation": "Apply", "apiVersion": "apps/v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {
                    "f:metadata": {"f:annotations": {".": {}, "f:kubesteer.io/applied": {}}},
                    "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"web\"}": {".": {}, "f:env": {}}}}}}}},
                kcm, hand,
                {"manager": CONTROLLER_FIELD_MANAGER, "operation": "Update", "apiVersion": "apps/v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {
                    "f:metadata": {"f:annotations": {"f:kubesteer.io/original-replicas": {}}}}},
            ])
        );
    }

    #[test]
    fn a_create_without_an_apply_since_becomes_the_apply_entry() {
        let meta = meta(json!([
            {"manager": CONTROLLER_FIELD_MANAGER, "operation": "Update", "apiVersion": "v1",
             "time": "2026-11-27T10:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:ports": {}}}},
        ]));
        let entries = serde_json::to_value(upgraded(&meta).unwrap()).unwrap();
        assert_eq!(
            entries,
            json!([{"manager": CONTROLLER_FIELD_MANAGER, "operation": "Apply", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:ports": {}}}}])
        );
    }

    #[test]
    fn nothing_to_fold_is_no_write() {
        let applied = json!({"manager": CONTROLLER_FIELD_MANAGER, "operation": "Apply",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}});
        let record = json!({"manager": CONTROLLER_FIELD_MANAGER, "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {"f:kubesteer.io/original-replicas-owner": {}}}}});
        let status = json!({"manager": CONTROLLER_FIELD_MANAGER, "operation": "Update",
            "subresource": "status", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}});
        for entries in [
            json!([]),
            json!([applied.clone()]),
            json!([applied, record, status]),
        ] {
            assert!(upgraded(&meta(entries.clone())).is_none(), "{entries}");
        }
        assert!(upgraded(&ObjectMeta::default()).is_none());
    }

    #[test]
    fn an_object_with_defaults_added_contains_what_was_applied() {
        let desired = json!({"spec": {"replicas": 2, "template": {"containers": [{"name": "m", "args": ["-m", "64"]}]}}, "metadata": {"labels": {}}});
        let actual = json!({"spec": {"replicas": 2, "progressDeadlineSeconds": 600,
            "template": {"containers": [{"name": "m", "args": ["-m", "64"], "imagePullPolicy": "IfNotPresent"}]}},
            "metadata": {"uid": "u"}, "status": {"readyReplicas": 1}});
        assert!(contains(&actual, &desired));
    }

    #[test]
    fn a_changed_value_a_missing_field_or_a_shorter_list_is_drift() {
        let desired =
            json!({"spec": {"replicas": 2, "args": ["-m", "64"], "selector": {"a": "b"}}});
        for actual in [
            json!({"spec": {"replicas": 3, "args": ["-m", "64"], "selector": {"a": "b"}}}),
            json!({"spec": {"replicas": 2, "args": ["-m"], "selector": {"a": "b"}}}),
            json!({"spec": {"replicas": 2, "args": ["-m", "64", "-v"], "selector": {"a": "b"}}}),
            json!({"spec": {"replicas": 2, "args": ["-m", "64"]}}),
            json!({"spec": {"replicas": 2, "args": ["-m", "64"], "selector": {"a": "c"}}}),
            json!({}),
        ] {
            assert!(!contains(&actual, &desired), "{actual}");
        }
    }
}
