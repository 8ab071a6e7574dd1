//! What a v1beta1 Scaler's schedule says at an instant: windows or cron jobs, with excluded dates
//! and an override, and the next changes. Pure: the controller calls it once per reconcile.
use std::cmp::Reverse;

use chrono::{Days, NaiveDate, NaiveTime, TimeDelta, Weekday};
use chrono_tz::Tz;

use crate::field::{FieldError, FieldErrors};
use crate::keys::reason;
use crate::scaler::schedule::{
    resolve_local, CronSchedule, Firing, Instant, Window, FIRING_HORIZON_YEARS,
};
use crate::scaler::v1beta1::{ExcludeDate, ScaleWindow, ScalerSpec, DEFAULT_REPLICAS};
use crate::scaler::{job_error, parse_time_zone};

/// How many upcoming changes a plan lists (status.nextTransitions).
pub const MAX_NEXT: usize = crate::rules::scaler::NEXT_TRANSITIONS;
/// How far ahead the next changes are looked for.
pub const HORIZON_DAYS: u64 = 400;
// Bounds the walk to the next changes when boundaries change nothing (windows that abut at equal replicas).
const MAX_STEPS: usize = 2000;
// Far enough back that the last edge of an excluded day is seen when a window's would be.
const EDGE_LOOKBACK_DAYS: u64 = 8;
// A run of excluded days longer than this counts as endless.
const MAX_RUN_DAYS: u32 = FIRING_HORIZON_YEARS * 366;
// Bounds the jumps over excluded runs while looking for a firing on a day that is not excluded.
const MAX_JUMPS: usize = 1000;

/// One upcoming change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTransition {
    /// When it happens.
    pub at: Instant,
    /// The replicas from then on; None = outside (outsideReplicas or the recorded replicas).
    pub replicas: Option<i32>,
}

/// What the schedule says at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// What every target must have now; None = outside every window.
    pub replicas: Option<i32>,
    /// Reason of the Ready condition: WindowOpen, WindowClosed, JobFired, WaitingForFirstFiring, ExcludedDate or Override.
    pub reason: &'static str,
    /// A sentence for the Ready condition.
    pub message: String,
    /// The latest boundary at or before now, to tell whether it was already applied.
    pub last: Option<Instant>,
    /// The next changes (at most [`MAX_NEXT`]) strictly after now, in order.
    pub next: Vec<PlannedTransition>,
}

/// A v1beta1 Scaler's schedule, parsed: built once per reconcile, asked with [`BetaSchedule::plan`].
#[derive(Debug, Clone)]
pub struct BetaSchedule {
    tz: Tz,
    mode: Mode,
    /// The parsed excludeDates, each with its index in the spec; then the calendar's holidays,
    /// each with its index in `holidays` plus the number of excludeDates.
    excludes: Vec<(usize, ExcludeDate)>,
    /// How many of `excludes` are the spec's excludeDates.
    listed: usize,
    /// The summaries of the calendar's holidays (`spec.excludeCalendar`).
    holidays: Vec<String>,
    /// The override as (replicas, until).
    override_: Option<(i32, Instant)>,
}

#[derive(Debug, Clone)]
enum Mode {
    /// Each window with its replicas.
    Windows(Vec<(Window, i32)>),
    Cron(CronSchedule),
}

/// Why the replicas are what they are at an instant.
#[derive(Debug, Clone, PartialEq)]
enum Cause {
    Override {
        until: Instant,
    },
    Excluded {
        day: NaiveDate,
        index: usize,
    },
    /// The open window with the highest replicas (the first of equals), if any.
    Window(Option<usize>),
    Fired(Firing),
    Waiting,
}

/// The replicas at an instant and why.
#[derive(Debug, Clone, PartialEq)]
struct State {
    replicas: Option<i32>,
    cause: Cause,
}

impl ScalerSpec {
    /// The parsed schedule, or the field errors that prevent it (on the paths validation uses).
    pub fn schedule(&self) -> Result<BetaSchedule, FieldErrors> {
        let mut errors = FieldErrors::new();
        let tz = parse_time_zone(self.time_zone(), &mut errors);
        let zone = tz.unwrap_or(Tz::UTC);
        let mode = match (&self.windows, &self.jobs) {
            (Some(_), Some(_)) => {
                errors.push(FieldError::forbidden(
                    "spec.windows",
                    "may not be combined with spec.jobs",
                ));
                None
            }
            (None, None) => {
                errors.push(FieldError::required(
                    "spec.windows",
                    "windows or jobs is required",
                ));
                None
            }
            (Some(windows), None) => windows_of(windows, zone, &mut errors).map(Mode::Windows),
            (None, Some(jobs)) => {
                let tuples = jobs
                    .iter()
                    .map(|j| (j.name.as_str(), j.schedule.as_str(), j.replicas));
                match CronSchedule::new(tuples, zone) {
                    Ok(c) => Some(Mode::Cron(c)),
                    Err(e) => {
                        errors.push(job_error(jobs, e));
                        None
                    }
                }
            }
        };
        let excludes: Vec<(usize, ExcludeDate)> = self
            .exclude_dates
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, s)| ExcludeDate::parse(s).ok().map(|e| (i, e)))
            .collect();
        let listed = self.exclude_dates.as_ref().map_or(0, Vec::len);
        let override_ = self
            .override_
            .as_ref()
            .and_then(|o| o.end().map(|until| (o.replicas, until)));
        match (mode, tz) {
            (Some(mode), Some(tz)) if errors.is_empty() => Ok(BetaSchedule {
                tz,
                mode,
                excludes,
                listed,
                holidays: Vec::new(),
                override_,
            }),
            _ => Err(errors),
        }
    }

    /// The plan at `now`: [`Self::schedule`] then [`BetaSchedule::plan`].
    pub fn plan(&self, now: Instant) -> Result<Plan, FieldErrors> {
        self.schedule().map(|s| s.plan(now))
    }
}

/// Each window with its replicas, or None after pushing the errors of the bad ones.
fn windows_of(
    windows: &[ScaleWindow],
    tz: Tz,
    errors: &mut FieldErrors,
) -> Option<Vec<(Window, i32)>> {
    if windows.is_empty() {
        errors.push(FieldError::required(
            "spec.windows",
            "must have at least one window when given",
        ));
        return None;
    }
    let before = errors.len();
    let mut parsed = Vec::new();
    for (i, w) in windows.iter().enumerate() {
        let path = format!("spec.windows[{i}]");
        let Some((start, end)) = w.times(&path, errors) else {
            continue;
        };
        if w.days.as_ref().is_some_and(Vec::is_empty) {
            errors.push(FieldError::invalid(
                format!("{path}.days"),
                serde_json::json!([]),
                "must name at least one day when given",
            ));
            continue;
        }
        let days: Option<Vec<Weekday>> = w
            .days
            .as_ref()
            .map(|d| d.iter().map(|&d| d.into()).collect());
        match Window::new(start, end, days.as_deref(), tz) {
            Ok(window) => parsed.push((window, w.replicas.unwrap_or(DEFAULT_REPLICAS))),
            Err(e) => errors.push(FieldError::invalid(
                path,
                serde_json::Value::Null,
                e.to_string(),
            )),
        }
    }
    (errors.len() == before).then_some(parsed)
}

impl BetaSchedule {
    /// The schedule with the calendar's `holidays` excluded as well (`spec.excludeCalendar`).
    pub fn with_holidays(mut self, holidays: &[crate::scaler::calendar::Holiday]) -> Self {
        for h in holidays {
            let index = self.listed + self.holidays.len();
            self.excludes
                .push((index, ExcludeDate::Range(h.first, h.last)));
            self.holidays.push(h.summary.clone());
        }
        self
    }

    /// Its time zone.
    pub fn time_zone(&self) -> Tz {
        self.tz
    }

    /// The replicas at `now`, why, the latest boundary at or before it and the next changes.
    pub fn plan(&self, now: Instant) -> Plan {
        let edges = self.edges(now);
        let state = self.state(now);
        let next = self.transitions(now, &edges);
        let first = next.first().map(|t| t.at);
        let upto = |at: Option<Instant>| at.map(|a| format!(" until {a}")).unwrap_or_default();
        let (reason, message) = match &state.cause {
            Cause::Override { until } => (
                reason::OVERRIDE,
                format!(
                    "override holds {} replicas until {until}",
                    state.replicas.unwrap_or_default()
                ),
            ),
            Cause::Excluded { day, index } => {
                let rest = match self.mode {
                    Mode::Windows(_) => format!("outside every window{}", upto(first)),
                    Mode::Cron(_) => format!("no job fires{}", upto(first)),
                };
                let source = match index.checked_sub(self.listed) {
                    Some(i) => format!(
                        "calendar: {}",
                        self.holidays.get(i).map(String::as_str).unwrap_or_default()
                    ),
                    None => format!("excludeDates[{index}]"),
                };
                (
                    reason::EXCLUDED_DATE,
                    format!("{day} is excluded ({source}); {rest}"),
                )
            }
            Cause::Window(Some(i)) => {
                let close = match &self.mode {
                    Mode::Windows(ws) => ws.get(*i).map(|(w, _)| w.state_at(now).next_transition),
                    Mode::Cron(_) => None,
                };
                // A window also closes where an excluded day starts.
                let close = [close, next_edge(&edges, now)].into_iter().flatten().min();
                let r = state.replicas.unwrap_or_default();
                (
                    reason::WINDOW_OPEN,
                    format!("window {i} open{}; targets at {r} replicas", upto(close)),
                )
            }
            Cause::Window(None) => (
                reason::WINDOW_CLOSED,
                format!("outside every window{}", upto(first)),
            ),
            Cause::Fired(f) => (
                reason::JOB_FIRED,
                format!(
                    "job {:?} fired at {}; targets at {} replicas",
                    f.job, f.at, f.replicas
                ),
            ),
            Cause::Waiting => (
                reason::WAITING_FOR_FIRST_FIRING,
                match first {
                    Some(at) => format!("no job has fired yet; the first fires at {at}"),
                    None => "no job has fired yet".to_string(),
                },
            ),
        };
        Plan {
            replicas: state.replicas,
            reason,
            message,
            last: self.last(now, &edges),
            next,
        }
    }

    /// The replicas at `t` and why.
    fn state(&self, t: Instant) -> State {
        if let Some((replicas, until)) = self.override_ {
            if t < until {
                return State {
                    replicas: Some(replicas),
                    cause: Cause::Override { until },
                };
            }
        }
        let day = self.day_of(t);
        if let Some(index) = self.excluded(day) {
            return State {
                replicas: None,
                cause: Cause::Excluded { day, index },
            };
        }
        match &self.mode {
            Mode::Windows(ws) => {
                let open = ws
                    .iter()
                    .enumerate()
                    .filter(|(_, (w, _))| w.state_at(t).active)
                    .max_by_key(|&(i, &(_, r))| (r, Reverse(i)));
                State {
                    replicas: open.map(|(_, &(_, r))| r),
                    cause: Cause::Window(open.map(|(i, _)| i)),
                }
            }
            Mode::Cron(_) => match self.last_kept_firing(t) {
                Some(f) => State {
                    replicas: Some(f.replicas),
                    cause: Cause::Fired(f),
                },
                None => State {
                    replicas: None,
                    cause: Cause::Waiting,
                },
            },
        }
    }

    /// The next changes after `now`: each boundary where the replicas change, and every firing.
    fn transitions(&self, now: Instant, edges: &[Instant]) -> Vec<PlannedTransition> {
        let limit = now.checked_add_days(Days::new(HORIZON_DAYS)).unwrap_or(now);
        let mut out = Vec::new();
        let mut current = self.state(now).replicas;
        let mut cursor = now;
        for _ in 0..MAX_STEPS {
            let Some(at) = self.next_candidate(cursor, edges, limit) else {
                break;
            };
            if at <= cursor || at > limit {
                break;
            }
            let state = self.state(at);
            let fired = matches!(&state.cause, Cause::Fired(f) if f.at == at);
            if state.replicas != current || fired {
                out.push(PlannedTransition {
                    at,
                    replicas: state.replicas,
                });
                if out.len() == MAX_NEXT {
                    break;
                }
            }
            current = state.replicas;
            cursor = at;
        }
        out
    }

    /// The first instant after `cursor` at which the state may change.
    fn next_candidate(
        &self,
        cursor: Instant,
        edges: &[Instant],
        limit: Instant,
    ) -> Option<Instant> {
        if let Some((_, until)) = self.override_ {
            // Nothing else matters while the override holds.
            if cursor < until {
                return Some(until);
            }
        }
        let edge = next_edge(edges, cursor);
        if self.excluded(self.day_of(cursor)).is_some() {
            return edge;
        }
        let own = match &self.mode {
            Mode::Windows(ws) => ws
                .iter()
                .map(|(w, _)| w.state_at(cursor).next_transition)
                .min(),
            Mode::Cron(_) => self.next_kept_firing(cursor, limit).map(|f| f.at),
        };
        [edge, own].into_iter().flatten().min()
    }

    /// The latest boundary at or before `now`; window edges on excluded days change nothing and are left out.
    fn last(&self, now: Instant, edges: &[Instant]) -> Option<Instant> {
        let own = match &self.mode {
            Mode::Windows(ws) => ws
                .iter()
                .filter_map(|(w, _)| w.state_at(now).last_transition)
                .filter(|&b| self.excluded(self.day_of(b)).is_none())
                .max(),
            Mode::Cron(_) => self.last_kept_firing(now).map(|f| f.at),
        };
        let edge = edges.iter().rev().find(|&&e| e <= now).copied();
        let end = self.override_.map(|(_, until)| until).filter(|&u| u <= now);
        [own, edge, end].into_iter().flatten().max()
    }

    /// The latest firing at or before `t` that is not on an excluded day, jumping back over excluded runs.
    fn last_kept_firing(&self, t: Instant) -> Option<Firing> {
        let Mode::Cron(jobs) = &self.mode else {
            return None;
        };
        let floor = t.checked_sub_days(Days::new(u64::from(MAX_RUN_DAYS)))?;
        let mut cursor = t;
        for _ in 0..MAX_JUMPS {
            let f = jobs.last_firing(cursor)?;
            let day = self.day_of(f.at);
            if self.excluded(day).is_none() {
                return Some(f);
            }
            cursor = before(self.midnight(self.run_start(day)?))?;
            if cursor < floor {
                return None;
            }
        }
        None
    }

    /// The first firing after `t` and up to `limit` that is not on an excluded day, jumping over excluded runs.
    fn next_kept_firing(&self, t: Instant, limit: Instant) -> Option<Firing> {
        let Mode::Cron(jobs) = &self.mode else {
            return None;
        };
        let mut cursor = t;
        for _ in 0..MAX_JUMPS {
            let f = jobs.next_firing(cursor)?;
            if f.at > limit {
                return None;
            }
            let day = self.day_of(f.at);
            if self.excluded(day).is_none() {
                return Some(f);
            }
            cursor = before(self.midnight(self.run_end(day)?))?;
        }
        None
    }

    /// The instants from about a week before `now` to the horizon where a run of excluded days starts or ends.
    fn edges(&self, now: Instant) -> Vec<Instant> {
        if self.excludes.is_empty() {
            return Vec::new();
        }
        let today = self.day_of(now);
        let from = today
            .checked_sub_days(Days::new(EDGE_LOOKBACK_DAYS))
            .unwrap_or(today);
        let days = EDGE_LOOKBACK_DAYS + HORIZON_DAYS + 2;
        let mut prev = from.pred_opt().and_then(|d| self.excluded(d)).is_some();
        let mut out = Vec::new();
        for day in from
            .iter_days()
            .take(usize::try_from(days).unwrap_or(usize::MAX))
        {
            let excluded = self.excluded(day).is_some();
            if excluded != prev {
                out.push(self.midnight(day));
            }
            prev = excluded;
        }
        // A day skipped whole (Pacific/Apia 2011-12-30) shares its midnight with the next.
        out.dedup();
        out
    }

    /// The local date of `t` in the time zone, a day starting at its first (DST-resolved) midnight.
    fn day_of(&self, t: Instant) -> NaiveDate {
        let day = t.with_timezone(&self.tz).date_naive();
        // After a fall-back across midnight the wall clock shows the day before again; the day has begun.
        match day.succ_opt() {
            Some(next) if self.midnight(next) <= t => next,
            _ => day,
        }
    }

    /// The instant `day` starts.
    fn midnight(&self, day: NaiveDate) -> Instant {
        resolve_local(self.tz, day, NaiveTime::MIN)
    }

    /// The index in excludeDates of the first entry that excludes `day`.
    fn excluded(&self, day: NaiveDate) -> Option<usize> {
        self.excludes
            .iter()
            .find(|(_, e)| e.contains(day))
            .map(|&(i, _)| i)
    }

    /// The first day of the run of excluded days that holds `day`.
    fn run_start(&self, day: NaiveDate) -> Option<NaiveDate> {
        let mut first = day;
        for _ in 0..MAX_RUN_DAYS {
            let prev = first.pred_opt()?;
            if self.excluded(prev).is_none() {
                return Some(first);
            }
            first = prev;
        }
        None
    }

    /// The first day after `day` that is not excluded.
    fn run_end(&self, day: NaiveDate) -> Option<NaiveDate> {
        let mut next = day;
        for _ in 0..MAX_RUN_DAYS {
            next = next.succ_opt()?;
            if self.excluded(next).is_none() {
                return Some(next);
            }
        }
        None
    }
}

/// The first edge strictly after `t`.
fn next_edge(edges: &[Instant], t: Instant) -> Option<Instant> {
    edges.get(edges.partition_point(|&e| e <= t)).copied()
}

/// The last instant before `t`: firings lie on whole seconds, so searching from here finds none at `t`.
fn before(t: Instant) -> Option<Instant> {
    t.checked_sub_signed(TimeDelta::nanoseconds(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> Instant {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    fn spec(mut v: Value) -> ScalerSpec {
        v["scaleTargetRefs"] =
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]);
        serde_json::from_value(v).unwrap()
    }

    /// The plan at `now`, checked against the plan at each of its next transitions.
    fn plan(s: &ScalerSpec, now: Instant) -> Plan {
        let p = s.plan(now).unwrap();
        let mut prev = now;
        for t in &p.next {
            assert!(t.at > prev, "{:?} not after {prev}", t.at);
            assert_eq!(s.plan(t.at).unwrap().replicas, t.replicas, "at {}", t.at);
            prev = t.at;
        }
        assert!(p.last.is_none_or(|l| l <= now));
        p
    }

    fn next(p: &Plan) -> Vec<(Instant, Option<i32>)> {
        p.next.iter().map(|t| (t.at, t.replicas)).collect()
    }

    fn errors(s: &ScalerSpec) -> Vec<String> {
        s.schedule()
            .err()
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn overlapping_windows_take_the_highest_replicas() {
        let s = spec(json!({"windows": [
            {"start": 9, "end": 17, "replicas": 3},
            {"start": "12:00", "end": 20, "replicas": 5}
        ]}));
        let p = plan(&s, utc(2026, 6, 1, 10, 0));
        assert_eq!((p.replicas, p.reason), (Some(3), reason::WINDOW_OPEN));
        assert_eq!(
            p.message,
            "window 0 open until 2026-06-01 17:00:00 UTC; targets at 3 replicas"
        );
        assert_eq!(p.last, Some(utc(2026, 6, 1, 9, 0)));
        assert_eq!(
            next(&p),
            [
                (utc(2026, 6, 1, 12, 0), Some(5)),
                (utc(2026, 6, 1, 20, 0), None),
                (utc(2026, 6, 2, 9, 0), Some(3)),
            ]
        );
        let p = plan(&s, utc(2026, 6, 1, 13, 0));
        assert_eq!(
            (p.replicas, p.last),
            (Some(5), Some(utc(2026, 6, 1, 12, 0)))
        );
        assert!(p
            .message
            .starts_with("window 1 open until 2026-06-01 20:00:00 UTC"));
        // Window 0 closing under window 1 changes nothing.
        assert_eq!(next(&p)[0], (utc(2026, 6, 1, 20, 0), None));
        let p = plan(&s, utc(2026, 6, 1, 21, 0));
        assert_eq!((p.replicas, p.reason), (None, reason::WINDOW_CLOSED));
        assert_eq!(
            p.message,
            "outside every window until 2026-06-02 09:00:00 UTC"
        );
    }

    #[test]
    fn a_weekend_to_24_00_has_no_gap_at_midnight() {
        // kube-downscaler's `Sat-Sun 00:00-24:00`. 2026-06-06 is a Saturday.
        let weekend = |end: Value| {
            spec(json!({
                "timeZone": "Europe/Berlin",
                "windows": [{"days": ["Sat", "Sun"], "start": "00:00", "end": end, "replicas": 0}]
            }))
        };
        for end in [json!("24:00"), json!(24)] {
            let s = weekend(end.clone());
            assert!(s.validate(utc(2026, 6, 1, 0, 0)).is_empty(), "{end}");
            // 23:59:30 on Saturday in Berlin, then just before Sunday's end of day.
            for now in [utc(2026, 6, 6, 21, 59), utc(2026, 6, 7, 21, 59)] {
                let p = plan(&s, now);
                assert_eq!(p.replicas, Some(0), "{end} at {now}");
                // Monday 00:00 in Berlin is the next change.
                assert_eq!(next(&p)[0], (utc(2026, 6, 7, 22, 0), None), "{end}");
            }
        }
        // What "23:59" gives instead: a minute outside the window every night.
        let p = plan(&weekend(json!("23:59")), utc(2026, 6, 6, 21, 59));
        assert_eq!(p.replicas, None);
    }

    #[test]
    fn an_excluded_day_closes_a_window_at_local_midnight_and_reopens_it_after() {
        let s = spec(json!({
            "timeZone": "Europe/Berlin",
            "windows": [{"start": 22, "end": 6, "replicas": 2}],
            "excludeDates": ["2026-12-24"]
        }));
        // 23:00 in Berlin on the 23rd.
        let p = plan(&s, utc(2026, 12, 23, 22, 0));
        assert_eq!(p.replicas, Some(2));
        assert_eq!(
            p.message,
            "window 0 open until 2026-12-23 23:00:00 UTC; targets at 2 replicas"
        );
        assert_eq!(
            next(&p),
            [
                (utc(2026, 12, 23, 23, 0), None),
                // The window opened at 22:00 on the 24th still runs at midnight.
                (utc(2026, 12, 24, 23, 0), Some(2)),
                (utc(2026, 12, 25, 5, 0), None),
            ]
        );
        let p = plan(&s, utc(2026, 12, 24, 12, 0));
        assert_eq!((p.replicas, p.reason), (None, reason::EXCLUDED_DATE));
        assert_eq!(
            p.message,
            "2026-12-24 is excluded (excludeDates[0]); outside every window until 2026-12-24 23:00:00 UTC"
        );
        assert_eq!(p.last, Some(utc(2026, 12, 23, 23, 0)));
        // The window edges of the excluded day itself are not boundaries.
        let p = plan(&s, utc(2026, 12, 24, 22, 30));
        assert_eq!(p.last, Some(utc(2026, 12, 23, 23, 0)));
        let p = plan(&s, utc(2026, 12, 24, 23, 30));
        assert_eq!(
            (p.replicas, p.last),
            (Some(2), Some(utc(2026, 12, 24, 23, 0)))
        );
    }

    #[test]
    fn ranges_and_yearly_dates_are_excluded() {
        let s = spec(json!({
            "windows": [{"start": 9, "end": 17}],
            "excludeDates": ["nonsense", "2026-12-24..2026-12-26", "--12-25"]
        }));
        let p = plan(&s, utc(2026, 12, 23, 10, 0));
        assert_eq!(
            next(&p),
            [
                (utc(2026, 12, 23, 17, 0), None),
                (utc(2026, 12, 27, 9, 0), Some(1)),
                (utc(2026, 12, 27, 17, 0), None),
            ]
        );
        let p = plan(&s, utc(2026, 12, 25, 10, 0));
        assert!(p
            .message
            .starts_with("2026-12-25 is excluded (excludeDates[1])"));
        let p = plan(&s, utc(2026, 12, 26, 16, 0));
        assert_eq!(p.reason, reason::EXCLUDED_DATE);
        let p = plan(&s, utc(2027, 12, 25, 10, 0));
        assert!(p
            .message
            .starts_with("2027-12-25 is excluded (excludeDates[2])"));
        assert_eq!(plan(&s, utc(2027, 12, 24, 10, 0)).replicas, Some(1));
    }

    #[test]
    fn an_override_holds_until_its_end() {
        let mut v = json!({
            "windows": [{"start": 9, "end": 17, "replicas": 3}],
            "override": {"replicas": 5, "until": "2026-06-01T12:00:00Z"}
        });
        let s = spec(v.clone());
        for now in [utc(2026, 6, 1, 8, 0), utc(2026, 6, 1, 10, 0)] {
            let p = plan(&s, now);
            assert_eq!((p.replicas, p.reason), (Some(5), reason::OVERRIDE));
            assert_eq!(
                p.message,
                "override holds 5 replicas until 2026-06-01 12:00:00 UTC"
            );
            assert_eq!(
                next(&p)[..2],
                [
                    (utc(2026, 6, 1, 12, 0), Some(3)),
                    (utc(2026, 6, 1, 17, 0), None)
                ]
            );
        }
        let p = plan(&s, utc(2026, 6, 1, 12, 30));
        assert_eq!(
            (p.replicas, p.last),
            (Some(3), Some(utc(2026, 6, 1, 12, 0)))
        );
        // Ending outside the window, the override hands over to outside.
        v["override"]["until"] = json!("2026-06-01T20:00:00Z");
        let p = plan(&spec(v), utc(2026, 6, 1, 10, 0));
        assert_eq!(next(&p)[0], (utc(2026, 6, 1, 20, 0), None));
    }

    #[test]
    fn an_override_applies_on_an_excluded_day() {
        let s = spec(json!({
            "windows": [{"start": 9, "end": 17, "replicas": 3}],
            "excludeDates": ["2026-06-01"],
            "override": {"replicas": 5, "until": "2026-06-01T12:00:00Z"}
        }));
        let p = plan(&s, utc(2026, 6, 1, 10, 0));
        assert_eq!((p.replicas, p.reason), (Some(5), reason::OVERRIDE));
        assert_eq!(
            next(&p),
            [
                (utc(2026, 6, 1, 12, 0), None),
                (utc(2026, 6, 2, 9, 0), Some(3)),
                (utc(2026, 6, 2, 17, 0), None),
            ]
        );
    }

    fn cron_spec() -> ScalerSpec {
        spec(json!({
            "jobs": [
                {"name": "up", "schedule": "0 8 * * *", "replicas": 4},
                {"name": "down", "schedule": "0 20 * * *", "replicas": 1}
            ],
            "excludeDates": ["2026-12-24"]
        }))
    }

    #[test]
    fn no_job_fires_on_an_excluded_day() {
        let s = cron_spec();
        let p = plan(&s, utc(2026, 12, 23, 21, 0));
        assert_eq!((p.replicas, p.reason), (Some(1), reason::JOB_FIRED));
        assert_eq!(
            next(&p),
            [
                (utc(2026, 12, 24, 0, 0), None),
                (utc(2026, 12, 25, 0, 0), Some(1)),
                (utc(2026, 12, 25, 8, 0), Some(4)),
            ]
        );
        let p = plan(&s, utc(2026, 12, 24, 10, 0));
        assert_eq!((p.replicas, p.reason), (None, reason::EXCLUDED_DATE));
        assert_eq!(
            p.message,
            "2026-12-24 is excluded (excludeDates[0]); no job fires until 2026-12-25 00:00:00 UTC"
        );
        // The day after: the last firing before the excluded day, applied again at midnight.
        let p = plan(&s, utc(2026, 12, 25, 7, 0));
        assert_eq!((p.replicas, p.reason), (Some(1), reason::JOB_FIRED));
        assert_eq!(
            p.message,
            "job \"down\" fired at 2026-12-23 20:00:00 UTC; targets at 1 replicas"
        );
        assert_eq!(p.last, Some(utc(2026, 12, 25, 0, 0)));
    }

    #[test]
    fn every_firing_is_a_transition_even_at_the_same_replicas() {
        let s = spec(json!({"jobs": [
            {"name": "a", "schedule": "0 * * * *", "replicas": 2}
        ]}));
        let p = plan(&s, utc(2026, 6, 1, 10, 30));
        assert_eq!(
            next(&p),
            [
                (utc(2026, 6, 1, 11, 0), Some(2)),
                (utc(2026, 6, 1, 12, 0), Some(2)),
                (utc(2026, 6, 1, 13, 0), Some(2)),
            ]
        );
        assert_eq!(p.last, Some(utc(2026, 6, 1, 10, 0)));
    }

    #[test]
    fn a_job_that_only_fires_on_excluded_days_never_fires() {
        let s = spec(json!({
            "jobs": [{"name": "xmas", "schedule": "0 0 25 12 *", "replicas": 2}],
            "excludeDates": ["--12-25"]
        }));
        let p = plan(&s, utc(2026, 6, 1, 0, 0));
        assert_eq!(
            (p.replicas, p.reason),
            (None, reason::WAITING_FOR_FIRST_FIRING)
        );
        assert_eq!(p.message, "no job has fired yet");
        assert_eq!(p.next, []);
    }

    #[test]
    fn boundaries_that_change_nothing_end_the_search_at_the_horizon() {
        // Two windows that together cover every day at the same replicas.
        let s = spec(json!({"windows": [
            {"start": 0, "end": 12, "replicas": 2},
            {"start": 12, "end": 0, "replicas": 2}
        ]}));
        let p = plan(&s, utc(2026, 6, 1, 10, 0));
        assert_eq!((p.replicas, p.next), (Some(2), vec![]));
    }

    #[test]
    fn a_start_in_the_spring_forward_gap_opens_after_it() {
        // 2026-03-29 02:00 CET jumps to 03:00 CEST in Berlin, at 01:00Z.
        let s = spec(json!({
            "timeZone": "Europe/Berlin",
            "windows": [{"start": "02:30", "end": 5, "replicas": 2}]
        }));
        let p = plan(&s, utc(2026, 3, 29, 0, 30));
        assert_eq!(p.replicas, None);
        assert_eq!(
            next(&p)[..2],
            [
                (utc(2026, 3, 29, 1, 0), Some(2)),
                (utc(2026, 3, 29, 3, 0), None)
            ]
        );
        assert_eq!(plan(&s, utc(2026, 3, 29, 1, 0)).replicas, Some(2));
    }

    #[test]
    fn errors_name_their_fields() {
        let s = spec(json!({
            "timeZone": "Mars/Olympus",
            "windows": [
                {"start": 25, "end": "7:00"},
                {"start": 9, "end": "09:00"},
                {"start": 1, "end": 2, "days": []}
            ]
        }));
        assert_eq!(
            errors(&s),
            [
                "spec.timeZone: Invalid value: \"Mars/Olympus\": must be an IANA time zone name such as \"Europe/Berlin\"",
                "spec.windows[0].start: Invalid value: 25: must be an hour 0-23 or \"HH:MM\"",
                "spec.windows[0].end: Invalid value: \"7:00\": must be an hour 0-24 or \"HH:MM\" (\"24:00\": the end of the day)",
                "spec.windows[1].end: Invalid value: \"09:00\": must differ from spec.windows[1].start",
                "spec.windows[2].days: Invalid value: []: must name at least one day when given",
            ]
        );
        let s = spec(json!({"jobs": [
            {"name": "a", "schedule": "0 8 * * *", "replicas": 1},
            {"name": "b", "schedule": "nope", "replicas": 1}
        ]}));
        let e = errors(&s);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("spec.jobs[1].schedule: Invalid value: \"nope\""),
            "{e:?}"
        );
        let s = spec(json!({
            "windows": [{"start": 9, "end": 17}],
            "jobs": [{"name": "a", "schedule": "0 8 * * *", "replicas": 1}]
        }));
        assert_eq!(
            errors(&s),
            ["spec.windows: Forbidden: may not be combined with spec.jobs"]
        );
    }

    const ZONES: [&str; 4] = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
    ];
    const SCHEDULES: [&str; 6] = [
        "0 8 * * *",
        "30 2 * * *",
        "0 */6 * * *",
        "15 1 * * 0",
        "0 0 1 * *",
        "0 12 * * 1-5",
    ];
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

    fn clock() -> impl Strategy<Value = Value> {
        (0u32..24, prop::sample::select(vec![0u32, 30, 45]))
            .prop_map(|(h, m)| json!(format!("{h:02}:{m:02}")))
    }

    fn window() -> impl Strategy<Value = Value> {
        (
            clock(),
            clock(),
            prop::option::of(prop::sample::subsequence(DAYS.to_vec(), 1..=7)),
            prop::option::of(0i32..4),
        )
            .prop_map(|(start, end, days, replicas)| {
                let mut w = json!({"start": start, "end": end});
                if let Some(d) = days {
                    w["days"] = json!(d);
                }
                if let Some(r) = replicas {
                    w["replicas"] = json!(r);
                }
                w
            })
            .prop_filter("start differs from end", |w| w["start"] != w["end"])
    }

    fn exclude() -> impl Strategy<Value = String> {
        let day = |n: u64| {
            NaiveDate::from_ymd_opt(2026, 1, 1)
                .and_then(|d| d.checked_add_days(Days::new(n)))
                .unwrap()
        };
        prop_oneof![
            (0u64..400).prop_map(move |n| day(n).to_string()),
            (0u64..400, 0u64..5).prop_map(move |(n, len)| format!("{}..{}", day(n), day(n + len))),
            (0u64..365).prop_map(move |n| day(n).format("--%m-%d").to_string()),
        ]
    }

    fn any_spec() -> impl Strategy<Value = ScalerSpec> {
        let mode = prop_oneof![
            prop::collection::vec(window(), 1..4).prop_map(|w| json!({"windows": w})),
            prop::collection::vec((prop::sample::select(SCHEDULES.to_vec()), 0i32..4), 1..4).prop_map(
                |jobs| {
                    let jobs: Vec<Value> = jobs
                        .iter()
                        .enumerate()
                        .map(|(i, (s, r))| json!({"name": format!("j{i}"), "schedule": s, "replicas": r}))
                        .collect();
                    json!({"jobs": jobs})
                }
            ),
        ];
        (
            mode,
            prop::sample::select(ZONES.to_vec()),
            prop::collection::vec(exclude(), 0..4),
            prop::option::of((0i64..30 * 24, 0i32..4)),
        )
            .prop_map(|(mut v, tz, excludes, over)| {
                v["timeZone"] = json!(tz);
                v["excludeDates"] = json!(excludes);
                if let Some((hours, replicas)) = over {
                    let until = utc(2026, 3, 1, 0, 0) + TimeDelta::hours(hours);
                    v["override"] = json!({"replicas": replicas, "until": until.to_rfc3339()});
                }
                spec(v)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn every_next_transition_changes_the_plan(s in any_spec(), secs in 0i64..365 * 86_400) {
            let now = utc(2026, 1, 1, 0, 0) + TimeDelta::seconds(secs);
            let schedule = s.schedule().unwrap();
            let p = schedule.plan(now);
            let mut prev = now;
            let mut held = p.replicas;
            for t in &p.next {
                prop_assert!(t.at > prev, "{} not after {}", t.at, prev);
                // No change is missed in between.
                for k in 1..4 {
                    let between = prev + (t.at - prev) * k / 4;
                    prop_assert_eq!(schedule.plan(between).replicas, held, "at {}", between);
                }
                held = t.replicas;
                prop_assert_eq!(schedule.plan(t.at).replicas, t.replicas, "at {}", t.at);
                let fired = matches!(schedule.state(t.at).cause, Cause::Fired(f) if f.at == t.at);
                if !fired {
                    let before = schedule.plan(t.at - TimeDelta::seconds(1)).replicas;
                    prop_assert_ne!(before, t.replicas, "at {}", t.at);
                }
                prev = t.at;
            }
            prop_assert!(p.last.is_none_or(|l| l <= now));
        }
    }
}
