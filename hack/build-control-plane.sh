#!/usr/bin/env bash
# Builds the local control plane from the Go module proxy at the pins in versions.env,
# into a cache outside the repository (like setup-envtest). Skips whatever is already built.
. "$(dirname "$0")/lib.sh"
tag=control-plane
# shellcheck source=../versions.env
mkdir -p "$bin"
export GOFLAGS=${GOFLAGS:--trimpath}
export CGO_ENABLED=0

# A binary counts as built when its stamp file names the pinned version.
built() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" >"$bin/.$1.version"; }

build_kubernetes() {
  local v=$K8S_VERSION todo=()
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
    built "$c" "$v" || todo+=("$c")
  done
  [ ${#todo[@]} -eq 0 ] && { log "kubernetes $v: cached"; return; }
  log "kubernetes $v: building ${todo[*]}"
  local src="$cache/src/kubernetes-$v" minor=${v#v1.}
  local staging_v="v0.$minor"
  mkdir -p "$src"
  # The published go.mod points its staging modules at ./staging; map each to its tagged v0.N.M.
  local gomod
  gomod=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module kubesteer.local/controlplane"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes $v"
    echo
    grep -E '^\s*k8s\.io/[^ ]+ => \./staging/src/k8s\.io/' "$gomod" |
      awk -v sv="$staging_v" '{print "replace " $1 " => " $1 " " sv}'
  } >"$src/go.mod"
  cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
  (cd "$src" && go mod tidy)
  local date major commit ld=""
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  major=1
  commit=$(printf '%s' "$v" | sha1sum | cut -c1-40)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=${minor%%.*}"
    ld+=" -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  # One go build for all of them: it links one while it compiles the next.
  log "go build ${todo[*]}"
  (cd "$src" && go build -tags tools -ldflags "-s -w$ld" -o "$bin/" "${todo[@]/#/k8s.io/kubernetes/cmd/}")
  for c in "${todo[@]}"; do stamp "$c" "$v"; done
}

go_install() { # name version module-path
  built "$1" "$2" && { log "$1 $2: cached"; return; }
  log "$1 $2: go install $3@$2"
  GOBIN="$bin" go install -ldflags "-s -w" "$3@$2"
  stamp "$1" "$2"
}

build_etcd() {
  local v=$ETCD_VERSION
  built etcd "$v" && { log "etcd $v: cached"; return; }
  log "etcd $v: building"
  # etcd's own go.mod uses local replaces, so it is built from a wrapper module that requires it.
  local src="$cache/src/etcd-$v"
  mkdir -p "$src"
  cat >"$src/go.mod" <<GOMOD
module kubesteer.local/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $v
GOMOD
  cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  (cd "$src" && go mod tidy && go build -tags tools -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
  stamp etcd "$v"
}

# promtool, and Prometheus itself (the e2e tests scrape the chart's pods with it and run the
# dashboard's queries against what it stored), from the one pinned module.
build_prometheus_command() {
  local name=$1 v=$PROMTOOL_VERSION
  built "$name" "$v" && { log "$name $v: cached"; return; }
  # Prometheus 3.MM.P is the Go module version v0.3MM.P; --version shows the former.
  local minor=${v#v0.} release
  release="3.$((10#${minor:1:2})).${minor#*.}"
  log "$name $v (Prometheus $release): go install"
  GOBIN="$bin" go install \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
    "github.com/prometheus/prometheus/cmd/$name@$v"
  stamp "$name" "$v"
}

fetch_monitoring_crds() {
  local v=$PROMETHEUS_OPERATOR_VERSION dir="$cache/crds/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
  local crds=(monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml)
  [ -s "$dir/${crds[0]}" ] && [ -s "$dir/${crds[1]}" ] && { log "prometheus-operator CRDs $v: cached"; return; }
  log "prometheus-operator CRDs $v: go mod download"
  local src
  src=$(cd "$cache" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$v" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$dir"
  for crd in "${crds[@]}"; do
    install -m 0644 "$src/example/prometheus-operator-crd/$crd" "$dir/$crd"
  done
}

what=${1:-all}
case $what in
  all)
    build_etcd
    go_install kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
    go_install kwokctl "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwokctl
    go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
    go_install registry "$DISTRIBUTION_VERSION" github.com/distribution/distribution/v3/cmd/registry
    build_kubernetes
    ;;
  etcd) build_etcd ;;
  # Only the tests need these (make e2e): `make run` does without the minutes they take.
  monitoring) build_prometheus_command promtool; build_prometheus_command prometheus; fetch_monitoring_crds ;;
  kubernetes) build_kubernetes ;;
  # Only the release's tests need it: `kubectl krew install` of the built plugin archive.
  krew) go_install krew "$KREW_VERSION" sigs.k8s.io/krew/cmd/krew ;;
  *) echo "usage: $0 [all|etcd|kubernetes|monitoring|krew]" >&2; exit 2 ;;
esac
log "binaries in $bin"
