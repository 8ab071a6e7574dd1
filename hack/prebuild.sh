#!/usr/bin/env bash
# Every pinned component `make test` needs after its checks, built side by side: the control
# plane and its tools, promtool and the monitoring CRDs, krew, KEDA, and the previous release.
# hack/test.sh starts it in the background, niced, while the checks and unit tests compile, so a
# fresh machine downloads and builds them in what the cargo builds leave of the two cores instead
# of after them. Each is cached and skipped when built, and each build holds its lock
# (hack/lib.sh: hold_lock): a make target that needs one meanwhile waits for it rather than
# building it twice. A failed build is reported here and built again by the target that needs it,
# which then fails with the build's own error. Logs: $KUBESTEER_PREBUILD_LOGS (.kubesteer/prebuild/).
. "$(dirname "$0")/lib.sh"
cd "$root"
logs=${KUBESTEER_PREBUILD_LOGS:-$root/.kubesteer/prebuild}
mkdir -p "$logs"
names=(control-plane monitoring krew keda previous-release)
pids=()
start=$SECONDS
for name in "${names[@]}"; do
  case $name in
    control-plane) cmd=(hack/build-control-plane.sh all) ;;
    monitoring) cmd=(hack/build-control-plane.sh monitoring) ;;
    krew) cmd=(hack/build-control-plane.sh krew) ;;
    keda) cmd=(hack/keda.sh) ;;
    previous-release) cmd=(hack/previous-release.sh) ;;
  esac
  "${cmd[@]}" >"$logs/$name.log" 2>&1 &
  pids+=($!)
done
failed=()
for i in "${!names[@]}"; do
  wait_job "${pids[$i]}" "${KUBESTEER_PREBUILD_TIMEOUT:-5400}" "the build of ${names[$i]}" ||
    failed+=("${names[$i]}")
done
for name in "${failed[@]}"; do
  log "$name failed (its target builds it again); the end of $logs/$name.log:"
  tail -n 20 "$logs/$name.log" >&2
done
log "built or cached in $((SECONDS - start))s: ${names[*]}; failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
