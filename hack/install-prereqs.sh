#!/usr/bin/env bash
# Installs what the build needs beyond Go and Rust: rustfmt and clippy. Safe to re-run.
set -euo pipefail
if command -v rustup >/dev/null; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
