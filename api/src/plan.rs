//! What a v1beta1 Scaler's schedule says at an instant: windows or cron jobs, with excluded dates
//! and an override, and the next changes. Pure: the controller calls it once per reconcile.
use std::cmp::Reverse;

use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeDelta, Weekday};
use chrono_tz::Tz;

use crate::field::{FieldError, FieldErrors};
use crate::keys::reason;
use crate::rules::scaler::{CLOCK, SAME_START_AND_END};
use crate::scaler::{job_error, parse_time_zone};
use crate::scaler_v1beta1::{ExcludeDate, ScalerSpec, DEFAULT_REPLICAS};
use crate::schedule::{resolve_local, CronSchedule, Firing, Instant, Window, FIRING_HORIZON_YEARS};

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
    /// The parsed excludeDates, each with its index in the spec.
    excludes: Vec<(usize, ExcludeDate)>,
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
    Override,
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
        let excludes = self
            .exclude_dates
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, s)| ExcludeDate::parse(s).ok().map(|e| (i, e)))
            .collect();
        let override_ = self.override_.as_ref().and_then(|o| {
            DateTime::from_timestamp(o.until.0.as_second(), 0).map(|until| (o.replicas, until))
        });
        match (mode, tz) {
            (Some(mode), Some(tz)) if errors.is_empty() => Ok(BetaSchedule {
                tz,
                mode,
                excludes,
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
    windows: &[crate::scaler_v1beta1::ScaleWindow],
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
        let json = |v| serde_json::to_value(v).unwrap_or_default();
        let start = w.start.to_time();
        let end = w.end.to_time();
        if start.is_none() {
            errors.push(FieldError::invalid(
                format!("{path}.start"),
                json(&w.start),
                CLOCK.message,
            ));
        }
        if end.is_none() {
            errors.push(FieldError::invalid(
                format!("{path}.end"),
                json(&w.end),
                CLOCK.message,
            ));
        }
        let (Some(start), Some(end)) = (start, end) else {
            continue;
        };
        if start == end {
            errors.push(FieldError::invalid(
                format!("{path}.end"),
                json(&w.end),
                SAME_START_AND_END.replace("spec.start", &format!("{path}.start")),
            ));
            continue;
        }
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
    /// The replicas at `now`, why, the latest boundary at or before it and the next changes.
    pub fn plan(&self, now: Instant) -> Plan {
        let edges = self.edges(now);
        let state = self.state(now);
        let next = self.transitions(now, &edges);
        let first = next.first().map(|t| t.at);
        let until = |at: Option<Instant>| at.map(|a| format!(" until {a}")).unwrap_or_default();
        let (reason, message) = match &state.cause {
            Cause::Override => {
                let (r, end) = self.override_.unwrap_or_default();
                (
                    reason::OVERRIDE,
                    format!("override holds {r} replicas until {end}"),
                )
            }
            Cause::Excluded { day, index } => {
                let rest = match self.mode {
                    Mode::Windows(_) => format!("outside every window{}", until(first)),
                    Mode::Cron(_) => format!("no job fires{}", until(first)),
                };
                (
                    reason::EXCLUDED_DATE,
                    format!("{day} is excluded (excludeDates[{index}]); {rest}"),
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
                    format!("window {i} open{}; targets at {r} replicas", until(close)),
                )
            }
            Cause::Window(None) => (
                reason::WINDOW_CLOSED,
                format!("outside every window{}", until(first)),
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
                    cause: Cause::Override,
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
