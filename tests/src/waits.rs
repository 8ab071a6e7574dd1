//! Waiting for a condition with a timeout, and the times tests compare.
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use chrono::{DateTime, SecondsFormat, Utc};

/// Polls `check` until it returns `Some`, or fails after `timeout` with the last observation.
pub fn eventually<T>(
    timeout: Duration,
    what: &str,
    check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    eventually_every(timeout, Duration::from_millis(250), what, check)
}

/// Like [`eventually`], polling every `interval`, for checks that are costly to the apiserver.
pub fn eventually_every<T>(
    timeout: Duration,
    interval: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last error: {last}");
        }
        std::thread::sleep(interval);
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    u64::try_from(Utc::now().timestamp()).unwrap_or_default()
}

/// Seconds since the Unix epoch, now, to the microsecond.
pub fn now_seconds() -> f64 {
    seconds(Utc::now())
}

pub(crate) fn seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp() as f64 + f64::from(at.timestamp_subsec_micros()) / 1e6
}

pub(crate) fn utc(unix: u64) -> DateTime<Utc> {
    i64::try_from(unix)
        .ok()
        .and_then(|s| DateTime::from_timestamp(s, 0))
        .unwrap_or_default()
}

/// The UTC wall-clock time `"HH:MM"` of a Unix time.
pub fn hh_mm(unix: u64) -> String {
    utc(unix).format("%H:%M").to_string()
}

/// A Unix time as Kubernetes prints it, e.g. "2025-03-03T09:00:00Z".
pub fn rfc3339(unix: u64) -> String {
    utc(unix).to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Seconds since the Unix epoch of an RFC 3339 time such as a Time ("2025-03-03T09:00:00Z") or a
/// MicroTime ("2025-03-03T09:00:00.123456Z").
pub fn parse_rfc3339(time: &str) -> Result<f64> {
    let at = DateTime::parse_from_rfc3339(time).with_context(|| format!("not a time: {time:?}"))?;
    Ok(seconds(at.with_timezone(&Utc)))
}

/// How far the wall clock ran ahead of the monotonic one since [`ClockDrift::start`]: the time a
/// paused machine (a stopped VM, whose wall clock is stepped forward on resume while its
/// monotonic clock is not) lost. Every process is late by that much, so a test that measures
/// lateness against a wall-clock boundary cannot judge one that spans such a pause.
pub struct ClockDrift {
    wall: DateTime<Utc>,
    monotonic: std::time::Instant,
}

impl ClockDrift {
    pub fn start() -> Self {
        Self {
            wall: Utc::now(),
            monotonic: std::time::Instant::now(),
        }
    }

    /// The wall clock's lead over the monotonic clock since the start (zero when behind).
    pub fn ahead(&self) -> Duration {
        let wall = (Utc::now() - self.wall).to_std().unwrap_or_default();
        wall.saturating_sub(self.monotonic.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_like_kubernetes() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_740_992_400), "2025-03-03T09:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(hh_mm(1_740_992_400 + 59), "09:00");
    }

    #[test]
    fn times_parse_like_kubernetes_prints_them() -> Result<()> {
        assert_eq!(parse_rfc3339("2025-03-03T09:00:00Z")?, 1_740_992_400.0);
        assert_eq!(
            parse_rfc3339("2025-03-03T09:00:00.250000Z")?,
            1_740_992_400.25
        );
        assert_eq!(parse_rfc3339(&rfc3339(951_782_400))?, 951_782_400.0);
        assert!(parse_rfc3339("2025-03-03 09:00").is_err());
        Ok(())
    }
}
