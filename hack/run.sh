#!/usr/bin/env bash
# `make run`: the local real control plane with kubesteer installed, in the foreground.
#   MODE=cluster (default, as root): the image built and installed by the chart on the real node,
#     with self-managed certificates; the samples applied through the in-cluster webhook.
#   MODE=host: the two binaries run on the host, the webhook configurations point at a URL.
# Ctrl-C tears everything down and leaves nothing running.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${KUBESTEER_CACHE:-$HOME/.cache/kubesteer}
state=${KUBESTEER_STATE:-$root/.kubesteer}
kc="$state/kubeconfig"
port=${KUBESTEER_WEBHOOK_PORT:-9443}
metrics_port=${KUBESTEER_CONTROLLER_METRICS_PORT:-8080}
img=${IMG:-kubesteer:dev}
mode=${MODE:-cluster}
kubectl=("$cache/bin/kubectl" --kubeconfig "$kc")
pids=()
log() { printf '[run] %s\n' "$*" >&2; }
if [ "$mode" = cluster ] && [ "$(id -u)" != 0 ]; then
  log "the real node needs root (containerd, runc, CNI, iptables); running in MODE=host instead"
  mode=host
fi
export KUBESTEER_REAL_NODE=$([ "$mode" = cluster ] && echo 1 || echo 0)

cleanup() {
  trap - EXIT INT TERM
  KUBESTEER_STOPPING=1
  echo
  log "tearing down"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "${kubectl[@]}" delete mutatingwebhookconfiguration,validatingwebhookconfiguration kubesteer-run-kubesteer \
    --ignore-not-found >/dev/null 2>&1 || true
  hack/cluster.sh down
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

try_it() {
  cat <<TXT

kubesteer is running on a local control plane (Kubernetes $("$cache/bin/kube-apiserver" --version | cut -d' ' -f2)).
Try, in another shell:

  export KUBECONFIG=$kc
  alias kubectl=$cache/bin/kubectl
  kubectl get kubesteer                        # all three kinds, with their columns
  kubectl get memcached cache -o yaml          # the defaults, the status, the conditions
  kubectl wait --for=condition=Ready memcached/cache
  kubectl apply -f - <<'EOF'                   # denied: every bad field is named
  apiVersion: kubesteer.io/v1alpha1
  kind: Scaler
  metadata: {name: broken}
  spec: {deployments: [{name: Web}], start: 9, end: "09:00", timeZone: Mars/Olympus}
  EOF

Press Ctrl-C to tear everything down.
TXT
}

# The samples, through whichever webhook is installed, reconciled by whichever controller runs.
samples() {
  "${kubectl[@]}" create deployment web --image=nginx --replicas=1 >/dev/null 2>&1 || true
  "${kubectl[@]}" apply -f config/samples/
  "${kubectl[@]}" wait --for=condition=Ready --timeout=120s memcached/cache welcome/hello
  "${kubectl[@]}" wait --for=jsonpath='{.status.observedGeneration}'=1 --timeout=60s scaler/office-hours
  "${kubectl[@]}" get kubesteer
}

if [ "$mode" = cluster ]; then
  hack/cluster.sh up
  make --no-print-directory image IMG="$img"
  hack/deploy.sh up "$img"
  samples
  log "the webhook and controller run as pods (kubectl -n kubesteer-system get pods -o wide above)"
  try_it
  # Stays up until Ctrl-C, and says so if the real node stops.
  while hack/node.sh status; do sleep 5; done
  log "the real node stopped; see $state/node/logs"
  exit 1
fi

cargo build --workspace --bins
hack/cluster.sh up
mkdir -p "$state/certs"
target/debug/kubesteer-certs generate --service kubesteer-webhook --namespace kubesteer-system \
  --ip 127.0.0.1 --dns localhost --out-dir "$state/certs"

KUBECONFIG="$kc" target/debug/kubesteer-webhook --addr "127.0.0.1:$port" \
  --tls-cert-file "$state/certs/tls.crt" --tls-key-file "$state/certs/tls.key" \
  >"$state/webhook.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -sf --cacert "$state/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$state/webhook.log"; exit 1; }
  sleep 0.2
done
"$cache/bin/helm" template kubesteer-run charts/kubesteer --namespace kubesteer-system \
  --show-only templates/webhook-configurations.yaml \
  --set "webhook.url=https://127.0.0.1:$port" --set-file "webhook.caBundle=$state/certs/ca.crt" |
  "${kubectl[@]}" apply -f - >/dev/null
log "webhook on https://127.0.0.1:$port (log: .kubesteer/webhook.log)"

KUBECONFIG="$kc" target/debug/kubesteer-controller --metrics-addr "127.0.0.1:$metrics_port" \
  >"$state/controller.log" 2>&1 &
pids+=($!)
log "controller running (metrics on http://127.0.0.1:$metrics_port/metrics, log: .kubesteer/controller.log)"
samples
try_it

wait -n "${pids[@]}" || true
[ -n "${KUBESTEER_STOPPING:-}" ] || log "a component exited; see $state/*.log"
