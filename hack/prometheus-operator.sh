#!/usr/bin/env bash
# The Prometheus Operator (github.com/prometheus-operator/prometheus-operator at
# PROMETHEUS_OPERATOR_VERSION of versions.env) and the Prometheus it runs (the binary
# `hack/build-control-plane.sh monitoring` builds), for the e2e tests of the chart's
# ServiceMonitors, PrometheusRule and dashboard.
#   hack/prometheus-operator.sh             build the operator and its config reloader from the Go
#                                           module proxy, statically, into a cache outside the
#                                           repository, with the operator's CRDs and RBAC; print
#                                           the operator's path. Cached binaries are never
#                                           rebuilt: the first run takes 5-10 min on 2 cores.
#   hack/prometheus-operator.sh image DIR   the images kubesteer-prometheus-operator:VERSION,
#                                           kubesteer-prometheus-config-reloader:VERSION and
#                                           kubesteer-prometheus:PROMETHEUS FROM scratch,
#                                           docker-archives in DIR for `hack/node.sh load`
#                                           (printed, one a line).
#   hack/prometheus-operator.sh deploy      with KUBECONFIG set: the CRDs, namespace monitoring,
#                                           the operator's ServiceAccount and ClusterRole as it
#                                           ships them, Prometheus' too (ServiceAccount
#                                           prometheus), and the operator on the real node (load
#                                           the images there first); waits until it runs.
#                                           Safe to re-run.
# A test then makes its own Prometheus object in namespace monitoring, with
# PROMETHEUS_IMAGE as its image (printed by `hack/prometheus-operator.sh prometheus-image`).
. "$(dirname "$0")/lib.sh"
v=$PROMETHEUS_OPERATOR_VERSION
dir=$cache/prometheus-operator-$v
src=$cache/src/prometheus-operator-$v
ns=monitoring
module=github.com/prometheus-operator/prometheus-operator
# Prometheus 3.MM.P is the Go module version v0.3MM.P (as in build-control-plane.sh).
minor=${PROMTOOL_VERSION#v0.}
prometheus_version="v3.$((10#${minor:1:2})).${minor#*.}"
prometheus_image=kubesteer-prometheus:$prometheus_version

# build: the two binaries, the CRDs and the RBAC in $dir (nothing to do when cached).
build() {
  if [ -x "$dir/bin/operator" ] && [ -x "$dir/bin/prometheus-config-reloader" ] &&
    [ -s "$dir/rbac/prometheus-operator-cluster-role.yaml" ]; then
    log "prometheus-operator $v: cached"
    return
  fi
  local moddir
  moddir=$(go_module_dir "$module" "$v")
  mkdir -p "$dir/bin" "$dir/crds" "$dir/rbac" "$src"
  if [ ! -x "$dir/bin/operator" ] || [ ! -x "$dir/bin/prometheus-config-reloader" ]; then
    log "prometheus-operator $v: building the operator and its config reloader (a while the first time)"
    # Its go.mod replaces pkg/apis/monitoring and pkg/client with folders of the repository,
    # which are modules of their own (released at the same version), not in its module zip: a
    # wrapper module requiring it resolves them from the proxy.
    cat >"$src/go.mod" <<GOMOD
module kubesteer.local/prometheus-operator

$(grep -m1 '^go ' "$moddir/go.mod")

require $module $v
GOMOD
    cat >"$src/tools.go" <<GO
//go:build tools

package tools

import (
	_ "$module/cmd/operator"
	_ "$module/cmd/prometheus-config-reloader"
)
GO
    rm -rf "$dir/bin.tmp"
    (cd "$src" && go mod tidy && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=${v#v}" \
      -o "$dir/bin.tmp/" "$module/cmd/operator" "$module/cmd/prometheus-config-reloader")
    mv "$dir/bin.tmp"/* "$dir/bin/"
    rmdir "$dir/bin.tmp"
  fi
  install -m 0644 "$moddir"/example/prometheus-operator-crd/*.yaml "$dir/crds/"
  # The ServiceAccounts, ClusterRoles and bindings of the operator and of Prometheus as the
  # project ships them, in namespace monitoring instead of default.
  local f
  for f in "$moddir"/example/rbac/prometheus-operator/prometheus-operator-{service-account,cluster-role,cluster-role-binding}.yaml \
    "$moddir"/example/rbac/prometheus/prometheus-{service-account,cluster-role,cluster-role-binding}.yaml; do
    sed "s/namespace: default/namespace: $ns/" "$f" >"$dir/rbac/$(basename "$f")"
  done
}

# image DIR: the operator, the config reloader and Prometheus, each FROM scratch, run as nobody
# as their own images are; the archives' paths, one a line.
build_image() {
  local out=${1:-}
  [ -n "$out" ] || die "usage: hack/prometheus-operator.sh image DIR"
  build
  [ -x "$bin/prometheus" ] || die "$bin/prometheus is missing: hack/build-control-plane.sh monitoring"
  local about="built from the Go module proxy for kubesteer's e2e tests"
  scratch_image "kubesteer-prometheus-operator:$v" "$out/prometheus-operator.tar" 65534:65534 \
    "https://$module" "The Prometheus Operator $v, $about" "$dir/bin/operator:/bin/operator"
  scratch_image "kubesteer-prometheus-config-reloader:$v" "$out/prometheus-config-reloader.tar" \
    65534:65534 "https://$module" "The Prometheus Operator's config reloader $v, $about" \
    "$dir/bin/prometheus-config-reloader:/bin/prometheus-config-reloader"
  scratch_image "$prometheus_image" "$out/prometheus.tar" 65534:65534 \
    https://github.com/prometheus/prometheus "Prometheus $prometheus_version, $about" \
    "$bin/prometheus:/bin/prometheus"
}

# deploy: the CRDs, the RBAC and the operator's Deployment on the real node; waits until it is
# available.
deploy() {
  [ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG is not set"
  local kubectl=("${KUBECTL:-$bin/kubectl}") start=$SECONDS
  build
  apply_crds "$dir/crds" "${kubectl[@]}"
  "${kubectl[@]}" create namespace "$ns" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
  "${kubectl[@]}" apply -n "$ns" -f "$dir/rbac" >/dev/null
  "${kubectl[@]}" apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: prometheus-operator
  namespace: $ns
  labels:
    app.kubernetes.io/component: controller
    app.kubernetes.io/name: prometheus-operator
    app.kubernetes.io/version: ${v#v}
spec:
  replicas: 1
  selector:
    matchLabels:
      app.kubernetes.io/component: controller
      app.kubernetes.io/name: prometheus-operator
  template:
    metadata:
      labels:
        app.kubernetes.io/component: controller
        app.kubernetes.io/name: prometheus-operator
      annotations:
        kubesteer.io/operator-binary: "$(sha256sum "$dir/bin/operator" | cut -c1-16)"
    spec:
      serviceAccountName: prometheus-operator
      # Its ServiceAccount opts out of automounting, as shipped; the pod opts in.
      automountServiceAccountToken: true
$(real_node_placement 6)
      securityContext:
        runAsNonRoot: true
        runAsUser: 65534
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: prometheus-operator
          image: kubesteer-prometheus-operator:$v
          imagePullPolicy: Never
          args:
            - --prometheus-config-reloader=kubesteer-prometheus-config-reloader:$v
            - --log-level=info
          env:
            - {name: GOGC, value: "30"}
          ports:
            - {name: http, containerPort: 8080}
          readinessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 2
          resources:
            requests: {cpu: 50m, memory: 64Mi}
            limits: {memory: 300Mi}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
YAML
  local timeout=${PROMETHEUS_OPERATOR_DEPLOY_TIMEOUT:-180}
  if ! "${kubectl[@]}" rollout status deployment/prometheus-operator -n "$ns" --timeout="${timeout}s" >/dev/null; then
    "${kubectl[@]}" get pods -n "$ns" -o wide >&2 || true
    "${kubectl[@]}" logs -n "$ns" deployment/prometheus-operator --tail=100 >&2 || true
    die "the Prometheus Operator did not become available within ${timeout}s"
  fi
  log "prometheus-operator $v running in namespace $ns ($((SECONDS - start))s)"
}

case ${1:-} in
  "") build; echo "$dir/bin/operator" ;;
  image) shift; build_image "$@" ;;
  deploy) deploy ;;
  prometheus-image) echo "$prometheus_image" ;;
  -h | --help | help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
