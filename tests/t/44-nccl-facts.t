#!/usr/bin/env python3
# The table against the facts of NCCL 2.31.2 and 2.32.3 (issue 44): no released
# header of those could be had, so ../shared/nccl-headers/newer-releases.md
# (NCCL_HEADERS_DIR overrides the folder; SKIP when it is absent) is what the
# table must hold.  A function it names that is missing from nccl_api.def (so
# that a shim handle could reach NCCL through it), or sits in the wrong
# release's group, or is not exported with its pnccl twin, fails here; so do a
# config field it lists that nccl_config.def lacks or dates wrongly, and a
# known-newest release older than the newest it names.
import os, re, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ROOT, done, is_, ok, skip_all  # noqa: E402

HEADERS = os.environ.get("NCCL_HEADERS_DIR", os.path.join(ROOT, "..", "shared", "nccl-headers"))
FACTS = os.path.join(HEADERS, "newer-releases.md")
if not os.path.isfile(FACTS):
    skip_all("no %s (point NCCL_HEADERS_DIR at the folder that holds it)" % FACTS)
text = open(FACTS).read()


def section(title_start):
    """The text of the `## ` section whose title starts with title_start."""
    m = re.search(r"^## %s.*?$(.*?)(?=^## |\Z)" % re.escape(title_start), text, re.M | re.S)
    return m.group(1) if m else ""


def cpp(src):
    """Preprocess `src` with shim/nccl on the include path: its output, tokens split on blanks."""
    r = subprocess.run(["cpp", "-P", "-I", os.path.join(ROOT, "shim", "nccl"), "-x", "c", "-"], input=src,
                       capture_output=True, text=True, check=True)
    return r.stdout.split()


def table(up_to, kinds=("NCCL_PLAIN", "NCCL_COMM", "NCCL_DATA", "NCCL_LIFE", "NCCL_VOID", "NCCL_GROUP",
                        "NCCL_COMM_DEV", "NCCL_COMM_VALUE")):
    """The table's names in the groups of releases up to `up_to`, of the given kinds."""
    defs = "#define NCCL_API_SINCE(v) ((v) <= %d)\n" % up_to
    for k in kinds:
        if k == "NCCL_DATA":
            defs += "#define NCCL_DATA(name, op, params, args, count, dtype) name\n"
        elif k == "NCCL_VOID":
            defs += "#define NCCL_VOID(name, params, args) name\n"
        elif k == "NCCL_COMM_VALUE":
            defs += "#define NCCL_COMM_VALUE(ret, name, params, args, failed) name\n"
        else:
            defs += "#define %s(ret, name, params, args) name\n" % k
    return set(cpp(defs + '#include "nccl_api.def"\n'))


# --- the facts ---------------------------------------------------------------
codes = {v: int(c) for v, c in
         re.findall(r"(2\.3[12]\.\d+):\s*(?:`NCCL_VERSION_CODE`\s*)?(\d{5})", section("Version codes"))}
coll = set(re.findall(r"`(nccl[A-Za-z]+)`", section("Functions that take a communicator, new in 2.31")))
new232 = set(re.findall(r"`(nccl[A-Za-z]+)\(", section("New in 2.32")))
fields = re.findall(r"^\| `(\w+)` \| (2\.\d+) \|", section("`ncclConfig_t`, fields appended"), re.M)
ok(codes.get("2.31.2") == 23102 and codes.get("2.32.3") == 23203, "the facts give 2.31.2 and 2.32.3's version codes",
   codes)
ok(len(coll) >= 8 and all(n.endswith("Config") for n in coll),
   "the facts name 2.31's collectives with a config (%d): %s" % (len(coll), " ".join(sorted(coll))))
ok(len(fields) >= 5, "the facts list the ncclConfig_t fields 2.31/2.32 appended (%d)" % len(fields))

# --- every function they name is in the table, in its release's group -------
t230, t231, t232 = table(23099), table(23199), table(23299)
is_(sorted(coll - t231), [], "every function of 2.31.2 that the facts name is in the table's 2.31 group")
is_(sorted(coll & t230), [], "none of them is dated before 2.31")
is_(sorted(new232 - t232), [], "every function of 2.32.3 that the facts name is in the table (%s)" %
    " ".join(sorted(new232)))
is_(sorted((t232 - t230) - coll - new232), [], "the table's 2.31/2.32 groups hold nothing the facts do not name")
takes = table(23299, ("NCCL_COMM", "NCCL_DATA", "NCCL_COMM_DEV", "NCCL_COMM_VALUE"))
is_(sorted(coll - takes), [], "each of 2.31's collectives is a function that takes a communicator in the table "
    "(answered for shim-only ones, never forwarded with a shim handle)")
data = table(23299, ("NCCL_DATA",))
is_(sorted(coll - data), [], "and a data operation, counted like its plain form")

# --- exported, with their pnccl twins ----------------------------------------
mapfile = os.path.join(ROOT, "build", "ncclshim.map")
exported = set(re.findall(r"\b(p?nccl\w+);", open(mapfile).read())) if os.path.exists(mapfile) else set()
is_(sorted(n for f in coll | new232 for n in (f, "p" + f) if n not in exported), [],
    "the shim exports each of them and its pnccl twin (build/ncclshim.map)")

# --- the config fields, with the release that added each ---------------------
added = {t[1]: int(t[2]) for t in re.findall(r"NCCL_CONFIG_FIELD\((\s*)(\w+), \w+, (\d+), \d+\)",
                                              open(os.path.join(ROOT, "shim/nccl/nccl_config.def")).read())}
want = {name: int(rel.split(".")[1]) * 100 + 20000 for name, rel in fields}
is_({n: added.get(n) for n in want}, want, "nccl_config.def holds each field the facts list, added in its release")

# --- the known-newest release ------------------------------------------------
newest = int(re.search(r"#define SHIM_TABLE_NEWEST (\d+)", open(os.path.join(ROOT, "shim/nccl/slots.h")).read())
             .group(1))
ok(max(codes.values() or [0]) <= newest < 23300, "the known-newest release (%d) covers 2.32.3 and not 2.33" % newest)
done()
