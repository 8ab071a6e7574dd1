//! Scaler `kubesteer.io/v1beta1`: several windows in one time zone, holidays, a temporary
//! override, any kind with a `/scale` subresource, and cooperation with HorizontalPodAutoscalers.
//!
//! Only the types, their validation and the parsing of `excludeDates` live here; conversion from
//! and to v1alpha1 is in [`crate::scaler::convert`].
use std::collections::BTreeSet;

use chrono::{Datelike, NaiveDate};
use chrono_tz::Tz;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::{Day, ScaleJob, TimeOfDay, DEFAULT_REPLICAS, DEFAULT_TIME_ZONE};
use crate::field::{FieldError, FieldErrors, Index, Sub};
use crate::rules::scaler::{
    API_VERSION, CLOCK, END_CLOCK, KIND, MAX_API_VERSION, MAX_DAYS, MAX_EXCLUDE_DATE,
    MAX_EXCLUDE_DATES, MAX_KIND, MAX_STATUS_TARGETS, MAX_TARGETS, MAX_TIME_ZONE, MAX_WINDOWS,
    MIN_DAYS, MIN_TARGETS, MIN_WINDOWS, NEXT_TRANSITIONS, SAME_START_AND_END,
};
use crate::rules::{
    check_length, check_name, MAX_GENERATION, MAX_INT32, MAX_LABEL, MAX_SUBDOMAIN, MIN_REPLICAS,
};
use crate::scaler::schedule::{Instant, WindowEnd};
use crate::scaler::target::{group_of, Target};
use chrono::NaiveTime;

/// This version, the stored one.
pub const VERSION: &str = "v1beta1";

/// The `apiVersion` and `kind` of a v1alpha1 target: v1alpha1 scales Deployments only.
pub use super::target::{DEPLOYMENT_API_VERSION, DEPLOYMENT_KIND};

/// Scales any workload with a `/scale` subresource on a schedule: windows or cron jobs, with holidays and a temporary override.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kubesteer.io",
    version = "v1beta1",
    kind = "Scaler",
    namespaced,
    status = "ScalerStatus",
    shortname = "scl",
    category = "kubesteer",
    doc = "Scaler scales workloads with a /scale subresource on a schedule: inside windows, or at cron firings, except on excluded dates and while an override holds.",
    printcolumn = r#"{"name":"TimeZone","type":"string","jsonPath":".spec.timeZone","description":"IANA time zone of the schedule"}"#,
    printcolumn = r#"{"name":"Active","type":"boolean","jsonPath":".status.active","description":"Whether the Scaler is scaling its targets now"}"#,
    printcolumn = r#"{"name":"Targets","type":"integer","jsonPath":".status.targetCount","description":"How many targets the Scaler scales (named and selected)"}"#,
    printcolumn = r#"{"name":"Next","type":"string","jsonPath":".status.nextTransitions[0].time","description":"When the next transition happens"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("has(self.windows) != has(self.jobs)").message("exactly one of windows and jobs is required"))]
#[x_kube(validation = Rule::new("has(self.selector) || (has(self.scaleTargetRefs) && size(self.scaleTargetRefs) > 0)").message("must name at least one target, or select targets with spec.selector").field_path(".scaleTargetRefs"))]
#[serde(rename_all = "camelCase")]
pub struct ScalerSpec {
    /// The workloads to scale, through their scale subresource: up to 50 entries, no duplicates, at least one unless selector is set. Any kind with a /scale subresource (Deployment, StatefulSet, ReplicaSet, custom resources) may be named. A target named here is this Scaler's even when another Scaler's selector matches it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_TARGETS))]
    pub scale_target_refs: Vec<ScaleTargetRef>,

    /// Targets chosen by kind, label and namespace (a fleet), besides those named in scaleTargetRefs. Objects that start matching later are scaled from then on; objects that stop matching are given back like a removed target. Between two Scalers whose selectors match one object, the older one scales it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<crate::scaler::selector::TargetSelector>,

    /// Window mode: the windows in which the targets run at the window's replicas. When windows overlap, the highest replicas of the open windows wins. Cannot be combined with jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = MIN_WINDOWS, max = MAX_WINDOWS))]
    pub windows: Option<Vec<ScaleWindow>>,

    /// IANA time zone in which windows, days, excludeDates and job schedules are read, e.g. "Europe/Berlin". Defaults to UTC. Daylight saving time: a start or end in the spring-forward gap moves to the first instant after the gap; a start or end repeated by the fall-back overlap means its first occurrence; a window swallowed whole by a gap does not open that day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_TIME_ZONE))]
    pub time_zone: Option<String>,

    /// Days on which the Scaler behaves as outside every window (holidays), read in timeZone: a date "2026-12-24", an inclusive range "2026-12-24..2026-12-26", or a yearly date "--12-25". A window that opened the day before an excluded day closes at midnight; in cron mode no job fires on an excluded day and the targets go to outsideReplicas. An override still applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_EXCLUDE_DATES), extend("x-kubernetes-list-type" = "set"))]
    pub exclude_dates: Option<Vec<String>>,

    /// Holds every target at replicas until the given time, regardless of windows, jobs and excludeDates; then the schedule applies again. Must lie in the future when written.
    #[serde(default, rename = "override", skip_serializing_if = "Option::is_none")]
    pub override_: Option<Override>,

    /// Replicas for every target outside every window (and on excluded dates): set when a window closes, and at once when the Scaler is created, edited or resumed outside every window. When absent, targets go back to the replicas they had before a window opened, and a Scaler that starts outside every window leaves them as they are until one opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub outside_replicas: Option<i32>,

    /// Cron mode: at each firing of a job, the targets go to that job's replicas. Cannot be combined with windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = crate::rules::scaler::MIN_JOBS, max = crate::rules::scaler::MAX_JOBS), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub jobs: Option<Vec<ScaleJob>>,

    /// Stops all scaling while true; targets are left as they are, but one removed from scaleTargetRefs is still given back. Defaults to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// What to do with a target scaled by a HorizontalPodAutoscaler. Enabled (the default): the Scaler sets that HPA's minReplicas (recording and restoring the original) instead of the target's replicas. Disabled: the Scaler writes the target's replicas and the HPA may undo them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa_cooperation: Option<HpaCooperation>,

    /// Computes and reports everything (status, nextTransitions, a Normal event DryRun "Dry run, not done: ..." for each write it would make) and writes nothing to the targets while true. Switching it off applies the current state at once. Giving a target back (dropped from scaleTargetRefs, or the Scaler deleted) is still done. Defaults to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,

    /// What the Scaler does with its targets outside every window: by default a closing window restores them and they are left alone until the next one; mode Hold keeps them at outsideReplicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<Outside>,
}

/// What a Scaler does with its targets outside every window.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct Outside {
    /// Release (the default): a closing window restores each target (to outsideReplicas when set), which is then left alone until the next window; a Scaler created, edited or resumed outside every window sets its targets to outsideReplicas at once, then leaves them alone likewise. Hold: while outside every window, a target found above outsideReplicas (a deploy, a GitOps sync, a person scaled it up) is set back to outsideReplicas once gracePeriod has passed since its creation or last pod template change, with an event naming who scaled it. Hold requires outsideReplicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<OutsideMode>,
    /// How long after a target's creation or last pod template change Hold leaves it alone (a rollout), as a duration such as "15m" or "1h30m". Defaults to 15m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub grace_period: Option<String>,
}

/// What a Scaler does with its targets outside every window.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum OutsideMode {
    /// Restore at the window's close, then leave the target alone.
    #[default]
    Release,
    /// Keep the target at outsideReplicas while outside every window.
    Hold,
}

/// Whether the Scaler suspends this kind instead of scaling it: a `batch` CronJob is a target
/// without `/scale` whose `spec.suspend` is set while its replicas would be 0 (its replicas read
/// as 0 when suspended, 1 when not), recorded and restored like replicas.
pub fn suspended_instead(group: &str, resource: &str) -> bool {
    group == "batch" && resource == "cronjobs"
}

/// The KEDA ScaledObject among an HPA's `owners`, by name: KEDA made that HPA, and a Scaler
/// pauses the ScaledObject instead of setting the HPA's minReplicas (KEDA would set it back).
pub fn keda_owner(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
) -> Option<&str> {
    owners
        .iter()
        .find(|o| o.kind == "ScaledObject" && o.api_version.starts_with("keda.sh/"))
        .map(|o| o.name.as_str())
}

/// How long Hold leaves a target alone after its creation or last pod template change, unless
/// `spec.outside.gracePeriod` says otherwise (as GoKubeDownscaler's default grace period).
pub const DEFAULT_GRACE_PERIOD: std::time::Duration = std::time::Duration::from_secs(15 * 60);
/// The longest grace period accepted: a week, the longest a schedule repeats over.
pub const MAX_GRACE_PERIOD: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// A workload with a /scale subresource.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema, Default,
)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// API version of the target, e.g. "apps/v1".
    #[schemars(length(min = 1, max = MAX_API_VERSION), regex(pattern = API_VERSION.regex))]
    pub api_version: String,
    /// Kind of the target, e.g. "Deployment" or "StatefulSet"; it must have a /scale subresource.
    #[schemars(length(min = 1, max = MAX_KIND), regex(pattern = KIND.regex))]
    pub kind: String,
    /// Name of the target.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), regex(pattern = crate::rules::DNS1123_SUBDOMAIN.regex))]
    pub name: String,
    /// Namespace of the target. When absent, the Scaler's own namespace, resolved when read (never written here); status.targets shows the resolved one. Another namespace needs permission to scale there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL), regex(pattern = crate::rules::DNS1123_LABEL.regex))]
    pub namespace: Option<String>,
}

impl ScaleTargetRef {
    /// The namespace of the target, given the Scaler's own.
    pub fn namespace_or<'a>(&'a self, own_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(own_namespace)
    }

    /// The API group of the target: "" for the core group.
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }

    /// The target this names, given the namespace it resolves to.
    pub fn target(&self, namespace: &str) -> Target {
        Target::new(&self.api_version, &self.kind, namespace, &self.name)
    }

    /// Whether this is an apps/v1 Deployment, the one kind v1alpha1 can name.
    pub fn is_deployment(&self) -> bool {
        self.api_version == DEPLOYMENT_API_VERSION && self.kind == DEPLOYMENT_KIND
    }
}

/// A recurring window `[start, end)` on some weekdays, read in the Scaler's timeZone.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema, Default)]
#[x_kube(validation = Rule::new(crate::rules::scaler::start_differs_from_end_rule()).message(SAME_WINDOW_START_AND_END).field_path(".end"))]
#[serde(rename_all = "camelCase")]
pub struct ScaleWindow {
    /// The weekdays on which the window opens (Mon..Sun). A window that crosses midnight belongs to the day it opened. Every day when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = MIN_DAYS, max = MAX_DAYS), extend("x-kubernetes-list-type" = "set"))]
    pub days: Option<Vec<Day>>,
    /// When the window opens: an hour 0-23 or "HH:MM", inclusive. In the spring-forward gap it opens at the first instant after the gap; a time repeated in the fall-back overlap means its first occurrence.
    #[schemars(schema_with = "super::time_of_day_schema")]
    pub start: TimeOfDay,
    /// When the window closes: an hour 0-24 or "HH:MM", exclusive; earlier than start means the window crosses midnight, and "24:00" (or 24) is the end of the day it opened, so start "00:00" and end "24:00" is the whole day. Must differ from start. DST as for start.
    #[schemars(schema_with = "super::end_of_window_schema")]
    pub end: TimeOfDay,
    /// Replicas for every target while this window is open; 0 is allowed. 1 when absent. Where windows overlap, the highest replicas wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub replicas: Option<i32>,
}

impl Default for TimeOfDay {
    fn default() -> Self {
        TimeOfDay::Hour(0)
    }
}

impl ScaleWindow {
    /// The window's start and end, or None after pushing what is wrong with them (at `path`,
    /// the window's): a malformed time, or an end that is the start.
    pub fn times(
        &self,
        path: impl std::fmt::Display,
        errors: &mut FieldErrors,
    ) -> Option<(NaiveTime, WindowEnd)> {
        let start = self.start.to_time();
        let end = self.end.to_end();
        if start.is_none() {
            errors.push(FieldError::invalid(
                format!("{path}.start"),
                self.start.as_json(),
                CLOCK.message,
            ));
        }
        if end.is_none() {
            errors.push(FieldError::invalid(
                format!("{path}.end"),
                self.end.as_json(),
                END_CLOCK.message,
            ));
        }
        let (start, end) = (start?, end?);
        if end == WindowEnd::At(start) {
            errors.push(FieldError::invalid(
                format!("{path}.end"),
                self.end.as_json(),
                SAME_START_AND_END.replace("spec.start", &format!("{path}.start")),
            ));
            return None;
        }
        Some((start, end))
    }
}

/// Why a window whose end is its start is refused, by the apiserver.
const SAME_WINDOW_START_AND_END: &str = "must differ from start";

/// A temporary override of the schedule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Override {
    /// Replicas for every target until `until`; 0 is allowed.
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub replicas: i32,
    /// Until when the override holds, as an RFC 3339 time such as "2026-12-18T18:00:00Z"; rejected when in the past at admission. After it, the schedule applies again.
    pub until: Time,
}

impl Override {
    /// When the override ends, to the second (as a `Time` keeps it); None only out of chrono's range.
    pub fn end(&self) -> Option<Instant> {
        chrono::DateTime::from_timestamp(self.until.0.as_second(), 0)
    }
}

/// Whether a Scaler works through a target's HorizontalPodAutoscaler.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum HpaCooperation {
    /// Set the HPA's minReplicas, recording and restoring the original.
    #[default]
    Enabled,
    /// Write the target's replicas and leave the HPA alone.
    Disabled,
}

/// What a Scaler reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScalerStatus {
    /// Whether the Scaler is scaling its targets now (inside a window, after a cron firing, or under an override).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    /// The next three transitions (window opening or closing, cron firing, override end), each with the replicas it sets; none means the targets return to their original replicas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = NEXT_TRANSITIONS))]
    pub next_transitions: Vec<Transition>,
    /// When the last transition happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition: Option<Time>,
    /// The override in force, while it holds.
    #[serde(default, rename = "override", skip_serializing_if = "Option::is_none")]
    pub override_: Option<Override>,
    /// Each target as last seen, with its namespace resolved: at most 100, failing ones first; targetCount counts them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STATUS_TARGETS))]
    pub targets: Vec<TargetStatus>,
    /// How many targets the Scaler scales: those named in scaleTargetRefs and those its selector matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_INT32))]
    pub target_count: Option<i32>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// Standard conditions; Ready is False with reason TargetNotFound when a target is missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// An upcoming transition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    /// When it happens.
    pub time: Time,
    /// The replicas it sets; absent when the targets go back to their original replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub replicas: Option<i32>,
}

/// One target as the Scaler last saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    /// API version of the target.
    pub api_version: String,
    /// Kind of the target.
    pub kind: String,
    /// Name of the target.
    pub name: String,
    /// Namespace of the target, resolved.
    pub namespace: String,
    /// The target's replicas as last set or seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub replicas: Option<i32>,
    /// The replicas recorded when the window opened, restored when it closes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub original_replicas: Option<i32>,
    /// The HorizontalPodAutoscaler whose minReplicas the Scaler sets for this target, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizontal_pod_autoscaler: Option<String>,
    /// The KEDA ScaledObject that scales this target, paused by the Scaler through KEDA's autoscaling.keda.sh/paused-replicas annotation instead of setting its HPA's minReplicas (KEDA would set that back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaled_object: Option<String>,
    /// Why the last change to this target failed; gone once a change succeeds. A failing target
    /// never holds up the Scaler's other targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<&Target> for TargetStatus {
    /// The entry of `target` with nothing seen of it yet, at the version it is addressed at.
    fn from(target: &Target) -> Self {
        Self {
            api_version: target.api_version(),
            kind: target.kind.clone(),
            name: target.name.clone(),
            namespace: target.namespace.clone(),
            ..Default::default()
        }
    }
}

/// One entry of `excludeDates`, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExcludeDate {
    /// `2026-12-24`
    Date(NaiveDate),
    /// `2026-12-24..2026-12-26`, both ends included.
    Range(NaiveDate, NaiveDate),
    /// `--12-25`: every year; `--02-29` only in leap years.
    Yearly { month: u32, day: u32 },
}

impl ExcludeDate {
    /// Parses one entry; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Self, String> {
        const FORMS: &str =
            "must be a date \"YYYY-MM-DD\", a range \"YYYY-MM-DD..YYYY-MM-DD\" or a yearly date \"--MM-DD\"";
        let date = |d: &str| {
            // chrono accepts a sign and more digits in the year; exclude dates are 10 characters.
            if d.len() != 10 || !d.is_ascii() {
                return Err(FORMS.to_string());
            }
            NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|e| format!("{FORMS}: {e}"))
        };
        if let Some(md) = s.strip_prefix("--") {
            let parts = md.split_once('-').filter(|(m, d)| {
                m.len() == 2
                    && d.len() == 2
                    && m.bytes().all(|b| b.is_ascii_digit())
                    && d.bytes().all(|b| b.is_ascii_digit())
            });
            let Some((m, d)) = parts else {
                return Err(FORMS.to_string());
            };
            let (month, day) = (m.parse().unwrap_or(0), d.parse().unwrap_or(0));
            // 2000 is a leap year, so Feb 29 is a valid yearly date.
            if NaiveDate::from_ymd_opt(2000, month, day).is_none() {
                return Err(format!("{FORMS}: no such day of the year"));
            }
            return Ok(ExcludeDate::Yearly { month, day });
        }
        if let Some((a, b)) = s.split_once("..") {
            let (a, b) = (date(a)?, date(b)?);
            if b < a {
                return Err("the end of a range must not be before its start".to_string());
            }
            return Ok(ExcludeDate::Range(a, b));
        }
        date(s).map(ExcludeDate::Date)
    }

    /// Whether `day` (a local date in the Scaler's timeZone) is excluded by this entry.
    pub fn contains(&self, day: NaiveDate) -> bool {
        match *self {
            ExcludeDate::Date(d) => d == day,
            ExcludeDate::Range(a, b) => a <= day && day <= b,
            ExcludeDate::Yearly { month, day: d } => day.month() == month && day.day() == d,
        }
    }
}

impl ScalerSpec {
    /// Whether the spec is in cron mode.
    pub fn is_cron(&self) -> bool {
        self.jobs.is_some()
    }

    pub fn time_zone(&self) -> &str {
        self.time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE)
    }

    pub fn suspend(&self) -> bool {
        self.suspend.unwrap_or(false)
    }

    pub fn hpa_cooperation(&self) -> HpaCooperation {
        self.hpa_cooperation.unwrap_or_default()
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run.unwrap_or(false)
    }

    /// Whether a Scaler that starts outside every window (created, edited or resumed there: a
    /// spec it has not acted on yet) sets its targets to `outsideReplicas` at once, as if a
    /// window had just closed: under `outside.mode: Release` with outsideReplicas (Hold keeps
    /// them there anyway). Without outsideReplicas the targets keep their replicas until a
    /// window opens.
    pub fn sets_outside_at_start(&self, spec_is_new: bool) -> bool {
        let release = self.outside.as_ref().and_then(|o| o.mode) != Some(OutsideMode::Hold);
        spec_is_new && release && self.outside_replicas.is_some()
    }

    /// With `outside.mode: Hold` and `outsideReplicas`, the replicas targets are held at outside
    /// every window and the grace period a target is left alone after its creation or last pod
    /// template change. None otherwise, or when the grace period cannot be read (the webhook
    /// denies that).
    pub fn hold(&self) -> Option<(i32, std::time::Duration)> {
        let outside = self.outside.as_ref()?;
        if outside.mode != Some(OutsideMode::Hold) {
            return None;
        }
        let grace = match &outside.grace_period {
            Some(g) => humantime::parse_duration(g).ok()?,
            None => DEFAULT_GRACE_PERIOD,
        };
        Some((self.outside_replicas?, grace))
    }

    /// Each target with its namespace resolved against the Scaler's own.
    pub fn targets<'a>(
        &'a self,
        own_namespace: &'a str,
    ) -> impl Iterator<Item = (&'a ScaleTargetRef, &'a str)> + 'a {
        self.scale_target_refs
            .iter()
            .map(move |t| (t, t.namespace_or(own_namespace)))
    }

    /// The spec with its top-level defaults filled in (`timeZone`, `suspend`). Nothing inside a
    /// list item is defaulted: a target's namespace is resolved when read ([`Self::targets`]),
    /// so re-applying the same file changes nothing.
    pub fn defaulted(&self) -> Self {
        let mut spec = self.clone();
        spec.time_zone
            .get_or_insert_with(|| DEFAULT_TIME_ZONE.to_string());
        spec.suspend.get_or_insert(false);
        spec
    }

    /// Two entries that name the same object once their namespaces are resolved (the schema
    /// cannot know the Scaler's namespace), each reported at the later entry.
    pub fn duplicate_targets(&self, own_namespace: &str) -> FieldErrors {
        let mut seen = BTreeSet::new();
        let mut errors = FieldErrors::new();
        for (i, (t, ns)) in self.targets(own_namespace).enumerate() {
            if !seen.insert(t.target(ns)) {
                errors.push(FieldError::duplicate(
                    format!("spec.scaleTargetRefs[{i}]"),
                    serde_json::to_value(t).unwrap_or_default(),
                ));
            }
        }
        errors
    }

    /// Every part of the spec that reaches beyond the Scaler's namespace `own`, refused where
    /// the installation allows Scalers their own namespace only.
    pub fn beyond_own_namespace(&self, own: &str) -> FieldErrors {
        const WHY: &str = "this installation allows Scalers to reach their own namespace only (chart value webhook.scalersAcrossNamespaces)";
        let mut errors = FieldErrors::new();
        for (i, (_, ns)) in self.targets(own).enumerate() {
            if ns != own {
                errors.push(FieldError::forbidden(
                    format!("spec.scaleTargetRefs[{i}].namespace"),
                    WHY,
                ));
            }
        }
        if let Some(selector) = &self.selector {
            if selector.namespace_selector.is_some() {
                errors.push(FieldError::forbidden(
                    "spec.selector.namespaceSelector",
                    WHY,
                ));
            }
            for (i, ns) in selector.namespaces.iter().flatten().enumerate() {
                if ns != own {
                    errors.push(FieldError::forbidden(
                        format!("spec.selector.namespaces[{i}]"),
                        WHY,
                    ));
                }
            }
        }
        errors
    }

    /// The parsed `excludeDates`, skipping malformed entries (validation reports them).
    pub fn exclude_dates(&self) -> Vec<ExcludeDate> {
        self.exclude_dates
            .iter()
            .flatten()
            .filter_map(|s| ExcludeDate::parse(s).ok())
            .collect()
    }

    /// Whether the local date `day` is excluded.
    pub fn is_excluded(&self, day: NaiveDate) -> bool {
        self.exclude_dates().iter().any(|e| e.contains(day))
    }

    /// Every violation of the field rules, each with its path; `now` is the admission time,
    /// against which `override.until` must lie in the future.
    pub fn validate(&self, now: Instant) -> FieldErrors {
        let mut errors = FieldErrors::new();
        self.validate_targets(&mut errors);
        match (&self.windows, &self.jobs) {
            (Some(_), Some(_)) => errors.push(FieldError::forbidden(
                "spec.windows",
                "may not be combined with spec.jobs",
            )),
            (None, None) => errors.push(FieldError::required(
                "spec.windows",
                "windows or jobs is required",
            )),
            _ => {}
        }
        if let Some(windows) = &self.windows {
            self.validate_windows(&mut errors, windows);
        }
        if let Some(jobs) = &self.jobs {
            // The same checks as v1alpha1's, on the same paths.
            super::validate_jobs(jobs, &mut errors);
        }
        if self.time_zone().chars().count() > MAX_TIME_ZONE {
            check_length(
                &mut errors,
                "spec.timeZone",
                self.time_zone(),
                1,
                MAX_TIME_ZONE,
            );
        } else if self.time_zone().parse::<Tz>().is_err() {
            errors.push(FieldError::invalid(
                "spec.timeZone",
                self.time_zone(),
                "must be an IANA time zone name such as \"Europe/Berlin\"",
            ));
        }
        if let Some(dates) = &self.exclude_dates {
            if dates.len() > MAX_EXCLUDE_DATES {
                errors.push(FieldError::too_many(
                    "spec.excludeDates",
                    dates.len(),
                    MAX_EXCLUDE_DATES,
                ));
            }
            let mut seen = BTreeSet::new();
            for (i, d) in dates.iter().enumerate() {
                let path = format!("spec.excludeDates[{i}]");
                if d.chars().count() > MAX_EXCLUDE_DATE {
                    check_length(&mut errors, &path, d, 1, MAX_EXCLUDE_DATE);
                } else if let Err(e) = ExcludeDate::parse(d) {
                    errors.push(FieldError::invalid(path, d.as_str(), e));
                } else if !seen.insert(d.as_str()) {
                    errors.push(FieldError::duplicate(path, d.as_str()));
                }
            }
        }
        if let Some(o) = &self.override_ {
            check_replicas(&mut errors, "spec.override.replicas", o.replicas);
            if o.until.0.as_second() <= now.timestamp() {
                errors.push(FieldError::invalid(
                    "spec.override.until",
                    serde_json::to_value(&o.until).unwrap_or_default(),
                    "must be in the future",
                ));
            }
        }
        if let Some(v) = self.outside_replicas {
            check_replicas(&mut errors, "spec.outsideReplicas", v);
        }
        if let Some(outside) = &self.outside {
            if outside.mode == Some(OutsideMode::Hold) && self.outside_replicas.is_none() {
                errors.push(FieldError::required(
                    "spec.outsideReplicas",
                    "spec.outside.mode Hold holds the targets at outsideReplicas",
                ));
            }
            if let Some(g) = &outside.grace_period {
                match humantime::parse_duration(g) {
                    Err(e) => errors.push(FieldError::invalid(
                        "spec.outside.gracePeriod",
                        g.as_str(),
                        format!("must be a duration such as \"15m\" or \"1h30m\": {e}"),
                    )),
                    Ok(d) if d > MAX_GRACE_PERIOD => errors.push(FieldError::invalid(
                        "spec.outside.gracePeriod",
                        g.as_str(),
                        "must be at most 7 days",
                    )),
                    Ok(_) => {}
                }
            }
        }
        errors
    }

    fn validate_targets(&self, errors: &mut FieldErrors) {
        let refs = &self.scale_target_refs;
        if let Some(selector) = &self.selector {
            selector.validate(errors);
        }
        if refs.len() < MIN_TARGETS && self.selector.is_none() {
            errors.push(FieldError::required(
                "spec.scaleTargetRefs",
                "must name at least one target, or select targets with spec.selector",
            ));
        } else if refs.len() > MAX_TARGETS {
            errors.push(FieldError::too_many(
                "spec.scaleTargetRefs",
                refs.len(),
                MAX_TARGETS,
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, t) in refs.iter().enumerate() {
            let path = Index("spec.scaleTargetRefs", i);
            crate::scaler::selector::check_kind_ref(errors, path, &t.api_version, &t.kind);
            check_name(errors, Sub(path, "name"), &t.name, false);
            if let Some(ns) = &t.namespace {
                check_name(errors, Sub(path, "namespace"), ns, true);
            }
            // The same object named twice: same group and kind, namespace and name.
            if !seen.insert((t.group(), t.kind.as_str(), t.namespace.as_deref(), &t.name)) {
                errors.push(FieldError::duplicate(
                    path.to_string(),
                    serde_json::to_value(t).unwrap_or_default(),
                ));
            }
        }
    }

    fn validate_windows(&self, errors: &mut FieldErrors, windows: &[ScaleWindow]) {
        if windows.len() < MIN_WINDOWS {
            errors.push(FieldError::required(
                "spec.windows",
                "must have at least one window when given",
            ));
        } else if windows.len() > MAX_WINDOWS {
            errors.push(FieldError::too_many(
                "spec.windows",
                windows.len(),
                MAX_WINDOWS,
            ));
        }
        for (i, w) in windows.iter().enumerate() {
            let path = Index("spec.windows", i);
            w.times(path, errors);
            if let Some(r) = w.replicas {
                check_replicas(errors, Sub(path, "replicas"), r);
            }
            if let Some(days) = &w.days {
                if days.len() < MIN_DAYS {
                    errors.push(FieldError::invalid(
                        format!("{path}.days"),
                        serde_json::json!([]),
                        "must name at least one day when given",
                    ));
                }
                let mut seen = BTreeSet::new();
                for (j, d) in days.iter().enumerate() {
                    if !seen.insert(d) {
                        errors.push(FieldError::duplicate(
                            format!("{path}.days[{j}]"),
                            serde_json::to_value(d).unwrap_or_default(),
                        ));
                    }
                }
            }
        }
    }
}

fn check_replicas(errors: &mut FieldErrors, path: impl std::fmt::Display, value: i32) {
    if value < MIN_REPLICAS {
        errors.push(FieldError::invalid(
            path.to_string(),
            value,
            format!("must be greater than or equal to {MIN_REPLICAS}"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ScalerSpec {
        serde_json::from_value(v).unwrap()
    }

    fn now() -> Instant {
        chrono::Utc
            .with_ymd_and_hms(2026, 11, 24, 12, 0, 0)
            .unwrap()
    }

    fn messages(s: &ScalerSpec) -> Vec<String> {
        s.validate(now()).iter().map(ToString::to_string).collect()
    }

    fn sample() -> serde_json::Value {
        json!({
            "scaleTargetRefs": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "namespace": "data"}
            ],
            "timeZone": "Europe/Berlin",
            "windows": [
                {"days": ["Mon", "Tue", "Wed", "Thu", "Fri"], "start": "08:00", "end": 18, "replicas": 3},
                {"days": ["Fri"], "start": 22, "end": "02:30"}
            ],
            "excludeDates": ["2026-12-24..2026-12-26", "--01-01", "2026-05-01"],
            "override": {"replicas": 5, "until": "2026-11-27T18:00:00Z"},
            "outsideReplicas": 0,
            "hpaCooperation": "Disabled"
        })
    }

    #[test]
    fn reaching_beyond_the_own_namespace_is_named_where_it_happens() {
        let spec: ScalerSpec = serde_json::from_value(serde_json::json!({
            "scaleTargetRefs": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "db", "namespace": "data"},
            ],
            "selector": {"namespaces": ["team", "prod"]},
            "windows": [{"start": 9, "end": 17}],
        }))
        .expect("a spec");
        let paths: Vec<String> = spec
            .beyond_own_namespace("team")
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.scaleTargetRefs[1].namespace",
                "spec.selector.namespaces[1]"
            ]
        );
        let everywhere: ScalerSpec = serde_json::from_value(serde_json::json!({
            "selector": {"namespaceSelector": {}}, "windows": [{"start": 9, "end": 17}],
        }))
        .expect("a spec");
        assert_eq!(
            everywhere.beyond_own_namespace("team")[0].path,
            "spec.selector.namespaceSelector"
        );
    }

    #[test]
    fn a_full_spec_is_valid_and_round_trips_through_json() {
        let s = spec(sample());
        assert_eq!(messages(&s), Vec::<String>::new());
        assert_eq!(serde_json::to_value(&s).unwrap(), sample());
        assert_eq!(s.hpa_cooperation(), HpaCooperation::Disabled);
        let targets: Vec<_> = s
            .targets("team")
            .map(|(t, ns)| (t.kind.as_str(), ns))
            .collect();
        assert_eq!(targets, [("Deployment", "team"), ("StatefulSet", "data")]);
    }

    #[test]
    fn a_new_spec_outside_every_window_goes_to_outside_replicas_unless_held() {
        let mut v = sample();
        assert_eq!(v["outsideReplicas"], 0);
        assert!(spec(v.clone()).sets_outside_at_start(true));
        assert!(!spec(v.clone()).sets_outside_at_start(false));
        v["outside"] = json!({"mode": "Release"});
        assert!(spec(v.clone()).sets_outside_at_start(true));
        // Hold sets them there anyway, after its grace period.
        v["outside"] = json!({"mode": "Hold"});
        assert!(!spec(v.clone()).sets_outside_at_start(true));
        v.as_object_mut().unwrap().remove("outside");
        v.as_object_mut().unwrap().remove("outsideReplicas");
        assert!(!spec(v).sets_outside_at_start(true));
    }

    #[test]
    fn hold_needs_outside_replicas_and_a_readable_grace_period() {
        let mut v = sample();
        v["outside"] = json!({"mode": "Hold"});
        let s = spec(v.clone());
        assert_eq!(messages(&s), Vec::<String>::new());
        assert_eq!(s.hold(), Some((0, DEFAULT_GRACE_PERIOD)));
        v["outside"]["gracePeriod"] = json!("90s");
        assert_eq!(
            spec(v.clone()).hold(),
            Some((0, std::time::Duration::from_secs(90)))
        );
        v["outside"]["gracePeriod"] = json!("soon");
        v.as_object_mut().unwrap().remove("outsideReplicas");
        let s = spec(v.clone());
        let m = messages(&s);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].starts_with("spec.outsideReplicas: Required value: spec.outside.mode Hold"),
            "{m:?}"
        );
        assert!(
            m[1].starts_with(
                "spec.outside.gracePeriod: Invalid value: \"soon\": must be a duration"
            ),
            "{m:?}"
        );
        assert_eq!(s.hold(), None);
        v["outside"] = json!({"mode": "Hold", "gracePeriod": "8d"});
        v["outsideReplicas"] = json!(1);
        assert_eq!(
            messages(&spec(v.clone())),
            ["spec.outside.gracePeriod: Invalid value: \"8d\": must be at most 7 days"]
        );
        // Release (the default) holds nothing.
        v["outside"] = json!({"mode": "Release"});
        assert_eq!(spec(v).hold(), None);
    }

    #[test]
    fn every_violation_is_reported_with_its_path() {
        let s = spec(json!({
            "scaleTargetRefs": [
                {"apiVersion": "apps/v1", "kind": "deployment", "name": "Web"},
                {"apiVersion": "", "kind": "Deployment", "name": "a"},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "a", "namespace": "x"},
                {"apiVersion": "apps/v1beta2", "kind": "StatefulSet", "name": "a", "namespace": "x"}
            ],
            "windows": [{"start": 25, "end": "7:00", "replicas": -1}, {"start": 9, "end": "09:00", "days": ["Mon", "Mon"]}],
            "timeZone": "Mars/Olympus",
            "excludeDates": ["2026-02-30", "2026-12-26..2026-12-24", "--02-29", "--02-29", "tomorrow"],
            "override": {"replicas": -2, "until": "2026-11-24T11:59:59Z"},
            "outsideReplicas": -3
        }));
        let m = messages(&s);
        let want = [
            "spec.scaleTargetRefs[0].kind: Invalid value: \"deployment\"",
            "spec.scaleTargetRefs[0].name: Invalid value: \"Web\"",
            "spec.scaleTargetRefs[1].apiVersion: Required value",
            "spec.scaleTargetRefs[3]: Duplicate value",
            "spec.windows[0].start: Invalid value: 25: must be an hour 0-23 or \"HH:MM\"",
            "spec.windows[0].end: Invalid value: \"7:00\"",
            "spec.windows[0].replicas: Invalid value: -1",
            "spec.windows[1].end: Invalid value: \"09:00\": must differ from spec.windows[1].start",
            "spec.windows[1].days[1]: Duplicate value: \"Mon\"",
            "spec.timeZone: Invalid value: \"Mars/Olympus\"",
            "spec.excludeDates[0]: Invalid value: \"2026-02-30\"",
            "spec.excludeDates[1]: Invalid value: \"2026-12-26..2026-12-24\": the end of a range must not be before its start",
            "spec.excludeDates[3]: Duplicate value: \"--02-29\"",
            "spec.excludeDates[4]: Invalid value: \"tomorrow\"",
            "spec.override.replicas: Invalid value: -2",
            "spec.override.until: Invalid value: \"2026-11-24T11:59:59Z\": must be in the future",
            "spec.outsideReplicas: Invalid value: -3",
        ];
        for w in want {
            assert!(m.iter().any(|e| e.starts_with(w)), "{w} not in {m:#?}");
        }
        assert_eq!(m.len(), want.len(), "{m:#?}");
    }

    #[test]
    fn the_same_name_in_another_group_or_kind_is_no_duplicate() {
        let s = spec(json!({
            "scaleTargetRefs": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a"},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "a"},
                {"apiVersion": "example.com/v1", "kind": "Deployment", "name": "a"}
            ],
            "windows": [{"start": 9, "end": 17}]
        }));
        assert_eq!(messages(&s), Vec::<String>::new());
    }

    #[test]
    fn windows_and_jobs_are_exclusive_and_one_is_required() {
        let mut v = sample();
        v["jobs"] = json!([{"name": "a", "schedule": "0 0 30 2 *", "replicas": 1}]);
        let m = messages(&spec(v.clone()));
        assert_eq!(
            m,
            [
                "spec.windows: Forbidden: may not be combined with spec.jobs",
                "spec.jobs[0].schedule: Invalid value: \"0 0 30 2 *\": never fires within 5 years"
            ]
        );
        v.as_object_mut().unwrap().remove("jobs");
        v.as_object_mut().unwrap().remove("windows");
        assert_eq!(
            messages(&spec(v)),
            ["spec.windows: Required value: windows or jobs is required"]
        );
        let s = spec(json!({"scaleTargetRefs": [], "windows": []}));
        assert_eq!(
            messages(&s),
            [
                "spec.scaleTargetRefs: Required value: must name at least one target, or select targets with spec.selector",
                "spec.windows: Required value: must have at least one window when given"
            ]
        );
    }

    #[test]
    fn an_override_must_end_in_the_future() {
        let mut v = sample();
        v["override"]["until"] = json!("2026-11-24T12:00:00Z");
        assert_eq!(
            messages(&spec(v.clone())),
            ["spec.override.until: Invalid value: \"2026-11-24T12:00:00Z\": must be in the future"]
        );
        v["override"]["until"] = json!("2026-11-24T12:00:01Z");
        assert_eq!(messages(&spec(v)), Vec::<String>::new());
    }

    #[test]
    fn exclude_dates_parse_and_match() {
        let d = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        let e = ExcludeDate::parse("2026-12-24..2026-12-26").unwrap();
        assert!(!e.contains(d("2026-12-23")));
        assert!(e.contains(d("2026-12-24")) && e.contains(d("2026-12-26")));
        assert!(!e.contains(d("2026-12-27")));
        let y = ExcludeDate::parse("--02-29").unwrap();
        assert!(y.contains(d("2028-02-29")) && !y.contains(d("2027-03-01")));
        assert_eq!(
            ExcludeDate::parse("2026-05-01"),
            Ok(ExcludeDate::Date(d("2026-05-01")))
        );
        for bad in [
            "",
            "2026-5-1",
            "+2026-05-01",
            "--13-01",
            "--02-30",
            "--2-01",
            "2026-05-01..",
            "..2026-05-01",
            "2026-05-01..2026-05-01..2026-05-02",
            "2026-05-01T00:00:00Z",
        ] {
            assert!(ExcludeDate::parse(bad).is_err(), "{bad:?}");
        }
        let s = spec(sample());
        assert!(s.is_excluded(d("2026-12-25")));
        assert!(s.is_excluded(d("2031-01-01")));
        assert!(!s.is_excluded(d("2026-12-27")));
    }

    #[test]
    fn the_crd_explains_the_rules_and_shows_the_next_transition() {
        use kube::CustomResourceExt;
        let crd = Scaler::crd();
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1beta1");
        let cols = version
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        assert!(cols
            .iter()
            .any(|c| c.name == "Next" && c.json_path == ".status.nextTransitions[0].time"));
        let schema = serde_json::to_string(&version.schema).unwrap();
        for text in [
            "the highest replicas",
            "behaves as outside every window",
            "spring-forward gap",
            "\"override\"",
        ] {
            assert!(schema.contains(text), "{text} not in the schema");
        }
    }

    #[test]
    fn no_default_is_stored_in_a_list_item() {
        // A window without replicas or days, and a target without namespace, serialize as written.
        let v = json!({
            "scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "windows": [{"start": 9, "end": 17}]
        });
        assert_eq!(serde_json::to_value(spec(v.clone())).unwrap(), v);
    }
}
