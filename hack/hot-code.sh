#!/usr/bin/env bash
# Writes webhook/hot-code.order: the functions the webhook runs once it has started (answering
# reviews, following its watches), which the linker puts next to each other at the start of the
# code (hack/hot-code-link.rs, the build script of webhook/ and kubesteer/: lld's
# --symbol-ordering-file). A webhook's resident memory is mostly its own code pages, and the
# kernel maps 64 KiB around each page touched: packed together, the code that runs takes a few
# such windows instead of one in every part of the binary, and the code that does not run stays
# out of them.
#
#   hack/hot-code.sh             # profile the webhook binaries built without the order
#   hack/hot-code.sh --as-built  # profile them as built now (with the current order): quicker
#
# Two binaries are profiled, the image's static multi-call `kubesteer webhook` (what the chart
# runs) and the webhook-only build of the image profile (what the benchmarks run); the list is
# the first's functions, then those only the second ran (HOT_CODE_BINARIES=multicall: the first
# alone). Needs root (the disk's read-ahead,
# tracefs). BENCH_CLUSTER/BENCH_STATE pick the cluster as in the benches.
#
# What runs is the same in both passes over a binary (`exercise`): every kind's validate and
# mutate path, at saturation with 32 connections and at fixed rates as the benchmark loads them;
# then changes to an object of each kind the webhook watches (bench/bodies/watched.yaml); then
# long enough for each watch to time out and start again. Start-up is not profiled: its code is
# given back once it is done (runtime/src/memory.rs).
#
# 1. Pages: the block device's read-ahead is set to 0 for the run (and put back), the webhook
#    starts, its file's pages are taken out of it and out of the page cache, and `exercise` runs.
#    Without read-ahead and with nothing else of the file cached, a fault maps only the page it
#    needs (fault-around maps cached pages only): the functions that begin on the code pages
#    present afterwards (/proc/PID/pagemap) are the candidates.
# 2. Functions: a uprobe at the entry of each candidate, and `exercise` again on a new webhook. A
#    page lists every function that begins on it, most of which did not run (of the 10,572 the
#    pages had listed by 2026-11, 2,455 ran: 1.8 of 4.6 MiB of code); a probe counts only its
#    own function. A probe the kernel could not set (no breakpoint at its address) counts as
#    run. Each probe is turned off once it has been hit, so the loads run at nearly full speed
#    after their first requests; the first request of each path is sent alone, as it is slow
#    under every probe.
#
# Functions are written by their demangled names (the build that links with the list names the
# same functions with other hashes; hack/cc-link.sh finds them in the link at hand), in address
# order. Names of code the linker cannot move (glibc's, whose objects are not one section per
# function) are left out. Run it after a change that moves the webhook's code (new dependencies,
# a new compiler, a new kind); names a build no longer has are ignored by the linker, so a stale
# file costs memory, never a build.
. "$(dirname "$0")/lib.sh"
cd "$root"
as_built=
case "${1:-}" in
  "") ;;
  --as-built) as_built=1 ;;
  *) die "usage: hack/hot-code.sh [--as-built]" ;;
esac
export KUBESTEER_CLUSTER=${BENCH_CLUSTER:-${KUBESTEER_CLUSTER:-kubesteer}}
export KUBESTEER_STATE=${BENCH_STATE:-${KUBESTEER_STATE:-$root/.kubesteer}}
oha="$cache/tools/bin/oha"
port=${HOT_CODE_PORT:-19644}
out=${HOT_CODE_OUT:-webhook/hot-code.order}
# How long `exercise` waits at the end: past the watches' timeout (kube's 290 s) and restart.
idle=${HOT_CODE_IDLE:-330}
work="$root/bench/tmp/hot-code"
rm -rf "$work" && mkdir -p "$work"
tool=(python3 "$root/hack/hot-code.py")
export HOT_CODE_PROBES="$work/probes.json"
[ -x "$oha" ] || cargo install oha --locked --root "$cache/tools"
if [ -z "$as_built" ]; then
  # Built without the order file, so that what is measured is where the code falls by itself.
  export KUBESTEER_HOT_CODE_ORDER=off
fi
# HOT_CODE_BINARIES=multicall profiles only the chart's binary.
read -r -a binaries <<<"${HOT_CODE_BINARIES:-multicall webhook}"
for b in "${binaries[@]}"; do
  case $b in
    multicall)
      RUSTFLAGS=$IMAGE_RUSTFLAGS cargo build --profile image --locked \
        --target x86_64-unknown-linux-gnu -p kubesteer --bin kubesteer
      cp target/x86_64-unknown-linux-gnu/image/kubesteer "$work/"
      ;;
    webhook)
      cargo build --profile image -p kubesteer-webhook
      cp target/image/kubesteer-webhook "$work/"
      ;;
    *) die "HOT_CODE_BINARIES: multicall or webhook, not $b" ;;
  esac
done
cargo build --profile image -p kubesteer-certs
hack/cluster.sh up
kubectl=("$bin/kubectl" --kubeconfig "$KUBESTEER_STATE/kubeconfig")
"${kubectl[@]}" apply -f bench/bodies/rbac.yaml >/dev/null
target/image/kubesteer-certs generate --service bench --namespace bench --ip 127.0.0.1 --out-dir "$work/certs" >/dev/null
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing ||
  die "cannot mount tracefs on /sys/kernel/tracing"

# The read-ahead of the block device the binaries are on (put back on exit).
ra_file=/sys/class/block/$(basename "$(df --output=source "$work" | tail -1)")/queue/read_ahead_kb
[ -w "$ra_file" ] || die "cannot set the read-ahead: $ra_file is not writable"
ra=$(cat "$ra_file")
pid=
stop() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
  fi
}
finish() {
  stop
  "${tool[@]}" probe-clear || true
  echo "$ra" >"$ra_file"
  "${kubectl[@]}" delete --ignore-not-found --wait=false -f bench/bodies/watched.yaml >/dev/null 2>&1 || true
  return 0
}
trap finish EXIT
echo 0 >"$ra_file"

start() { # log exe args...
  local logfile=$1
  shift
  KUBECONFIG="$KUBESTEER_STATE/kubeconfig" "$@" --addr "127.0.0.1:$port" \
    --tls-cert-file "$work/certs/tls.crt" --tls-key-file "$work/certs/tls.key" >"$logfile" 2>&1 &
  pid=$!
  for _ in $(seq 1 150); do
    curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null && break
    kill -0 "$pid" || die "$* exited: $(tail -5 "$logfile")"
    sleep 0.2
  done
  # Its watches' first lists, and the code given back after them (webhook/src/cli.rs).
  sleep 10
}
# What the webhook does once started; after each step, `between` (probes: off once hit).
exercise() { # between-command...
  local kind e q
  for kind in scaler welcome memcached; do
    for e in validate mutate; do
      curl -sf -o /dev/null --max-time 300 --cacert "$work/certs/ca.crt" -H 'Content-Type: application/json' \
        --data-binary "@bench/bodies/$kind.json" "https://127.0.0.1:$port/$e/${kind}s" ||
        die "the first $e review of a $kind failed"
      "$@"
    done
  done
  for kind in scaler welcome memcached; do
    for e in validate mutate; do
      "$oha" --no-tui -z 3s -c 32 -m POST -H 'Content-Type: application/json' -D "bench/bodies/$kind.json" \
        --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/$e/${kind}s" >/dev/null
    done
    for q in 500 2000; do
      "$oha" --no-tui -z 2s -c 16 -q "$q" -m POST -H 'Content-Type: application/json' -D "bench/bodies/$kind.json" \
        --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/validate/${kind}s" >/dev/null
    done
    "$@"
  done
  # An object of each watched kind: created, changed three times, deleted.
  "${kubectl[@]}" apply -f bench/bodies/watched.yaml >/dev/null
  for i in 1 2 3; do
    "${kubectl[@]}" label --overwrite -f bench/bodies/watched.yaml "hot-code=$i" >/dev/null
    sleep 2
  done
  "${kubectl[@]}" delete --wait=false -f bench/bodies/watched.yaml >/dev/null
  "$@"
  log "$(date +%T): waiting ${idle}s for the watches to start again"
  sleep "$idle"
  curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null || die "the webhook is not ready"
}

# C libraries whose objects do not come one function to a section (glibc, libgcc): lld keeps
# their code where the link puts it, whatever the list says, so their names are left out (and not
# probed: with probes in glibc's code, a webhook hung on its first request).
archives=()
for a in libc.a libm.a libmvec.a libgcc.a libgcc_eh.a; do
  a=$(gcc -print-file-name="$a")
  # libm.a is a linker script naming the real archive.
  grep -q "GNU ld script" "$a" 2>/dev/null && a=$(grep -o '/[^ ]*libm-[^ ]*\.a' "$a")
  [ -f "$a" ] && archives+=("$a")
done
nm --defined-only "${archives[@]}" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[tTwWiI]$/ {print $3}' | sort -u >"$work/unmovable"

# The functions one webhook command runs once started, into a file.
profile() { # list exe args...
  local list=$1 exe=$2
  shift
  # 1. Pages.
  sync
  start "$list.pages.log" "$@"
  "${tool[@]}" pageout "$pid" "$exe"
  exercise true
  "${tool[@]}" pages "$pid" "$exe" "$list.all"
  awk 'NR == FNR {skip[$0] = 1; next} !skip[$0]' "$work/unmovable" "$list.all" >"$list.pages"
  stop
  # 2. Functions: a probe on each candidate, counted from after start-up.
  "${tool[@]}" probe-add "$exe" "$list.pages"
  start "$list.log" "$@"
  "${tool[@]}" probe-count "$work/base.json"
  "${tool[@]}" probe-on "$pid"
  exercise "${tool[@]}" probe-quiet "$work/base.json"
  "${tool[@]}" probe-hit "$work/base.json" "$list"
  stop
  "${tool[@]}" probe-clear
}
lists=()
for b in "${binaries[@]}"; do
  case $b in
    multicall) profile "$work/multicall.order" "$work/kubesteer" webhook ;;
    webhook) profile "$work/webhook.order" "$work/kubesteer-webhook" ;;
  esac
  lists+=("$work/$b.order")
done
awk '!seen[$0]++' "${lists[@]}" >"$out"
log "$(wc -l <"$out") functions written to $out"
