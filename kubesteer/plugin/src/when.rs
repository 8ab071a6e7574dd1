//! Times as users type them: an RFC 3339 instant, a date or date and time on the Scaler's own
//! clock, or a time of day (the next one). Local times resolve as the schedule resolves them
//! (`resolve_local`: a time in a spring-forward gap moves past it, a repeated one means its first).
use chrono::{DateTime, Days, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use chrono_tz::Tz;
use kubesteer_api::scaler::schedule::{resolve_local, Instant};

/// What a time may look like, for error messages.
pub const FORMS: &str = "an RFC 3339 time (\"2026-12-18T18:00:00Z\"), a date or a date and time on the Scaler's clock (\"2026-12-18\", \"2026-12-18T18:00\"), or a time of day (\"18:00\", the next one)";

/// `text` as an instant; local forms are read in `tz`; a time of day is the next one after `now`.
pub fn parse(text: &str, tz: Tz, now: Instant) -> Result<Instant, String> {
    let text = text.trim();
    if text == "now" {
        return Ok(now);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(resolve_local(tz, d, NaiveTime::MIN));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(resolve_local(tz, t.date(), t.time()));
        }
    }
    for format in ["%H:%M", "%H:%M:%S"] {
        if let Ok(t) = NaiveTime::parse_from_str(text, format) {
            let today = now.with_timezone(&tz).date_naive();
            let at = resolve_local(tz, today, t);
            if at > now {
                return Ok(at);
            }
            let tomorrow = today.checked_add_days(Days::new(1)).unwrap_or(today);
            return Ok(resolve_local(tz, tomorrow, t));
        }
    }
    Err(format!("{text:?} is no time: give {FORMS}"))
}

/// An instant as Kubernetes writes a Time: whole seconds, UTC, `Z`.
pub fn rfc3339(at: Instant) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> Instant {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    #[test]
    fn every_form_reads_on_the_scalers_clock() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let now = utc(2026, 11, 26, 13, 0);
        let p = |s| parse(s, berlin, now);
        assert_eq!(p("2026-12-18T18:00:00Z"), Ok(utc(2026, 12, 18, 18, 0)));
        assert_eq!(p("2026-12-18T18:00:00+01:00"), Ok(utc(2026, 12, 18, 17, 0)));
        assert_eq!(p("2026-12-18"), Ok(utc(2026, 12, 17, 23, 0)));
        assert_eq!(p("2026-12-18T18:00"), Ok(utc(2026, 12, 18, 17, 0)));
        assert_eq!(p("2026-12-18 18:00"), Ok(utc(2026, 12, 18, 17, 0)));
        // 15:00 in Berlin is 14:00 UTC, still ahead; 13:00 in Berlin has passed.
        assert_eq!(p("15:00"), Ok(utc(2026, 11, 26, 14, 0)));
        assert_eq!(p("13:00"), Ok(utc(2026, 11, 27, 12, 0)));
        assert_eq!(p("now"), Ok(now));
        // In the spring-forward gap: the first instant after it.
        assert_eq!(p("2026-03-29T02:30"), Ok(utc(2026, 3, 29, 1, 0)));
        for bad in ["", "tomorrow", "2026-13-01", "25:00", "2026-12-18T"] {
            assert!(p(bad).is_err_and(|e| e.contains("RFC 3339")), "{bad:?}");
        }
    }
}
