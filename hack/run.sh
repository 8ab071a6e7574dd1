#!/usr/bin/env bash
# `make run`: the local real control plane with kubesteer installed, in the foreground.
#   MODE=cluster (default, as root): the image built and installed by the chart on the real node,
#     with self-managed certificates; the samples applied through the in-cluster webhook.
#   MODE=host: the two binaries run on the host, the webhook configurations point at a URL.
# The cluster is "kubesteer" with its state in .kubesteer/ (the e2e tests have one of their own,
# hack/e2e.sh). Ctrl-C removes what this run added: the whole cluster when it started it; when it
# reused a running cluster, only the release or processes, webhook configurations and samples it
# installed. It fails (non-zero, with the reason) when the webhook does not become ready in time
# (KUBESTEER_READY_TIMEOUT seconds, default 300).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${KUBESTEER_CACHE:-$HOME/.cache/kubesteer}
export KUBESTEER_CLUSTER=${KUBESTEER_CLUSTER:-kubesteer}
export KUBESTEER_STATE=${KUBESTEER_STATE:-$root/.kubesteer}
state=$KUBESTEER_STATE
kc="$state/kubeconfig"
export KUBECONFIG=$kc
port=${KUBESTEER_WEBHOOK_PORT:-9443}
metrics_port=${KUBESTEER_CONTROLLER_METRICS_PORT:-8080}
ready_timeout=${KUBESTEER_READY_TIMEOUT:-300}
img=${IMG:-kubesteer:dev}
mode=${MODE:-cluster}
release=${KUBESTEER_RELEASE:-kubesteer}
release_ns=${KUBESTEER_RELEASE_NAMESPACE:-kubesteer-system}
kubectl=("$cache/bin/kubectl" --kubeconfig "$kc")
helm=("$cache/bin/helm" --kubeconfig "$kc")
pids=()
# What this run added, so that Ctrl-C removes that and nothing else.
started_cluster=0 installed_release=0 installed_hooks=0 created_web=0 applied_samples=0
log() { printf '[run] %s\n' "$*" >&2; }
die() { printf '[run] error: %s\n' "$*" >&2; exit 1; }
if [ "$mode" = cluster ] && [ "$(id -u)" != 0 ]; then
  log "the real node needs root (containerd, runc, CNI, netns); running in MODE=host instead"
  mode=host
fi
export KUBESTEER_REAL_NODE=$([ "$mode" = cluster ] && echo 1 || echo 0)

cleanup() {
  trap - EXIT INT TERM
  KUBESTEER_STOPPING=1
  echo
  if [ "$started_cluster" = 1 ]; then
    log "tearing down cluster $KUBESTEER_CLUSTER"
    for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
    for p in ${pids[@]+"${pids[@]}"}; do wait "$p" 2>/dev/null || true; done
    hack/cluster.sh down
    return
  fi
  log "leaving cluster $KUBESTEER_CLUSTER running (this run did not start it); removing what this run added"
  # The samples first, while the controller that owns their finalizers still runs.
  if [ "$applied_samples" = 1 ]; then
    "${kubectl[@]}" delete -f config/samples/ --ignore-not-found --timeout=60s >/dev/null 2>&1 ||
      log "the samples were not deleted within 60s"
  fi
  if [ "$created_web" = 1 ]; then
    "${kubectl[@]}" delete deployment web --ignore-not-found >/dev/null 2>&1 || true
  fi
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  for p in ${pids[@]+"${pids[@]}"}; do wait "$p" 2>/dev/null || true; done
  if [ "$installed_hooks" = 1 ]; then
    "${kubectl[@]}" delete mutatingwebhookconfiguration,validatingwebhookconfiguration kubesteer-run-kubesteer \
      --ignore-not-found >/dev/null 2>&1 || true
    # The host webhook pointed the Scaler CRD's conversion at its URL: back to the committed one.
    hack/crds.sh "${kubectl[@]}" >/dev/null 2>&1 || true
  fi
  if [ "$installed_release" = 1 ]; then
    "${helm[@]}" uninstall "$release" -n "$release_ns" --wait --timeout 2m >/dev/null 2>&1 ||
      log "helm uninstall $release failed; see helm -n $release_ns status $release"
  fi
  log "done"
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
  kubectl get kubesteer                        # all four kinds, with their columns
  kubectl get memcached cache -o yaml          # the defaults, the status, the conditions
  kubectl wait --for=condition=Ready memcached/cache
  kubectl apply -f - <<'EOF'                   # denied: every bad field is named
  apiVersion: kubesteer.io/v1alpha1
  kind: Scaler
  metadata: {name: broken}
  spec: {deployments: [{name: Web}], start: 9, end: "09:00", timeZone: Mars/Olympus}
  EOF

Press Ctrl-C to tear everything down$([ "$started_cluster" = 1 ] || echo " that this run added (the cluster was already running and stays)").
TXT
}

# The samples, through whichever webhook is installed, reconciled by whichever controller runs.
samples() {
  "${kubectl[@]}" get deployment web >/dev/null 2>&1 ||
    { "${kubectl[@]}" create deployment web --image=nginx --replicas=1 >/dev/null && created_web=1; }
  # Removed on Ctrl-C only when none of them was there before.
  [ -n "$("${kubectl[@]}" get -f config/samples/ --ignore-not-found -o name 2>/dev/null)" ] || applied_samples=1
  "${kubectl[@]}" apply -f config/samples/
  "${kubectl[@]}" wait --for=condition=Ready --timeout=120s memcached/cache welcome/hello \
    application/application-sample
  "${kubectl[@]}" wait --for=jsonpath='{.status.observedGeneration}'=1 --timeout=60s scaler/office-hours
  "${kubectl[@]}" get kubesteer
}

hack/cluster.sh status || started_cluster=1
if [ "$mode" = cluster ]; then
  hack/cluster.sh up
  make --no-print-directory image IMG="$img" IMAGE_TAR="$state/image.tar"
  "${helm[@]}" status "$release" -n "$release_ns" >/dev/null 2>&1 || installed_release=1
  KUBESTEER_IMAGE_ARCHIVE="$state/image.tar" KUBESTEER_DEPLOY_TIMEOUT="${ready_timeout}s" \
    hack/deploy.sh up "$img" ||
    die "kubesteer did not become ready within ${ready_timeout}s (helm --wait); see" \
      "kubectl -n $release_ns get pods,events and kubectl -n $release_ns logs deploy/$release-webhook"
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
  --conversion-crd scalers.kubesteer.io --conversion-url "https://127.0.0.1:$port" \
  --conversion-ca-file "$state/certs/ca.crt" \
  >"$state/webhook.log" 2>&1 &
pids+=($!)
deadline=$((SECONDS + ready_timeout))
until curl -sf --cacert "$state/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null; do
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$state/webhook.log" >&2; die "the webhook exited; log above"; }
  [ $SECONDS -lt $deadline ] ||
    die "the webhook was not ready within ${ready_timeout}s (https://127.0.0.1:$port/readyz); see $state/webhook.log"
  sleep 0.2
done
installed_hooks=1
"$cache/bin/helm" template kubesteer-run charts/kubesteer --namespace kubesteer-system \
  --show-only templates/webhook-configurations.yaml \
  --set "webhook.url=https://127.0.0.1:$port" --set-file "webhook.caBundle=$state/certs/ca.crt" |
  "${kubectl[@]}" apply -f - >/dev/null
log "webhook on https://127.0.0.1:$port (log: $state/webhook.log)"

KUBECONFIG="$kc" target/debug/kubesteer-controller --metrics-addr "127.0.0.1:$metrics_port" \
  >"$state/controller.log" 2>&1 &
pids+=($!)
log "controller running (metrics on http://127.0.0.1:$metrics_port/metrics, log: $state/controller.log)"
samples
try_it

wait -n "${pids[@]}" || true
[ -n "${KUBESTEER_STOPPING:-}" ] || log "a component exited; see $state/*.log"
