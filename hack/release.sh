#!/usr/bin/env bash
# `make release VERSION=x.y.z`: the release's artifacts, built from this checkout into DIST
# (dist/ by default), each named with the version:
#   kubesteer-VERSION.oci.tar                  the image as an OCI archive (`skopeo copy
#                                              oci-archive:...`, `podman load`, `crane push`),
#                                              tagged RELEASE_IMAGE:VERSION
#   kubesteer-VERSION.tgz                      the chart (`helm package`; `helm lint --strict` first)
#   kubesteer.yaml                             plain manifests for a cluster without Helm: the
#                                              namespace, the CRDs and the chart's objects with
#                                              self-managed certificates
#                                              (`kubectl apply --server-side -f kubesteer.yaml`)
#   kubectl-kubesteer_linux_ARCH.tar.gz        the kubectl plugin for this machine's platform
#   kubesteer.krew.yaml                        the krew manifest, with the archives' sha256
#   SHA256SUMS                                 every file above (`sha256sum -c SHA256SUMS`)
# VERSION must be the workspace version (Cargo.toml), which is also the chart's, the krew
# manifest's and CHANGELOG.md's newest release: a release is cut by bumping those first.
# RELEASE_IMAGE (default: the chart's image.repository) names the image in the archive and in
# kubesteer.yaml. The image builds as `make image` builds it (hack/image.sh), in its cache.
. "$(dirname "$0")/lib.sh"
cd "$root"
case ${1:-} in -h | --help | "") sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; [ -n "${1:-}" ]; exit ;; esac
version=$1
dist=${2:-$root/dist}
helm=("$bin/helm")
workspace=$(workspace_version)
[ "$version" = "$workspace" ] ||
  die "VERSION=$version is not the workspace version ($workspace): bump Cargo.toml, charts/kubesteer/Chart.yaml, kubesteer/plugin/krew.yaml and CHANGELOG.md to it first"
grep -q "^## \[$version\]" CHANGELOG.md || die "CHANGELOG.md has no section \"## [$version]\""
[ -x "${helm[0]}" ] || die "no helm in $bin: make control-plane"
repository=${RELEASE_IMAGE:-$(sed -n '/^image:/,/^[^ ]/s/^  repository: *//p' charts/kubesteer/values.yaml)}
[ -n "$repository" ] || die "no image.repository in charts/kubesteer/values.yaml (or RELEASE_IMAGE)"
case $(uname -m) in
  x86_64) arch=amd64 target=x86_64-unknown-linux-gnu ;;
  aarch64 | arm64) arch=arm64 target=aarch64-unknown-linux-gnu ;;
  *) die "unsupported machine $(uname -m)" ;;
esac
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
image=$repository:$version

rm -rf "$dist"
mkdir -p "$dist"
log "kubesteer $version into $dist"

log "the image $image"
hack/image.sh image "$image" "$dist/.image.docker.tar"
rm -f "$dist/.image.docker.tar"
buildah push --quiet "$image" "oci-archive:$dist/kubesteer-$version.oci.tar:$image" >/dev/null ||
  die "buildah push to oci-archive failed"

log "the chart"
"${helm[@]}" lint --strict charts/kubesteer >/dev/null || { "${helm[@]}" lint --strict charts/kubesteer; die "helm lint --strict failed"; }
"${helm[@]}" package charts/kubesteer -d "$dist" >/dev/null
[ -f "$dist/kubesteer-$version.tgz" ] || die "helm package made no kubesteer-$version.tgz"

log "the plain manifests"
{
  cat <<YAML
# kubesteer $version: \`kubectl apply --server-side -f kubesteer.yaml\`. The namespace, the CRDs
# and the chart's objects (release "kubesteer" in kubesteer-system, self-managed certificates,
# image $image), rendered by \`helm template\`; \`kubectl delete -f\` removes them.
apiVersion: v1
kind: Namespace
metadata:
  name: kubesteer-system
YAML
  # The CRDs are the chart's templates; helm.sh/resource-policy means nothing to kubectl.
  "${helm[@]}" template kubesteer charts/kubesteer -n kubesteer-system --skip-tests \
    --set crds.keep=false --set "image.repository=$repository" --set "image.tag=$version"
} >"$dist/kubesteer.yaml"

log "the kubectl plugin (linux/$arch)"
# The image's multi-call binary, stripped: called kubectl-kubesteer it is the plugin.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
strip --strip-all -o "$stage/kubectl-kubesteer" "target/$target/image/kubesteer"
plugin=kubectl-kubesteer_linux_$arch.tar.gz
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - kubectl-kubesteer |
  gzip -n -9 >"$dist/$plugin"

log "the krew manifest"
# kubesteer/plugin/krew.yaml with the platforms built here, each with its archive's sha256.
awk -v dist="$dist" '
  function flush() {
    if (block != "" && keep) printf "%s", block
    block = ""; keep = 0
  }
  /^    - selector:/ { flush(); inblock = 1 }
  inblock && /matchLabels:/ {
    os = $0; sub(/.*os: */, "", os); sub(/[,}].*/, "", os)
    arch = $0; sub(/.*arch: */, "", arch); sub(/[,}].*/, "", arch)
    file = dist "/kubectl-kubesteer_" os "_" arch ".tar.gz"
    keep = (system("test -f " file) == 0)
    if (keep) { cmd = "sha256sum " file; cmd | getline sum; close(cmd); split(sum, f, " "); sha = f[1] }
  }
  inblock && /^      sha256:/ { sub(/"[0-9a-f]*"/, "\"" sha "\"") }
  inblock && !/^    / && !/^$/ { flush(); inblock = 0 }
  inblock { block = block $0 "\n"; next }
  { print }
  END { flush() }
' kubesteer/plugin/krew.yaml >"$dist/kubesteer.krew.yaml"
grep -q "sha256: \"[0-9a-f]\{64\}\"" "$dist/kubesteer.krew.yaml" || die "the krew manifest names no archive"
! grep -q 'sha256: "0\{64\}"' "$dist/kubesteer.krew.yaml" || die "the krew manifest kept a zero sha256"

(cd "$dist" && sha256sum -- * >SHA256SUMS)
log "done: $(cd "$dist" && ls | tr '\n' ' ')"
