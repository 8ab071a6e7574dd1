#!/usr/bin/env bash
# `make run`: the local real control plane with kubesteer installed, in the foreground:
# cluster, certificates, CRDs, webhook configurations by URL, webhook and controller.
# Ctrl-C tears everything down and leaves nothing running.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${KUBESTEER_CACHE:-$HOME/.cache/kubesteer}
state=${KUBESTEER_STATE:-$root/.kubesteer}
kc="$state/kubeconfig"
port=${KUBESTEER_WEBHOOK_PORT:-9443}
metrics_port=${KUBESTEER_CONTROLLER_METRICS_PORT:-8080}
kubectl=("$cache/bin/kubectl" --kubeconfig "$kc")
pids=()
log() { printf '[run] %s\n' "$*" >&2; }

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
trap cleanup EXIT INT TERM

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

cat <<TXT

kubesteer is running on a local control plane (Kubernetes $("$cache/bin/kube-apiserver" --version | cut -d' ' -f2)).
Try, in another shell:

  export KUBECONFIG=$kc
  alias kubectl=$cache/bin/kubectl
  kubectl apply -f config/samples/            # defaulted by the webhook
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
wait -n "${pids[@]}" || true
[ -n "${KUBESTEER_STOPPING:-}" ] || log "a component exited; see $state/*.log"
