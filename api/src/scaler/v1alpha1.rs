//! Scaler: scales Deployments on a schedule, either a daily window or cron jobs.
use std::collections::BTreeSet;

use chrono::Weekday;
use chrono_tz::Tz;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{job_error, parse_time_zone};
pub use super::{Day, ScaleJob, TimeOfDay, DEFAULT_REPLICAS, DEFAULT_TIME_ZONE};
use crate::field::{FieldError, FieldErrors};
use crate::rules::scaler::{
    CLOCK, END_CLOCK, MAX_DAYS, MAX_JOBS, MAX_TARGETS, MAX_TIME_ZONE, MIN_DAYS, MIN_JOBS,
    MIN_TARGETS,
};
use crate::rules::{check_name, MAX_GENERATION, MAX_INT32, MAX_LABEL, MAX_SUBDOMAIN, MIN_REPLICAS};
use crate::scaler::schedule::{CronSchedule, Window, WindowEnd};

/// Scales Deployments on a schedule: a daily window (start, end, replicas) or cron jobs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kubesteer.io",
    version = "v1alpha1",
    kind = "Scaler",
    namespaced,
    status = "ScalerStatus",
    shortname = "scl",
    category = "kubesteer",
    doc = "Scaler scales Deployments on a schedule: during a daily window, or at cron firings.",
    printcolumn = r#"{"name":"Start","type":"string","jsonPath":".spec.start","description":"When the window opens"}"#,
    printcolumn = r#"{"name":"End","type":"string","jsonPath":".spec.end","description":"When the window closes"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas","description":"Replicas inside the window"}"#,
    printcolumn = r#"{"name":"TimeZone","type":"string","jsonPath":".spec.timeZone","description":"IANA time zone of the schedule"}"#,
    printcolumn = r#"{"name":"Active","type":"boolean","jsonPath":".status.active","description":"Whether the Scaler is scaling its targets now"}"#,
    printcolumn = r#"{"name":"Next","type":"string","jsonPath":".status.nextTransition","description":"When the next transition happens"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("!has(self.jobs) || (!has(self.start) && !has(self.end) && !has(self.replicas))").message("jobs cannot be combined with start, end or replicas"))]
#[x_kube(validation = Rule::new("has(self.jobs) || (has(self.start) && has(self.end))").message("either start and end (window mode) or jobs (cron mode) is required"))]
#[x_kube(validation = Rule::new(crate::rules::scaler::start_differs_from_end_rule()).message(crate::rules::scaler::SAME_START_AND_END).field_path(".end"))]
#[serde(rename_all = "camelCase")]
pub struct ScalerSpec {
    /// The Deployments to scale: 1-50 entries, no duplicates. A missing namespace means the Scaler's own; it is resolved when read and shown in status.targets, never written into the entry.
    #[schemars(length(min = MIN_TARGETS, max = MAX_TARGETS))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, a.name == b.name && (has(a.__namespace__) ? a.__namespace__ : '') == (has(b.__namespace__) ? b.__namespace__ : '')))").message("must not contain duplicates"))]
    pub deployments: Vec<ScaleTarget>,

    /// When the window opens (window mode): an hour 0-23, or "HH:MM", in timeZone. Inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::time_of_day_schema")]
    pub start: Option<TimeOfDay>,

    /// When the window closes (window mode): an hour 0-24, or "HH:MM", in timeZone. Exclusive; earlier than start means the window crosses midnight, and "24:00" (or 24) is the end of the day it opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::end_of_window_schema")]
    pub end: Option<TimeOfDay>,

    /// Replicas for every target while the window is open (window mode). Defaults to 1; 0 is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub replicas: Option<i32>,

    /// The weekdays on which the window opens (Mon..Sun). A window that crosses midnight belongs to the day it opened. Every day when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = MIN_DAYS, max = MAX_DAYS), extend("x-kubernetes-list-type" = "set"))]
    pub days: Option<Vec<Day>>,

    /// IANA time zone in which start, end, days and schedules are read, e.g. "Europe/Berlin". Defaults to UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_TIME_ZONE))]
    pub time_zone: Option<String>,

    /// Replicas for every target outside the window. When absent, targets go back to the replicas they had before the window opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub outside_replicas: Option<i32>,

    /// Cron mode: at each firing of a job, the targets go to that job's replicas. Cannot be combined with start, end or replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = MIN_JOBS, max = MAX_JOBS), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub jobs: Option<Vec<ScaleJob>>,

    /// Stops all scaling while true; targets are left as they are, but one removed from deployments is still given back. Defaults to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
}

/// A Deployment that a Scaler scales.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema, Default,
)]
pub struct ScaleTarget {
    /// Name of the Deployment.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), regex(pattern = crate::rules::DNS1123_SUBDOMAIN.regex))]
    pub name: String,
    /// Namespace of the Deployment. When absent, the Scaler's own namespace (resolved when read, not stored; status.targets shows it); another namespace needs permission to scale Deployments there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_LABEL), regex(pattern = crate::rules::DNS1123_LABEL.regex))]
    pub namespace: Option<String>,
}

/// What a Scaler reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScalerStatus {
    /// Whether the Scaler is scaling its targets now (inside the window, or after a cron firing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    /// When the next transition (window opening or closing, or cron firing) happens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_transition: Option<Time>,
    /// When the last transition happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition: Option<Time>,
    /// Each target as last seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetStatus>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// Standard conditions; Ready is False with reason TargetNotFound when a target is missing, or Conflict when an older Scaler claims one of the targets (the Scaler leaves that one alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// One target as the Scaler last saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    /// Name of the Deployment.
    pub name: String,
    /// Namespace of the Deployment.
    pub namespace: String,
    /// The Deployment's replicas as last set or seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub replicas: Option<i32>,
    /// The replicas recorded when the window opened, restored when it closes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub original_replicas: Option<i32>,
}

/// The schedule of a Scaler, parsed.
#[derive(Debug, Clone)]
pub enum Schedule {
    Window {
        window: Window,
        replicas: i32,
        outside_replicas: Option<i32>,
    },
    Cron {
        jobs: CronSchedule,
        outside_replicas: Option<i32>,
    },
}

impl ScalerSpec {
    /// Whether the spec is in cron mode.
    pub fn is_cron(&self) -> bool {
        self.jobs.is_some()
    }

    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(DEFAULT_REPLICAS)
    }

    pub fn time_zone(&self) -> &str {
        self.time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE)
    }

    pub fn suspend(&self) -> bool {
        self.suspend.unwrap_or(false)
    }

    /// Each target as `(namespace, name)`, its namespace resolved: a missing one is the
    /// Scaler's own, `own_namespace`. The one place that resolves it, for the webhook (claims,
    /// permissions) and the controller alike; it is never stored (see [`Self::defaulted`]).
    pub fn targets<'a>(
        &'a self,
        own_namespace: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.deployments.iter().map(move |t| {
            (
                t.namespace.as_deref().unwrap_or(own_namespace),
                t.name.as_str(),
            )
        })
    }

    /// Targets that name a Deployment an earlier entry names too once namespaces are resolved
    /// (`{name: web}` and `{name: web, namespace: <own>}`), which [`Self::validate`] and the
    /// schema cannot see, as neither knows the Scaler's namespace.
    pub fn duplicate_targets(&self, own_namespace: &str) -> FieldErrors {
        let mut seen = BTreeSet::new();
        let mut errors = FieldErrors::new();
        for (i, (t, target)) in self
            .deployments
            .iter()
            .zip(self.targets(own_namespace))
            .enumerate()
        {
            if !seen.insert(target) {
                errors.push(FieldError::duplicate(
                    format!("spec.deployments[{i}]"),
                    serde_json::to_value(t).unwrap_or_default(),
                ));
            }
        }
        errors
    }

    /// The spec with every default filled in. Only top-level fields get defaults: a target's
    /// namespace is resolved when read ([`Self::targets`]), never stored in the list item,
    /// where it would make every client-side re-apply of the same file a change.
    pub fn defaulted(&self) -> Self {
        let mut spec = self.clone();
        if !spec.is_cron() {
            spec.replicas.get_or_insert(DEFAULT_REPLICAS);
        }
        spec.time_zone
            .get_or_insert_with(|| DEFAULT_TIME_ZONE.to_string());
        spec.suspend.get_or_insert(false);
        spec
    }

    /// The parsed schedule, or the field errors that prevent it.
    pub fn schedule(&self) -> Result<Schedule, FieldErrors> {
        let mut errors = FieldErrors::new();
        let tz = self.parsed_time_zone(&mut errors);
        let schedule = if let Some(jobs) = &self.jobs {
            let tuples = jobs
                .iter()
                .map(|j| (j.name.as_str(), j.schedule.as_str(), j.replicas));
            match (tz, CronSchedule::new(tuples, tz.unwrap_or(Tz::UTC))) {
                (Some(_), Ok(jobs)) => Some(Schedule::Cron {
                    jobs,
                    outside_replicas: self.outside_replicas,
                }),
                (_, Err(e)) => {
                    errors.push(job_error(jobs, e));
                    None
                }
                _ => None,
            }
        } else {
            let start = time_of_day(&mut errors, "spec.start", self.start.as_ref(), |t| {
                t.to_time().ok_or(CLOCK.message)
            });
            let end = time_of_day(&mut errors, "spec.end", self.end.as_ref(), |t| {
                t.to_end().ok_or(END_CLOCK.message)
            });
            match (start, end, tz) {
                (Some(s), Some(e), _) if WindowEnd::At(s) == e => {
                    errors.push(FieldError::invalid(
                        "spec.end",
                        self.end
                            .as_ref()
                            .map(TimeOfDay::as_json)
                            .unwrap_or_default(),
                        crate::rules::scaler::SAME_START_AND_END,
                    ));
                    None
                }
                (Some(s), Some(e), Some(tz)) => {
                    let days: Option<Vec<Weekday>> = self
                        .days
                        .as_ref()
                        .map(|d| d.iter().map(|&d| d.into()).collect());
                    match Window::new(s, e, days.as_deref(), tz) {
                        Ok(window) => Some(Schedule::Window {
                            window,
                            replicas: self.replicas(),
                            outside_replicas: self.outside_replicas,
                        }),
                        Err(err) => {
                            errors.push(FieldError::invalid(
                                "spec",
                                serde_json::Value::Null,
                                err.to_string(),
                            ));
                            None
                        }
                    }
                }
                _ => None,
            }
        };
        match schedule {
            Some(s) if errors.is_empty() => Ok(s),
            _ => Err(errors),
        }
    }

    fn parsed_time_zone(&self, errors: &mut FieldErrors) -> Option<Tz> {
        parse_time_zone(self.time_zone(), errors)
    }

    /// Every violation of the field rules, each with its path.
    pub fn validate(&self) -> FieldErrors {
        let mut errors = FieldErrors::new();
        if self.deployments.len() < MIN_TARGETS {
            errors.push(FieldError::required(
                "spec.deployments",
                "must name at least one Deployment",
            ));
        } else if self.deployments.len() > MAX_TARGETS {
            errors.push(FieldError::too_many(
                "spec.deployments",
                self.deployments.len(),
                MAX_TARGETS,
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, t) in self.deployments.iter().enumerate() {
            let path = format!("spec.deployments[{i}]");
            check_name(&mut errors, format!("{path}.name"), &t.name, false);
            if let Some(ns) = &t.namespace {
                check_name(&mut errors, format!("{path}.namespace"), ns, true);
            }
            if !seen.insert((t.namespace.as_deref(), t.name.as_str())) {
                errors.push(FieldError::duplicate(
                    path,
                    serde_json::to_value(t).unwrap_or_default(),
                ));
            }
        }
        for (path, value) in [
            ("spec.replicas", self.replicas),
            ("spec.outsideReplicas", self.outside_replicas),
        ] {
            if let Some(v) = value.filter(|v| *v < MIN_REPLICAS) {
                errors.push(FieldError::invalid(
                    path,
                    v,
                    format!("must be greater than or equal to {MIN_REPLICAS}"),
                ));
            }
        }
        if let Some(days) = &self.days {
            if days.len() < MIN_DAYS {
                errors.push(FieldError::invalid(
                    "spec.days",
                    serde_json::json!([]),
                    "must name at least one day when given",
                ));
            } else if days.len() > MAX_DAYS {
                errors.push(FieldError::too_many("spec.days", days.len(), MAX_DAYS));
            }
            let mut seen = BTreeSet::new();
            for (i, d) in days.iter().enumerate() {
                if !seen.insert(d) {
                    errors.push(FieldError::duplicate(
                        format!("spec.days[{i}]"),
                        serde_json::to_value(d).unwrap_or_default(),
                    ));
                }
            }
        }
        if let Some(jobs) = &self.jobs {
            for (field, set) in [
                ("spec.start", self.start.is_some()),
                ("spec.end", self.end.is_some()),
                ("spec.replicas", self.replicas.is_some()),
            ] {
                if set {
                    errors.push(FieldError::forbidden(
                        field,
                        "may not be combined with spec.jobs",
                    ));
                }
            }
            super::validate_jobs(jobs, &mut errors);
            self.parsed_time_zone(&mut errors);
        } else if let Err(schedule_errors) = self.schedule() {
            errors.extend(schedule_errors);
        }
        errors
    }
}

/// `value` read by `parse` (a start or an end), or None after pushing why not: missing, or
/// `parse`'s message.
fn time_of_day<T>(
    errors: &mut FieldErrors,
    path: &str,
    value: Option<&TimeOfDay>,
    parse: impl Fn(&TimeOfDay) -> Result<T, &'static str>,
) -> Option<T> {
    let Some(v) = value else {
        errors.push(FieldError::required(
            path,
            "start and end are required unless jobs are given",
        ));
        return None;
    };
    parse(v)
        .map_err(|message| errors.push(FieldError::invalid(path, v.as_json(), message)))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ScalerSpec {
        serde_json::from_value(v).unwrap()
    }

    fn messages(s: &ScalerSpec) -> Vec<String> {
        s.validate().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_seed_style_window_is_valid() {
        let s =
            spec(json!({"deployments": [{"name": "web"}], "start": 9, "end": 17, "replicas": 3}));
        assert_eq!(messages(&s), Vec::<String>::new());
        let s = spec(
            json!({"deployments": [{"name": "web"}], "start": "22:30", "end": "06:00", "days": ["Fri"], "timeZone": "Asia/Shanghai"}),
        );
        assert_eq!(messages(&s), Vec::<String>::new());
    }

    #[test]
    fn every_violation_is_reported_with_its_path() {
        let s = spec(json!({
            "deployments": [{"name": "Web"}, {"name": "a", "namespace": "x"}, {"name": "a", "namespace": "x"}],
            "start": 25, "end": "7:00", "replicas": -1, "timeZone": "Mars/Olympus"
        }));
        let m = messages(&s);
        assert!(
            m.contains(
                &"spec.start: Invalid value: 25: must be an hour 0-23 or \"HH:MM\"".to_string()
            ),
            "{m:?}"
        );
        assert!(
            m.contains(
                &"spec.end: Invalid value: \"7:00\": must be an hour 0-24 or \"HH:MM\" (\"24:00\": the end of the day)".to_string()
            ),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|e| e.starts_with("spec.deployments[0].name: Invalid value: \"Web\"")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|e| e.starts_with("spec.deployments[2]: Duplicate value")),
            "{m:?}"
        );
        assert!(
            m.contains(
                &"spec.replicas: Invalid value: -1: must be greater than or equal to 0".to_string()
            ),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|e| e.starts_with("spec.timeZone: Invalid value: \"Mars/Olympus\"")),
            "{m:?}"
        );
    }

    #[test]
    fn start_equal_to_end_is_rejected() {
        let s = spec(json!({"deployments": [{"name": "web"}], "start": 9, "end": "09:00"}));
        assert_eq!(
            messages(&s),
            vec!["spec.end: Invalid value: \"09:00\": must differ from spec.start"]
        );
    }

    #[test]
    fn modes_are_exclusive_and_one_is_required() {
        let s = spec(
            json!({"deployments": [{"name": "web"}], "start": 1, "replicas": 2,
            "jobs": [{"name": "a", "schedule": "@hourly", "replicas": 1}]}),
        );
        let m = messages(&s);
        assert!(
            m.contains(&"spec.start: Forbidden: may not be combined with spec.jobs".to_string()),
            "{m:?}"
        );
        assert!(
            m.contains(&"spec.replicas: Forbidden: may not be combined with spec.jobs".to_string()),
            "{m:?}"
        );
        let s = spec(json!({"deployments": [{"name": "web"}]}));
        let m = messages(&s);
        assert!(
            m.iter()
                .any(|e| e.starts_with("spec.start: Required value")),
            "{m:?}"
        );
        assert!(
            m.iter().any(|e| e.starts_with("spec.end: Required value")),
            "{m:?}"
        );
    }

    #[test]
    fn jobs_are_checked_one_by_one() {
        let s = spec(json!({"deployments": [{"name": "web"}], "jobs": [
            {"name": "a", "schedule": "0 9 * * 1-5", "replicas": 3},
            {"name": "a", "schedule": "not cron", "replicas": -2},
        ]}));
        let m = messages(&s);
        assert!(
            m.contains(&"spec.jobs[1].name: Duplicate value: \"a\"".to_string()),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|e| e.starts_with("spec.jobs[1].schedule: Invalid value: \"not cron\"")),
            "{m:?}"
        );
        assert!(
            m.contains(
                &"spec.jobs[1].replicas: Invalid value: -2: must be greater than or equal to 0"
                    .to_string()
            ),
            "{m:?}"
        );
        assert_eq!(m.len(), 3, "{m:?}");
    }

    #[test]
    fn a_never_firing_schedule_is_rejected_with_its_path() {
        let s = spec(json!({"deployments": [{"name": "web"}], "jobs": [
            {"name": "ok", "schedule": "@daily", "replicas": 1},
            {"name": "feb30", "schedule": "0 0 30 2 *", "replicas": 1},
        ]}));
        let want =
            "spec.jobs[1].schedule: Invalid value: \"0 0 30 2 *\": never fires within 5 years";
        assert_eq!(messages(&s), vec![want]);
        // The controller reads stored objects through schedule(), which reports the same.
        let errors = s.schedule().unwrap_err();
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![want]
        );
    }

    #[test]
    fn defaults_fill_only_what_is_missing() {
        let s = spec(
            json!({"deployments": [{"name": "web"}, {"name": "api", "namespace": "other"}], "start": 9, "end": 17}),
        );
        let d = s.defaulted();
        assert_eq!(d.deployments, s.deployments, "targets are never defaulted");
        assert_eq!(d.replicas, Some(1));
        assert_eq!(d.time_zone.as_deref(), Some("UTC"));
        assert_eq!(d.suspend, Some(false));
        assert_eq!(d.defaulted(), d);
        let cron = spec(
            json!({"deployments": [{"name": "web"}], "jobs": [{"name": "a", "schedule": "@daily", "replicas": 1}]}),
        );
        assert_eq!(
            cron.defaulted().replicas,
            None,
            "cron mode must not get a window default"
        );
    }

    #[test]
    fn a_target_namespace_is_resolved_when_read_not_stored() {
        // The fuzz target once found a review without a namespace storing `namespace: ""`; no
        // default goes into a target any more, so neither that nor GitOps drift can happen.
        let s = spec(
            json!({"deployments": [{"name": "web"}, {"name": "api", "namespace": "other"}], "start": 9, "end": 17}),
        );
        let d = s.defaulted();
        assert_eq!(d.deployments[0].namespace, None);
        assert!(d.validate().is_empty(), "{:?}", d.validate());
        assert_eq!(
            d.targets("team").collect::<Vec<_>>(),
            vec![("team", "web"), ("other", "api")]
        );
        assert_eq!(d.targets("").next(), Some(("", "web")));
    }

    #[test]
    fn targets_that_resolve_to_one_deployment_are_duplicates() {
        let s = spec(json!({"deployments": [
            {"name": "web"}, {"name": "web", "namespace": "team"}, {"name": "web", "namespace": "prod"}
        ], "start": 9, "end": 17}));
        assert!(s.validate().is_empty(), "the schema cannot tell");
        let m: Vec<String> = s
            .duplicate_targets("team")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            m,
            vec!["spec.deployments[1]: Duplicate value: {\"name\":\"web\",\"namespace\":\"team\"}"]
        );
        assert!(s.duplicate_targets("prod").len() == 1);
        assert!(s.duplicate_targets("elsewhere").is_empty());
    }

    #[test]
    fn time_of_day_parses_both_forms() {
        use chrono::NaiveTime;
        assert_eq!(
            TimeOfDay::Hour(23).to_time(),
            NaiveTime::from_hms_opt(23, 0, 0)
        );
        assert_eq!(TimeOfDay::Hour(24).to_time(), None);
        assert_eq!(TimeOfDay::Hour(-1).to_time(), None);
        assert_eq!(
            TimeOfDay::Clock("07:45".into()).to_time(),
            NaiveTime::from_hms_opt(7, 45, 0)
        );
        for bad in ["7:45", "24:00", "12:60", "ab:cd", "1200", "+1:00"] {
            assert_eq!(TimeOfDay::Clock(bad.into()).to_time(), None, "{bad}");
        }
    }

    #[test]
    fn an_end_may_be_the_end_of_the_day_and_a_start_may_not() {
        use chrono::NaiveTime;
        for end in [TimeOfDay::Hour(24), TimeOfDay::Clock("24:00".into())] {
            assert_eq!(end.to_end(), Some(WindowEnd::EndOfDay), "{end:?}");
        }
        assert_eq!(
            TimeOfDay::Clock("23:59".into()).to_end(),
            NaiveTime::from_hms_opt(23, 59, 0).map(WindowEnd::At)
        );
        for bad in [TimeOfDay::Hour(25), TimeOfDay::Clock("24:01".into())] {
            assert_eq!(bad.to_end(), None, "{bad:?}");
        }
        let spec = |start: &str, end: &str| -> ScalerSpec {
            serde_json::from_value(serde_json::json!({
                "deployments": [{"name": "web"}], "start": start, "end": end
            }))
            .unwrap()
        };
        assert!(spec("00:00", "24:00").schedule().is_ok());
        let errors = spec("24:00", "08:00").schedule().err().unwrap_or_default();
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            ["spec.start: Invalid value: \"24:00\": must be an hour 0-23 or \"HH:MM\""]
        );
    }
}
