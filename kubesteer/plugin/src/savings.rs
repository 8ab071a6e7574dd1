//! `savings`: what each Scaler saved over the last days (pods, CPU and memory requests not run),
//! from its status (`status.savings`, kept by the controller; the api crate counts the time
//! since it was last written), as a table or an SVG chart of the days. A dry run's potential
//! savings are told apart.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::NaiveDate;
use chrono_tz::Tz;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kubesteer_api::scaler::savings::{Rate, Saved, Savings, DAYS_KEPT};
use kubesteer_api::scaler::schedule::Instant;
use kubesteer_api::Scaler;

use crate::cluster::Connection;
use crate::preview::Output;
use crate::svg::escape;
use crate::table::table;
use crate::week::local_date;
use crate::{Error, Result};

const SECONDS_PER_DAY: u64 = 86_400;

/// `--since`: a whole number of days, 1 to [`DAYS_KEPT`] (what a status keeps).
pub fn parse_since(text: &str) -> std::result::Result<usize, String> {
    let refuse = || {
        format!("{text:?}: give whole days from 1d to {DAYS_KEPT}d (status.savings keeps {DAYS_KEPT} days), e.g. 7d")
    };
    let d: Duration = humantime::parse_duration(text).map_err(|_| refuse())?;
    let days = d.as_secs() / SECONDS_PER_DAY;
    if !d.as_secs().is_multiple_of(SECONDS_PER_DAY) || d.subsec_nanos() != 0 {
        return Err(refuse());
    }
    match usize::try_from(days) {
        Ok(n) if (1..=DAYS_KEPT).contains(&n) => Ok(n),
        _ => Err(refuse()),
    }
}

/// One Scaler's savings, counted to now.
struct Row {
    namespace: String,
    name: String,
    savings: Savings,
    /// The days of the span, in its time zone.
    saved: Saved,
    tz: Tz,
}

/// What `savings` prints: the Scalers of the namespace (every namespace with `all`) over the
/// last `days` days, today included.
pub async fn savings(
    connection: &Connection,
    all: bool,
    days: usize,
    output: Output,
    now: Instant,
) -> Result<String> {
    let (client, namespace) = connection.connect().await?;
    let api: Api<Scaler> = if all {
        Api::all(client)
    } else {
        Api::namespaced(client, &namespace)
    };
    let scalers = api.list(&ListParams::default()).await.map_err(|e| {
        if Error::is_code(&e, 404) {
            Error::Input("the Scaler CRD is not installed".into())
        } else {
            e.into()
        }
    })?;
    let place = if all {
        "every namespace".to_string()
    } else {
        format!("namespace {namespace}")
    };
    Ok(report(scalers.items, all, days, output, &place, now))
}

/// The report of `scalers` (of `place`, every namespace's with `all`) over the last `days` days
/// at `now`, as text or SVG; no cluster needed.
pub fn report(
    scalers: Vec<Scaler>,
    all: bool,
    days: usize,
    output: Output,
    place: &str,
    now: Instant,
) -> String {
    let count = scalers.len();
    let rows = rows(scalers, days, now);
    match output {
        Output::Text => text(&rows, count, all, days, place),
        Output::Svg => svg(&rows, days, place, now),
    }
}

fn rows(scalers: Vec<Scaler>, days: usize, now: Instant) -> Vec<Row> {
    let mut rows: Vec<Row> = scalers
        .into_iter()
        .filter_map(|s| {
            let tz: Tz = s.spec.time_zone().parse().unwrap_or(Tz::UTC);
            let savings = s.status.as_ref()?.savings.as_ref()?.at(now, tz);
            let saved = savings.last_days(local_date(tz, now), days);
            Some(Row {
                namespace: s.namespace().unwrap_or_default(),
                name: s.name_any(),
                savings,
                saved,
                tz,
            })
        })
        .collect();
    // Real savings first, the largest first.
    rows.sort_by(|a, b| {
        (
            a.savings.potential,
            b.saved.cpu_core_hours,
            b.saved.pod_hours,
        )
            .partial_cmp(&(
                b.savings.potential,
                a.saved.cpu_core_hours,
                a.saved.pod_hours,
            ))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    rows
}

/// Hours as a short number: more decimals for small amounts, so that a few minutes show.
pub fn hours(v: f64) -> String {
    match v.abs() {
        0.0 => "0".into(),
        a if a < 0.1 => format!("{v:.4}"),
        a if a < 10.0 => format!("{v:.2}"),
        _ => format!("{v:.1}"),
    }
}

/// A rate as "3 pods, 300m CPU, 192Mi" (pods alone when their requests are not known).
pub fn rate(r: &Rate) -> String {
    if r.is_zero() {
        return "-".into();
    }
    let mut parts = vec![match r.pods {
        1 => "1 pod".to_string(),
        n => format!("{n} pods"),
    }];
    match r.cpu_millicores {
        0 => {}
        m if m % 1000 == 0 => parts.push(format!("{} CPU", m / 1000)),
        m => parts.push(format!("{m}m CPU")),
    }
    let mib = r.memory_bytes as f64 / f64::from(1u32 << 20);
    match mib {
        0.0 => {}
        m if m >= 1024.0 => parts.push(format!("{:.1}Gi", m / 1024.0)),
        m => parts.push(format!("{m:.0}Mi")),
    }
    parts.join(", ")
}

fn what(r: &Row) -> &'static str {
    if r.savings.potential {
        "would (dry run)"
    } else {
        "saved"
    }
}

fn text(rows: &[Row], count: usize, all: bool, days: usize, place: &str) -> String {
    let mut out = String::new();
    let span = if days == 1 {
        "today".to_string()
    } else {
        format!("the last {days} days, today included")
    };
    let _ = writeln!(
        out,
        "Savings in {place}, {span} (requests of the pods not run):"
    );
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "No Scaler has taken replicas away yet ({count} Scalers in {place})."
        );
        return out;
    }
    let mut headers = Vec::new();
    if all {
        headers.push("NAMESPACE");
    }
    headers.extend([
        "SCALER",
        "",
        "POD-HOURS",
        "CPU-CORE-HOURS",
        "MEMORY-GIB-HOURS",
        "NOW",
        "SINCE",
    ]);
    let mut table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = Vec::new();
            if all {
                row.push(r.namespace.clone());
            }
            let since = kubesteer_api::common::from_time(&r.savings.since).with_timezone(&r.tz);
            row.extend([
                r.name.clone(),
                what(r).into(),
                hours(r.saved.pod_hours),
                hours(r.saved.cpu_core_hours),
                hours(r.saved.memory_gib_hours),
                rate(&r.savings.now),
                since.format("%Y-%m-%d %H:%M").to_string(),
            ]);
            row
        })
        .collect();
    for potential in [false, true] {
        let of: Vec<&Row> = rows
            .iter()
            .filter(|r| r.savings.potential == potential)
            .collect();
        if of.len() < 2 {
            continue;
        }
        let sum: Saved = of.iter().map(|r| r.saved).sum();
        let now: Rate = of.iter().map(|r| r.savings.now).sum();
        let mut row = Vec::new();
        if all {
            row.push(String::new());
        }
        row.extend([
            "TOTAL".into(),
            what(of[0]).into(),
            hours(sum.pod_hours),
            hours(sum.cpu_core_hours),
            hours(sum.memory_gib_hours),
            rate(&now),
            String::new(),
        ]);
        table_rows.push(row);
    }
    out.push_str(&table(&headers, &table_rows));
    let left = count - rows.len();
    if left > 0 {
        let _ = writeln!(out, "{left} more Scalers have taken no replicas away yet.");
    }
    out
}

const BAR_W: u32 = 26;
const GAP: u32 = 10;
const CHART_H: u32 = 180;
const LEFT: u32 = 70;
const TOP: u32 = 60;
const SAVED: &str = "#2e8b57";
const WOULD: &str = "#9bbfe0";

/// The CPU core-hours of each day, saved and would-be, as bars; a line per Scaler under them.
fn svg(rows: &[Row], days: usize, place: &str, now: Instant) -> String {
    // Each Scaler's days are its own time zone's; the chart's are the first Scaler's (UTC
    // without any).
    let tz = rows.first().map(|r| r.tz).unwrap_or(Tz::UTC);
    let today = local_date(tz, now);
    let dates: Vec<NaiveDate> = (0..days)
        .rev()
        .filter_map(|back| today.checked_sub_days(chrono::Days::new(back as u64)))
        .collect();
    let mut per_day: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for r in rows {
        for d in &r.savings.days {
            let entry = per_day.entry(d.date.clone()).or_default();
            if r.savings.potential {
                entry.1 += d.saved.cpu_core_hours;
            } else {
                entry.0 += d.saved.cpu_core_hours;
            }
        }
    }
    let day = |d: &NaiveDate| {
        per_day
            .get(&d.format("%Y-%m-%d").to_string())
            .copied()
            .unwrap_or_default()
    };
    let max = dates
        .iter()
        .map(|d| {
            let (a, b) = day(d);
            a.max(b)
        })
        .fold(0.0f64, f64::max);
    let slot = 2 * BAR_W + GAP;
    let n = u32::try_from(dates.len()).unwrap_or(0);
    let saved: Saved = rows
        .iter()
        .filter(|r| !r.savings.potential)
        .map(|r| r.saved)
        .sum();
    let title = format!(
        "Savings in {place}, last {days} days: {} CPU core-hours, {} GiB-hours, {} pod-hours",
        hours(saved.cpu_core_hours),
        hours(saved.memory_gib_hours),
        hours(saved.pod_hours)
    );
    let lines: Vec<String> = rows
        .iter()
        .map(|r| {
            let now = match r.savings.now.is_zero() {
                true => String::new(),
                false => format!("; not running now: {}", rate(&r.savings.now)),
            };
            format!(
                "{}/{} {}: {} pod-hours, {} CPU core-hours, {} GiB-hours{now}",
                r.namespace,
                r.name,
                what(r),
                hours(r.saved.pod_hours),
                hours(r.saved.cpu_core_hours),
                hours(r.saved.memory_gib_hours),
            )
        })
        .collect();
    // Wide enough for the chart and for the text (about 7 px a character at 12 px, 8.5 at the
    // title's 14 px bold).
    let text_w = |chars: usize, px: f64| (chars as f64 * px) as u32 + 20;
    let widest = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let width = (LEFT + n * slot + 40)
        .max(640)
        .max(text_w(title.chars().count(), 8.5))
        .max(text_w(widest, 7.0));
    let height = TOP + CHART_H + 70 + 18 * (u32::try_from(lines.len()).unwrap_or(0) + 1);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="14" font-weight="bold">{}</text>"#,
        escape(&title)
    );
    let _ = writeln!(
        s,
        r##"<rect x="10" y="32" width="12" height="12" fill="{SAVED}"/><text x="28" y="42">saved</text><rect x="80" y="32" width="12" height="12" fill="{WOULD}"/><text x="98" y="42">would save (dry runs)</text><text x="260" y="42" fill="#555555">CPU core-hours per day</text>"##
    );
    let base = TOP + CHART_H;
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="#888888"/>"##,
        LEFT + n * slot
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="end" fill="#555555">{}</text>"##,
        LEFT - 6,
        TOP + 4,
        hours(max)
    );
    for (i, d) in dates.iter().enumerate() {
        let x = LEFT + u32::try_from(i).unwrap_or(0) * slot;
        let (a, b) = day(d);
        for (k, (v, colour)) in [(a, SAVED), (b, WOULD)].into_iter().enumerate() {
            if v <= 0.0 {
                continue;
            }
            let h = ((v / max.max(f64::MIN_POSITIVE)) * f64::from(CHART_H)).max(1.0) as u32;
            let bx = x + u32::try_from(k).unwrap_or(0) * BAR_W;
            let _ = writeln!(
                s,
                r#"<rect x="{bx}" y="{}" width="{}" height="{h}" fill="{colour}"><title>{}: {} CPU core-hours</title></rect>"#,
                base - h,
                BAR_W - 2,
                d.format("%Y-%m-%d"),
                hours(v)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            x + BAR_W,
            base + 16,
            d.format("%a %d")
        );
    }
    let mut y = base + 50;
    for line in &lines {
        let _ = writeln!(s, r#"<text x="10" y="{y}">{}</text>"#, escape(line));
        y += 18;
    }
    if rows.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="10" y="{y}">No Scaler has taken replicas away yet.</text>"#
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use serde_json::json;

    fn at(s: &str) -> Instant {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn scaler(name: &str, dry_run: bool, savings: serde_json::Value) -> Scaler {
        serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                     "windows": [{"start": 9, "end": 17, "replicas": 0}], "dryRun": dry_run},
            "status": {"savings": savings},
        }))
        .unwrap()
    }

    #[test]
    fn since_takes_whole_days_within_what_a_status_keeps() {
        assert_eq!(parse_since("7d"), Ok(7));
        assert_eq!(parse_since("1w"), Ok(7));
        assert_eq!(parse_since("31d"), Ok(31));
        for bad in ["12h", "0d", "32d", "1.5d", "soon"] {
            let e = parse_since(bad).unwrap_err();
            assert!(e.contains("whole days from 1d to 31d"), "{e}");
        }
    }

    #[test]
    fn the_table_counts_the_days_of_the_span_and_the_time_since_the_status() {
        let nightly = scaler(
            "nightly",
            false,
            json!({"since": "2026-12-01T00:00:00Z", "countedTo": "2026-12-03T00:00:00Z",
                   "now": {"pods": 3, "cpuMillicores": 300, "memoryBytes": 3 << 26},
                   "total": {"podHours": 30.0, "cpuCoreHours": 3.0, "memoryGiBHours": 5.625},
                   "days": [{"date": "2026-12-01", "podHours": 24.0, "cpuCoreHours": 2.4, "memoryGiBHours": 4.5},
                            {"date": "2026-12-02", "podHours": 6.0, "cpuCoreHours": 0.6, "memoryGiBHours": 1.125}]}),
        );
        let trial = scaler(
            "trial",
            true,
            json!({"potential": true, "since": "2026-12-02T00:00:00Z", "countedTo": "2026-12-02T00:00:00Z",
                   "now": {"pods": 1, "cpuMillicores": 0, "memoryBytes": 0},
                   "total": {"podHours": 0.0, "cpuCoreHours": 0.0, "memoryGiBHours": 0.0}}),
        );
        let quiet = scaler("quiet", false, serde_json::Value::Null);
        let now = at("2026-12-03T02:00:00Z");
        let rows = rows(vec![trial, quiet, nightly], 2, now);
        // Two days: Dec 2nd's 6 pod-hours and 2 hours of Dec 3rd at 3 pods.
        assert_eq!(rows[0].name, "nightly");
        assert_eq!(rows[0].saved.pod_hours, 12.0);
        assert_eq!(rows[0].saved.cpu_core_hours, 1.2);
        assert_eq!(rows[1].name, "trial");
        assert_eq!(
            rows[1].saved.pod_hours, 26.0,
            "a day and two hours at 1 pod"
        );
        let out = text(&rows, 3, false, 2, "namespace team");
        assert!(
            out.contains("nightly   saved             12.0        1.20"),
            "{out}"
        );
        assert!(out.contains("3 pods, 300m CPU, 192Mi"), "{out}");
        assert!(out.contains("trial     would (dry run)   26.0"), "{out}");
        assert!(
            out.contains("1 more Scalers have taken no replicas away yet."),
            "{out}"
        );
        let picture = svg(&rows, 2, "namespace team", now);
        assert!(picture.starts_with("<svg") && picture.ends_with("</svg>\n"));
        assert!(
            picture.contains("last 2 days: 1.20 CPU core-hours"),
            "{picture}"
        );
        assert!(
            picture.contains("<title>2026-12-02: 0.60 CPU core-hours</title>"),
            "{picture}"
        );
    }
}
