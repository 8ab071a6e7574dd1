#!/usr/bin/env python3
"""The steps of hack/hot-code.sh that read a running webhook's memory or set uprobes.

  hot-code.py pageout PID EXE        the file's pages out of the process and the page cache
  hot-code.py pages PID EXE OUT      the functions that begin on EXE's code pages present in PID
  hot-code.py probe-add EXE LIST     a uprobe at the entry of each function of LIST in EXE, off
  hot-code.py probe-on PID           turns every probe on; those it could not set in PID (an
                                     instruction the kernel cannot step) count as hit
  hot-code.py probe-count OUT        the number of probes hit so far, into OUT (a baseline)
  hot-code.py probe-quiet BASE       disables the probes hit since BASE (so that they cost no more)
  hot-code.py probe-hit BASE OUT     the functions whose probes were hit since BASE, in LIST's order
  hot-code.py probe-clear            disables and removes every probe of this script

Uprobes are the kernel's breakpoints on a file's instructions (tracefs, root): a probe's count
goes up each time its function is entered, whatever the process, so a function counts exactly
when it ran. Pages are coarser: every function that begins on a page some other function touched
looks as if it ran.
"""
import ctypes
import json
import os
import struct
import subprocess
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")
TRACEFS = "/sys/kernel/tracing"
GROUP = "kubesteer_hot"
STATE = os.environ.get("HOT_CODE_PROBES", "/tmp/kubesteer-hot-code-probes.json")


def code_delta(exe):
    """The text segment's vaddr - file offset."""
    out = subprocess.run(["readelf", "-lW", exe], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["LOAD"] and "E" in f[6:-1]:
            return int(f[2], 16) - int(f[1], 16)
    sys.exit(f"{exe}: no executable segment")


def functions(exe):
    """(address, size, demangled name) of every function, in address order."""
    out = subprocess.run(["nm", "--defined-only", "-S", "-n", "-C", exe], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        f = line.split(maxsplit=3)
        if len(f) == 4 and f[2] in "tTwW":
            yield int(f[0], 16), int(f[1], 16), f[3]


def mappings(pid, exe, perms):
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) >= 6 and f[5] == exe and f[1] in perms:
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            yield lo, hi, int(f[2], 16)


def pageout(pid, exe):
    libc = ctypes.CDLL(None, use_errno=True)

    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    sys_pidfd_open, sys_process_madvise, madv_pageout = 434, 440, 21
    pidfd = libc.syscall(sys_pidfd_open, int(pid), 0)
    if pidfd < 0:
        sys.exit(f"pidfd_open: {os.strerror(ctypes.get_errno())}")
    for lo, hi, _ in mappings(pid, exe, ("r-xp", "r--p")):
        iov = Iovec(lo, hi - lo)
        if libc.syscall(sys_process_madvise, pidfd, ctypes.byref(iov), 1, madv_pageout, 0) < 0:
            sys.exit(f"process_madvise {lo:#x}: {os.strerror(ctypes.get_errno())}")
    fd = os.open(exe, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def pages(pid, exe, out):
    present = set()  # file offsets of present code pages
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        for lo, hi, off in mappings(pid, exe, ("r-xp",)):
            pm.seek(lo // PAGE * 8)
            data = pm.read((hi - lo) // PAGE * 8)
            for i in range(len(data) // 8):
                if struct.unpack_from("<Q", data, i * 8)[0] >> 63:
                    present.add(off + i * PAGE)
    delta = code_delta(exe)
    # A function that ran had the page of its first instruction touched.
    names = [n for a, _, n in functions(exe) if (a - delta) // PAGE * PAGE in present]
    write_names(out, names)
    print(f"{len(present)} code pages present ({len(present) * PAGE // 1024} KiB); "
          f"{len(names)} functions begin on them", file=sys.stderr)


def write_names(out, names):
    seen = set()
    names = [n for n in names if not (n in seen or seen.add(n))]
    with open(out, "w") as fh:
        fh.write("".join(n + "\n" for n in names))


def tracefs(path, text):
    fd = os.open(f"{TRACEFS}/{path}", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def probe_add(exe, listing):
    wanted = [line.rstrip("\n") for line in open(listing)]
    index = {n: i for i, n in enumerate(wanted)}
    delta = code_delta(exe)
    at = {}  # address: names (aliases share one probe)
    for a, _, n in functions(exe):
        if n in index:
            at.setdefault(a, []).append(n)
    probes, offsets = {}, {}
    for i, (a, names) in enumerate(sorted(at.items())):
        tracefs("uprobe_events", f"p:{GROUP}/p{i} {exe}:{a - delta:#x}\n")
        probes[f"p{i}"] = names
        offsets[f"p{i}"] = a - delta
    json.dump({"exe": exe, "order": wanted, "probes": probes, "offsets": offsets}, open(STATE, "w"))
    print(f"{len(probes)} probes on the {len(wanted)} listed functions", file=sys.stderr)


def probe_on(pid):
    """Turns the probes on, and finds those not set in PID's code (no breakpoint byte at their
    function's entry): what they would have said is unknown, so they count as hit."""
    try:
        tracefs(f"events/{GROUP}/enable", "1")
    except OSError as e:
        # ENOTSUPP: an instruction the kernel cannot step; the other probes are on.
        print(f"some probes could not be set: {e}", file=sys.stderr)
    state = json.load(open(STATE))
    # A file offset X of a mapping "lo-hi r-xp off" is at lo + X - off.
    base = {lo - off for lo, _, off in mappings(pid, state["exe"], ("r-xp",))}
    if len(base) != 1:
        sys.exit(f"{state['exe']} is not mapped once in {pid}")
    base = base.pop()
    unset = []
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for p, offset in state["offsets"].items():
            mem.seek(base + offset)
            if mem.read(1) != b"\xcc":
                unset.append(p)
    state["unset"] = unset
    json.dump(state, open(STATE, "w"))
    print(f"{len(unset)} of {len(state['offsets'])} probes not set: they count as hit", file=sys.stderr)


def counts():
    """Each of this script's probes' hits so far (uprobe_profile names a probe by its file and its
    name without the group, so other probes on other files are told apart by the file)."""
    exe = json.load(open(STATE))["exe"]
    hits = {}
    for line in open(f"{TRACEFS}/uprobe_profile"):
        f = line.split()
        if len(f) >= 3 and f[0] == exe:
            hits[f[1]] = int(f[-1])
    return hits


def hit_since(base):
    before = json.load(open(base))
    return {p for p, n in counts().items() if n > before.get(p, 0)}


def probe_quiet(base):
    quieted = 0
    for p in hit_since(base):
        path = f"{TRACEFS}/events/{GROUP}/{p}/enable"
        if os.path.exists(path) and open(path).read().strip() == "1":
            tracefs(f"events/{GROUP}/{p}/enable", "0")
            quieted += 1
    print(f"{quieted} more functions ran", file=sys.stderr)


def probe_hit(base, out):
    state = json.load(open(STATE))
    ran = {n for p in hit_since(base) | set(state.get("unset", [])) for n in state["probes"].get(p, [])}
    names = [n for n in state["order"] if n in ran]
    write_names(out, names)
    print(f"{len(names)} of {len(state['order'])} listed functions ran", file=sys.stderr)


def probe_clear():
    if not os.path.isdir(f"{TRACEFS}/events/{GROUP}"):
        return
    tracefs(f"events/{GROUP}/enable", "0")
    for p in os.listdir(f"{TRACEFS}/events/{GROUP}"):
        if p.startswith("p"):
            tracefs("uprobe_events", f"-:{GROUP}/{p}\n")


def main(argv):
    commands = {
        "pageout": (pageout, 2), "pages": (pages, 3), "probe-add": (probe_add, 2),
        "probe-count": (lambda out: json.dump(counts(), open(out, "w")), 1),
        "probe-on": (probe_on, 1),
        "probe-quiet": (probe_quiet, 1), "probe-hit": (probe_hit, 2), "probe-clear": (probe_clear, 0),
    }
    if len(argv) < 2 or argv[1] not in commands or len(argv) - 2 != commands[argv[1]][1]:
        sys.exit(__doc__)
    commands[argv[1]][0](*argv[2:])


if __name__ == "__main__":
    main(sys.argv)
