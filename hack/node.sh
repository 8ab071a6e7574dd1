#!/usr/bin/env bash
# One real node beside the kwok nodes: containerd (runc, a local pause image, a bridge CNI),
# a kubelet and kube-proxy, all from the pinned cache, all state under $KUBESTEER_STATE/node.
#   hack/node.sh up       start it (or keep the running one) and wait until the node is Ready
#   hack/node.sh down     stop every process it started, remove its iptables rules, bridge and state
#   hack/node.sh load F   import an image archive (docker-archive) into the node's containerd
#   hack/node.sh status   exit 0 when the node's containerd and kubelet run
# Like kind, it stays out of the host's way: its containerd has its own config, root, state and
# socket, the CNI configuration lives beside them, nothing is written under /etc. It needs root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${KUBESTEER_CACHE:-$HOME/.cache/kubesteer}
bin="$cache/bin"
state=${KUBESTEER_STATE:-$root/.kubesteer}
kubeconfig="$state/kubeconfig"
dir="$state/node"
node=${KUBESTEER_NODE_NAME:-kubesteer-node}
bridge=${KUBESTEER_NODE_BRIDGE:-kubesteer0}
pod_cidr=${KUBESTEER_POD_CIDR:-10.213.0.0/24}
pause_image=${KUBESTEER_PAUSE_IMAGE:-localhost/kubesteer-pause:3.10}
sock="$dir/containerd.sock"
kubectl=("$bin/kubectl" --kubeconfig "$kubeconfig")
ctr=(ctr --address "$sock" -n k8s.io)
# The taint and label that keep every pod but kubesteer's own off this node.
taint_key=kubesteer.io/real-node
log() { printf '[node] %s\n' "$*" >&2; }
die() { printf '[node] %s\n' "$*" >&2; exit 1; }

running() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

# start NAME CMD...: runs CMD in the background with its log in $dir/logs/NAME.log.
start() {
  local name=$1; shift
  running "$name" && return
  "$@" >"$dir/logs/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what not ready after ${secs}s; logs in $dir/logs"
    sleep 0.5
  done
}

preflight() {
  [ "$(id -u)" = 0 ] || die "a real node needs root (containerd, runc, CNI, iptables)"
  local missing=()
  for c in containerd ctr runc iptables ip; do command -v "$c" >/dev/null || missing+=("$c"); done
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]}: apt-get install containerd runc containernetworking-plugins iptables iproute2"
  for c in kubelet kube-proxy; do
    [ -x "$bin/$c" ] || die "$bin/$c is not built: hack/build-control-plane.sh kubernetes"
  done
  [ -f "$kubeconfig" ] || die "no cluster: hack/cluster.sh up first"
}

write_configs() {
  mkdir -p "$dir"/{logs,cni/net.d,cni/ipam,containerd/root,containerd/state,containerd/opt,runc,kubelet,pod-logs}
  cat >"$dir/containerd.toml" <<TOML
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # The kubelet asks for oom_score_adj -998; without CAP_SYS_RESOURCE runc then fails every sandbox.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$dir/runc"
        SystemdCgroup = false
TOML
  # No ipMasq and no portmap: the plugins then add no iptables rules of their own.
  cat >"$dir/cni/net.d/10-kubesteer.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "kubesteer",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$pod_cidr"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
JSON
  cat >"$dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$sock
# cgroup v1 without systemd and without CAP_SYS_RESOURCE: no QoS cgroups, no allocatable enforcement.
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
evictionHard: {}
localStorageCapacityIsolation: false
makeIPTablesUtilChains: false
podLogsDir: $dir/pod-logs
address: $node_ip
port: ${KUBESTEER_KUBELET_PORT:-10250}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${KUBESTEER_KUBELET_HEALTHZ_PORT:-10248}
serializeImagePulls: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $client_ca}
authorization:
  mode: Webhook
registerWithTaints:
  - {key: $taint_key, value: "true", effect: NoSchedule}
YAML
}

# The address the apiserver advertises, which pods reach through the kubernetes Service.
discover() {
  local kwok_dir
  kwok_dir=$(dirname "$(readlink -f "$kubeconfig")")
  node_ip=$("${kubectl[@]}" get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[0].endpoints[0].addresses[0]}')
  [ -n "$node_ip" ] || die "the kubernetes Service has no endpoint"
  client_ca=$(find "$state/kwok" -name ca.crt -path '*pki*' | head -n1)
  [ -n "$client_ca" ] || die "no cluster CA under $state/kwok ($kwok_dir)"
}

up() {
  preflight
  discover
  write_configs
  # Pods reach Services through this host; the bridge plugin turns forwarding on, down restores it.
  [ -f "$dir/ip_forward.orig" ] || cat /proc/sys/net/ipv4/ip_forward >"$dir/ip_forward.orig"
  start containerd containerd --config "$dir/containerd.toml"
  wait_for containerd 30 "${ctr[@]}" version
  if ! "${ctr[@]}" images ls -q | grep -qx "$pause_image"; then
    local archive=${KUBESTEER_PAUSE_ARCHIVE:-$state/pause.tar}
    [ -f "$archive" ] || "$root/hack/image.sh" pause "$pause_image" "$archive"
    load "$archive"
  fi
  start kubelet "$bin/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$kubeconfig" \
    --root-dir "$dir/kubelet" --hostname-override "$node" --node-ip "$node_ip" \
    --node-labels "$taint_key=true"
  start kube-proxy "$bin/kube-proxy" --kubeconfig "$kubeconfig" --hostname-override "$node" \
    --proxy-mode iptables --cluster-cidr "$pod_cidr" --masquerade-all \
    --conntrack-max-per-core 0 --iptables-localhost-nodeports=false \
    --healthz-bind-address 127.0.0.1:${KUBESTEER_PROXY_HEALTHZ_PORT:-10256} \
    --metrics-bind-address 127.0.0.1:${KUBESTEER_PROXY_METRICS_PORT:-10249}
  wait_for "node $node" 90 "${kubectl[@]}" wait --for=condition=Ready "node/$node" --timeout=2s
  log "node $node Ready ($node_ip, pods in $pod_cidr on $bridge; logs in $dir/logs)"
}

# load FILE: imports a docker-archive into the node's image store (the kubelet's k8s.io namespace).
load() {
  running containerd || die "the node's containerd is not running: hack/node.sh up"
  "${ctr[@]}" images import "$1" >/dev/null
  log "loaded $1"
}

stop() { # NAME: TERM, then KILL after 10 s
  local pid
  [ -f "$dir/$1.pid" ] || return 0
  pid=$(cat "$dir/$1.pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/$1.pid"
}

down() {
  [ -d "$dir" ] || return 0
  stop kubelet
  # Containers first, while containerd still answers; then their shims.
  if running containerd; then
    for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
      "${ctr[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
  fi
  pkill -9 -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null || true
  stop containerd
  stop kube-proxy
  [ -x "$bin/kube-proxy" ] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  # kube-proxy --cleanup leaves the empty KUBE-FIREWALL chain of the filter tables behind.
  for t in iptables ip6tables; do
    command -v "$t" >/dev/null || continue
    for chain in INPUT OUTPUT; do
      while "$t" -D "$chain" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    "$t" -F KUBE-FIREWALL 2>/dev/null && "$t" -X KUBE-FIREWALL 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  if [ -f "$dir/ip_forward.orig" ]; then cat "$dir/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward; fi
  # Network namespaces and overlay mounts of killed pods, deepest first.
  grep -F " $dir/" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  [ -f "$kubeconfig" ] && "${kubectl[@]}" delete node "$node" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rm -rf "$dir"
  log "node $node removed"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  load) [ -n "${2:-}" ] || die "usage: $0 load ARCHIVE"; load "$2" ;;
  status) running containerd && running kubelet ;;
  *) echo "usage: $0 up|down|load ARCHIVE|status" >&2; exit 2 ;;
esac
