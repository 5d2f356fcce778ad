#!/usr/bin/env python3
"""No function longer than 80 lines in shim/, 100 in policy/ and tools/inspect/.

A function that long does several things; split by what it does, each part
can be named for it and read alone (issue 16, issue 26; shim/'s limit went
from 100 to 80 with issue 35).  A function's length
is counted from the line its name stands on to its closing brace.  Prints TAP
lines, with its plan.

usage: check_lengths.py ROOT [--list]   (--list: every function, longest first)
(tests/t/23-layers.t runs it through check_layers.py)
"""
import os
import re
import sys

# Each folder's limit, in lines.
LIMITS = {"shim": 80, "policy": 100, "tools/inspect": 100}
FOLDERS = list(LIMITS)
# Paths exempt from the limit: none (shim/ipc/ was, until issue 26).
EXEMPT = []


def blank_out(text):
    """The text with comments, strings and character constants turned to
    spaces (newlines kept), so that braces in them count for nothing."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, length) of each function defined in a C file."""
    text = blank_out(open(path, encoding="utf-8", errors="replace").read())
    # Preprocessor lines (macros may hold braces) count as blank.
    lines = [("" if l.lstrip().startswith("#") else l) for l in text.split("\n")]
    depth, start, found = 0, None, []
    head = []  # the text since the last top-level ';' or '}'
    for no, line in enumerate(lines, 1):
        for c in line:
            if depth == 0:
                if c == "{":
                    sig = "".join(t for _, t in head)
                    m = re.search(r"([A-Za-z_]\w*)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*$", sig)
                    if m and not re.search(r"=\s*$", sig[:m.start()]):
                        # the line the name stands on
                        first, pos = no, 0
                        for ln, t in head:
                            if pos + len(t) > m.start(1):
                                first = ln
                                break
                            pos += len(t)
                        start = (m.group(1), first)
                    else:
                        start = None
                    depth = 1
                    head = []
                    continue
                if c == ";":
                    head = []
                    continue
                head.append((no, c))
            else:
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        if start:
                            found.append((start[0], start[1], no - start[1] + 1))
                        start, head = None, []
        if depth == 0:
            head.append((no, "\n"))
    return found


def sources(root):
    for top in FOLDERS:
        for d, _, files in sorted(os.walk(os.path.join(root, top))):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".inc")):
                    yield os.path.relpath(os.path.join(d, f), root)


def all_functions(root):
    """(length, file, line, name) of every function, longest first."""
    rows = []
    for rel in sources(root):
        for name, line, length in functions(os.path.join(root, rel)):
            rows.append((length, rel, line, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    return rows


def limit_of(rel):
    """The limit of the folder that holds `rel`."""
    return next(LIMITS[top] for top in FOLDERS if rel.startswith(top + "/"))


def describe():
    """What the check says, in words: "no function over 80 lines in shim/, 100 in ..."."""
    parts, seen = [], []
    for top in FOLDERS:
        if LIMITS[top] in seen:
            parts[seen.index(LIMITS[top])][1].append(top + "/")
        else:
            seen.append(LIMITS[top])
            parts.append((LIMITS[top], [top + "/"]))
    words = [f"{n}{' lines' if i == 0 else ''} in {' and '.join(tops)}" for i, (n, tops) in enumerate(parts)]
    return "no function over " + ", ".join(words)


def too_long(root):
    """The functions over their folder's limit, outside the exempt folders."""
    return [r for r in all_functions(root)
            if r[0] > limit_of(r[1]) and not any(r[1].startswith(e) for e in EXEMPT)]


def main():
    root = sys.argv[1]
    if "--list" in sys.argv[2:]:
        for length, rel, line, name in all_functions(root):
            print(f"{length:5d} {rel}:{line} {name}")
        return 0
    bad = too_long(root)
    print("1..1")
    print(f"{'ok' if not bad else 'not ok'} 1 - {describe()} (exempt for now: {', '.join(EXEMPT)})")
    for length, rel, line, name in bad:
        print(f"#   {rel}:{line} {name}: {length} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
