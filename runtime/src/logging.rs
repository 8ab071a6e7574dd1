//! Structured logs with `tracing`, to stderr, as text or JSON lines.
use std::io::IsTerminal;

use tracing_subscriber::{fmt, prelude::*, EnvFilter};

/// The levels when `RUST_LOG` is unset or empty: the clients' per-request chatter stays out.
pub const DEFAULT_FILTER: &str = "info,kube_client=warn,kube_runtime=warn";

/// Why logging could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("RUST_LOG: {0}")]
    Filter(String),
    #[error("logging: {0}")]
    Install(String),
}

/// The filter from `RUST_LOG`, or [`DEFAULT_FILTER`] when it is unset or blank.
pub fn filter(rust_log: Option<&str>) -> Result<EnvFilter, Error> {
    let directives = rust_log
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or(DEFAULT_FILTER);
    EnvFilter::try_new(directives).map_err(|e| Error::Filter(e.to_string()))
}

/// Installs the global subscriber: logs go to stderr, as JSON lines when `json`, else as text
/// (coloured only for a person at a terminal). The first line names `binary` and its release
/// ([`crate::VERSION`]).
pub fn init(binary: &str, json: bool) -> Result<(), Error> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let registry = tracing_subscriber::registry().with(filter(rust_log.as_deref())?);
    let installed = if json {
        registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .try_init()
    } else {
        let ansi = std::io::stderr().is_terminal();
        registry
            .with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr))
            .try_init()
    };
    installed.map_err(|e| Error::Install(e.to_string()))?;
    tracing::info!(
        version = crate::VERSION,
        "{binary} {} starting",
        crate::VERSION
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_overrides_the_default_and_a_bad_one_is_named() {
        use tracing_subscriber::filter::LevelFilter;
        let level = |v| filter(v).unwrap().max_level_hint();
        assert_eq!(level(None), Some(LevelFilter::INFO));
        assert_eq!(level(Some("  ")), Some(LevelFilter::INFO));
        assert_eq!(level(Some("debug")), Some(LevelFilter::DEBUG));
        let e = filter(Some("kube=loud")).unwrap_err();
        assert!(e.to_string().starts_with("RUST_LOG: "), "{e}");
    }
}
