# Sourced first by every hack/ script: strict mode; `root`, the checkout; the pins of
# versions.env; `cache` (~/.cache/kubesteer, or $KUBESTEER_CACHE) and `bin`, its pinned tools;
# `log` and `die`, tagged with `$tag` (the script's name unless it sets another); and
# `own_cluster`, the guard of the scripts that run on a cluster of their own.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../versions.env
. "$root/versions.env"
cache=${KUBESTEER_CACHE:-$HOME/.cache/kubesteer}
# The image's static binaries: crt-static on the gnu target, and v0 symbol names as in every other
# build (.cargo/config.toml, whose rustflags RUSTFLAGS replaces).
IMAGE_RUSTFLAGS='-C target-feature=+crt-static -C symbol-mangling-version=v0'
# Where `make image` builds (cargo's --target-dir; KUBESTEER_IMAGE_TARGET_DIR names another): a
# cache of its own, shared by every checkout, so that a fresh clone (CI) recompiles only the
# workspace's crates and the fat-LTO link, not every dependency at opt-level s (about 6 of 12 min).
image_target_dir=${KUBESTEER_IMAGE_TARGET_DIR:-$cache/target-image}
bin=$cache/bin
tag=$(basename "$0" .sh)
log() { printf '[%s] %s\n' "$tag" "$*" >&2; }
die() {
  printf '[%s] error: %s\n' "$tag" "$*" >&2
  exit 1
}

# own_cluster NAME STATE: exports KUBESTEER_CLUSTER=NAME and KUBESTEER_STATE=STATE, and refuses
# (exit 2) when they name `make run`'s cluster (kubesteer, .kubesteer/).
own_cluster() {
  export KUBESTEER_CLUSTER=$1 KUBESTEER_STATE=$2
  if [ "$KUBESTEER_CLUSTER" = kubesteer ] || [ "$(realpath -m "$KUBESTEER_STATE")" = "$root/.kubesteer" ]; then
    echo "[$tag] refusing to run on make run's cluster (kubesteer, .kubesteer/): pick another name and state" >&2
    exit 2
  fi
}
