//! Pieces every kind shares: conditions and schema helpers.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::{json_schema, Schema, SchemaGenerator};

pub use crate::keys::condition::READY;
use crate::rules::MAX_GENERATION;

/// Builds a condition; `lastTransitionTime` is kept from `previous` while the status is unchanged.
pub fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Time,
    previous: &[Condition],
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(now);
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time,
    }
}

/// Schema of `status.conditions`: a list keyed by `type`, as in the built-in kinds.
pub fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut item = generator.subschema_for::<Condition>();
    // The built-in Condition schema leaves observedGeneration unbounded.
    if let Some(generation) = item
        .get_mut("properties")
        .and_then(|p| p.get_mut("observedGeneration"))
        .and_then(|g| g.as_object_mut())
    {
        generation.insert("minimum".into(), 0.into());
        generation.insert("maximum".into(), MAX_GENERATION.into());
    }
    json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}
