#!/usr/bin/env python3
# The tree of leaders (issue 34): the root holds a bounded number of hosts'
# leaders and sends the others on (REDIRECT) to leaders, which take them, or
# send them further.  With NCCLSHIM_TEST_RV_FAULT=fanout=2 a few simulated
# hosts (NCCLSHIM_HOSTNAME, one process each, 2 ranks a process) build a tree
# several levels deep: every rank takes the root's one decision, the root
# holds 2 leaders, and a leader killed or delayed at any level leaves every
# surviving rank with the same action.  Bounded: a process past BOUND is killed.
import os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import PRELOAD, ROOT, diag, done, env_fault, env_time, ok, read_first_id, records, wait_bounded  # noqa: E402

MANY = os.path.join(ROOT, "tests", "bin", "many_ranks")
BOUND = 40  # seconds a process may live, on a quiet machine (tap.py scales it, the timeout and delays)
TMP = tempfile.mkdtemp(prefix="ncclshim-rvtree.")
HOSTS, PER = 12, 2


def proc(args, env, stdin=False):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_", "MANY_RANKS_"))}
    full.update(env)
    full["LD_PRELOAD"] = PRELOAD
    return subprocess.Popen([MANY] + args, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)


def tree(name, faults=None, env=None, want=None):
    """faults: {host: NCCLSHIM_TEST_RV_FAULT extra}.  Returns (actions by host, decision records, root's stats)."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    base = {"NCCLSHIM_LOG_DIR": d + "/rec", "NCCLSHIM_WEIGHT_UPDATE": "socket", "NCCLSHIM_RENDEZVOUS_FANIN": "0",
            "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": env_time(3000), "NCCLSHIM_TEST_RV_FAULT": "fanout=2"}
    base.update(env or {})
    base["NCCLSHIM_TEST_RV_FAULT"] = env_fault(base["NCCLSHIM_TEST_RV_FAULT"]).replace(
        "LATE", str(int(base["NCCLSHIM_RENDEZVOUS_TIMEOUT_MS"]) + 2000 + 2500))
    start = time.monotonic()
    root = proc(["id"], dict(base, NCCLSHIM_ROLE="training"), stdin=True)
    hid = read_first_id(root, BOUND)
    ps = {}
    for h in range(HOSTS):
        e = dict(base, NCCLSHIM_HOSTNAME="h%d" % h, NCCLSHIM_ROLE="training" if h == 0 else "inference")
        if faults and h in faults:
            e["NCCLSHIM_TEST_RV_FAULT"] += "," + env_fault(faults[h])
        ps[h] = proc(["ranks", hid, str(HOSTS * PER), str(h * PER), str(PER)], e)
    res = {h: wait_bounded(p, start, BOUND) for h, p in ps.items()}
    root.stdin.close()
    root.stdin = None
    rout, _ = wait_bounded(root, start, BOUND)
    stats = {}
    for line in rout.splitlines():
        if line.startswith("ROOT "):
            stats = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    killed = sorted(h for h, p in ps.items() if p.returncode == -9)
    hung = [h for h in ps if "KILLED" in res[h][1]]
    if [h for h in killed if h not in hung]:
        diag("%s: the process(es) of host(s) %s killed on purpose (SIGKILL, by the fault)"
             % (name, [h for h in killed if h not in hung]))
    pids = {p.pid: h for h, p in ps.items()}
    comms = [c for c in records(d + "/rec") if c.get("type") == "comm" and c.get("pid") in pids]
    acts = {}
    for c in comms:
        acts.setdefault(pids[c["pid"]], set()).add(c["action"])
    live = [h for h in ps if h not in killed]
    every = set().union(*acts.values()) if acts else set()
    ok(not hung and sorted(acts) == live and len(comms) == PER * len(live) and len(every) == 1 and
       (want is None or every == {want}),
       "%s: the %d ranks of the %d surviving hosts all take %s" % (name, PER * len(live), len(live),
                                                                   want or "one action"),
       {"actions": acts, "killed": killed, "hung": hung,
        "stderr": [res[h][1].strip()[-300:] for h in live if ps[h].returncode != 0][:3]})
    dr = [r for r in records(d + "/rec") if r.get("type") == "decision"]
    return acts, dr, stats


acts, dr, stats = tree("fanout-2")
ok(dr and dr[0]["action"] == "socket" and dr[0]["leaders"] <= 2 and dr[0]["redirected"] == HOSTS - 2,
   "the root held 2 leaders and sent the other %d on" % (HOSTS - 2),
   [(r["action"], r["leaders"], r.get("redirected")) for r in dr])
ok(stats and stats["maxfds"] < 20, "the root's process held few descriptors: %s" % stats.get("maxfds"), stats)

# Each host's process leads its host; h0 and h1 come first, and hold the rest
# below them.  A fault in every host's process hits whichever leads at that step.
tree("a-leader-killed-handing-on", {h: "leader-commit=kill" for h in (0, 1)}, want="socket")
tree("a-leaf-killed-handing-on", {h: "leader-commit=kill" for h in (HOSTS - 1,)}, want="socket")
tree("a-leader-killed-forwarding", {h: "leader-hello=kill" for h in (HOSTS - 1,)}, want="passthrough")
# Each HELLO waits at every level it crosses: socket or, past the root's
# timeout, passthrough, but the same for all.
tree("leaders-slow-forwarding", {h: "leader-hello=100" for h in range(HOSTS)})
tree("leaders-slow-handing-on", {h: "leader-commit=300" for h in range(HOSTS)}, want="socket")
# The root commits past its ranks' own deadline (the timeout and 2 s, rv_client.c), in the middle of
# the 5 s they then wait for its word (rv_ask.h): fixed times, so not stretched with the timeout.
tree("root-slow-committing", None, dict(NCCLSHIM_TEST_RV_FAULT="fanout=2,root-commit=LATE"), want="socket")
done()
