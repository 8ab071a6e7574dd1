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
#      Ctrl-C took its tee too.
. "$(dirname "$0")/lib.sh"
cd "$root"
own_cluster "${KUBESTEER_RUN_CLUSTER:-kubesteer-run}" "${KUBESTEER_RUN_STATE:-$root/.kubesteer/run}"
fail() { printf '[test-run] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'hack/cluster.sh down >/dev/null 2>&1 || true' EXIT
mkdir -p "$KUBESTEER_STATE"
out=$KUBESTEER_STATE/test-run.out

log "1. KUBESTEER_RUN_ONCE=1 make run"
KUBESTEER_RUN_ONCE=1 make --no-print-directory run 2>&1 | tee "$out.1"
for want in "every sample Ready" "kubesteer is running on a local control plane" \
  '$ kubectl explain scaler.spec.windows.start' "office-hours" "tearing down cluster $KUBESTEER_CLUSTER"; do
  grep -qF -- "$want" "$out.1" || fail "run 1 did not print: $want"
done
if hack/cluster.sh status >/dev/null 2>&1; then fail "run 1 left the cluster it started"; fi

log "2. a run that fails: the samples checked once for Ready, right after the apply"
if KUBESTEER_RUN_ONCE=1 KUBESTEER_SAMPLES_TIMEOUT=0s make --no-print-directory run >"$out.2" 2>&1; then
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

log "3. make run | tee, stopped with Ctrl-C"
# With job control on, the job gets a process group of its own, as a shell's foreground job does
# (and SIGINT is not ignored in it, as it is in a script's background jobs without). Ctrl-C is
# SIGINT to that whole group, the tee as well, so the teardown runs with its output going to a
# dead pipe. (The real node's processes have sessions of their own: hack/node.sh.)
rm -f "$KUBESTEER_STATE/teardown.log" "$out.3"
set -m
bash -c 'make --no-print-directory run 2>&1 | tee "$0"' "$out.3" &
job=$!
set +m
deadline=$((SECONDS + ${KUBESTEER_READY_TIMEOUT:-300} + 300))
until grep -qF "Press Ctrl-C" "$out.3" 2>/dev/null; do
  kill -0 "$job" 2>/dev/null || fail "run 3 ended before it was up: $(tail -n 20 "$out.3" 2>/dev/null)"
  [ "$SECONDS" -lt "$deadline" ] || { kill -TERM -- "-$job"; fail "run 3 was not up within its timeouts"; }
  sleep 1
done
kill -INT -- "-$job"
wait "$job" || true
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
log "the three runs as expected"
