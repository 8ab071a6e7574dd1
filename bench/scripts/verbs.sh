#!/usr/bin/env bash
# What each of kubesteer's writes costs the apiserver, by verb (bench/scripts/verbs.py): on a
# cluster of its own with the controller-manager paused, BENCH_VERBS_COUNT (1,000) writes of each
# kind, BENCH_VERBS_ROUNDS (3) rounds, the apiserver's and etcd's CPU time per write. Writes
# bench/results/apiserver-verbs.json. A benchmark, not a test: numbers vary with the machine.
. "$(dirname "$0")/../../hack/lib.sh"
tag=bench-verbs
cd "$root"
own_cluster "${BENCH_CLUSTER:-verbs}" "${BENCH_STATE:-$root/bench/tmp/verbs-cluster}"
export KUBESTEER_REAL_NODE=0 KUBESTEER_NODES=1
trap 'hack/cluster.sh down' EXIT
hack/cluster.sh down
hack/cluster.sh up
kubeconfig=$KUBESTEER_STATE/kubeconfig
server=$("$bin/kubectl" --kubeconfig "$kubeconfig" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
kcm=$(pgrep -f "kube-controller-manager.*/clusters/$KUBESTEER_CLUSTER/" | head -1)
[ -n "$kcm" ] || die "no controller-manager of cluster $KUBESTEER_CLUSTER"
kill -STOP "$kcm" # nothing but the writes measured
mkdir -p bench/results
python3 bench/scripts/verbs.py "$server" "$KUBESTEER_STATE/kwok/clusters/$KUBESTEER_CLUSTER/pki" \
  "$KUBESTEER_CLUSTER" "${BENCH_VERBS_COUNT:-1000}" "${BENCH_VERBS_ROUNDS:-3}" >bench/results/apiserver-verbs.json.tmp
python3 - "$(git rev-parse --short HEAD)" "$K8S_VERSION" <<'PY'
import datetime, json, os, sys
path = "bench/results/apiserver-verbs.json"
out = json.load(open(path + ".tmp"))
out = {"benchmark": "apiserver CPU per write, by verb", "commit": sys.argv[1], "kubernetes": sys.argv[2],
       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "machine": {"cpus": os.cpu_count()}, **out}
json.dump(out, open(path, "w"), indent=2)
os.remove(path + ".tmp")
PY
kill -CONT "$kcm" 2>/dev/null || true
log "results in bench/results/apiserver-verbs.json"
