//! The fuzz corpus (webhook/fuzz/corpus/review) replayed on stable: every input the fuzzer kept
//! still gets an answer that keeps the invariants of common/review.rs, in time.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::review;

/// Far above a release build's worst input (see README, Fuzzing), for an unoptimized build.
const SLOWEST_ALLOWED: Duration = Duration::from_secs(1);

#[test]
fn every_corpus_input_keeps_the_review_invariants() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/review");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 20, "a corpus in {}", dir.display());
    let mut slowest = (Duration::ZERO, None);
    for file in &files {
        let input = std::fs::read(file).unwrap();
        let started = Instant::now();
        if catch_unwind(AssertUnwindSafe(|| review::check(&input))).is_err() {
            panic!("{} breaks an invariant (message above)", file.display());
        }
        let took = started.elapsed();
        if took > slowest.0 {
            slowest = (took, Some(file));
        }
    }
    eprintln!(
        "{} inputs; slowest {:?} ({:?})",
        files.len(),
        slowest.0,
        slowest.1
    );
    assert!(slowest.0 < SLOWEST_ALLOWED, "{slowest:?}");
}
