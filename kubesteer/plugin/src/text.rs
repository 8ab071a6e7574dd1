//! The week as text: one row per day, hours across, the replicas as block characters; colour
//! only when asked (a terminal, and NO_COLOR unset).
use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};

use crate::week::{day_label, local_time, Cell, Level, Week, CELLS_PER_HOUR};

/// The glyphs of replicas 1 and up, lowest first: a level is its share of the highest.
const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// Zero replicas.
const ZERO: char = '_';
/// The targets keep (or get back) their own replicas.
const OWN: char = '·';
/// The override holds.
const OVERRIDE: char = '▒';
/// A wall-clock time that does not exist that day.
const SKIPPED: char = ' ';
/// Before today's label.
const TODAY: char = '▸';

/// Colours, or none.
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    on: bool,
}

impl Paint {
    pub fn new(on: bool) -> Self {
        Self { on }
    }

    /// Whether stdout gets colour: a terminal, and NO_COLOR unset or empty (no-color.org).
    pub fn for_stdout() -> Self {
        use std::io::IsTerminal;
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self::new(std::io::stdout().is_terminal() && !no_color)
    }

    pub fn paint(&self, style: Style, text: &str) -> String {
        if self.on {
            format!("{}{text}{}", style.render(), style.render_reset())
        } else {
            text.to_string()
        }
    }
}

fn fg(c: AnsiColor) -> Style {
    Style::new().fg_color(Some(c.into()))
}

pub(crate) const GREEN: AnsiColor = AnsiColor::Green;
const DIM: Style = Style::new().dimmed();
const BOLD: Style = Style::new().bold();

/// The glyph of a level, given the highest replicas shown.
pub fn glyph(level: Level, max: i32) -> char {
    match level {
        Level::Own => OWN,
        Level::Replicas(r) if r <= 0 => ZERO,
        Level::Replicas(r) => {
            let max = i64::from(max.max(r));
            let step = (i64::from(r) * 8 + max - 1) / max;
            BLOCKS[usize::try_from(step.clamp(1, 8) - 1).unwrap_or(0)]
        }
    }
}

fn cell(c: &Cell, max: i32, paint: Paint) -> String {
    let (ch, style) = match c.level {
        None => (SKIPPED, Style::new()),
        Some(_) if c.override_ => (OVERRIDE, fg(AnsiColor::Magenta)),
        Some(Level::Own) => (OWN, DIM),
        Some(l @ Level::Replicas(r)) if r <= 0 => (glyph(l, max), fg(AnsiColor::Blue)),
        Some(l) => (glyph(l, max), fg(GREEN)),
    };
    let style = if c.now {
        style.bold().underline()
    } else {
        style
    };
    paint.paint(style, &ch.to_string())
}

/// The replicas a change sets, in words.
pub fn replicas_words(replicas: Option<i32>, outside: Option<i32>) -> String {
    match (replicas, outside) {
        (Some(r), _) => plural(r),
        (None, Some(r)) => format!("{} (outsideReplicas)", plural(r)),
        (None, None) => "own replicas (as recorded)".to_string(),
    }
}

fn plural(r: i32) -> String {
    if r == 1 {
        "1 replica".to_string()
    } else {
        format!("{r} replicas")
    }
}

/// The picture, the legend and the changes; `title` heads it.
pub fn render(week: &Week, title: &str, paint: Paint) -> String {
    let mut out = String::new();
    let max = week.max_replicas();
    let _ = writeln!(out, "{}", paint.paint(BOLD, title));
    if week.suspended {
        let _ = writeln!(
            out,
            "{}",
            paint.paint(
                fg(AnsiColor::Yellow),
                "suspended: the controller applies none of this until it is resumed"
            )
        );
    }
    // The hour scale: a tick every three hours.
    let mut scale = String::from("             ");
    for h in (0..24).step_by(3) {
        let _ = write!(
            scale,
            "{h:02}{}",
            " ".repeat(3 * CELLS_PER_HOUR as usize - 2)
        );
    }
    let _ = writeln!(out, "{}", scale.trim_end());
    for row in &week.rows {
        let marker = if row.today { TODAY } else { ' ' };
        let label = format!("{marker} {}", day_label(row.day));
        let label = match (&row.excluded, row.today) {
            (Some(_), _) => paint.paint(fg(AnsiColor::Yellow), &label),
            (None, true) => paint.paint(BOLD, &label),
            (None, false) => label,
        };
        let cells: String = row.cells.iter().map(|c| cell(c, max, paint)).collect();
        let mut notes = Vec::new();
        if let Some(note) = &row.excluded {
            notes.push(paint.paint(fg(AnsiColor::Yellow), &format!("holiday: {note}")));
        }
        if let Some(c) = &row.clock_change {
            notes.push(c.to_string());
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!("  {}", notes.join("; "))
        };
        let _ = writeln!(out, "{label} {cells}{notes}");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", legend(week, max, paint));
    let _ = writeln!(out);
    if week.changes.is_empty() {
        let _ = writeln!(out, "No change of replicas in these days.");
    } else {
        let _ = writeln!(out, "Changes ({}):", week.tz);
        let width = week
            .changes
            .iter()
            .map(|c| local_time(week.tz, c.at).chars().count())
            .max()
            .unwrap_or(0);
        for c in &week.changes {
            let mut why = c.reason.to_string();
            if c.override_ends {
                why = format!("override ends; {why}");
            }
            let _ = writeln!(
                out,
                "  {}  {:<32} {why}",
                paint.paint(
                    fg(AnsiColor::Cyan),
                    &format!("{:<width$}", local_time(week.tz, c.at))
                ),
                replicas_words(c.replicas, week.outside_replicas),
            );
        }
    }
    out
}

fn legend(week: &Week, max: i32, paint: Paint) -> String {
    let mut parts: Vec<String> = week
        .levels()
        .into_iter()
        .rev()
        .map(|l| {
            let c = Cell {
                time: chrono::NaiveTime::MIN,
                level: Some(l),
                override_: false,
                now: false,
            };
            let what = match l {
                Level::Own => "own replicas".to_string(),
                Level::Replicas(r) => r.to_string(),
            };
            format!("{} {what}", cell(&c, max, paint))
        })
        .collect();
    if let Some((r, until)) = week.override_ {
        parts.push(format!(
            "{} override {r} until {}",
            paint.paint(fg(AnsiColor::Magenta), &OVERRIDE.to_string()),
            local_time(week.tz, until)
        ));
    }
    if week.has_gap() {
        parts.push("(blank) not on the clock".to_string());
    }
    format!("  {}", parts.join("   "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_shares_of_the_highest() {
        assert_eq!(glyph(Level::Replicas(5), 5), '█');
        assert_eq!(glyph(Level::Replicas(3), 5), '▅');
        assert_eq!(glyph(Level::Replicas(1), 5), '▂');
        assert_eq!(glyph(Level::Replicas(1), 1000), '▁');
        assert_eq!(glyph(Level::Replicas(0), 5), ZERO);
        assert_eq!(glyph(Level::Own, 5), OWN);
    }

    #[test]
    fn colour_only_when_painting() {
        assert_eq!(Paint::new(false).paint(BOLD, "x"), "x");
        assert!(Paint::new(true).paint(BOLD, "x").contains("\u{1b}["));
    }
}
