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
