#!/usr/bin/env bash
# The controller restarted on a settled benchmark cluster: its peak RSS (VmHWM) and its RSS once it
# is ready (every watch listed) and its reconcile count stood still for 15 s, BENCH_RESTARTS (3)
# times in a row, with the controller-manager paused (SIGSTOP) so that nothing else changes, and
# its CPU time until then; and, around each restart, how many Memcacheds, Scalers, Deployments
# and Services changed (none, unless the controller before it had writes left to make;
# BENCH_RESTART_CHANGES=0 skips counting them, which takes kubectl a minute on 60,000 objects).
# Needs a cluster that `BENCH_PHASES=scale BENCH_KEEP_CLUSTER=1 make bench-controller` left, with
# the same BENCH_CLUSTER and BENCH_STATE; prints JSON. Example, on a smaller cluster:
#   BENCH_PHASES=scale BENCH_SCALE_MEMCACHEDS=6000 BENCH_SCALE_SCALERS=1200 BENCH_SCALE_NAMESPACES=6 \
#     BENCH_KEEP_CLUSTER=1 BENCH_CLUSTER=wtest make bench-controller
#   BENCH_CLUSTER=wtest bench/scripts/restart.sh
. "$(dirname "$0")/controller-lib.sh"
cd "$root"
cluster=${BENCH_CLUSTER:-bench}
state=${BENCH_STATE:-$root/bench/tmp/cluster}
work=$(bench_work "$cluster")
restarts=${BENCH_RESTARTS:-3}
count_changes=${BENCH_RESTART_CHANGES:-1}
port=${BENCH_METRICS_PORT:-19680}
bin=${BENCH_CONTROLLER_BIN:-target/release/kubesteer-controller}
kc=("$cache/bin/kubectl" --kubeconfig "$state/kubeconfig")
[ -f "$work/controller.kubeconfig" ] || { echo "restart: no benchmark cluster left in $work (see the header)" >&2 && exit 2; }
kcm=$(kcm_pid "$cluster")
[ -n "$kcm" ] || { echo "restart: no kube-controller-manager of cluster $cluster" >&2 && exit 2; }
log() { printf '[bench-restart %s] %s\n' "$(date +%T)" "$*" >&2; }
# kind/namespace/name resourceVersion of every Memcached, Scaler, Deployment and Service, sorted.
versions() {
  local kind
  [ "$count_changes" != 0 ] || return 0
  for kind in memcacheds scalers deployments services; do
    "${kc[@]}" get "$kind" -A --no-headers -o custom-columns=N:.metadata.namespace,M:.metadata.name,V:.metadata.resourceVersion |
      awk -v k="$kind" '{print k "/" $1 "/" $2, $3}'
  done | sort
}

pid=
cleanup() {
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
  kill -CONT "$kcm" 2>/dev/null || true
}
trap cleanup EXIT
kill -STOP "$kcm"
versions >"$work/restart-versions-0"
objects=null
[ "$count_changes" = 0 ] || objects=$(wc -l <"$work/restart-versions-0")
runs=()
for i in $(seq 1 "$restarts"); do
  start=$(date +%s)
  KUBECONFIG="$work/controller.kubeconfig" "$bin" --metrics-addr "127.0.0.1:$port" >"$work/restart-$i.log" 2>&1 &
  pid=$!
  last=-1 still=0 count=0
  while [ "$still" -lt 15 ]; do
    sleep 1
    kill -0 "$pid" 2>/dev/null || { log "the controller exited; its log:"; tail -20 "$work/restart-$i.log" >&2; exit 1; }
    count=$(reconciles_total "$port") || count=0 # not answering yet
    # Settled: every watch has listed (ready) and no reconcile for 15 s.
    if [ "$count" = "$last" ] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; then
      still=$((still + 1))
    else
      still=0
    fi
    last=$count
    [ $(($(date +%s) - start)) -lt 1800 ] || { log "run $i: reconciles never stood still in 30 minutes"; exit 1; }
  done
  peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  settled=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); printf "%.1f", ($12 + $13) / hz}' "/proc/$pid/stat")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
  versions >"$work/restart-versions-$i"
  changed=null
  [ "$count_changes" = 0 ] || changed=$(comm -13 "$work/restart-versions-$((i - 1))" "$work/restart-versions-$i" | wc -l)
  log "run $i: $count reconciles, peak $peak KiB, settled $settled KiB, CPU $cpu s, $changed objects changed"
  runs+=("{\"peak_rss_kib\": $peak, \"settled_rss_kib\": $settled, \"reconciles\": $count, \"cpu_s\": $cpu, \"seconds\": $(($(date +%s) - start)), \"objects_changed\": $changed}")
done
printf '{"cluster": "%s", "commit": "%s", "date": "%s", "malloc_conf": "%s", "objects": %s, "runs": [%s]}\n' "$cluster" \
  "$(git rev-parse --short HEAD)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${_RJEM_MALLOC_CONF:-}" "$objects" "$(IFS=,; echo "${runs[*]}")" |
  python3 -m json.tool
