#!/usr/bin/env bash
# The chart's webhook pods under the flood of webhook-memory.sh, for a minute, through the
# in-cluster Service of a release on the e2e cluster's real node (the test install::flood::,
# tests/e2e/install/flood.rs, run through hack/e2e.sh): each pod's container cgroup peak beside
# the chart's memory limit, and the ordinary reviews' latency. Writes
# bench/results/webhook-memory-chart.json. The chart's webhook.resources come from this figure.
. "$(dirname "$0")/../../hack/lib.sh"
cd "$root"
mkdir -p bench/results bench/tmp
raw="$root/bench/tmp/webhook-memory-chart.json"
rm -f "$raw"
KUBESTEER_FLOOD_RESULT="$raw" KUBESTEER_E2E_GROUPS="install::flood::" hack/e2e.sh
python3 - "$raw" "$(git rev-parse --short HEAD)" <<'PY'
import json, os, platform, sys, datetime
result, commit = json.load(open(sys.argv[1])), sys.argv[2]
out = {
    "benchmark": "the chart's webhook pods under a flood of large bodies (issue 63 item 3)",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "commit": commit,
    "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
    "setup": "a release of the chart with its default values (2 webhook replicas, --request-body-budget 16Mi) "
             "on the e2e cluster's real node; kubesteer-bench webhook-memory (debug build) on the host sends the "
             "flood and the ordinary reviews to the webhook Service's ClusterIP with the apiserver's client "
             "certificate; the flood's clients spread over both pods through kube-proxy",
    "definition": "cgroups[].peak_bytes: memory.max_usage_in_bytes of the pod's container cgroup (cgroup v1; "
                  "memory.peak on v2), the most memory the container was charged since it started, page cache "
                  "included; limit_bytes: the container's limit",
    **result,
}
json.dump(out, open("bench/results/webhook-memory-chart.json", "w"), indent=2)
print(json.dumps({"cgroups": out["cgroups"], "ordinary_reviews": out["ordinary_reviews"]["under_flood"]}, indent=2))
PY
