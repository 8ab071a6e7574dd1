#!/usr/bin/env bash
# The controller's --debounce, A/B: 1,000 Memcacheds to Ready with kubesteer alone, one run per
# value per round, each a peers run of kubesteer (a fresh cluster) with KUBESTEER_DEBOUNCE set,
# the order of the values rotating from round to round. Appends one set to
# bench/results/controller-debounce.json: per value, each run's converge time (and its 10th,
# 50th and 90th Memcached's), requests by verb and resource, CPU and peak RSS.
#
#   BENCH_DEBOUNCE_VALUES="1s 300ms 500ms" BENCH_REPEATS=3 BENCH_CLUSTER=wtest bench/scripts/debounce.sh
#
# Knobs: BENCH_DEBOUNCE_VALUES, BENCH_REPEATS (rounds, default 3), and what a peers run of
# bench/scripts/controller.sh takes (BENCH_CLUSTER, BENCH_CONVERGE_COUNT, ...).
set -euo pipefail
# shellcheck source=controller-lib.sh
. "$(dirname "$0")/controller-lib.sh"
cd "$root"
read -r -a values <<<"${BENCH_DEBOUNCE_VALUES:-1s 300ms 500ms}"
rounds=${BENCH_REPEATS:-3}
out=bench/tmp/debounce
rm -rf "$out"
mkdir -p "$out"
# Where controller.sh leaves each run's files, for the cluster it uses.
work=$(bench_work "${BENCH_CLUSTER:-bench}")
n=${#values[@]}
order=()
for r in $(seq 1 "$rounds"); do
  line=()
  for i in $(seq 0 $((n - 1))); do
    d=${values[$(((i + r - 1) % n))]}
    line+=("$d")
    echo "[debounce] round $r: KUBESTEER_DEBOUNCE=$d" >&2
    KUBESTEER_DEBOUNCE=$d BENCH_SUBJECT=peers BENCH_PEER_SUBJECTS=kubesteer BENCH_REPEATS=1 \
      make --no-print-directory bench-controller >"$out/log-$d-$r.txt" 2>&1
    for f in "" -requests -process; do cp "$work/kubesteer-1$f.json" "$out/run-$d-$r$f.json"; done
  done
  order+=("${line[*]}")
done
# The peers run rewrote controller-peers.json with a kubesteer-only set: not a peers result.
git checkout -q bench/results/controller-peers.json
python3 - "$out" "$(git rev-parse --short HEAD)" "$(IFS=/; echo "${order[*]}")" <<'EOF'
import glob, json, os, sys
out, commit, order = sys.argv[1:]
values = {}
for f in sorted(glob.glob(f"{out}/run-*-[0-9]*.json")):
    if f.endswith(("-requests.json", "-process.json")):
        continue
    value, rnd = os.path.basename(f)[4:-5].rsplit("-", 1)
    run = json.load(open(f))
    req = json.load(open(f[:-5] + "-requests.json"))
    proc = json.load(open(f[:-5] + "-process.json"))
    p = run["converged_progress"]
    values.setdefault(value, []).append({
        "round": int(rnd), "converged_s": p["p100_s"], "p10_s": p["p10_s"], "p50_s": p["p50_s"],
        "p90_s": p["p90_s"], "user_creates_accepted_s": run["creates_accepted_s"],
        "requests_per_memcached": round(req["non_watch_requests"] / run["count"], 3),
        "requests_by_verb_resource": req["by_verb_resource"], "cpu_s": proc["cpu_s"],
        "peak_rss_mib": round(proc["hwm_kib"] / 1024, 1)})
for value, runs in values.items():
    runs.sort(key=lambda r: r["round"])
    times = sorted(r["converged_s"] for r in runs)
    values[value] = {"median_converged_s": times[len(times) // 2], "runs": runs}
path = "bench/results/controller-debounce.json"
doc = json.load(open(path))
doc["sets"].append({"commit": commit, "order": order, "values": values})
json.dump(doc, open(path, "w"), indent=1)
print(json.dumps({v: d["median_converged_s"] for v, d in values.items()}))
EOF
