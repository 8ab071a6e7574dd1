#!/usr/bin/env bash
# Builds kubesteer's container images offline, with buildah, FROM scratch: nothing is pulled.
#
#   hack/image.sh image [IMG] [TAR]   one static, stripped multi-call binary, kubesteer, with
#                                     the links kubesteer-webhook, kubesteer-controller,
#                                     kubesteer-certs and kubectl-kubesteer (the kubectl plugin),
#                                     in /usr/local/bin of one image
#                                     (IMG default kubesteer:dev, TAR default .kubesteer/image.tar)
#   hack/image.sh pause [IMG] [TAR]   the pod sandbox image, hack/pause/pause.c
#                                     (IMG default localhost/kubesteer-pause:3.10,
#                                      TAR default .kubesteer/pause.tar)
#
# IMG/IMAGE_TAR and PAUSE_IMG/PAUSE_TAR in the environment work too. Each image is committed to
# the local containers storage as IMG (podman and buildah see it: `podman run --rm kubesteer:dev
# kubesteer-webhook --help`; a name without a registry is stored as localhost/NAME) and exported
# as a docker-archive, which `ctr -n k8s.io images import TAR` and `docker load` both read:
# kubesteer:dev is imported as docker.io/library/kubesteer:dev (what the kubelet looks for when a
# pod says image: kubesteer:dev) and as localhost/kubesteer:dev.
#
# The image mirrors the repository's Dockerfile: same files, user, env and labels. Its version
# label is the workspace version of Cargo.toml. Image timestamps are the last commit's, so
# rebuilding unchanged binaries gives back the same image ID. Safe to re-run.
. "$(dirname "$0")/lib.sh"
cd "$root"


# usage [CODE]: the header above, on stderr; exits CODE (default 2).
usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

BINARIES=(kubesteer-webhook kubesteer-controller kubesteer-certs kubectl-kubesteer)
case $(uname -m) in
  x86_64) TARGET=x86_64-unknown-linux-gnu ARCH=amd64 ;;
  aarch64 | arm64) TARGET=aarch64-unknown-linux-gnu ARCH=arm64 ;;
  *) die "unsupported machine $(uname -m)" ;;
esac
SOURCE_URL=https://github.com/kubesteer/kubesteer
CARGO=${CARGO:-cargo}

need() {
  local cmd=$1 hint=$2
  command -v "$cmd" >/dev/null || die "$cmd not found: $hint"
}

# Seconds since the epoch of the last commit (0 outside git): the images' created time.
source_date_epoch() {
  if [[ -n ${SOURCE_DATE_EPOCH:-} ]]; then
    echo "$SOURCE_DATE_EPOCH"
  else
    git log -1 --format=%ct 2>/dev/null || echo 0
  fi
}

revision() { git rev-parse HEAD 2>/dev/null || echo unknown; }

ctr_id=""
stage=""
cleanup() {
  if [[ -n $ctr_id ]]; then buildah rm "$ctr_id" >/dev/null 2>&1 || true; fi
  if [[ -n $stage ]]; then rm -rf "$stage"; fi
}
trap cleanup EXIT

# image_id NAME: the ID of a local image, or nothing.
image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true; }

# commit_and_export IMG TAR: commits the working container $ctr_id as IMG, removes the image IMG
# named before when nothing else names it, and writes TAR as a docker-archive tagged IMG.
commit_and_export() {
  local img=$1 tar=$2 old new
  old=$(image_id "$img")
  buildah commit --quiet --rm --format oci --timestamp "$(source_date_epoch)" \
    "$ctr_id" "$img" >/dev/null
  ctr_id=""
  new=$(image_id "$img")
  [[ -n $new ]] || die "buildah commit did not produce $img"
  if [[ -n $old && $old != "$new" ]]; then
    # The old image is untagged now; drop it unless something still uses it.
    buildah rmi "$old" >/dev/null 2>&1 || true
  fi
  log "committed $img (${new:0:12}) to the local containers storage"

  mkdir -p "$(dirname "$tar")"
  local tmp="$tar.tmp.$$"
  rm -f "$tmp"
  # The archive's tags are IMG, normalized as docker does (kubesteer:dev becomes
  # docker.io/library/kubesteer:dev), and the name in the local storage (localhost/kubesteer:dev);
  # ctr imports one image under each. localhost/x:y stays localhost/x:y.
  buildah push --quiet "$img" "docker-archive:$tmp:$img" >/dev/null ||
    { rm -f "$tmp"; die "buildah push to docker-archive:$tar failed"; }
  mv -f "$tmp" "$tar"
  log "exported $tar ($(mib "$(stat -c %s "$tar")") MiB): ctr -n k8s.io images import $tar"
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

report_size() {
  local img=$1 size
  size=$(podman image inspect --format '{{.Size}}' "$img" 2>/dev/null ||
    buildah inspect --type image --format '{{.ImageSize}}' "$img" 2>/dev/null || echo 0)
  log "image $img: $(mib "$size") MiB"
}

# new_scratch: an empty working container in $ctr_id (removed on exit unless committed).
new_scratch() {
  ctr_id=$(buildah from --quiet scratch)
}

build_image() {
  local img=${1:-${IMG:-kubesteer:dev}} tar=${2:-${IMAGE_TAR:-.kubesteer/image.tar}}
  local version
  version=$(workspace_version)
  [[ -n $version ]] || die "no version in [workspace.package] of Cargo.toml"
  need "$CARGO" "install Rust (https://rustup.rs)"
  need strip "apt-get install binutils"
  need buildah "apt-get install podman buildah"

  # Static glibc binaries: crt-static on the gnu target. The explicit --target keeps build
  # scripts and proc macros dynamic. The profile `image` is defined once, in Cargo.toml (release
  # made small: fat LTO, one codegen unit, opt-level s; CARGO_PROFILE_IMAGE_* override it). It
  # builds in $image_target_dir (hack/lib.sh), a cache shared by every checkout: cargo skips what
  # is up to date (about 3 builds' worth before it starts over).
  CARGO=$CARGO own_target_dir "$image_target_dir" "${KUBESTEER_IMAGE_TARGET_MIB:-4096}" \
    --profile image --target "$TARGET"
  log "building static binaries (kubesteer $version, profile image of Cargo.toml, in $image_target_dir)"
  local start=$SECONDS
  RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }$IMAGE_RUSTFLAGS" \
    "$CARGO" build --profile image --locked --target "$TARGET" --target-dir "$image_target_dir" \
    -p kubesteer --bin kubesteer
  log "cargo build took $((SECONDS - start))s"

  # The unstripped binary goes to target/$TARGET/image/kubesteer, where the release and the
  # benchmarks read it (with its symbols, for profiles). The image gets one stripped
  # multi-call binary, and the program names as links to it: it runs as the name it is called by.
  local built="$image_target_dir/$TARGET/image/kubesteer" bin="target/$TARGET/image/kubesteer" b
  [[ -x $built ]] || die "$built was not built"
  mkdir -p "$(dirname "$bin")"
  cp -f "$built" "$bin.tmp.$$" && mv -f "$bin.tmp.$$" "$bin"
  stage=$(mktemp -d)
  if LC_ALL=C file "$bin" 2>/dev/null | grep -q 'dynamically linked'; then
    die "$bin is dynamically linked; is RUSTFLAGS overriding crt-static?"
  fi
  mkdir "$stage/bin"
  strip --strip-all -o "$stage/bin/kubesteer" "$bin"
  for b in "${BINARIES[@]}"; do
    ln -s kubesteer "$stage/bin/$b"
  done

  log "assembling $img FROM scratch"
  oci_labels kubesteer "$version" "kubesteer: admission webhook (kubesteer-webhook), controller (kubesteer-controller) and certificates tool (kubesteer-certs) for the Scaler, Memcached, Welcome and Application resources"
  new_scratch
  buildah copy --quiet --chown 0:0 --chmod 0755 "$ctr_id" "$stage/bin" /usr/local/bin/ >/dev/null
  buildah config \
    --os linux --arch "$ARCH" \
    --user 65532:65532 \
    --env PATH=/usr/local/bin \
    --workingdir / \
    --cmd '["kubesteer-webhook", "--help"]' \
    "${labels[@]}" "$ctr_id"
  commit_and_export "$img" "$tar"
  report_size "$img"
}

# oci_labels TITLE VERSION DESCRIPTION: the labels both images carry, as buildah flags in $labels.
oci_labels() {
  labels=(
    --label "org.opencontainers.image.source=$SOURCE_URL"
    --label "org.opencontainers.image.version=$2"
    --label "org.opencontainers.image.revision=$(revision)"
    --label org.opencontainers.image.licenses=Apache-2.0
    --label "org.opencontainers.image.title=$1"
    --label "org.opencontainers.image.description=$3"
  )
}

build_pause() {
  local img=${1:-${PAUSE_IMG:-localhost/kubesteer-pause:3.10}}
  local tar=${2:-${PAUSE_TAR:-.kubesteer/pause.tar}}
  local version=${img##*:}
  [[ $version != "$img" && $version != */* ]] || version=3.10
  need gcc "apt-get install gcc libc6-dev"
  need buildah "apt-get install podman buildah"

  stage=$(mktemp -d)
  log "compiling hack/pause/pause.c (static)"
  gcc -static -Os -s -Wall -Wextra -Werror -DVERSION="\"$version\"" \
    -o "$stage/pause" hack/pause/pause.c ||
    die "gcc -static failed (static libc missing? apt-get install libc6-dev)"

  log "assembling $img FROM scratch"
  oci_labels kubesteer-pause "$version" "kubesteer-pause: a pod sandbox (pause) container built from source, for clusters that cannot pull one"
  new_scratch
  buildah copy --quiet --chown 0:0 --chmod 0755 "$ctr_id" "$stage/pause" /pause >/dev/null
  buildah config \
    --os linux --arch "$ARCH" \
    --user 65535:65535 \
    --workingdir / \
    --entrypoint '["/pause"]' \
    "${labels[@]}" "$ctr_id"
  commit_and_export "$img" "$tar"
  report_size "$img"
}

case ${1:-} in
  image) shift; build_image "$@" ;;
  pause) shift; build_pause "$@" ;;
  -h | --help | help) usage 0 ;;
  *) usage ;;
esac
