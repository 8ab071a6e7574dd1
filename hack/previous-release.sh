#!/usr/bin/env bash
# The release the upgrade test starts from (versions.env: PREVIOUS_RELEASE_VERSION at
# PREVIOUS_RELEASE_COMMIT), built from that commit as it was: its image, by its own hack/image.sh,
# as a docker-archive, and its chart, `helm package`d. Cached by commit under
# ~/.cache/kubesteer/releases/COMMIT/, so it is built once per machine; prints that directory.
#   hack/previous-release.sh            build unless cached; print the directory
# The build runs in a git worktree of the commit, in a target directory of its own
# (~/.cache/kubesteer/target-previous), with a quicker profile than a release's (see below).
. "$(dirname "$0")/lib.sh"
commit=$PREVIOUS_RELEASE_COMMIT version=$PREVIOUS_RELEASE_VERSION
dir=$cache/releases/$commit
image=localhost/kubesteer-previous:$version
if [ -s "$dir/image.tar" ] && [ -s "$dir/kubesteer-$version.tgz" ]; then
  echo "$dir"
  exit 0
fi
git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null ||
  die "commit $commit (release $version) is not in this clone: git fetch --unshallow"
mkdir -p "$dir"
src=$(mktemp -d "$cache/releases/src.XXXXXX")
cleanup() {
  git -C "$root" worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"
  git -C "$root" worktree prune >/dev/null 2>&1 || true
}
trap cleanup EXIT
rmdir "$src"
git -C "$root" worktree add --detach --quiet "$src" "$commit"
log "building release $version ($commit) in $src: once per machine"
start=$SECONDS
# In a target directory of its own, with a quicker profile than a release's (no LTO, opt-level 1,
# 16 codegen units): the upgrade test needs the release's code and chart, not its size, and a
# fresh machine builds it beside everything else. The image build's own cache stays the current
# checkout's.
(cd "$src" && KUBESTEER_IMAGE_TARGET_DIR="$cache/target-previous" CARGO_PROFILE_IMAGE_LTO=false \
  CARGO_PROFILE_IMAGE_OPT_LEVEL=1 CARGO_PROFILE_IMAGE_CODEGEN_UNITS=16 \
  hack/image.sh image "$image" "$dir/image.tar.tmp") >&2
mv -f "$dir/image.tar.tmp" "$dir/image.tar"
"$bin/helm" package "$src/charts/kubesteer" -d "$dir" >/dev/null
[ -s "$dir/kubesteer-$version.tgz" ] || die "helm package of $commit's chart wrote no kubesteer-$version.tgz"
log "release $version built in $((SECONDS - start))s: $dir"
echo "$dir"
