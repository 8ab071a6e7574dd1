//! The week as an SVG: the same grid as the text, for docs and chat. One rectangle per cell,
//! its height and shade the level; plain SVG 1.1 with no scripts or external references.
use std::fmt::Write as _;

use crate::text::replicas_words;
use crate::week::{day_label, local_time, Level, Week, CELLS_PER_HOUR};

const CELL_W: u32 = 12;
const ROW_H: u32 = 26;
const LABEL_W: u32 = 110;
const TOP: u32 = 56;
const FONT: &str = "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\"";
const LEVEL: &str = "#2e8b57";
const ZERO: &str = "#4a6fa5";
const OWN: &str = "#c8c8c8";
const OVERRIDE: &str = "#b03a9c";
const HOLIDAY: &str = "#fff3c4";

/// The colour of a cell and its share of the full height.
fn shade(override_: bool, level: Level, max: i32) -> (&'static str, f64) {
    match (override_, level) {
        (true, _) => (OVERRIDE, 1.0),
        (false, Level::Own) => (OWN, 0.25),
        (false, Level::Replicas(r)) if r <= 0 => (ZERO, 0.08),
        (false, Level::Replicas(r)) => (LEVEL, f64::from(r) / f64::from(max.max(1))),
    }
}

/// Higher levels are darker as well as taller.
fn opacity(share: f64) -> f64 {
    0.35 + 0.65 * share.clamp(0.0, 1.0)
}

/// Text made safe inside an SVG element or attribute.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The picture as a standalone SVG document; `title` heads it.
pub fn render(week: &Week, title: &str) -> String {
    let cells = 24 * CELLS_PER_HOUR;
    let grid_w = cells * CELL_W;
    let rows = u32::try_from(week.rows.len()).unwrap_or(0);
    let legend_y = TOP + rows * ROW_H + 24;
    let changes_y = legend_y + 34;
    let changes = u32::try_from(week.changes.len()).unwrap_or(0);
    let width = LABEL_W + grid_w + 330;
    let height = changes_y + 18 * (changes + 1) + 10;
    let max = week.max_replicas().max(1);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" {FONT} font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    if week.suspended {
        let _ = writeln!(
            s,
            r##"<text x="10" y="36" fill="#a06000">suspended: the controller applies none of this until it is resumed</text>"##
        );
    }
    for h in (0..24).step_by(3) {
        let x = LABEL_W + h * CELLS_PER_HOUR * CELL_W;
        let _ = writeln!(s, r#"<text x="{x}" y="{}">{h:02}</text>"#, TOP - 6);
    }
    for (i, row) in week.rows.iter().enumerate() {
        let y = TOP + u32::try_from(i).unwrap_or(0) * ROW_H;
        if row.excluded.is_some() {
            let _ = writeln!(
                s,
                r#"<rect x="0" y="{y}" width="{}" height="{ROW_H}" fill="{HOLIDAY}"/>"#,
                LABEL_W + grid_w
            );
        }
        let weight = if row.today {
            " font-weight=\"bold\""
        } else {
            ""
        };
        let marker = if row.today { "▸ " } else { "" };
        let _ = writeln!(
            s,
            r#"<text x="10" y="{}"{weight}>{marker}{}</text>"#,
            y + 17,
            day_label(row.day)
        );
        for (j, c) in row.cells.iter().enumerate() {
            let x = LABEL_W + u32::try_from(j).unwrap_or(0) * CELL_W;
            let Some(level) = c.level else {
                // Not on the clock: hatched.
                let _ = writeln!(
                    s,
                    r##"<path d="M{x} {} l{CELL_W} -{} M{x} {} l{} -{}" stroke="#999999" stroke-width="1"/>"##,
                    y + ROW_H - 3,
                    ROW_H - 6,
                    y + (ROW_H - 3) / 2 + 3,
                    CELL_W / 2,
                    (ROW_H - 6) / 2,
                );
                continue;
            };
            let (fill, share) = shade(c.override_, level, max);
            let full = f64::from(ROW_H - 6);
            let h = (full * share.clamp(0.08, 1.0)).round();
            let top = f64::from(y + ROW_H - 3) - h;
            let _ = writeln!(
                s,
                r#"<rect x="{x}" y="{top}" width="{}" height="{h}" fill="{fill}" fill-opacity="{:.2}"/>"#,
                CELL_W - 1,
                opacity(share)
            );
            if c.now {
                // Now: a mark under the cell.
                let _ = writeln!(
                    s,
                    r##"<rect x="{x}" y="{}" width="{}" height="2" fill="#000000"/>"##,
                    y + ROW_H - 2,
                    CELL_W - 1
                );
            }
        }
        let mut notes = Vec::new();
        if let Some(note) = &row.excluded {
            notes.push(format!("holiday: {note}"));
        }
        if let Some(c) = &row.clock_change {
            notes.push(c.to_string());
        }
        if !notes.is_empty() {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}">{}</text>"#,
                LABEL_W + grid_w + 8,
                y + 17,
                escape(&notes.join("; "))
            );
        }
    }
    // Legend.
    let mut x = 10;
    for level in week.levels().into_iter().rev() {
        let (fill, share) = shade(false, level, max);
        let what = match level {
            Level::Own => "own replicas".to_string(),
            Level::Replicas(r) => r.to_string(),
        };
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{fill}" fill-opacity="{:.2}"/><text x="{}" y="{legend_y}">{what}</text>"#,
            legend_y - 10,
            opacity(share),
            x + 16
        );
        x += 16 + 8 * u32::try_from(what.len()).unwrap_or(0) + 18;
    }
    if let Some((r, until)) = week.override_ {
        let what = format!("override {r} until {}", local_time(week.tz, until));
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{OVERRIDE}"/><text x="{}" y="{legend_y}">{}</text>"#,
            legend_y - 10,
            x + 16,
            escape(&what)
        );
    }
    if week.changes.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="10" y="{changes_y}">No change of replicas in these days.</text>"#
        );
    } else {
        let _ = writeln!(
            s,
            r#"<text x="10" y="{changes_y}" font-weight="bold">Changes ({})</text>"#,
            week.tz
        );
        for (i, c) in week.changes.iter().enumerate() {
            let y = changes_y + 18 * (u32::try_from(i).unwrap_or(0) + 1);
            let mut why = c.reason.to_string();
            if c.override_ends {
                why = format!("override ends; {why}");
            }
            let line = format!(
                "{}  {:<32} {why}",
                local_time(week.tz, c.at),
                replicas_words(c.replicas, week.outside_replicas)
            );
            let _ = writeln!(
                s,
                r#"<text x="20" y="{y}" xml:space="preserve">{}</text>"#,
                escape(&line)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
