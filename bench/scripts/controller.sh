#!/usr/bin/env bash
# Controller benchmark on a real local control plane of its own (never the default cluster).
# Phases (BENCH_PHASES, default all four, in this order):
#   convergence  1,000 Memcacheds (size 1) until Ready=True, against the ceiling of a plain client
#                creating the same Deployments and Services directly; each on a fresh cluster;
#   memory       VmRSS/VmHWM of the controller once 5,000 Memcacheds are reconciled (the 4,000
#                beyond the convergence phase's 1,000 have size 0);
#   idle         the controller's non-watch requests per minute with 100 idle Scalers, counted in
#                the apiserver's audit log (the controller has a client certificate of its own);
#   lateness     Scaler windows opening and closing at minute boundaries, seen by a watch.
# and, only when named (it takes most of an hour):
#   scale        on a fresh cluster of its own: 1,000 Memcacheds of size 1 until Ready, then
#                BENCH_SCALE_MEMCACHEDS (default 50,000) in all with the rest of size 0 until
#                reconciled, then BENCH_SCALE_SCALERS (default 10,000) idle Scalers with a
#                Deployment each, both spread over BENCH_SCALE_NAMESPACES (default 50; with all
#                in one namespace the controller-manager's deployment controller, which lists
#                the namespace's ReplicaSets for every Deployment, does not finish within the
#                hour); the controller's RSS with all of them, its requests in
#                BENCH_IDLE_SECONDS of quiet (twice: with the controller-manager running, and
#                paused so that nothing changes), and the lateness of 30 more Scalers switching
#                at once.
#   fleet        on a fresh cluster of its own (bench/src/fleet.rs): BENCH_FLEET_NAMESPACES (default
#                100) namespaces fleet-0.. with BENCH_FLEET_PER_NAMESPACE (default 100) Deployments
#                each (label tier: web, BENCH_FLEET_REPLICAS replicas, default 2, on enough kwok
#                nodes for their pods, BENCH_FLEET_NODES), one selector Scaler per namespace, every
#                window closing at one minute boundary (every Deployment to 0 then: lateness seen by
#                a watch, the controller's requests per target, its RSS); then BENCH_FLEET_HOLD
#                (default 1,000) of them scaled back up by a plain client, which outside.mode Hold
#                sets back to 0; then, with the controller stopped, a plain client's PATCH of every
#                Deployment, BENCH_FLEET_CEILING_CONCURRENCY (200, 0 skips it) at a time: the
#                apiserver's ceiling line. Writes bench/results/controller-fleet.json (and nothing else).
# Each phase merges its section into bench/results/controller.json as soon as it is done.
# A benchmark, not a test: numbers vary with the machine and whatever else runs on it.
#
# BENCH_SUBJECT=peers runs the convergence phase only, side by side: per run (BENCH_REPEATS,
# default 3) the subjects of BENCH_PEER_SUBJECTS (default all five: ceiling kubesteer go-default
# go-tuned go-tutorial; `owned` and `writes` only when named), each on a fresh cluster: the ceiling;
# `owned`, the ceiling of any controller (each Memcached created by the bench client, then its
# Deployment and Service with the controller owner reference, no controller running); `writes`, the
# floor of kubesteer's own writes (owned, plus each Memcached's first status and Created event as
# kubesteer writes them, and its Ready status, naming its pods, as soon as the client's pod watch sees
# them Ready, as kubesteer reads Ready: no controller, no reconcile, no cache); kubesteer's controller; the
# operator-sdk-style Go peer that applies its children on every reconcile (bench/peers/controller,
# controller-runtime v0.22) with kubebuilder's defaults (go-default: 1 worker, client QPS 20,
# burst 30) and tuned (go-tuned, BENCH_PEER_TUNED, default 32 workers, QPS 1000, burst 2000); and
# the Go peer in the kubebuilder tutorial's Get/Create/Update pattern (go-tutorial,
# bench/peers/tutorial, BENCH_PEER_TUTORIAL, default as tuned). The controllers are pinned to the
# same cores (BENCH_CONTROLLER_CPUS, default 0), with the same client certificate and the same
# load client; the order rotates from run to run. After each controller converged, one
# steady-state resync: the bench client annotates every Memcached (no new generation) and the
# controller's requests are counted from then until BENCH_RESYNC_SECONDS (default 20) after the
# last annotation. Writes the medians and ratios to bench/results/controller-peers.json
# (controller.json is left alone); subjects left out are missing there, their ratios null.
# BENCH_CARGO_PROFILE (default release) is the cargo profile the controller and the client are
# built with; `image` is the profile of the image's binary (opt-level s, fat LTO), here linked
# dynamically. The peers report names it (cargo_profile).
# BENCH_APISERVER_PROFILE=<seconds> adds a CPU profile of the apiserver over the first <seconds>
# of each run's convergence (bench/scripts/profile-shares.py reads them).
. "$(dirname "$0")/controller-lib.sh"
tag=bench-controller
cd "$root"
# shellcheck source=../versions.env
phases=" ${BENCH_PHASES:-convergence memory idle lateness} "
count=${BENCH_CONVERGE_COUNT:-1000}
memory_total=${BENCH_MEMORY_COUNT:-5000}
idle_scalers=${BENCH_IDLE_SCALERS:-100}
idle_seconds=${BENCH_IDLE_SECONDS:-180}
late_scalers=${BENCH_LATENESS_SCALERS:-30}
scale_memcacheds=${BENCH_SCALE_MEMCACHEDS:-50000}
scale_scalers=${BENCH_SCALE_SCALERS:-10000}
scale_namespaces=${BENCH_SCALE_NAMESPACES:-50}
fleet_namespaces=${BENCH_FLEET_NAMESPACES:-100}
fleet_per=${BENCH_FLEET_PER_NAMESPACE:-100}
fleet_replicas=${BENCH_FLEET_REPLICAS:-2}
fleet_hold=${BENCH_FLEET_HOLD:-1000}
subject=${BENCH_SUBJECT:-kubesteer}
case $subject in
  kubesteer) repeats=${BENCH_REPEATS:-1} ;;
  peers) repeats=${BENCH_REPEATS:-3} && phases=" convergence " ;;
  *) echo "bench-controller: BENCH_SUBJECT must be kubesteer or peers, not $subject" >&2 && exit 2 ;;
esac
profile=${BENCH_CARGO_PROFILE:-release}
case $profile in dev) bin=target/debug ;; *) bin=target/$profile ;; esac
concurrency=${BENCH_CONCURRENCY:-32}
port=${BENCH_METRICS_PORT:-19680}
user=kubesteer-bench-controller

# The benchmark's own cluster; kwok nodes take 110 pods each. Without leader election the
# controller-manager and scheduler keep running when an overloaded apiserver is slow to renew.
export KUBESTEER_CLUSTER=${BENCH_CLUSTER:-bench}
# The benchmark measures the controller against kwok nodes only; the real node is not needed.
export KUBESTEER_REAL_NODE=0
export KUBESTEER_STATE=${BENCH_STATE:-$root/bench/tmp/cluster}
export KUBESTEER_NODES=${BENCH_NODES:-$((count / 100 + 2))}
export KUBESTEER_AUDIT_POLICY=$root/bench/audit-policy.yaml
export KUBESTEER_EXTRA_ARGS="kube-controller-manager=leader-elect=false kube-scheduler=leader-elect=false"
if [ "$KUBESTEER_CLUSTER" = kubesteer ] || [ "$KUBESTEER_STATE" = "$root/.kubesteer" ]; then
  echo "bench-controller: refusing to run on the default cluster" >&2
  exit 2
fi
kubeconfig=$KUBESTEER_STATE/kubeconfig
pki=$KUBESTEER_STATE/kwok/clusters/$KUBESTEER_CLUSTER/pki
logs=$KUBESTEER_STATE/kwok/clusters/$KUBESTEER_CLUSTER/logs
work=$(bench_work "$KUBESTEER_CLUSTER")
rm -rf "$work"
mkdir -p "$work" bench/results
bench=(nice -n 5 env KUBECONFIG="$kubeconfig" "$bin/kubesteer-bench")
log() { printf '[bench-controller %s] %s\n' "$(date +%T)" "$*" >&2; }
now() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
has() { [[ $phases == *" $1 "* ]]; }

if [ "$subject" = peers ]; then
  read -r -a peer_subjects <<<"${BENCH_PEER_SUBJECTS:-ceiling kubesteer go-default go-tuned go-tutorial}"
  [ ${#peer_subjects[@]} -gt 0 ] || { echo "bench-controller: BENCH_PEER_SUBJECTS is empty" >&2 && exit 2; }
  for name in "${peer_subjects[@]}"; do
    case $name in
      ceiling | owned | writes | kubesteer | go-default | go-tuned | go-tutorial) ;;
      *) echo "bench-controller: unknown subject $name in BENCH_PEER_SUBJECTS" >&2 && exit 2 ;;
    esac
  done
  resync_seconds=${BENCH_RESYNC_SECONDS:-20}
  peer_tuned=${BENCH_PEER_TUNED:---workers 32 --qps 1000 --burst 2000}
  peer_tutorial=${BENCH_PEER_TUTORIAL:---workers 32 --qps 1000 --burst 2000}
fi

cargo build --profile "$profile" -p kubesteer-controller -p kubesteer-bench
if [ "$subject" = peers ]; then
  # shellcheck source=peers.sh
  . "$root/bench/scripts/peers.sh"
  peer= tutorial=
  if [[ " ${peer_subjects[*]} " == *" go-default "* || " ${peer_subjects[*]} " == *" go-tuned "* ]]; then
    peer=$(peer_bin controller)
  fi
  if [[ " ${peer_subjects[*]} " == *" go-tutorial "* ]]; then tutorial=$(peer_bin tutorial); fi
fi

controller_pid=
stop_controller() {
  if [ -n "$controller_pid" ]; then
    kill "$controller_pid" 2>/dev/null || true
    wait "$controller_pid" 2>/dev/null || true
    controller_pid=
  fi
}
resume_kcm() {
  local pid
  pid=$(kcm_pid "$KUBESTEER_CLUSTER")
  if [ -n "$pid" ]; then kill -CONT "$pid" 2>/dev/null || true; fi
}
cleanup() {
  resume_kcm
  stop_controller
  [ -n "${BENCH_KEEP_CLUSTER:-}" ] || hack/cluster.sh down
}
trap cleanup EXIT

fresh_cluster() {
  hack/cluster.sh down
  hack/cluster.sh up
}

# The controller gets a client certificate of its own (group system:masters), so that the
# audit policy logs its requests, and only its.
start_controller() { # log-file [controller command...] (default: kubesteer's)
  local logfile=$1
  shift
  local cmd=("$@")
  [ ${#cmd[@]} -gt 0 ] || cmd=("$bin/kubesteer-controller")
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/controller.key" \
    -subj "/O=system:masters/CN=$user" -out "$work/controller.csr" 2>/dev/null
  openssl x509 -req -in "$work/controller.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 1 -extfile <(printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n') \
    -out "$work/controller.crt" 2>/dev/null
  local server k=("$cache/bin/kubectl" --kubeconfig "$work/controller.kubeconfig")
  server=$("$cache/bin/kubectl" --kubeconfig "$kubeconfig" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  rm -f "$work/controller.kubeconfig"
  "${k[@]}" config set-cluster bench --server "$server" --certificate-authority "$pki/ca.crt" >/dev/null
  "${k[@]}" config set-credentials controller --client-certificate "$work/controller.crt" --client-key "$work/controller.key" >/dev/null
  "${k[@]}" config set-context bench --cluster bench --user controller >/dev/null
  "${k[@]}" config use-context bench >/dev/null
  # Peers mode pins every controller to the same cores; otherwise it runs where it likes, as before.
  local pin=()
  [ "$subject" = peers ] && pin=(taskset -c "${BENCH_CONTROLLER_CPUS:-0}")
  KUBECONFIG="$work/controller.kubeconfig" "${pin[@]}" "${cmd[@]}" \
    --metrics-addr "127.0.0.1:$port" >"$logfile" 2>&1 &
  controller_pid=$!
  local up=0
  for _ in $(seq 1 100); do
    if curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; then up=1 && break; fi
    kill -0 "$controller_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$up" = 0 ]; then
    log "the controller did not start; its log:"
    tail -20 "$logfile" >&2
    exit 1
  fi
  # Ready is set before the watches' first lists; give them time to be established.
  sleep 3
  log "controller running (pid $controller_pid)"
}
ensure_controller() {
  if [ -z "$controller_pid" ]; then
    fresh_cluster
    start_controller "$work/controller.log"
  fi
}

# Waits until the controller has had no reconcile for 20 s (at most 10 minutes), so that a
# measurement of quiet is not the tail of earlier work.
quiesce() {
  local before after
  for _ in $(seq 1 30); do
    before=$(reconciles_total "$port")
    sleep 20
    after=$(reconciles_total "$port")
    if [ "$before" = "$after" ]; then return 0; fi
  done
  log "the controller did not quiesce within 10 minutes"
}
# BENCH_IDLE_SECONDS of quiet, and the controller's requests received in it.
idle_window() { # out
  local from to
  from=$(now)
  sleep "$idle_seconds"
  to=$(now)
  sleep 2 # the audit log's last events of the window
  "${bench[@]}" audit --log "$logs"/audit*.log --user "$user" --since "$from" --until "$to" >"$1"
}
# The controller's requests received in [since, until], from every (rotated) audit log file.
audit() { # converge-or-touch-output out: the window of that converge run (or touch)
  "${bench[@]}" audit --log "$logs"/audit*.log --user "$user" --window-of "$1" >"$2"
}
# The controller's resident memory, open files and CPU time now.
process() { # out
  "${bench[@]}" process --pid "$controller_pid" >"$1"
}
# Merges one phase's section into bench/results/controller.json, from the files in $work.
report() { # phase [flags]
  "${bench[@]}" report "$@" --work "$work" --out bench/results/controller.json --k8s "$K8S_VERSION"
}

# BENCH_APISERVER_PROFILE=<seconds>: a CPU profile of the apiserver over the first <seconds> of
# each peers run's convergence, in $work/<subject>-<run>.pprof (bench/scripts/profile-shares.py
# says where its time went). profile_start before the run's creates, profile_end after.
profile_pid=
profile_start() { # name run
  [ -n "${BENCH_APISERVER_PROFILE:-}" ] || return 0
  "$cache/bin/kubectl" --kubeconfig "$kubeconfig" get --raw \
    "/debug/pprof/profile?seconds=$BENCH_APISERVER_PROFILE" >"$work/$1-$2.pprof" &
  profile_pid=$!
}
profile_end() {
  [ -n "$profile_pid" ] || return 0
  wait "$profile_pid" || { log "the apiserver's profile failed"; exit 1; }
  profile_pid=
}

# One run's convergence ($3: the bench's mode, $4: its namespace) into $work/<name>-<run>.json,
# with the control plane's CPU before and after it and, if asked, the apiserver's profile.
converge_once() { # name run mode namespace
  profile_start "$1" "$2"
  plane_cpu "$KUBESTEER_CLUSTER" >"$work/$1-$2-plane-before.txt"
  "${bench[@]}" converge --mode "$3" --namespace "$4" --count "$count" --size 1 \
    --concurrency "$concurrency" >"$work/$1-$2.json"
  plane_cpu "$KUBESTEER_CLUSTER" >"$work/$1-$2-plane-after.txt"
  profile_end
}

# One convergence run of a controller on a fresh cluster: converge, CPU and memory, requests.
converge_with() { # name run controller-command...
  local name=$1 r=$2
  shift 2
  stop_controller
  log "run $r/$repeats: $name ($count Memcacheds)"
  fresh_cluster
  start_controller "$work/$name-$r.log" "$@"
  converge_once "$name" "$r" controller memcached
  process "$work/$name-$r-process.json"
  sleep 5 # the last requests reach the audit log
  audit "$work/$name-$r.json" "$work/$name-$r-requests.json"
  # One steady-state resync: an annotation on every Memcached (no new generation, so nothing
  # to write), and the controller's requests from the first patch until BENCH_RESYNC_SECONDS
  # after the last. The bench client is another user, so its patches are not counted.
  "${bench[@]}" touch --namespace memcached --concurrency "$concurrency" --quiet-secs "$resync_seconds" \
    >"$work/$name-$r-touch.json"
  sleep 2 # the audit log's last events of the window
  audit "$work/$name-$r-touch.json" "$work/$name-$r-resync.json"
  stop_controller
}

if [ "$subject" = peers ]; then
  read -r -a tuned <<<"$peer_tuned"
  read -r -a tutorial_flags <<<"$peer_tutorial"
  n=${#peer_subjects[@]}
  declare -A plain_lines=(
    [ceiling]="$count Deployments + Services"
    [owned]="$count Memcacheds, then their Deployments + Services with owner references"
    [writes]="$count Memcacheds with kubesteer's writes for each, no controller"
  )
  for r in $(seq 1 "$repeats"); do
    # Rotate the order, so no subject always runs first (or last) on the machine.
    for i in $(seq 0 $((n - 1))); do
      name=${peer_subjects[$(((i + r - 1) % n))]}
      case $name in
        ceiling | owned | writes)
          # The plain client's lines: no controller runs; the bench's mode is the subject's name.
          stop_controller
          log "run $r/$repeats: $name (${plain_lines[$name]}, plain client)"
          fresh_cluster
          converge_once "$name" "$r" "$name" "$name"
          ;;
        kubesteer) converge_with kubesteer "$r" ;;
        go-default) converge_with go-default "$r" "$peer" --workers 1 --qps 20 --burst 30 ;;
        go-tuned) converge_with go-tuned "$r" "$peer" "${tuned[@]}" ;;
        go-tutorial) converge_with go-tutorial "$r" "$tutorial" "${tutorial_flags[@]}" ;;
      esac
    done
  done
  BENCH_BUILT_PROFILE=$profile python3 - "$work" "$repeats" "$count" "$(git rev-parse --short HEAD)" "$(peer_go_version)" "$K8S_VERSION" \
    "$peer_tuned" "$peer_tutorial" "${BENCH_CONTROLLER_CPUS:-0}" "$resync_seconds" "${peer_subjects[*]}" <<'PY'
import json, os, platform, statistics, sys, datetime
work, repeats, count, commit, go, k8s, tuned, tutorial, cpus, resync_s, names = (
    sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:])
names = names.split()
READS = {"get", "list", "watch"}
def load(name):
    return json.load(open(os.path.join(work, name + ".json")))
def med(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None
def writes(q):
    # by_verb_resource keys are "<verb> <resource>[/<subresource>]".
    return sum(n for k, n in (q.get("by_verb_resource") or {}).items() if k.split(" ", 1)[0] not in READS)
def per(counts, n):
    return {k: round(v / n, 3) for k, v in (counts or {}).items()} if n else None
def plane(name, r):
    # The control plane's CPU seconds over one run's convergence, by process, and the machine's
    # busy share (1 - idle over every core's time); None for a run from before plane_cpu.
    def read(when):
        try:
            lines = open(os.path.join(work, f"{name}-{r}-plane-{when}.txt")).read().split("\n")
        except FileNotFoundError:
            return None
        return {k: float(v) for k, v in (l.split() for l in lines if l.strip())}
    before, after = read("before"), read("after")
    if not before or not after:
        return None
    cpu = {k: round(after[k] - before[k], 2) for k in after if k in before and k != "idle"}
    span = load(f"{name}-{r}")["converged_s"] * (os.cpu_count() or 1)
    return {"cpu_s": round(sum(cpu.values()), 2), "by_process": cpu,
            "machine_busy": round(1 - (after["idle"] - before["idle"]) / span, 3) if span else None}
def subject(name):
    runs = [load(f"{name}-{r}") for r in range(1, repeats + 1)]
    planes = [plane(name, r) for r in range(1, repeats + 1)]
    section = {"converged_s": med([x["converged_s"] for x in runs]), "runs_converged_s": [x["converged_s"] for x in runs],
               "pods_ready_s": med([x.get("pods_ready_s") for x in runs]),
               "runs_pods_ready_s": [x.get("pods_ready_s") for x in runs]}
    if all(planes):
        section.update({
            "control_plane_cpu_s": med([p["cpu_s"] for p in planes]),
            "runs_control_plane_cpu_s": [p["cpu_s"] for p in planes],
            "control_plane_cpu_s_by_process": {k: med([p["by_process"].get(k) for p in planes])
                                               for k in sorted(planes[0]["by_process"])},
            "machine_busy": med([p["machine_busy"] for p in planes]),
        })
    if name not in ("ceiling", "owned", "writes"):
        procs = [load(f"{name}-{r}-process") for r in range(1, repeats + 1)]
        reqs = [load(f"{name}-{r}-requests") for r in range(1, repeats + 1)]
        touches = [load(f"{name}-{r}-touch") for r in range(1, repeats + 1)]
        resyncs = [load(f"{name}-{r}-resync") for r in range(1, repeats + 1)]
        section.update({
            "cpu_s": med([p["cpu_s"] for p in procs]),
            "rss_mib": med([p["rss_kib"] / 1024 for p in procs]),
            "peak_rss_mib": med([p["hwm_kib"] / 1024 for p in procs]),
            "requests_per_memcached": med([q["non_watch_requests"] / count for q in reqs]),
            "writes_per_memcached": med([writes(q) / count for q in reqs]),
            "requests_by_verb_resource": reqs[0].get("by_verb_resource"),
            "requests_per_memcached_by_verb_resource": per(reqs[0].get("by_verb_resource"), count),
            "requests_per_resync": med([q["non_watch_requests"] / t["count"] if t["count"] else None
                                        for q, t in zip(resyncs, touches)]),
            "resync_by_verb_resource": resyncs[0].get("by_verb_resource"),
            "runs_requests_per_resync": [q["non_watch_requests"] / t["count"] if t["count"] else None
                                         for q, t in zip(resyncs, touches)],
        })
    return section
s = {n: subject(n) for n in ("ceiling", "owned", "writes", "kubesteer", "go-default", "go-tuned", "go-tutorial") if n in names}
def get(name, key):
    return s.get(name, {}).get(key)
def ratio(a, b):
    return round(a / b, 2) if a is not None and b else None
go_times = [t for t in (get("go-tuned", "converged_s"), get("go-tutorial", "converged_s")) if t is not None]
out = {
    "benchmark": "controller convergence, kubesteer vs controller-runtime",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "commit": commit,
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "cpu": next(
        (l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")},
    "count": count, "size": 1, "repeats": repeats, "subjects_run": names,
    "cargo_profile": os.environ["BENCH_BUILT_PROFILE"],
    "setup": f"kwok binary runtime, Kubernetes {k8s}; a fresh cluster for every run of every subject; each "
             f"controller pinned to cpus {cpus} (taskset) with the same client certificate; the same niced "
             "kubesteer-bench client creates the Memcacheds and watches for Ready=True; medians of the runs; "
             "the order of the subjects rotates from run to run; after each controller converged, the "
             f"client annotates every Memcached and the controller's requests are counted until {resync_s} s "
             "after the last annotation",
    "peer": f"controller-runtime v0.22, {go}; bench/peers/controller (children applied server-side on every "
            f"reconcile) as go-default: --workers 1 --qps 20 --burst 30 (kubebuilder's defaults) and go-tuned: "
            f"{tuned}; bench/peers/tutorial (the kubebuilder tutorial's Get, Create when missing, Update on "
            f"drift, Status().Update when changed) as go-tutorial: {tutorial}",
    "subjects": s,
    "ratios": {
        "go_default_to_kubesteer_time": ratio(get("go-default", "converged_s"), get("kubesteer", "converged_s")),
        "go_tuned_to_kubesteer_time": ratio(get("go-tuned", "converged_s"), get("kubesteer", "converged_s")),
        "go_tutorial_to_kubesteer_time": ratio(get("go-tutorial", "converged_s"), get("kubesteer", "converged_s")),
        "fastest_go_to_kubesteer_time": ratio(min(go_times) if go_times else None, get("kubesteer", "converged_s")),
        "kubesteer_to_ceiling_time": ratio(get("kubesteer", "converged_s"), get("ceiling", "converged_s")),
        "kubesteer_to_ceiling_pods_ready_time": ratio(get("kubesteer", "converged_s"), get("ceiling", "pods_ready_s")),
        "go_tutorial_to_ceiling_pods_ready_time": ratio(get("go-tutorial", "converged_s"), get("ceiling", "pods_ready_s")),
        "go_tuned_to_ceiling_time": ratio(get("go-tuned", "converged_s"), get("ceiling", "converged_s")),
        "go_tutorial_to_ceiling_time": ratio(get("go-tutorial", "converged_s"), get("ceiling", "converged_s")),
        "owned_to_ceiling_time": ratio(get("owned", "converged_s"), get("ceiling", "converged_s")),
        "kubesteer_to_owned_time": ratio(get("kubesteer", "converged_s"), get("owned", "converged_s")),
        "go_tutorial_to_owned_time": ratio(get("go-tutorial", "converged_s"), get("owned", "converged_s")),
        "writes_to_ceiling_time": ratio(get("writes", "converged_s"), get("ceiling", "converged_s")),
        "kubesteer_to_writes_time": ratio(get("kubesteer", "converged_s"), get("writes", "converged_s")),
        "go_tutorial_to_writes_time": ratio(get("go-tutorial", "converged_s"), get("writes", "converged_s")),
        "go_tuned_to_kubesteer_cpu": ratio(get("go-tuned", "cpu_s"), get("kubesteer", "cpu_s")),
        "go_tutorial_to_kubesteer_cpu": ratio(get("go-tutorial", "cpu_s"), get("kubesteer", "cpu_s")),
        "go_tuned_to_kubesteer_peak_rss": ratio(get("go-tuned", "peak_rss_mib"), get("kubesteer", "peak_rss_mib")),
        "go_tutorial_to_kubesteer_peak_rss": ratio(get("go-tutorial", "peak_rss_mib"), get("kubesteer", "peak_rss_mib")),
        "go_tuned_to_kubesteer_requests": ratio(get("go-tuned", "requests_per_memcached"), get("kubesteer", "requests_per_memcached")),
        "go_tutorial_to_kubesteer_requests": ratio(get("go-tutorial", "requests_per_memcached"), get("kubesteer", "requests_per_memcached")),
        "kubesteer_to_ceiling_pods_ready": ratio(get("kubesteer", "pods_ready_s"), get("ceiling", "pods_ready_s")),
        "owned_to_ceiling_pods_ready": ratio(get("owned", "pods_ready_s"), get("ceiling", "pods_ready_s")),
        "go_tutorial_to_kubesteer_pods_ready": ratio(get("go-tutorial", "pods_ready_s"), get("kubesteer", "pods_ready_s")),
        "go_tutorial_to_kubesteer_control_plane_cpu": ratio(get("go-tutorial", "control_plane_cpu_s"), get("kubesteer", "control_plane_cpu_s")),
        "kubesteer_to_ceiling_control_plane_cpu": ratio(get("kubesteer", "control_plane_cpu_s"), get("ceiling", "control_plane_cpu_s")),
        "owned_to_ceiling_control_plane_cpu": ratio(get("owned", "control_plane_cpu_s"), get("ceiling", "control_plane_cpu_s")),
    },
    "definition": "converged_s: from the first Memcached create until every Memcached has Ready=True (ceiling: "
                  "until every directly created Deployment has rolled out; owned: each Memcached created, then its "
                  "Deployment and Service with the controller owner reference, until every Deployment has rolled "
                  "out, with no controller running; writes: as owned, plus each Memcached's first status (a JSON "
                  "patch) and Created event as kubesteer writes them, and its Ready status, naming its pods, written "
                  "as soon as the client's pod watch sees them Ready (as kubesteer reads Ready; before 2026-11-30 "
                  "when its Deployment watch saw the Deployment rolled out), until every Ready status is "
                  "written: kubesteer's writes with no controller); pods_ready_s: from the same first create "
                  "until the client's pod watch has seen every pod Ready, whoever reports it (every subject "
                  "runs that watch); *_to_ceiling_pods_ready_time: against the ceiling's pods_ready_s, the "
                  "line for a status that follows the pods; *_pods_ready: pods_ready_s against pods_ready_s; "
                  "control_plane_cpu_s: the CPU time the cluster's etcd, kube-apiserver, kube-controller-manager, "
                  "kube-scheduler and kwok spent from the first create until converged (from /proc, median of the "
                  "runs; by process in control_plane_cpu_s_by_process), machine_busy: the share of every core's "
                  "time that was not idle in that window, whoever used it; requests_per_memcached: the "
                  "controller's non-watch requests in that window (apiserver audit log) per Memcached, "
                  "writes_per_memcached those of them that are not get, list or watch, "
                  "requests_by_verb_resource and requests_per_memcached_by_verb_resource those of the first run "
                  "(a server-side apply is a patch); requests_per_resync: the controller's non-watch requests "
                  "from the first annotation patch until the quiet period after the last, per Memcached (an "
                  "annotation does not change metadata.generation: 0 is ideal), resync_by_verb_resource those "
                  "of the first run; fastest_go_to_kubesteer_time: the faster of go-tuned and go-tutorial by "
                  "median; ratios above 1 favour kubesteer, except *_to_ceiling_*, *_to_owned_time and *_to_writes_time (1 is that line); "
                  "a ratio is null when a subject was not run",
}
json.dump(out, open("bench/results/controller-peers.json", "w"), indent=2)
keys = ("converged_s", "pods_ready_s", "control_plane_cpu_s", "machine_busy", "requests_per_memcached", "writes_per_memcached", "requests_per_resync")
print(json.dumps({"ratios": out["ratios"], **{k: {kk: v.get(kk) for kk in keys} for k, v in s.items()}}, indent=2))
PY
  log "results in bench/results/controller-peers.json"
  exit 0
fi

if has convergence; then
  for r in $(seq 1 "$repeats"); do
    stop_controller
    log "run $r/$repeats: ceiling ($count Deployments + Services, plain client)"
    fresh_cluster
    "${bench[@]}" converge --mode ceiling --namespace ceiling --count "$count" --size 1 \
      --concurrency "$concurrency" >"$work/ceiling-$r.json"

    log "run $r/$repeats: controller ($count Memcacheds)"
    fresh_cluster
    start_controller "$work/controller-$r.log"
    "${bench[@]}" converge --mode controller --namespace memcached --count "$count" --size 1 \
      --concurrency "$concurrency" >"$work/controller-$r.json"
    # CPU seconds the controller used (user + system), from its start to convergence.
    process "$work/controller-$r-process.json"
    sleep 5 # the last requests reach the audit log
    audit "$work/controller-$r.json" "$work/controller-$r-requests.json"
    curl -sf "http://127.0.0.1:$port/metrics" >"$work/controller-$r-metrics.txt" || true
  done
  report convergence --repeats "$repeats"
fi

if has memory; then
  ensure_controller
  with_pods=0
  if has convergence; then with_pods=$count; fi
  extra=$((memory_total - with_pods))
  log "memory: $extra more Memcacheds of size 0 ($memory_total in all)"
  "${bench[@]}" converge --mode controller --namespace memory --count "$extra" --size 0 --until reconciled \
    --concurrency "$concurrency" --timeout-secs 1800 >"$work/memory-converge.json"
  sleep 10
  process "$work/memory-process.json"
  audit "$work/memory-converge.json" "$work/memory-requests.json"
  report memory --with-pods "$with_pods"
fi

if has idle; then
  ensure_controller
  log "idle: $idle_scalers Scalers, then ${idle_seconds}s of quiet"
  "${bench[@]}" idle-setup --namespace idle --count "$idle_scalers" >"$work/idle-setup.json"
  quiesce
  idle_window "$work/idle.json"
  process "$work/idle-process.json"
  report idle --seconds "$idle_seconds"
fi

if has lateness; then
  ensure_controller
  log "lateness: $late_scalers Scalers opening and closing at minute boundaries"
  "${bench[@]}" lateness --namespace lateness --count "$late_scalers" \
    --controller-log "$work/controller.log" >"$work/lateness.json"
  report lateness
fi
if has scale; then
  stop_controller
  log "scale: $count Memcacheds of size 1, $((scale_memcacheds - count)) of size 0, $scale_scalers Scalers, in $scale_namespaces namespaces"
  fresh_cluster
  start_controller "$work/scale-controller.log"
  "${bench[@]}" converge --mode controller --namespace scale-pods --count "$count" --size 1 \
    --concurrency "$concurrency" --timeout-secs 1800 >"$work/scale-pods.json"
  "${bench[@]}" converge --mode controller --namespace scale --namespaces "$scale_namespaces" \
    --count "$((scale_memcacheds - count))" --size 0 --until reconciled --concurrency "$concurrency" --timeout-secs 5400 >"$work/scale-converge.json"
  "${bench[@]}" idle-setup --namespace scale-scalers --namespaces "$scale_namespaces" --count "$scale_scalers" --timeout-secs 3600 \
    >"$work/scale-scalers.json"
  quiesce
  process "$work/scale-process.json"
  idle_window "$work/scale-idle.json"
  # What the controller-manager still had to do then: Deployments whose spec it had not yet
  # observed, and the Memcacheds not Ready.
  kc=(nice -n 5 "$cache/bin/kubectl" --kubeconfig "$kubeconfig")
  unobserved=$("${kc[@]}" get deployments -A --no-headers \
    -o custom-columns=G:.metadata.generation,O:.status.observedGeneration | awk '$1 != $2' | wc -l)
  # Read first, then counted: a failed read stops the benchmark instead of counting as 0.
  ready=$("${kc[@]}" get memcacheds -A --no-headers \
    -o 'custom-columns=R:.status.conditions[?(@.type=="Ready")].status')
  not_ready=$(printf '%s' "$ready" | grep -vc True || true)
  printf '{"deployments_not_observed": %d, "memcacheds_not_ready": %d}\n' "$unobserved" "$not_ready" \
    >"$work/scale-cluster.json"
  # Idle as in "nothing changes": the same window with the controller-manager paused (SIGSTOP),
  # so that no Deployment it is still rolling out turns a Memcached Ready meanwhile. What the
  # controller sends then is its own doing: requeues, resyncs, writes that change nothing.
  kcm=$(kcm_pid "$KUBESTEER_CLUSTER")
  [ -n "$kcm" ] || { log "no kube-controller-manager process of cluster $KUBESTEER_CLUSTER"; exit 1; }
  kill -STOP "$kcm"
  quiesce
  idle_window "$work/scale-idle-paused.json"
  kill -CONT "$kcm"
  "${bench[@]}" lateness --namespace scale-lateness --count "$late_scalers" \
    --controller-log "$work/scale-controller.log" >"$work/scale-lateness.json"
  process "$work/scale-process-end.json"
  report scale --seconds "$idle_seconds"
fi
if has fleet; then
  stop_controller
  # Enough kwok nodes (110 pods each) for every pod of the fleet, and two more.
  fleet_pods=$((fleet_namespaces * fleet_per * fleet_replicas))
  export KUBESTEER_NODES=${BENCH_FLEET_NODES:-$(((fleet_pods + 109) / 110 + 2))}
  log "fleet: $fleet_namespaces namespaces x $fleet_per Deployments of $fleet_replicas replicas on $KUBESTEER_NODES kwok nodes, $fleet_namespaces Scalers, hold $fleet_hold"
  fresh_cluster
  start_controller "$work/fleet-controller.log"
  fleet_notes=()
  if [ -n "${BENCH_FLEET_NOTE:-}" ]; then fleet_notes=(--note "$BENCH_FLEET_NOTE"); fi
  "${bench[@]}" fleet --namespaces "$fleet_namespaces" --per-namespace "$fleet_per" \
    --replicas "$fleet_replicas" --hold "$fleet_hold" --concurrency "$concurrency" \
    --ceiling-concurrency "${BENCH_FLEET_CEILING_CONCURRENCY:-200}" \
    --lead-secs "${BENCH_FLEET_LEAD_SECS:-75}" --audit-dir "$logs" --user "$user" \
    --controller-pid "$controller_pid" --controller-log "$work/fleet-controller.log" \
    --nodes "$KUBESTEER_NODES" --commit "$(git rev-parse --short HEAD)" --k8s "$K8S_VERSION" \
    ${fleet_notes[@]+"${fleet_notes[@]}"} --out bench/results/controller-fleet.json >"$work/fleet.json"
  stop_controller
  log "fleet: results in bench/results/controller-fleet.json"
fi
stop_controller
if [[ $phases != " fleet " ]]; then log "results in bench/results/controller.json"; fi
