#!/usr/bin/env bash
# make test: every check and test, in this order: fmt-check, clippy, doc-check, unit, then e2e,
# test-release and test-run (the Makefile's targets). The pinned components those last three need
# build meanwhile, in the background and niced (hack/prebuild.sh, its log in
# .kubesteer/prebuild.log): on a fresh machine they download and compile beside the cargo builds.
# The checks run first either way; a prebuild that failed is reported, and the target that needs
# what it failed to build builds it again.
. "$(dirname "$0")/lib.sh"
cd "$root"
mkdir -p .kubesteer
prebuild_log=$root/.kubesteer/prebuild.log
prebuild_pid=
cleanup() { if [ -n "$prebuild_pid" ]; then kill -- "-$prebuild_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
setsid nice -n 10 hack/prebuild.sh >"$prebuild_log" 2>&1 &
prebuild_pid=$!
make=("${MAKE:-make}" --no-print-directory)
"${make[@]}" fmt-check clippy doc-check unit
log "waiting for the pinned components (hack/prebuild.sh, $prebuild_log)"
wait_job "$prebuild_pid" "${KUBESTEER_PREBUILD_TIMEOUT:-5400}" "the pinned components' build" ||
  log "hack/prebuild.sh failed; what it did not build is built by the targets below"
prebuild_pid=
cat "$prebuild_log" >&2
"${make[@]}" e2e test-release test-run
