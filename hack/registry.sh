#!/usr/bin/env bash
# The local cluster's container and chart registry: the CNCF distribution registry (pinned in
# versions.env, built by hack/build-control-plane.sh), on the host at the real node's side of
# its network (hack/node.sh: HOST_IP, port 5000), over TLS with a CA of its own, its storage under
# $KUBESTEER_STATE/registry. The node's containerd pulls from it (hack/node.sh trusts that CA for
# it), and helm installs the chart from it as oci://.
#   hack/registry.sh up              start it (or keep the running one); wait until it answers
#   hack/registry.sh down            stop it and delete its storage
#   hack/registry.sh address         print HOST:PORT
#   hack/registry.sh ca              print the path of its CA certificate
#   hack/registry.sh push-image IMG REPO:TAG   push IMG from the local containers storage
#   hack/registry.sh push-chart TGZ            push a packaged chart to oci://HOST:PORT/charts
. "$(dirname "$0")/lib.sh"
state=${KUBESTEER_STATE:-$root/.kubesteer}
state=$(mkdir -p "$state" && cd "$state" && pwd)
dir=$state/registry
port=${KUBESTEER_REGISTRY_PORT:-5000}

net() {
  [ -f "$state/net.env" ] || die "no node network in $state/net.env: the registry sits beside the real node (hack/cluster.sh up as root)"
  HOST_IP=$(sed -n 's/^HOST_IP=//p' "$state/net.env")
  [ -n "$HOST_IP" ] || die "no HOST_IP in $state/net.env"
  address=$HOST_IP:$port
}

running() { [ -f "$dir/registry.pid" ] && kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null; }
answers() { curl -sf --max-time 3 --cacert "$dir/ca/ca.crt" "https://$address/v2/" >/dev/null 2>&1; }

up() {
  net
  [ -x "$bin/registry" ] || die "no registry in $bin: make control-plane"
  if running && answers; then
    log "registry on https://$address (running)"
    return
  fi
  down_process
  mkdir -p "$dir/data" "$dir/certs" "$dir/ca"
  if [ ! -s "$dir/certs/tls.crt" ]; then
    (cd "$root" && cargo run -q -p kubesteer-certs --bin kubesteer-certs -- generate \
      --service registry --namespace kubesteer --ip "$HOST_IP" --dns localhost --out-dir "$dir/certs") >/dev/null
    # Only the CA, for the clients' certificate directories (a key there would be read as a
    # client certificate's).
    cp "$dir/certs/ca.crt" "$dir/ca/ca.crt"
  fi
  cat >"$dir/config.yml" <<YAML
version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: $dir/data}
  delete: {enabled: true}
http:
  addr: $address
  tls:
    certificate: $dir/certs/tls.crt
    key: $dir/certs/tls.key
YAML
  # In a session of its own, as the node's processes: a Ctrl-C reaches the script, whose
  # teardown stops it.
  (exec setsid "$bin/registry" serve "$dir/config.yml") >"$dir/registry.log" 2>&1 &
  echo $! >"$dir/registry.pid"
  wait_for "the registry on https://$address" 30 answers || {
    tail -n 20 "$dir/registry.log" >&2
    die "the registry did not answer on https://$address within 30s; log: $dir/registry.log"
  }
  log "registry on https://$address (CA $dir/ca/ca.crt, storage $dir/data)"
}

down_process() { stop_pid_file "$dir/registry.pid" 5; }

down() {
  down_process
  rm -rf "$dir"
}

push_image() {
  net
  local img=$1 ref=$2
  log "pushing $img to $address/$ref"
  buildah push --quiet --cert-dir "$dir/ca" "$img" "docker://$address/$ref" >/dev/null ||
    die "buildah push $img to $address/$ref failed"
}

push_chart() {
  net
  log "pushing $1 to oci://$address/charts"
  "$bin/helm" push "$1" "oci://$address/charts" --ca-file "$dir/ca/ca.crt" >/dev/null ||
    die "helm push $1 to oci://$address/charts failed"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  address) net; echo "$address" ;;
  ca) echo "$dir/ca/ca.crt" ;;
  push-image) [ $# = 3 ] || die "usage: $0 push-image IMG REPO:TAG"; push_image "$2" "$3" ;;
  push-chart) [ $# = 2 ] || die "usage: $0 push-chart TGZ"; push_chart "$2" ;;
  *) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
