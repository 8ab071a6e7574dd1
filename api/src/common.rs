//! Pieces every kind shares: conditions and schema helpers.
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use schemars::{json_schema, Schema, SchemaGenerator};

use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::field::FieldErrors;
use crate::keys;
use crate::rules::{check_pattern, MAX_GENERATION, QUANTITY};

/// A Kubernetes time from a UTC instant, to whole seconds as the API stores it, so a status
/// computed twice compares equal.
pub fn to_time(at: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(at.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// A UTC instant from a Kubernetes time.
pub fn from_time(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or_default()
}

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
    let status = if ok {
        keys::condition::TRUE
    } else {
        keys::condition::FALSE
    };
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

/// Schema of an optional `resources` of a container, with the quantity pattern on every request
/// and limit.
pub fn resources_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<ResourceRequirements>();
    // schema_with hides the Option from the derive, which would have said this.
    schema.insert("nullable".into(), true.into());
    for list in ["limits", "requests"] {
        if let Some(quantity) = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut(list))
            .and_then(|l| l.get_mut("additionalProperties"))
            .and_then(|q| q.as_object_mut())
        {
            quantity.insert("pattern".into(), QUANTITY.regex.into());
        }
    }
    schema
}

/// Reads an optional `resources` as the schema does: a quantity is an integer or a string, so a
/// fraction (`cpu: 0.5`), which k8s-openapi would take, is refused as the apiserver refuses it.
pub fn deserialize_resources<'de, D>(
    deserializer: D,
) -> Result<Option<ResourceRequirements>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    use serde::Deserialize;
    let Some(value) = Option::<serde_json::Value>::deserialize(deserializer)? else {
        return Ok(None);
    };
    for list in ["limits", "requests"] {
        for (name, quantity) in value
            .get(list)
            .and_then(|l| l.as_object())
            .into_iter()
            .flatten()
        {
            if quantity.is_f64() {
                return Err(D::Error::custom(format!(
                    "{list}.{name} is a fraction, expected an integer or a string"
                )));
            }
        }
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(D::Error::custom)
}

/// Checks every request and limit of `resources` (at `path`) as a quantity.
pub fn check_resources(errors: &mut FieldErrors, path: &str, resources: &ResourceRequirements) {
    for (list, quantities) in [
        ("limits", &resources.limits),
        ("requests", &resources.requests),
    ] {
        for (name, quantity) in quantities.iter().flatten() {
            check_pattern(
                errors,
                format!("{path}.{list}.{name}"),
                &quantity.0,
                &QUANTITY,
            );
        }
    }
}
