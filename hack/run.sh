#!/usr/bin/env bash
# `make run`: the local real control plane with kubesteer installed, in the foreground.
# Ctrl-C tears everything down.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cleanup() {
  trap - EXIT INT TERM
  echo
  hack/cluster.sh down
}
trap cleanup EXIT INT TERM
hack/cluster.sh up
kc="$root/.kubesteer/kubeconfig"
kubectl="${KUBESTEER_CACHE:-$HOME/.cache/kubesteer}/bin/kubectl"
cat <<TXT

kubesteer is running on a local control plane. In another shell:

  export KUBECONFIG=$kc
  alias kubectl=$kubectl
  kubectl apply -f config/samples/
  kubectl get kubesteer
  kubectl explain scaler.spec

Press Ctrl-C to tear everything down.
TXT
while true; do sleep 3600 & wait $!; done
