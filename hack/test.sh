#!/usr/bin/env bash
# `make test`: every test, in this order: fmt, clippy, rustdoc, the unit tests, the end-to-end
# tests (hack/e2e.sh), `make test-release` and `make test-run`. The project image's build, which
# the end-to-end tests' chart installs wait for, starts first, in the background at a lower
# priority (hack/lib.sh image_build_start): most of it (each workspace crate at one codegen unit,
# then the fat-LTO link) keeps one core busy, and the checks use the other. Its log is
# $KUBESTEER_E2E_STATE/image-build.log (.kubesteer/e2e/ by default); a failure before the
# end-to-end tests stops it.
. "$(dirname "$0")/lib.sh"
cd "$root"
# buildah and podman, which the image's build needs, before it starts.
hack/install-prereqs.sh
state=${KUBESTEER_E2E_STATE:-$root/.kubesteer/e2e}
mkdir -p "$state"
image_pid=$(image_build_start "${KUBESTEER_IMAGE:-kubesteer:dev}" "$state/image.tar" "$state/image-build.log")
trap 'kill -TERM -- "-$image_pid" 2>/dev/null || true' EXIT
make --no-print-directory fmt-check clippy doc-check unit
KUBESTEER_IMAGE_BUILD_PID=$image_pid make --no-print-directory e2e
make --no-print-directory test-release test-run
