#!/usr/bin/env bash
# The local real control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
# and kwok (fake nodes whose pods become Running and Ready), all from the pinned cache, plus one real
# node of its own (hack/node.sh: containerd, kubelet, kube-proxy in a netns of the cluster's own)
# tainted for kubesteer's own pods. Clusters of other names and state dirs run side by side.
#   hack/cluster.sh up     start it (or reuse a running one), install the CRDs, write $KUBESTEER_STATE/kubeconfig
#   hack/cluster.sh down   stop it, its node, and delete its state
#   hack/cluster.sh status exit 0 when it answers
# Environment: KUBESTEER_CLUSTER (name, default kubesteer), KUBESTEER_STATE (state dir, default
# .kubesteer; hack/e2e.sh uses kubesteer-e2e in .kubesteer/e2e), KUBESTEER_NODES (fake nodes),
# KUBESTEER_AUDIT_POLICY (opt-in: an audit policy file; the log is $KUBESTEER_STATE/kwok/clusters/<name>/logs/audit.log),
# KUBESTEER_EXTRA_ARGS (opt-in: more kwokctl --extra-args, space-separated, e.g. "kube-scheduler=v=2"),
# KUBESTEER_REAL_NODE (1: add the real node, 0: kwok nodes only; default 1 as root, else 0).
# The apiserver presents a client certificate to every webhook (its AdmissionConfiguration's
# kubeconfig, user "*"), made once by `kubesteer-certs client` in $KUBESTEER_STATE/apiserver-client/;
# hack/deploy.sh, hack/run.sh and the e2e tests give its ca.crt to the webhook, which then answers
# reviews from the apiserver only (docs/security.md).
. "$(dirname "$0")/lib.sh"
# shellcheck source=../versions.env
state=${KUBESTEER_STATE:-$root/.kubesteer}
name=${KUBESTEER_CLUSTER:-kubesteer}
nodes=${KUBESTEER_NODES:-3}
opt_in=() # kwokctl flags from the opt-in variables above
if [ -n "${KUBESTEER_AUDIT_POLICY:-}" ]; then
  opt_in=(--kube-audit-policy "$(realpath "$KUBESTEER_AUDIT_POLICY")")
fi
for a in ${KUBESTEER_EXTRA_ARGS:-}; do
  opt_in+=(--extra-args "$a")
done
kubeconfig="$state/kubeconfig"
real_node=${KUBESTEER_REAL_NODE:-$([ "$(id -u)" = 0 ] && echo 1 || echo 0)}
export KWOK_WORKDIR="$state/kwok"
kwokctl=("$bin/kwokctl" --name "$name")
kubectl=("$bin/kubectl" --kubeconfig "$kubeconfig")

# The apiserver's client certificate for webhooks, with its CA, and the AdmissionConfiguration
# that hands it to the validating and mutating admission plugins for every webhook (user "*").
admission_config() {
  local dir=$1
  (cd "$root" && cargo run -q -p kubesteer-certs --bin kubesteer-certs -- client --out-dir "$dir" --name kube-apiserver) >/dev/null
  cat >"$dir/kubeconfig.yaml" <<YAML
apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: $dir/client.crt
      client-key: $dir/client.key
YAML
  cat >"$dir/admission.yaml" <<YAML
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: $dir/kubeconfig.yaml
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: $dir/kubeconfig.yaml
YAML
}

# claim_ports: a block of 8 host ports of this state dir's own, from 32000 + 8 × block (32000 to
# 32767: above the tests' free_port range, below the kernel's ephemeral ports), for the control
# plane's 6 listeners, written to $state/ports.env. kwokctl would otherwise pick free ports itself,
# counting down from 32767 in each process: two clusters created at once get the same ones, and
# one created while a test restarts another's apiserver or etcd can take its port.
port_blocks=$cache/cluster-ports
claim_ports() {
  mkdir -p "$port_blocks" "$state"
  local n owner me
  me=$(realpath -m "$state")
  for n in $(seq 0 95); do
    [ "$(cat "$port_blocks/$n" 2>/dev/null)" = "$me" ] && grep -qx "PORT_BLOCK=$n" "$state/ports.env" 2>/dev/null && return 0
  done
  for n in $(seq 0 95); do
    # A block whose owner's state no longer names it (claimed over a minute ago) is free again.
    if [ -f "$port_blocks/$n" ]; then
      owner=$(cat "$port_blocks/$n")
      if [ -n "$(find "$port_blocks/$n" -mmin +1)" ] && ! grep -qx "PORT_BLOCK=$n" "$owner/ports.env" 2>/dev/null; then
        rm -f "$port_blocks/$n"
      fi
    fi
    if (set -o noclobber && printf '%s\n' "$me" >"$port_blocks/$n") 2>/dev/null; then
      local base=$((32000 + 8 * n))
      cat >"$state/ports.env" <<ENV
PORT_BLOCK=$n
ETCD_PEER_PORT=$base
ETCD_PORT=$((base + 1))
APISERVER_PORT=$((base + 2))
KWOK_CONTROLLER_PORT=$((base + 3))
CONTROLLER_MANAGER_PORT=$((base + 4))
SCHEDULER_PORT=$((base + 5))
ENV
      return 0
    fi
  done
  die "no free block of ports under $port_blocks (owners: $(cat "$port_blocks"/* | tr '\n' ' '))"
}

# release_ports: gives this state dir's block back.
release_ports() {
  local n
  n=$(sed -n 's/^PORT_BLOCK=//p' "$state/ports.env" 2>/dev/null)
  if [ -n "$n" ] && [ "$(cat "$port_blocks/$n" 2>/dev/null)" = "$(realpath -m "$state")" ]; then rm -f "$port_blocks/$n"; fi
  rm -f "$state/ports.env"
}

answers() { [ -f "$kubeconfig" ] && "${kubectl[@]}" get --request-timeout=10s --raw /readyz >/dev/null 2>&1; }

up() {
  mkdir -p "$state"
  if answers; then
    log "reusing the running cluster $name"
  else
    # A stale cluster (from a killed session) is removed before a fresh start, its node too.
    "$root/hack/node.sh" release
    "${kwokctl[@]}" delete cluster >/dev/null 2>&1 || true
    rm -f "$kubeconfig"
    # With a real node, the cluster's Service range is its node's (hack/node.sh claim): the host
    # routes it into that node's netns, so every cluster with a node needs a range of its own.
    local service_cidr=10.0.0.0/24 service_ip=10.0.0.1
    if [ "$real_node" = 1 ]; then
      "$root/hack/node.sh" claim
      service_cidr=$(sed -n 's/^SERVICE_CIDR=//p' "$state/net.env")
      service_ip=$(sed -n 's/^SERVICE_IP=//p' "$state/net.env")
    fi
    claim_ports
    # shellcheck disable=SC1091 # written by claim_ports
    . "$state/ports.env"
    local client_dir
    client_dir=$(cd "$state" && pwd)/apiserver-client
    admission_config "$client_dir"
    cat >"$state/kwokctl.yaml" <<YAML
kind: KwokctlConfiguration
apiVersion: config.kwok.x-k8s.io/v1alpha1
options:
  runtime: binary
  kubeVersion: $K8S_VERSION
  etcdBinary: $bin/etcd
  kubeApiserverBinary: $bin/kube-apiserver
  kubeControllerManagerBinary: $bin/kube-controller-manager
  kubeSchedulerBinary: $bin/kube-scheduler
  kwokControllerBinary: $bin/kwok
  kubectlBinary: $bin/kubectl
  disableQPSLimits: true
  etcdPeerPort: $ETCD_PEER_PORT
  etcdPort: $ETCD_PORT
  kubeApiserverPort: $APISERVER_PORT
  kwokControllerPort: $KWOK_CONTROLLER_PORT
  kubeControllerManagerPort: $CONTROLLER_MANAGER_PORT
  kubeSchedulerPort: $SCHEDULER_PORT
  # Pods of the real node reach the apiserver at the kubernetes Service's ClusterIP (kube-proxy).
  kubeApiserverCertSANs: [$service_ip]
# In the file, not as --extra-args: kwokctl v0.7.0 panics on several args for several components.
componentsPatches:
  - name: etcd
    extraArgs:
      - {key: unsafe-no-fsync, value: "true"}
  - name: kube-apiserver
    extraArgs:
      - {key: service-cluster-ip-range, value: $service_cidr}
      # The real node is reached by its address (there is no DNS for its name), with a client
      # certificate that its kubelet accepts (kubectl logs and exec).
      - {key: kubelet-preferred-address-types, value: InternalIP}
      - {key: kubelet-client-certificate, value: $KWOK_WORKDIR/clusters/$name/pki/admin.crt}
      - {key: kubelet-client-key, value: $KWOK_WORKDIR/clusters/$name/pki/admin.key}
      # Webhooks are called with the client certificate in $client_dir (see admission_config).
      - {key: admission-control-config-file, value: $client_dir/admission.yaml}
  - name: kwok-controller
    extraArgs:
      # Only the fake nodes: the real node's kubelet reports its own pods.
      - {key: manage-all-nodes, value: "false"}
      - {key: manage-nodes-with-annotation-selector, value: kwok.x-k8s.io/node=fake}
YAML
    local started=$SECONDS
    log "starting cluster $name (Kubernetes $K8S_VERSION)"
    "${kwokctl[@]}" create cluster --config "$state/kwokctl.yaml" --kubeconfig "$kubeconfig" \
      ${opt_in[@]+"${opt_in[@]}"} --wait 120s
    if [ "$nodes" -gt 0 ]; then
      log "scaling to $nodes fake nodes"
      "${kwokctl[@]}" scale node --replicas "$nodes"
      "${kubectl[@]}" wait --for=condition=Ready node -l type=kwok --timeout=60s >/dev/null
    fi
    log "cluster up in $((SECONDS - started))s"
  fi
  "$root/hack/crds.sh" "${kubectl[@]}"
  log "CRDs installed; kubeconfig: $kubeconfig"
  if [ "$real_node" = 1 ]; then
    "$root/hack/node.sh" up
    "$root/hack/registry.sh" up
  fi
}

down() {
  "$root/hack/registry.sh" down
  "$root/hack/node.sh" release
  "${kwokctl[@]}" delete cluster >/dev/null 2>&1 || true
  rm -f "$kubeconfig"
  release_ports
  log "cluster $name deleted"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) answers ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
