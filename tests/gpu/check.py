"""Checks of the GPU tests' results and records; prints `CHECK ok|fail <what>` lines
(run.sh turns them into TAP) and `# ...` diagnostics.

    check.py results NOSHIM_DIR SHIM_DIR   checksums: equal to the CPU value, and equal with/without shim
    check.py results SHIM_DIR              checksums: equal to the CPU value
    check.py records DIR CASE              the shim's records in DIR/records (CASE: torch, ctypes, combined)

DIR is a launcher's --outdir: summary.json, rank*.err, records/, nccl.<host>.<pid>.log.
"""
import glob
import json
import os
import re
import sys

BCAST_BYTES = {"ctypes": 64 << 20, "combined": 1 << 20}
failures = 0


def check(cond, what, *diag):
    global failures
    print("CHECK %s %s" % ("ok" if cond else "fail", what))
    if not cond:
        failures += 1
        for d in diag:
            for line in str(d).splitlines():
                print("#   " + line)
    return cond


def load_summary(d):
    try:
        with open(os.path.join(d, "summary.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"ok": False, "ranks": [], "errors": ["no summary.json in %s: %s" % (d, e)]}


def results(dirs):
    """Each result key K with a K_expected must equal it; with two dirs (without, with shim)
    the two runs must also agree."""
    sums = [load_summary(d) for d in dirs]
    name = next((s["script"] for s in sums if s.get("script")), "?")
    labels = ["without shim", "with shim"] if len(dirs) == 2 else ["with shim"]
    keys = set()
    for s in sums:
        for r in s["ranks"]:
            res = r.get("result") or {}
            keys.update(k for k in res if k + "_expected" in res)
    check(bool(keys), "%s: results to compare" % name, *["%s: %s" % (l, s.get("errors")) for l, s in zip(labels, sums)])
    for rank in range(2):
        rs = [next((r.get("result") or {} for r in s["ranks"] if r["rank"] == rank), {}) for s in sums]
        for k in sorted(keys):
            for label, res in zip(labels, rs):
                check(k in res and res.get(k) == res.get(k + "_expected"),
                      "%s rank %d %s: %s equals the CPU value" % (name, rank, label, k),
                      "got %r, expected %r" % (res.get(k), res.get(k + "_expected")))
            if len(rs) == 2:
                check(k in rs[0] and rs[0].get(k) == rs[1].get(k),
                      "%s rank %d: %s identical with and without shim" % (name, rank, k),
                      "without %r, with %r" % (rs[0].get(k), rs[1].get(k)))


def load_records(d):
    """pid -> list of records; also checks that every line is one JSON object."""
    by_pid, bad = {}, []
    paths = sorted(glob.glob(os.path.join(d, "records", "ncclshim.*.jsonl")))
    check(len(paths) >= 2, "record files in %s/records" % os.path.basename(d), "found %d" % len(paths))
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                    by_pid.setdefault(rec["pid"], []).append(rec)
                except (ValueError, KeyError, TypeError) as e:
                    bad.append("%s:%d: %s: %s" % (os.path.basename(path), n, e, line[:200]))
    check(not bad, "records are JSON lines with a pid", *bad[:5])
    return by_pid


def nccl_log_has_comm(d, pid, ptr):
    """Does NCCL's own log of process pid (NCCL_DEBUG_FILE=nccl.%h.%p.log) name `comm <ptr>`?"""
    files = glob.glob(os.path.join(d, "nccl.*.%d.log" % pid))
    # Both print the pointer with %p; the look-ahead stops 0x12 matching 0x123.
    pat = re.compile(r"\bcomm %s(?![0-9a-fA-Fx])" % re.escape(ptr))
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if pat.search(line):
                    return True, line.strip()
    return False, "no 'comm %s' in %s (NCCL logs here: %s)" % (
        ptr, [os.path.basename(p) for p in files] or "no nccl.*.%d.log" % pid,
        [os.path.basename(p) for p in glob.glob(os.path.join(d, "nccl.*.log"))])


def brief(rec):
    keep = ("type", "fn", "comm", "handle", "group", "rank", "nranks", "result", "caller", "how", "ops", "python")
    return json.dumps({k: rec[k] for k in keep if k in rec}, sort_keys=True)


def api_checks(case, d, rank_recs, api):
    """Checks of the 2-rank communicator created through `api` on both ranks; returns its group."""
    comms = {}
    for rank, recs in rank_recs.items():
        mine = [r for r in recs if r["type"] == "comm" and (r.get("caller") or {}).get("api") == api]
        good = [r for r in mine if r.get("nranks") == 2 and r.get("result") == 0 and r.get("comm")]
        allc = [brief(r) for r in recs if r["type"] == "comm"]
        check(bool(mine), "%s rank %d: a comm record with caller.api %s" % (case, rank, api), *allc)
        check(bool(good), "%s rank %d: the %s comm has nranks 2, result 0 and a comm pointer" % (case, rank, api),
              *[brief(r) for r in mine])
        comms[rank] = good
    groups = [set(r["group"] for r in comms.get(rank, [])) for rank in (0, 1)]
    common = sorted(groups[0] & groups[1])
    check(len(common) >= 1, "%s: both ranks record the same group for the %s comm" % (case, api),
          "rank 0 groups %s, rank 1 groups %s" % tuple(sorted(g) for g in groups))
    group = common[0] if common else None
    for rank, recs in rank_recs.items():
        c = next((r for r in comms.get(rank, []) if r["group"] == group), None)
        if c is None:
            check(False, "%s rank %d: %s comm found for the remaining checks" % (case, rank, api))
            continue
        check(c.get("rank") == rank, "%s rank %d: the %s comm record has rank %d" % (case, rank, api, rank), brief(c))
        found, why = nccl_log_has_comm(d, c["pid"], c["comm"])
        check(found, "%s rank %d: the %s comm pointer %s is in NCCL's log" % (case, rank, api, c["comm"]), why)
        ends = [r for r in recs if r["type"] == "comm_end" and r.get("handle") == c.get("handle")
                and r.get("group") == group]
        check(len(ends) == 1, "%s rank %d: one comm_end for the %s comm" % (case, rank, api),
              *([brief(r) for r in recs if r["type"] == "comm_end"] or ["no comm_end records"]))
        ops = ends[0].get("ops", {}) if ends else {}
        ar = ops.get("AllReduce", {})
        if api == "torch":
            check(ar.get("count", 0) >= 2, "%s rank %d: torch comm_end ops AllReduce count >= 2" % (case, rank),
                  json.dumps(ops))
        else:
            nbytes = BCAST_BYTES[case]
            bc = ops.get("Broadcast", {})
            check(bc.get("count") == 1 and bc.get("bytes") == nbytes,
                  "%s rank %d: ctypes comm_end ops Broadcast count 1, bytes %d" % (case, rank, nbytes), json.dumps(ops))
            check(ar.get("count") == 1 and ar.get("bytes") == 4,
                  "%s rank %d: ctypes comm_end ops AllReduce count 1, bytes 4" % (case, rank), json.dumps(ops))
            check(ends and ends[0].get("how") == "destroy" and ends[0].get("result") == 0,
                  "%s rank %d: ctypes comm ended by ncclCommDestroy, result 0" % (case, rank),
                  *[brief(r) for r in ends])
            check(c.get("fn") == "ncclCommInitRank", "%s rank %d: ctypes comm made by ncclCommInitRank" % (case, rank),
                  brief(c))
            frames = c.get("python") or []
            check(any("ctypes_bcast.py" in f for f in frames[:3]),
                  "%s rank %d: python frames of the ctypes init name ctypes_bcast.py innermost" % (case, rank),
                  json.dumps(frames, indent=1))
            if rank == 0:
                uids = [r for r in recs if r["type"] == "unique_id" and (r.get("caller") or {}).get("api") == "ctypes"]
                check(any(r.get("result") == 0 and group == "id:" + r.get("id_hash", "") for r in uids),
                      "%s rank 0: a ctypes unique_id record whose id_hash names the group %s" % (case, group),
                      *([brief(r) + " id_hash=" + str(r.get("id_hash")) for r in uids] or ["no ctypes unique_id"]))
    return group


def records(d, case):
    summary = load_summary(d)
    by_pid = load_records(d)
    rank_recs = {}
    for r in summary["ranks"]:
        recs = by_pid.get(r["pid"], [])
        rank_recs[r["rank"]] = recs
        types = [x["type"] for x in recs]
        check("load" in types and "exit" in types, "%s rank %d (pid %d): records with load and exit" % (case, r["rank"], r["pid"]),
              "record types: %s" % sorted(set(types)), "record pids: %s" % sorted(by_pid))
        libs = [x for x in recs if x["type"] == "library"]
        check(any(x.get("version", 0) >= 20000 and "libnccl" in x.get("path", "") for x in libs),
              "%s rank %d: a library record for the real libnccl" % (case, r["rank"]), *[brief(x) for x in libs])
        for w in (x for x in recs if x["type"] == "warning"):
            print("# rank %d shim warning: %s: %s" % (r["rank"], w.get("what"), w.get("message")))
    check(sorted(rank_recs) == [0, 1], "%s: the launcher ran ranks 0 and 1" % case, "summary: %s" % summary.get("errors"))
    if sorted(rank_recs) != [0, 1]:
        return
    groups = {}
    if case in ("torch", "combined"):
        groups["torch"] = api_checks(case, d, rank_recs, "torch")
    if case in ("ctypes", "combined"):
        groups["ctypes"] = api_checks(case, d, rank_recs, "ctypes")
    if case == "combined":
        check(None not in groups.values() and groups["torch"] != groups["ctypes"],
              "combined: two groups, one made by torch and one through ctypes", json.dumps(groups))


def main(argv):
    if len(argv) in (3, 4) and argv[1] == "results":
        results(argv[2:])
    elif len(argv) == 4 and argv[1] == "records" and argv[3] in ("torch", "ctypes", "combined"):
        records(argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
