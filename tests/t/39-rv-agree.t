#!/usr/bin/env python3
# All or nothing (issue 34): whatever the timing of connects, HELLOs, votes and
# commits, and whoever dies at any level (a rank, a host's leader, the root),
# every surviving rank of a communicator carries out the same action.  Delays
# and kills come from NCCLSHIM_TEST_RV_FAULT (shim/rendezvous/rv_fault.h), set
# in the processes named; 6 ranks on 2 simulated hosts, one process per rank,
# through hosts' leaders and talking to the root directly.  Every passthrough
# here is a fallback (the policy says socket): each surviving rank says so on
# stderr.  Bounded: a process that overruns BOUND is killed and the test fails.
import os, resource, select, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import PRELOAD, ROOT, diag, done, env_fault, env_time, ok, read_first_id, records, wait_bounded  # noqa: E402

MANY = os.path.join(ROOT, "tests", "bin", "many_ranks")
BOUND = 40  # seconds a process may live, on a quiet machine (tap.py scales it)
TMP = tempfile.mkdtemp(prefix="ncclshim-rvagree.")
N = 6
HOST = lambda r: "hostA" if r < 3 else "hostB"  # noqa: E731
# A root late by LATE (a fault's delay): the timeout and this many ms.  The ranks' own deadline is
# the timeout and 2 s (rv_client.c, GRACE_US), then they ask the root and wait 5 s for its word
# (rv_ask.h, RV_ASK_US): these two are fixed, so such a delay is not stretched with the timeout,
# but set in the middle of the ask's wait, 2.5 s from either end.
ASKED_MS = 2000 + 2500


class Proc:
    def __init__(self, args, env, stdin=False):
        full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_", "MANY_RANKS_"))}
        full.update(env)
        full["LD_PRELOAD"] = PRELOAD
        self.p = subprocess.Popen([MANY] + args, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True)
        self.start = time.monotonic()
        self.out = None

    def read_id(self):
        return read_first_id(self.p, BOUND)

    def wait(self):
        if self.out is None:
            self.out, self.err = wait_bounded(self.p, self.start, BOUND)
        return self.out


def scenario(name, fault, targets, env=None, want=None):
    """fault: NCCLSHIM_TEST_RV_FAULT for the processes in targets (ranks, or "root").
    want: the action every survivor must take, or None (any, as long as all agree).
    The timeout is a quiet machine's, stretched (tap.py env_time); so are the delays the
    callers pass through env_fault: a delay inside the timeout or past it stays so."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    timeout = env_time(1000)
    fault = fault.replace("LATE", str(int(timeout) + ASKED_MS))
    base = {"NCCLSHIM_LOG_DIR": d + "/rec", "NCCLSHIM_WEIGHT_UPDATE": "socket",
            "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": timeout}
    base.update(env or {})
    root_env = dict(base, NCCLSHIM_ROLE="training")
    if "root" in targets:
        root_env["NCCLSHIM_TEST_RV_FAULT"] = fault
    root = Proc(["id"], root_env, stdin=True)
    hid = root.read_id()
    procs = {}
    for r in range(N):
        e = dict(base, NCCLSHIM_HOSTNAME=HOST(r), NCCLSHIM_ROLE="training" if r == 0 else "inference")
        if r in targets:
            e["NCCLSHIM_TEST_RV_FAULT"] = fault
        procs[r] = Proc(["ranks", hid, str(N), str(r), "1"], e)
    for p in procs.values():
        p.wait()
    if root.p.poll() is None:
        root.p.stdin.close()
        root.p.stdin = None
    root.wait()
    killed = sorted(r for r, p in procs.items() if p.p.returncode == -9)
    hung = [r for r, p in procs.items() if "KILLED" in p.err]
    if [r for r in killed if r not in hung]:
        diag("%s: rank(s) %s killed on purpose (SIGKILL, by the fault)" % (name, [r for r in killed if r not in hung]))
    live = [r for r in procs if r not in killed]
    by_pid = {p.p.pid: r for r, p in procs.items()}
    comms = [c for c in records(d + "/rec") if c.get("type") == "comm" and c.get("pid") in by_pid]
    acts = {by_pid[c["pid"]]: c["action"] for c in comms}
    ids = {c.get("decision", {}).get("id") for c in comms if c.get("decision", {}).get("by") == "root"}
    agreed = len(set(acts.values())) == 1 and sorted(acts) == live
    ok(not hung and agreed and (want is None or set(acts.values()) == {want}),
       "%s: the %d surviving ranks all take %s" % (name, len(live), want or "one action"),
       {"actions": acts, "killed": killed, "hung": hung, "ids": sorted(filter(None, ids)),
        "stderr": [procs[r].err.strip()[-300:] for r in live if procs[r].p.returncode != 0]})
    if acts and set(acts.values()) == {"passthrough"}:
        said = [r for r in live if "fell back to passthrough" in procs[r].err]
        ok(said == live, "%s: and every one says on stderr that it fell back, and why" % name,
           {"said": said, "live": live, "stderr": procs[live[0]].err[-400:] if live else ""})
    return acts


for path, fanin in (("leaders", "0"), ("direct", "64")):
    env = {"NCCLSHIM_RENDEZVOUS_FANIN": fanin}
    two = dict(env, NCCLSHIM_RENDEZVOUS_ONE_ROUND="0")  # a vote round
    # Delays at each step (a quiet machine's ms, stretched with the timeout by env_fault; the short
    # HELLO's not: it must stay inside the fixed 1 s a connection has to show its token, on a
    # loaded machine too; LATE: ASKED_MS).  Short ones change nothing; long ones cross the
    # deadlines: the root's (1 s from the first HELLO) gives up for all,
    # or the ranks' own (1 s + 2 s from their arrival) make them ask the root to
    # give up while it sleeps, and they take its word: the commit.
    scenario(path + "-connect-late", env_fault("connect=1500"), {5}, env)
    scenario(path + "-hello-short", "hello=200", {5}, env, want="socket")
    scenario(path + "-hello-late", env_fault("hello=2000"), {5}, env, want="passthrough")
    scenario(path + "-vote-late", env_fault("vote=2000"), {5}, two, want="passthrough")
    scenario(path + "-root-decide-late", "root-decide=LATE", {"root"}, env, want="socket")
    scenario(path + "-root-commit-late", "root-commit=LATE", {"root"}, two, want="socket")
    # Kills at each level.
    scenario(path + "-rank-killed-at-hello", "hello=kill", {5}, env, want="passthrough")
    scenario(path + "-rank-killed-at-vote", "vote=kill", {5}, two, want="passthrough")
    scenario(path + "-root-killed-deciding", "root-decide=kill", {"root"}, env, want="passthrough")
    scenario(path + "-root-killed-committing", "root-commit=kill", {"root"}, env, want="passthrough")

# A host's leader: delayed or killed as it forwards, and as it hands the verdict
# on (its ranks then ask the root, which answers what everyone else heard).
env = {"NCCLSHIM_RENDEZVOUS_FANIN": "0"}
host_b = {3, 4, 5}  # the fault hits whichever of them leads
scenario("leader-hello-late", env_fault("leader-hello=1500"), host_b, env)
scenario("leader-commit-late", env_fault("leader-commit=1500"), host_b, env, want="socket")
scenario("leader-killed-forwarding", "leader-hello=kill", host_b, env, want="passthrough")
scenario("leader-killed-handing-on", "leader-commit=kill", host_b, env, want="socket")
scenario("leader-killed-in-vote", "leader-commit=kill", host_b, dict(env, NCCLSHIM_RENDEZVOUS_ONE_ROUND="0"),
         want="socket")
done()
