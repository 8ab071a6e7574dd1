#!/usr/bin/env bash
# cert-manager (github.com/cert-manager/cert-manager at CERT_MANAGER_VERSION of versions.env), for
# the e2e tests of the chart's certManager mode. v1.11.5 is the last release whose controller,
# cainjector, webhook and cmctl are all in its main Go module.
#   hack/cert-manager.sh             build the four binaries from the Go module proxy, statically,
#                                    into a cache outside the repository, with cert-manager's CRDs
#                                    and its own Helm chart; print cmctl's path. Cached binaries are
#                                    never rebuilt: the first run takes 6-12 min on 2 cores.
#   hack/cert-manager.sh image DIR   the images kubesteer-cert-manager-{controller,cainjector,
#                                    webhook}:VERSION FROM scratch, docker-archives in DIR for
#                                    `hack/node.sh load` (printed, one a line).
#   hack/cert-manager.sh deploy      with KUBECONFIG set: the CRDs, and cert-manager's own chart in
#                                    namespace cert-manager with those images on the real node
#                                    (load them there first); waits until its API answers
#                                    (`cmctl check api`). Safe to re-run.
. "$(dirname "$0")/lib.sh"
v=$CERT_MANAGER_VERSION
dir=$cache/cert-manager-$v
src=$cache/src/cert-manager-$v
ns=cert-manager
components=(controller cainjector webhook)

# build: the binaries, the CRDs and the chart in $dir (nothing to do when cached).
build() {
  if [ -x "$dir/bin/cmctl" ] && [ -s "$dir/crds/crd-certificates.yaml" ] && [ -s "$dir/chart/Chart.yaml" ]; then
    log "cert-manager $v: cached"
    return
  fi
  local moddir
  moddir=$(go_module_dir github.com/cert-manager/cert-manager "$v")
  mkdir -p "$dir/bin" "$dir/crds"
  if [ ! -x "$dir/bin/cmctl" ]; then
    log "cert-manager $v: building controller, cainjector, webhook and cmctl (a while the first time)"
    # The module itself is the main module (its go.mod and go.sum as released), copied out of the
    # read-only module cache.
    rm -rf "$src"
    mkdir -p "$(dirname "$src")"
    cp -r "$moddir" "$src"
    chmod -R u+w "$src"
    rm -rf "$dir/bin.tmp"
    (cd "$src" && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$v" \
      -o "$dir/bin.tmp/" ./cmd/controller ./cmd/cainjector ./cmd/webhook ./cmd/ctl)
    mv "$dir/bin.tmp/ctl" "$dir/bin.tmp/cmctl"
    mv "$dir/bin.tmp"/* "$dir/bin/"
    rmdir "$dir/bin.tmp"
  fi
  # The CRDs carry the chart's label templates; rendered as the chart's release "cert-manager".
  local crd
  for crd in "$moddir"/deploy/crds/crd-*.yaml; do
    sed -e "s/{{ template \"cert-manager.name\" . }}/cert-manager/g" \
      -e "s/{{ .Release.Name }}/cert-manager/g" -e '/{{/d' "$crd" >"$dir/crds/$(basename "$crd")"
  done
  # The chart as released: its Chart.yaml from the template, with the version filled in.
  rm -rf "$dir/chart"
  cp -r "$moddir/deploy/charts/cert-manager" "$dir/chart"
  chmod -R u+w "$dir/chart"
  sed -e "s/^version: .*/version: $v/" -e "s/^appVersion: .*/appVersion: $v/" \
    -e 's/"{{IS_PRERELEASE}}"/"false"/' "$dir/chart/Chart.template.yaml" >"$dir/chart/Chart.yaml"
  rm -f "$dir/chart/Chart.template.yaml" "$dir/chart/README.template.md"
}

# image DIR: one image per component, each its binary FROM scratch, run as 1000 as the chart asks
# (runAsNonRoot); the archives' paths, one a line.
build_image() {
  local out=${1:-} c
  [ -n "$out" ] || die "usage: hack/cert-manager.sh image DIR"
  build
  for c in "${components[@]}"; do
    scratch_image "kubesteer-cert-manager-$c:$v" "$out/cert-manager-$c.tar" 1000:1000 \
      https://github.com/cert-manager/cert-manager \
      "cert-manager's $c $v, built from the Go module proxy for kubesteer's e2e tests" \
      "$dir/bin/$c:/app/cmd/$c/$c"
  done
}

# deploy: the CRDs and cert-manager's chart, its three pods on the real node; waits until its
# webhook admits a Certificate (cmctl check api).
deploy() {
  [ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG is not set"
  local kubectl=("${KUBECTL:-$bin/kubectl}") start=$SECONDS
  build
  apply_crds "$dir/crds" "${kubectl[@]}"
  local values
  values=$(mktemp)
  # shellcheck disable=SC2064
  trap "rm -f '$values'" RETURN
  {
    echo "installCRDs: false"
    echo "image: {repository: kubesteer-cert-manager-controller, tag: $v, pullPolicy: Never}"
    for c in webhook cainjector; do
      echo "$c:"
      echo "  image: {repository: kubesteer-cert-manager-$c, tag: $v, pullPolicy: Never}"
      echo "  nodeSelector: {kubesteer.io/real-node: \"true\"}"
      echo "  tolerations: [{key: kubesteer.io/real-node, operator: Exists, effect: NoSchedule}]"
    done
    echo "nodeSelector: {kubesteer.io/real-node: \"true\"}"
    echo "tolerations: [{key: kubesteer.io/real-node, operator: Exists, effect: NoSchedule}]"
    # Its post-install Job needs the ctl image; `cmctl check api` below does the same from here.
    echo "startupapicheck: {enabled: false}"
  } >"$values"
  "${HELM:-$bin/helm}" upgrade --install cert-manager "$dir/chart" -n "$ns" --create-namespace \
    -f "$values" --wait --timeout 180s >/dev/null ||
    { "${kubectl[@]}" get pods -n "$ns" -o wide >&2 || true; die "cert-manager's chart did not become ready"; }
  "$dir/bin/cmctl" check api --wait=2m >/dev/null ||
    { "${kubectl[@]}" logs -n "$ns" deployment/cert-manager-webhook --tail=50 >&2 || true; die "cert-manager's API did not answer"; }
  log "cert-manager $v running in namespace $ns ($((SECONDS - start))s)"
}

case ${1:-} in
  "") build; echo "$dir/bin/cmctl" ;;
  image) shift; build_image "$@" ;;
  deploy) deploy ;;
  -h | --help | help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
