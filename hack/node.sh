#!/usr/bin/env bash
# One real node per cluster beside the kwok nodes: containerd (runc, a local pause image, a bridge
# CNI), a kubelet and kube-proxy, all from the pinned cache, all state under $KUBESTEER_STATE/node,
# all inside a network namespace of the cluster's own, so two clusters' nodes (make run's and the
# e2e tests') run side by side on one host.
#   hack/node.sh claim    pick the cluster's node network (a free slot) into $KUBESTEER_STATE/net.env;
#                         hack/cluster.sh calls it before it creates a cluster with a real node
#   hack/node.sh up       start the node (or keep the running one) and wait until it is Ready
#   hack/node.sh down     stop every process it started, remove its netns, routes, cgroups and state
#   hack/node.sh release  down, then give the slot back (hack/cluster.sh down)
#   hack/node.sh load F   import an image archive (docker-archive) into the node's containerd
#   hack/node.sh status   exit 0 when the node's containerd and kubelet run
#
# The network of slot N (1-200; claimed under /run/kubesteer-nodes, owned by the state dir):
#   netns ks-N with eth0 10.214.N.2/30, joined by a veth pair to the host's ksnode-N 10.214.N.1/30;
#   pods in 10.213.N.0/24 on the bridge kubesteer0 inside the netns; Services in 10.215.N.0/24
#   (the cluster's --service-cluster-ip-range). The host routes both /24s into the netns, where
#   the node's own kube-proxy (iptables, --masquerade-all) answers for the ClusterIPs, so the
#   host's kube-apiserver reaches webhooks through their Service and the host's iptables are
#   never touched. Nothing is written under /etc. It needs root.
. "$(dirname "$0")/lib.sh"
state=${KUBESTEER_STATE:-$root/.kubesteer}
state=$(mkdir -p "$state" && cd "$state" && pwd)
kubeconfig="$state/kubeconfig"
net_env="$state/net.env"
dir="$state/node"
node=${KUBESTEER_NODE_NAME:-kubesteer-node}
pause_image=${KUBESTEER_PAUSE_IMAGE:-localhost/kubesteer-pause:3.10}
slots=/run/kubesteer-nodes
sock="$dir/containerd.sock"
kubectl=("$bin/kubectl" --kubeconfig "$kubeconfig")
ctr=(ctr --address "$sock" -n k8s.io)
# The taint and label that keep every pod but kubesteer's own off this node.
taint_key=kubesteer.io/real-node

# net_vars N: the node network of slot N.
net_vars() {
  local n=$1
  SLOT=$n
  NETNS=ks-$n
  HOST_VETH=ksnode-$n
  HOST_IP=10.214.$n.1
  NODE_IP=10.214.$n.2
  POD_CIDR=10.213.$n.0/24
  SERVICE_CIDR=10.215.$n.0/24
  SERVICE_IP=10.215.$n.1
}

# claim: a free slot for this state dir (its own when it has one), written to net.env.
claim() {
  [ "$(id -u)" = 0 ] || die "a real node needs root (netns, containerd, runc, CNI, iptables)"
  mkdir -p "$slots"
  local n owner mine=
  for n in $(seq 1 200); do
    [ "$(cat "$slots/$n/owner" 2>/dev/null)" = "$state" ] && { mine=$n; break; }
  done
  if [ -z "$mine" ]; then
    for n in $(seq 1 200); do
      # A slot whose owner's state no longer names it, with nothing left in its netns, was left
      # by a removed state dir (claimed over a minute ago): its netns and veth go, the slot is free.
      if [ -f "$slots/$n/owner" ]; then
        owner=$(cat "$slots/$n/owner")
        if [ -n "$(find "$slots/$n/owner" -mmin +1)" ] && ! grep -qx "SLOT=$n" "$owner/net.env" 2>/dev/null &&
          [ -z "$(ip netns pids "ks-$n" 2>/dev/null)" ]; then
          ip netns del "ks-$n" 2>/dev/null || true
          ip link del "ksnode-$n" 2>/dev/null || true
          rm -rf "${slots:?}/$n"
        fi
      fi
      if mkdir "$slots/$n" 2>/dev/null; then
        echo "$state" >"$slots/$n/owner"
        mine=$n
        break
      fi
    done
  fi
  [ -n "$mine" ] || die "no free node slot under $slots (owners: $(cat "$slots"/*/owner | tr '\n' ' '))"
  n=$mine
  net_vars "$n"
  cat >"$net_env" <<ENV
SLOT=$SLOT
NETNS=$NETNS
HOST_VETH=$HOST_VETH
HOST_IP=$HOST_IP
NODE_IP=$NODE_IP
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
SERVICE_IP=$SERVICE_IP
ENV
  log "slot $n: netns $NETNS, node $NODE_IP, pods $POD_CIDR, Services $SERVICE_CIDR"
}

load_net() {
  [ -f "$net_env" ] || return 1
  # shellcheck disable=SC1090
  . "$net_env"
}

# in_netns CMD...: CMD in the node's network namespace (only that: same mounts, same cgroups).
in_netns() { nsenter --net="/run/netns/$NETNS" -- "$@"; }

running() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

# start NAME CMD...: runs CMD in the node's netns in the background, its log in $dir/logs/NAME.log.
# In a session of its own, as the control plane's processes are: a Ctrl-C in the terminal that
# started it (`make run`'s) reaches the script, whose teardown stops the node, not the node's
# processes in the middle of it.
start() {
  local name=$1; shift
  running "$name" && return
  # exec: the pid file names the program itself, not a subshell (setsid execs nsenter without a
  # fork, as a background subshell of a script leads no process group; nsenter execs CMD).
  (exec setsid nsenter --net="/run/netns/$NETNS" -- "$@") >"$dir/logs/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}

preflight() {
  [ "$(id -u)" = 0 ] || die "a real node needs root (netns, containerd, runc, CNI, iptables)"
  local missing=()
  for c in containerd ctr runc iptables ip nsenter; do command -v "$c" >/dev/null || missing+=("$c"); done
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]}: apt-get install containerd runc containernetworking-plugins iptables iproute2 util-linux"
  for c in kubelet kube-proxy; do
    [ -x "$bin/$c" ] || die "$bin/$c is not built: hack/build-control-plane.sh kubernetes"
  done
  [ -f "$kubeconfig" ] || die "no cluster: hack/cluster.sh up first"
  load_net || die "the cluster in $state was started without a node network ($net_env):" \
    "hack/cluster.sh down, then hack/cluster.sh up as root (KUBESTEER_REAL_NODE=1)"
  local range
  range=$("${kubectl[@]}" get service kubernetes -n default -o jsonpath='{.spec.clusterIP}')
  [ "$range" = "$SERVICE_IP" ] ||
    die "the cluster's kubernetes Service is $range, not $SERVICE_IP of $net_env: hack/cluster.sh down && up"
}

# The netns, its veth pair, its addresses and the host's routes into it.
network() {
  if ! ip netns pids "$NETNS" >/dev/null 2>&1; then
    ip netns add "$NETNS"
  fi
  if ! ip link show "$HOST_VETH" >/dev/null 2>&1; then
    ip link add "$HOST_VETH" type veth peer name eth0 netns "$NETNS"
    ip addr add "$HOST_IP/30" dev "$HOST_VETH"
    ip link set "$HOST_VETH" up
    in_netns ip addr add "$NODE_IP/30" dev eth0
    in_netns ip link set eth0 up
    in_netns ip link set lo up
    in_netns ip route add default via "$HOST_IP"
  fi
  ip route replace "$POD_CIDR" via "$NODE_IP" dev "$HOST_VETH"
  ip route replace "$SERVICE_CIDR" via "$NODE_IP" dev "$HOST_VETH"
  # Forwarding between the veth and the pods' bridge, inside the netns only.
  in_netns sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
}

# The apiserver as the node reaches it: its advertised address (the host's), not 127.0.0.1, which
# inside the netns is the netns's own loopback.
node_kubeconfig() {
  local addr port
  addr=$("${kubectl[@]}" get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[0].endpoints[0].addresses[0]}')
  port=$("${kubectl[@]}" get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[0].ports[0].port}')
  [ -n "$addr" ] && [ -n "$port" ] || die "the kubernetes Service has no endpoint"
  cp "$kubeconfig" "$dir/kubeconfig"
  "$bin/kubectl" --kubeconfig "$dir/kubeconfig" config set-cluster \
    "$("$bin/kubectl" --kubeconfig "$dir/kubeconfig" config view -o jsonpath='{.clusters[0].name}')" \
    --server "https://$addr:$port" >/dev/null
  client_ca=$(find "$state/kwok" -name ca.crt -path '*pki*' | head -n1)
  [ -n "$client_ca" ] || die "no cluster CA under $state/kwok"
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
  # Pulls from the cluster's registry (hack/registry.sh, on the host's side of this node's veth)
  # trust its CA.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$dir/certs.d"
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
  local registry=$HOST_IP:${KUBESTEER_REGISTRY_PORT:-5000}
  mkdir -p "$dir/certs.d/$registry"
  cat >"$dir/certs.d/$registry/hosts.toml" <<TOML
server = "https://$registry"
[host."https://$registry"]
  capabilities = ["pull", "resolve"]
  ca = "$state/registry/ca/ca.crt"
TOML
  # No ipMasq and no portmap: the plugins then add no iptables rules of their own. The bridge
  # lives in the node's netns, so every node can call it kubesteer0.
  cat >"$dir/cni/net.d/10-kubesteer.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "kubesteer",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "kubesteer0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
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
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
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

up() {
  preflight
  mkdir -p "$dir/logs"
  network
  node_kubeconfig
  write_configs
  start containerd containerd --config "$dir/containerd.toml"
  wait_for containerd 30 "${ctr[@]}" version || die "containerd not ready after 30s; logs in $dir/logs"
  if ! "${ctr[@]}" images ls -q | grep -qx "$pause_image"; then
    local archive=${KUBESTEER_PAUSE_ARCHIVE:-$state/pause.tar}
    [ -f "$archive" ] || "$root/hack/image.sh" pause "$pause_image" "$archive"
    load "$archive"
  fi
  start kubelet "$bin/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubeconfig" \
    --root-dir "$dir/kubelet" --hostname-override "$node" --node-ip "$NODE_IP" \
    --node-labels "$taint_key=true"
  start kube-proxy "$bin/kube-proxy" --kubeconfig "$dir/kubeconfig" --hostname-override "$node" \
    --proxy-mode iptables --cluster-cidr "$POD_CIDR" --masquerade-all \
    --conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 \
    --conntrack-tcp-timeout-close-wait 0 --iptables-localhost-nodeports=false \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249
  wait_for "node $node Ready" 90 "${kubectl[@]}" wait --for=condition=Ready "node/$node" --timeout=2s ||
    die "node $node not Ready after 90s; logs in $dir/logs"
  log "node $node Ready ($NODE_IP in netns $NETNS, pods in $POD_CIDR, Services in $SERVICE_CIDR; logs in $dir/logs)"
}

# load FILE: imports a docker-archive into the node's image store (the kubelet's k8s.io namespace).
load() {
  running containerd || die "the node's containerd is not running: hack/node.sh up"
  "${ctr[@]}" images import "$1" >/dev/null
  log "loaded $1"
}

stop() { stop_pid_file "$dir/$1.pid" 10; } # NAME: TERM, then KILL after 10 s

down() {
  local containers=""
  load_net || { rm -rf "$dir"; return 0; }
  if [ -d "$dir" ]; then
    stop kubelet
    # Containers first, while containerd still answers; then their shims (found by this node's socket).
    if running containerd; then
      containers=$("${ctr[@]}" containers ls -q 2>/dev/null || true)
      for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
        "${ctr[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
      done
    fi
    # The tasks' state too, in case containerd was already gone.
    containers+=" $(ls "$dir/containerd/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null || true)"
    pkill -9 -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null || true
    stop containerd
    stop kube-proxy
  fi
  # Every process still in the netns (none, normally) goes with it; its iptables rules, the
  # bridge and the veth pair go with the netns itself, the host's routes with the veth.
  local p
  for p in $(ip netns pids "$NETNS" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "$NETNS" 2>/dev/null || true
  ip link del "$HOST_VETH" 2>/dev/null || true
  # Network namespaces and overlay mounts of killed pods, deepest first.
  { grep -F " $dir/" /proc/mounts || true; } | awk '{print $2}' | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  # The cgroups of this node's containers (runc names them /k8s.io/<container id>: one path per
  # container, apart from every other node's) that the killed shims could not remove.
  local c id
  for id in $(echo "$containers" | tr ' ' '\n' | sort -u); do
    # A process that outlived its shim still sits in its container's cgroup.
    local procs=/sys/fs/cgroup/pids/k8s.io/$id/cgroup.procs
    for p in $(cat "$procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    for _ in $(seq 1 50); do [ -z "$(cat "$procs" 2>/dev/null)" ] && break; sleep 0.1; done
    for c in /sys/fs/cgroup/*/k8s.io/"$id"; do [ -d "$c" ] && rmdir "$c" 2>/dev/null || true; done
  done
  [ -f "$kubeconfig" ] && "${kubectl[@]}" delete node "$node" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rm -rf "$dir"
  log "node $node removed (netns $NETNS)"
}

# release: down, then the slot is free for another cluster.
release() {
  down
  if load_net; then
    if [ "$(cat "$slots/$SLOT/owner" 2>/dev/null)" = "$state" ]; then rm -rf "${slots:?}/$SLOT"; fi
    rm -f "$net_env"
  fi
}

case ${1:-} in
  claim) claim ;;
  up) up ;;
  down) down ;;
  release) release ;;
  load) [ -n "${2:-}" ] || die "usage: $0 load ARCHIVE"; load "$2" ;;
  status) running containerd && running kubelet ;;
  *) echo "usage: $0 claim|up|down|release|load ARCHIVE|status" >&2; exit 2 ;;
esac
