//! The whole review path, raw bytes in, response out: the first byte picks the endpoint
//! (mutate or validate, for Scaler, Memcached or Welcome), the rest is the request body.
//! Invariants are in webhook/tests/common/review.rs, shared with the corpus replay test.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/review.rs"]
mod review;

/// The slowest input so far, in microseconds; each new record is printed, so the last
/// such line of a run is its slowest input.
static SLOWEST_US: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|input: &[u8]| {
    let started = Instant::now();
    review::check(input);
    let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    if us > SLOWEST_US.fetch_max(us, Ordering::Relaxed) {
        eprintln!("slowest input so far: {us} us, {} bytes", input.len());
    }
});
