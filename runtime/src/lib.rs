//! What the webhook and the controller share at run time: one way to log,
//! to hear the shutdown signal, to tell readiness, and to watch.
//!
//! - [`RuntimeArgs`]: the flags both binaries take (`--log-json`, `--watch-stale-after`).
//! - [`VERSION`]: the release, the workspace version: `--version`, `/version`, the first log line.
//! - [`logging::init`]: `tracing` to stderr, as text or JSON lines, `RUST_LOG` to filter.
//! - [`signal::shutdown`]: resolves on SIGTERM or SIGINT; [`signal::stopped`] when a stop channel turns true.
//! - [`queue`]: the controller's work queue (debounced, one reconcile per object at a time).
//! - [`lease`]: leader election on a coordination.k8s.io Lease.
//! - [`serve`]: the HTTP(S) server of /metrics and the probes; [`metrics_auth`]: the token a
//!   scrape of /metrics needs (TokenReview, then SubjectAccessReview).
//! - [`answer_cache`]: the apiserver's answers, kept briefly (grants and denials each for their
//!   own TTL, one question asked once at a time, grants in use asked again before they
//!   expire): the webhook's permission checks, [`metrics_auth`]'s tokens and [`scale`]'s kinds.
//! - [`access::permitted`]: one SubjectAccessReview of a user's identity and an `Access`.
//! - [`lock`]: a mutex lock that ignores poison.
//! - [`health::Health`]: readiness from every watch's state, and the `/healthz` and `/readyz`
//!   handlers ([`health::routes`]).
//! - [`watch`]: watches that skip an object they cannot decode.
//! - [`exposition`]: `/metrics` as OpenMetrics, or the Prometheus text format when asked.
//! - [`scale`]: a RESTMapper for Scaler targets of any kind, and their `/scale` subresource.
//! - [`claims::follow`]: the Scalers' claim index kept in step with their watch.
//! - [`Allocator`]: the binaries' global allocator.
pub mod access;
pub mod answer_cache;
pub mod claims;
pub mod exposition;
pub mod health;
pub mod lease;
pub mod logging;
pub mod metrics_auth;
pub mod queue;
pub mod scale;
pub mod serve;
pub mod signal;
pub mod watch;

use std::time::Duration;

pub use health::Health;

/// A lock whose holder cannot leave the data inconsistent by panicking, so poison is ignored.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The release these binaries are: the workspace version of Cargo.toml, which is also the chart's
/// `version` and `appVersion`, the image's tag and the plugin's (a unit test in tests/ fails when
/// any of them disagree). Served at `/version` ([`health::routes`]) and logged first
/// ([`logging::init`]).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The global allocator of the webhook, the controller and the image's multi-call binary
/// (`#[global_allocator]` in each `main.rs`, by [`main!`] in the webhook's and the controller's):
/// jemalloc, with a background thread that returns freed pages to the system. Measured against
/// glibc's malloc (docs/benchmarks.md): the controller, restarted on 10,000 reconciled
/// Memcacheds, settled at 93-95 MiB against 109-110 MiB; the webhook's heap (RssAnon) after
/// load was 3.2-4.5 MiB against 8.5 MiB.
pub use tikv_jemallocator::Jemalloc as Allocator;

/// A binary's `main`: [`Allocator`] as its global allocator (unless the binary's crate is built
/// with its `system-allocator` feature) and `$run(std::env::args_os())` as its exit code.
#[macro_export]
macro_rules! main {
    ($run:path) => {
        #[cfg(not(feature = "system-allocator"))]
        #[global_allocator]
        static ALLOCATOR: $crate::Allocator = $crate::Allocator;

        fn main() -> std::process::ExitCode {
            $run(std::env::args_os())
        }
    };
}

/// jemalloc's options, which it reads when it starts (`_RJEM_MALLOC_CONF` in the environment
/// still overrides them): one arena, where its default is four per CPU. Each arena keeps pages
/// of its own, partly free; the webhook and the controller run a few threads, each with a cache
/// of its own in front of the arena. Measured on the controller restarted on 10,000 reconciled
/// Memcacheds and 2,000 Scalers (docs/benchmarks.md): peak 55.0 MiB and settled at 49.5 MiB
/// with one arena, 60.3-61.1 and 51.8-52.0 with two, 70.4-76.0 and 55.5 with the default.
/// A C string, read through a pointer: hence an array, whose reference is a thin pointer.
#[used]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8; 10] = b"narenas:1\0";

/// The flags both binaries take; `#[command(flatten)]` them into a binary's own.
#[derive(Debug, Clone, clap::Args)]
pub struct RuntimeArgs {
    /// Write logs as JSON lines instead of text.
    #[arg(long, env = "KUBESTEER_LOG_JSON", default_value_t = false)]
    pub log_json: bool,

    /// How long a watch may fail before /readyz fails, as its cache then answers from a stale
    /// state, e.g. "30s" or "2m". See `Health` for how a watch counts as down.
    #[arg(
        long,
        env = "KUBESTEER_WATCH_STALE_AFTER",
        default_value = "30s",
        value_parser = humantime::parse_duration
    )]
    pub watch_stale_after: Duration,
}

impl RuntimeArgs {
    /// The readiness state these flags describe.
    pub fn health(&self) -> Health {
        Health::new(self.watch_stale_after)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Binary {
        #[command(flatten)]
        runtime: RuntimeArgs,
    }

    #[test]
    fn flags_take_human_durations_and_name_the_flag_when_wrong() {
        let b = Binary::try_parse_from(["b"]).unwrap();
        assert!(!b.runtime.log_json);
        assert_eq!(b.runtime.watch_stale_after, Duration::from_secs(30));
        let b = Binary::try_parse_from(["b", "--log-json", "--watch-stale-after=1m 30s"]).unwrap();
        assert!(b.runtime.log_json);
        assert_eq!(b.runtime.watch_stale_after, Duration::from_secs(90));
        let e = Binary::try_parse_from(["b", "--watch-stale-after=soon"]).unwrap_err();
        assert!(e.to_string().contains("--watch-stale-after"), "{e}");
    }
}
