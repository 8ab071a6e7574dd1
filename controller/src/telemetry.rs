//! Structured logs with `tracing`, as text or JSON.
use std::io::IsTerminal;

use tracing_subscriber::{fmt, prelude::*, EnvFilter};

use crate::{Error, Result};

/// Installs the global subscriber; `RUST_LOG` overrides the default level.
pub fn init(json: bool) -> Result<()> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new("info,kube_runtime=warn,kube_lease_manager=warn"))
        .map_err(|e| Error::Telemetry(e.to_string()))?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = if json {
        registry
            .with(fmt::layer().json().flatten_event(true))
            .try_init()
    } else {
        // Colours only for a person at a terminal; log files and collectors get plain text.
        let ansi = std::io::stdout().is_terminal();
        registry.with(fmt::layer().with_ansi(ansi)).try_init()
    };
    result.map_err(|e| Error::Telemetry(e.to_string()))
}
