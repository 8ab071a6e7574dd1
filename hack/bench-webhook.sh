#!/usr/bin/env bash
# Webhook load benchmark: the release webhook pinned to one core, oha (a load tool from crates.io)
# on the other, over TLS with keep-alive, with a representative AdmissionReview per kind.
# Writes bench/results/webhook.json. A benchmark, not a test: numbers vary with the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${KUBESTEER_CACHE:-$HOME/.cache/kubesteer}
oha="$cache/tools/bin/oha"
duration=${BENCH_DURATION:-10s}
rates=${BENCH_RATES:-"500 2000"}
port=${BENCH_PORT:-19643}
work="$root/bench/tmp"
mkdir -p "$work" bench/results
[ -x "$oha" ] || cargo install oha --locked --root "$cache/tools"
cargo build --release -p kubesteer-webhook -p kubesteer-certs
hack/cluster.sh up
target/release/kubesteer-certs generate --service bench --namespace bench --ip 127.0.0.1 --out-dir "$work/certs" >/dev/null
KUBECONFIG="${KUBESTEER_STATE:-$root/.kubesteer}/kubeconfig" taskset -c 0 target/release/kubesteer-webhook \
  --addr "127.0.0.1:$port" --tls-cert-file "$work/certs/tls.crt" --tls-key-file "$work/certs/tls.key" \
  >"$work/webhook.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null && break
  sleep 0.2
done
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
idle_rss=$(rss_kib)

run() { # name endpoint body extra-args...
  local name=$1 path=$2 body=$3
  shift 3
  taskset -c 1 "$oha" --no-tui --output-format json -z "$duration" -m POST \
    -H 'Content-Type: application/json' -D "$body" --cacert "$work/certs/ca.crt" "$@" \
    "https://127.0.0.1:$port$path" >"$work/$name.json"
  echo "[bench] $name done" >&2
}
for kind in scaler welcome memcached; do
  plural=${kind}s
  run "$kind-validate-saturation" "/validate/$plural" "bench/bodies/$kind.json" -c 32
  run "$kind-mutate-saturation" "/mutate/$plural" "bench/bodies/$kind.json" -c 32
  for q in $rates; do
    run "$kind-validate-rate$q" "/validate/$plural" "bench/bodies/$kind.json" -c 16 -q "$q"
  done
done
peak_rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
python3 - "$work" "$idle_rss" "$peak_rss" "$duration" "$rates" <<'PY'
import json, os, platform, sys, datetime
work, idle, peak, duration, rates = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5].split()
def load(name):
    d = json.load(open(os.path.join(work, name + ".json")))
    s, p = d["summary"], d["latencyPercentiles"]
    codes = d.get("statusCodeDistribution", {})
    return {
        "requests_per_second": round(s["requestsPerSec"], 1),
        "success_rate": s["successRate"],
        "status_codes": codes,
        "latency_ms": {k: round(p[k] * 1000, 3) for k in ("p50", "p99", "p99.9") if p.get(k) is not None},
    }
out = {
    "benchmark": "webhook",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
    "setup": "release kubesteer-webhook pinned to core 0 (taskset), oha on core 1; TLS 1.3, HTTP/1.1 keep-alive; "
             f"{duration} per run; saturation with 32 connections; fixed rates with 16 connections",
    "rss_kib": {"idle": idle, "peak": peak},
    "kinds": {},
}
for kind in ("scaler", "welcome", "memcached"):
    k = {"validate_saturation": load(f"{kind}-validate-saturation"), "mutate_saturation": load(f"{kind}-mutate-saturation")}
    for q in rates:
        k[f"validate_at_{q}_rps"] = load(f"{kind}-validate-rate{q}")
    out["kinds"][kind] = k
json.dump(out, open("bench/results/webhook.json", "w"), indent=2)
print(json.dumps(out, indent=2))
PY
