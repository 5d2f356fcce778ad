#!/usr/bin/env python3
"""The layering of shim/ (docs/design.md, "Layers"), checked on the code.

Each folder may include and call only itself and the folders below it; no
files may call each other in a loop.  Calls are read from the objects (`nm`):
a symbol one object needs and another defines is a call from the first file to
the second, whatever header declared it.  Inside a folder a file also depends
on what it includes: a loop there can run through a header's types, macros and
inline functions, which no object shows (x.h goes with x.c, as one unit).  And
no function is over its folder's limit (check_lengths.py: 80 lines in shim/,
100 in policy/ and tools/inspect/).  Prints TAP lines (the caller numbers
nothing: this prints the plan).

usage: check_layers.py ROOT OBJDIR   (OBJDIR holds <folder>/<file>.o)
"""
import os
import re
import subprocess
import sys

import check_lengths

# Top to bottom; policy/ is below all of them.  evidence, ipc and rendezvous
# stand side by side: none may use another (action/ carries an ipc export
# through the rendezvous).
LAYERS = ["interpose", "comm", "action", "registry", "evidence", "ipc", "rendezvous", "nccl", "base"]
LEVEL = {"interpose": 0, "comm": 1, "action": 2, "registry": 3, "evidence": 4, "ipc": 4, "rendezvous": 4,
         "nccl": 5, "base": 6}


def above_or_beside(target, source):
    """Whether folder `target` is one that `source` may not use."""
    return target != source and LEVEL[target] <= LEVEL[source]
# libc functions the shim interposes (exported by the version script): a call
# to one of them is a call to libc's, the interposer only sits in between.
INTERPOSED_LIBC = {"getenv", "dlsym", "dlvsym", "_exit", "_Exit"}


def sources(root):
    for d in LAYERS:
        for f in sorted(os.listdir(os.path.join(root, "shim", d))):
            yield d, f


def include_violations(root):
    where = {f: d for d, f in sources(root)}
    bad = []
    for d, f in sources(root):
        text = open(os.path.join(root, "shim", d, f), encoding="utf-8").read()
        for inc in re.findall(r'#include "([^"]+)"', text):
            t = where.get(os.path.basename(inc))
            if inc.startswith("policy/") or t is None:
                continue
            if above_or_beside(t, d):
                bad.append(f"shim/{d}/{f} includes {t}/{inc}")
    return bad


def symbols(obj):
    out = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, needed = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            needed.add(name)
        elif kind in "TDBRCVWtdbr" and kind.isupper():
            defined.add(name)
    return defined, needed


def call_graph(objdir):
    defs, needs = {}, {}
    for d in LAYERS:
        for o in sorted(os.listdir(os.path.join(objdir, d))):
            key = f"shim/{d}/{o[:-2]}.c"
            dset, nset = symbols(os.path.join(objdir, d, o))
            needs[key] = nset
            for s in dset:
                defs[s] = key
    edges = {k: {} for k in needs}
    for k, nset in needs.items():
        for s in nset:
            t = defs.get(s)
            if t and t != k and s not in INTERPOSED_LIBC:
                edges[k].setdefault(t, []).append(s)
    return edges


def folder(key):
    return key.split("/")[1]


def loops(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return comps


# Folders whose files may still depend on each other in a loop: none (shim/ipc/
# was, until issue 26 gave its shared types headers of their own and its map
# cache a file).
LOOP_EXEMPT = set()


def unit(key):
    """A file's unit: x.c and x.h are one (the header is the .c's face)."""
    return re.sub(r"\.(c|h)$", "", key)


def folder_graph(root, edges):
    """Within each folder, unit -> units it calls or includes."""
    g = {}
    for d in LAYERS:
        for f in sorted(os.listdir(os.path.join(root, "shim", d))):
            key = f"shim/{d}/{f}"
            u = unit(key)
            g.setdefault(u, set())
            text = open(os.path.join(root, "shim", d, f), encoding="utf-8").read()
            for inc in re.findall(r'#include "([^"/]+)"', text):
                if os.path.exists(os.path.join(root, "shim", d, inc)) and unit(f"shim/{d}/{inc}") != u:
                    g[u].add(unit(f"shim/{d}/{inc}"))
    for a, targets in edges.items():
        for b in targets:
            if folder(a) == folder(b) and unit(a) != unit(b):
                g[unit(a)].add(unit(b))
    return {u: {v: [] for v in vs} for u, vs in g.items()}


def main():
    root, objdir = sys.argv[1], sys.argv[2]
    results = []
    bad = include_violations(root)
    results.append((not bad, "no shim/ file includes a header of a folder above or beside its own", bad, None))
    edges = call_graph(objdir)
    up = [f"{a} calls {b} ({', '.join(sorted(s)[:4])})"
          for a in sorted(edges) for b, s in sorted(edges[a].items()) if above_or_beside(folder(b), folder(a))]
    results.append((not up, "no shim/ file calls a function of a folder above or beside its own", up, None))
    comps = loops(edges)
    desc = [" <-> ".join(c) for c in comps]
    results.append((not comps, "no shim/ files call each other in a loop", desc, None))
    inner = [c for c in loops(folder_graph(root, edges)) if folder(c[0]) not in LOOP_EXEMPT]
    desc = [" <-> ".join(c) for c in inner]
    results.append((not inner, "no files of one folder call or include each other in a loop"
                    + (f" (exempt: {', '.join(sorted(LOOP_EXEMPT))})" if LOOP_EXEMPT else ""), desc, None))
    long_ = check_lengths.too_long(root)
    results.append((not long_, check_lengths.describe()
                    + (f" (exempt: {', '.join(check_lengths.EXEMPT)})" if check_lengths.EXEMPT else ""),
                    [f"{rel}:{line} {name}: {n} lines" for n, rel, line, name in long_], None))
    print(f"1..{len(results)}")
    for i, (good, what, detail, todo) in enumerate(results, 1):
        print(f"{'ok' if good else 'not ok'} {i} - {what}{' # TODO ' + todo if todo else ''}")
        for line in detail:
            print(f"#   {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
