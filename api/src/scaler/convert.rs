//! Conversion of Scaler between `v1alpha1` and `v1beta1`, for the webhook's `/convert`.
//!
//! **Spec: lossless both ways.** What v1alpha1 has no field for (targets of other kinds, windows
//! after the first, `excludeDates`, `override`, `hpaCooperation`) travels as JSON in the
//! [`V1BETA1_FIELDS`] annotation while the object is read as v1alpha1. A v1alpha1 object becomes
//! one window; the v1alpha1 fields v1beta1 has no place for (days in cron mode, a lone start, end
//! or replicas) travel the other way in [`V1ALPHA1_FIELDS`]. A malformed annotation is ignored
//! rather than failing the conversion, since a failed conversion makes the object unreadable.
//! When a v1alpha1 client edits the object, the edit wins: stashed targets are used only while
//! the Deployments v1alpha1 shows are unchanged. The stashed fields reach the stored object only
//! through the v1beta1 spec, which the webhook validates (every rule of the schema's and more,
//! and the author's permissions): the Scaler webhooks are registered for v1beta1 with
//! `matchPolicy: Equivalent`, so the apiserver converts a v1alpha1 write before reviewing it.
//!
//! **Status: never read from an annotation.** Annotations are writable by whoever may update a
//! Scaler, status only by who may update `scalers/status`; status targets feed the claims index
//! and the controller's give-back, so a stash must not be a way to write them. v1alpha1 shows the
//! status parts it can express (the Deployment targets, the first transition's time) and the way
//! back fills only those: the v1beta1-only parts (`override`, each transition's replicas and the
//! transitions after the first, targets of other kinds, each target's HPA) are left empty after a
//! v1alpha1 write, and the controller recomputes them on its next reconcile. So status is
//! lossless v1alpha1 → v1beta1 → v1alpha1, and v1beta1 → v1alpha1 → v1beta1 drops those parts.
use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::keys::annotation::{V1ALPHA1_FIELDS, V1BETA1_FIELDS};
use crate::scaler::v1alpha1 as alpha;
use crate::scaler::v1beta1 as beta;

/// The path of the webhook's conversion endpoint, as the CRD names it.
pub const PATH: &str = "/convert";
/// The warning `kubectl` prints for a request to v1alpha1.
pub const V1ALPHA1_DEPRECATION: &str =
    "kubesteer.io/v1alpha1 Scaler is deprecated; use kubesteer.io/v1beta1 (scaleTargetRefs and windows)";

/// The Scaler CRD serving both versions, v1beta1 stored and v1alpha1 deprecated; with `webhook`,
/// conversion goes through that Service's [`PATH`] (the caBundle is left to the certificate
/// machinery), without it the strategy stays None.
pub fn scaler_crd(
    webhook: Option<ServiceReference>,
) -> Result<CustomResourceDefinition, kube::core::crd::MergeError> {
    use kube::CustomResourceExt;
    let mut crd =
        kube::core::crd::merge_crds(vec![alpha::Scaler::crd(), beta::Scaler::crd()], "v1beta1")?;
    for v in &mut crd.spec.versions {
        if v.name == "v1alpha1" {
            v.deprecated = Some(true);
            v.deprecation_warning = Some(V1ALPHA1_DEPRECATION.to_string());
        }
    }
    crd.spec.conversion = webhook.map(|service| CustomResourceConversion {
        strategy: "Webhook".to_string(),
        webhook: Some(WebhookConversion {
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    path: Some(PATH.to_string()),
                    ..service
                }),
                ..Default::default()
            }),
            conversion_review_versions: vec!["v1".to_string()],
        }),
    });
    Ok(crd)
}

/// The `apiVersion`s this module converts between.
pub const V1ALPHA1: &str = "kubesteer.io/v1alpha1";
pub const V1BETA1: &str = "kubesteer.io/v1beta1";

/// The v1beta1 spec fields a v1alpha1 object carries in [`V1BETA1_FIELDS`]; spec only (see the
/// module doc). A `status` key, which earlier versions wrote here, is ignored.
#[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct BetaOnly {
    /// Every target, when some are not Deployments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scale_target_refs: Option<Vec<beta::ScaleTargetRef>>,
    /// The windows after the first (all of them, i.e. none, for an empty list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    windows: Option<Vec<beta::ScaleWindow>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exclude_dates: Option<Vec<String>>,
    #[serde(default, rename = "override", skip_serializing_if = "Option::is_none")]
    override_: Option<beta::Override>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hpa_cooperation: Option<beta::HpaCooperation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dry_run: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outside: Option<beta::Outside>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    selector: Option<crate::scaler::selector::TargetSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    patches: Option<Vec<crate::scaler::patches::SleepPatch>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exclude_calendar: Option<crate::scaler::calendar::CalendarRef>,
}

/// The v1alpha1 fields a v1beta1 object carries in [`V1ALPHA1_FIELDS`]: window fields that
/// make no window (no start and end together).
#[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct AlphaOnly {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<alpha::TimeOfDay>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    end: Option<alpha::TimeOfDay>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    days: Option<Vec<alpha::Day>>,
}

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConvertError {
    #[error("kind {0:?} is not converted: only Scaler has two versions")]
    Kind(String),
    #[error("cannot convert from {from:?} to {to:?}: supported are {V1ALPHA1:?} and {V1BETA1:?}")]
    Version { from: String, to: String },
    #[error("{version} Scaler {name:?}: {path}: {error}")]
    Decode {
        version: String,
        name: String,
        path: String,
        error: String,
    },
    #[error("encoding the converted object: {0}")]
    Encode(String),
}

/// Converts one object (as the apiserver sends it in a ConversionReview) to `desired`.
pub fn convert(object: &Value, desired: &str) -> Result<Value, ConvertError> {
    let field = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default();
    let (from, kind) = (field("apiVersion"), field("kind"));
    if kind != "Scaler" {
        return Err(ConvertError::Kind(kind.to_string()));
    }
    let encode =
        |v: Result<Value, serde_json::Error>| v.map_err(|e| ConvertError::Encode(e.to_string()));
    match (from, desired) {
        (f, d) if f == d && (f == V1ALPHA1 || f == V1BETA1) => Ok(object.clone()),
        (V1ALPHA1, V1BETA1) => encode(serde_json::to_value(to_v1beta1(&decode::<alpha::Scaler>(
            object, from,
        )?))),
        (V1BETA1, V1ALPHA1) => encode(serde_json::to_value(to_v1alpha1(&decode::<beta::Scaler>(
            object, from,
        )?))),
        _ => Err(ConvertError::Version {
            from: from.to_string(),
            to: desired.to_string(),
        }),
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    object: &Value,
    version: &str,
) -> Result<T, ConvertError> {
    serde_path_to_error::deserialize(object).map_err(|e: serde_path_to_error::Error<_>| {
        ConvertError::Decode {
            version: version.to_string(),
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            path: e.path().to_string(),
            error: e.inner().to_string(),
        }
    })
}

/// Takes `key` out of `annotations`, parsed; a map left empty by it becomes None.
fn take<T: serde::de::DeserializeOwned + Default>(
    annotations: &mut Option<BTreeMap<String, String>>,
    key: &str,
) -> T {
    let Some(map) = annotations else {
        return T::default();
    };
    let Some(raw) = map.remove(key) else {
        return T::default();
    };
    if map.is_empty() {
        *annotations = None;
    }
    serde_json::from_str(&raw).unwrap_or_default()
}

/// Puts `value` under `key` unless it is empty.
fn put<T: Serialize + Default + PartialEq>(
    annotations: &mut Option<BTreeMap<String, String>>,
    key: &str,
    value: &T,
) {
    if *value == T::default() {
        return;
    }
    if let Ok(raw) = serde_json::to_string(value) {
        annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), raw);
    }
}

fn deployment_ref(t: &alpha::ScaleTarget) -> beta::ScaleTargetRef {
    beta::ScaleTargetRef {
        api_version: beta::DEPLOYMENT_API_VERSION.into(),
        kind: beta::DEPLOYMENT_KIND.into(),
        name: t.name.clone(),
        namespace: t.namespace.clone(),
    }
}

fn deployments(refs: &[beta::ScaleTargetRef]) -> Vec<alpha::ScaleTarget> {
    refs.iter()
        .filter(|r| r.is_deployment())
        .map(|r| alpha::ScaleTarget {
            name: r.name.clone(),
            namespace: r.namespace.clone(),
        })
        .collect()
}

fn alpha_target(t: &beta::TargetStatus) -> alpha::TargetStatus {
    alpha::TargetStatus {
        name: t.name.clone(),
        namespace: t.namespace.clone(),
        replicas: t.replicas,
        original_replicas: t.original_replicas,
    }
}

fn beta_target(t: &alpha::TargetStatus) -> beta::TargetStatus {
    beta::TargetStatus {
        api_version: beta::DEPLOYMENT_API_VERSION.into(),
        kind: beta::DEPLOYMENT_KIND.into(),
        name: t.name.clone(),
        namespace: t.namespace.clone(),
        replicas: t.replicas,
        original_replicas: t.original_replicas,
        horizontal_pod_autoscaler: None,
        scaled_object: None,
        error: None,
    }
}

/// The v1beta1 status of a v1alpha1 one: only what v1alpha1 shows, never anything stashed.
fn status_to_beta(s: &alpha::ScalerStatus) -> beta::ScalerStatus {
    beta::ScalerStatus {
        active: s.active,
        next_transitions: s
            .next_transition
            .iter()
            .map(|t| beta::Transition {
                time: t.clone(),
                replicas: None,
            })
            .collect(),
        last_transition: s.last_transition.clone(),
        override_: None,
        target_count: None,
        targets: s.targets.iter().map(beta_target).collect(),
        observed_generation: s.observed_generation,
        conditions: s.conditions.clone(),
        savings: None,
    }
}

/// The v1alpha1 status of a v1beta1 one: v1alpha1 names Deployments only, so a target of another
/// kind is not shown (as in the spec) rather than shown as a Deployment it is not.
fn status_to_alpha(s: &beta::ScalerStatus) -> alpha::ScalerStatus {
    alpha::ScalerStatus {
        active: s.active,
        next_transition: s.next_transitions.first().map(|t| t.time.clone()),
        last_transition: s.last_transition.clone(),
        targets: s
            .targets
            .iter()
            .filter(|t| {
                t.api_version == beta::DEPLOYMENT_API_VERSION && t.kind == beta::DEPLOYMENT_KIND
            })
            .map(alpha_target)
            .collect(),
        observed_generation: s.observed_generation,
        conditions: s.conditions.clone(),
    }
}

/// A v1alpha1 Scaler as v1beta1: its window becomes the one window.
pub fn to_v1beta1(a: &alpha::Scaler) -> beta::Scaler {
    let mut metadata = a.metadata.clone();
    let stash: BetaOnly = take(&mut metadata.annotations, V1BETA1_FIELDS);
    let s = &a.spec;

    let derived: Vec<_> = s.deployments.iter().map(deployment_ref).collect();
    let scale_target_refs = match stash.scale_target_refs {
        Some(full) if deployments(&full) == s.deployments => full,
        // Edited as v1alpha1: its Deployments, then the stashed targets of other kinds.
        Some(full) => derived
            .into_iter()
            .chain(full.into_iter().filter(|r| !r.is_deployment()))
            .collect(),
        None => derived,
    };

    let mut left = AlphaOnly::default();
    let first = match (&s.start, &s.end) {
        (Some(start), Some(end)) => Some(beta::ScaleWindow {
            days: s.days.clone(),
            start: start.clone(),
            end: end.clone(),
            replicas: s.replicas,
        }),
        _ => {
            left = AlphaOnly {
                start: s.start.clone(),
                end: s.end.clone(),
                replicas: s.replicas,
                days: s.days.clone(),
            };
            None
        }
    };
    let windows = match (first, stash.windows) {
        (Some(f), Some(rest)) => Some(std::iter::once(f).chain(rest).collect()),
        (Some(f), None) => Some(vec![f]),
        (None, rest) => rest,
    };
    put(&mut metadata.annotations, V1ALPHA1_FIELDS, &left);

    beta::Scaler {
        metadata,
        spec: beta::ScalerSpec {
            scale_target_refs,
            windows,
            time_zone: s.time_zone.clone(),
            exclude_dates: stash.exclude_dates,
            override_: stash.override_,
            outside_replicas: s.outside_replicas,
            jobs: s.jobs.clone(),
            suspend: s.suspend,
            hpa_cooperation: stash.hpa_cooperation,
            dry_run: stash.dry_run,
            outside: stash.outside,
            selector: stash.selector,
            patches: stash.patches,
            exclude_calendar: stash.exclude_calendar,
        },
        status: a.status.as_ref().map(status_to_beta),
    }
}

/// A v1beta1 Scaler as v1alpha1: its first window, its Deployments, and the rest in
/// [`V1BETA1_FIELDS`].
pub fn to_v1alpha1(b: &beta::Scaler) -> alpha::Scaler {
    let mut metadata = b.metadata.clone();
    let left: AlphaOnly = take(&mut metadata.annotations, V1ALPHA1_FIELDS);
    // A stale stash never survives into the new one.
    let _: BetaOnly = take(&mut metadata.annotations, V1BETA1_FIELDS);
    let s = &b.spec;
    let mut stash = BetaOnly::default();

    let deployments = deployments(&s.scale_target_refs);
    if deployments
        .iter()
        .map(deployment_ref)
        .ne(s.scale_target_refs.iter().cloned())
    {
        stash.scale_target_refs = Some(s.scale_target_refs.clone());
    }

    let first = match &s.windows {
        Some(ws) => match ws.split_first() {
            Some((f, rest)) => {
                if !rest.is_empty() {
                    stash.windows = Some(rest.to_vec());
                }
                Some(f)
            }
            None => {
                stash.windows = Some(Vec::new());
                None
            }
        },
        None => None,
    };
    let (start, end, replicas, days) = match first {
        Some(f) => (
            Some(f.start.clone()),
            Some(f.end.clone()),
            f.replicas,
            f.days.clone(),
        ),
        None => (left.start, left.end, left.replicas, left.days),
    };
    stash.exclude_dates = s.exclude_dates.clone();
    stash.override_ = s.override_.clone();
    stash.hpa_cooperation = s.hpa_cooperation;
    stash.dry_run = s.dry_run;
    stash.outside = s.outside.clone();
    stash.selector = s.selector.clone();
    stash.patches = s.patches.clone();
    stash.exclude_calendar = s.exclude_calendar.clone();

    put(&mut metadata.annotations, V1BETA1_FIELDS, &stash);

    alpha::Scaler {
        metadata,
        spec: alpha::ScalerSpec {
            deployments,
            start,
            end,
            replicas,
            days,
            time_zone: s.time_zone.clone(),
            outside_replicas: s.outside_replicas,
            jobs: s.jobs.clone(),
            suspend: s.suspend,
        },
        status: b.status.as_ref().map(status_to_alpha),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;
    use proptest::collection::{btree_map, vec};
    use proptest::option::of;
    use proptest::prelude::*;
    use proptest::sample::select;
    use serde_json::json;

    fn time(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    fn arb_time() -> impl Strategy<Value = Time> {
        (0i64..4_000_000_000).prop_map(time)
    }

    fn arb_name() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9]{0,6}"
    }

    fn arb_time_of_day() -> impl Strategy<Value = alpha::TimeOfDay> {
        prop_oneof![
            (-2i64..26).prop_map(alpha::TimeOfDay::Hour),
            (0u32..25, 0u32..61)
                .prop_map(|(h, m)| alpha::TimeOfDay::Clock(format!("{h:02}:{m:02}"))),
            "[0-9:]{0,6}".prop_map(alpha::TimeOfDay::Clock),
        ]
    }

    fn arb_days() -> impl Strategy<Value = Option<Vec<alpha::Day>>> {
        use alpha::Day::*;
        of(vec(select(vec![Mon, Tue, Wed, Thu, Fri, Sat, Sun]), 0..8))
    }

    fn arb_replicas() -> impl Strategy<Value = Option<i32>> {
        of(-1i32..20)
    }

    fn arb_jobs() -> impl Strategy<Value = Option<Vec<alpha::ScaleJob>>> {
        of(vec(
            (
                arb_name(),
                select(vec!["@hourly", "0 9 * * 1-5", "bad"]),
                0i32..9,
            )
                .prop_map(|(name, schedule, replicas)| alpha::ScaleJob {
                    name,
                    schedule: schedule.into(),
                    replicas,
                }),
            0..3,
        ))
    }

    fn arb_annotations() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
        of(btree_map("[a-z./]{1,12}", ".{0,8}", 1..3))
    }

    fn arb_metadata() -> impl Strategy<Value = ObjectMeta> {
        (arb_name(), of(arb_name()), arb_annotations(), of(0i64..9)).prop_map(
            |(name, namespace, annotations, generation)| ObjectMeta {
                name: Some(name),
                namespace,
                annotations,
                generation,
                ..Default::default()
            },
        )
    }

    fn arb_window() -> impl Strategy<Value = beta::ScaleWindow> {
        (
            arb_days(),
            arb_time_of_day(),
            arb_time_of_day(),
            arb_replicas(),
        )
            .prop_map(|(days, start, end, replicas)| beta::ScaleWindow {
                days,
                start,
                end,
                replicas,
            })
    }

    fn arb_ref() -> impl Strategy<Value = beta::ScaleTargetRef> {
        (
            select(vec!["apps/v1", "apps/v1beta2", "example.com/v1"]),
            select(vec!["Deployment", "StatefulSet", "ReplicaSet"]),
            arb_name(),
            of(arb_name()),
        )
            .prop_map(
                |(api_version, kind, name, namespace)| beta::ScaleTargetRef {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    name,
                    namespace,
                },
            )
    }

    fn arb_override() -> impl Strategy<Value = beta::Override> {
        (0i32..9, arb_time()).prop_map(|(replicas, until)| beta::Override { replicas, until })
    }

    fn arb_beta_spec() -> impl Strategy<Value = beta::ScalerSpec> {
        let patch = (
            select(vec!["postgresql.cnpg.io", "argoproj.io"]),
            select(vec![
                "{metadata: {annotations: {cnpg.io/hibernation: \"on\"}}}",
                "[{op: remove, path: /spec/syncPolicy/automated}]",
            ]),
        )
            .prop_map(|(group, patch)| crate::scaler::patches::SleepPatch {
                target: crate::scaler::patches::PatchTarget {
                    group: group.into(),
                    kind: "Cluster".into(),
                },
                patch: patch.into(),
            });
        let spec = (
            vec(arb_ref(), 0..4),
            of(vec(arb_window(), 0..4)),
            of(select(vec!["UTC", "Europe/Berlin"]).prop_map(String::from)),
            of(vec(
                select(vec!["2026-12-24", "--12-25", "2026-12-24..2026-12-26"])
                    .prop_map(String::from),
                0..3,
            )),
            of(arb_override()),
            arb_replicas(),
            arb_jobs(),
            of(any::<bool>()),
            of(select(vec![
                beta::HpaCooperation::Enabled,
                beta::HpaCooperation::Disabled,
            ])),
            of(any::<bool>()),
            of((
                of(select(vec![
                    beta::OutsideMode::Release,
                    beta::OutsideMode::Hold,
                ])),
                of(select(vec!["15m", "1h30m"]).prop_map(String::from)),
            )
                .prop_map(|(mode, grace_period)| beta::Outside { mode, grace_period })),
            of(
                (of(prop::collection::vec(arb_name(), 1..3)), of(arb_name())).prop_map(
                    |(namespaces, tier)| crate::scaler::selector::TargetSelector {
                        namespaces,
                        match_labels: tier.map(|t| [("tier".to_string(), t)].into()),
                        ..Default::default()
                    },
                ),
            ),
        )
            .prop_map(
                |(
                    scale_target_refs,
                    windows,
                    time_zone,
                    exclude_dates,
                    override_,
                    outside_replicas,
                    jobs,
                    suspend,
                    hpa_cooperation,
                    dry_run,
                    outside,
                    selector,
                )| beta::ScalerSpec {
                    scale_target_refs,
                    windows,
                    time_zone,
                    exclude_dates,
                    override_,
                    outside_replicas,
                    jobs,
                    suspend,
                    hpa_cooperation,
                    dry_run,
                    outside,
                    selector,
                    patches: None,
                    exclude_calendar: None,
                },
            );
        let calendar = of(arb_name()).prop_map(|name| {
            name.map(|name| crate::scaler::calendar::CalendarRef { name, key: None })
        });
        (spec, of(vec(patch, 1..3)), calendar).prop_map(|(spec, patches, calendar)| {
            beta::ScalerSpec {
                patches,
                exclude_calendar: calendar,
                ..spec
            }
        })
    }

    fn arb_beta_status() -> impl Strategy<Value = beta::ScalerStatus> {
        let target = (
            select(vec!["apps/v1", "apps/v1beta2"]),
            select(vec!["Deployment", "StatefulSet"]),
            arb_name(),
            arb_name(),
            arb_replicas(),
            arb_replicas(),
            of(arb_name()),
        )
            .prop_map(
                |(api_version, kind, name, namespace, replicas, original_replicas, hpa)| {
                    beta::TargetStatus {
                        api_version: api_version.into(),
                        kind: kind.into(),
                        name,
                        namespace,
                        replicas,
                        original_replicas,
                        horizontal_pod_autoscaler: hpa,
                        scaled_object: None,
                        error: None,
                    }
                },
            );
        let transition = (arb_time(), arb_replicas())
            .prop_map(|(time, replicas)| beta::Transition { time, replicas });
        (
            of(any::<bool>()),
            vec(transition, 0..4),
            of(arb_time()),
            of(arb_override()),
            vec(target, 0..3),
            of(0i64..9),
        )
            .prop_map(
                |(active, next_transitions, last_transition, override_, targets, generation)| {
                    beta::ScalerStatus {
                        active,
                        next_transitions,
                        last_transition,
                        override_,
                        targets,
                        target_count: None,
                        observed_generation: generation,
                        conditions: Vec::new(),
                        savings: None,
                    }
                },
            )
    }

    fn arb_beta() -> impl Strategy<Value = beta::Scaler> {
        (arb_metadata(), arb_beta_spec(), of(arb_beta_status())).prop_map(
            |(metadata, spec, status)| beta::Scaler {
                metadata,
                spec,
                status,
            },
        )
    }

    fn arb_alpha() -> impl Strategy<Value = alpha::Scaler> {
        let target = (arb_name(), of(arb_name()))
            .prop_map(|(name, namespace)| alpha::ScaleTarget { name, namespace });
        let spec = (
            vec(target, 0..4),
            of(arb_time_of_day()),
            of(arb_time_of_day()),
            arb_replicas(),
            arb_days(),
            of(select(vec!["UTC", "Asia/Tokyo"]).prop_map(String::from)),
            arb_replicas(),
            arb_jobs(),
            of(any::<bool>()),
        )
            .prop_map(
                |(deployments, start, end, replicas, days, time_zone, outside, jobs, suspend)| {
                    alpha::ScalerSpec {
                        deployments,
                        start,
                        end,
                        replicas,
                        days,
                        time_zone,
                        outside_replicas: outside,
                        jobs,
                        suspend,
                    }
                },
            );
        let status_target = (arb_name(), arb_name(), arb_replicas(), arb_replicas()).prop_map(
            |(name, namespace, replicas, original_replicas)| alpha::TargetStatus {
                name,
                namespace,
                replicas,
                original_replicas,
            },
        );
        let status = (
            of(any::<bool>()),
            of(arb_time()),
            of(arb_time()),
            vec(status_target, 0..3),
            of(0i64..9),
        )
            .prop_map(
                |(active, next, last, targets, generation)| alpha::ScalerStatus {
                    active,
                    next_transition: next,
                    last_transition: last,
                    targets,
                    observed_generation: generation,
                    conditions: Vec::new(),
                },
            );
        (arb_metadata(), spec, of(status)).prop_map(|(metadata, spec, status)| alpha::Scaler {
            metadata,
            spec,
            status,
        })
    }

    fn json_of<T: Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap()
    }

    /// What is left of a v1beta1 status after a trip through v1alpha1: the Deployment targets
    /// without their HPA, the first transition's time; no override.
    fn status_v1alpha1_can_express(s: &beta::ScalerStatus) -> beta::ScalerStatus {
        beta::ScalerStatus {
            next_transitions: s
                .next_transitions
                .iter()
                .take(1)
                .map(|t| beta::Transition {
                    time: t.time.clone(),
                    replicas: None,
                })
                .collect(),
            override_: None,
            targets: s
                .targets
                .iter()
                .filter(|t| t.api_version == "apps/v1" && t.kind == "Deployment")
                .map(|t| beta::TargetStatus {
                    horizontal_pod_autoscaler: None,
                    scaled_object: None,
                    ..t.clone()
                })
                .collect(),
            ..s.clone()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn v1beta1_to_v1alpha1_and_back_keeps_the_spec_and_drops_v1beta1_only_status(b in arb_beta()) {
            let back = to_v1beta1(&to_v1alpha1(&b));
            let status = b.status.as_ref().map(status_v1alpha1_can_express);
            prop_assert_eq!((&back.metadata, &back.spec, &back.status), (&b.metadata, &b.spec, &status));
            // The same through JSON, as the webhook does it.
            let down = convert(&json_of(&b), V1ALPHA1).unwrap();
            prop_assert_eq!(down["apiVersion"].as_str(), Some(V1ALPHA1));
            let expected = beta::Scaler { status, ..b.clone() };
            prop_assert_eq!(convert(&down, V1BETA1).unwrap(), json_of(&expected));
        }

        #[test]
        fn v1alpha1_to_v1beta1_and_back_is_lossless(a in arb_alpha()) {
            let back = to_v1alpha1(&to_v1beta1(&a));
            prop_assert_eq!((&back.metadata, &back.spec, &back.status), (&a.metadata, &a.spec, &a.status));
            let original = json_of(&a);
            let up = convert(&original, V1BETA1).unwrap();
            prop_assert_eq!(up["apiVersion"].as_str(), Some(V1BETA1));
            prop_assert_eq!(convert(&up, V1ALPHA1).unwrap(), original);
        }

        #[test]
        fn no_annotation_reaches_the_v1beta1_status(a in arb_alpha(), b in arb_beta()) {
            // Whatever a writer puts in the stash, even one written from a whole v1beta1 object
            // with a status, the v1beta1 status is the one converted from the v1alpha1 status.
            let mut smuggled = json_of(&b.status);
            smuggled["nextTransitions"] = json!([{"time": "2030-01-01T00:00:00Z", "replicas": 9}]);
            let mut stash = serde_json::to_value(&b.spec).unwrap();
            stash["status"] = smuggled;
            let mut with = a.clone();
            with.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(V1BETA1_FIELDS.into(), stash.to_string());
            prop_assert_eq!(to_v1beta1(&with).status, to_v1beta1(&a).status);
        }

        #[test]
        fn conversion_never_panics_on_any_json(v in any::<u8>().prop_map(|n| json!({
            "apiVersion": if n % 2 == 0 { V1ALPHA1 } else { V1BETA1 },
            "kind": "Scaler",
            "metadata": {"name": "x", "annotations": {V1BETA1_FIELDS: format!("{{\"windows\": {n}}}"), V1ALPHA1_FIELDS: "{"}},
            "spec": if n % 3 == 0 { json!({"deployments": n}) } else { json!({}) }
        }))) {
            let _ = convert(&v, V1ALPHA1);
            let _ = convert(&v, V1BETA1);
        }
    }

    #[test]
    fn a_v1alpha1_window_becomes_one_window() {
        let a: alpha::Scaler = serde_json::from_value(json!({
            "apiVersion": V1ALPHA1, "kind": "Scaler",
            "metadata": {"name": "nightly", "namespace": "team"},
            "spec": {"deployments": [{"name": "web"}, {"name": "api", "namespace": "other"}],
                     "start": 9, "end": "17:30", "replicas": 3, "days": ["Mon"], "timeZone": "Europe/Berlin",
                     "outsideReplicas": 1}
        }))
        .unwrap();
        let b = convert(&json_of(&a), V1BETA1).unwrap();
        assert_eq!(
            b,
            json!({
                "apiVersion": V1BETA1, "kind": "Scaler",
                "metadata": {"name": "nightly", "namespace": "team"},
                "spec": {
                    "scaleTargetRefs": [
                        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "other"}
                    ],
                    "windows": [{"days": ["Mon"], "start": 9, "end": "17:30", "replicas": 3}],
                    "timeZone": "Europe/Berlin",
                    "outsideReplicas": 1
                }
            })
        );
    }

    #[test]
    fn v1beta1_only_fields_travel_in_the_annotation() {
        let b = json!({
            "apiVersion": V1BETA1, "kind": "Scaler",
            "metadata": {"name": "s", "annotations": {"team": "a"}},
            "spec": {
                "scaleTargetRefs": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}
                ],
                "windows": [{"start": 9, "end": 17}, {"start": 20, "end": 22, "replicas": 2}],
                "excludeDates": ["--12-25"],
                "override": {"replicas": 4, "until": "2030-01-01T00:00:00Z"}
            }
        });
        let a = convert(&b, V1ALPHA1).unwrap();
        assert_eq!(
            a["spec"],
            json!({"deployments": [{"name": "web"}], "start": 9, "end": 17})
        );
        let stash: Value = serde_json::from_str(
            a["metadata"]["annotations"][V1BETA1_FIELDS]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(stash["excludeDates"], json!(["--12-25"]));
        assert_eq!(
            stash["windows"],
            json!([{"start": 20, "end": 22, "replicas": 2}])
        );
        assert_eq!(a["metadata"]["annotations"]["team"], "a");
        assert_eq!(convert(&a, V1BETA1).unwrap(), b);
    }

    #[test]
    fn an_edit_made_as_v1alpha1_wins_over_the_stash() {
        let b = json!({
            "apiVersion": V1BETA1, "kind": "Scaler", "metadata": {"name": "s"},
            "spec": {
                "scaleTargetRefs": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"},
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
                ],
                "windows": [{"start": 9, "end": 17}]
            }
        });
        let mut a = convert(&b, V1ALPHA1).unwrap();
        a["spec"]["deployments"] = json!([{"name": "api"}]);
        a["spec"]["start"] = json!(8);
        let back = convert(&a, V1BETA1).unwrap();
        assert_eq!(
            back["spec"],
            json!({
                "scaleTargetRefs": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}
                ],
                "windows": [{"start": 8, "end": 17}]
            })
        );
    }

    /// A v1alpha1 Scaler as a user with `update scalers` (not `scalers/status`) would `replace`
    /// it: the status the apiserver keeps (an honest one) and an annotation of the user's.
    fn alpha_with_stash(stash: Value) -> Value {
        json!({
            "apiVersion": V1ALPHA1, "kind": "Scaler",
            "metadata": {"name": "s", "namespace": "team",
                         "annotations": {V1BETA1_FIELDS: stash.to_string()}},
            "spec": {"deployments": [{"name": "web"}], "start": 9, "end": 17, "replicas": 2},
            "status": {"active": true, "nextTransition": "2030-01-01T17:00:00Z",
                       "targets": [{"name": "web", "namespace": "team", "replicas": 2, "originalReplicas": 1}]}
        })
    }

    #[test]
    fn status_smuggled_in_the_annotation_is_not_converted() {
        let stash = json!({"status": {
            "override": {"replicas": 50, "until": "2099-01-01T00:00:00Z"},
            "nextTransitions": [{"time": "2030-01-01T17:00:00Z", "replicas": 50},
                                {"time": "2030-01-02T09:00:00Z", "replicas": 50}],
            "targets": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team",
                 "replicas": 2, "originalReplicas": 1, "horizontalPodAutoscaler": "theirs"},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "payments", "namespace": "bank",
                 "replicas": 0, "originalReplicas": 0}
            ]
        }});
        let b = convert(&alpha_with_stash(stash), V1BETA1).unwrap();
        assert_eq!(
            b["status"],
            json!({
                "active": true,
                "nextTransitions": [{"time": "2030-01-01T17:00:00Z"}],
                "targets": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                             "namespace": "team", "replicas": 2, "originalReplicas": 1}]
            })
        );
        assert!(b["metadata"]["annotations"].is_null(), "{b}");
    }

    #[test]
    fn a_v1beta1_status_reads_as_v1alpha1_without_what_v1alpha1_cannot_name() {
        let b = json!({
            "apiVersion": V1BETA1, "kind": "Scaler", "metadata": {"name": "s", "namespace": "team"},
            "spec": {"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                                         {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}],
                     "windows": [{"start": 9, "end": 17}]},
            "status": {
                "override": {"replicas": 3, "until": "2030-01-01T00:00:00Z"},
                "nextTransitions": [{"time": "2030-01-01T17:00:00Z", "replicas": 3}],
                "targets": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team",
                     "replicas": 3, "originalReplicas": 1, "horizontalPodAutoscaler": "web"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "namespace": "team",
                     "replicas": 3, "originalReplicas": 1}
                ]
            }
        });
        let a = convert(&b, V1ALPHA1).unwrap();
        assert_eq!(
            a["status"],
            json!({"nextTransition": "2030-01-01T17:00:00Z",
                   "targets": [{"name": "web", "namespace": "team", "replicas": 3, "originalReplicas": 1}]})
        );
        let stash: Value = serde_json::from_str(
            a["metadata"]["annotations"][V1BETA1_FIELDS]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert!(stash.get("status").is_none(), "spec only: {stash}");
        // Back as v1beta1 (a v1alpha1 write): the spec whole, the status as v1alpha1 showed it.
        let back = convert(&a, V1BETA1).unwrap();
        assert_eq!(back["spec"], b["spec"]);
        assert_eq!(
            back["status"],
            json!({"nextTransitions": [{"time": "2030-01-01T17:00:00Z"}],
                   "targets": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                "namespace": "team", "replicas": 3, "originalReplicas": 1}]})
        );
    }

    #[test]
    fn a_stashed_spec_is_judged_as_v1beta1() {
        // The webhook reviews a v1alpha1 write as v1beta1 (matchPolicy Equivalent): the stashed
        // fields are in the spec it validates, each named by its v1beta1 path.
        let now = crate::scaler::schedule::Instant::from_timestamp(1_900_000_000, 0).unwrap();
        let bad = json!({
            "windows": [{"start": 20, "end": 20}],
            "override": {"replicas": 3, "until": "2020-01-01T00:00:00Z"},
            "excludeDates": ["--13-40"],
            "scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                                {"apiVersion": "apps/v1", "kind": "not a kind", "name": "db"}]
        });
        let b: beta::Scaler =
            serde_json::from_value(convert(&alpha_with_stash(bad), V1BETA1).unwrap()).unwrap();
        let paths: Vec<_> = b.spec.validate(now).into_iter().map(|e| e.path).collect();
        for path in [
            "spec.scaleTargetRefs[1].kind",
            "spec.windows[1].end",
            "spec.excludeDates[0]",
            "spec.override.until",
        ] {
            assert!(paths.iter().any(|p| p == path), "{path} in {paths:?}");
        }
        // A stash that is no v1beta1 at all (an `until` that is no time) is dropped whole:
        // nothing of it reaches the stored object unvalidated.
        let unparsable = json!({"windows": [{"start": 20, "end": 22}],
                                "override": {"replicas": 3, "until": "tomorrow"}});
        let b = convert(&alpha_with_stash(unparsable), V1BETA1).unwrap();
        assert_eq!(
            (&b["spec"]["windows"], &b["spec"]["override"]),
            (
                &json!([{"start": 9, "end": 17, "replicas": 2}]),
                &Value::Null
            )
        );
    }

    #[test]
    fn the_crd_stores_v1beta1_and_deprecates_v1alpha1() {
        let crd = scaler_crd(Some(ServiceReference {
            name: "kubesteer-webhook".into(),
            namespace: "kubesteer-system".into(),
            port: Some(443),
            path: None,
        }))
        .unwrap();
        let versions: Vec<_> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage, v.deprecated))
            .collect();
        assert_eq!(
            versions,
            [
                ("v1beta1", true, true, None),
                ("v1alpha1", true, false, Some(true))
            ]
        );
        let conversion = crd.spec.conversion.unwrap();
        assert_eq!(conversion.strategy, "Webhook");
        let webhook = conversion.webhook.unwrap();
        assert_eq!(webhook.conversion_review_versions, ["v1"]);
        let service = webhook.client_config.unwrap().service.unwrap();
        assert_eq!(service.path.as_deref(), Some("/convert"));
        assert_eq!(service.namespace, "kubesteer-system");
        assert!(scaler_crd(None).unwrap().spec.conversion.is_none());
    }

    #[test]
    fn bad_input_gets_a_clear_error() {
        let e = convert(&json!({"apiVersion": V1ALPHA1, "kind": "Welcome"}), V1BETA1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "kind \"Welcome\" is not converted: only Scaler has two versions"
        );
        let e = convert(
            &json!({"apiVersion": "kubesteer.io/v2", "kind": "Scaler"}),
            V1BETA1,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot convert from \"kubesteer.io/v2\""),
            "{e}"
        );
        let e = convert(
            &json!({"apiVersion": V1ALPHA1, "kind": "Scaler", "metadata": {"name": "x"},
                    "spec": {"deployments": [{"name": 5}]}}),
            V1BETA1,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "kubesteer.io/v1alpha1 Scaler \"x\": spec.deployments[0].name: invalid type"
            ),
            "{e}"
        );
        // The same version comes back unchanged, even with fields the types do not know.
        let same = json!({"apiVersion": V1BETA1, "kind": "Scaler", "extra": 1});
        assert_eq!(convert(&same, V1BETA1).unwrap(), same);
    }
}
