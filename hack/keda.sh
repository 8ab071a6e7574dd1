#!/usr/bin/env bash
# The real KEDA operator (github.com/kedacore/keda/v2/cmd/operator) at KEDA_VERSION, for e2e tests.
#   hack/keda.sh               build it from the Go module proxy, statically, into a cache outside the
#                              repository, and copy KEDA's CRDs and RBAC next to it; print the
#                              binary's path, then the ScaledObject CRD's. A cached binary is never
#                              rebuilt: the first run takes 8-17 min on 2 cores (about 300 modules,
#                              cold Go build cache), then it is instant.
#   hack/keda.sh image DIR     the image kubesteer-keda:KEDA_VERSION, FROM scratch with that binary
#                              (buildah, nothing pulled), as a docker-archive in DIR for
#                              `hack/node.sh load`; prints its path. Kept while newer than the binary.
#   hack/keda.sh deploy        with KUBECONFIG set: KEDA's six CRDs, namespace keda, KEDA's own
#                              ClusterRole and Role for a ServiceAccount, a self-signed cert pair,
#                              and a Deployment of the operator on the cluster's real node
#                              (hack/node.sh; load the image there first); waits until it started
#                              its controllers. Safe to re-run.
# The operator starts controllers for all six KEDA kinds, so apply the whole CRD directory
# (kubectl apply --server-side -f <dir>), not only the ScaledObject CRD. To run it outside a pod it
# needs WATCH_NAMESPACE set (empty = all namespaces), KEDA_CLUSTER_OBJECT_NAMESPACE, and a
# --cert-dir holding ca.crt, tls.crt and tls.key for its gRPC metrics service even when
# --enable-cert-rotation is off (its default). This binary has no admission webhooks and no
# metrics apiserver: KEDA makes and deletes HPAs and scales targets, but HPAs find no external
# metrics.
. "$(dirname "$0")/lib.sh"
KEDA_VERSION=v2.21.0

bin="$cache/bin/keda-operator-$KEDA_VERSION"
crds="$cache/crds/keda-$KEDA_VERSION"
rbac="$cache/rbac/keda-$KEDA_VERSION"
src="$cache/src/keda-$KEDA_VERSION"
image=${KEDA_IMAGE:-kubesteer-keda:$KEDA_VERSION}
# The namespace KEDA runs in: KEDA's own RBAC (config/rbac/role.yaml) names it.
ns=keda

# build: the operator binary, its CRDs and its RBAC in the cache (nothing to do when cached).
build() {
  if [ -x "$bin" ] && [ -s "$crds/keda.sh_scaledobjects.yaml" ] && [ -s "$rbac/role.yaml" ]; then
    log "operator $KEDA_VERSION: cached"
    return
  fi

  mkdir -p "$cache/bin" "$crds" "$rbac" "$src"
  export CGO_ENABLED=0

  # The module's own go.mod, source, CRDs and RBAC (read-only, in the module cache).
  local moddir
  moddir=$(go_module_dir github.com/kedacore/keda/v2 "$KEDA_VERSION")

  if [ -x "$bin" ]; then
    log "operator $KEDA_VERSION: cached"
  else
    log "operator $KEDA_VERSION: building (takes a while the first time)"
    # A wrapper module requiring KEDA resolves the same versions as KEDA's go.mod (minimal version
    # selection); replace directives only count in the main module, so KEDA's are copied over.
    {
      echo "module kubesteer.local/keda"
      echo
      grep -m1 '^go ' "$moddir/go.mod"
      echo
      echo "require github.com/kedacore/keda/v2 $KEDA_VERSION"
      echo
      awk '/^replace \(/{inblock=1; next} inblock && /^\)/{inblock=0; next}
           inblock && NF && $1 !~ /^\/\// {print "replace " $0; next} /^replace [^(]/{print}' "$moddir/go.mod" |
        sed 's/^replace[[:space:]]\+/replace /'
    } >"$src/go.mod"
    cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/kedacore/keda/v2/cmd/operator"
GO
    (cd "$src" && go mod tidy)
    (cd "$src" && go build -trimpath -ldflags "-s -w -X github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}" \
      -o "$bin.tmp" github.com/kedacore/keda/v2/cmd/operator)
    mv "$bin.tmp" "$bin"
  fi

  install -m 0644 "$moddir"/config/crd/bases/*.yaml "$crds/"
  # The ClusterRole keda-operator and the Role keda-operator of namespace keda, as KEDA ships them.
  install -m 0644 "$moddir/config/rbac/role.yaml" "$rbac/role.yaml"
}

# image DIR: the operator FROM scratch as $image, a docker-archive in DIR (printed).
build_image() {
  local dir=${1:-}
  [ -n "$dir" ] || die "usage: hack/keda.sh image DIR"
  build
  # KEDA's own image runs /keda as 65532 (distroless nonroot).
  scratch_image "$image" "$dir/keda-image.tar" 65532:65532 https://github.com/kedacore/keda \
    "KEDA's operator $KEDA_VERSION, built from the Go module proxy for kubesteer's e2e tests" \
    "$bin:/keda"
}

# deploy: KEDA on the cluster of $KUBECONFIG, its pod on the real node; waits until the operator
# started its ScaledObject controller. Safe to re-run (the cert pair is made once).
deploy() {
  [ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG is not set"
  local kubectl=("${KUBECTL:-$cache/bin/kubectl}")
  build
  local start=$SECONDS
  apply_crds "$crds" "${kubectl[@]}"
  "${kubectl[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
YAML
  "${kubectl[@]}" apply -f "$rbac/role.yaml" >/dev/null
  "${kubectl[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ServiceAccount
metadata:
  name: keda-operator
  namespace: $ns
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: keda-operator
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: keda-operator
subjects:
  - kind: ServiceAccount
    name: keda-operator
    namespace: $ns
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: keda-operator
  namespace: $ns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: keda-operator
subjects:
  - kind: ServiceAccount
    name: keda-operator
    namespace: $ns
YAML

  # The gRPC metrics service loads /certs/{ca.crt,tls.crt,tls.key} even with cert rotation off:
  # one self-signed pair, its own CA. Nothing dials that service here (no metrics apiserver).
  if ! "${kubectl[@]}" get secret kedaorg-certs -n "$ns" >/dev/null 2>&1; then
    local tmp
    tmp=$(mktemp -d)
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=keda-operator.$ns.svc" \
      -addext "subjectAltName=DNS:keda-operator,DNS:keda-operator.$ns,DNS:keda-operator.$ns.svc,DNS:keda-operator.$ns.svc.cluster.local" \
      -keyout "$tmp/tls.key" -out "$tmp/tls.crt" 2>/dev/null || { rm -rf "$tmp"; die "openssl failed"; }
    cp "$tmp/tls.crt" "$tmp/ca.crt"
    "${kubectl[@]}" create secret generic kedaorg-certs -n "$ns" \
      --from-file="$tmp/ca.crt" --from-file="$tmp/tls.crt" --from-file="$tmp/tls.key" >/dev/null
    rm -rf "$tmp"
  fi

  # The binary's digest on the pod template: a rebuilt binary (same tag) rolls the pod.
  local digest
  digest=$(sha256sum "$bin" | cut -c1-16)
  "${kubectl[@]}" apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: keda-operator
  namespace: $ns
  labels:
    app: keda-operator
    app.kubernetes.io/name: keda-operator
    app.kubernetes.io/version: ${KEDA_VERSION#v}
    app.kubernetes.io/component: operator
    app.kubernetes.io/part-of: keda-operator
spec:
  replicas: 1
  # One operator at a time, without leader election.
  strategy:
    type: Recreate
  selector:
    matchLabels:
      app: keda-operator
  template:
    metadata:
      labels:
        app: keda-operator
        name: keda-operator
      annotations:
        kubesteer.io/keda-binary: "$digest"
    spec:
      serviceAccountName: keda-operator
$(real_node_placement 6)
      securityContext:
        runAsNonRoot: true
      terminationGracePeriodSeconds: 10
      containers:
        - name: keda-operator
          image: $image
          imagePullPolicy: Never
          args:
            - --zap-log-level=info
            - --zap-encoder=console
            - --zap-time-encoding=rfc3339
            - --enable-cert-rotation=false
            - --enable-webhook-patching=false
            - --enable-apiservice-patching=false
            - --cert-dir=/certs
            - --metrics-bind-address=:8080
            - --health-probe-bind-address=:8081
          env:
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: WATCH_NAMESPACE
              value: ""
            - name: KEDA_CLUSTER_OBJECT_NAMESPACE
              value: $ns
          ports:
            - {name: http, containerPort: 8080, protocol: TCP}
            - {name: probes, containerPort: 8081, protocol: TCP}
            - {name: metricsservice, containerPort: 9666, protocol: TCP}
          readinessProbe:
            httpGet: {path: /readyz, port: 8081}
            periodSeconds: 2
          livenessProbe:
            httpGet: {path: /healthz, port: 8081}
            initialDelaySeconds: 25
          resources:
            requests: {cpu: 50m, memory: 64Mi}
            limits: {memory: 1000Mi}
          securityContext:
            runAsUser: 65532
            runAsGroup: 65532
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities:
              drop: [ALL]
            seccompProfile:
              type: RuntimeDefault
          volumeMounts:
            - {name: certificates, mountPath: /certs, readOnly: true}
      volumes:
        - name: certificates
          secret:
            secretName: kedaorg-certs
YAML

  local timeout=${KEDA_DEPLOY_TIMEOUT:-180}
  log "waiting up to ${timeout}s for the operator to start its controllers"
  if ! "${kubectl[@]}" rollout status deployment/keda-operator -n "$ns" --timeout="${timeout}s" >/dev/null 2>&1 ||
    ! started "$((start + timeout))"; then
    "${kubectl[@]}" get pods -n "$ns" -o wide >&2 || true
    "${kubectl[@]}" describe pods -n "$ns" -l app=keda-operator >&2 || true
    "${kubectl[@]}" logs -n "$ns" deployment/keda-operator --tail=100 >&2 || true
    die "the KEDA operator did not start within ${timeout}s"
  fi
  log "operator $KEDA_VERSION running in namespace $ns ($((SECONDS - start))s)"
}

# started DEADLINE: polls the pod's log until the ScaledObject controller's workers started.
started() {
  until "${kubectl[@]}" logs -n "$ns" deployment/keda-operator 2>/dev/null |
    grep 'Starting workers' | grep -q '"controller": "scaledobject"'; do
    [ "$SECONDS" -lt "$1" ] || return 1
    sleep 1
  done
}

case ${1:-} in
  "")
    build
    echo "$bin"
    echo "$crds/keda.sh_scaledobjects.yaml"
    ;;
  image) shift; build_image "$@" ;;
  deploy) deploy ;;
  -h | --help | help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
