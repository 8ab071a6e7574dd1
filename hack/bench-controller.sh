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
# Each phase merges its section into bench/results/controller.json as soon as it is done.
# A benchmark, not a test: numbers vary with the machine and whatever else runs on it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=../versions.env
. "$root/versions.env"
cache=${KUBESTEER_CACHE:-$HOME/.cache/kubesteer}
phases=" ${BENCH_PHASES:-convergence memory idle lateness} "
count=${BENCH_CONVERGE_COUNT:-1000}
memory_total=${BENCH_MEMORY_COUNT:-5000}
idle_scalers=${BENCH_IDLE_SCALERS:-100}
idle_seconds=${BENCH_IDLE_SECONDS:-180}
late_scalers=${BENCH_LATENESS_SCALERS:-30}
repeats=${BENCH_REPEATS:-1}
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
work=$root/bench/tmp/controller
rm -rf "$work"
mkdir -p "$work" bench/results
bench=(nice -n 5 env KUBECONFIG="$kubeconfig" target/release/kubesteer-bench)
log() { printf '[bench-controller %s] %s\n' "$(date +%T)" "$*" >&2; }
now() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
has() { [[ $phases == *" $1 "* ]]; }

cargo build --release -p kubesteer-controller -p kubesteer-bench

controller_pid=
stop_controller() {
  if [ -n "$controller_pid" ]; then
    kill "$controller_pid" 2>/dev/null || true
    wait "$controller_pid" 2>/dev/null || true
    controller_pid=
  fi
}
cleanup() {
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
start_controller() { # log-file
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
  KUBECONFIG="$work/controller.kubeconfig" target/release/kubesteer-controller \
    --metrics-addr "127.0.0.1:$port" >"$1" 2>&1 &
  controller_pid=$!
  local up=0
  for _ in $(seq 1 100); do
    if curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; then up=1 && break; fi
    kill -0 "$controller_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$up" = 0 ]; then
    log "the controller did not start; its log:"
    tail -20 "$1" >&2
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
    before=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^kubesteer_reconciles_total/ {s += $2} END {print s}')
    sleep 20
    after=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^kubesteer_reconciles_total/ {s += $2} END {print s}')
    if [ "$before" = "$after" ]; then return 0; fi
  done
  log "the controller did not quiesce within 10 minutes"
}
proc_kib() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$controller_pid/status"; }
# The controller's requests received in [since, until], from every (rotated) audit log file.
audit() { # since until out
  "${bench[@]}" audit --log "$logs"/audit*.log --user "$user" --since "$1" --until "$2" >"$3"
}
window() { # converge-output: its started_at and converged_at
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["started_at"], d["converged_at"])' "$1"
}

# Merges one phase's section into bench/results/controller.json, from the files in $work.
assemble() { # phase key=value...
  python3 - "$work" "$@" <<'PY'
import datetime, json, os, platform, statistics, subprocess, sys
work, phase = sys.argv[1], sys.argv[2]
arg = dict(a.split("=", 1) for a in sys.argv[3:])
load = lambda name: json.load(open(os.path.join(work, name + ".json")))
med = lambda xs: round(statistics.median(xs), 3)
mib = lambda kib: round(int(kib) / 1024, 1)
path = "bench/results/controller.json"
try:
    out = json.load(open(path))
except (OSError, ValueError):
    out = {}
try:
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except (OSError, StopIteration):
    cpu = platform.machine()
commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
out.update({
    "benchmark": "controller",
    "date": date,
    "machine": {"cpus": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(),
                "note": "the cores are shared by the control plane, the controller, the load client "
                        "and whatever else runs on the machine"},
    "setup": {
        "control_plane": f"kwok binary runtime, Kubernetes {arg.get('k8s', '?')}, etcd without fsync, "
                         "controller-manager and scheduler without leader election; a fresh cluster for "
                         "each convergence run and for the later phases",
        "controller": "release kubesteer-controller, cluster-wide watches, no leader election, "
                      "its own client certificate (user kubesteer-bench-controller)",
        "client": "kubesteer-bench (bench/), kube-rs, niced",
    },
})

def reconciles(name):
    try:
        for l in open(os.path.join(work, name)):
            if l.startswith('kubesteer_reconciles_total{kind="Memcached"}'):
                return int(float(l.split()[-1]))
    except OSError:
        pass
    return None

if phase == "convergence":
    repeats = int(arg["repeats"])
    ceiling = [load(f"ceiling-{r}") for r in range(1, repeats + 1)]
    controller = [load(f"controller-{r}") for r in range(1, repeats + 1)]
    requests = [load(f"controller-{r}-requests") for r in range(1, repeats + 1)]
    count = controller[0]["count"]
    ceiling_s = med([c["converged_s"] for c in ceiling])
    controller_s = med([c["converged_s"] for c in controller])
    cpu = [float(open(os.path.join(work, f"controller-{r}-cpu.txt")).read())
           for r in range(1, repeats + 1) if os.path.exists(os.path.join(work, f"controller-{r}-cpu.txt"))]
    recs = [n / count for r in range(1, repeats + 1) if (n := reconciles(f"controller-{r}-metrics.txt"))]
    out["convergence"] = {
        "date": date, "commit": commit,
        "count": count,
        "size": controller[0]["size"],
        "repeats": repeats,
        "client_concurrency": controller[0]["client_concurrency"],
        "controller_converged_s": controller_s,
        "ceiling_converged_s": ceiling_s,
        "ratio_controller_to_ceiling": round(controller_s / ceiling_s, 2),
        "target_ratio_max": 1.3,
        "meets_target": controller_s / ceiling_s <= 1.3,
        "controller_requests_per_memcached": med([q["non_watch_requests"] / count for q in requests]),
        "controller_reconciles_per_memcached": med(recs) if recs else None,
        "ceiling_requests_per_memcached": ceiling[0]["client_create_requests"] / count,
        "controller_cpu_s": med(cpu) if cpu else None,
        "definition": {
            "controller": "from the first Memcached create until every Memcached has condition Ready=True, "
                          "which the controller sets once its Deployment has rolled out with every pod Ready "
                          "(pods made Ready by kwok) and its Service is applied",
            "ceiling": "from the first create until every Deployment has rolled out with every pod Ready "
                       "(pods made Ready by kwok); a plain client POSTs the same Deployment and Service the "
                       "controller would apply (without owner references), the Service right after its Deployment",
        },
        "controller_runs": controller,
        "ceiling_runs": ceiling,
        "controller_requests": requests,
    }
elif phase == "memory":
    m, q = load("memory-converge"), load("memory-requests")
    with_pods = int(arg["with_pods"])
    out["memory"] = {
        "date": date, "commit": commit,
        "memcacheds": with_pods + m["count"],
        "with_pods": with_pods,
        "size_0": m["count"],
        "rss_mib": mib(arg["rss_kib"]),
        "peak_rss_mib": mib(arg["hwm_kib"]),
        "rss_kib": int(arg["rss_kib"]),
        "peak_rss_kib": int(arg["hwm_kib"]),
        "open_fds": int(arg["fds"]),
        "target_mib_max": 64,
        "meets_target": mib(arg["hwm_kib"]) < 64,
        "reconciled_s": m["converged_s"],
        "controller_requests_per_memcached": round(q["non_watch_requests"] / m["count"], 1),
        "note": f"{with_pods} Memcacheds of size 1 (Deployment, Service, pod) and {m['count']} of size 0 "
                "(Deployment, Service); read 10 s after every Memcached had a status for its generation, "
                "i.e. the controller had applied its children and written its status; peak is VmHWM since "
                "the controller started",
        "converge": m,
        "controller_requests": q,
    }
    if arg.get("note"):
        out["memory"]["incident"] = arg["note"]
elif phase == "idle":
    idle, setup = load("idle"), load("idle-setup")
    seconds = int(arg["seconds"])
    out["idle"] = {
        "date": date, "commit": commit,
        "scalers": setup["count"],
        "window_utc_hours": setup["window_utc"],
        "measured_s": seconds,
        "non_watch_requests": idle["non_watch_requests"],
        "non_watch_requests_per_min": round(idle["non_watch_requests"] / (seconds / 60), 2),
        "watch_requests": idle["watch_requests"],
        "target_non_watch_requests_per_min": 0,
        "meets_target": idle["non_watch_requests"] == 0,
        "by_verb_resource": idle["by_verb_resource"],
        "rss_mib": mib(arg["rss_kib"]),
        "note": "requests of the controller's own user in the apiserver audit log, once every Scaler had "
                "its status and the controller had gone 20 s without a reconcile; windows open 6 hours ahead; leader election off (with it, Lease "
                "renewals add their own requests)",
    }
elif phase == "lateness":
    late = load("lateness")
    a = late["all_transitions"]
    out["lateness"] = {
        "date": date, "commit": commit,
        "scalers": late["scalers"],
        "transitions": a["samples"],
        "p50_ms": a["p50_ms"], "p90_ms": a["p90_ms"], "max_ms": a["max_ms"], "min_ms": a["min_ms"],
        "target_ms_max": 1000,
        "meets_target": a["max_ms"] is not None and a["max_ms"] <= 1000 and not late["missed"],
        "opening": late["opening"],
        "closing": late["closing"],
        "missed": late["missed"],
        "reconciled_before_open": late["reconciled_before_open"],
        "window": {"open": late["window_open_at"], "close": late["window_close_at"]},
        "note": "every Scaler's window opens at the same minute boundary and closes a minute later; "
                "lateness is when the bench client's watch saw the target's spec.replicas change, minus "
                "the boundary",
    }
json.dump(out, open(path, "w"), indent=2)
print(json.dumps({k: v for k, v in out[phase].items() if not isinstance(v, (dict, list))}, indent=2))
PY
}

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
    sleep 5 # the last requests reach the audit log
    read -r from to < <(window "$work/controller-$r.json")
    audit "$from" "$to" "$work/controller-$r-requests.json"
    curl -sf "http://127.0.0.1:$port/metrics" >"$work/controller-$r-metrics.txt" || true
    # CPU seconds the controller used (user + system), from its start to convergence.
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f\n", ($14 + $15) / hz}' "/proc/$controller_pid/stat" \
      >"$work/controller-$r-cpu.txt"
  done
  assemble convergence "repeats=$repeats" "k8s=$K8S_VERSION"
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
  rss=$(proc_kib VmRSS) hwm=$(proc_kib VmHWM) fds=$(find "/proc/$controller_pid/fd" -mindepth 1 | wc -l)
  read -r from to < <(window "$work/memory-converge.json")
  audit "$from" "$to" "$work/memory-requests.json"
  assemble memory "with_pods=$with_pods" "rss_kib=$rss" "hwm_kib=$hwm" "fds=$fds" "k8s=$K8S_VERSION"
fi

if has idle; then
  ensure_controller
  log "idle: $idle_scalers Scalers, then ${idle_seconds}s of quiet"
  "${bench[@]}" idle-setup --namespace idle --count "$idle_scalers" >"$work/idle-setup.json"
  quiesce
  from=$(now)
  sleep "$idle_seconds"
  to=$(now)
  sleep 2
  audit "$from" "$to" "$work/idle.json"
  assemble idle "seconds=$idle_seconds" "rss_kib=$(proc_kib VmRSS)" "k8s=$K8S_VERSION"
fi

if has lateness; then
  ensure_controller
  log "lateness: $late_scalers Scalers opening and closing at minute boundaries"
  "${bench[@]}" lateness --namespace lateness --count "$late_scalers" >"$work/lateness.json"
  assemble lateness "k8s=$K8S_VERSION"
fi
stop_controller
log "results in bench/results/controller.json"
