#!/usr/bin/env python3
"""The functions NCCL's public headers declare, read from the text (no compiler,
no CUDA headers needed), for tests/t/09-abi.t.

    header_functions.py DIR [--comm] [--device]

DIR holds nccl.h and, from 2.28 on, nccl_device.h and nccl_device/.  Prints one
function name a line, sorted: every `nccl*` function declared (the `pnccl`
profiling aliases folded in); with --comm only those with an `ncclComm_t`
parameter (a communicator, or where one is returned); with --device only the
device API's host functions (nccl_device.h and nccl_device/**, not nccl.h).
Comments and preprocessor lines are dropped and declarations joined across
lines, so a declaration split over lines (2.30's) counts like any other.
"""
import os
import re
import sys

DECL = re.compile(r"\b(p?nccl[A-Za-z0-9_]*)\s*\(([^()]*)\)\s*$")


def declarations(path):
    with open(path, errors="replace") as fh:
        text = fh.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    text = re.sub(r"\s+", " ", text)
    for stmt in text.split(";"):
        m = DECL.search(stmt.strip())
        if not m or "typedef" in stmt[: m.start()].split("}")[-1]:
            continue
        name = m.group(1)
        yield (name[1:] if name.startswith("pnccl") else name), m.group(2)


def headers(root, device):
    if not device:
        yield os.path.join(root, "nccl.h")
    top = os.path.join(root, "nccl_device.h")
    if os.path.exists(top):
        yield top
    for d, _, files in os.walk(os.path.join(root, "nccl_device")):
        for f in sorted(files):
            if f.endswith(".h"):
                yield os.path.join(d, f)


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    root, comm, device = argv[0], "--comm" in argv, "--device" in argv
    names = set()
    for h in headers(root, device):
        if not os.path.exists(h):
            continue
        for name, params in declarations(h):
            if not comm or re.search(r"\bncclComm_t\b", params):
                names.add(name)
    print("\n".join(sorted(names)))


if __name__ == "__main__":
    main(sys.argv[1:])
