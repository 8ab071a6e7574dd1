# What the controller benchmarks share (bench/scripts/controller.sh and restart.sh source it):
# where a benchmark cluster's files are, its controller-manager, and the controller's reconciles.
. "$(dirname "${BASH_SOURCE[0]}")/../../hack/lib.sh"

# The working directory of benchmark cluster $1: bench/tmp/controller for `bench`, else with
# -<cluster>, so that runs on two clusters at once do not remove each other's files.
bench_work() { # cluster
  if [ "$1" = bench ]; then echo "$root/bench/tmp/controller"; else echo "$root/bench/tmp/controller-$1"; fi
}
# The kube-controller-manager of benchmark cluster $1 (kwok runs it as a process of this machine).
kcm_pid() { # cluster
  pgrep -f "kube-controller-manager.*/clusters/$1/" | head -1
}
# The controller's reconciles so far, of every kind, from its metrics on port $1; fails (printing
# 0) when the controller does not answer.
reconciles_total() { # port
  curl -sf "http://127.0.0.1:$1/metrics" | awk '/^kubesteer_reconciles_total/ {s += $2} END {print s + 0}'
}
# The CPU seconds so far of each process of benchmark cluster $1's control plane (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kwok-controller), as `name seconds`
# lines, and the machine's idle seconds (all cores) as `idle seconds`.
plane_cpu() { # cluster
  local pid hz
  hz=$(getconf CLK_TCK)
  for pid in $(pgrep -f "/clusters/$1/bin/"); do
    awk -v hz="$hz" -v name="$(basename "$(readlink "/proc/$pid/exe")")" \
      '{ sub(/^.*\) /, ""); print name, ($12 + $13) / hz }' "/proc/$pid/stat"
  done
  awk -v hz="$hz" '/^cpu / { print "idle", ($5 + $6) / hz }' /proc/stat
}
