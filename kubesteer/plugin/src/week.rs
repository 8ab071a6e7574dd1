//! A Scaler's schedule over some days as a grid: one row per local day in its timeZone, two
//! cells per hour, each cell the replicas the schedule sets then. Every answer comes from the
//! api crate's plan ([`kubesteer_api::scaler::plan`]), the controller's own, so the picture and the
//! controller never disagree; this module only samples it.
use chrono::{Datelike, Days, NaiveDate, NaiveTime, Offset, TimeDelta, TimeZone};
use chrono_tz::Tz;
use kubesteer_api::field::FieldErrors;
use kubesteer_api::keys::reason;
use kubesteer_api::scaler::calendar::Holiday;
use kubesteer_api::scaler::plan::{BetaSchedule, MAX_NEXT};
use kubesteer_api::scaler::schedule::{resolve_local, Instant};
use kubesteer_api::scaler::v1beta1::ExcludeDate;
use kubesteer_api::ScalerSpec;

/// Cells per hour: 48 across a day fit an 80-column terminal beside the day's label.
pub const CELLS_PER_HOUR: u32 = 2;
const CELL_MINUTES: u32 = 60 / CELLS_PER_HOUR;
/// The most days one preview shows.
pub const MAX_DAYS: u32 = 62;

/// What the targets have during a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Outside every window without outsideReplicas (or before a first cron firing): the
    /// targets keep, or get back, their own replicas.
    Own,
    Replicas(i32),
}

/// One half hour of a day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// The wall-clock time the cell starts at.
    pub time: NaiveTime,
    /// The highest level in force during the cell; None when its wall-clock time does not
    /// exist that day (skipped by a spring-forward gap).
    pub level: Option<Level>,
    /// Whether the override holds during (part of) the cell.
    pub override_: bool,
    /// Whether `now` falls in the cell.
    pub now: bool,
}

/// A day whose length is not 24 hours: the clocks change in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockChange {
    pub hours: i64,
    /// The wall-clock time the clocks show before the change and right after it.
    pub from: NaiveTime,
    pub to: NaiveTime,
}

/// "23 h: clocks go forward 02:00→03:00", as the week's text and SVG note it.
impl std::fmt::Display for ClockChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let way = if self.to > self.from {
            "forward"
        } else {
            "back"
        };
        write!(
            f,
            "{} h: clocks go {way} {}→{}",
            self.hours,
            self.from.format("%H:%M"),
            self.to.format("%H:%M")
        )
    }
}

/// One local day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub day: NaiveDate,
    pub cells: Vec<Cell>,
    /// What makes it a holiday: the first excludeDates entry (`excludeDates[0] "2026-12-24"`),
    /// else the calendar's event (`calendar: Christmas`).
    pub excluded: Option<String>,
    pub clock_change: Option<ClockChange>,
    pub today: bool,
}

/// One change of the replicas, as the controller makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub at: Instant,
    /// The replicas from then on; None: outsideReplicas, or the targets' own.
    pub replicas: Option<i32>,
    /// The Ready reason from then on (WindowOpen, WindowClosed, ExcludedDate, JobFired, ...).
    pub reason: &'static str,
    /// Whether the override ends here.
    pub override_ends: bool,
}

/// The picture of some days of a Scaler's schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Week {
    pub tz: Tz,
    pub now: Instant,
    pub rows: Vec<Row>,
    pub changes: Vec<Change>,
    pub outside_replicas: Option<i32>,
    /// The override as (replicas, until), when it still holds at some point of the picture.
    pub override_: Option<(i32, Instant)>,
    pub suspended: bool,
    pub cron: bool,
}

impl Week {
    /// `days` local days of `spec`'s schedule from the local date `from`, with its calendar's
    /// `holidays`; `now` marks its cell. The errors are the schedule's, on the paths validation
    /// uses.
    pub fn of(
        spec: &ScalerSpec,
        holidays: &[Holiday],
        from: NaiveDate,
        days: u32,
        now: Instant,
    ) -> Result<Self, FieldErrors> {
        let schedule = spec.schedule()?.with_holidays(holidays);
        // The override holds from now (its start is nobody's record) until its end; the days
        // before now show the schedule alone.
        let base = ScalerSpec {
            override_: None,
            ..spec.clone()
        }
        .schedule()?
        .with_holidays(holidays);
        // schedule() has parsed the zone already; this cannot fail after it.
        let tz: Tz = spec.time_zone().parse().unwrap_or(Tz::UTC);
        let days = days.clamp(1, MAX_DAYS);
        let start = resolve_local(tz, from, NaiveTime::MIN);
        let last = from
            .checked_add_days(Days::new(u64::from(days)))
            .unwrap_or(from);
        let end = resolve_local(tz, last, NaiveTime::MIN);
        let override_ = spec.override_.as_ref().and_then(|o| {
            let until = chrono::DateTime::from_timestamp(o.until.0.as_second(), 0)?;
            (until > start && until > now).then_some((o.replicas, until))
        });
        let (segments, mut changes) = segments(&base, start, end);
        if let Some((replicas, _)) = override_ {
            changes.retain(|c| c.at < now);
            if start <= now && now < end {
                changes.push(Change {
                    at: now,
                    replicas: Some(replicas),
                    reason: reason::OVERRIDE,
                    override_ends: false,
                });
            }
            let (_, held) = self::segments(&schedule, now.max(start), end);
            changes.extend(held);
        }
        let outside = spec.outside_replicas;
        let level = |replicas: Option<i32>| match (replicas, outside) {
            (Some(r), _) | (None, Some(r)) => Level::Replicas(r),
            (None, None) => Level::Own,
        };
        let today = now.with_timezone(&tz).date_naive();
        let mut excludes: Vec<(String, ExcludeDate)> = spec
            .exclude_dates
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, s)| {
                let note = format!("excludeDates[{i}] {s:?}");
                ExcludeDate::parse(s).ok().map(|e| (note, e))
            })
            .collect();
        excludes.extend(holidays.iter().map(|h| {
            let note = format!("calendar: {}", h.summary);
            (note, ExcludeDate::Range(h.first, h.last))
        }));
        let mut rows = Vec::new();
        for day in from.iter_days().take(days as usize) {
            let Some(next) = day.succ_opt() else { break };
            let mut cells = Vec::new();
            for i in 0..24 * CELLS_PER_HOUR {
                let time = NaiveTime::from_hms_opt(
                    i / CELLS_PER_HOUR,
                    (i % CELLS_PER_HOUR) * CELL_MINUTES,
                    0,
                )
                .unwrap_or(NaiveTime::MIN);
                let a = resolve_local(tz, day, time);
                let b = match i + 1 {
                    n if n == 24 * CELLS_PER_HOUR => resolve_local(tz, next, NaiveTime::MIN),
                    n => resolve_local(
                        tz,
                        day,
                        NaiveTime::from_hms_opt(
                            n / CELLS_PER_HOUR,
                            (n % CELLS_PER_HOUR) * CELL_MINUTES,
                            0,
                        )
                        .unwrap_or(NaiveTime::MIN),
                    ),
                };
                let cell = if b <= a {
                    Cell {
                        time,
                        level: None,
                        override_: false,
                        now: false,
                    }
                } else {
                    Cell {
                        time,
                        level: highest(&segments, a, b).map(level),
                        override_: override_.is_some_and(|(_, until)| b > now && a < until),
                        now: a <= now && now < b,
                    }
                };
                cells.push(cell);
            }
            let excluded = excludes
                .iter()
                .find(|(_, e)| e.contains(day))
                .map(|(note, _)| note.clone());
            rows.push(Row {
                day,
                clock_change: clock_change(tz, day, next, &cells),
                cells,
                excluded,
                today: day == today,
            });
        }
        Ok(Week {
            tz,
            now,
            rows,
            changes,
            outside_replicas: outside,
            override_,
            suspended: spec.suspend(),
            cron: spec.is_cron(),
        })
    }

    /// The highest replicas the picture shows anywhere, for scaling the levels.
    pub fn max_replicas(&self) -> i32 {
        self.rows
            .iter()
            .flat_map(|r| &r.cells)
            .filter_map(|c| match c.level {
                Some(Level::Replicas(r)) => Some(r),
                _ => None,
            })
            .chain(self.override_.map(|(r, _)| r))
            .max()
            .unwrap_or(0)
    }

    /// Every level the picture shows, lowest first.
    pub fn levels(&self) -> Vec<Level> {
        let mut levels: Vec<Level> = self
            .rows
            .iter()
            .flat_map(|r| &r.cells)
            .filter(|c| !c.override_)
            .filter_map(|c| c.level)
            .collect();
        levels.sort();
        levels.dedup();
        levels
    }

    /// Whether some cell's wall-clock time does not exist.
    pub fn has_gap(&self) -> bool {
        self.rows
            .iter()
            .flat_map(|r| &r.cells)
            .any(|c| c.level.is_none())
    }
}

/// The replicas from `start` to `end`: each segment as its start and replicas (the first at
/// `start`), and the changes within, each asked of the plan at its instant.
fn segments(
    schedule: &BetaSchedule,
    start: Instant,
    end: Instant,
) -> (Vec<(Instant, Option<i32>)>, Vec<Change>) {
    let first = schedule.plan(start);
    let mut segments = vec![(start, first.replicas)];
    let mut changes = Vec::new();
    let mut plan = first;
    // Each plan lists the next MAX_NEXT changes; a full list means there may be more.
    loop {
        let full = plan.next.len() == MAX_NEXT;
        let mut cursor = None;
        for t in &plan.next {
            if t.at >= end {
                return (segments, changes);
            }
            let then = schedule.plan(t.at);
            let override_ends = then.reason != reason::OVERRIDE
                && schedule
                    .plan(t.at - TimeDelta::seconds(1))
                    .reason
                    .eq(reason::OVERRIDE);
            segments.push((t.at, t.replicas));
            changes.push(Change {
                at: t.at,
                replicas: t.replicas,
                reason: then.reason,
                override_ends,
            });
            cursor = Some(t.at);
        }
        match cursor {
            Some(at) if full => plan = schedule.plan(at),
            _ => return (segments, changes),
        }
    }
}

/// The highest replicas in force during `[a, b)`; outside (None) counts lowest.
fn highest(segments: &[(Instant, Option<i32>)], a: Instant, b: Instant) -> Option<Option<i32>> {
    let first = segments
        .partition_point(|&(at, _)| at <= a)
        .checked_sub(1)?;
    segments[first..]
        .iter()
        .take_while(|&&(at, _)| at == segments[first].0 || at < b)
        .map(|&(_, r)| r)
        .max_by_key(|r| r.map_or(-1, i64::from))
}

/// The change of the clocks on `day`, when it is not 24 hours long.
fn clock_change(tz: Tz, day: NaiveDate, next: NaiveDate, cells: &[Cell]) -> Option<ClockChange> {
    let length = resolve_local(tz, next, NaiveTime::MIN) - resolve_local(tz, day, NaiveTime::MIN);
    let hours = length.num_hours();
    if length == TimeDelta::hours(24) {
        return None;
    }
    let offset = |d: NaiveDate| {
        let at = resolve_local(tz, d, NaiveTime::MIN);
        i64::from(
            tz.offset_from_utc_datetime(&at.naive_utc())
                .fix()
                .local_minus_utc(),
        )
    };
    let shift = TimeDelta::seconds(offset(next) - offset(day));
    let (from, to) = if shift > TimeDelta::zero() {
        // Forward: the first time that does not exist, and where the clocks jump to.
        let gap = cells.iter().find(|c| c.level.is_none())?.time;
        (gap, gap + shift)
    } else {
        // Back: the cell that lasts longer than its width ends where the clocks go back.
        let i = cells.iter().enumerate().position(|(i, c)| {
            let b = cells.get(i + 1).map_or(NaiveTime::MIN, |n| n.time);
            let a = resolve_local(tz, day, c.time);
            let end = if b == NaiveTime::MIN {
                resolve_local(tz, next, b)
            } else {
                resolve_local(tz, day, b)
            };
            end - a > TimeDelta::minutes(i64::from(CELL_MINUTES))
        })?;
        let back = cells.get(i + 1).map_or(NaiveTime::MIN, |n| n.time);
        (back, back + shift)
    };
    Some(ClockChange { hours, from, to })
}

/// The local date of `at` in `tz`.
pub fn local_date(tz: Tz, at: Instant) -> NaiveDate {
    at.with_timezone(&tz).date_naive()
}

/// `Mon 23 Mar`, as the rows are labelled.
pub fn day_label(day: NaiveDate) -> String {
    format!("{} {:02} {}", day.weekday(), day.day(), month(day.month()))
}

fn month(m: u32) -> &'static str {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    MONTHS
        .get(m.saturating_sub(1) as usize)
        .copied()
        .unwrap_or("?")
}

/// `Mon 23 Mar 08:00 CET`: an instant as the Scaler's clock shows it.
pub fn local_time(tz: Tz, at: Instant) -> String {
    let local = at.with_timezone(&tz);
    format!(
        "{} {}",
        day_label(local.date_naive()),
        local.format("%H:%M %Z")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ScalerSpec {
        let mut v = v;
        v["scaleTargetRefs"] =
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]);
        serde_json::from_value(v).unwrap_or_default()
    }

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap_or_default()
    }

    #[test]
    fn a_cell_takes_the_highest_level_in_it_and_outside_counts_lowest() {
        let s = spec(json!({"windows": [
            {"start": "09:10", "end": "09:20", "replicas": 4},
            {"start": 12, "end": 13, "replicas": 0}
        ]}));
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 9, 15, 0).unwrap();
        let w = Week::of(&s, &[], date(2026, 6, 1), 1, now).unwrap();
        let cells = &w.rows[0].cells;
        assert_eq!(cells[17].level, Some(Level::Own));
        assert_eq!(cells[18].level, Some(Level::Replicas(4)));
        assert!(cells[18].now && !cells[19].now);
        assert_eq!(cells[19].level, Some(Level::Own));
        assert_eq!(cells[24].level, Some(Level::Replicas(0)));
        assert_eq!(cells[26].level, Some(Level::Own));
        assert_eq!(w.changes.len(), 4);
        assert_eq!(
            w.levels(),
            [Level::Own, Level::Replicas(0), Level::Replicas(4)]
        );
    }

    #[test]
    fn more_changes_than_one_plan_lists_are_all_found() {
        let s = spec(
            json!({"windows": [{"start": 9, "end": 17, "replicas": 2}], "outsideReplicas": 1}),
        );
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).unwrap();
        let w = Week::of(&s, &[], date(2026, 6, 1), 7, now).unwrap();
        assert_eq!(w.changes.len(), 14);
        assert!(w.changes.windows(2).all(|p| p[0].at < p[1].at));
        assert_eq!(w.rows[3].cells[0].level, Some(Level::Replicas(1)));
    }

    #[test]
    fn the_days_the_clocks_change_say_so() {
        let s = spec(
            json!({"timeZone": "Europe/Berlin", "windows": [{"start": 1, "end": 4, "replicas": 2}]}),
        );
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        let w = Week::of(&s, &[], date(2026, 3, 29), 1, now).unwrap();
        let hm = |h, m| NaiveTime::from_hms_opt(h, m, 0).unwrap_or_default();
        assert_eq!(
            w.rows[0].clock_change,
            Some(ClockChange {
                hours: 23,
                from: hm(2, 0),
                to: hm(3, 0)
            })
        );
        assert_eq!(w.rows[0].cells[4].level, None);
        assert_eq!(w.rows[0].cells[5].level, None);
        assert_eq!(w.rows[0].cells[6].level, Some(Level::Replicas(2)));
        let w = Week::of(&s, &[], date(2026, 10, 25), 1, now).unwrap();
        assert_eq!(
            w.rows[0].clock_change,
            Some(ClockChange {
                hours: 25,
                from: hm(3, 0),
                to: hm(2, 0)
            })
        );
    }
}
