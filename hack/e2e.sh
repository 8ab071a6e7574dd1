#!/usr/bin/env bash
# Runs the end-to-end tests on a cluster of their own, never on `make run`'s: the kwokctl cluster
# kubesteer-e2e, its state (kubeconfig, kwokctl files, the real node, the image archive) in
# .kubesteer/e2e/. tests/src/lib.rs reads that kubeconfig by default. As root the cluster has a
# real node of its own (hack/node.sh), beside `make run`'s; the project image is built
# (make image) for tests/e2e/install/image.rs and loaded into that node for
# tests/e2e/install/release.rs. It builds (niced, its output in $KUBESTEER_STATE/image-build.log)
# while the groups that run the host's binaries do (from before the checks under `make test`:
# hack/test.sh); the groups that need it run last and wait.
# The cluster is started here and torn down afterwards; KUBESTEER_KEEP_CLUSTER=1 keeps it, and
# the next run reuses it. KUBESTEER_E2E_GROUPS runs only the groups it names.
# KUBESTEER_E2E_CLUSTER and KUBESTEER_E2E_STATE name another one. KUBESTEER_E2E_PART=host runs
# only the groups that run the host's binaries (no image built), =image only those that need the
# image, =all (the default) both: hack/test.sh runs the two parts side by side, each on a cluster
# of its own.
# Deadlines: the image's build gets KUBESTEER_IMAGE_BUILD_TIMEOUT seconds (2700: a fresh machine
# compiles every dependency), each group's tests KUBESTEER_E2E_GROUP_TIMEOUT (1200); past one, it
# is stopped and the run fails, naming it.
. "$(dirname "$0")/lib.sh"
cd "$root"
own_cluster "${KUBESTEER_E2E_CLUSTER:-kubesteer-e2e}" "$e2e_state"
# Everything that reads a kubeconfig (the tests, kubectl, helm, hack/deploy.sh) gets this one,
# whatever KUBECONFIG the calling shell exported.
export KUBESTEER_KUBECONFIG=$KUBESTEER_STATE/kubeconfig
export KUBECONFIG=$KUBESTEER_KUBECONFIG
part=${KUBESTEER_E2E_PART:-all}
case $part in
  all | host | image) ;;
  *) echo "[e2e] KUBESTEER_E2E_PART: expected all, host or image, got \"$part\"" >&2; exit 2 ;;
esac
img=${KUBESTEER_IMAGE:-kubesteer:dev}
export KUBESTEER_IMAGE=$img
export KUBESTEER_IMAGE_ARCHIVE=$KUBESTEER_STATE/image.tar
image_pid=
image_log=$KUBESTEER_STATE/image-build.log
cleanup() {
  # A build still running (a group failed before install::) goes with the script: its process
  # group, since make runs cargo.
  if [ -n "$image_pid" ]; then kill -- "-$image_pid" 2>/dev/null || true; fi
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
# The image's build (hack/image.sh: its own target dir, so no lock on target/) in a process group
# of its own, at a lower priority than the tests and the cluster; hack/test.sh (`make test`) has
# started it already, beside the checks, when it gives its pid.
mkdir -p "$KUBESTEER_STATE"
if [ "$part" != host ]; then
  image_pid=${KUBESTEER_IMAGE_BUILD_PID:-$(image_build_start "$img" "$KUBESTEER_IMAGE_ARCHIVE" "$image_log")}
fi
# image_ready: waits for the image's build (its log goes to stderr), then loads the image into the
# real node; the build's failure fails the run.
image_ready() {
  [ -n "$image_pid" ] || return 0
  local rc=0
  echo "[e2e] waiting for the image's build ($image_log)" >&2
  image_build_wait "$image_pid" "$image_log" "${KUBESTEER_IMAGE_BUILD_TIMEOUT:-2700}" || rc=$?
  image_pid=
  [ "$rc" = 0 ] || { echo "[e2e] the image's build failed ($rc)" >&2; exit 1; }
  if hack/node.sh status; then
    hack/node.sh load "$KUBESTEER_IMAGE_ARCHIVE"
  fi
}
# One e2e binary (tests/e2e/main.rs), run one file's tests at a time (`scaler::conversion::`),
# since the tests of a file may share cluster-wide state; areas in this order, every test once.
# Run as cargo would run it (from tests/), but directly, so that a group's deadline (timeout
# --foreground, which keeps Ctrl-C reaching it) stops the tests themselves, not a cargo above them.
# (Cargo's output is shown after it ends: a `tee /dev/stderr` would reopen, and so truncate, a
# log file that stderr goes to.)
no_run=$(cargo test -p kubesteer-tests --test e2e --no-run 2>&1) || { printf '%s\n' "$no_run" >&2; exit 1; }
printf '%s\n' "$no_run" >&2
e2e_bin=$(sed -n 's/^ *Executable .* (\(.*\))$/\1/p' <<<"$no_run" | tail -n 1)
[ -n "$e2e_bin" ] || { echo "[e2e] cargo named no e2e test binary" >&2; exit 1; }
e2e_bin=$(realpath "$e2e_bin")
# KUBESTEER_E2E_GROUPS="install::monitoring:: scaler::conversion::" runs only those groups.
groups=${KUBESTEER_E2E_GROUPS:-$( (cd tests && "$e2e_bin" --list --format terse) |
  sed -n -e 's/^\([a-z_]*::[a-z0-9_]*::\).*: test$/\1/p' -e t -e 's/: test$//p' | uniq |
  awk 'BEGIN { n = split("webhook owners scaler resilience install soak", order, " ");
               for (i = 1; i <= n; i++) rank[order[i]] = i }
       { split($0, p, "::"); r = (p[1] in rank) ? rank[p[1]] : n + 1; print r, NR, $0 }' |
  sort -n -k1,1 -k2,2 | cut -d" " -f3)}
[ -n "$groups" ] || { echo "[e2e] no tests listed by tests/e2e" >&2; exit 1; }
# needs_image GROUP: whether the group's file runs the image: the install:: area (the image's own
# checks) and every file that installs the chart (Release::).
needs_image() {
  local rest=${1#*::} file
  file=tests/e2e/${1%%::*}/${rest%%::*}.rs
  case $1 in install::*) return 0 ;; esac
  [ -f "$file" ] && grep -q 'Release::' "$file"
}
# The groups that need the image run last, in their order, so that it builds beside the others.
host_groups= image_groups=
for group in $groups; do
  if needs_image "$group"; then image_groups="$image_groups $group"; else host_groups="$host_groups $group"; fi
done
case $part in
  host) image_groups= ;;
  image) host_groups= ;;
esac
[ -n "$host_groups$image_groups" ] || echo "[e2e] none of the groups is of the $part part: $groups" >&2
# The groups that see and change only what they make themselves (their own release, namespaces
# and objects: no CRD, node, conversion or cluster-wide setting) run as one, where the first of
# them would, so that their tests share the threads; the others run one at a time.
# KUBESTEER_E2E_BESIDE="" runs every group alone.
beside=${KUBESTEER_E2E_BESIDE-webhook::apiserver_auth:: install::certificates:: install::chart:: install::image:: \
install::metrics:: install::monitoring:: install::plugin:: install::rbac:: install::readiness:: install::readme::}
runs= together=
for group in $host_groups $image_groups; do
  if [[ " $beside " == *" $group "* ]]; then
    [ -n "$together" ] || runs="$runs @together"
    together="$together${together:++}$group"
  else
    runs="$runs $group"
  fi
done
runs=${runs/@together/$together}
for run in $runs; do
  for group in ${run//+/ }; do
    if needs_image "$group"; then image_ready; fi
  done
  echo "[e2e] ${run//+/ }" >&2
  group_timeout=${KUBESTEER_E2E_GROUP_TIMEOUT:-1200}
  rc=0 started=$(date +%s)
  # shellcheck disable=SC2086 # one filter per group
  (cd tests && timeout --foreground --kill-after=30 "$group_timeout" \
    "$e2e_bin" -q --test-threads "${KUBESTEER_E2E_THREADS:-4}" ${run//+/ }) || rc=$?
  echo "[e2e] ${run//+/ }: $(($(date +%s) - started)) s" >&2
  [ "$rc" != 124 ] || { echo "[e2e] ${run//+/ }: its tests did not finish within ${group_timeout}s" >&2; exit 1; }
  [ "$rc" = 0 ] || exit "$rc"
done
# Every run but a host part's builds the image, whichever groups it ran.
image_ready
