#!/usr/bin/env bash
# Runs the end-to-end tests on a cluster of their own, never on `make run`'s: the kwokctl cluster
# kubesteer-e2e, its state (kubeconfig, kwokctl files, the real node, the image archive) in
# .kubesteer/e2e/. tests/src/lib.rs reads that kubeconfig by default. As root the cluster has a
# real node of its own (hack/node.sh), beside `make run`'s; the project image is built
# (make image) for tests/e2e/install/image.rs and loaded into that node for
# tests/e2e/install/release.rs.
# The cluster is started here and torn down afterwards; KUBESTEER_KEEP_CLUSTER=1 keeps it, and
# the next run reuses it. KUBESTEER_E2E_GROUPS runs only the groups it names.
# KUBESTEER_E2E_CLUSTER and KUBESTEER_E2E_STATE name another one.
. "$(dirname "$0")/lib.sh"
cd "$root"
own_cluster "${KUBESTEER_E2E_CLUSTER:-kubesteer-e2e}" "${KUBESTEER_E2E_STATE:-$root/.kubesteer/e2e}"
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
# One e2e binary (tests/e2e/main.rs), run one file's tests at a time (`scaler::conversion::`),
# since the tests of a file may share cluster-wide state; areas in this order, every test once.
cargo test -p kubesteer-tests --test e2e --no-run
# KUBESTEER_E2E_GROUPS="install::monitoring:: scaler::conversion::" runs only those groups.
groups=${KUBESTEER_E2E_GROUPS:-$(cargo test -q -p kubesteer-tests --test e2e -- --list --format terse |
  sed -n -e 's/^\([a-z_]*::[a-z0-9_]*::\).*: test$/\1/p' -e t -e 's/: test$//p' | uniq |
  awk 'BEGIN { n = split("webhook owners scaler resilience install", order, " ");
               for (i = 1; i <= n; i++) rank[order[i]] = i }
       { split($0, p, "::"); r = (p[1] in rank) ? rank[p[1]] : n + 1; print r, NR, $0 }' |
  sort -n -k1,1 -k2,2 | cut -d" " -f3)}
[ -n "$groups" ] || { echo "[e2e] no tests listed by tests/e2e" >&2; exit 1; }
for group in $groups; do
  echo "[e2e] $group" >&2
  cargo test -q -p kubesteer-tests --test e2e -- --test-threads "${KUBESTEER_E2E_THREADS:-4}" "$group"
done
