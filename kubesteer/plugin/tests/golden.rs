//! Golden pictures: each Scaler in tests/golden/*.yaml previewed at a fixed clock, as text
//! (without colour) and as SVG, compared byte for byte with the files beside it.
//! `UPDATE_GOLDEN=1 cargo test -p kubesteer-plugin --test golden` writes them anew; review the diff.
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use kubesteer_plugin::preview::{picture, Output, Request};
use kubesteer_plugin::text::Paint;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// `case`.yaml previewed from `from` for `days` at `now`, against `case`.txt and `case`.svg.
fn golden(case: &str, from: &str, days: u32, now: &str) {
    let now: DateTime<Utc> = match DateTime::parse_from_rfc3339(now) {
        Ok(t) => t.with_timezone(&Utc),
        Err(e) => panic!("{now}: {e}"),
    };
    let source = format!("{case}.yaml");
    let text = std::fs::read_to_string(dir().join(&source)).unwrap_or_default();
    let scalers = kubesteer_plugin::file::read(&text, &source, "default", now)
        .unwrap_or_else(|e| panic!("{e}"));
    let s = &scalers[0];
    let what = format!("scaler/{} -n {}", s.name, s.namespace);
    let mut failures = Vec::new();
    for (output, ext) in [(Output::Text, "txt"), (Output::Svg, "svg")] {
        let request = Request {
            days,
            from: Some(from.to_string()),
            output,
            now,
        };
        let got = picture(&s.spec, &[], &what, &request, Paint::new(false))
            .unwrap_or_else(|e| panic!("{e}"));
        let path = dir().join(format!("{case}.{ext}"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            failures.push(format!(
                "{} differs (UPDATE_GOLDEN=1 to rewrite it); got:\n{got}",
                path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_spring_forward_week_skips_the_missing_hour() {
    golden("dst-spring", "2026-03-23", 7, "2026-03-25T10:00:00Z");
}

#[test]
fn a_fall_back_week_has_a_25_hour_sunday() {
    golden("dst-fall", "2026-10-19", 7, "2026-10-21T10:00:00Z");
}

#[test]
fn a_holiday_range_is_outside_every_window() {
    golden("holiday", "2026-12-21", 7, "2026-12-01T09:00:00Z");
}

#[test]
fn an_override_holds_until_its_end() {
    golden("override", "2026-11-23", 7, "2026-11-26T13:05:00Z");
}

#[test]
fn overlapping_windows_show_the_highest_replicas() {
    golden("overlap", "2026-06-01", 7, "2026-06-03T12:40:00Z");
}

#[test]
fn cron_jobs_show_each_firing() {
    golden("cron", "2026-03-02", 14, "2026-03-04T12:00:00Z");
}

/// savings.yaml (a List of Scalers with their status) reported for 7 days at a fixed clock,
/// against savings.txt and savings.svg.
#[test]
fn the_savings_of_a_week_as_a_table_and_a_chart() {
    use kubesteer_plugin::savings::report;
    let now: DateTime<Utc> = match DateTime::parse_from_rfc3339("2026-12-03T13:30:00Z") {
        Ok(t) => t.with_timezone(&Utc),
        Err(e) => panic!("{e}"),
    };
    let text = std::fs::read_to_string(dir().join("savings.yaml")).unwrap_or_default();
    let list: serde_json::Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let scalers: Vec<kubesteer_api::Scaler> =
        serde_json::from_value(list["items"].clone()).unwrap_or_else(|e| panic!("{e}"));
    let mut failures = Vec::new();
    for (output, ext) in [(Output::Text, "txt"), (Output::Svg, "svg")] {
        let got = report(scalers.clone(), true, 7, output, "every namespace", now);
        let path = dir().join(format!("savings.{ext}"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            failures.push(format!("{} differs; got:\n{got}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
