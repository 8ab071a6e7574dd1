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
# The end-to-end tests' state dir (hack/e2e.sh's cluster, its image archive and build log), which
# hack/test.sh hands the image's build it starts.
e2e_state=${KUBESTEER_E2E_STATE:-$root/.kubesteer/e2e}
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

# workspace_version: the release, from [workspace.package] of Cargo.toml (the chart's version, the
# image's tag; tests/src/versions.rs checks that they agree).
workspace_version() {
  awk '
    /^\[/ { section = $0 }
    section == "[workspace.package]" && $1 == "version" {
      gsub(/[" ]/, "", $3); print $3; exit
    }' "$root/Cargo.toml"
}

# Deadlines: every wait in hack/ goes through one of these, or names its own deadline (a
# `kubectl wait --timeout`, helm's `--timeout`, curl's `--max-time`, a poll loop that checks
# `$deadline`); tests/src/deadline/checker.rs greps hack/ for one that does not.

# wait_job PID SECONDS WHAT: waits at most SECONDS for the background job PID and returns its exit
# status. Past the deadline it says what it waited for, stops the job (TERM to its process group
# when it leads one, else to it; KILL 10 s later) and returns 124.
wait_job() {
  local pid=$1 secs=$2 what=$3 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "timed out after ${secs}s waiting for $what (pid $pid); stopping it"
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      local stop=$((SECONDS + 10))
      while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$stop" ]; do sleep 0.2; done
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      return 124
    fi
    sleep 0.2
  done
  wait "$pid"
}

# image_build_start IMG TAR LOG: `make image` of IMG (its archive TAR) in the background, at a
# lower priority than what runs beside it, in a process group of its own (setsid), its output in
# LOG and its exit status, once it ends, in LOG.rc; prints the group's pid (hack/test.sh starts
# it beside the checks, hack/e2e.sh beside the host-binary groups when nothing started it).
image_build_start() {
  rm -f "$3.rc"
  setsid nice -n 10 bash -c 'make --no-print-directory -C "$0" image IMG="$1" IMAGE_TAR="$2" >"$3" 2>&1; echo $? >"$3.rc"' \
    "$root" "$1" "$2" "$3" </dev/null >/dev/null 2>&1 &
  echo $!
}

# image_build_wait PID LOG SECS: waits up to SECS for the build image_build_start started (any
# process's child), shows its log and returns its exit status; past SECS it stops it (124).
image_build_wait() {
  local pid=$1 log=$2 deadline=$((SECONDS + $3))
  while [ ! -f "$log.rc" ] && kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "timed out after ${3}s waiting for the image's build (pid $pid); stopping it"
      kill -TERM -- "-$pid" 2>/dev/null || true
      return 124
    fi
    sleep 0.5
  done
  cat "$log" >&2
  [ -f "$log.rc" ] || { log "the image's build ended without an exit status"; return 1; }
  return "$(cat "$log.rc")"
}

# wait_for WHAT SECONDS CMD...: runs CMD (output discarded) until it succeeds, every half second,
# each try given at most 30 s (`timeout`); after SECONDS it says what it waited for and returns 124.
# CMD may be a shell function (then it runs without the per-try limit).
wait_for() {
  local what=$1 secs=$2 deadline=$((SECONDS + $2))
  shift 2
  local try=(timeout --kill-after=5 30)
  [ "$(type -t "$1")" != function ] || try=()
  until ${try[@]+"${try[@]}"} "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "timed out after ${secs}s waiting for $what"
      return 124
    fi
    sleep 0.5
  done
}

# stop_pid_file FILE SECONDS: TERM to the process whose pid FILE holds, KILL after SECONDS; FILE
# is removed.
stop_pid_file() {
  [ -f "$1" ] || return 0
  local pid _
  pid=$(cat "$1")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 $(($2 * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

# nap SECONDS: a sleep that a trapped signal ends at once (bash runs a trap only after a
# foreground child exits; `wait` it interrupts).
nap() {
  sleep "$1" >/dev/null 2>&1 &
  wait $! 2>/dev/null || true
}

# sigint_ignored: whether this shell was started with SIGINT ignored, as every job started in the
# background by a shell without job control is (a scheduler, `cmd &` in a script). Bash cannot
# trap or reset a signal ignored at its start, so Ctrl-C cannot reach it.
sigint_ignored() { [ "$(trap -p INT)" = "trap -- '' SIGINT" ]; }

# with_default_sigint CMD...: runs CMD with SIGINT back at its default disposition, whatever this
# shell inherited (coreutils' `env --default-signal`), so its own traps for Ctrl-C work.
with_default_sigint() { env --default-signal=INT "$@"; }

# Third-party components the e2e tests run on the real node (hack/keda.sh, hack/cert-manager.sh,
# hack/prometheus-operator.sh) are built from the Go module proxy and packed FROM scratch.

# apply_crds DIR KUBECTL...: server-side applies every CRD in DIR and waits until each is
# established (60 s at most).
apply_crds() {
  local dir=$1
  shift
  "$@" apply --server-side --force-conflicts -f "$dir" >/dev/null
  "$@" wait --for condition=established --timeout=60s -f "$dir" >/dev/null
}

# real_node_placement INDENT: a pod spec's nodeSelector and toleration for the cluster's real node
# (hack/node.sh), where `hack/node.sh load` puts images, as YAML indented by INDENT spaces.
real_node_placement() {
  local pad
  pad=$(printf '%*s' "$1" '')
  printf '%s\n' "${pad}nodeSelector:" "${pad}  kubesteer.io/real-node: \"true\"" "${pad}tolerations:" \
    "${pad}  - key: kubesteer.io/real-node" "${pad}    operator: Exists" "${pad}    effect: NoSchedule"
}

# own_target_dir DIR MIB [CLEAN_ARGS...]: makes DIR, a cargo target dir shared by every checkout,
# this checkout's. Nothing removes what an old Cargo.lock built there: past MIB MiB, it starts
# over. Cargo names a workspace crate's build by its path inside the workspace, so another
# checkout's build of it lands on the same files, with a dep-info that names that checkout's
# sources: cargo would take it as up to date and link the other checkout's code. So when the last
# build there was of another checkout, the workspace's crates are cleaned first (`cargo clean
# CLEAN_ARGS -p ...`; the dependencies stay), and so is its rustdoc output.
own_target_dir() {
  local dir=$1 mib=$2
  shift 2
  if [[ -d $dir ]] && (($(du -sm "$dir" | cut -f1) > mib)); then
    log "$dir is over $mib MiB: clearing it"
    rm -rf "$dir"
  fi
  local checkout=$dir/checkout
  if [[ -f $checkout && $(cat "$checkout") != "$root" ]]; then
    log "the last build in $dir was of $(cat "$checkout"): cleaning the workspace's crates"
    local crates=() member
    for member in $(sed -n 's/^members = \[\(.*\)\]/\1/p' "$root/Cargo.toml" | tr -d '",'); do
      crates+=(-p "$(sed -n 's/^name = "\(.*\)"/\1/p' "$root/$member/Cargo.toml" | head -n1)")
    done
    (cd "$root" && "${CARGO:-cargo}" clean -q "$@" --target-dir "$dir" "${crates[@]}")
    rm -rf "$dir/doc"
  fi
  mkdir -p "$dir"
  printf '%s\n' "$root" >"$checkout"
}

# go_module_dir MODULE VERSION: downloads MODULE@VERSION into Go's module cache (read-only) and
# prints its directory.
go_module_dir() {
  local dir
  dir=$(cd "$cache" && go mod download -json "$1@$2" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir" ] || die "go mod download of $1@$2 failed"
  echo "$dir"
}

# scratch_image IMAGE TAR USER SOURCE DESCRIPTION FILE:PATH...: an image FROM scratch holding each
# FILE at PATH (mode 0755), run as USER with the first PATH as its entrypoint, committed to the
# local containers storage as IMAGE (buildah, nothing pulled) and exported as a docker-archive at
# TAR (ctr imports it as docker.io/library/IMAGE too, which the kubelet looks for). Kept when TAR
# is newer than every FILE; the newest FILE's time is the image's, so unchanged files give back
# the same image ID. Prints TAR.
scratch_image() {
  local image=$1 tar=$2 user=$3 source=$4 description=$5
  shift 5
  local file newest=0 fresh=1 entrypoint=${1#*:}
  for file in "$@"; do
    [ "$tar" -nt "${file%%:*}" ] || fresh=0
    [ "$(stat -c %Y "${file%%:*}")" -le "$newest" ] || newest=$(stat -c %Y "${file%%:*}")
  done
  if [ -s "$tar" ] && [ "$fresh" = 1 ]; then
    log "image $image: $tar is up to date"
    echo "$tar"
    return
  fi
  command -v buildah >/dev/null || die "buildah not found: apt-get install buildah"
  # Nothing here runs a container; should buildah need a runtime, it is runc.
  export BUILDAH_RUNTIME=${BUILDAH_RUNTIME:-runc}
  local start=$SECONDS ctr tmp="$tar.tmp.$$" arch
  ctr=$(buildah from --quiet scratch)
  # shellcheck disable=SC2064
  trap "buildah rm $ctr >/dev/null 2>&1 || true; rm -f '$tmp'" EXIT
  for file in "$@"; do
    buildah copy --quiet --chown 0:0 --chmod 0755 "$ctr" "${file%%:*}" "${file#*:}" >/dev/null
  done
  case $(uname -m) in x86_64) arch=amd64 ;; aarch64 | arm64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
  buildah config --os linux --arch "$arch" \
    --user "$user" --workingdir / --entrypoint "[\"$entrypoint\"]" --cmd '[]' \
    --label "org.opencontainers.image.source=$source" \
    --label "org.opencontainers.image.version=${image##*:}" \
    --label "org.opencontainers.image.title=$(basename "${image%:*}")" \
    --label "org.opencontainers.image.description=$description" \
    "$ctr"
  buildah commit --quiet --rm --format oci --timestamp "$newest" "$ctr" "$image" >/dev/null
  trap - EXIT
  mkdir -p "$(dirname "$tar")"
  rm -f "$tmp"
  buildah push --quiet "$image" "docker-archive:$tmp:$image" >/dev/null ||
    { rm -f "$tmp"; die "buildah push to docker-archive:$tar failed"; }
  mv -f "$tmp" "$tar"
  log "image $image: $tar ($(($(stat -c %s "$tar") / 1048576)) MiB) in $((SECONDS - start))s"
  echo "$tar"
}
