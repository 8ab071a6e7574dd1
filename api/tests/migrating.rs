//! docs/migrating.md says what each of its Scalers does: every Scaler there is valid, and each
//! table under one ("time in the Scaler's zone | targets at") is what the schedule code says at
//! those times. The same Scalers go through the chart's webhook in tests/e2e/install/release.rs.
use chrono::{Datelike, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use kubesteer_api::scaler::v1beta1::Scaler;

const PAGE: &str = include_str!("../../docs/migrating.md");
const TABLE_HEADER: &str = "| time in the Scaler's zone | targets at |";
/// What a row says when the targets are outside every window with no `outsideReplicas`.
const THEIR_OWN: &str = "their own";

/// Each Scaler of the page, with the rows of the table that follows it (before the next Scaler).
fn scalers_with_tables(page: &str) -> Vec<(Scaler, Vec<(String, String)>)> {
    let mut found: Vec<(Scaler, Vec<(String, String)>)> = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```yaml" {
            let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            let block = block.join("\n");
            if block.contains("kind: Scaler") {
                let scaler: Scaler = serde_yaml::from_str(&block)
                    .unwrap_or_else(|e| panic!("a Scaler of docs/migrating.md: {e}\n{block}"));
                found.push((scaler, Vec::new()));
            }
        } else if line.trim() == TABLE_HEADER {
            let Some((_, rows)) = found.last_mut() else {
                panic!("a table before any Scaler");
            };
            assert!(rows.is_empty(), "two tables after one Scaler");
            let body = lines.by_ref().skip(1).take_while(|l| l.starts_with('|'));
            for row in body {
                let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
                let [at, replicas] = cells[..] else {
                    panic!("a row of two cells: {row}");
                };
                rows.push((at.to_string(), replicas.to_string()));
            }
        }
    }
    found
}

/// What is wrong with the page's Scalers and tables, one line each.
fn failures(page: &str) -> Vec<String> {
    let scalers = scalers_with_tables(page);
    assert!(scalers.len() >= 6, "found {} Scalers", scalers.len());
    let written = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).unwrap();
    let mut failures = Vec::new();
    for (scaler, rows) in &scalers {
        let name = scaler.metadata.name.as_deref().unwrap_or("?");
        let spec = scaler.spec.defaulted();
        let errors = spec.validate(written);
        if !errors.is_empty() {
            failures.push(format!("{name}: {errors:?}"));
            continue;
        }
        if rows.len() < 4 {
            failures.push(format!("{name}: a table of at least 4 times"));
        }
        let tz: Tz = spec.time_zone().parse().expect("a valid zone");
        for (at, want) in rows {
            // "Sat 2026-06-06 23:59": the weekday must be the date's.
            let (day, local) = at.split_once(' ').expect("a weekday and a time");
            let local = NaiveDateTime::parse_from_str(local, "%Y-%m-%d %H:%M")
                .unwrap_or_else(|e| panic!("{name}: {at}: {e}"));
            assert_eq!(day, local.weekday().to_string(), "{name}: {at}");
            let instant = tz
                .from_local_datetime(&local)
                .single()
                .expect("not in a DST change")
                .with_timezone(&Utc);
            let plan = spec.plan(instant).expect("a valid schedule");
            let got = match plan.replicas.or(spec.outside_replicas) {
                Some(n) => n.to_string(),
                None => THEIR_OWN.to_string(),
            };
            if &got != want {
                failures.push(format!(
                    "{name} at {at} ({instant}): {got}, not {want} ({})",
                    plan.message
                ));
            }
        }
    }
    failures
}

#[test]
fn every_scaler_of_the_migration_guide_is_valid_and_does_what_its_table_says() {
    let failures = failures(PAGE);
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_table_row_that_is_wrong_fails() {
    let page = PAGE.replacen(
        "| Sat 2026-06-06 23:59 | 0 |",
        "| Sat 2026-06-06 23:59 | their own |",
        1,
    );
    assert_ne!(page, PAGE, "the weekend's last minute is in the guide");
    let failures = failures(&page);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].starts_with("weekend-off at Sat 2026-06-06 23:59"),
        "{failures:#?}"
    );
}
