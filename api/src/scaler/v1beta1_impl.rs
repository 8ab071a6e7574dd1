//! Scaler `kubesteer.io/v1beta1`: what its types do, apart from the types themselves
//! (`v1beta1.rs`): the parsing of `excludeDates`, the spec's validation with field paths,
//! and the reads the controller, the webhook and the plugin share (targets, windows, defaults).
use super::v1beta1::*;
use std::collections::BTreeSet;

use chrono::{Datelike, NaiveDate};
use chrono_tz::Tz;

use super::DEFAULT_TIME_ZONE;
use crate::field::{FieldError, FieldErrors, Index, Sub};
use crate::rules::scaler::{
    MAX_EXCLUDE_DATE, MAX_EXCLUDE_DATES, MAX_TARGETS, MAX_TIME_ZONE, MAX_WINDOWS, MIN_DAYS,
    MIN_TARGETS, MIN_WINDOWS,
};
use crate::rules::{check_length, check_name, MIN_REPLICAS};
use crate::scaler::schedule::Instant;

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

    /// The declared sleep patch for `group`/`kind` (`spec.patches`), if any.
    pub fn patch_for(
        &self,
        group: &str,
        kind: &str,
    ) -> Option<&crate::scaler::patches::SleepPatch> {
        self.patches
            .iter()
            .flatten()
            .find(|p| p.is_for(group, kind))
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
        if let Some(patches) = &self.patches {
            crate::scaler::patches::validate(&mut errors, patches);
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

impl Asleep {
    /// The spec part of a merge patch that puts the object to sleep (`asleep`) or wakes it.
    pub fn spec_patch(self, asleep: bool) -> serde_json::Value {
        match self {
            Asleep::Suspend => serde_json::json!({ "suspend": asleep }),
            Asleep::NodeSelector => {
                let value = asleep.then_some("true");
                serde_json::json!({"template": {"spec": {"nodeSelector": { super::v1beta1::ASLEEP_LABEL: value }}}})
            }
        }
    }

    /// Whether an object's `spec` says it is asleep.
    pub fn is_asleep(self, spec: &serde_json::Value) -> bool {
        match self {
            Asleep::Suspend => spec["suspend"].as_bool().unwrap_or(false),
            Asleep::NodeSelector => {
                spec["template"]["spec"]["nodeSelector"][super::v1beta1::ASLEEP_LABEL].as_str()
                    == Some("true")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    #[test]
    fn a_sleeping_kind_is_put_to_sleep_and_woken_by_a_merge_patch_that_touches_only_its_field() {
        use super::super::v1beta1::{asleep_by, Asleep};
        assert_eq!(asleep_by("batch", "jobs"), Some(Asleep::Suspend));
        assert_eq!(asleep_by("apps", "daemonsets"), Some(Asleep::NodeSelector));
        assert_eq!(asleep_by("apps", "deployments"), None);
        let spec = serde_json::json!({"template": {"spec": {"nodeSelector": {"disk": "ssd"}}}, "suspend": false});
        for asleep in [Asleep::Suspend, Asleep::NodeSelector] {
            let mut object = serde_json::json!({"spec": spec.clone()});
            assert!(!asleep.is_asleep(&object["spec"]));
            json_patch::merge(
                &mut object,
                &serde_json::json!({"spec": asleep.spec_patch(true)}),
            );
            assert!(asleep.is_asleep(&object["spec"]), "{asleep:?}: {object}");
            json_patch::merge(
                &mut object,
                &serde_json::json!({"spec": asleep.spec_patch(false)}),
            );
            assert!(!asleep.is_asleep(&object["spec"]));
            // Awake again as it was: the other node selectors untouched.
            assert_eq!(object["spec"]["template"], spec["template"], "{asleep:?}");
        }
    }

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
