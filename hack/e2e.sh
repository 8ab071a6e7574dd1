#!/usr/bin/env bash
# Runs the end-to-end tests on a cluster of their own, never on `make run`'s: the kwokctl cluster
# kubesteer-e2e, its state (kubeconfig, kwokctl files, the real node, the image archive) in
# .kubesteer/e2e/. tests/src/lib.rs reads that kubeconfig by default. As root the cluster has a
# real node of its own (hack/node.sh), beside `make run`'s; the project image is built
# (make image) for tests/tests/image.rs and loaded into that node for tests/tests/install.rs.
# The cluster is started here and torn down afterwards; KUBESTEER_KEEP_CLUSTER=1 keeps it, and
# the next run reuses it. KUBESTEER_E2E_CLUSTER and KUBESTEER_E2E_STATE name another one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. hack/own-cluster.sh
own_cluster e2e "${KUBESTEER_E2E_CLUSTER:-kubesteer-e2e}" "${KUBESTEER_E2E_STATE:-$root/.kubesteer/e2e}"
# Everything that reads a kubeconfig (the tests, kubectl, helm, hack/deploy.sh) gets this one,
# whatever KUBECONFIG the calling shell exported.
export KUBESTEER_KUBECONFIG=$KUBESTEER_STATE/kubeconfig
export KUBECONFIG=$KUBESTEER_KUBECONFIG
img=${KUBESTEER_IMAGE:-kubesteer:dev}
export KUBESTEER_IMAGE=$img
export KUBESTEER_IMAGE_ARCHIVE=$KUBESTEER_STATE/image.tar
cleanup() {
  if [ "${KUBESTEER_KEEP_CLUSTER:-0}" = 0 ]; then
    hack/cluster.sh down
  else
    echo "[e2e] kept cluster $KUBESTEER_CLUSTER: export KUBECONFIG=$KUBECONFIG" >&2
  fi
}
trap cleanup EXIT
hack/install-prereqs.sh
hack/cluster.sh up
cargo build --workspace --bins
make --no-print-directory image IMG="$img" IMAGE_TAR="$KUBESTEER_IMAGE_ARCHIVE"
if hack/node.sh status; then
  hack/node.sh load "$KUBESTEER_IMAGE_ARCHIVE"
fi
cargo test -p kubesteer-tests -- --test-threads "${KUBESTEER_E2E_THREADS:-4}"
