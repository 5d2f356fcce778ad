#!/usr/bin/env python3
# The rendezvous at the size of real jobs (issue 19): ranks of a host meet at
# a leader, only leaders reach the root; limits end it at once for every rank,
# naming the limit.  Ranks are threads of a few processes (tests/bin/many_ranks),
# simulated hosts by NCCLSHIM_HOSTNAME; every process runs under `ulimit -n`
# as given and under a bound, and a test that overruns it fails and says so.
import os, resource, select, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import (PRELOAD, ROOT, Deadline, diag, done, env_time, ok, read_first_id, records, scaled,  # noqa: E402
                 wait_bounded)

MANY = os.path.join(ROOT, "tests", "bin", "many_ranks")
# Seconds no process of these tests may live longer, on a quiet machine; TIMEOUT the rendezvous
# timeout, which nothing here may wait for.  Both stretched with the machine (tap.py).
BOUND = 60
TIMEOUT = env_time(40000)
TMP = tempfile.mkdtemp(prefix="ncclshim-rvscale.")

def limits(nofile):
    def f():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return f


class Proc:
    def __init__(self, args, env, nofile=1024, stdin=False):
        full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_", "MANY_RANKS_"))}
        full.update(env)
        full["LD_PRELOAD"] = PRELOAD
        self.p = subprocess.Popen([MANY] + args, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True,
                                  preexec_fn=limits(nofile))
        self.start = time.monotonic()
        self.out = None

    def read_id(self):
        return read_first_id(self.p, BOUND)

    def release(self):
        """Closes its stdin: the ID's process then reports and exits."""
        self.p.stdin.close()
        self.p.stdin = None

    def wait(self):
        if self.out is None:
            self.out, self.err = wait_bounded(self.p, self.start, BOUND)
            self.elapsed = time.monotonic() - self.start
        return self.out


def start_root(name, env, root_nofile=1024):
    """A scenario's folder and its root (the process that made the unique ID, a
    training rank).  Returns (dir, the ranks' base environment, root, its ID)."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    base = {"NCCLSHIM_LOG_DIR": d + "/rec", "NCCLSHIM_WEIGHT_UPDATE": "socket"}
    base.update(env)
    root = Proc(["id"], dict(base, NCCLSHIM_ROLE="training"), nofile=root_nofile, stdin=True)
    return d, base, root, root.read_id()


def run(name, nranks, layout, env, nofile=1024, root_nofile=1024, before=None):
    """layout: [(first, count, host, extra_env)]: one process each.  Rank 0's
    process is training, the others inference.  Returns (dir, root, procs)."""
    d, base, root, hid = start_root(name, env, root_nofile)
    procs = []
    for first, count, host, extra in layout:
        e = dict(base, NCCLSHIM_HOSTNAME=host, NCCLSHIM_ROLE="training" if first == 0 else "inference")
        e.update(extra)
        lim = int(e.pop("NOFILE", nofile))
        procs.append(Proc(["ranks", hid, str(nranks), str(first), str(count)], e, nofile=lim))
        if before:
            before(len(procs) - 1, procs[-1])
    for p in procs:
        p.wait()
    root.release()
    root.wait()
    return d, root, procs


def comm_records(d):
    return [r for r in records(d + "/rec") if r.get("type") == "comm"]


def decision_records(d):
    return [r for r in records(d + "/rec") if r.get("type") == "decision"]


def root_stats(root):
    for line in root.out.splitlines():
        if line.startswith("ROOT "):
            return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    return {}


# 1. 1100 ranks, `ulimit -n 1024` in every process (the root's included): 11
#    processes of 100 rank threads over 10 simulated hosts.  All take socket.
N = 1100
layout = [(p * 100, 100, "node%d" % (p % 10), {}) for p in range(11)]
d, root, procs = run("n1100", N, layout, {"NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": TIMEOUT})
cr = comm_records(d)
acts = {}
for c in cr:
    acts[c["action"]] = acts.get(c["action"], 0) + 1
ok(len(cr) == N and acts == {"socket": N}, "1100 ranks under ulimit -n 1024: every rank takes socket", (acts, [
    c["action_reason"] for c in cr if c["action"] != "socket"][:3], [p.err[-300:] for p in procs if p.err][:2]))
ok(len({c["decision"]["id"] for c in cr}) == 1, "one decision id for all 1100 ranks")
dr = decision_records(d)
ok(len(dr) == 1 and dr[0]["stage"] == "commit" and dr[0]["arrived"] == N and 10 <= dr[0]["leaders"] <= 20,
   "the root's one committed decision came through one leader per host (10 hosts)",
   [(r["stage"], r["arrived"], r.get("leaders")) for r in dr])
st = root_stats(root)
ok(st and st["maxfds"] < 64, "the root's process held fewer than 64 descriptors (one per leader)", st)
ok(all(p.elapsed < scaled(BOUND) for p in procs), "bounded", [round(p.elapsed, 1) for p in procs])

# 2. The same ranks talking to the root directly (NCCLSHIM_RENDEZVOUS_FANIN above
#    the size): the root's process runs out of descriptors.  Every rank falls back
#    at once, long before the timeout, and the reason names the limit and its setting.
t0 = time.monotonic()
d, root, procs = run("emfile-root", N, layout, {"NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": TIMEOUT,
                                                "NCCLSHIM_RENDEZVOUS_FANIN": "8192"})
took = time.monotonic() - t0
cr = comm_records(d)
named = [c for c in cr if "RLIMIT_NOFILE is 1024" in c["action_reason"] and "ulimit -n" in c["action_reason"]
         and "NCCLSHIM_RENDEZVOUS_FANIN" in c["action_reason"]]
ok(len(cr) == N and all(c["action"] == "passthrough" for c in cr),
   "EMFILE at the root (1100 direct connections, ulimit -n 1024): every rank passes through",
   sorted({c["action"] for c in cr}))
ok(len(named) == N, "and every rank's reason names RLIMIT_NOFILE, ulimit -n and NCCLSHIM_RENDEZVOUS_FANIN",
   (len(named), [c["action_reason"] for c in cr if c not in named][:2]))
ok(took < scaled(25), "at once: %.1f s, the timeout is %d s" % (took, int(TIMEOUT) // 1000))
dr = decision_records(d)
ok(dr and "ran out of file descriptors accepting the ranks' connections (EMFILE" in dr[0]["action_reason"],
   "the root's decision record says it ran out of descriptors", [r["action_reason"] for r in dr][:1])

# 3. EMFILE at a host's leader: the process that leads node0 holds most of its
#    descriptors itself (MANY_RANKS_FDS); a second process's ranks join it.
#    Every rank of every host falls back at once, the reason naming the limit.
#    node1's leader may still be arriving when the root falls back: the root
#    answers it once its HELLO shows the token (rv_decide.c, rv_limit_fall_back),
#    so its ranks name the limit too, not the root's loss.
def wait_leading(i, p):
    """The first process must lead: wait until it holds its leader's sockets."""
    if i != 0:
        return
    deadline = Deadline(BOUND)
    while not deadline.passed():
        try:
            socks = [os.readlink("/proc/%d/fd/%s" % (p.p.pid, f)) for f in os.listdir("/proc/%d/fd" % p.p.pid)]
        except OSError:
            socks = []
        if sum(s.startswith("socket:") for s in socks) >= 4:  # listener, root, its rank, the rank's accepted end
            return
        time.sleep(0.005)


layout = [(0, 1, "node0", {"MANY_RANKS_FDS": "45", "NOFILE": "64"}), (1, 40, "node0", {}), (41, 23, "node1", {})]
t0 = time.monotonic()
d, root, procs = run("emfile-leader", 64, layout, {"NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": TIMEOUT,
                                                   "NCCLSHIM_RENDEZVOUS_FANIN": "0"}, before=wait_leading)
took = time.monotonic() - t0
# (The leader's process may hold 64 descriptors: its leader takes at most 16
# ranks, a quarter, but the process's own 45 leave room for about 10.)
cr = comm_records(d)
ok(len(cr) == 64 and all(c["action"] == "passthrough" for c in cr),
   "EMFILE at a leader: all 64 ranks pass through", sorted({c["action"] for c in cr}))
named = [c for c in cr if "ran out of file descriptors" in c["action_reason"] and "RLIMIT_NOFILE" in
         c["action_reason"]]
# A rank whose connection races the leader's last moments may see it close
# instead (it still passes through, as every rank must): nearly all name it.
ok(len(named) >= 48, "the ranks' reasons name the leader's descriptor limit (%d of 64)" % len(named),
   (len(named), sorted({c["action_reason"][:160] for c in cr if c not in named})[:3]))
ok(took < scaled(25), "at once: %.1f s, the timeout is %d s" % (took, int(TIMEOUT) // 1000))

# 4. A leader dies mid-rendezvous (one rank never comes, so nothing is decided
#    yet): every other rank passes through within the bound, and the root says why.
d, base, root, hid = start_root("leader-dies", {"NCCLSHIM_RENDEZVOUS_FANIN": "0",
                                                 "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": TIMEOUT})
leader = Proc(["ranks", hid, "40", "0", "1"], dict(base, NCCLSHIM_HOSTNAME="node0", NCCLSHIM_ROLE="training"))
wait_leading(0, leader)
member = Proc(["ranks", hid, "40", "1", "10"], dict(base, NCCLSHIM_HOSTNAME="node0", NCCLSHIM_ROLE="inference"))
other = Proc(["ranks", hid, "40", "11", "28"], dict(base, NCCLSHIM_HOSTNAME="node1", NCCLSHIM_ROLE="inference"))
# rank 39 never comes.  Wait until the root holds both hosts' leaders, then kill node0's.
deadline = Deadline(BOUND)
while not deadline.passed():
    socks = []
    try:
        socks = [os.readlink("/proc/%d/fd/%s" % (root.p.pid, f)) for f in os.listdir("/proc/%d/fd" % root.p.pid)]
    except OSError:
        pass
    if sum(s.startswith("socket:") for s in socks) >= 3:  # listener + 2 leaders
        break
    time.sleep(0.005)
# Killed with its host's HELLOs forwarded or not, the outcome is the same: the
# root loses the leader before any verdict (a leader connects only with a HELLO
# to forward), and node0's ranks that were behind it ask the root.
t0 = time.monotonic()
leader.p.kill()
diag("node0's leader killed on purpose (SIGKILL) mid-rendezvous")
leader.wait()
member.wait()
other.wait()
took = time.monotonic() - t0
root.release()
root.wait()
cr = comm_records(d)
ok(len(cr) == 38 and all(c["action"] == "passthrough" for c in cr),
   "a leader killed: the 38 other ranks pass through", (len(cr), sorted({c["action"] for c in cr})))
ok(took < scaled(10), "within the bound: %.1f s after the kill, the timeout is %d s" % (took, int(TIMEOUT) // 1000))
dr = decision_records(d)
# The root hears of it from its connection to the leader, or first from a rank
# that lost the leader and asked it (rv_ask.c): either way, before any verdict.
ok(dr and ("closed its connection before the decision" in dr[0]["action_reason"]
           or "lost its path to the root" in dr[0]["action_reason"]),
   "the root's record says the leader's connection closed, or a rank of it asked", [r["action_reason"] for r in dr])
ok(all("leader" in c["action_reason"] for c in cr), "every rank's reason names the leader",
   sorted({c["action_reason"][:160] for c in cr})[:3])

# 5. ipc needs each rank's own connection: through leaders, auto's ipc becomes passthrough, and says why.
d, root, procs = run("ipc-leaders", 3, [(0, 2, "node0", {}), (2, 1, "node0", {})],
                     {"NCCLSHIM_WEIGHT_UPDATE": "auto", "NCCLSHIM_RENDEZVOUS_FANIN": "0"})
cr = comm_records(d)
ok(len(cr) == 3 and all(c["action"] == "passthrough" and "ipc needs each rank connected to the root" in
                        c["action_reason"] for c in cr),
   "auto's ipc through leaders: passthrough for all, naming NCCLSHIM_RENDEZVOUS_FANIN", [c["action_reason"] for c in cr])

# 6. A rank twice (a launcher's mistake), through leaders: the root cannot drop a leader's
#    connection (its other ranks would be missing until the timeout): when the second rank 1
#    reaches the root before the set is complete, all pass through at once, and the root's
#    record names it.  Which comes first is the processes' race (no hook orders arrivals at
#    the root): a duplicate after the set was complete meets a decision already made (its
#    leader's connection gets the commit, or a new one is refused: it passes through alone,
#    harmless beside NCCL refusing the duplicate).  Either way no init waits for the timeout.
t0 = time.monotonic()
d, root, procs = run("twice", 4, [(0, 2, "node0", {}), (1, 1, "node1", {}), (2, 2, "node1", {})],
                     {"NCCLSHIM_RENDEZVOUS_FANIN": "0", "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": TIMEOUT})
took = time.monotonic() - t0
cr = comm_records(d)
dr = decision_records(d)
seen = bool(dr) and "arrived twice" in dr[0]["action_reason"]
ok(len(cr) == 5 and took < scaled(20) and (not seen or all(c["action"] == "passthrough" for c in cr)),
   "a rank twice through leaders: all 5 inits return at once (%.1f s, the timeout is %d s), all passing through "
   "if the root saw the duplicate (it %s)" % (took, int(TIMEOUT) // 1000, "did" if seen else "did not: it came after "
                                              "the set"),
   [(c["rank"], c["action"], c["action_reason"][:120]) for c in cr])
ok(dr and (seen or sum(c["rank"] == 1 for c in cr) == 2),
   "the root's record says which rank arrived twice, or the duplicate came after the decision",
   [r["action_reason"] for r in dr])

# 7. The synthetic ranks of bench/rv_scale.py --synthetic-grid (issue 45): 8 hosts x 4 ranks, the
#    first rank of each a real process (the host's leader, through the shim), the other 24 spoken
#    for by tests/bin/rv_synth_ranks, one process without the shim.  Every rank, real or not, is
#    committed socket in one round by the real root, which held one connection per leader.
SYNTH = os.path.join(ROOT, "tests", "bin", "rv_synth_ranks")
d, base, root, hid = start_root("synth", {"NCCLSHIM_RENDEZVOUS_FANIN": "8",
                                           "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": TIMEOUT})
reals = [Proc(["ranks", hid, "32", str(4 * h), "1"], dict(base, NCCLSHIM_HOSTNAME="h%d" % h,
                                                        NCCLSHIM_ROLE="training" if h == 0 else "inference"))
         for h in range(8)]
senv = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_", "MANY_RANKS_", "LD_PRELOAD"))}
senv.update(RV_SYNTH_EXE=MANY, RV_SYNTH_WAIT_MS=str(int(scaled(BOUND) * 1000)))
t0 = time.monotonic()
sp = subprocess.Popen([SYNTH, hid, "32", "4", "0", "8"], env=senv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      text=True)
sout, serr = wait_bounded(sp, t0, BOUND)
for p in reals:
    p.wait()
root.release()
root.wait()
kv = dict(x.split("=") for x in sout.split()[1:]) if sout.startswith("SYNTH") else {}
ok(sp.returncode == 0 and kv.get("ranks") == "24" and kv.get("socket") == "24" and kv.get("rounds2") == "0",
   "rv_synth_ranks: its 24 ranks joined their hosts' real leaders and were committed socket in one round",
   (sp.returncode, sout, serr[-2000:]))
cr = comm_records(d)
dr = decision_records(d)
ok(len(cr) == 8 and all(c["action"] == "socket" for c in cr), "and the 8 real ranks took socket",
   [(c["rank"], c["action"], c["action_reason"][:120]) for c in cr])
ok(len(dr) == 1 and dr[0]["stage"] == "commit" and dr[0]["arrived"] == 32 and dr[0]["leaders"] == 8 and
   dr[0]["rounds"] == 1, "the real root heard 32 ranks through 8 leaders and committed in one round",
   [{k: r.get(k) for k in ("stage", "arrived", "leaders", "rounds", "action_reason")} for r in dr])
ok(dr and dr[0]["training"] == 4 and dr[0]["inference"] == 28 and dr[0]["hosts"] == 8,
   "the synthetic ranks counted as their hosts' and roles' (4 training on h0, 28 inference, 8 hosts)",
   [{k: r.get(k) for k in ("training", "inference", "hosts")} for r in dr])

done(TMP, keep_on_failure=True)
