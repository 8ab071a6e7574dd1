#!/usr/bin/env bash
# Webhook load benchmark: the release webhook pinned to one core, oha (a load tool from crates.io)
# on the other, over TLS with keep-alive, with a representative AdmissionReview per kind.
# Writes bench/results/webhook.json. A benchmark, not a test: numbers vary with the machine.
#
# BENCH_SUBJECT=peers runs kubesteer's webhook and the controller-runtime peer (bench/peers/webhook)
# alternately, BENCH_REPEATS times each (default 3), under identical conditions (same core, same
# certificates, same oha runs), and writes the medians and the kubesteer/peer ratios to
# bench/results/webhook-peers.json instead.
#
# BENCH_SUBJECT=allocators runs kubesteer's webhook three ways, BENCH_REPEATS times each (default
# 3), the order rotating: on jemalloc as released; on jemalloc made lean at start
# (_RJEM_MALLOC_CONF, BENCH_JEMALLOC_LEAN, default one arena, no thread caches, no background
# thread); and built on glibc's malloc (feature kubesteer-webhook/system-allocator). Same loads
# as the plain run without the limit line (BENCH_RATES default "2000" here), and writes the RSS
# (idle, peak, and their anonymous part) and rates to bench/results/webhook-allocators.json.
. "$(dirname "$0")/../../hack/lib.sh"
tag=bench-webhook
cd "$root"
oha="$cache/tools/bin/oha"
duration=${BENCH_DURATION:-10s}
rates=${BENCH_RATES:-"500 2000"}
port=${BENCH_PORT:-19643}
subject=${BENCH_SUBJECT:-kubesteer}
kinds=${BENCH_KINDS:-"scaler welcome memcached"}
profile=${BENCH_CARGO_PROFILE:-release}
case $profile in dev) bin=target/debug ;; *) bin=target/$profile ;; esac
case $subject in
  kubesteer | peers) ;;
  allocators) rates=${BENCH_RATES:-2000} ;;
  *) echo "bench-webhook: BENCH_SUBJECT must be kubesteer, peers or allocators, not $subject" >&2 && exit 2 ;;
esac
# The cluster the webhook watches (Scalers, Deployments, HPAs) and asks SubjectAccessReviews of.
export KUBESTEER_CLUSTER=${BENCH_CLUSTER:-${KUBESTEER_CLUSTER:-kubesteer}}
export KUBESTEER_STATE=${BENCH_STATE:-${KUBESTEER_STATE:-$root/.kubesteer}}
work="$root/bench/tmp"
mkdir -p "$work" bench/results
[ -x "$oha" ] || cargo install oha --locked --root "$cache/tools"
cargo build --profile "$profile" -p kubesteer-webhook -p kubesteer-certs -p kubesteer-bench
# The limit line: the same server stack (rustls, hyper, axum, limits, runtime) answering a fixed
# AdmissionReview without any review work (bench/src/echo.rs), on the same core with the same load.
limit=("$bin/kubesteer-bench" echo-webhook)
if [ "$subject" = peers ]; then
  # shellcheck source=peers.sh
  . "$root/bench/scripts/peers.sh"
  peer=$(peer_bin webhook)
fi
hack/cluster.sh up
# Core 0 is the webhook's alone: the control plane's processes (apiserver, etcd, controller-manager,
# scheduler, kwok) move to core 1, with oha, for the runs and back afterwards, as on a cluster whose
# webhook runs on a node of its own. BENCH_CORE_ALONE=0 leaves them on both cores (runs before
# this change did).
core_alone=${BENCH_CORE_ALONE:-1}
cluster_pids() { pgrep -f "/clusters/$KUBESTEER_CLUSTER/bin/" || true; }
pin_cluster() { # cpu-list
  local p
  for p in $(cluster_pids); do taskset -a -cp "$1" "$p" >/dev/null || true; done
}
export BENCH_CORES=", the control plane on both cores"
if [ "$core_alone" = 1 ]; then
  pin_cluster 1
  BENCH_CORES=" with the control plane's processes (core 0 the webhook's alone)"
fi
# The bodies' author may scale the Scaler's targets (bench/bodies/rbac.yaml).
"$cache/bin/kubectl" --kubeconfig "$KUBESTEER_STATE/kubeconfig" apply -f bench/bodies/rbac.yaml >/dev/null
"$bin/kubesteer-certs" generate --service bench --namespace bench --ip 127.0.0.1 --out-dir "$work/certs" >/dev/null

pid=
stop_server() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
  fi
}
finish() {
  stop_server
  [ "$core_alone" = 1 ] && pin_cluster "0-$(($(nproc) - 1))"
  return 0
}
trap finish EXIT
# Starts a webhook binary (same flags for both) on core 0 and waits for its /readyz.
start_server() { # log binary...
  local log=$1
  shift
  KUBECONFIG="$KUBESTEER_STATE/kubeconfig" taskset -c 0 "$@" \
    --addr "127.0.0.1:$port" --tls-cert-file "$work/certs/tls.crt" --tls-key-file "$work/certs/tls.key" \
    >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 150); do
    curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "bench-webhook: $* did not become ready; its log:" >&2
  tail -20 "$log" >&2
  exit 1
}
rss_kib() { awk -v f="${1:-VmRSS}:" '$1 == f {print $2}' "/proc/$pid/status"; } # [field]

# Each core's steal time so far, in clock ticks: time the hypervisor ran something else while this
# machine's vCPU wanted to run (the 8th field of its /proc/stat line).
steal_ticks() { awk '$1 ~ /^cpu[0-9]+$/ {printf "%s ", $9} END {print ""}' /proc/stat; }
run() { # out-dir name endpoint body extra-args...
  local out=$1 name=$2 path=$3 body=$4 before
  shift 4
  before=$(steal_ticks)
  taskset -c 1 "$oha" --no-tui --output-format json -z "$duration" -m POST \
    -H 'Content-Type: application/json' -D "$body" --cacert "$work/certs/ca.crt" "$@" \
    "https://127.0.0.1:$port$path" >"$out/$name.json"
  # The steal of each core over the run, in ms.
  printf '%s\n%s\n' "$before" "$(steal_ticks)" | awk -v hz="$(getconf CLK_TCK)" \
    'NR == 1 {split($0, b)} NR == 2 {for (i = 1; i <= NF; i++) printf "%d ", ($i - b[i]) * 1000 / hz; print ""}' \
    >"$out/$name.steal"
  echo "[bench] $name done" >&2
}
# A run at a fixed rate (16 connections), keeping every request's time (oha's sqlite output). Its
# latency in steady state goes to <name>.steady.json: the requests after the first second, when
# oha has set up its connections (its first requests wait for 16 TLS handshakes on its core,
# 10-70 ms, which would be the p99.9 of a 10 s run by themselves).
rate_run() { # out-dir name endpoint body rate
  local out=$1 name=$2
  rm -f "$out/$name.db"
  run "$out" "$name" "$3" "$4" -c 16 -q "$5" --db-url "$out/$name.db"
  python3 - "$out/$name.db" >"$out/$name.steady.json" <<'PY'
import json, sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("select start, duration from oha order by start").fetchall()
times = sorted(d * 1000 for s, d in rows if s - rows[0][0] >= 1.0)
at = lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 3)
print(json.dumps({"requests": len(times), "p50": at(0.5), "p99": at(0.99), "p99.9": at(0.999), "max": round(times[-1], 3)}))
PY
  rm -f "$out/$name.db"
}
# Every load against the running server, into out-dir; then its RSS: idle, the peak under the
# loads, of the idle and final RSS the anonymous part (heap, stacks, allocator), the peak of
# start-up (before the loads), and the file part after the loads (the binary's pages, mapped
# from the page cache as its code runs). The peak under the loads is VmHWM after resetting it
# to the current RSS when the loads begin (clear_refs 5), so start-up's is not counted in it.
measure() { # out-dir
  local out=$1 idle idle_anon startup_peak
  mkdir -p "$out"
  idle=$(rss_kib)
  idle_anon=$(rss_kib RssAnon)
  startup_peak=$(rss_kib VmHWM)
  echo 5 >"/proc/$pid/clear_refs"
  for kind in $kinds; do
    plural=${kind}s
    run "$out" "$kind-validate-saturation" "/validate/$plural" "bench/bodies/$kind.json" -c 32
    run "$out" "$kind-mutate-saturation" "/mutate/$plural" "bench/bodies/$kind.json" -c 32
    for q in $rates; do
      rate_run "$out" "$kind-validate-rate$q" "/validate/$plural" "bench/bodies/$kind.json" "$q"
    done
  done
  printf '%s %s %s %s %s %s\n' "$idle" "$(rss_kib VmHWM)" "$idle_anon" "$(rss_kib RssAnon)" "$startup_peak" \
    "$(rss_kib RssFile)" >"$out/rss"
}
# The limit server with each kind's body, into out-dir: at saturation, and at the fixed rates, where
# its latency is the tail that the stack and the machine alone give.
measure_limit() { # out-dir
  local out=$1
  mkdir -p "$out"
  for kind in $kinds; do
    run "$out" "$kind-limit-saturation" "/validate/${kind}s" "bench/bodies/$kind.json" -c 32
    for q in $rates; do
      rate_run "$out" "$kind-limit-rate$q" "/validate/${kind}s" "bench/bodies/$kind.json" "$q"
    done
  done
}

if [ "$subject" = peers ]; then
  repeats=${BENCH_REPEATS:-3}
  rm -rf "$work/peers"
  for r in $(seq 1 "$repeats"); do
    # Alternate who goes first, so neither always runs on a warmer (or busier) machine.
    order="kubesteer peer limit"
    [ $((r % 2)) = 0 ] && order="peer kubesteer limit"
    for s in $order; do
      echo "[bench] run $r/$repeats: $s" >&2
      case $s in
        kubesteer) start_server "$work/webhook-$s-$r.log" "$bin/kubesteer-webhook" && measure "$work/peers/$s-$r" ;;
        peer) start_server "$work/webhook-$s-$r.log" "$peer" && measure "$work/peers/$s-$r" ;;
        limit) start_server "$work/webhook-$s-$r.log" "${limit[@]}" && measure_limit "$work/peers/$s-$r" ;;
      esac
      stop_server
    done
  done
  # The review work alone: each body answered in process on core 0, no HTTP or TLS
  # (kubesteer-bench reviews, every permission granted), the part of a review the limit line lacks.
  for r in $(seq 1 "$repeats"); do
    for kind in $kinds; do
      for e in validate mutate; do
        taskset -c 0 "$bin/kubesteer-bench" reviews --body "bench/bodies/$kind.json" --plural "${kind}s" \
          --endpoint "$e" --count 50000 >"$work/peers/reviews-$kind-$e-$r.json"
      done
    done
  done
  python3 - "$work/peers" "$repeats" "$duration" "$rates" "$kinds" "$(git rev-parse --short HEAD)" "$(peer_go_version)" <<'PY'
import json, os, platform, statistics, sys, datetime
work, repeats, duration, rates, kinds, commit, go = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(), sys.argv[5].split(), sys.argv[6], sys.argv[7]
subjects = ("kubesteer", "peer")
def load(subject, r, name):
    d = json.load(open(os.path.join(work, f"{subject}-{r}", name + ".json")))
    s, p = d["summary"], d["latencyPercentiles"]
    ok = s.get("successRate") or 0
    base = os.path.join(work, f"{subject}-{r}", name)
    steal = list(map(int, open(base + ".steal").read().split()))
    steady = json.load(open(base + ".steady.json")) if os.path.exists(base + ".steady.json") else {}
    return {"rps": s["requestsPerSec"] * ok, "success_rate": ok, "steal_ms": steal, "max": s["slowest"] * 1000,
            "steady": steady, **{k: p[k] * 1000 for k in ("p50", "p99", "p99.9") if p.get(k) is not None}}
def med(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None
QUANTILES = ("p50", "p99", "p99.9", "max")
def medians(samples):
    """The runs' medians: latency over the whole run, in steady state (fixed rates), steal per core."""
    return {"latency_ms": {q: med([x.get(q) for x in samples]) for q in QUANTILES},
            **({"steady_latency_ms": {q: med([x["steady"][q] for x in samples]) for q in QUANTILES}}
               if samples[0]["steady"] else {}),
            "steal_ms_per_core": [med([x["steal_ms"][c] for x in samples]) for c in range(len(samples[0]["steal_ms"]))]}
runs = ["validate_saturation", "mutate_saturation"] + [f"validate_at_{q}_rps" for q in rates]
files = {"validate_saturation": "validate-saturation", "mutate_saturation": "mutate-saturation",
         **{f"validate_at_{q}_rps": f"validate-rate{q}" for q in rates}}
out = {
    "benchmark": "webhook, kubesteer vs controller-runtime",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "commit": commit,
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "cpu": next(
        (l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")},
    "setup": "each webhook pinned to core 0 (taskset), oha on core 1" + os.environ["BENCH_CORES"] + "; the same certificates, bodies and oha "
             f"runs; TLS 1.3, HTTP/1.1 keep-alive; {duration} per run; saturation with 32 connections; fixed "
             f"rates with 16 connections; {repeats} runs of each, alternating which goes first; medians",
    "peer": f"bench/peers/webhook: controller-runtime v0.22 webhook server, {go}",
    "definition": "requests_per_second counts successful reviews only (oha's rate times its success rate); "
                  "ratio_rps is kubesteer/peer (above 1: kubesteer answers more), ratio_latency is "
                  "peer/kubesteer (above 1: kubesteer is faster)",
    "rss_kib": {}, "kinds": {},
}
for s in subjects:
    rss = [tuple(map(int, open(os.path.join(work, f"{s}-{r}", "rss")).read().split())) for r in range(1, repeats + 1)]
    out["rss_kib"][s] = {"idle": med([x[0] for x in rss]), "peak": med([x[1] for x in rss]),
                         "idle_anon": med([x[2] for x in rss]), "anon_after_load": med([x[3] for x in rss]),
                         "startup_peak": med([x[4] for x in rss]), "file_after_load": med([x[5] for x in rss])}
out["rss_kib"]["ratio_peak_peer_to_kubesteer"] = round(out["rss_kib"]["peer"]["peak"] / out["rss_kib"]["kubesteer"]["peak"], 2)
summary = {}
for kind in kinds:
    k = {}
    for run in runs:
        per = {}
        for s in subjects:
            samples = [load(s, r, f"{kind}-{files[run]}") for r in range(1, repeats + 1)]
            per[s] = {"requests_per_second": med([x["rps"] for x in samples]),
                      "success_rate": med([x["success_rate"] for x in samples]), **medians(samples)}
        ks, pe = per["kubesteer"], per["peer"]
        per["ratio_rps"] = round(ks["requests_per_second"] / pe["requests_per_second"], 2) if pe["requests_per_second"] else None
        per["ratio_latency"] = {q: round(pe["latency_ms"][q] / ks["latency_ms"][q], 2)
                                if ks["latency_ms"][q] and pe["latency_ms"][q] else None for q in ("p50", "p99", "p99.9")}
        k[run] = per
        if run.endswith("saturation"):
            summary[f"{kind}_{run.split('_')[0]}_ratio_rps"] = per["ratio_rps"]
        else:
            summary[f"{kind}_{run}_ratio_p99"] = per["ratio_latency"]["p99"]
            if "steady_latency_ms" in ks:
                summary[f"{kind}_{run}_steady_p99.9_ms"] = ks["steady_latency_ms"]["p99.9"]
    out["kinds"][kind] = k
out["limit"] = {"definition": "the same server stack (rustls, hyper, axum, kubesteer's limits and runtime) "
                "answering a fixed AdmissionReview without any work (kubesteer-bench echo-webhook), at "
                "saturation with each kind's body; fraction = kubesteer's saturation rate / the limit's; "
                "at_N_rps: the limit's own latency at the fixed rates, the tail without review work; "
                "steal: ms of each core's time that the hypervisor gave to other machines during a run (/proc/stat); "
                "steady_latency: at a fixed rate, the requests after the first second (oha's connection set-up)"}
for kind in kinds:
    rps = med([load("limit", r, f"{kind}-limit-saturation")["rps"] for r in range(1, repeats + 1)])
    k = out["kinds"][kind]
    at_rates = {}
    for q in rates:
        at_rates[f"at_{q}_rps"] = medians([load("limit", r, f"{kind}-limit-rate{q}") for r in range(1, repeats + 1)])
    out["limit"][kind] = {"requests_per_second": rps, **at_rates,
        **{f"kubesteer_{run.split('_')[0]}_fraction": round(k[run]["kubesteer"]["requests_per_second"] / rps, 2)
           for run in ("validate_saturation", "mutate_saturation")},
        **{f"peer_{run.split('_')[0]}_fraction": round(k[run]["peer"]["requests_per_second"] / rps, 2)
           for run in ("validate_saturation", "mutate_saturation")}}
    for run in ("validate", "mutate"):
        summary[f"{kind}_{run}_fraction_of_limit"] = out["limit"][kind][f"kubesteer_{run}_fraction"]
out["review_work_us"] = {"definition": "microseconds per review of kubesteer's review path alone, in process "
                        "(kubesteer-bench reviews: decode, rules, answer; no HTTP or TLS; every permission "
                        "granted), on core 0, median of the runs"}
for kind in kinds:
    for e in ("validate", "mutate"):
        samples = [json.load(open(os.path.join(work, f"reviews-{kind}-{e}-{r}.json"))) for r in range(1, repeats + 1)]
        out["review_work_us"][f"{kind}_{e}"] = med([1e6 / x["reviews_per_second"] for x in samples])
out["summary"] = summary
json.dump(out, open("bench/results/webhook-peers.json", "w"), indent=2)
print(json.dumps({"summary": summary, "rss_kib": out["rss_kib"]}, indent=2))
PY
  exit 0
fi

if [ "$subject" = allocators ]; then
  repeats=${BENCH_REPEATS:-3}
  lean=${BENCH_JEMALLOC_LEAN:-narenas:1,tcache:false,background_thread:false}
  d="$work/allocators"
  rm -rf "$d" && mkdir -p "$d"
  cp "$bin/kubesteer-webhook" "$d/jemalloc"
  cargo build --profile "$profile" -p kubesteer-webhook --features kubesteer-webhook/system-allocator
  cp "$bin/kubesteer-webhook" "$d/system"
  cargo build --profile "$profile" -p kubesteer-webhook # the release build back as it was
  variants=(jemalloc jemalloc-lean system)
  for r in $(seq 1 "$repeats"); do
    for i in 0 1 2; do
      v=${variants[$(((i + r - 1) % 3))]}
      echo "[bench] run $r/$repeats: $v" >&2
      case $v in
        jemalloc) start_server "$d/$v-$r.log" "$d/jemalloc" ;;
        jemalloc-lean) start_server "$d/$v-$r.log" env "_RJEM_MALLOC_CONF=$lean" "$d/jemalloc" ;;
        system) start_server "$d/$v-$r.log" "$d/system" ;;
      esac
      measure "$d/$v-$r"
      stop_server
    done
  done
  python3 - "$d" "$repeats" "$rates" "$kinds" "$(git rev-parse --short HEAD)" "$lean" "$duration" <<'PY'
import json, os, platform, statistics, sys, datetime
work, repeats, rates, kinds, commit, lean, duration = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), *sys.argv[5:]
variants = ("jemalloc", "jemalloc-lean", "system")
med = lambda xs: round(statistics.median(xs), 1)
def oha(v, r, name):
    s = json.load(open(os.path.join(work, f"{v}-{r}", name + ".json")))["summary"]
    return s["requestsPerSec"] * (s.get("successRate") or 0)
out = {
    "benchmark": "webhook memory by allocator",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "commit": commit,
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
    "setup": f"target/release/kubesteer-webhook pinned to core 0, oha on core 1{os.environ['BENCH_CORES']}; per run: "
             f"for each kind ({' '.join(kinds)}) validate and mutate at saturation (32 connections) and validate "
             f"at {', '.join(rates)} reviews/s (16 connections), {duration} each; {repeats} runs per variant, "
             "the order rotating; medians, and every run",
    "variants": {"jemalloc": "tikv-jemallocator 0.7 with background threads, as released",
                 "jemalloc-lean": f"the same binary started with _RJEM_MALLOC_CONF={lean}",
                 "system": "built with --features kubesteer-webhook/system-allocator: glibc's malloc"},
    "definition": "rss_kib: idle = VmRSS after start, peak = the largest VmRSS under the loads (VmHWM reset as they "
                  "begin), startup_peak = VmHWM before the loads, idle_anon / anon_after_load = "
                  "RssAnon (heap, stacks, allocator metadata) before and after the loads; the rest of RSS is "
                  "the binary's pages (RssFile; file_after_load); rps: successful reviews per second at saturation",
    "rss_kib": {}, "rps": {},
}
for v in variants:
    rss = [tuple(map(int, open(os.path.join(work, f"{v}-{r}", "rss")).read().split())) for r in range(1, repeats + 1)]
    out["rss_kib"][v] = {k: med([x[i] for x in rss]) for i, k in enumerate(
        ("idle", "peak", "idle_anon", "anon_after_load", "startup_peak", "file_after_load"))}
    out["rss_kib"][v]["runs_peak"] = [x[1] for x in rss]
    out["rps"][v] = {f"{kind}_{e}": med([oha(v, r, f"{kind}-{e}-saturation") for r in range(1, repeats + 1)])
                     for kind in kinds for e in ("validate", "mutate")}
json.dump(out, open("bench/results/webhook-allocators.json", "w"), indent=2)
print(json.dumps(out["rss_kib"], indent=2))
PY
  exit 0
fi

# BENCH_WEBHOOK runs another webhook command instead, e.g. the image's multi-call binary as the
# chart runs it: BENCH_WEBHOOK="target/x86_64-unknown-linux-gnu/image/kubesteer webhook".
read -r -a webhook_cmd <<<"${BENCH_WEBHOOK:-$bin/kubesteer-webhook}"
start_server "$work/webhook.log" "${webhook_cmd[@]}"
measure "$work"
stop_server
start_server "$work/limit.log" "${limit[@]}"
measure_limit "$work"
stop_server
read -r idle_rss peak_rss idle_anon anon_after startup_peak file_after <"$work/rss"
export BENCH_PROFILE=$profile BENCH_WEBHOOK_CMD="${webhook_cmd[*]}"
python3 - "$work" "$idle_rss" "$peak_rss" "$duration" "$rates" "$kinds" "$idle_anon" "$anon_after" "$startup_peak" "$file_after" <<'PY'
import json, os, platform, sys, datetime
work, idle, peak, duration, rates, kinds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5].split(), sys.argv[6].split()
idle_anon, anon_after, startup_peak, file_after = map(int, sys.argv[7:11])
def load(name):
    d = json.load(open(os.path.join(work, name + ".json")))
    s, p = d["summary"], d["latencyPercentiles"]
    codes = d.get("statusCodeDistribution", {})
    return {
        "requests_per_second": round(s["requestsPerSec"], 1),
        "success_rate": s["successRate"],
        "status_codes": codes,
        "latency_ms": {k: round(p[k] * 1000, 3) for k in ("p50", "p99", "p99.9") if p.get(k) is not None},
        "steal_ms_per_core": list(map(int, open(os.path.join(work, name + ".steal")).read().split())),
        **({"steady_latency_ms": json.load(open(os.path.join(work, name + ".steady.json")))}
           if os.path.exists(os.path.join(work, name + ".steady.json")) else {}),
    }
out = {
    "benchmark": "webhook",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
    "webhook": os.environ["BENCH_WEBHOOK_CMD"],
    "setup": f"the webhook command above (by default the {os.environ['BENCH_PROFILE']} profile's kubesteer-webhook) pinned to core 0 (taskset), oha on core 1" + os.environ["BENCH_CORES"] + "; TLS 1.3, HTTP/1.1 keep-alive; "
             f"{duration} per run; saturation with 32 connections; fixed rates with 16 connections",
    "rss_kib": {"idle": idle, "peak": peak, "idle_anon": idle_anon, "anon_after_load": anon_after,
                "startup_peak": startup_peak, "file_after_load": file_after},
    "kinds": {},
}
for kind in kinds:
    k = {"validate_saturation": load(f"{kind}-validate-saturation"), "mutate_saturation": load(f"{kind}-mutate-saturation")}
    for q in rates:
        k[f"validate_at_{q}_rps"] = load(f"{kind}-validate-rate{q}")
    limit = load(f"{kind}-limit-saturation")
    k["limit_saturation"] = limit
    for q in rates:
        k[f"limit_at_{q}_rps"] = load(f"{kind}-limit-rate{q}")
    for run in ("validate", "mutate"):
        k[f"{run}_fraction_of_limit"] = round(k[f"{run}_saturation"]["requests_per_second"] / limit["requests_per_second"], 2)
    out["kinds"][kind] = k
json.dump(out, open("bench/results/webhook.json", "w"), indent=2)
print(json.dumps(out, indent=2))
PY
