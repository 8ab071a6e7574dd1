//! Columns as kubectl prints them: upper-case headers, each column as wide as its widest cell,
//! three spaces apart, the last one unpadded.
use std::fmt::Write as _;

/// `rows` under `headers`, aligned.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&headers).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = width.saturating_sub(cell.chars().count());
            let _ = write!(line, "{cell}{}   ", " ".repeat(pad));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// An age as kubectl shows it: `45s`, `12m`, `5h`, `3d`.
pub fn age(seconds: i64) -> String {
    match seconds.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell() {
        let t = table(
            &["NAME", "READY"],
            &[
                vec!["office-hours".into(), "True".into()],
                vec!["a".into(), "False".into()],
            ],
        );
        assert_eq!(
            t,
            "NAME           READY\noffice-hours   True\na              False\n"
        );
        assert_eq!(
            (age(59), age(600), age(7300), age(200_000)),
            ("59s".into(), "10m".into(), "2h".into(), "2d".into())
        );
    }
}
