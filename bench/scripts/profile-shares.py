#!/usr/bin/env python3
"""Where an apiserver's CPU went, by kind of work: reads Go CPU profiles (`go tool pprof -traces`)
and prints, as JSON, each profile's CPU seconds and the share of its samples whose stack passes
through each kind of work below (a sample can count in more than one: a status write's managed
fields count in both). Used on the profiles that BENCH_APISERVER_PROFILE makes in peers runs:

    bench/scripts/profile-shares.py bench/tmp/controller/*-1.pprof

Each profile is keyed by its file name without .pprof (kubesteer-1: kubesteer, run 1).
"""
import json
import os
import re
import subprocess
import sys

KINDS = {
    "managed fields": r"managedfields/internal\.\(\*FieldManager\)",
    "custom resource status writes": r"customresource\.\(\*StatusREST\)\.Update",
    "creates": r"handlers\.CreateResource",
    "updates and patches": r"handlers\.(UpdateResource|PatchResource)",
    "serving watches": r"handlers\.\(\*WatchServer\)\.HandleHTTP",
    "encoding watch events": r"handlers\.\(\*watchEncoder\)\.Encode",
    "Go's garbage collector": r"runtime\.gcBgMarkWorker",
}
VALUE = re.compile(r"^\s+(\d+(?:\.\d+)?)(ms|s)\s+(\S.*)$")


def shares(path):
    out = subprocess.run(["go", "tool", "pprof", "-traces", path], capture_output=True, text=True, check=True).stdout
    total, by_kind, stack, value = 0.0, dict.fromkeys(KINDS, 0.0), [], 0.0

    def close():
        nonlocal total
        if not stack:
            return
        total += value
        for kind, pattern in KINDS.items():
            if any(re.search(pattern, frame) for frame in stack):
                by_kind[kind] += value

    for line in out.splitlines():
        if line.startswith("-----------+"):
            close()
            stack, value = [], 0.0
            continue
        m = VALUE.match(line)
        if m:
            value = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
            stack.append(m.group(3))
        elif stack and line.strip():
            stack.append(line.strip())
    close()
    if total == 0:
        raise SystemExit(f"{path}: no samples")
    return {"cpu_s": round(total, 2), "shares_percent": {k: round(100 * v / total, 1) for k, v in by_kind.items()}}


if len(sys.argv) < 2:
    raise SystemExit("usage: profile-shares.py PROFILE.pprof...")
print(json.dumps({os.path.basename(p).removesuffix(".pprof"): shares(p) for p in sys.argv[1:]}, indent=2))
