//! The whole review path, raw bytes in, response out: the first byte picks the endpoint
//! (mutate or validate, for Scaler, Memcached or Welcome), the rest is the request body.
//! Invariants are in webhook/tests/webhook/common/review.rs, shared with the corpus replay test.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/webhook/common/review.rs"]
mod review;

/// An input slower than this twice in a row is a hang (issue 14's bound); libFuzzer's own
/// `-timeout` counts whole seconds only.
const HANG: Duration = Duration::from_millis(100);

/// The slowest input so far, in microseconds; each new record is printed, so the last
/// such line of a run is its slowest input.
static SLOWEST_US: AtomicU64 = AtomicU64::new(0);

fn timed(input: &[u8]) -> Duration {
    let started = Instant::now();
    review::check(input);
    started.elapsed()
}

fuzz_target!(|input: &[u8]| {
    let took = timed(input);
    let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    if us > SLOWEST_US.fetch_max(us, Ordering::Relaxed) {
        eprintln!("slowest input so far: {us} us, {} bytes", input.len());
    }
    // Wall time on a shared machine: one slow run may be preemption, a second one is the input.
    if took > HANG {
        let again = timed(input);
        eprintln!("slow input: {took:?}, then {again:?}");
        assert!(again <= HANG, "hang: {took:?}, then {again:?}");
    }
});
