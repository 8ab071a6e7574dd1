//! Holidays from an iCalendar file (RFC 5545) in a ConfigMap the Scaler names
//! (`spec.excludeCalendar`): the calendar a company already keeps, in place of typing
//! `excludeDates` by hand. Every event is a run of excluded days in the Scaler's time zone:
//! an all-day event its dates (DTEND exclusive), a timed one every day it touches; recurring
//! events (RRULE, RDATE, EXDATE) are expanded around now, by the `icalendar` and `rrule` crates.
use chrono::{Duration, NaiveDate, TimeZone};
pub use chrono_tz::Tz;
use icalendar::{Component, DatePerhapsTime};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schedule::Instant;
use crate::rules::MAX_SUBDOMAIN;

/// The key read when `excludeCalendar.key` is not given.
pub const DEFAULT_CALENDAR_KEY: &str = "holidays.ics";
/// How many days before now a calendar's holidays are taken (a window that opened in the past
/// week closes where a holiday starts).
pub const DAYS_BEHIND: u64 = 8;
/// How many days after now a calendar's holidays are taken: more than a year, for the plugin's
/// views and the next transitions.
pub const DAYS_AHEAD: u64 = 400;
/// At most this many holidays (occurrences) from one calendar in that span.
pub const MAX_HOLIDAYS: usize = 1000;
/// How often the controller reads a Scaler's calendar again at least, so that an edit of the
/// ConfigMap is seen.
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(300);

/// An iCalendar file in a ConfigMap of the Scaler's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct CalendarRef {
    /// The ConfigMap's name, in the Scaler's namespace. Its author must be allowed to get it.
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN), regex(pattern = crate::rules::DNS1123_SUBDOMAIN.regex))]
    pub name: String,
    /// The key that holds the iCalendar text. Defaults to "holidays.ics".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SUBDOMAIN))]
    pub key: Option<String>,
}

impl CalendarRef {
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_CALENDAR_KEY)
    }
}

/// The days one event of a calendar excludes, both ends included, in the Scaler's zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holiday {
    /// The event's SUMMARY, or its date when it has none.
    pub summary: String,
    pub first: NaiveDate,
    pub last: NaiveDate,
}

/// The holidays of the calendar `calendar` names, from the data of its ConfigMap `ns`/`name`
/// (None when the ConfigMap does not exist), or why they cannot be read: what the controller
/// and the plugin both say.
pub fn holidays_in(
    data: Option<&std::collections::BTreeMap<String, String>>,
    ns: &str,
    calendar: &CalendarRef,
    tz: Tz,
    now: Instant,
) -> Result<Vec<Holiday>, String> {
    let (name, key) = (&calendar.name, calendar.key());
    let text = data.and_then(|d| d.get(key)).ok_or_else(|| {
        format!("ConfigMap {ns}/{name} of spec.excludeCalendar has no key {key:?}")
    })?;
    holidays(text, tz, now)
        .map_err(|why| format!("ConfigMap {ns}/{name} key {key:?} of spec.excludeCalendar {why}"))
}

/// The holidays of the iCalendar text `ics` from [`DAYS_BEHIND`] before `now` to
/// [`DAYS_AHEAD`] after it, read in `tz`, first first; or why the text cannot be read.
pub fn holidays(ics: &str, tz: Tz, now: Instant) -> Result<Vec<Holiday>, String> {
    let today = now.with_timezone(&tz).date_naive();
    let from = today - Duration::days(DAYS_BEHIND as i64);
    let to = today + Duration::days(DAYS_AHEAD as i64);
    holidays_between(ics, tz, from, to)
}

/// The holidays of `ics` that touch the days `from..=to` in `tz`.
pub fn holidays_between(
    ics: &str,
    tz: Tz,
    from: NaiveDate,
    to: NaiveDate,
) -> Result<Vec<Holiday>, String> {
    let calendar: icalendar::Calendar = ics
        .parse()
        .map_err(|e| format!("is not an iCalendar file: {e}"))?;
    // The occurrences asked of rrule: from a little before `from` (an event that started earlier
    // may still run) to the end of `to`, in UTC.
    let utc =
        |d: NaiveDate| icalendar::Tz::UTC.from_utc_datetime(&d.and_time(chrono::NaiveTime::MIN));
    let mut found = Vec::new();
    for event in calendar.calendar_events() {
        if event.property_value("STATUS") == Some("CANCELLED") {
            continue;
        }
        let Some(start) = event.get_start() else {
            continue;
        };
        let summary = event.get_summary().map(str::to_string);
        let named = |first: NaiveDate| summary.clone().unwrap_or_else(|| first.to_string());
        let reading = |e: String| match &summary {
            Some(s) => format!("event {s:?}: {e}"),
            None => format!("an event: {e}"),
        };
        // How long each occurrence lasts: whole days for an all-day event, a span for a timed one.
        let length = match (&start, event.get_end()) {
            (DatePerhapsTime::Date(a), Some(DatePerhapsTime::Date(b))) => {
                Length::Days((b - *a).num_days().max(1))
            }
            (DatePerhapsTime::Date(_), _) => Length::Days(1),
            (DatePerhapsTime::DateTime(a), Some(DatePerhapsTime::DateTime(b))) => {
                match (a.try_into_utc(), b.try_into_utc()) {
                    (Some(a), Some(b)) => Length::Span(b - a),
                    _ => Length::Span(Duration::zero()),
                }
            }
            (DatePerhapsTime::DateTime(_), _) => Length::Span(Duration::zero()),
        };
        let longest = match length {
            Length::Days(d) => Duration::days(d),
            Length::Span(s) => s,
        };
        let set = event
            .get_recurrence()
            .map_err(|e| reading(e.to_string()))?
            .after(utc(from) - longest - Duration::days(2))
            .before(utc(to) + Duration::days(2));
        let limit = u16::try_from(MAX_HOLIDAYS + 1).unwrap_or(u16::MAX);
        for at in set.all(limit).dates {
            let (first, last) = match length {
                // A date's occurrence is that date, whatever zone rrule anchored it in.
                Length::Days(days) => {
                    let first = at.date_naive();
                    (first, first + Duration::days(days - 1))
                }
                Length::Span(span) => {
                    let first = at.with_timezone(&tz).date_naive();
                    let end = at + span - Duration::seconds(1);
                    (first, end.with_timezone(&tz).date_naive().max(first))
                }
            };
            if last < from || first > to {
                continue;
            }
            found.push(Holiday {
                summary: named(first),
                first,
                last,
            });
            if found.len() > MAX_HOLIDAYS {
                return Err(format!(
                    "has more than {MAX_HOLIDAYS} holidays from {from} to {to}"
                ));
            }
        }
    }
    found.sort_by(|a, b| (a.first, a.last, &a.summary).cmp(&(b.first, b.last, &b.summary)));
    Ok(found)
}

#[derive(Clone, Copy)]
enum Length {
    Days(i64),
    Span(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    fn calendar(events: &str) -> String {
        format!("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//kubesteer//test//EN\r\n{events}END:VCALENDAR\r\n")
    }

    fn between(ics: &str, tz: &str, from: &str, to: &str) -> Vec<(String, String, String)> {
        holidays_between(ics, tz.parse().unwrap(), day(from), day(to))
            .unwrap()
            .into_iter()
            .map(|h| (h.summary, h.first.to_string(), h.last.to_string()))
            .collect()
    }

    #[test]
    fn single_days_and_ranges_are_their_dates_with_dtend_exclusive() {
        let ics = calendar(
            "BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Christmas\r\nDTSTART;VALUE=DATE:20261224\r\nDTEND;VALUE=DATE:20261227\r\nEND:VEVENT\r\n\
             BEGIN:VEVENT\r\nUID:2\r\nSUMMARY:Company day\r\nDTSTART;VALUE=DATE:20261106\r\nEND:VEVENT\r\n",
        );
        assert_eq!(
            between(&ics, "Europe/Berlin", "2026-11-01", "2026-12-31"),
            vec![
                (
                    "Company day".into(),
                    "2026-11-06".into(),
                    "2026-11-06".into()
                ),
                ("Christmas".into(), "2026-12-24".into(), "2026-12-26".into()),
            ]
        );
    }

    #[test]
    fn a_recurring_event_is_expanded_and_its_exceptions_left_out() {
        // Every 1 May, and the first Monday of each month but September's.
        let ics = calendar(
            "BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Labour Day\r\nDTSTART;VALUE=DATE:20200501\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n\
             BEGIN:VEVENT\r\nUID:2\r\nSUMMARY:Maintenance\r\nDTSTART;VALUE=DATE:20260105\r\nRRULE:FREQ=MONTHLY;BYDAY=1MO\r\nEXDATE;VALUE=DATE:20260907\r\nEND:VEVENT\r\n",
        );
        let got = between(&ics, "UTC", "2026-08-01", "2027-05-31");
        let labour: Vec<_> = got.iter().filter(|h| h.0 == "Labour Day").collect();
        assert_eq!(labour.len(), 1);
        assert_eq!(labour[0].1, "2027-05-01");
        let maintenance: Vec<&str> = got
            .iter()
            .filter(|h| h.0 == "Maintenance")
            .map(|h| h.1.as_str())
            .collect();
        assert_eq!(maintenance.first(), Some(&"2026-08-03"));
        assert!(!maintenance.contains(&"2026-09-07"), "{maintenance:?}");
        assert!(maintenance.contains(&"2026-10-05"), "{maintenance:?}");
    }

    #[test]
    fn a_timed_event_excludes_every_day_it_touches_in_the_scalers_zone() {
        // 22:00 to 02:00 UTC: in Berlin from the 10th 23:00 to the 11th 03:00, two local days;
        // in Tokyo on the 11th, 07:00 to 11:00, one.
        let ics = calendar(
            "BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Migration\r\nDTSTART:20261110T220000Z\r\nDTEND:20261111T020000Z\r\nEND:VEVENT\r\n",
        );
        assert_eq!(
            between(&ics, "Europe/Berlin", "2026-11-01", "2026-11-30"),
            vec![("Migration".into(), "2026-11-10".into(), "2026-11-11".into())]
        );
        assert_eq!(
            between(&ics, "Asia/Tokyo", "2026-11-01", "2026-11-30"),
            vec![("Migration".into(), "2026-11-11".into(), "2026-11-11".into())]
        );
    }

    #[test]
    fn a_cancelled_event_or_one_out_of_range_is_no_holiday_and_a_bad_file_says_why() {
        let ics = calendar(
            "BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Off\r\nSTATUS:CANCELLED\r\nDTSTART;VALUE=DATE:20261224\r\nEND:VEVENT\r\n\
             BEGIN:VEVENT\r\nUID:2\r\nSUMMARY:Old\r\nDTSTART;VALUE=DATE:20200101\r\nEND:VEVENT\r\n",
        );
        assert!(between(&ics, "UTC", "2026-01-01", "2027-01-01").is_empty());
        let err =
            holidays_between("hello", Tz::UTC, day("2026-01-01"), day("2027-01-01")).unwrap_err();
        assert!(err.starts_with("is not an iCalendar file"), "{err}");
    }

    #[test]
    fn an_endless_daily_event_is_capped() {
        let ics = calendar(
            "BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Every day\r\nDTSTART;VALUE=DATE:20200101\r\nRRULE:FREQ=DAILY\r\nEND:VEVENT\r\n",
        );
        // 400 days fit.
        let now = chrono::Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap();
        let days = holidays(&ics, Tz::UTC, now).unwrap();
        assert_eq!(days.len() as u64, DAYS_BEHIND + DAYS_AHEAD + 1);
        let err =
            holidays_between(&ics, Tz::UTC, day("2020-01-01"), day("2026-01-01")).unwrap_err();
        assert!(err.contains("more than 1000 holidays"), "{err}");
    }
}
