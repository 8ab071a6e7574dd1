#!/usr/bin/env bash
# Runs the end-to-end tests against the local real cluster: reuses one that is up, or starts
# one and tears it down afterwards (KUBESTEER_KEEP_CLUSTER=1 keeps it). As root, the cluster has
# its real node; the project image is built (make image) for tests/tests/image.rs and loaded into
# the node for the tests of the real install (tests/tests/install.rs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
img=${KUBESTEER_IMAGE:-kubesteer:dev}
export KUBESTEER_IMAGE=$img
started=0
hack/cluster.sh status || started=1
cleanup() {
  if [ "$started" = 1 ] && [ -z "${KUBESTEER_KEEP_CLUSTER:-}" ]; then hack/cluster.sh down; fi
}
trap cleanup EXIT
hack/install-prereqs.sh
hack/cluster.sh up
cargo build --workspace --bins
make --no-print-directory image IMG="$img"
if hack/node.sh status; then
  hack/node.sh load "${KUBESTEER_IMAGE_ARCHIVE:-.kubesteer/image.tar}"
fi
cargo test -p kubesteer-tests -- --test-threads "${KUBESTEER_E2E_THREADS:-4}"
