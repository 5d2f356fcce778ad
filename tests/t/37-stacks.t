#!/usr/bin/env python3
# Replays of the RL stacks' weight-update communicators (issue 32), and of the engines' and
# trainers' own groups that must stay untouched: one real process per rank, under the shim and
# the fake NCCL, whose title, loaded native libraries, Python frames and NCCL binding are the
# stack's (tests/replay/stacks.py, from each stack's source; tests/replay/replay.py builds the
# fake site-packages and runs them).  For each stack, on one host and across hosts
# (NCCLSHIM_HOSTNAME), with the shim's defaults: every rank's comm record (purpose, action,
# the evidence in the reasons, one decision), the unique_id record (marked or not, and why),
# what NCCL got (the fake's call log: no init at all for ipc, netName=Socket for socket, the
# application's own calls for passthrough), every buffer of the refit arriving bit-exact
# through the ipc transport (on the fake libcuda), and `ncclshim-inspect --check` on the
# records.  Every run is bounded; a hang fails with the rank and step it hung in.
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "replay"))
from tap import done, is_, ok, skip_emulated  # noqa: E402

skip_emulated("its ranks are Python processes that load the fakes and the stand-ins through ctypes, and the "
              "host's python3 cannot load aarch64 libraries; t/13 and t/17 run the rendezvous from C")

import replay  # noqa: E402
import stacks  # noqa: E402

for need in list(replay.BINDING_FILES.values()) + [os.path.join(replay.STUBS, "native.so")]:
    if not os.path.exists(need):
        ok(False, "built: %s (make all)" % need)
        done()

TMP = tempfile.mkdtemp(prefix="ncclshim-stacks.")
# What the shim itself asks NCCL of a communicator it passes through (read-only queries:
# the real NCCL's version, the new communicator's device, rank and size for the records).
SHIM_QUERIES = {"ncclGetVersion", "ncclCommCuDevice", "ncclCommUserRank", "ncclCommCount"}


def nccl_calls(log, pid):
    """The functions NCCL got from process pid, in order, less the shim's own queries."""
    return [ln.split()[2] for ln in log if ln.split()[1:2] == [str(pid)] and ln.split()[2] not in SHIM_QUERIES]


def check(sc, v, d):
    """One variant of a scenario, run in directory d."""
    n, action, action_why = len(sc["ranks"]), v["action"], v["why"]
    tag = "%s, %s" % (sc["short"], v["label"])
    res = replay.run(d, sc["ranks"], v["hosts"], v["env"])
    bad = res.failures()
    ok(not bad, "%s: each of the %d ranks ran every step and exited 0" % (tag, n), "\n".join(w for _, w in bad))
    cs = res.comms()
    if [c["rank"] for c in cs] != list(range(n)):
        ok(False, "%s: one comm record from each rank" % tag, [(c.get("rank"), c.get("fn")) for c in cs])
        return
    # The evidence: each rank's role and why, then the root's purpose and action for all.
    roles = [c["role"] for c in cs]
    miss = {r: cs[r]["role_reason"] for r, w in sc["role_why"].items() if not re.search(w, cs[r]["role_reason"])}
    ok((sc["roles"] is None or roles == sc["roles"]) and not miss, "%s: roles %s, each reason naming its evidence (%s)"
       % (tag, "/".join(sc["roles"] or ["(any)"]), ", ".join("rank %d: %s" % kv for kv in sc["role_why"].items())),
       "roles %s\nreasons not naming the evidence: %s" % (roles, miss))
    is_([c["caller"]["api"] for c in cs], [sc["api"]] * n,
        "%s: every rank's NCCL calls come from %s" % (tag, sc["api"]))
    # a purpose for all, or one per rank where no rendezvous decided (each rank alone)
    want = sc["purpose"] if isinstance(sc["purpose"], list) else [sc["purpose"]] * n
    pur = [(c["purpose"], bool(re.search(sc["purpose_why"], c["purpose_reason"]))) for c in cs]
    ok(pur == [(w, True) for w in want], "%s: purpose %s on every rank (reason: '...%s...')"
       % (tag, "/".join(sorted(set(want))), sc["purpose_why"]), [(c["purpose"], c["purpose_reason"]) for c in cs])
    act = [(c["action"], bool(re.search(action_why, c["action_reason"]))) for c in cs]
    ok(act == [(action, True)] * n, "%s: action %s on every rank (reason: '...%s...')" % (tag, action, action_why),
       [(c["action"], c["action_reason"]) for c in cs])
    # The unique ID, the rendezvous (or its absence) and one decision for all.
    uids = res.uids()
    marked, why = sc["uid"]
    got = [(("marked" if u.get("rendezvous") else "unmarked"), u.get("marked", u.get("unmarked", ""))) for u in uids]
    ok(len(got) == 1 and got[0][0] == ("marked" if marked else "unmarked") and re.search(why, got[0][1]),
       "%s: the root's unique_id record: %s, the reason says '%s'" % (tag, "marked" if marked else "unmarked", why),
       got)
    decisions = [x for x in res.recs if x.get("type") == "decision"]
    if marked:
        ids = {(c.get("decision") or {}).get("id") for c in cs}
        ok(len(ids) == 1 and None not in ids and all(c["decision"]["by"] == "root" for c in cs) and len(decisions) == 1,
           "%s: decided at the root's rendezvous, one decision for every rank" % tag,
           [c.get("decision") for c in cs])
    else:
        ok(not decisions and not [c for c in cs if "decision" in c],
           "%s: no rendezvous: no decision record, each rank decided alone" % tag, decisions)
    # What NCCL got.
    log = res.fake_log()
    inits = [ln for ln in log if " ncclCommInit" in ln]
    if action == "ipc":
        ok(not inits, "%s: NCCL saw no init (the shim's ipc transport carries it)" % tag, inits)
        got = {r: res.lines(r, "BYTES ") for r in range(n)}
        ok(all(got[r] and all(b.endswith(" ok") for b in got[r]) for r in range(n)),
           "%s: every rank holds every broadcast buffer, bit-exact" % tag, got)
    elif action == "socket":
        ok(len(inits) == n and all("netName=Socket" in ln and " net=Socket " in ln for ln in inits)
           and all(c.get("net") == "Socket" for c in cs),
           "%s: NCCL saw %d inits, each with netName=Socket, on net=Socket (every record: net Socket)" % (tag, n),
           [inits, [c.get("net") for c in cs]])
    else:
        ok(len(inits) == n and not [ln for ln in inits if "netName=Socket" in ln],
           "%s: NCCL saw %d inits as the application made them" % (tag, n), inits)
    if sc.get("app_calls"):
        diff = {}
        for r in range(n):
            pid = res.lines(r, "PID ")
            app, got = res.lines(r, "APP "), nccl_calls(log, pid[0] if pid else -1)
            if app != got:
                diff[r] = (app, got)
        ok(not diff and inits, "%s: NCCL got exactly the application's calls on every rank (less the shim's "
           "read-only queries %s)" % (tag, ", ".join(sorted(SHIM_QUERIES))), diff)
    if sc.get("m2n"):
        m2n = {r: res.lines(r, "M2N ") for r in range(n)}
        ok(all(m2n[r] and all(x.endswith(" 0") for x in m2n[r]) for r in range(n)),
           "%s: nccl.m2n's window, device communicator and split on the group succeed on every rank" % tag, m2n)
        kids = res.comms(fns=("ncclCommSplit",))
        ok(len(kids) == n and all(k["action"] == action and k["purpose"] == sc["purpose"] and
                                  k.get("parent") == cs[k["rank"]]["group"] for k in kids),
           "%s: each rank's split child (of the group, its parent) inherits the group's purpose and action (%s, %s)"
           % (tag, sc["purpose"], action),
           [(k["rank"], k.get("parent"), k["purpose"], k["action"], k["action_reason"]) for k in kids])
        if action == "socket":
            splits = [ln for ln in log if " ncclCommSplit " in ln]
            ok(len(splits) == n and all("netName=Socket" in ln for ln in splits),
               "%s: NCCL got every split with netName=Socket" % tag, splits)
    # never silent: the ranks that saw a bridge they could not protect say so once on stderr
    if sc.get("stderr"):
        said = {r: [ln for ln in res.err[r].splitlines() if "ncclshim: warning:" in ln and re.search(w, ln)] for r, w in sc["stderr"].items()}
        ok(all(len(v) == 1 for v in said.values()), "%s: one stderr line on each of ranks %s naming the setting"
           % (tag, ",".join(map(str, sorted(sc["stderr"])))), [res.err[r][-600:] for r in sc["stderr"]])
    rc, problems = res.check()
    if v["problems"] is None:
        is_((rc, problems), (0, ""), "%s: ncclshim-inspect --check on the records: exit 0, no problem" % tag)
    else:
        ok(rc == 1 and re.search(v["problems"], problems), "%s: ncclshim-inspect --check exits 1, the problem "
           "matching /%s/" % (tag, v["problems"]), (rc, problems))


n = 0
# REPLAY_ONLY=<substring>: only the stacks whose short name contains it (while working on one)
only = os.environ.get("REPLAY_ONLY")
for sc in stacks.SCENARIOS:
    if only and only not in sc["short"]:
        continue
    print("# " + sc["name"])
    for v in sc["variants"]:
        n += 1
        d = os.path.join(TMP, "s%02d" % n)  # neutral: frames and titles carry this path
        os.makedirs(d)
        check(sc, v, d)
done(TMP, keep_on_failure=True)
