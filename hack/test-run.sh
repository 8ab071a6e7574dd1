#!/usr/bin/env bash
# `make test`'s check of `make run`, on a cluster of its own (kubesteer-run, .kubesteer/run/), so a
# `make run` in another terminal is never touched:
#   1. KUBESTEER_RUN_ONCE=1 make run, as a user runs it: cluster, image, chart, every sample Ready,
#      the README's try-it lines; it exits 0 and the cluster it started is gone.
#   2. A run that fails (the samples checked once for Ready, right after they are applied, when
#      no controller can have made them Ready; given 1 s, a fast rollout made them Ready in
#      time): it exits non-zero, names the step,
#      prints what explains it, keeps the cluster and says how to remove it. Then it is removed.
#   3. `make run | tee`, stopped with Ctrl-C once it is up: the cluster it started is gone, though
#      Ctrl-C took its tee too. Its parent ignores SIGINT, as a job started in the background by a
#      scheduler does (and this script may itself have been started so): Ctrl-C must reach it.
# Every run has a deadline (KUBESTEER_TEST_RUN_TIMEOUT seconds each, 1800 by default: a fresh
# machine builds the image in the first); past it the run is stopped and this script fails,
# naming the run. KUBESTEER_TEST_RUN_STEPS="3" runs only the steps it names.
. "$(dirname "$0")/lib.sh"
cd "$root"
own_cluster "${KUBESTEER_RUN_CLUSTER:-kubesteer-run}" "${KUBESTEER_RUN_STATE:-$root/.kubesteer/run}"
fail() { printf '[test-run] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'hack/cluster.sh down >/dev/null 2>&1 || true' EXIT
mkdir -p "$KUBESTEER_STATE"
out=$KUBESTEER_STATE/test-run.out
limit=${KUBESTEER_TEST_RUN_TIMEOUT:-1800}
steps=${KUBESTEER_TEST_RUN_STEPS:-1 2 3}
step_on() { [[ " $steps " == *" $1 "* ]]; }
# in_group CMD...: CMD in the background, in a process group of its own (job control on), so that
# a deadline or a Ctrl-C reaches all of it; $job is its pid.
in_group() {
  set -m
  "$@" &
  job=$!
  set +m
}

if step_on 1; then
  log "1. KUBESTEER_RUN_ONCE=1 make run"
  in_group bash -c 'set -o pipefail; KUBESTEER_RUN_ONCE=1 make --no-print-directory run 2>&1 | tee "$0"' "$out.1"
  wait_job "$job" "$limit" "run 1 (KUBESTEER_RUN_ONCE=1 make run) to end" || fail "run 1 failed or did not end within ${limit}s"
  for want in "every sample Ready" "kubesteer is running on a local control plane" \
    '$ kubectl explain scaler.spec.windows.start' "office-hours" "tearing down cluster $KUBESTEER_CLUSTER"; do
    grep -qF -- "$want" "$out.1" || fail "run 1 did not print: $want"
  done
  if hack/cluster.sh status >/dev/null 2>&1; then fail "run 1 left the cluster it started"; fi
fi

if step_on 2; then
  log "2. a run that fails: the samples checked once for Ready, right after the apply"
  in_group bash -c 'KUBESTEER_RUN_ONCE=1 KUBESTEER_SAMPLES_TIMEOUT=0s make --no-print-directory run >"$0" 2>&1' "$out.2"
  rc=0
  wait_job "$job" "$limit" "run 2 (made to fail) to end" || rc=$?
  [ "$rc" != 124 ] || fail "run 2 did not end within ${limit}s"
  if [ "$rc" = 0 ]; then
    cat "$out.2" >&2
    fail "run 2 exited 0"
  fi
  cat "$out.2"
  for want in "failed at: waiting until the controller has every sample Ready" \
    "scaler/office-hours: conditions and events" "the webhook's last denials" \
    "the controller's last errors" "the cluster stays up for a look" \
    "remove it with: KUBESTEER_CLUSTER=$KUBESTEER_CLUSTER KUBESTEER_STATE=$KUBESTEER_STATE hack/cluster.sh down"; do
    grep -qF -- "$want" "$out.2" || fail "run 2 did not print: $want"
  done
  hack/cluster.sh status >/dev/null 2>&1 || fail "run 2 did not keep the cluster for a look"
  hack/cluster.sh down >/dev/null 2>&1 || fail "could not remove the kept cluster"
fi

if step_on 3; then
  log "3. make run | tee, started by a parent that ignores SIGINT, stopped with Ctrl-C"
  # A job's process group, as a shell gives its foreground job; Ctrl-C is SIGINT to that whole
  # group, the tee as well, so the teardown runs with its output going to a dead pipe. (The real
  # node's processes have sessions of their own: hack/node.sh.) Its parent ignores SIGINT, as a
  # job started in the background by a shell without job control does: bash cannot undo that for
  # itself, so the job starts through with_default_sigint. Without it run.sh says, once up, that
  # Ctrl-C cannot reach it, and this step fails on that line rather than wait.
  rm -f "$KUBESTEER_STATE/teardown.log" "$out.3"
  ignoring_parent() {
    trap '' INT
    with_default_sigint bash -c 'make --no-print-directory run 2>&1 | tee "$0"' "$out.3"
  }
  in_group ignoring_parent
  deadline=$((SECONDS + limit))
  until grep -qF "Press Ctrl-C" "$out.3" 2>/dev/null; do
    kill -0 "$job" 2>/dev/null || fail "run 3 ended before it was up: $(tail -n 20 "$out.3" 2>/dev/null)"
    [ "$SECONDS" -lt "$deadline" ] || { kill -TERM -- "-$job"; fail "run 3 was not up within ${limit}s"; }
    sleep 1
  done
  if grep -qF "SIGINT is ignored in this run" "$out.3"; then
    kill -TERM -- "-$job" 2>/dev/null || true
    wait_job "$job" 180 "run 3 to end after SIGTERM" || true
    fail "run 3 was started with SIGINT ignored: Ctrl-C cannot reach it (stopped it with SIGTERM)"
  fi
  kill -INT -- "-$job"
  rc=0
  wait_job "$job" 180 "run 3 to end after Ctrl-C" || rc=$?
  [ "$rc" != 124 ] || fail "run 3 did not end within 180s of Ctrl-C (stopped with SIGTERM)"
  deadline=$((SECONDS + 180))
  while hack/cluster.sh status >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "run 3 left its cluster after Ctrl-C"
    sleep 1
  done
  # Torn down by the run itself, not gone some other way: its teardown's own log says so.
  for want in "tearing down cluster $KUBESTEER_CLUSTER" "cluster $KUBESTEER_CLUSTER deleted"; do
    grep -qF -- "$want" "$KUBESTEER_STATE/teardown.log" 2>/dev/null ||
      fail "run 3's teardown did not log: $want"
  done
fi
log "the runs as expected (steps: $steps)"
