//! Scaler `kubesteer.io/v1beta1`: several windows in one time zone, holidays, a temporary
//! override, any kind with a `/scale` subresource, and cooperation with HorizontalPodAutoscalers.
//!
//! Only the types live here: their validation, the parsing of `excludeDates` and what the spec
//! says (targets, windows, defaults) are in `v1beta1_impl.rs`; conversion from and to
//! v1alpha1 is in [`crate::scaler::convert`].

use chrono::NaiveDate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::{Day, ScaleJob, TimeOfDay, DEFAULT_REPLICAS, DEFAULT_TIME_ZONE};
use crate::field::{FieldError, FieldErrors};
use crate::rules::scaler::{
    API_VERSION, CLOCK, END_CLOCK, KIND, MAX_API_VERSION, MAX_DAYS, MAX_EXCLUDE_DATES, MAX_KIND,
    MAX_STATUS_TARGETS, MAX_TARGETS, MAX_TIME_ZONE, MAX_WINDOWS, MIN_DAYS, MIN_WINDOWS,
    NEXT_TRANSITIONS, SAME_START_AND_END,
};
use crate::rules::{MAX_GENERATION, MAX_INT32, MAX_LABEL, MAX_SUBDOMAIN, MIN_REPLICAS};
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

    /// Window mode: the windows in which the targets run at the window's replicas. When windows overlap, the highest replicas of the open windows wins. At most 20 windows. Cannot be combined with jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = MIN_WINDOWS, max = MAX_WINDOWS))]
    pub windows: Option<Vec<ScaleWindow>>,

    /// IANA time zone in which windows, days, excludeDates and job schedules are read, e.g. "Europe/Berlin". Defaults to UTC. Daylight saving time: a start or end in the spring-forward gap moves to the first instant after the gap; a start or end repeated by the fall-back overlap means its first occurrence; a window swallowed whole by a gap does not open that day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_TIME_ZONE))]
    pub time_zone: Option<String>,

    /// Days on which the Scaler behaves as outside every window (holidays), read in timeZone: a date "2026-12-24", an inclusive range "2026-12-24..2026-12-26", or a yearly date "--12-25"; at most 100 entries. A window that opened the day before an excluded day closes at midnight; in cron mode no job fires on an excluded day and the targets go to outsideReplicas. An override still applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_EXCLUDE_DATES), extend("x-kubernetes-list-type" = "set"))]
    pub exclude_dates: Option<Vec<String>>,

    /// More days to behave as on excludeDates, from an iCalendar file (RFC 5545) in a ConfigMap of the Scaler's namespace: every event is a holiday, all-day events on their dates (DTEND exclusive), timed ones on every day they touch in timeZone; recurring events (RRULE, RDATE, EXDATE) are expanded from 8 days back to 400 days ahead; cancelled events are skipped. Read again at least every 5 minutes. While it cannot be read, the Scaler writes nothing (Ready False, reason CalendarUnreadable). Its author must be allowed to get the ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_calendar: Option<crate::scaler::calendar::CalendarRef>,

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

    /// Sleep by a declared patch, one per kind, as kube-green's SleepInfo.patches: a target named in scaleTargetRefs of that kind is patched instead of scaled while its replicas would be 0, and given back exactly after (replicas of 1 or more mean awake). For kinds other than the apps/v1 workloads, CronJobs and Jobs, with or without /scale: a CloudNativePG Cluster (hibernation), an Argo CD Application (auto-sync off), any custom resource. Its author must be allowed to patch the target. At most 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::rules::scaler::MAX_PATCHES))]
    pub patches: Option<Vec<crate::scaler::patches::SleepPatch>>,
}

/// What a Scaler does with its targets outside every window.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct Outside {
    /// Release (the default): a closing window restores each target (to outsideReplicas when set), which is then left alone until the next window; a Scaler created, edited or resumed outside every window sets its targets to outsideReplicas at once, then leaves them alone likewise. Hold: while outside every window, a target found above outsideReplicas (a deploy, a GitOps sync, a person scaled it up) is set back to outsideReplicas once gracePeriod has passed since its creation or last pod template change, with an event naming who scaled it. Hold requires outsideReplicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<OutsideMode>,
    /// How long after a target's creation or last pod template change Hold leaves it alone (a rollout), as a duration such as "15m" or "1h30m". Defaults to 15m; at most 168h (7 days).
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

/// Whether the Scaler suspends this kind instead of scaling it ([`asleep_by`] says how): a target
/// without `/scale` that runs or not, put to sleep while its replicas would be 0 (its replicas
/// read as 0 asleep, 1 awake), recorded and restored like replicas.
pub fn suspended_instead(group: &str, resource: &str) -> bool {
    asleep_by(group, resource).is_some()
}

/// How a kind without `/scale` is put to sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asleep {
    /// `spec.suspend: true`: a `batch` CronJob (no new runs) or Job (its running pods deleted by
    /// the Job controller and made again on resume, the completions so far kept).
    Suspend,
    /// An `apps` DaemonSet: scheduled nowhere, by the node selector [`ASLEEP_LABEL`]`: "true"`
    /// that no node has, added to its pod template and removed again on waking (the template's
    /// other selectors untouched), as GoKubeDownscaler does.
    NodeSelector,
}

/// The node selector that puts a DaemonSet to sleep ([`Asleep::NodeSelector`]).
pub const ASLEEP_LABEL: &str = "kubesteer.io/asleep";

/// How the Scaler puts this kind to sleep, if it is one it suspends instead of scaling.
pub fn asleep_by(group: &str, resource: &str) -> Option<Asleep> {
    match (group, resource) {
        ("batch", "cronjobs" | "jobs") => Some(Asleep::Suspend),
        ("apps", "daemonsets") => Some(Asleep::NodeSelector),
        _ => None,
    }
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
    /// The pods, CPU and memory requests the targets did not run because of this Scaler (for a dry run, would not have): now, in total and per day. Absent until the Scaler first takes replicas away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savings: Option<crate::scaler::savings::Savings>,
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
