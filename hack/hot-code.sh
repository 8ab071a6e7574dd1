#!/usr/bin/env bash
# Writes webhook/hot-code.order: the functions the webhook runs while it answers reviews, which
# the linker puts next to each other at the start of the code (webhook/build.rs,
# kubesteer/build.rs: lld's --symbol-ordering-file). A webhook's resident memory is mostly its
# own code pages, and the kernel maps 64 KiB around each page touched: packed together, the
# review path's code takes a few such windows instead of one in every part of the binary.
#
#   hack/hot-code.sh            # profile the webhook binaries, rewrite the order file
#
# Two binaries are profiled, the image's static multi-call `kubesteer webhook` (what the chart
# runs) and the webhook-only build of the image profile (what the benchmarks run), each built
# without the order; the list is the first's functions, then those only the second ran.
#
# How the functions are found, exactly and not by sampling: the block device's read-ahead is set
# to 0 for the run (and put back; needs root), a webhook starts, its file's pages are taken
# out of it and out of the page cache, and then every kind's
# validate and mutate path is loaded with oha. Without read-ahead and with nothing else of the
# file cached, a fault maps only the page it needs (fault-around maps cached pages only), so
# the code pages present afterwards (/proc/PID/pagemap) are the pages the reviews ran. The
# functions that begin on those pages, by the binary's symbol table, are written in address order, by
# their demangled names (hack/cc-link.sh finds them in the link at hand).
#
# Run it after a change that moves the review path's code (new dependencies, a new compiler, a
# new kind); names it lists that a build no longer has are ignored by the linker, so a stale
# file costs memory, never a build. BENCH_CLUSTER/BENCH_STATE pick the cluster as in the benches.
. "$(dirname "$0")/lib.sh"
cd "$root"
export KUBESTEER_CLUSTER=${BENCH_CLUSTER:-${KUBESTEER_CLUSTER:-kubesteer}}
export KUBESTEER_STATE=${BENCH_STATE:-${KUBESTEER_STATE:-$root/.kubesteer}}
oha="$cache/tools/bin/oha"
port=${HOT_CODE_PORT:-19644}
out=${HOT_CODE_OUT:-webhook/hot-code.order}
work="$root/bench/tmp/hot-code"
rm -rf "$work" && mkdir -p "$work"
[ -x "$oha" ] || cargo install oha --locked --root "$cache/tools"
# Built without the order file, so that what is measured is where the code falls by itself.
export KUBESTEER_HOT_CODE_ORDER=off
RUSTFLAGS=$IMAGE_RUSTFLAGS cargo build --profile image --locked \
  --target x86_64-unknown-linux-gnu -p kubesteer --bin kubesteer
cargo build --profile image -p kubesteer-webhook -p kubesteer-certs
cp target/x86_64-unknown-linux-gnu/image/kubesteer target/image/kubesteer-webhook "$work/"
hack/cluster.sh up
"$bin/kubectl" --kubeconfig "$KUBESTEER_STATE/kubeconfig" apply -f bench/bodies/rbac.yaml >/dev/null
target/image/kubesteer-certs generate --service bench --namespace bench --ip 127.0.0.1 --out-dir "$work/certs" >/dev/null

# The read-ahead of the block device the binaries are on (put back on exit).
ra_file=/sys/class/block/$(basename "$(df --output=source "$work" | tail -1)")/queue/read_ahead_kb
[ -w "$ra_file" ] || die "cannot set the read-ahead: $ra_file is not writable"
ra=$(cat "$ra_file")
pid=
finish() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  echo "$ra" >"$ra_file"
  return 0
}
trap finish EXIT
echo 0 >"$ra_file"

# The functions one webhook command runs while it answers reviews, into a file.
profile() { # list exe args...
  local list=$1 exe=$2
  shift
  sync
  KUBECONFIG="$KUBESTEER_STATE/kubeconfig" "$@" --addr "127.0.0.1:$port" \
    --tls-cert-file "$work/certs/tls.crt" --tls-key-file "$work/certs/tls.key" >"$list.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 150); do
    curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null && break
    kill -0 "$pid" || die "$* exited: $(tail -5 "$list.log")"
    sleep 0.2
  done
  # Every page of the file out of the process and out of the page cache (process_madvise
  # MADV_PAGEOUT: start-up's, and what its watches ran since), so that what comes back is what
  # the reviews run.
python3 - "$pid" "$exe" <<'PY'
import ctypes, os, sys
pid, exe = int(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
SYS_PIDFD_OPEN, SYS_PROCESS_MADVISE, MADV_PAGEOUT = 434, 440, 21
pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
if pidfd < 0:
    sys.exit(f"pidfd_open: {os.strerror(ctypes.get_errno())}")
for line in open(f"/proc/{pid}/maps"):
    f = line.split()
    if len(f) >= 6 and f[5] == exe and f[1] in ("r-xp", "r--p"):
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        iov = Iovec(lo, hi - lo)
        if libc.syscall(SYS_PROCESS_MADVISE, pidfd, ctypes.byref(iov), 1, MADV_PAGEOUT, 0) < 0:
            sys.exit(f"process_madvise {f[0]}: {os.strerror(ctypes.get_errno())}")
fd = os.open(exe, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
PY
  for kind in scaler welcome memcached; do
    for e in validate mutate; do
      "$oha" --no-tui -z 3s -c 8 -m POST -H 'Content-Type: application/json' -D "bench/bodies/$kind.json" \
        --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/$e/${kind}s" >/dev/null
    done
  done
  curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:$port/readyz" >/dev/null
  # The executable's code pages present now, and the functions that begin on them.
python3 - "$pid" "$exe" "$list" <<'PY'
import os, struct, subprocess, sys
pid, exe, out = sys.argv[1], sys.argv[2], sys.argv[3]
PAGE = os.sysconf("SC_PAGE_SIZE")
maps = []
for line in open(f"/proc/{pid}/maps"):
    f = line.split()
    if len(f) >= 6 and f[5] == exe and f[1] == "r-xp":
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        maps.append((lo, hi, int(f[2], 16)))
present = set()  # file offsets of present code pages
with open(f"/proc/{pid}/pagemap", "rb") as pm:
    for lo, hi, off in maps:
        pm.seek(lo // PAGE * 8)
        data = pm.read((hi - lo) // PAGE * 8)
        for i in range(len(data) // 8):
            if struct.unpack_from("<Q", data, i * 8)[0] >> 63:
                present.add(off + i * PAGE)
# Section addresses to file offsets: the text segment's (vaddr - offset).
delta = None
for line in subprocess.run(["readelf", "-lW", exe], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if f[:1] == ["LOAD"] and "E" in f[6:-1]:
        delta = int(f[2], 16) - int(f[1], 16)
names = []
code = 0
# Demangled: the build that links with the list names the same functions with other hashes.
for line in subprocess.run(["nm", "--defined-only", "-S", "-n", "-C", exe], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split(maxsplit=3)
    if len(f) != 4 or f[2] not in "tTwW":
        continue
    addr, size = int(f[0], 16), int(f[1], 16)
    # A function that ran had the page of its first instruction touched; one that only shares
    # its last pages with a function that ran did not run.
    if (addr - delta) // PAGE * PAGE in present:
        names.append(f[3])
        code += size
seen = set()
names = [n for n in names if not (n in seen or seen.add(n))]
with open(out, "w") as fh:
    fh.write("\n".join(names) + "\n")
print(f"{len(present)} code pages present ({len(present) * PAGE // 1024} KiB); {len(names)} functions, "
      f"{code // 1024} KiB", file=sys.stderr)
PY
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}
profile "$work/multicall.order" "$work/kubesteer" webhook
profile "$work/webhook.order" "$work/kubesteer-webhook"
awk '!seen[$0]++' "$work/multicall.order" "$work/webhook.order" >"$out"
log "$(wc -l <"$out") functions written to $out"
