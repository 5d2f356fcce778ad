#!/usr/bin/env python3
"""The record schema (docs/records.md, "Every key") held against the code.

Reads, from the sources as text:
  - every key the shim writes: the key argument of each record.h writer
    (the jw_* functions whose parameter is named `key`) in shim/; a key that
    is a parameter of the function around the call is followed to that
    function's callers (a helper such as record_two(w, "copy", "sm", ...));
    any other key expression must be a family row of the table, which names
    where its keys come from (an array of names, or an X-macro's .def);
  - every key ncclshim-inspect reads: the key argument of each function of
    tools/inspect/ named get_* or enter_* that has a `key` parameter, and of
    json_object_get;
  - every key of the JSON examples in docs/records.md;
  - the table: one row per key, with the files that write it.
Fails on a key written but not in the table (or not by the files it names),
a row no file writes, a family whose code is gone, a key inspect reads that
nothing writes, and a key in an example that nothing writes.  Prints TAP.

usage: record_keys.py ROOT          (--list prints what was read, one per line)
"""
import glob
import os
import re
import sys

TABLE_HEADING = "## Every key"


def strip_comments(text):
    """C text with comments blanked (newlines kept), string literals intact."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_args(text, open_paren):
    """The top-level arguments of the call whose '(' is at open_paren."""
    args, depth, start, i = [], 0, open_paren + 1, open_paren
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < len(text) and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i].strip())
                return args
        elif c == "," and depth == 1:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    return args


DEF_RE = re.compile(r"^[A-Za-z_][^;{}()=#]*?\b([A-Za-z_]\w*)\s*\(([^;{}()]*)\)\s*\{", re.M)


def param_names(params):
    names = []
    for p in params.split(","):
        m = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*$", p.strip())
        names.append(m.group(1) if m else "")
    return names


class Source:
    def __init__(self, root, rel):
        self.rel = rel
        self.text = strip_comments(open(os.path.join(root, rel), encoding="utf-8").read())
        found = list(DEF_RE.finditer(self.text))
        self.defs = [(m.start(), m.group(1), param_names(m.group(2))) for m in found]
        self.def_names = {m.start(1) for m in found}

    def enclosing(self, pos):
        fn = None
        for start, name, params in self.defs:
            if start > pos:
                break
            fn = (name, params)
        return fn

    def line(self, pos):
        return self.text.count("\n", 0, pos) + 1

    def calls(self, fname):
        for m in re.finditer(r"\b%s\s*\(" % re.escape(fname), self.text):
            if m.start() not in self.def_names:
                yield m.end() - 1, call_args(self.text, m.end() - 1)


def key_functions(sources, name_re, extra=()):
    """Functions with a `key` parameter whose names match name_re: name -> index."""
    out = dict(extra)
    for s in sources:
        for _, name, params in s.defs:
            if re.match(name_re, name) and "key" in params:
                out[name] = params.index("key")
    return out


def header_key_functions(root, header, name_re):
    text = strip_comments(open(os.path.join(root, header), encoding="utf-8").read())
    out = {}
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(([^;{}()]*)\)\s*;", text):
        params = param_names(m.group(2))
        if re.match(name_re, m.group(1)) and "key" in params:
            out[m.group(1)] = params.index("key")
    return out


def literal(arg):
    m = re.fullmatch(r'"((?:[^"\\]|\\.)*)"', arg)
    return m.group(1) if m else None


def written_keys(root):
    """(literal keys: {key: set(files)}, dynamic sites: {(file, expr)}, errors)."""
    sources = [Source(root, os.path.relpath(p, root)) for p in sorted(glob.glob(os.path.join(root, "shim/*/*.c")))]
    writers = header_key_functions(root, "shim/base/record.h", r"jw_")
    keys, dynamic, seen = {}, set(), set()

    def follow(fname, index, depth):
        if (fname, index) in seen or depth > 4:
            return
        seen.add((fname, index))
        for s in sources:
            for pos, args in s.calls(fname):
                if index >= len(args):
                    continue
                take(s, pos, args[index], depth)

    def take(s, pos, arg, depth):
        if arg == "NULL":
            return  # an array's element: no key
        lit = literal(arg)
        if lit is not None:
            keys.setdefault(lit, set()).add(s.rel)
            return
        fn = s.enclosing(pos)
        if fn and re.fullmatch(r"[A-Za-z_]\w*", arg) and arg in fn[1]:
            follow(fn[0], fn[1].index(arg), depth + 1)
            return
        dynamic.add((s.rel, re.sub(r"\s+", "", arg)))

    for name, index in writers.items():
        for s in sources:
            for pos, args in s.calls(name):
                if index < len(args):
                    take(s, pos, args[index], 0)
    return keys, dynamic


def read_keys(root):
    sources = [Source(root, os.path.relpath(p, root)) for p in sorted(glob.glob(os.path.join(root, "tools/inspect/*.c")))]
    readers = key_functions(sources, r"(get|enter)_", {"json_object_get": 1})
    keys = {}
    for name, index in readers.items():
        for s in sources:
            for _, args in s.calls(name):
                if index < len(args) and literal(args[index]) is not None:
                    keys.setdefault(literal(args[index]), set()).add(s.rel)
    return keys


def names_from(root, rel, name):
    """String names of an array's initializer, an X-macro's first arguments in
    a .def, or a designated member's strings (`.record_key`: every
    `.record_key = "..."` of the file)."""
    text = strip_comments(open(os.path.join(root, rel), encoding="utf-8").read())
    if name.startswith("."):
        return set(re.findall(r'%s\s*=\s*"((?:[^"\\]|\\.)*)"' % re.escape(name), text))
    if rel.endswith(".def"):
        return {m.group(1) for m in re.finditer(r"^\s*%s\s*\(\s*([A-Za-z_]\w*)" % re.escape(name), text, re.M)}
    m = re.search(r"\b%s\s*\[[^\]]*\]\s*=\s*\{" % re.escape(name), text)
    if not m:
        return set()
    body = ",".join(call_args(text, m.end() - 1))  # designated ([OP_X] = "X") or not
    return set(re.findall(r'"((?:[^"\\]|\\.)*)"', body))


def table(root):
    """Rows of docs/records.md's table: [(line, key, files, family)] where
    family is None or (expr, [(file, name), ...])."""
    rows, on = [], False
    for n, line in enumerate(open(os.path.join(root, "docs/records.md"), encoding="utf-8"), 1):
        if line.startswith("## "):
            on = line.strip() == TABLE_HEADING
            continue
        if not on or not line.startswith("|") or re.match(r"\|\s*(key|-)", line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3:
            continue
        key = re.sub(r"^`|`$", "", cells[0])
        files = re.findall(r"`([^`]+)`", cells[2])
        family = None
        if len(cells) > 3 and cells[3]:
            ticks = re.findall(r"`([^`]+)`", cells[3])
            if ticks:
                family = (re.sub(r"\s+", "", ticks[0]), list(zip(ticks[1::2], ticks[2::2])))
        rows.append((n, key, files, family))
    return rows


def documented_keys(root):
    """Keys docs/records.md describes outside its table of every key: those of
    its JSON examples, and the first column of its tables of keys (a heading
    "key" or "field"; `decision.by` names `by`)."""
    text = open(os.path.join(root, "docs/records.md"), encoding="utf-8").read()
    text = text.split("\n" + TABLE_HEADING + "\n")[0]
    keys = set()
    for block in re.findall(r"```json\n(.*?)```", text, re.S):
        keys.update(re.findall(r'"([^"\\]+)"\s*:', block))
    keys.discard("...")
    on = False
    for line in text.splitlines():
        if re.match(r"\|\s*(key|field)\s*\|", line):
            on = True
        elif not line.startswith("|"):
            on = False
        elif on and not line.startswith("|-"):
            first = line.strip("|").split("|")[0]
            keys.update(k.split(".")[-1] for k in re.findall(r"`([^`]+)`", first))
    return keys


def check(root):
    written, dynamic = written_keys(root)
    rows = table(root)
    results = []
    results.append((bool(rows), f"docs/records.md has the table of every key ({TABLE_HEADING!r})", []))
    listed = {}
    families = {}
    retired = set()
    for n, key, files, family in rows:
        if family:
            families[(tuple(files), family[0])] = (n, key, family[1])
        elif not files:
            retired.add(key)  # "no longer written": old records still carry it
        else:
            listed.setdefault(key, set()).update(files)
    # Keys that a family of the table says the code writes.
    family_names = set()
    bad_family = []
    for (files, expr), (n, key, sources) in families.items():
        if not any((f, expr) in dynamic for f in files):
            bad_family.append(f"records.md:{n} {key}: no `{expr}` key in {', '.join(files)}")
        for f, name in sources:
            got = names_from(root, f, name) if os.path.exists(os.path.join(root, f)) else set()
            if not got:
                bad_family.append(f"records.md:{n} {key}: no names of {name} in {f}")
            family_names |= got
    unlisted = sorted(f"{k} (written in {', '.join(sorted(fs - listed.get(k, set())))})"
                      for k, fs in written.items() if fs - listed.get(k, set()))
    results.append((not unlisted, "every key the shim writes is in the table, with the files that write it", unlisted))
    undeclared = sorted(f"{f}: key `{e}`" for f, e in dynamic
                        if not any(f in files and e == expr for files, expr in families))
    results.append((not undeclared, "every key the shim writes from a variable is a family of the table", undeclared))
    unwritten = sorted(f"records.md: {k} (the table says {', '.join(sorted(fs - written.get(k, set())))})"
                       for k, fs in listed.items() if fs - written.get(k, set()))
    results.append((not unwritten and not bad_family, "every key of the table is written where it says", unwritten + bad_family))
    all_written = set(written) | family_names | retired
    reads = read_keys(root)
    unread = sorted(f"{k} (read in {', '.join(sorted(fs))})" for k, fs in reads.items() if k not in all_written)
    results.append((bool(reads) and not unread, f"every key ncclshim-inspect reads ({len(reads)}) is written by the shim", unread))
    ex = sorted(k for k in documented_keys(root) if k not in all_written)
    results.append((not ex, "every key docs/records.md's examples and tables name is written by the shim", ex))
    return results, written, dynamic, reads


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    results, written, dynamic, reads = check(root)
    if "--list" in sys.argv:
        for k in sorted(written):
            print("written", k, " ".join(sorted(written[k])))
        for f, e in sorted(dynamic):
            print("dynamic", f, e)
        for k in sorted(reads):
            print("read", k, " ".join(sorted(reads[k])))
        return 0
    print(f"1..{len(results)}")
    for i, (good, what, detail) in enumerate(results, 1):
        print(f"{'ok' if good else 'not ok'} {i} - {what}")
        for line in detail:
            print(f"#   {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
