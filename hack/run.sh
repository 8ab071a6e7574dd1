#!/usr/bin/env bash
# `make run`: the local real control plane with kubesteer installed, in the foreground.
#   MODE=cluster (default, as root): the image built and installed by the chart on the real node,
#     with self-managed certificates; the samples applied through the in-cluster webhook.
#   MODE=host: the two binaries run on the host, the webhook configurations point at a URL.
# The cluster is "kubesteer" with its state in .kubesteer/ (the e2e tests have one of their own,
# hack/e2e.sh). Ctrl-C removes what this run added: the whole cluster when it started it; when it
# reused a running cluster, only the release or processes, webhook configurations and samples it
# installed. It fails (non-zero, with the reason) when the webhook does not become ready in time
# (KUBESTEER_READY_TIMEOUT seconds, default 300) or a sample does not become Ready; then it says
# which step failed, prints what explains it (the objects' conditions and events, the webhook's
# denials, the controller's errors), keeps the cluster for a look and says how to remove it.
# KUBESTEER_RUN_ONCE=1: the same, without the foreground: once every sample is Ready it runs the
# try-it lines of the README's "Two commands" section, then tears down what it started and
# exits 0 (`make test` runs it this way, on a cluster of its own).
# Stopping it: Ctrl-C, or SIGTERM to it (kill -TERM <pid>, printed with "Press Ctrl-C") or to its
# make; both tear down the same way. A run started in the background by a shell without job
# control (a CI scheduler, `make run &` in a script) inherits SIGINT ignored, which bash cannot
# undo: Ctrl-C cannot reach it, it says so at its start, and SIGTERM is the way to stop it.
case ${1:-} in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"
cd "$root"
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
once=${KUBESTEER_RUN_ONCE:-0}
pids=()
# What this run added, so that Ctrl-C removes that and nothing else.
started_cluster=0 installed_release=0 installed_hooks=0 created_web=0 applied_samples=0
# The step under way, named when it fails.
current_step="starting"
log() { printf '[run +%ss] %s\n' "$SECONDS" "$*" >&2; }
step() { current_step=$*; log "$*"; }
if sigint_ignored; then
  log "SIGINT is ignored in this run (its parent started it in the background): Ctrl-C cannot stop it; kill -TERM $$ does"
fi
mkdir -p "$state"
echo $$ >"$state/run.pid"
if [ "$(id -u)" = 0 ]; then
  # The container tools of the image and the real node, as `make test` installs them.
  hack/install-prereqs.sh
elif [ "$mode" = cluster ]; then
  hack/install-prereqs.sh || true
  log "the real node needs root (containerd, runc, CNI, netns); running in MODE=host instead, which needs none of them"
  mode=host
fi
export KUBESTEER_REAL_NODE=$([ "$mode" = cluster ] && echo 1 || echo 0)

# What explains a failed step: the samples' conditions and events, the pods, the webhook's
# denials and the controller's errors.
diagnose() {
  local k=("${kubectl[@]}") obj
  log "failed at: $current_step"
  "${k[@]}" get kubesteer -o wide 2>&1 | sed 's/^/    /' >&2 || true
  for obj in memcached/cache welcome/hello application/application-sample scaler/office-hours; do
    "${k[@]}" get "$obj" >/dev/null 2>&1 || continue
    log "$obj: conditions and events"
    "${k[@]}" get "$obj" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' \
      2>&1 | sed 's/^/    /' >&2 || true
    "${k[@]}" get events --field-selector "involvedObject.name=${obj#*/}" --sort-by=.lastTimestamp \
      -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message --no-headers 2>&1 | tail -n 5 | sed 's/^/    /' >&2 || true
  done
  local webhook_log controller_log
  webhook_log=$(webhook_logs)
  if [ "$mode" = cluster ]; then
    log "pods and warnings in $release_ns"
    "${k[@]}" -n "$release_ns" get pods -o wide 2>&1 | sed 's/^/    /' >&2 || true
    "${k[@]}" -n "$release_ns" get events --field-selector type=Warning --no-headers 2>&1 | tail -n 10 | sed 's/^/    /' >&2 || true
    controller_log=$("${k[@]}" -n "$release_ns" logs -l app.kubernetes.io/component=controller --tail=1000 --prefix 2>&1 || true)
  else
    controller_log=$(cat "$state/controller.log" 2>/dev/null || true)
  fi
  log "the webhook's last denials"
  grep -i 'denied' <<<"$webhook_log" | tail -n 10 | sed 's/^/    /' >&2 || echo "    (none)" >&2
  log "the controller's last errors"
  grep -Ei 'error|warn|fail' <<<"$controller_log" | tail -n 10 | sed 's/^/    /' >&2 || echo "    (none)" >&2
  log "the cluster stays up for a look: export KUBECONFIG=$kc"
  if [ "$started_cluster" = 1 ]; then
    log "remove it with: KUBESTEER_CLUSTER=$KUBESTEER_CLUSTER KUBESTEER_STATE=$state hack/cluster.sh down"
  else
    log "remove what this run added with: kubectl delete -f config/samples/; helm -n $release_ns uninstall $release"
  fi
}

cleanup() {
  local rc=$1
  trap - EXIT INT TERM
  # Ctrl-C reaches the whole foreground job: a `make run | tee log` loses its tee, and a line
  # written to the dead pipe would end the teardown here or in a script it runs (SIGPIPE, or
  # set -e on the write's error). So the teardown is best effort, and its output goes through a
  # tee of its own that never fails a write: to the terminal while it is there, and always to
  # $state/teardown.log.
  trap '' PIPE
  set +e
  KUBESTEER_STOPPING=1
  exec > >(tee -p -a "$state/teardown.log") 2>&1
  echo
  if [ "$rc" != 0 ] && [ "$rc" != 130 ] && [ "$rc" != 143 ]; then
    for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
    diagnose
    return
  fi
  if [ "$started_cluster" = 1 ]; then
    log "tearing down cluster $KUBESTEER_CLUSTER"
    for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
    for p in ${pids[@]+"${pids[@]}"}; do wait_job "$p" 30 "a host binary of this run to stop" 2>/dev/null || true; done
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
  for p in ${pids[@]+"${pids[@]}"}; do wait_job "$p" 30 "a host binary of this run to stop" 2>/dev/null || true; done
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
trap 'cleanup $?' EXIT
trap 'cleanup 130; exit 130' INT
trap 'cleanup 143; exit 143' TERM

try_it() {
  cat <<TXT

kubesteer is running on a local control plane (Kubernetes $("$cache/bin/kube-apiserver" --version | cut -d' ' -f2)).
Try, in another shell:

  export KUBECONFIG=$kc PATH=$cache/bin:\$PATH
  kubectl get kubesteer                        # all four kinds, with their columns
  kubectl get memcached cache -o yaml          # the defaults, the status, the conditions
  kubectl wait --for=condition=Ready memcached/cache
  kubectl apply -f - <<'EOF'                   # denied: every bad field is named
  apiVersion: kubesteer.io/v1alpha1
  kind: Scaler
  metadata: {name: broken}
  spec: {deployments: [{name: Web}], start: 9, end: "09:00", timeZone: Mars/Olympus}
  EOF

$([ "$once" = 1 ] && echo "KUBESTEER_RUN_ONCE=1: the README's try-it lines next, then the teardown." ||
  echo "Press Ctrl-C (or: kill -TERM $$) to tear everything down$([ "$started_cluster" = 1 ] || echo " that this run added (the cluster was already running and stays)").")
TXT
}

# The try-it lines of the README's "Two commands" section, run as printed (with this run's state
# for .kubesteer/), each echoed; the first that fails fails the run.
readme_lines() {
  local lines
  lines=$(awk '/^## Two commands/ { on = 1; next } on && /^## / { exit }
    on && /^```/ { block = !block; next } on && block' README.md |
    grep -E '^(export|kubectl) ' | sed "s#\$PWD/.kubesteer/#$state/#g")
  [ -n "$lines" ] || die "no try-it lines in README.md's \"Two commands\" section"
  while IFS= read -r line; do
    current_step="the README's try-it line: $line"
    printf '$ %s\n' "$line"
    eval "$line"
  done <<<"$lines"
}

# The samples, through whichever webhook is installed, reconciled by whichever controller runs.
samples() {
  "${kubectl[@]}" get deployment web >/dev/null 2>&1 ||
    { "${kubectl[@]}" create deployment web --image=nginx --replicas=1 >/dev/null && created_web=1; }
  # Removed on Ctrl-C only when none of them was there before.
  [ -n "$("${kubectl[@]}" get -f config/samples/ --ignore-not-found -o name 2>/dev/null)" ] || applied_samples=1
  # helm --wait sees the webhook's pods Ready; the apiserver reaches them through their Service,
  # which kube-proxy may not route yet (its calls then time out): a server-side dry run tells.
  step "waiting until the apiserver reaches the webhook (kubectl apply --dry-run=server, 60s)"
  local deadline=$((SECONDS + 60)) out
  until out=$("${kubectl[@]}" apply --request-timeout=20s --dry-run=server -f config/samples/ 2>&1) ||
    ! grep -q 'failed calling webhook' <<<"$out"; do
    [ "$SECONDS" -lt "$deadline" ] || { printf '%s\n' "$out" >&2; die "the apiserver could not reach the webhook within 60s"; }
    sleep 1
  done
  step "applying config/samples/ through the webhook"
  "${kubectl[@]}" apply -f config/samples/
  step "waiting until the controller has every sample Ready"
  "${kubectl[@]}" wait --for=condition=Ready --timeout="${KUBESTEER_SAMPLES_TIMEOUT:-120s}" memcached/cache welcome/hello \
    application/application-sample scaler/office-hours
  "${kubectl[@]}" get kubesteer
}

# The end of a run: with KUBESTEER_RUN_ONCE=1 the README's lines, then exit 0 (the teardown).
done_or_wait() {
  try_it
  if [ "$once" = 1 ]; then
    readme_lines
    if [ "$mode" = cluster ]; then
      # The chart's controller is its ServiceAccount to the webhook (on the host it is the admin).
      step "checking that the webhook denied none of the controller's writes"
      local denials
      denials=$(webhook_logs | grep -i 'denied' | grep -F "serviceaccount:$release_ns:" || true)
      [ -z "$denials" ] || { printf '%s\n' "$denials" | tail -n 5 >&2; die "the webhook denied the controller's writes (above)"; }
    fi
    step "done: every sample Ready and the README's lines run"
    exit 0
  fi
}

# Every line the webhook logged.
webhook_logs() {
  if [ "$mode" = cluster ]; then
    "${kubectl[@]}" -n "$release_ns" logs -l app.kubernetes.io/component=webhook --tail=-1 --prefix 2>&1 || true
  else
    cat "$state/webhook.log" 2>/dev/null || true
  fi
}

hack/cluster.sh status || started_cluster=1
if [ "$mode" = cluster ]; then
  step "starting the cluster $KUBESTEER_CLUSTER with its real node"
  hack/cluster.sh up
  step "building the image $img"
  make --no-print-directory image IMG="$img" IMAGE_TAR="$state/image.tar"
  "${helm[@]}" status "$release" -n "$release_ns" >/dev/null 2>&1 || installed_release=1
  step "installing the chart (helm upgrade --install --wait, ${ready_timeout}s)"
  KUBESTEER_DEPLOY_TIMEOUT="${ready_timeout}s" \
    hack/deploy.sh up "$img" ||
    die "kubesteer did not become ready within ${ready_timeout}s (helm --wait)"
  samples
  log "the webhook and controller run as pods (kubectl -n kubesteer-system get pods -o wide above)"
  done_or_wait
  # Stays up until Ctrl-C, and says so if the real node stops. The check and the pause run in
  # the background, waited for by `wait`, which a trapped SIGINT interrupts at once: a Ctrl-C that
  # came while a foreground child ran and exited normally would be taken as handled by that child
  # (bash's "wait and cooperative exit"), and the run would go on.
  while { hack/node.sh status & wait_job $! 30 "the real node's status"; }; do nap 5; done # no deadline: the foreground
  current_step="running: the real node stopped; see $state/node/logs"
  exit 1
fi

step "building the binaries"
cargo build --workspace --bins
debug=${CARGO_TARGET_DIR:-$root/target}/debug
step "starting the cluster $KUBESTEER_CLUSTER"
hack/cluster.sh up
step "starting the webhook on the host"
mkdir -p "$state/certs"
"$debug/kubesteer-certs" generate --service kubesteer-webhook --namespace kubesteer-system \
  --ip 127.0.0.1 --dns localhost --out-dir "$state/certs"

# Reviews only from the apiserver, whose client certificate hack/cluster.sh made.
apiserver_auth=()
[ ! -f "$state/apiserver-client/ca.crt" ] || apiserver_auth=(--apiserver-client-ca "$state/apiserver-client/ca.crt")
KUBECONFIG="$kc" "$debug/kubesteer-webhook" --addr "127.0.0.1:$port" \
  --tls-cert-file "$state/certs/tls.crt" --tls-key-file "$state/certs/tls.key" \
  --conversion-crd scalers.kubesteer.io --conversion-url "https://127.0.0.1:$port" \
  --conversion-ca-file "$state/certs/ca.crt" ${apiserver_auth[@]+"${apiserver_auth[@]}"} \
  >"$state/webhook.log" 2>&1 &
pids+=($!)
deadline=$((SECONDS + ready_timeout))
until curl -sf --max-time 5 --cacert "$state/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null; do
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

KUBECONFIG="$kc" "$debug/kubesteer-controller" --metrics-addr "127.0.0.1:$metrics_port" \
  >"$state/controller.log" 2>&1 &
pids+=($!)
log "controller running (metrics on http://127.0.0.1:$metrics_port/metrics, log: $state/controller.log)"
samples
done_or_wait

# Until Ctrl-C or SIGTERM, or until one of the two binaries exits.
running() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done; }
while running; do nap 2; done # no deadline: the foreground
[ -n "${KUBESTEER_STOPPING:-}" ] || log "a component exited; see $state/*.log"
