#!/usr/bin/env bash
# Webhook memory under a flood of large bodies (issue 27 item 3): the release webhook pinned to
# core 0, kubesteer-bench webhook-memory on core 1 firing BENCH_ATTACKERS (64) concurrent bodies
# of 4 MiB back to back for BENCH_SECONDS (20) while one kept-alive client sends ordinary reviews
# every 10 ms; the webhook's VmRSS sampled every 5 ms and its VmHWM read from /proc. Writes
# bench/results/webhook-memory.json. A benchmark, not a test: numbers vary with the machine.
#
# No cluster is needed: the webhook's kubeconfig points at a closed port, so its watches retry
# in the background, and the ordinary reviews are ones no cluster fact decides (a Memcached
# validated, a Scaler defaulted). BENCH_WEBHOOK=path runs another build of the webhook (say, an
# older commit's) under the same flood.
. "$(dirname "$0")/../../hack/lib.sh"
tag=bench-webhook-memory
cd "$root"
port=${BENCH_PORT:-19653}
profile=${BENCH_CARGO_PROFILE:-release}
case $profile in dev) bin=target/debug ;; *) bin=target/$profile ;; esac
work="$root/bench/tmp/memory"
mkdir -p "$work" bench/results
cargo build --profile "$profile" -p kubesteer-webhook -p kubesteer-certs -p kubesteer-bench
webhook=${BENCH_WEBHOOK:-$bin/kubesteer-webhook}
"$bin/kubesteer-certs" generate --service bench --namespace bench --ip 127.0.0.1 --out-dir "$work/certs" >/dev/null
cat >"$work/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
KUBECONFIG

pid=
finish() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}
trap finish EXIT
KUBECONFIG="$work/kubeconfig" RUST_LOG=${RUST_LOG:-error} taskset -c 0 "$webhook" \
  --addr "127.0.0.1:$port" --tls-cert-file "$work/certs/tls.crt" --tls-key-file "$work/certs/tls.key" \
  >"$work/webhook.log" 2>&1 &
pid=$!
for _ in $(seq 1 150); do
  curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/healthz" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { tail -20 "$work/webhook.log" >&2; exit 1; }
  sleep 0.2
done
taskset -c 1 "$bin/kubesteer-bench" webhook-memory --addr "127.0.0.1:$port" --ca "$work/certs/ca.crt" \
  --pid "$pid" --attackers "${BENCH_ATTACKERS:-64}" --seconds "${BENCH_SECONDS:-20}" \
  --review /validate/memcacheds=bench/bodies/memcached.json --review /mutate/scalers=bench/bodies/scaler.json \
  >"$work/result.json"
kill -0 "$pid" 2>/dev/null || { echo "bench-webhook-memory: the webhook died under the flood" >&2; exit 1; }
python3 - "$work/result.json" "$(git rev-parse --short HEAD)" "$webhook" <<'PY'
import json, os, platform, sys, datetime
result, commit, webhook = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
out = {
    "benchmark": "webhook memory under a flood of large bodies (issue 27 item 3)",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "commit": commit,
    "webhook": webhook,
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
    "setup": "kubesteer-webhook pinned to core 0 (taskset) with its default flags (--request-body-budget 16Mi), "
             "kubesteer-bench webhook-memory on core 1; TLS 1.3; no cluster (the kubeconfig points at a closed port). "
             "The ordinary client alone first, then the flood: each attacker sends its body shape back to back, "
             "reading the answer while it writes and reconnecting when the server closes; the ordinary client "
             "keeps one connection and sends a review every interval_ms, alternating the two bodies",
    "definition": "rss_kib.peak_sampled: the largest VmRSS of the samples taken every 5 ms during the flood; "
                  "rss_kib.hwm: VmHWM at the end, the largest resident set the process ever had; "
                  "flood.unanswered: requests whose connection the server closed before the client read an answer "
                  "(a body refused unread is followed by a close, whose reset may beat the answer)",
    **result,
}
json.dump(out, open("bench/results/webhook-memory.json", "w"), indent=2)
print(json.dumps({"rss_kib": out["rss_kib"], "ordinary_reviews": out["ordinary_reviews"], "targets": out["targets"],
                  "flood": {k: out["flood"][k] for k in ("requests", "unanswered", "answers_by_shape")}}, indent=2))
PY
