#!/usr/bin/env python3
"""Chaos for the rendezvous: a root process and hosts x ranks processes on the
fake NCCL (hosts told apart by NCCLSHIM_HOSTNAME), every rank released at the
same instant (MANY_RANKS_START_AT), faults at random moments, every trial
bounded.  The invariant, checked after each trial: every rank whose process
survived finished within the bound and took the same action as every other
(one verdict, or all passthrough).  A trial can also require an action
(--want): a herd without a fault must decide, not fall back.

    chaos.py [--trials N] [--seed S] [--fault F[,F...]] [--hosts H] [--per P]
             [--threads] [--timeout-ms T] [--want ACTION] [--json]

Faults (one per trial, at a random moment unless said):
  none          a herd: nothing goes wrong
  kill-rank     SIGKILL a rank's process
  stop-rank     SIGSTOP a rank's process for 0.5..T+8 s, then SIGCONT
  stop-leader   SIGSTOP a host's leader's process (found by its abstract socket)
                once its host's HELLOs went up (0.25..0.5 T; a rank of the
                last host comes late, at 0.8 T, so the decision waits), for
                T+4..T+10 s
  stop-parent   the same, to a leader that holds other hosts' leaders (the tree)
  kill-leader   SIGKILL a host's leader's process
  stop-root     SIGSTOP the root's process for --stall s (default 2) at 0..0.5 s
  kill-root     SIGKILL the root's process (the only fault allowed to split:
                NCCL's bootstrap root dies with it, so no communicator forms)
  starve        a rank's process runs 10 ms in every 100 ms (SIGSTOP/SIGCONT)
  held-rank     the last host's last rank held up 1.3 T inside its init before
                it connects (NCCLSHIM_TEST_RV_FAULT connect=), while every
                other rank starts 0.6 T after it: the root's window is still
                open when it connects, past its own first T
  bad-address   a rank's ID names an address nobody listens on
  black-hole    a rank's ID names an address whose packets are dropped
  netns         a rank in an empty network namespace (unshare -n; skipped
                where it does not work)
Prints one line per trial and a summary; exit status 1 if any trial broke
the invariant.  tests/t/42-rv-chaos.t runs short ones; `make chaos` a long run.
"""
import argparse, json, os, random, re, shutil, signal, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from tap import PRELOAD, ROOT, read_first_id, records  # noqa: E402

MANY = os.path.join(ROOT, "tests", "bin", "many_ranks")
FAULTS = ["none", "kill-rank", "stop-rank", "stop-leader", "stop-parent", "kill-leader", "stop-root", "kill-root",
          "starve", "held-rank", "bad-address", "black-hole", "netns"]


def can_unshare():
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def bad_id(hexid, ip):
    """The ID with the root's IPv4 address (bytes 12..15: sockaddr_in at 8) replaced."""
    b = bytearray.fromhex(hexid)
    b[12:16] = bytes(int(x) for x in ip.split("."))
    return b.hex()


def leader_pids(pids):
    """{pid: slot name} of the processes among `pids` that listen on a leader's abstract socket."""
    inodes = {}
    try:
        with open("/proc/net/unix") as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if len(parts) >= 8 and parts[5] == "01" and parts[7].startswith("@ncclshim-rv-"):
                    inodes[parts[6]] = parts[7]
    except OSError:
        return {}
    out = {}
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                m = re.match(r"socket:\[(\d+)\]", link)
                if m and m.group(1) in inodes:
                    out[pid] = inodes[m.group(1)]
        except OSError:
            continue
    return out


def tcp_established(pid):
    """How many established TCP connections `pid` holds (a leader holding other hosts' leaders: more than one)."""
    inodes = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                for line in fh.readlines()[1:]:
                    p = line.split()
                    if len(p) > 9 and p[3] == "01":
                        inodes.add(p[9])
        except OSError:
            pass
    n = 0
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            m = re.match(r"socket:\[(\d+)\]", os.readlink("/proc/%d/fd/%s" % (pid, fd)))
            n += bool(m and m.group(1) in inodes)
    except OSError:
        pass
    return n


def per_rank(f):
    return f not in ("stop-leader", "stop-parent", "kill-leader", "held-rank")


class Trial:
    def __init__(self, a, fault, rng, tmp, idx):
        self.a, self.fault, self.rng = a, fault, rng
        self.dir = os.path.join(tmp, "t%03d-%s" % (idx, fault))
        os.makedirs(self.dir)
        self.T = a.timeout_ms / 1000.0
        self.note = ""
        self.killed = set()          # pids killed on purpose
        self.exempt = fault == "kill-root"

    def env(self, extra):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_", "MANY_RANKS_"))}
        e.update({"LD_PRELOAD": PRELOAD, "NCCLSHIM_LOG_DIR": self.dir + "/rec", "NCCLSHIM_WEIGHT_UPDATE": "socket",
                  "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": str(self.a.timeout_ms)})
        if self.a.fanin is not None:
            e["NCCLSHIM_RENDEZVOUS_FANIN"] = str(self.a.fanin)
        if self.a.fault_env:
            e["NCCLSHIM_TEST_RV_FAULT"] = self.a.fault_env
        e.update(extra)
        return e

    def spawn(self, args, extra, stdin=False, prefix=()):
        return subprocess.Popen(list(prefix) + [MANY] + args, env=self.env(extra), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=lambda: _limit_fds(self.a.nofile),
                                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)

    def run(self):
        a = self.a
        nranks = a.hosts * a.per
        self.root = self.spawn(["id"], {"NCCLSHIM_ROLE": "training"}, stdin=True)
        hexid = read_first_id(self.root, 30)
        start_at = time.time() + a.lead
        self.start_mono = time.monotonic() + a.lead
        self.procs = []               # (host, first rank, count, Popen)
        # The rank a per-rank fault hits; a leader fault makes it late instead.
        odd = self.rng.randrange(nranks) if per_rank(self.fault) else nranks - 1 - self.rng.randrange(a.per)
        # Half the per-rank faults (not a herd's "none") also get a late rank, so
        # that the rendezvous is still open when the fault comes.
        slow = (nranks - 1 if odd != nranks - 1 else 0) \
            if per_rank(self.fault) and self.fault != "none" and self.rng.random() < 0.5 else -1
        late = "connect=%d" % int(self.a.timeout_ms * 0.8)
        outs = {}
        for h in range(a.hosts):
            ranks = [(h * a.per, a.per)] if a.threads else [(h * a.per + i, 1) for i in range(a.per)]
            for first, count in ranks:
                hid, prefix, extra_fault = hexid, (), None
                if odd in range(first, first + count):
                    if self.fault == "bad-address":
                        hid = bad_id(hexid, "127.0.0.2")
                    elif self.fault == "black-hole":
                        hid = bad_id(hexid, "192.0.2.1")
                    elif self.fault == "netns":
                        prefix = ("unshare", "-n")
                    elif self.fault in ("stop-leader", "stop-parent", "kill-leader"):
                        # Late, so that the decision waits while the leader is stopped.
                        extra_fault = ",".join(filter(None, [self.a.fault_env, late]))
                    elif self.fault == "held-rank":
                        held = "connect=%d" % int(self.a.timeout_ms * 1.3)
                        extra_fault = ",".join(filter(None, [self.a.fault_env, held]))
                        self.note = "rank %d held 1.3 T before connecting; " % odd
                release = start_at
                if self.fault == "held-rank" and odd not in range(first, first + count):
                    release = start_at + 0.6 * self.T
                if slow in range(first, first + count) and odd not in range(first, first + count):
                    extra_fault = ",".join(filter(None, [self.a.fault_env, late]))
                    self.note = "a late rank; "
                extra = {"NCCLSHIM_HOSTNAME": "h%d" % h, "NCCLSHIM_ROLE": "training" if h == 0 else "inference",
                         "MANY_RANKS_START_AT": str(int(release * 1e9))}
                if extra_fault:
                    extra["NCCLSHIM_TEST_RV_FAULT"] = extra_fault
                p = self.spawn(["ranks", hid, str(nranks), str(first), str(count)], extra, prefix=prefix)
                self.procs.append((h, first, count, p))
                if odd in range(first, first + count):
                    self.victim = p
        self.bound = a.bound or (self.T * 2 + 25 + a.stall)
        injector = threading.Thread(target=self.inject, daemon=True)
        injector.start()
        for h, first, count, p in self.procs:
            outs[p.pid] = self.wait(p)
        injector.join(timeout=5)
        self.cont_all()
        self.root.stdin.close()
        self.root.stdin = None
        rout, rerr = self.wait(self.root)
        return self.judge(outs, rout, rerr)

    def wait(self, p):
        left = self.start_mono + self.bound - time.monotonic()
        try:
            return p.communicate(timeout=max(1, left))
        except subprocess.TimeoutExpired:
            self.cont(p.pid)
            p.kill()
            out, err = p.communicate()
            return out, err + "\nKILLED: ran past %ds (a hang)" % self.bound

    def sleep_until(self, t):
        d = self.start_mono + t - time.monotonic()
        if d > 0:
            time.sleep(d)

    def cont(self, pid):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass

    def cont_all(self):
        for _, _, _, p in self.procs:
            self.cont(p.pid)
        self.cont(self.root.pid)

    def sig(self, pid, s):
        try:
            os.kill(pid, s)
        except OSError:
            pass

    def find_leader(self, parent):
        """A host's leader after its HELLOs went up (its process listens; for `parent`, on TCP too)."""
        deadline = time.monotonic() + self.T
        pids = [p.pid for _, _, _, p in self.procs]
        while time.monotonic() < deadline:
            ls = leader_pids(pids)
            if parent:
                ls = {pid: n for pid, n in ls.items() if tcp_established(pid) > 1}
            late_host = {pr.pid: h for h, _, _, pr in self.procs}[self.victim.pid]
            ls = {pid: n for pid, n in ls.items() if {pr.pid: h for h, _, _, pr in self.procs}[pid] != late_host}
            if ls and time.monotonic() >= self.start_mono + 0.2 * self.T:
                return self.rng.choice(sorted(ls))
            time.sleep(0.02)
        return None

    def inject(self):
        f, rng, T = self.fault, self.rng, self.T
        if f in ("none", "bad-address", "black-hole", "netns", "held-rank"):
            return
        if f == "stop-root":
            self.sleep_until(rng.uniform(0, 0.5))
            self.sig(self.root.pid, signal.SIGSTOP)
            time.sleep(self.a.stall)
            self.sig(self.root.pid, signal.SIGCONT)
            self.note += "root stopped %.1f s" % self.a.stall
            return
        if f == "kill-root":
            self.sleep_until(rng.uniform(0, T))
            self.sig(self.root.pid, signal.SIGKILL)
            return
        if f in ("stop-leader", "stop-parent", "kill-leader"):
            self.sleep_until(0)
            pid = self.find_leader(f == "stop-parent")
            if pid is None:
                self.note = "no leader found"
                return
            # Before the late rank arrives (0.8 T): the decision waits for it.
            self.sleep_until(rng.uniform(0.25 * T, 0.5 * T))
            if f == "kill-leader":
                self.sig(pid, signal.SIGKILL)
                self.killed.add(pid)
                self.note = "killed leader %d" % pid
                return
            d = rng.uniform(T + 4, T + 10) if self.a.stop_s is None else self.a.stop_s
            self.sig(pid, signal.SIGSTOP)
            time.sleep(d)
            self.sig(pid, signal.SIGCONT)
            self.note = "leader %d stopped %.1f s" % (pid, d)
            return
        pid = self.victim.pid
        self.sleep_until(rng.uniform(0, 0.9 * T))
        if f == "kill-rank":
            self.sig(pid, signal.SIGKILL)
            self.killed.add(pid)
        elif f == "stop-rank":
            d = rng.uniform(0.5, T + 8)
            self.sig(pid, signal.SIGSTOP)
            time.sleep(d)
            self.sig(pid, signal.SIGCONT)
            self.note += "rank stopped %.1f s" % d
        elif f == "starve":
            until = time.monotonic() + T + 4
            while time.monotonic() < until and self.victim.poll() is None:
                self.sig(pid, signal.SIGSTOP)
                time.sleep(0.09)
                self.sig(pid, signal.SIGCONT)
                time.sleep(0.01)

    def judge(self, outs, rout, rerr):
        pids = {p.pid: (h, first, count) for h, first, count, p in self.procs}
        recs = records(self.dir + "/rec")
        comms = [c for c in recs if c.get("type") == "comm" and c.get("pid") in pids]
        acts = {}
        for c in comms:
            acts.setdefault(c.get("action"), []).append(c.get("rank"))
        hung = [pid for pid, (o, e) in outs.items() if "KILLED" in e]
        dead = {p.pid for _, _, _, p in self.procs if p.returncode == -9 and p.pid not in hung} | self.killed
        want_ranks = sum(count for pid, (h, first, count) in pids.items() if pid not in dead)
        kinds = {}
        for c in comms:
            k = (c.get("decision") or {}).get("fallback_kind")
            if k:
                kinds[k] = kinds.get(k, 0) + 1
        dec = [r for r in recs if r.get("type") == "decision"]
        res = {"fault": self.fault, "note": self.note.rstrip("; "), "actions": {k: len(v) for k, v in acts.items()},
               "ranks": want_ranks, "records": len(comms), "hung": len(hung), "fallback_kinds": kinds,
               "root": {k: dec[0].get(k) for k in ("action", "arrived", "rejected_by", "leaders", "action_reason")}
               if dec else None}
        problems = []
        if hung:
            problems.append("%d processes hung past %d s" % (len(hung), self.bound))
        if len(acts) > 1 and not self.exempt:
            problems.append("split: %s" % {k: sorted(v)[:8] for k, v in acts.items()})
        if len(comms) < want_ranks and not hung and not self.exempt:
            problems.append("%d of %d surviving ranks left no record" % (want_ranks - len(comms), want_ranks))
        if self.a.want and self.fault in ("none", "stop-root", "stop-leader", "stop-parent", "held-rank") and \
                set(acts) != {self.a.want}:
            problems.append("wanted %s for all, got %s" % (self.a.want, res["actions"]))
        res["problems"] = problems
        if problems:
            res["stderr"] = sorted({ln for o, e in outs.values() for ln in e.splitlines() if "warning" in ln
                                    or "KILLED" in ln})[:6]
        return res


def _limit_fds(n):
    import resource
    if n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--fault", default=",".join(FAULTS))
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--per", type=int, default=4, help="ranks a host")
    ap.add_argument("--threads", action="store_true", help="a host's ranks are threads of one process")
    ap.add_argument("--timeout-ms", type=int, default=3000)
    ap.add_argument("--fanin", type=int, default=0, help="NCCLSHIM_RENDEZVOUS_FANIN (0: always leaders)")
    ap.add_argument("--fault-env", default="", help="NCCLSHIM_TEST_RV_FAULT for every process (fanout=2: a tree)")
    ap.add_argument("--stall", type=float, default=2.0, help="stop-root: seconds")
    ap.add_argument("--stop-s", type=float, default=None, help="stop-leader/stop-parent: seconds")
    ap.add_argument("--lead", type=float, default=None, help="seconds from spawning to the release")
    ap.add_argument("--bound", type=float, default=0, help="seconds a trial may take (default 2T + 25 + stall)")
    ap.add_argument("--nofile", type=int, default=1024, help="every process's ulimit -n")
    ap.add_argument("--want", default=None, help="the action a trial without a harmful fault must take")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the records of trials that passed")
    a = ap.parse_args()
    if a.lead is None:
        a.lead = 1.0 + a.hosts * a.per * (0.004 if a.threads else 0.012)
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    faults = [f for f in a.fault.split(",") if f]
    for f in faults:
        if f not in FAULTS:
            ap.error("unknown fault %s" % f)
    if "netns" in faults and not can_unshare():
        faults.remove("netns")
        print("# netns: skipped (unshare -n does not work here)")
    if not faults:
        print("# no fault can run here")
        return 0
    tmp = tempfile.mkdtemp(prefix="ncclshim-chaos.")
    print("# seed %d, %d x %d ranks (%s), T = %d ms, records in %s" % (seed, a.hosts, a.per,
          "threads" if a.threads else "processes", a.timeout_ms, tmp), flush=True)
    bad = 0
    for i in range(a.trials):
        f = faults[i % len(faults)] if a.trials >= len(faults) else rng.choice(faults)
        t0 = time.monotonic()
        res = Trial(a, f, random.Random(rng.randrange(1 << 30)), tmp, i).run()
        res["seconds"] = round(time.monotonic() - t0, 1)
        bad += bool(res["problems"])
        print(json.dumps(res) if a.json else "%s trial %d %-12s %5.1fs %s %s%s" % (
            "BAD" if res["problems"] else "ok ", i, f, res["seconds"], res["actions"], res["note"],
            (" PROBLEMS: %s root: %s kinds: %s stderr: %s" % (res["problems"], res["root"], res["fallback_kinds"],
                                                             res.get("stderr"))) if res["problems"] else ""),
              flush=True)
    print("# %d of %d trials broke the invariant (seed %d)%s" % (bad, a.trials, seed,
          ", records kept in " + tmp if bad or a.keep else ""))
    if not bad and not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
