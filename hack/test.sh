#!/usr/bin/env bash
# `make test`: every test. First the checks, in this order: fmt, clippy, rustdoc, the unit tests.
# Then two lanes side by side, each on clusters of its own (hack/cluster.sh runs clusters of other
# names and state dirs side by side, each with its own real node):
#   the image lane:  the end-to-end groups that install the chart or run the image
#                    (hack/e2e.sh, KUBESTEER_E2E_PART=image, cluster kubesteer-e2e);
#   the host lane:   the groups that run the host's binaries (KUBESTEER_E2E_PART=host, cluster
#                    kubesteer-e2e-host in .kubesteer/e2e-host/), then `make test-release` and
#                    `make test-run`; its lines are shown prefixed with "[host lane] ".
# Most of the image lane's time is waiting on the cluster (an alert's `for:`, the soak's faults,
# rollouts), which is what the host lane fills. Both lanes run to their end; the test fails when
# either does, naming it.
# The project image's build, which the image lane waits for, starts first, in the background at a
# lower priority (hack/lib.sh image_build_start): most of it (each workspace crate at one codegen
# unit, then the fat-LTO link) keeps one core busy, and the checks use the other. Its log is
# $KUBESTEER_E2E_STATE/image-build.log (.kubesteer/e2e/ by default); a failure before the lanes
# stops it.
. "$(dirname "$0")/lib.sh"
cd "$root"
# buildah and podman, which the image's build needs, before it starts.
hack/install-prereqs.sh
mkdir -p "$e2e_state"
image_pid=$(image_build_start "${KUBESTEER_IMAGE:-kubesteer:dev}" "$e2e_state/image.tar" "$e2e_state/image-build.log")
host_lane=
stop() {
  kill -TERM -- "-$image_pid" 2>/dev/null || true
  if [ -n "$host_lane" ]; then kill -TERM -- "-$host_lane" 2>/dev/null || true; fi
}
trap stop EXIT
make --no-print-directory fmt-check clippy doc-check unit
# The pinned tools both lanes use, built once (or found in the cache) before they start.
make --no-print-directory control-plane monitoring-tools keda platform krew-tool
# The host lane in a process group of its own (setsid), so that an early end stops all of it; its
# hack/e2e.sh tears its cluster down on the way out.
setsid bash -c 'KUBESTEER_E2E_PART=host KUBESTEER_E2E_CLUSTER=kubesteer-e2e-host \
  KUBESTEER_E2E_STATE="$0/.kubesteer/e2e-host" hack/e2e.sh &&
  make --no-print-directory test-release test-run' "$root" \
  </dev/null > >(sed -u 's/^/[host lane] /' >&2) 2>&1 &
host_lane=$!
image_rc=0
KUBESTEER_IMAGE_BUILD_PID=$image_pid KUBESTEER_E2E_PART=image hack/e2e.sh || image_rc=$?
# The host lane has deadlines of its own (each group's, each wait's); this one bounds what is left
# of it once the image lane has ended.
host_rc=0
wait_job "$host_lane" "${KUBESTEER_HOST_LANE_TIMEOUT:-3600}" "the host lane" || host_rc=$?
host_lane=
[ "$image_rc" = 0 ] || log "the image lane (hack/e2e.sh, KUBESTEER_E2E_PART=image) failed ($image_rc)"
[ "$host_rc" = 0 ] || log "the host lane (hack/e2e.sh, KUBESTEER_E2E_PART=host; test-release; test-run) failed ($host_rc)"
[ "$image_rc" = 0 ] && [ "$host_rc" = 0 ]
