//! Pure schedule math for the Scaler: daily windows and cron jobs, read in an IANA time zone.

use std::cmp::Reverse;

use chrono::{
    DateTime, Datelike, Days, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeDelta, TimeZone,
    Timelike, Utc, Weekday,
};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// A point in time, always kept in UTC.
pub type Instant = DateTime<Utc>;

/// Why a schedule cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScheduleError {
    #[error("start and end must differ")]
    StartEqualsEnd,
    #[error("days must not be empty")]
    EmptyDays,
    #[error("at least one job is required")]
    NoJobs,
    #[error("invalid schedule for job {job:?}: {reason}")]
    InvalidCron { job: String, reason: String },
}

// Covers whole skipped days such as Pacific/Apia's 2011-12-30.
const MAX_GAP_MINUTES: u32 = 48 * 60;
// Far enough back that a single-weekday window still yields its last boundary.
const LOOKBACK_DAYS: u64 = 8;
// One week plus the day a crossing window closes: enough for any window not skipped by a gap.
const LOOKAHEAD_DAYS: u64 = 9;
// Only reached when gaps swallow windows for weeks; bounds the work instead of looping.
const MAX_LOOKAHEAD_DAYS: u64 = 400;
// Longer than any real fall-back overlap, so a wall-clock time repeated by it is still seen.
const OVERLAP_LOOKBACK_HOURS: i64 = 6;
// Firings skipped while searching lie inside one overlap, at most one a minute.
const MAX_SKIPPED_FIRINGS: usize = 2 * 24 * 60;
const ALL_DAYS: u8 = 0b111_1111;
/// How far ahead or back a cron search looks for a firing, in years.
pub const FIRING_HORIZON_YEARS: u32 = 5;
// Longer than the 4-year leap-day cycle, so a schedule that fires at all fires within it (bar 2100).
const FIRING_HORIZON_DAYS: u64 = FIRING_HORIZON_YEARS as u64 * 366;
// Fixed so that validation stays pure; it starts a leap year, so Feb 29 schedules fire within the horizon.
const VALIDATION_START: (i32, u32, u32) = (2000, 1, 1);

/// The instant of a wall-clock time in `tz`: times in a DST gap move past it, repeated times mean their first occurrence.
pub fn resolve_local(tz: Tz, date: NaiveDate, time: NaiveTime) -> Instant {
    resolve_naive(tz, date.and_time(time))
}

fn earliest(tz: Tz, local: NaiveDateTime) -> Option<Instant> {
    tz.from_local_datetime(&local)
        .earliest()
        .map(|t| t.with_timezone(&Utc))
}

fn resolve_naive(tz: Tz, local: NaiveDateTime) -> Instant {
    if let Some(at) = earliest(tz, local) {
        return at;
    }
    let mut probe = local;
    for _ in 0..MAX_GAP_MINUTES {
        let Some(next) = probe.checked_add_signed(TimeDelta::minutes(1)) else {
            break;
        };
        if let Some(at_next) = earliest(tz, next) {
            // Gaps end on a whole second, so refining by seconds finds the first instant that exists.
            let base = probe.with_nanosecond(0).unwrap_or(probe);
            return (1..60)
                .filter_map(|s| base.checked_add_signed(TimeDelta::seconds(s)))
                .find_map(|l| earliest(tz, l))
                .unwrap_or(at_next);
        }
        probe = next;
    }
    // Unreachable with real zone data; reading the time as UTC beats panicking in a controller.
    local.and_utc()
}

fn whole_seconds(local: NaiveDateTime) -> NaiveDateTime {
    local.with_nanosecond(0).unwrap_or(local)
}

fn day_bit(day: Weekday) -> u8 {
    1 << day.num_days_from_monday()
}

/// Where a window closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowEnd {
    /// At this time of day: later than the start the same day, earlier the next day.
    At(NaiveTime),
    /// At the end of the day the window opened ("24:00"): a window from "00:00" to it lasts the
    /// whole day, and such windows on days that follow each other make one.
    EndOfDay,
}

impl From<NaiveTime> for WindowEnd {
    fn from(t: NaiveTime) -> Self {
        WindowEnd::At(t)
    }
}

/// A daily window `[start, end)` in `tz`, opening only on `days`.
#[derive(Debug, Clone)]
pub struct Window {
    start: NaiveTime,
    end: WindowEnd,
    days: u8,
    tz: Tz,
}

/// Whether a window is open at an instant, and the boundaries around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    pub active: bool,
    pub next_transition: Instant,
    pub last_transition: Option<Instant>,
}

impl Window {
    /// `end` before `start` crosses midnight; `days` (None: every day) filters openings only.
    pub fn new(
        start: NaiveTime,
        end: impl Into<WindowEnd>,
        days: Option<&[Weekday]>,
        tz: Tz,
    ) -> Result<Self, ScheduleError> {
        let end = end.into();
        if end == WindowEnd::At(start) {
            return Err(ScheduleError::StartEqualsEnd);
        }
        let days = match days {
            None => ALL_DAYS,
            Some([]) => return Err(ScheduleError::EmptyDays),
            Some(list) => list.iter().fold(0, |mask, &d| mask | day_bit(d)),
        };
        Ok(Self {
            start,
            end,
            days,
            tz,
        })
    }

    /// The state at `t`; `last_transition` looks back about a week.
    pub fn state_at(&self, t: Instant) -> WindowState {
        let today = t.with_timezone(&self.tz).date_naive();
        let from = today
            .checked_sub_days(Days::new(LOOKBACK_DAYS))
            .unwrap_or(today);
        let mut intervals = Vec::new();
        let mut next = None;
        for ahead in [LOOKAHEAD_DAYS, MAX_LOOKAHEAD_DAYS] {
            intervals = self.intervals(from, LOOKBACK_DAYS + ahead + 1);
            next = boundaries(&intervals).find(|&b| b > t);
            if next.is_some() {
                break;
            }
        }
        WindowState {
            active: intervals
                .iter()
                .any(|&(open, close)| open <= t && t < close),
            // Without a boundary in range the caller just re-evaluates a day later.
            next_transition: next
                .unwrap_or_else(|| t.checked_add_signed(TimeDelta::days(1)).unwrap_or(t)),
            last_transition: boundaries(&intervals).take_while(|&b| b <= t).last(),
        }
    }

    fn opens_on(&self, day: Weekday) -> bool {
        self.days & day_bit(day) != 0
    }

    /// Disjoint, sorted `[open, close)` intervals for windows opening on `count` days from `from`.
    fn intervals(&self, from: NaiveDate, count: u64) -> Vec<(Instant, Instant)> {
        let mut merged: Vec<(Instant, Instant)> = Vec::new();
        for day in from
            .iter_days()
            .take(usize::try_from(count).unwrap_or(usize::MAX))
        {
            if !self.opens_on(day.weekday()) {
                continue;
            }
            let (close_day, close_time) = match self.end {
                WindowEnd::At(end) if end < self.start => (day.succ_opt(), end),
                WindowEnd::At(end) => (Some(day), end),
                WindowEnd::EndOfDay => (day.succ_opt(), NaiveTime::MIN),
            };
            let Some(close_day) = close_day else { continue };
            let open = resolve_local(self.tz, day, self.start);
            let close = resolve_local(self.tz, close_day, close_time);
            // A window swallowed by a DST gap opens and closes at once, so it never happens.
            if close <= open {
                continue;
            }
            match merged.last_mut() {
                // Touching windows merge so that every reported boundary really flips the state.
                Some(last) if open <= last.1 => last.1 = last.1.max(close),
                _ => merged.push((open, close)),
            }
        }
        merged
    }
}

fn boundaries(intervals: &[(Instant, Instant)]) -> impl Iterator<Item = Instant> + '_ {
    intervals.iter().flat_map(|&(open, close)| [open, close])
}

/// Parses a 5-field cron expression or an `@hourly`-style macro; seconds are rejected.
pub fn parse_cron(schedule: &str) -> Result<Cron, String> {
    let parser = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build();
    let cron = parser.parse(schedule).map_err(|e| e.to_string())?;
    // Patterns such as "0 0 30 2 *" parse but match no date; croner would walk to year 5000 looking.
    let (y, m, d) = VALIDATION_START;
    let matches = NaiveDate::from_ymd_opt(y, m, d)
        .is_some_and(|start| has_day_within_horizon(&cron, start, true));
    if !matches {
        return Err(format!("never fires within {FIRING_HORIZON_YEARS} years"));
    }
    Ok(cron)
}

/// Whether the day fields of `cron` match some day within the horizon from `from`, walking forward or back.
fn has_day_within_horizon(cron: &Cron, from: NaiveDate, forward: bool) -> bool {
    let mut day = from;
    for _ in 0..FIRING_HORIZON_DAYS {
        if day_matches(cron, day) {
            return true;
        }
        let step = if forward {
            day.succ_opt()
        } else {
            day.pred_opt()
        };
        let Some(next) = step else { return false };
        day = next;
    }
    false
}

fn day_matches(cron: &Cron, day: NaiveDate) -> bool {
    let p = &cron.pattern;
    p.month_match(day.month()).unwrap_or(false)
        && p.day_match(day.year(), day.month(), day.day())
            .unwrap_or(false)
}

#[derive(Debug, Clone)]
struct Job {
    name: String,
    cron: Cron,
    replicas: i32,
}

/// Cron jobs evaluated in `tz`, each setting the replicas when it fires.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    jobs: Vec<Job>,
    tz: Tz,
}

/// One firing of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing {
    pub job: String,
    pub at: Instant,
    pub replicas: i32,
}

impl CronSchedule {
    /// Jobs as `(name, schedule, replicas)`; fails on no jobs or on a schedule that is invalid or never fires.
    pub fn new<'a>(
        jobs: impl IntoIterator<Item = (&'a str, &'a str, i32)>,
        tz: Tz,
    ) -> Result<Self, ScheduleError> {
        let jobs = jobs
            .into_iter()
            .map(|(name, schedule, replicas)| match parse_cron(schedule) {
                Ok(cron) => Ok(Job {
                    name: name.to_string(),
                    cron,
                    replicas,
                }),
                Err(reason) => Err(ScheduleError::InvalidCron {
                    job: name.to_string(),
                    reason,
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if jobs.is_empty() {
            return Err(ScheduleError::NoJobs);
        }
        Ok(Self { jobs, tz })
    }

    /// The most recent firing at or before `t`; jobs firing at the same instant go to the one listed last.
    pub fn last_firing(&self, t: Instant) -> Option<Firing> {
        self.jobs
            .iter()
            .enumerate()
            .filter_map(|(i, job)| job.last_at_or_before(self.tz, t).map(|at| (at, i, job)))
            .max_by_key(|&(at, i, _)| (at, i))
            .map(|(at, _, job)| job.firing(at))
    }

    /// The first firing strictly after `t`; jobs firing at the same instant go to the one listed last.
    pub fn next_firing(&self, t: Instant) -> Option<Firing> {
        self.jobs
            .iter()
            .enumerate()
            .filter_map(|(i, job)| job.next_after(self.tz, t).map(|at| (at, i, job)))
            .min_by_key(|&(at, i, _)| (at, Reverse(i)))
            .map(|(at, _, job)| job.firing(at))
    }
}

// croner matches wall-clock times posing as UTC so that resolve_naive (monotonic) applies the window DST rules.
impl Job {
    fn firing(&self, at: Instant) -> Firing {
        Firing {
            job: self.name.clone(),
            at,
            replicas: self.replicas,
        }
    }

    fn next_after(&self, tz: Tz, t: Instant) -> Option<Instant> {
        let limit = t.checked_add_days(Days::new(FIRING_HORIZON_DAYS))?;
        // No wall-clock time up to t's own can resolve after t.
        let mut cursor = whole_seconds(t.with_timezone(&tz).naive_local());
        for _ in 0..MAX_SKIPPED_FIRINGS {
            // croner walks day by day to year 5000 when no day matches, so it is only asked when one lies within the horizon.
            if !has_day_within_horizon(&self.cron, cursor.date(), true) {
                return None;
            }
            let local = self
                .cron
                .find_next_occurrence(&cursor.and_utc(), false)
                .ok()?
                .naive_utc();
            let at = resolve_naive(tz, local);
            if at > t {
                return (at <= limit).then_some(at);
            }
            cursor = local;
        }
        None
    }

    fn last_at_or_before(&self, tz: Tz, t: Instant) -> Option<Instant> {
        let limit = t.checked_sub_days(Days::new(FIRING_HORIZON_DAYS))?;
        let mut cursor = latest_wall_clock(tz, t);
        let mut inclusive = true;
        for _ in 0..MAX_SKIPPED_FIRINGS {
            // Backwards croner walks to year 1 when no day matches.
            if !has_day_within_horizon(&self.cron, cursor.date(), false) {
                return None;
            }
            let local = self
                .cron
                .find_previous_occurrence(&cursor.and_utc(), inclusive)
                .ok()?
                .naive_utc();
            let at = resolve_naive(tz, local);
            if at <= t {
                return (at >= limit).then_some(at);
            }
            cursor = local;
            inclusive = false;
        }
        None
    }
}

/// An upper bound on the wall-clock times whose first occurrence is at or before `t`.
fn latest_wall_clock(tz: Tz, t: Instant) -> NaiveDateTime {
    let offset = |at: Instant| {
        tz.offset_from_utc_datetime(&at.naive_utc())
            .fix()
            .local_minus_utc()
    };
    let before = t
        .checked_sub_signed(TimeDelta::hours(OVERLAP_LOOKBACK_HOURS))
        .unwrap_or(t);
    // After a fall-back, wall-clock times past t's own may first have occurred before t.
    let ahead = TimeDelta::seconds(offset(t).max(offset(before)).into());
    whole_seconds(
        t.naive_utc()
            .checked_add_signed(ahead)
            .unwrap_or(t.naive_utc()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> Instant {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    fn hm(h: u32, m: u32) -> NaiveTime {
        NaiveTime::from_hms_opt(h, m, 0).unwrap()
    }

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    fn window(start: NaiveTime, end: NaiveTime, days: Option<&[Weekday]>, tz: Tz) -> Window {
        Window::new(start, end, days, tz).unwrap()
    }

    fn state(active: bool, next: Instant, last: Option<Instant>) -> WindowState {
        WindowState {
            active,
            next_transition: next,
            last_transition: last,
        }
    }

    fn cron(jobs: &[(&str, &str, i32)], tz: Tz) -> CronSchedule {
        CronSchedule::new(jobs.iter().copied(), tz).unwrap()
    }

    fn firing(job: &str, at: Instant, replicas: i32) -> Option<Firing> {
        Some(Firing {
            job: job.to_string(),
            at,
            replicas,
        })
    }

    #[test]
    fn nine_to_five_utc_boundaries() {
        let w = window(hm(9, 0), hm(17, 0), None, Tz::UTC);
        let sec = TimeDelta::seconds(1);
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 9, 0) - sec),
            state(false, utc(2025, 6, 6, 9, 0), Some(utc(2025, 6, 5, 17, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 9, 0)),
            state(true, utc(2025, 6, 6, 17, 0), Some(utc(2025, 6, 6, 9, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 12, 0)),
            state(true, utc(2025, 6, 6, 17, 0), Some(utc(2025, 6, 6, 9, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 17, 0) - sec),
            state(true, utc(2025, 6, 6, 17, 0), Some(utc(2025, 6, 6, 9, 0)))
        );
        // The end is exclusive: the whole 17:00 minute is already outside.
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 17, 0)),
            state(false, utc(2025, 6, 7, 9, 0), Some(utc(2025, 6, 6, 17, 0)))
        );
        assert!(!w.state_at(utc(2025, 6, 6, 17, 30)).active);
        assert!(!w.state_at(utc(2025, 6, 6, 3, 0)).active);
    }

    #[test]
    fn window_crossing_midnight() {
        let w = window(hm(22, 0), hm(6, 0), None, Tz::UTC);
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 21, 59)),
            state(false, utc(2025, 6, 6, 22, 0), Some(utc(2025, 6, 6, 6, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 22, 0)),
            state(true, utc(2025, 6, 7, 6, 0), Some(utc(2025, 6, 6, 22, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 7, 0, 0)),
            state(true, utc(2025, 6, 7, 6, 0), Some(utc(2025, 6, 6, 22, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 7, 5, 59)),
            state(true, utc(2025, 6, 7, 6, 0), Some(utc(2025, 6, 6, 22, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 7, 6, 0)),
            state(false, utc(2025, 6, 7, 22, 0), Some(utc(2025, 6, 7, 6, 0)))
        );
        assert!(!w.state_at(utc(2025, 6, 7, 12, 0)).active);
    }

    #[test]
    fn a_window_to_the_end_of_the_day_lasts_all_day_and_joins_the_next_days() {
        // 2025-06-07 is a Saturday.
        let (sat, sun) = (Weekday::Sat, Weekday::Sun);
        let w = Window::new(hm(0, 0), WindowEnd::EndOfDay, Some(&[sat, sun]), Tz::UTC).unwrap();
        let weekend = Some(utc(2025, 6, 7, 0, 0));
        for t in [
            utc(2025, 6, 7, 0, 0),
            utc(2025, 6, 7, 23, 59),
            utc(2025, 6, 8, 0, 0),
            utc(2025, 6, 8, 23, 59),
        ] {
            // No boundary at Saturday's or Sunday's end of day: Monday 00:00 is the next.
            assert_eq!(
                w.state_at(t),
                state(true, utc(2025, 6, 9, 0, 0), weekend),
                "{t}"
            );
        }
        assert!(!w.state_at(utc(2025, 6, 9, 0, 0)).active);
        assert!(!w.state_at(utc(2025, 6, 6, 23, 59)).active);

        // An evening window to the end of the day closes at midnight, in the zone.
        let berlin = chrono_tz::Europe::Berlin;
        let w = Window::new(hm(20, 30), WindowEnd::EndOfDay, None, berlin).unwrap();
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 21, 0)),
            state(true, utc(2025, 6, 6, 22, 0), Some(utc(2025, 6, 6, 18, 30)))
        );
        // "00:00" as the end of a window from 00:00 is no window at all.
        assert_eq!(
            Window::new(hm(0, 0), hm(0, 0), None, Tz::UTC).unwrap_err(),
            ScheduleError::StartEqualsEnd
        );
    }

    #[test]
    fn crossing_window_belongs_to_the_day_it_opened() {
        // 2025-06-06 is a Friday.
        let w = window(hm(22, 0), hm(6, 0), Some(&[Weekday::Fri]), Tz::UTC);
        assert_eq!(
            w.state_at(utc(2025, 6, 5, 23, 0)),
            state(false, utc(2025, 6, 6, 22, 0), Some(utc(2025, 5, 31, 6, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 21, 0)),
            state(false, utc(2025, 6, 6, 22, 0), Some(utc(2025, 5, 31, 6, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 7, 2, 0)),
            state(true, utc(2025, 6, 7, 6, 0), Some(utc(2025, 6, 6, 22, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 7, 6, 0)),
            state(false, utc(2025, 6, 13, 22, 0), Some(utc(2025, 6, 7, 6, 0)))
        );
        // Saturday itself does not open, and Saturday night is not reached from Friday.
        assert_eq!(
            w.state_at(utc(2025, 6, 7, 23, 0)),
            state(false, utc(2025, 6, 13, 22, 0), Some(utc(2025, 6, 7, 6, 0)))
        );
    }

    #[test]
    fn weekdays_only() {
        let days = [
            Weekday::Mon,
            Weekday::Tue,
            Weekday::Wed,
            Weekday::Thu,
            Weekday::Fri,
        ];
        let w = window(hm(9, 0), hm(17, 0), Some(&days), Tz::UTC);
        assert_eq!(
            w.state_at(utc(2025, 6, 7, 10, 0)),
            state(false, utc(2025, 6, 9, 9, 0), Some(utc(2025, 6, 6, 17, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 9, 10, 0)),
            state(true, utc(2025, 6, 9, 17, 0), Some(utc(2025, 6, 9, 9, 0)))
        );
    }

    #[test]
    fn days_are_read_in_the_time_zone() {
        // Sunday 23:30Z is Monday 07:30 in Shanghai.
        let w = window(
            hm(8, 0),
            hm(10, 0),
            Some(&[Weekday::Mon]),
            Tz::Asia__Shanghai,
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 8, 23, 30)),
            state(false, utc(2025, 6, 9, 0, 0), Some(utc(2025, 6, 2, 2, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 9, 1, 0)),
            state(true, utc(2025, 6, 9, 2, 0), Some(utc(2025, 6, 9, 0, 0)))
        );
    }

    #[test]
    fn time_zones() {
        let w = window(hm(9, 0), hm(17, 0), None, Tz::Asia__Shanghai);
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 0, 59)),
            state(false, utc(2025, 6, 6, 1, 0), Some(utc(2025, 6, 5, 9, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 1, 0)),
            state(true, utc(2025, 6, 6, 9, 0), Some(utc(2025, 6, 6, 1, 0)))
        );

        let w = window(hm(9, 0), hm(17, 0), None, Tz::America__New_York);
        assert_eq!(
            w.state_at(utc(2025, 6, 6, 12, 0)),
            state(false, utc(2025, 6, 6, 13, 0), Some(utc(2025, 6, 5, 21, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 1, 6, 13, 30)),
            state(false, utc(2025, 1, 6, 14, 0), Some(utc(2025, 1, 5, 22, 0)))
        );
        assert!(w.state_at(utc(2025, 1, 6, 21, 59)).active);
        assert!(!w.state_at(utc(2025, 1, 6, 22, 0)).active);
    }

    #[test]
    fn resolve_local_rules() {
        let ny = Tz::America__New_York;
        assert_eq!(
            resolve_local(ny, date(2025, 6, 6), hm(9, 0)),
            utc(2025, 6, 6, 13, 0)
        );
        assert_eq!(
            resolve_local(Tz::Asia__Kolkata, date(2025, 6, 6), hm(9, 0)),
            utc(2025, 6, 6, 3, 30)
        );
        // Spring forward: 02:00-03:00 does not exist, so 02:30 happens at 03:00 EDT.
        assert_eq!(
            resolve_local(ny, date(2025, 3, 9), hm(2, 30)),
            utc(2025, 3, 9, 7, 0)
        );
        assert_eq!(
            resolve_local(ny, date(2025, 3, 9), hm(2, 0)),
            utc(2025, 3, 9, 7, 0)
        );
        assert_eq!(
            resolve_local(ny, date(2025, 3, 9), hm(3, 0)),
            utc(2025, 3, 9, 7, 0)
        );
        let with_seconds = NaiveTime::from_hms_opt(2, 30, 30).unwrap();
        assert_eq!(
            resolve_local(ny, date(2025, 3, 9), with_seconds),
            utc(2025, 3, 9, 7, 0)
        );
        // Fall back: 01:00-02:00 happens twice; the first occurrence (EDT) wins.
        assert_eq!(
            resolve_local(ny, date(2025, 11, 2), hm(1, 30)),
            utc(2025, 11, 2, 5, 30)
        );
        assert_eq!(
            resolve_local(ny, date(2025, 11, 2), hm(2, 0)),
            utc(2025, 11, 2, 7, 0)
        );
        // Lord Howe springs forward by half an hour, 02:00 -> 02:30 (+11:00).
        assert_eq!(
            resolve_local(Tz::Australia__Lord_Howe, date(2025, 10, 5), hm(2, 15)),
            utc(2025, 10, 4, 15, 30)
        );
    }

    #[test]
    fn spring_forward_opening_moves_to_first_existing_instant() {
        let w = window(hm(2, 30), hm(4, 0), None, Tz::America__New_York);
        assert_eq!(
            w.state_at(utc(2025, 3, 9, 6, 59)),
            state(false, utc(2025, 3, 9, 7, 0), Some(utc(2025, 3, 8, 9, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 3, 9, 7, 0)),
            state(true, utc(2025, 3, 9, 8, 0), Some(utc(2025, 3, 9, 7, 0)))
        );
    }

    #[test]
    fn fall_back_uses_first_occurrence() {
        let ny = Tz::America__New_York;
        let w = window(hm(1, 30), hm(3, 0), None, ny);
        assert_eq!(
            w.state_at(utc(2025, 11, 2, 5, 29)),
            state(false, utc(2025, 11, 2, 5, 30), Some(utc(2025, 11, 1, 7, 0)))
        );
        assert_eq!(
            w.state_at(utc(2025, 11, 2, 6, 45)),
            state(true, utc(2025, 11, 2, 8, 0), Some(utc(2025, 11, 2, 5, 30)))
        );
        // The repeated hour does not reopen a window that already closed in its first pass.
        let w = window(hm(1, 0), hm(1, 30), None, ny);
        assert_eq!(
            w.state_at(utc(2025, 11, 2, 6, 15)),
            state(false, utc(2025, 11, 3, 6, 0), Some(utc(2025, 11, 2, 5, 30)))
        );
    }

    #[test]
    fn window_inside_a_gap_is_skipped() {
        let w = window(hm(2, 10), hm(2, 40), None, Tz::America__New_York);
        let skipped = state(false, utc(2025, 3, 10, 6, 10), Some(utc(2025, 3, 8, 7, 40)));
        assert_eq!(w.state_at(utc(2025, 3, 9, 6, 30)), skipped);
        assert_eq!(w.state_at(utc(2025, 3, 9, 7, 0)), skipped);
    }

    #[test]
    fn windows_touching_through_a_gap_merge() {
        // Saturday's window closes at 02:30 -> 03:00 EDT, exactly when Sunday's opens.
        let w = window(hm(3, 0), hm(2, 30), None, Tz::America__New_York);
        let merged = state(true, utc(2025, 3, 10, 6, 30), Some(utc(2025, 3, 8, 8, 0)));
        assert_eq!(w.state_at(utc(2025, 3, 9, 6, 59)), merged);
        assert_eq!(w.state_at(utc(2025, 3, 9, 7, 0)), merged);
    }

    #[test]
    fn window_errors() {
        let err = Window::new(hm(9, 0), hm(9, 0), None, Tz::UTC).unwrap_err();
        assert_eq!(err, ScheduleError::StartEqualsEnd);
        assert_eq!(err.to_string(), "start and end must differ");
        let err = Window::new(hm(9, 0), hm(17, 0), Some(&[]), Tz::UTC).unwrap_err();
        assert_eq!(err, ScheduleError::EmptyDays);
        assert_eq!(err.to_string(), "days must not be empty");
    }

    #[test]
    fn cron_hourly() {
        let c = cron(&[("h", "@hourly", 2)], Tz::UTC);
        assert_eq!(
            c.next_firing(utc(2025, 6, 6, 10, 15)),
            firing("h", utc(2025, 6, 6, 11, 0), 2)
        );
        assert_eq!(
            c.last_firing(utc(2025, 6, 6, 10, 15)),
            firing("h", utc(2025, 6, 6, 10, 0), 2)
        );
        assert_eq!(
            c.last_firing(utc(2025, 6, 6, 10, 0)),
            firing("h", utc(2025, 6, 6, 10, 0), 2)
        );
        assert_eq!(
            c.next_firing(utc(2025, 6, 6, 10, 0)),
            firing("h", utc(2025, 6, 6, 11, 0), 2)
        );
    }

    #[test]
    fn cron_every_fifteen_minutes() {
        let c = cron(&[("q", "*/15 * * * *", 1)], Tz::Asia__Kolkata);
        assert_eq!(
            c.next_firing(utc(2025, 6, 6, 10, 16)),
            firing("q", utc(2025, 6, 6, 10, 30), 1)
        );
        assert_eq!(
            c.last_firing(utc(2025, 6, 6, 10, 16)),
            firing("q", utc(2025, 6, 6, 10, 15), 1)
        );
    }

    #[test]
    fn cron_weekdays_in_a_time_zone() {
        // 09:00 CEST is 07:00Z; Friday 2025-06-06 is followed by Monday 2025-06-09.
        let c = cron(&[("open", "0 9 * * 1-5", 4)], Tz::Europe__Berlin);
        assert_eq!(
            c.last_firing(utc(2025, 6, 6, 10, 0)),
            firing("open", utc(2025, 6, 6, 7, 0), 4)
        );
        assert_eq!(
            c.next_firing(utc(2025, 6, 6, 10, 0)),
            firing("open", utc(2025, 6, 9, 7, 0), 4)
        );
        assert_eq!(
            c.next_firing(utc(2025, 6, 6, 6, 59)),
            firing("open", utc(2025, 6, 6, 7, 0), 4)
        );
    }

    #[test]
    fn cron_catch_up_after_restart() {
        let c = cron(
            &[("day", "0 8 * * *", 5), ("night", "0 20 * * *", 1)],
            Tz::UTC,
        );
        assert_eq!(
            c.last_firing(utc(2025, 6, 6, 3, 0)),
            firing("night", utc(2025, 6, 5, 20, 0), 1)
        );
        assert_eq!(
            c.last_firing(utc(2025, 6, 6, 12, 0)),
            firing("day", utc(2025, 6, 6, 8, 0), 5)
        );
        assert_eq!(
            c.next_firing(utc(2025, 6, 6, 12, 0)),
            firing("night", utc(2025, 6, 6, 20, 0), 1)
        );
        let yearly = cron(&[("y", "@yearly", 3)], Tz::UTC);
        assert_eq!(
            yearly.last_firing(utc(2025, 6, 6, 12, 0)),
            firing("y", utc(2025, 1, 1, 0, 0), 3)
        );
    }

    #[test]
    fn cron_tie_goes_to_the_later_job() {
        let c = cron(
            &[
                ("every-day", "0 9 * * *", 3),
                ("weekdays", "0 9 * * 1-5", 7),
            ],
            Tz::UTC,
        );
        assert_eq!(
            c.last_firing(utc(2025, 6, 6, 10, 0)),
            firing("weekdays", utc(2025, 6, 6, 9, 0), 7)
        );
        assert_eq!(
            c.next_firing(utc(2025, 6, 6, 8, 0)),
            firing("weekdays", utc(2025, 6, 6, 9, 0), 7)
        );
        assert_eq!(
            c.last_firing(utc(2025, 6, 7, 10, 0)),
            firing("every-day", utc(2025, 6, 7, 9, 0), 3)
        );
        let swapped = cron(
            &[
                ("weekdays", "0 9 * * 1-5", 7),
                ("every-day", "0 9 * * *", 3),
            ],
            Tz::UTC,
        );
        assert_eq!(
            swapped.last_firing(utc(2025, 6, 6, 10, 0)),
            firing("every-day", utc(2025, 6, 6, 9, 0), 3)
        );
    }

    #[test]
    fn cron_across_dst() {
        let ny = Tz::America__New_York;
        // 02:30 does not exist on 2025-03-09, so it fires at 03:00 EDT, tying with the 03:00 job.
        let c = cron(&[("gap", "30 2 * * *", 1), ("three", "0 3 * * *", 2)], ny);
        assert_eq!(
            c.next_firing(utc(2025, 3, 9, 6, 0)),
            firing("three", utc(2025, 3, 9, 7, 0), 2)
        );
        let gap = cron(&[("gap", "30 2 * * *", 1)], ny);
        assert_eq!(
            gap.next_firing(utc(2025, 3, 9, 6, 0)),
            firing("gap", utc(2025, 3, 9, 7, 0), 1)
        );
        assert_eq!(
            gap.last_firing(utc(2025, 3, 9, 7, 0)),
            firing("gap", utc(2025, 3, 9, 7, 0), 1)
        );
        // 01:30 happens twice on 2025-11-02 but fires once, at its first occurrence.
        let c = cron(&[("half", "30 1 * * *", 1)], ny);
        assert_eq!(
            c.next_firing(utc(2025, 11, 2, 5, 0)),
            firing("half", utc(2025, 11, 2, 5, 30), 1)
        );
        assert_eq!(
            c.next_firing(utc(2025, 11, 2, 5, 30)),
            firing("half", utc(2025, 11, 3, 6, 30), 1)
        );
        // In the repeated hour, the latest firing is from its first pass, not a later wall-clock time.
        let c = cron(&[("half-hourly", "*/30 * * * *", 1)], ny);
        assert_eq!(
            c.last_firing(utc(2025, 11, 2, 6, 15)),
            firing("half-hourly", utc(2025, 11, 2, 5, 30), 1)
        );
        assert_eq!(
            c.next_firing(utc(2025, 11, 2, 6, 15)),
            firing("half-hourly", utc(2025, 11, 2, 7, 0), 1)
        );
    }

    #[test]
    fn cron_macros_parse() {
        for s in [
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "@yearly",
            "@annually",
            "@Daily",
            "0 9 * * MON-FRI",
        ] {
            assert!(parse_cron(s).is_ok(), "{s}");
        }
    }

    #[test]
    fn cron_errors_name_the_job() {
        let err = CronSchedule::new([("nightly", "not a cron", 1)], Tz::UTC).unwrap_err();
        assert!(
            matches!(&err, ScheduleError::InvalidCron { job, .. } if job == "nightly"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("invalid schedule for job \"nightly\": "),
            "{err}"
        );

        // Seconds are not part of a standard cron expression.
        assert!(parse_cron("0 0 9 * * *").is_err());
        let err = CronSchedule::new(
            [("ok", "@daily", 1), ("secs", "*/10 * * * * *", 1)],
            Tz::UTC,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid schedule for job \"secs\": "),
            "{err}"
        );

        let err = CronSchedule::new([("feb30", "0 0 30 2 *", 1)], Tz::UTC).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid schedule for job \"feb30\": never fires within 5 years"
        );

        assert!(parse_cron("").is_err());
        assert!(parse_cron("61 * * * *").is_err());
        assert!(parse_cron("@reboot").is_err());
        assert_eq!(
            CronSchedule::new([], Tz::UTC).unwrap_err(),
            ScheduleError::NoJobs
        );
    }

    const NEVER_FIRING: &[&str] = &[
        "0 0 30 2 *",
        "0 0 31 4 *",
        "0 0 31 6 *",
        "0 0 31 9 *",
        "0 0 31 11 *",
        "30 12 30,31 2 *",
        "*/5 * 31 2,4,6,9,11 *",
        "0 0 30 2 +MON",
    ];

    #[test]
    fn never_firing_schedules_are_rejected() {
        for s in NEVER_FIRING {
            assert_eq!(
                parse_cron(s).map(|_| ()),
                Err("never fires within 5 years".to_string()),
                "{s}"
            );
            let err = CronSchedule::new([("never", *s, 1)], Tz::UTC).unwrap_err();
            assert_eq!(
                err.to_string(),
                "invalid schedule for job \"never\": never fires within 5 years"
            );
        }
        for s in [
            "0 0 29 2 *",
            "0 0 31 12 *",
            "0 0 L 2 *",
            "0 0 30 1-12 *",
            "0 9 13 * +FRI",
        ] {
            assert!(parse_cron(s).is_ok(), "{s}");
        }
    }

    #[test]
    fn searches_stop_at_the_horizon() {
        // An object stored while the webhook was down skips validation, so the search itself must give up.
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        for s in NEVER_FIRING {
            let c = CronSchedule {
                jobs: vec![Job {
                    name: "never".into(),
                    cron: parser.parse(s).unwrap(),
                    replicas: 1,
                }],
                tz: Tz::America__New_York,
            };
            assert_eq!(c.next_firing(utc(2026, 11, 23, 0, 0)), None, "{s}");
            assert_eq!(c.last_firing(utc(2026, 11, 23, 0, 0)), None, "{s}");
        }
        // 2100 is no leap year, so from 2097 the next Feb 29 (2104) lies beyond the horizon.
        let leap = cron(&[("leap", "0 0 29 2 *", 1)], Tz::UTC);
        assert_eq!(leap.next_firing(utc(2097, 3, 1, 0, 0)), None);
        assert_eq!(
            leap.last_firing(utc(2097, 3, 1, 0, 0)),
            firing("leap", utc(2096, 2, 29, 0, 0), 1)
        );
        assert_eq!(leap.last_firing(utc(2103, 1, 1, 0, 0)), None);
        assert_eq!(
            leap.next_firing(utc(2026, 11, 23, 0, 0)),
            firing("leap", utc(2028, 2, 29, 0, 0), 1)
        );
    }

    const ZONES: &[Tz] = &[
        Tz::UTC,
        Tz::America__New_York,
        Tz::Europe__London,
        Tz::Australia__Lord_Howe,
        Tz::Asia__Kolkata,
        Tz::Pacific__Chatham,
        Tz::America__Santiago,
    ];

    const WEEK: [Weekday; 7] = [
        Weekday::Mon,
        Weekday::Tue,
        Weekday::Wed,
        Weekday::Thu,
        Weekday::Fri,
        Weekday::Sat,
        Weekday::Sun,
    ];

    /// The first UTC-offset change in `tz` after `from`, if any within about a year.
    fn next_offset_change(tz: Tz, from: Instant) -> Option<Instant> {
        let offset = |t: Instant| tz.offset_from_utc_datetime(&t.naive_utc()).fix();
        let initial = offset(from);
        let mut lo = from;
        for _ in 0..400 {
            let hi = lo + TimeDelta::days(1);
            if offset(hi) != initial {
                let mut hi = hi;
                while hi - lo > TimeDelta::seconds(1) {
                    let mid = lo + (hi - lo) / 2;
                    if offset(mid) == initial {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                return Some(hi);
            }
            lo = hi;
        }
        None
    }

    /// Either `secs` itself or, to stress DST, a point near the next offset change after it.
    fn instant(
        tz: Tz,
        secs: i64,
        near_change: bool,
        jitter_minutes: i64,
        extra_secs: i64,
    ) -> Instant {
        let t = DateTime::from_timestamp(secs, 0).unwrap();
        match next_offset_change(tz, t).filter(|_| near_change) {
            Some(change) => {
                change + TimeDelta::minutes(jitter_minutes) + TimeDelta::seconds(extra_secs)
            }
            None => t,
        }
    }

    fn minute_of_day() -> impl Strategy<Value = u32> {
        // Half the cases land around 00:00-03:59, where DST transitions happen.
        prop_oneof![0u32..1440, 0u32..240]
    }

    fn time_of(minute: u32) -> NaiveTime {
        hm(minute / 60, minute % 60)
    }

    const T2020: i64 = 1_577_836_800;
    const T2035: i64 = 2_051_222_400;

    const SCHEDULES: &[&str] = &[
        "@hourly",
        "@daily",
        "@weekly",
        "*/15 * * * *",
        "0 9 * * 1-5",
        "30 2 * * *",
        "30 1 * * *",
        "0,30 2 * * 0",
        "*/7 1-3 * * *",
        "15 3 1 * *",
        "45 23 * * 5",
        "0 0 29 2 *",
        "0 0 * * 6,0",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn window_transitions_flip_the_state(
            start in minute_of_day(),
            length in 1u32..1440,
            days in prop::option::of(prop::sample::subsequence(WEEK.to_vec(), 1..=7)),
            tz in prop::sample::select(ZONES),
            secs in T2020..T2035,
            near_change in any::<bool>(),
            jitter_minutes in -36 * 60i64..36 * 60,
            extra_secs in prop_oneof![Just(0i64), 0i64..60],
        ) {
            let w = Window::new(time_of(start), time_of((start + length) % 1440), days.as_deref(), tz).unwrap();
            let t = instant(tz, secs, near_change, jitter_minutes, extra_secs);
            let now = w.state_at(t);
            prop_assert!(now.next_transition > t, "{now:?} at {t}");
            let after = w.state_at(now.next_transition);
            prop_assert_ne!(after.active, now.active, "{:?} at {} then {:?}", now, t, after);
            prop_assert_eq!(after.last_transition, Some(now.next_transition));
            let just_before = w.state_at(now.next_transition - TimeDelta::seconds(1));
            prop_assert_eq!(just_before.active, now.active, "{:?} at {}", now, t);
            if let Some(last) = now.last_transition {
                prop_assert!(last <= t);
                prop_assert_eq!(w.state_at(last).active, now.active);
                prop_assert_ne!(w.state_at(last - TimeDelta::seconds(1)).active, now.active, "{:?} at {}", now, t);
            }
        }

        #[test]
        fn impossible_dates_never_fire(
            minute in 0u32..60,
            hour in 0u32..24,
            (day, month) in prop_oneof![
                (30u32..=31, Just(2u32)),
                (Just(31u32), prop::sample::select(vec![4u32, 6, 9, 11])),
            ],
        ) {
            let never = format!("{minute} {hour} {day} {month} *");
            prop_assert_eq!(parse_cron(&never).map(|_| ()), Err("never fires within 5 years".to_string()));
            let fires = format!("{minute} {hour} {} {month} *", day - 2);
            prop_assert!(parse_cron(&fires).is_ok(), "{}", fires);
        }

        #[test]
        fn cron_firings_are_ordered_around_t(
            picks in prop::collection::vec((prop::sample::select(SCHEDULES), 0i32..10), 1..=3),
            tz in prop::sample::select(ZONES),
            secs in T2020..T2035,
            near_change in any::<bool>(),
            jitter_minutes in -36 * 60i64..36 * 60,
            extra_secs in prop_oneof![Just(0i64), 0i64..60],
        ) {
            let names: Vec<String> = (0..picks.len()).map(|i| format!("job{i}")).collect();
            let jobs = names.iter().zip(&picks).map(|(n, &(s, r))| (n.as_str(), s, r));
            let c = CronSchedule::new(jobs, tz).unwrap();
            let t = instant(tz, secs, near_change, jitter_minutes, extra_secs);
            let sec = TimeDelta::seconds(1);

            let next = c.next_firing(t).unwrap();
            prop_assert!(next.at > t, "{next:?} at {t}");
            prop_assert_eq!(c.last_firing(next.at), Some(next.clone()));

            let last = c.last_firing(t).unwrap();
            prop_assert!(last.at <= t, "{last:?} at {t}");
            prop_assert_eq!(c.next_firing(last.at - sec), Some(last.clone()));
            // Nothing fires strictly between the last and the next firing.
            prop_assert_eq!(c.last_firing(next.at - sec), Some(last));
        }
    }
}
