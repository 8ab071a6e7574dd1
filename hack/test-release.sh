#!/usr/bin/env bash
# `make test`'s check of a release as a platform team adopts it, on a cluster of its own
# (kubesteer-release, .kubesteer/release/) whose only node is its real one, with its registry:
#   1. `make release` of the workspace version into $KUBESTEER_STATE/dist, the image named for
#      the cluster's registry; `sha256sum -c SHA256SUMS` there, as the README prints it;
#      `helm lint --strict` of the packaged chart; the plugin archive's binary is that version.
#   2. `kubectl krew install --manifest=kubesteer.krew.yaml --archive=...` (krew built from the Go
#      module proxy): krew checks the archive's sha256 against the manifest's, and the installed
#      `kubectl kubesteer --version` is the release.
#   3. Without Helm, as the README says: the OCI archive copied to the registry (skopeo), then
#      `kubectl apply --server-side -f kubesteer.yaml` on the empty cluster: the node pulls the
#      image, the webhook and controller turn Ready, a Memcached is defaulted by the webhook and
#      gets its Deployment from the controller.
#   4. The uninstall in the order docs/upgrading.md gives, with a Scaler holding its target at
#      another replica count: the Scalers deleted first give the target back, then `kubectl
#      delete -f kubesteer.yaml` and the Scaler's namespace finish, nothing left with a finalizer.
#   5. The upgrade from the previous release (versions.env, built by hack/previous-release.sh)
#      under traffic, installed from the registry: tests/src/bin/upgrade.rs.
# Each wait has a deadline and names what it waited for.
. "$(dirname "$0")/lib.sh"
cd "$root"
own_cluster "${KUBESTEER_RELEASE_CLUSTER:-kubesteer-release}" "${KUBESTEER_RELEASE_STATE:-$root/.kubesteer/release}"
tag=test-release
fail() { printf '[test-release] FAILED: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { log "skipped: the release's install needs the real node (root)"; exit 0; }
trap 'hack/cluster.sh down >/dev/null 2>&1 || true' EXIT
export KUBECONFIG=$KUBESTEER_STATE/kubeconfig
kubectl=("$bin/kubectl" --kubeconfig "$KUBECONFIG")
version=$(workspace_version)
dist=$KUBESTEER_STATE/dist

log "the cluster, its real node the only one, and its registry"
KUBESTEER_NODES=0 hack/cluster.sh up
registry=$(hack/registry.sh address)
ca=$(hack/registry.sh ca)
# Nothing else runs on this cluster: kubesteer's pods may use the real node as any node.
"${kubectl[@]}" taint nodes kubesteer-node kubesteer.io/real-node- >/dev/null

log "1. make release VERSION=$version"
RELEASE_IMAGE=$registry/kubesteer make --no-print-directory release VERSION="$version" DIST="$dist"
for f in "kubesteer-$version.oci.tar" "kubesteer-$version.tgz" kubesteer.yaml kubesteer.krew.yaml \
  SHA256SUMS "kubectl-kubesteer_linux_$(dpkg --print-architecture).tar.gz"; do
  [ -s "$dist/$f" ] || fail "make release wrote no $f"
done
(cd "$dist" && sha256sum -c SHA256SUMS) || fail "sha256sum -c SHA256SUMS"
"$bin/helm" lint --strict "$dist/kubesteer-$version.tgz" >/dev/null || fail "helm lint --strict of the packaged chart"
plugin_dir=$(mktemp -d)
tar -C "$plugin_dir" -xzf "$dist"/kubectl-kubesteer_linux_*.tar.gz
"$plugin_dir/kubectl-kubesteer" --version | grep -qx "kubectl kubesteer $version" ||
  fail "the plugin archive's binary is not $version: $("$plugin_dir/kubectl-kubesteer" --version)"
rm -rf "$plugin_dir"

log "2. kubectl krew install of the plugin archive"
krew_root=$KUBESTEER_STATE/krew
rm -rf "$krew_root"
KREW_ROOT=$krew_root "$bin/krew" install --manifest="$dist/kubesteer.krew.yaml" \
  --archive="$(ls "$dist"/kubectl-kubesteer_linux_*.tar.gz)" || fail "krew install"
out=$(PATH=$krew_root/bin:$bin:$PATH kubectl kubesteer --version)
[ "$out" = "kubectl kubesteer $version" ] || fail "kubectl kubesteer --version through krew: $out"
# krew refuses an archive whose sha256 is not the manifest's.
sed 's/sha256: "[0-9a-f]*"/sha256: "'"$(printf '0%.0s' $(seq 64))"'"/' "$dist/kubesteer.krew.yaml" >"$KUBESTEER_STATE/bad.krew.yaml"
rm -rf "$krew_root"
if KREW_ROOT=$krew_root "$bin/krew" install --manifest="$KUBESTEER_STATE/bad.krew.yaml" \
  --archive="$(ls "$dist"/kubectl-kubesteer_linux_*.tar.gz)" >/dev/null 2>&1; then
  fail "krew installed an archive whose sha256 is not the manifest's"
fi

log "3. the plain manifests on the empty cluster, the image pulled from $registry"
skopeo copy --quiet --dest-cert-dir "$(dirname "$ca")" "oci-archive:$dist/kubesteer-$version.oci.tar" \
  "docker://$registry/kubesteer:$version" || fail "skopeo copy of the OCI archive to $registry"
"${kubectl[@]}" apply --server-side -f "$dist/kubesteer.yaml" >/dev/null || fail "kubectl apply --server-side -f kubesteer.yaml"
"${kubectl[@]}" -n kubesteer-system rollout status deployment/kubesteer-webhook --timeout=300s ||
  fail "the webhook did not roll out within 300s: $("${kubectl[@]}" -n kubesteer-system get pods -o wide 2>&1)"
"${kubectl[@]}" -n kubesteer-system rollout status deployment/kubesteer-controller --timeout=120s ||
  fail "the controller did not roll out within 120s"
image=$("${kubectl[@]}" -n kubesteer-system get pods -l app.kubernetes.io/component=webhook \
  -o jsonpath='{.items[0].status.containerStatuses[0].imageID}')
case $image in "$registry/kubesteer@sha256:"*) ;; *) fail "the webhook's image did not come from $registry: $image" ;; esac
memcached=$KUBESTEER_STATE/memcached.json
echo '{"apiVersion":"kubesteer.io/v1alpha1","kind":"Memcached","metadata":{"name":"cache","namespace":"default"},"spec":{}}' >"$memcached"
wait_for "the webhook to admit a Memcached" 120 \
  "${kubectl[@]}" apply --request-timeout=20s --dry-run=server -f "$memcached" ||
  fail "the webhook did not answer within 120s"
"${kubectl[@]}" apply -f "$memcached" >/dev/null
size=$("${kubectl[@]}" get memcached cache -o jsonpath='{.spec.size}')
[ -n "$size" ] || fail "the webhook did not default the Memcached's spec.size"
wait_for "the controller to create the Memcached's Deployment" 120 \
  "${kubectl[@]}" get deployment cache --request-timeout=10s ||
  fail "the controller made no Deployment for the Memcached within 120s"
"${kubectl[@]}" delete memcached cache --timeout=60s >/dev/null || fail "the Memcached was not deleted within 60s"

log "4. uninstalled in the documented order, a Scaler live: its target given back, nothing stuck"
"${kubectl[@]}" create namespace team >/dev/null
"${kubectl[@]}" -n team create deployment web --image=nginx --replicas=1 >/dev/null
until=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
"${kubectl[@]}" apply -f - >/dev/null <<YAML
apiVersion: kubesteer.io/v1beta1
kind: Scaler
metadata: {name: busy, namespace: team}
spec:
  scaleTargetRefs: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  timeZone: UTC
  windows: [{start: "00:00", end: "00:01", replicas: 1}]
  override: {replicas: 3, until: "$until"}
YAML
replicas() { "${kubectl[@]}" -n team get deployment web --request-timeout=10s -o jsonpath='{.spec.replicas}'; }
scaled_to() { [ "$(replicas)" = "$1" ]; }
wait_for "the Scaler to scale team/web to 3" 120 scaled_to 3 ||
  fail "the Scaler did not scale team/web to 3 within 120s (at $(replicas))"
# The order docs/upgrading.md gives: the Scalers first, while the controller still runs, so it
# gives every target back and removes its finalizer; then the release.
"${kubectl[@]}" delete scalers --all -A --timeout=120s >/dev/null || fail "the Scalers were not deleted within 120s"
[ "$(replicas)" = 1 ] || fail "team/web was not given back its 1 replica (at $(replicas))"
"${kubectl[@]}" delete -f "$dist/kubesteer.yaml" --timeout=180s >/dev/null ||
  fail "kubectl delete -f kubesteer.yaml did not finish within 180s: $("${kubectl[@]}" get crd -o name 2>&1)"
"${kubectl[@]}" delete namespace team --timeout=120s >/dev/null || fail "the namespace team was not deleted within 120s"

log "5. from $PREVIOUS_RELEASE_VERSION to $version under traffic: helm upgrade, helm rollback, helm upgrade"
# The previous release's image and chart, built from its commit once per machine.
previous=$(hack/previous-release.sh)
skopeo copy --quiet --dest-cert-dir "$(dirname "$ca")" "docker-archive:$previous/image.tar" \
  "docker://$registry/kubesteer:$PREVIOUS_RELEASE_VERSION" || fail "skopeo copy of $PREVIOUS_RELEASE_VERSION's image to $registry"
hack/registry.sh push-chart "$previous/kubesteer-$PREVIOUS_RELEASE_VERSION.tgz"
hack/registry.sh push-chart "$dist/kubesteer-$version.tgz"
cargo build -q -p kubesteer-tests --bin upgrade-test
KUBESTEER_KUBECONFIG=$KUBECONFIG UPGRADE_REGISTRY=$registry UPGRADE_CA=$ca \
  UPGRADE_FROM=$PREVIOUS_RELEASE_VERSION UPGRADE_TO=$version \
  timeout --foreground --kill-after=30 "${KUBESTEER_UPGRADE_TIMEOUT:-1500}" "${CARGO_TARGET_DIR:-$root/target}/debug/upgrade-test" ||
  fail "the upgrade from $PREVIOUS_RELEASE_VERSION to $version (tests/src/bin/upgrade.rs)"
log "the release as expected: $(cd "$dist" && ls | tr '\n' ' ')"
