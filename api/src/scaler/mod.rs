//! The Scaler: its two versions, conversion between them, and what the webhook and the
//! controller compute from it.
//!
//! - [`v1beta1`]: the stored version, the one both binaries read (re-exported as
//!   [`crate::Scaler`]); [`v1alpha1`]: the tutorial's version, served only at the API edge.
//! - [`convert`]: lossless conversion both ways, for the webhook's `/convert`.
//! - [`schedule`]: windows, cron and holidays as instants; [`plan`]: a Scaler's week, the
//!   replicas each target should have when.
//! - [`patches`]: kinds without `/scale` put to sleep by a declared patch, given back exactly.
//! - [`savings`]: the pods, CPU and memory a Scaler's targets did not run because of it.
//! - [`selector`]: targets picked by kind, labels and namespaces; [`claims`]: which of several
//!   Scalers owns a shared target (the index both binaries keep); [`target`]: a target's one
//!   identity.
pub mod calendar;
pub mod claims;
pub mod convert;
pub mod patches;
pub mod plan;
pub mod savings;
pub mod schedule;
pub mod selector;
pub mod target;
pub mod v1alpha1;
pub mod v1beta1;
mod v1beta1_impl;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{NaiveTime, Weekday};
use chrono_tz::Tz;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field::{FieldError, FieldErrors};
use crate::keys::annotation::{ORIGINAL_REPLICAS, ORIGINAL_REPLICAS_OWNER};
use crate::rules::scaler::{
    end_of_window_rule, time_of_day_rule, CLOCK, END_CLOCK, END_OF_DAY_HOUR, MAX_CLOCK, MAX_HOUR,
    MAX_JOBS, MAX_JOB_NAME, MAX_SCHEDULE, MAX_TIME_ZONE, MIN_JOBS,
};
use crate::rules::{check_length, MAX_INT32, MIN_REPLICAS};
use schedule::ScheduleError;

/// Replicas inside the window when `replicas` is not given.
pub const DEFAULT_REPLICAS: i32 = 1;
/// The time zone when `timeZone` is not given.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// A cron job of a Scaler in cron mode.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
pub struct ScaleJob {
    /// Name of the job, unique within the Scaler.
    #[schemars(length(min = 1, max = MAX_JOB_NAME))]
    pub name: String,
    /// Standard 5-field cron expression ("0 9 * * 1-5") or a macro such as "@hourly", read in timeZone.
    #[schemars(length(min = 1, max = MAX_SCHEDULE))]
    pub schedule: String,
    /// Replicas for every target from this job's firing until the next firing.
    #[schemars(range(min = MIN_REPLICAS, max = MAX_INT32))]
    pub replicas: i32,
}

/// A weekday.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl From<Day> for Weekday {
    fn from(d: Day) -> Self {
        match d {
            Day::Mon => Weekday::Mon,
            Day::Tue => Weekday::Tue,
            Day::Wed => Weekday::Wed,
            Day::Thu => Weekday::Thu,
            Day::Fri => Weekday::Fri,
            Day::Sat => Weekday::Sat,
            Day::Sun => Weekday::Sun,
        }
    }
}

/// The schema of a window's `start` (both versions): an hour or "HH:MM".
fn time_of_day_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "maxLength": MAX_CLOCK,
        "x-kubernetes-validations": [{
            "rule": time_of_day_rule(),
            "message": CLOCK.message,
        }],
    })
}

/// The schema of a window's `end` (both versions): as `start`'s, or the end of the day.
fn end_of_window_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "maxLength": MAX_CLOCK,
        "x-kubernetes-validations": [{
            "rule": end_of_window_rule(),
            "message": END_CLOCK.message,
        }],
    })
}

/// A time of day: an hour 0-23 (as in the seed operator) or an "HH:MM" string; a window's end
/// may also be 24 or "24:00", the end of the day ([`TimeOfDay::to_end`]).
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum TimeOfDay {
    Hour(i64),
    Clock(String),
}

/// Read as `#[serde(untagged)]` reads it (an integer that fits an i64 is an hour, a string a
/// clock, anything else the untagged enum's error), without buffering the value and building,
/// then dropping, the error of the variant that does not match: an "HH:MM" string cost an
/// `invalid type` message per window end in every review.
impl<'de> Deserialize<'de> for TimeOfDay {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TimeOfDayVisitor)
    }
}

/// The error `#[serde(untagged)]` gives when no variant matches.
const NO_TIME_OF_DAY: &str = "data did not match any variant of untagged enum TimeOfDay";

struct TimeOfDayVisitor;

impl<'de> serde::de::Visitor<'de> for TimeOfDayVisitor {
    type Value = TimeOfDay;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an hour or an \"HH:MM\" string")
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<TimeOfDay, E> {
        Ok(TimeOfDay::Hour(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<TimeOfDay, E> {
        i64::try_from(v)
            .map(TimeOfDay::Hour)
            .map_err(|_| E::custom(NO_TIME_OF_DAY))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TimeOfDay, E> {
        Ok(TimeOfDay::Clock(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<TimeOfDay, E> {
        Ok(TimeOfDay::Clock(v))
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<TimeOfDay, E> {
        std::str::from_utf8(v)
            .map(|s| TimeOfDay::Clock(s.to_owned()))
            .map_err(|_| E::custom(NO_TIME_OF_DAY))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<TimeOfDay, E> {
        Err(E::custom(NO_TIME_OF_DAY))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<TimeOfDay, E> {
        Err(E::custom(NO_TIME_OF_DAY))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<TimeOfDay, E> {
        Err(E::custom(NO_TIME_OF_DAY))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<TimeOfDay, E> {
        Err(E::custom(NO_TIME_OF_DAY))
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, _: D) -> Result<TimeOfDay, D::Error> {
        Err(serde::de::Error::custom(NO_TIME_OF_DAY))
    }

    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
        self,
        _: D,
    ) -> Result<TimeOfDay, D::Error> {
        Err(serde::de::Error::custom(NO_TIME_OF_DAY))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<TimeOfDay, A::Error> {
        Err(serde::de::Error::custom(NO_TIME_OF_DAY))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<TimeOfDay, A::Error> {
        Err(serde::de::Error::custom(NO_TIME_OF_DAY))
    }

    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, _: A) -> Result<TimeOfDay, A::Error> {
        Err(serde::de::Error::custom(NO_TIME_OF_DAY))
    }
}

impl TimeOfDay {
    /// The time of day, or None when the value is out of range or malformed.
    pub fn to_time(&self) -> Option<NaiveTime> {
        match self {
            TimeOfDay::Hour(h) => u32::try_from(*h)
                .ok()
                .filter(|h| i64::from(*h) <= MAX_HOUR)
                .and_then(|h| NaiveTime::from_hms_opt(h, 0, 0)),
            TimeOfDay::Clock(s) => {
                if !CLOCK.is_match(s) {
                    return None;
                }
                let (h, m) = s.split_once(':')?;
                NaiveTime::from_hms_opt(h.parse().ok()?, m.parse().ok()?, 0)
            }
        }
    }

    /// As a window's end: a time of day, or the end of the day (24, "24:00"); None when the value
    /// is out of range or malformed.
    pub fn to_end(&self) -> Option<schedule::WindowEnd> {
        match self {
            TimeOfDay::Hour(END_OF_DAY_HOUR) => Some(schedule::WindowEnd::EndOfDay),
            TimeOfDay::Clock(s) if END_CLOCK.is_match(s) && !CLOCK.is_match(s) => {
                Some(schedule::WindowEnd::EndOfDay)
            }
            _ => self.to_time().map(schedule::WindowEnd::At),
        }
    }

    pub(crate) fn as_json(&self) -> serde_json::Value {
        match self {
            TimeOfDay::Hour(h) => (*h).into(),
            TimeOfDay::Clock(s) => s.clone().into(),
        }
    }
}

/// How a Scaler names itself in [`ORIGINAL_REPLICAS_OWNER`].
pub fn scaler_id(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Whose record of the original replicas a target carries, as the Scaler `me` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// No record: the target is not scaled by any Scaler.
    Absent,
    /// The record of `me`, with the replicas to restore (None when unreadable). A record without
    /// an owner was written before owners were recorded; the Scaler that targets it adopts it.
    Mine {
        replicas: Option<i32>,
        owner_recorded: bool,
    },
    /// The record of another Scaler, named as `namespace/name`.
    Other(String),
}

impl Record {
    /// The record in a target's `annotations`, as seen by the Scaler named `me` ([`scaler_id`]).
    pub fn of(annotations: &BTreeMap<String, String>, me: &str) -> Self {
        Self::kept_in(annotations, ORIGINAL_REPLICAS, me)
    }

    /// The record kept under the annotation `key` (with [`ORIGINAL_REPLICAS_OWNER`]), e.g. an
    /// HPA's original minReplicas. Annotations are anyone's to edit who may edit the target, so
    /// a value that is no count of replicas (not a number, negative) reads as unreadable: the
    /// target is then released as it is rather than written a value the apiserver refuses.
    pub fn kept_in(annotations: &BTreeMap<String, String>, key: &str, me: &str) -> Self {
        let replicas = annotations.get(key);
        let count = |v: &String| v.trim().parse::<i32>().ok().filter(|r| *r >= 0);
        match annotations.get(ORIGINAL_REPLICAS_OWNER) {
            Some(owner) if owner != me => Record::Other(owner.clone()),
            Some(_) => Record::Mine {
                replicas: replicas.and_then(count),
                owner_recorded: true,
            },
            None => match replicas {
                Some(v) => Record::Mine {
                    replicas: count(v),
                    owner_recorded: false,
                },
                None => Record::Absent,
            },
        }
    }
}

/// The time zone named by `spec.timeZone`, or None with the error on that path.
pub(crate) fn parse_time_zone(name: &str, errors: &mut FieldErrors) -> Option<Tz> {
    if name.chars().count() > MAX_TIME_ZONE {
        check_length(errors, "spec.timeZone", name, 1, MAX_TIME_ZONE);
        return None;
    }
    match name.parse::<Tz>() {
        Ok(tz) => Some(tz),
        Err(_) => {
            errors.push(FieldError::invalid(
                "spec.timeZone",
                name,
                "must be an IANA time zone name such as \"Europe/Berlin\"",
            ));
            None
        }
    }
}

/// A cron error on the path of the job it names, as validation reports it.
pub(crate) fn job_error(jobs: &[ScaleJob], e: ScheduleError) -> FieldError {
    if let ScheduleError::InvalidCron { job, reason } = &e {
        if let Some((i, j)) = jobs.iter().enumerate().find(|(_, j)| &j.name == job) {
            return FieldError::invalid(
                format!("spec.jobs[{i}].schedule"),
                j.schedule.as_str(),
                reason.as_str(),
            );
        }
    }
    FieldError::invalid("spec.jobs", serde_json::Value::Null, e.to_string())
}

/// The checks of `spec.jobs` both versions make, each on its path.
pub(crate) fn validate_jobs(jobs: &[ScaleJob], errors: &mut FieldErrors) {
    if jobs.len() < MIN_JOBS {
        errors.push(FieldError::required(
            "spec.jobs",
            "must have at least one job when given",
        ));
    } else if jobs.len() > MAX_JOBS {
        errors.push(FieldError::too_many("spec.jobs", jobs.len(), MAX_JOBS));
    }
    let mut names = BTreeSet::new();
    for (i, j) in jobs.iter().enumerate() {
        let path = format!("spec.jobs[{i}]");
        if j.name.is_empty() {
            errors.push(FieldError::required(format!("{path}.name"), ""));
        } else if j.name.chars().count() > MAX_JOB_NAME {
            check_length(errors, format!("{path}.name"), &j.name, 1, MAX_JOB_NAME);
        } else if !names.insert(j.name.as_str()) {
            errors.push(FieldError::duplicate(
                format!("{path}.name"),
                j.name.as_str(),
            ));
        }
        if j.schedule.chars().count() > MAX_SCHEDULE {
            check_length(
                errors,
                format!("{path}.schedule"),
                &j.schedule,
                1,
                MAX_SCHEDULE,
            );
        } else if let Err(e) = schedule::parse_cron(&j.schedule) {
            errors.push(FieldError::invalid(
                format!("{path}.schedule"),
                j.schedule.as_str(),
                e,
            ));
        }
        if j.replicas < MIN_REPLICAS {
            errors.push(FieldError::invalid(
                format!("{path}.replicas"),
                j.replicas,
                format!("must be greater than or equal to {MIN_REPLICAS}"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derived untagged reading, which [`TimeOfDay`]'s own must match value for value.
    mod derived {
        #[derive(serde::Deserialize, Debug, Clone, PartialEq)]
        #[serde(untagged)]
        pub enum TimeOfDay {
            Hour(i64),
            Clock(String),
        }
    }

    #[test]
    fn a_time_of_day_reads_as_the_untagged_enum_did() {
        let values = [
            serde_json::json!(9),
            serde_json::json!(-1),
            serde_json::json!(i64::MAX),
            serde_json::json!(u64::MAX),
            serde_json::json!(9.0),
            serde_json::json!(9.5),
            serde_json::json!("17:30"),
            serde_json::json!(""),
            serde_json::json!(null),
            serde_json::json!(true),
            serde_json::json!([9]),
            serde_json::json!({"hour": 9}),
        ];
        let same =
            |a: Result<TimeOfDay, String>, b: Result<derived::TimeOfDay, String>| match (a, b) {
                (Ok(TimeOfDay::Hour(x)), Ok(derived::TimeOfDay::Hour(y))) => x == y,
                (Ok(TimeOfDay::Clock(x)), Ok(derived::TimeOfDay::Clock(y))) => x == y,
                // Read from text, where an error is in a value is not compared.
                (Err(x), Err(y)) => x.split(" at line").next() == y.split(" at line").next(),
                _ => false,
            };
        for value in values {
            let ours = TimeOfDay::deserialize(&value).map_err(|e| e.to_string());
            let derived = derived::TimeOfDay::deserialize(&value).map_err(|e| e.to_string());
            assert!(
                same(ours.clone(), derived.clone()),
                "{value}: {ours:?} vs {derived:?}"
            );
            let text = value.to_string();
            let ours = serde_json::from_str::<TimeOfDay>(&text).map_err(|e| e.to_string());
            let derived =
                serde_json::from_str::<derived::TimeOfDay>(&text).map_err(|e| e.to_string());
            assert!(
                same(ours.clone(), derived.clone()),
                "{text}: {ours:?} vs {derived:?}"
            );
        }
    }

    #[test]
    fn a_record_is_trusted_only_by_the_scaler_that_wrote_it() {
        let annotations = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let me = scaler_id("team", "nightly");
        assert_eq!(me, "team/nightly");
        assert_eq!(Record::of(&annotations(&[]), &me), Record::Absent);
        let mine = annotations(&[
            (ORIGINAL_REPLICAS, "2"),
            (ORIGINAL_REPLICAS_OWNER, "team/nightly"),
        ]);
        assert_eq!(
            Record::of(&mine, &me),
            Record::Mine {
                replicas: Some(2),
                owner_recorded: true
            }
        );
        assert_eq!(
            Record::of(&mine, "team/daily"),
            Record::Other("team/nightly".into())
        );
        assert_eq!(
            Record::of(&annotations(&[(ORIGINAL_REPLICAS, "3")]), &me),
            Record::Mine {
                replicas: Some(3),
                owner_recorded: false
            },
            "a record from before owners were recorded is adopted"
        );
        for bad in ["-1", "lots", "", "2147483648"] {
            assert_eq!(
                Record::of(
                    &annotations(&[(ORIGINAL_REPLICAS, bad), (ORIGINAL_REPLICAS_OWNER, &me)]),
                    &me
                ),
                Record::Mine {
                    replicas: None,
                    owner_recorded: true
                },
                "{bad:?} is no count of replicas: unreadable, released as it is"
            );
        }
    }
}
