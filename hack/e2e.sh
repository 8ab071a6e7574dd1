#!/usr/bin/env bash
# Runs the end-to-end tests against the local real cluster: reuses one that is up, or starts
# one and tears it down afterwards (KUBESTEER_KEEP_CLUSTER=1 keeps it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
started=0
hack/cluster.sh status || started=1
cleanup() {
  if [ "$started" = 1 ] && [ -z "${KUBESTEER_KEEP_CLUSTER:-}" ]; then hack/cluster.sh down; fi
}
trap cleanup EXIT
hack/cluster.sh up
cargo build --workspace --bins
cargo test -p kubesteer-tests -- --test-threads "${KUBESTEER_E2E_THREADS:-4}"
