#!/usr/bin/env python3
# The rendezvous under abuse (issue 17): strangers on the root's port (idle
# connections beyond the cap, connections that drip, a connect/garbage flood,
# a flood of HELLOs with a wrong token) cannot talk the root out of its
# decision: every real rank takes the configured action (socket), and the
# root's decision record counts what it rejected, by cause.  A rank that has
# shown the token is never evicted, however many strangers come and however
# long its HELLO takes.  Each process runs under a bound; the attacks last as
# long as the ranks' rendezvous (a few seconds in all on two cores).
import json, os, select, socket, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import (BIN, CUDA, PRELOAD, ROOT, Deadline, communicate_until, done, env_time, ok, records,  # noqa: E402
                 scaled)

CLIENT = os.path.join(BIN, "rank_client")
FRAME = os.path.join(BIN, "rv_frame")
ABUSE = os.path.join(ROOT, "tests", "rv", "abuse.py")
INSPECT = os.environ.get("INSPECT", os.path.join(ROOT, "tools", "ncclshim-inspect"))
# Seconds no process of these tests may live longer, on a quiet machine; TIMEOUT the rendezvous
# timeout (the default), which no rank may come near.  Both stretched with the machine (tap.py).
BOUND = 30
TIMEOUT = env_time(30000)
TMP = tempfile.mkdtemp(prefix="ncclshim-abuse.")
# Every attack runs until its stdin closes; this is only its own bound.
ATTACK_S = str(int(scaled(25)))

class Proc:
    """A process killed (and reported) if it outlives BOUND."""

    def __init__(self, name, args, env=None, stdin=False):
        self.name = name
        full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_"))}
        full.pop("LD_PRELOAD", None)
        if env is not None:
            full.update(env)
            full["LD_PRELOAD"] = PRELOAD
        self.p = subprocess.Popen(args, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.start = time.monotonic()
        self.buf = b""
        self.out = None

    def line(self, prefix):
        """The first line starting with `prefix`, within the bound (raw reads: select sees them)."""
        fd = self.p.stdout.fileno()
        deadline = Deadline(BOUND, self.start)
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                if line.decode(errors="replace").startswith(prefix):
                    return line.decode()
            left = deadline.left()
            if left <= 0 or not select.select([fd], [], [], min(left, 1))[0]:
                if deadline.passed():
                    raise RuntimeError("%s printed no %r line within %ds" % (self.name, prefix, deadline.bound()))
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError("%s exited before a %r line: %s" % (self.name, prefix,
                                                                      self.p.stderr.read().decode()[-500:]))
            self.buf += chunk

    def release(self):
        if self.p.stdin:
            self.p.stdin.close()
            self.p.stdin = None

    def wait(self):
        if self.out is None:
            out, err, killed = communicate_until(self.p, Deadline(BOUND, self.start))
            if killed:
                err += b"\nKILLED: ran past the bound (a hang)"
            self.out = self.buf.decode(errors="replace") + out.decode(errors="replace")
            self.err = err.decode(errors="replace")
        return self.out


def frame(*args):
    return subprocess.run([FRAME] + list(args), capture_output=True, text=True, check=True).stdout.split()


def attack(name, mode, n, extra=(), ready="READY", rules=None, own_rank0=None):
    """A holder serves an ID (NCCLSHIM_WEIGHT_UPDATE=socket); the attack starts and
    reaches `ready`; then real ranks 0 and 1 init with the ID.  With own_rank0 =
    (before, after): rank 0 is the caller's: before(port, token) runs before the
    attack starts, after(its result) once it is ready, and only rank 1 is started.
    Returns (records dir, the attack's STATS line, rank processes, what after returned)."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    env = {"NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log", "RANK_CLIENT_CUDA": CUDA,
           "NCCLSHIM_WEIGHT_UPDATE": "socket", "NCCLSHIM_ROLE": "training", "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": TIMEOUT}
    if rules:
        env["NCCLSHIM_RULES"] = rules
    holder = Proc("holder", [CLIENT, "ids", "1", "hold"], env, stdin=True)
    hid = holder.line("ID ").split()[1]
    token, port = frame("token", hid)
    mine = own_rank0[0](int(port), token) if own_rank0 else None
    abuser = None
    if mode:
        abuser = Proc("abuse", [sys.executable, ABUSE, port, mode, str(n), "--seconds", ATTACK_S] + list(extra),
                      stdin=True)
        abuser.line(ready)
    extra_state = own_rank0[1](mine) if own_rank0 else None
    ranks = []
    for r in (0, 1):
        if r == 0 and own_rank0:
            continue
        ranks.append(Proc("rank%d" % r, [CLIENT, "rank", str(r), "2", hid],
                          dict(env, NCCLSHIM_ROLE=("training", "inference")[r])))
    for p in ranks:
        p.wait()
    stats = ""
    if abuser:
        abuser.release()
        stats = abuser.line("STATS")
        abuser.wait()
    holder.release()
    holder.wait()
    return d, stats, ranks, extra_state


def check(d, ranks, what, want_causes, at_least):
    rec = records(d + "/rec")
    comms = [r for r in rec if r.get("type") == "comm"]
    ok(len(comms) == len(ranks) and all(c["action"] == "socket" for c in comms),
       "%s: every real rank takes the configured action (socket)" % what,
       [(c.get("rank"), c.get("action"), c.get("action_reason")) for c in comms] +
       [p.err[-300:] for p in ranks if p.err])
    waits = [c.get("decision", {}).get("wait_us", 10 ** 9) for c in comms]
    ok(waits and max(waits) < scaled(10) * 10 ** 6,
       "%s: and no rank waited anywhere near the rendezvous timeout (%s ms)" % (what, [w // 1000 for w in waits]))
    dec = [r for r in rec if r.get("type") == "decision"]
    by = dec[-1].get("rejected_by", {}) if dec else {}
    ok(dec and dec[-1]["rejected_connections"] >= at_least and sum(by.values()) == dec[-1]["rejected_connections"]
       and all(by.get(c, 0) > 0 for c in want_causes),
       "%s: the decision record counts the rejected connections (>= %d), by cause (%s)" %
       (what, at_least, ", ".join(want_causes)), dec[-1:] and {k: dec[-1][k] for k in ("rejected_connections",
                                                                                     "rejected_by")})
    warns = [r for r in rec if r.get("what") == "rendezvous-rejected"]
    ok(0 < len(warns) <= 8, "%s: at most 8 rendezvous-rejected warnings, the rest only counted (%d)" %
       (what, len(warns)))
    return dec[-1] if dec else {}


# 1. Idle connections beyond the cap (200: past the 64 and the hard 128), reopened as soon
#    as the root closes one: the root evicts the oldest stranger for each newcomer, so the
#    ranks get in.
d, stats, ranks, _ = attack("idle", "idle", 200, ready="CLOSED 72", extra=["--report-closed", "72"])
dec = check(d, ranks, "200 idle connections, reopened", ["evicted"], 72)
ok(" closed_by_root=" in stats and int(stats.split("closed_by_root=")[1].split()[0]) >= 72,
   "the attacker saw its connections closed by the root: %s" % stats)
# ... and ncclshim-inspect shows what was rejected, and why, in each view.
table = subprocess.run([INSPECT, d + "/rec"], capture_output=True, text=True).stdout
ok("connections rejected (" in table and " evicted" in table,
   "inspect: the decisions line counts the rejected connections, by cause", table[-800:])
verbose = subprocess.run([INSPECT, "-v", d + "/rec"], capture_output=True, text=True).stdout
ok("rendezvous: " in verbose and "rejected" in verbose and "evicted" in verbose,
   "inspect -v: the root's rendezvous line gives every cause", verbose[-1200:])
js = subprocess.run([INSPECT, "--json", d + "/rec"], capture_output=True, text=True).stdout
try:
    jd = [x for x in json.loads(js).get("decisions", [])]
except ValueError:
    jd = []
ok(jd and jd[0].get("rejected_connections") == dec.get("rejected_connections") and
   jd[0].get("rejected_by") == dec.get("rejected_by"),
   "inspect --json: rejected_connections and rejected_by as recorded", (jd[:1], js[-400:]))

# 2. Idle connections within the cap, not reopened: each is closed 1 s after its
#    connect (the token deadline), which the record counts as no_hello.
t0 = time.monotonic()
d, stats, ranks, _ = attack("deadline", "idle", 20, ready="CLOSED 20",
                            extra=["--no-reconnect", "--report-closed", "20"])
elapsed = time.monotonic() - t0
check(d, ranks, "20 idle connections", ["no_hello"], 20)
ok(elapsed >= 0.9, "the idle connections were closed by the deadline, not at once (%.2f s)" % elapsed)

# 3. Slow drip: 80 connections sending one byte a second (a valid header, slowly), reopened:
#    the deadline runs from the accept, whatever bytes come, so all 80 are closed at 1 s.
d, stats, ranks, _ = attack("drip", "drip", 80, ready="CLOSED 80", extra=["--report-closed", "80"])
check(d, ranks, "80 slow-drip connections", ["no_hello"], 80)

# 4. A flood of connect / 64 random bytes / reset, from 2 processes.
d, stats, ranks, _ = attack("flood", "flood", 2)
check(d, ranks, "connect/garbage flood", ["malformed"], 100)
ok("connects=" in stats and int(stats.split("connects=")[1].split()[0]) >= 200,
   "the flood made hundreds of connections: %s" % stats)

# 5. A flood of HELLOs with a wrong token (an ID from an earlier run, say).
d0 = os.path.join(TMP, "probe")
holder = Proc("probe", [CLIENT, "ids", "1", "hold"], {"NCCLSHIM_LOG_DIR": d0}, stdin=True)
probe_tok = frame("token", holder.line("ID ").split()[1])[0]
holder.release()
holder.wait()
hello_wrong = frame("hello", probe_tok, "0", "2")[0]  # a valid HELLO, for another ID
d, stats, ranks, _ = attack("wrongtoken", "flood", 2, extra=["--payload", hello_wrong])
check(d, ranks, "a flood of wrong-token HELLOs", ["wrong_token"], 100)


# 6. A rank that has shown the token is never evicted nor timed out: rank 0 here is
#    a raw connection that sends the first 32 bytes of its HELLO (header and token),
#    then waits while 200 reopened idle connections churn through the cap for longer
#    than the token deadline, then sends the rest.  The root must still count it:
#    DECISION comes on it, it votes, COMMIT socket comes on it and on the real rank 1.
def read_frame(s):
    """One frame from a raw connection: (type, bytes), (None, what came) if it closed first."""
    got = b""
    while len(got) < 12 or len(got) < 12 + int.from_bytes(got[8:12], "little"):
        try:
            chunk = s.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            return None, got
        got += chunk
    return int.from_bytes(got[6:8], "little"), got


def rank0_token(port, token):
    """Connects and shows the token (the first 32 bytes of its HELLO) before any stranger
    comes: nothing can evict it before the root has read them."""
    hello = bytes.fromhex(frame("hello", token, "0", "2")[0])
    s = socket.create_connection(("127.0.0.1", port), timeout=scaled(BOUND))
    s.sendall(hello[:32])
    return s, hello, bytes.fromhex(frame("vote", token, "1")[0])


def rank0_rest(mine):
    """Amid the strangers, waits past the token deadline, then sends the rest of the
    HELLO and, on the DECISION, its vote."""
    s, hello, vote = mine
    time.sleep(1.3)  # only outlasts the 1 s token deadline: not a synchronisation
    seen = []

    def rank0():
        try:
            s.sendall(hello[32:])
        except OSError as e:
            seen.append(str(e))
            return
        t, _ = read_frame(s)
        seen.append(t)
        if t == 2:
            s.sendall(vote)
            seen.append(read_frame(s)[0])

    th = threading.Thread(target=rank0, daemon=True)
    th.start()
    return s, th, seen


d, stats, ranks, (s, th, seen) = attack("authenticated", "idle", 200, ready="CLOSED 72",
                                        extra=["--report-closed", "72"], rules="nranks=2,inference=1:socket",
                                        own_rank0=(rank0_token, rank0_rest))
th.join(scaled(BOUND))
s.close()
ok(seen == [2, 4], "a rank that showed its token, then held its HELLO 1.3 s amid 200 churning strangers: "
   "DECISION then COMMIT come on its connection", seen)
rec = records(d + "/rec")
comms = [r for r in rec if r.get("type") == "comm"]
ok([c["action"] for c in comms] == ["socket"], "and the real rank 1 takes socket", comms[-1:])
dec = [r for r in rec if r.get("type") == "decision"]
ok(dec and dec[-1]["arrived"] == 2 and dec[-1]["rejected_by"].get("evicted", 0) >= 72,
   "the root counted both ranks, while it evicted strangers around rank 0",
   dec[-1:] and {k: dec[-1][k] for k in ("arrived", "missing", "rejected_by", "action", "action_reason")})
ok(not [w for w in rec if w.get("what") == "rendezvous-rejected" and "a rank that had arrived" in
        w.get("message", "")], "and no rank's connection is among the rejected")


# 7. A rank whose HELLO had begun (header and token read) when the root fell back at a limit
#    (here: an ABORT, what a host's leader at its descriptor limit sends) is told that verdict
#    once the rest of its HELLO comes, not dropped (which its rank would take for the root's
#    loss).  Loopback delivers a send before it returns, and the root reads the token of a
#    connection that was readable before it accepts the next one's, so the stranger's rejection
#    (read back here) comes after the root read rank 0's first 32 bytes.
d = os.path.join(TMP, "begun")
os.makedirs(d)
holder = Proc("holder", [CLIENT, "ids", "1", "hold"], {"NCCLSHIM_LOG_DIR": d + "/rec"}, stdin=True)
token, port = frame("token", holder.line("ID ").split()[1])
port = int(port)
hello = bytes.fromhex(frame("hello", token, "0", "2")[0])
a = socket.create_connection(("127.0.0.1", port), timeout=scaled(BOUND))
a.sendall(hello[:32])
c = socket.create_connection(("127.0.0.1", port), timeout=scaled(BOUND))
c.sendall(bytes.fromhex(hello_wrong))
stranger = read_frame(c)
b = socket.create_connection(("127.0.0.1", port), timeout=scaled(BOUND))
b.sendall(bytes.fromhex(frame("abort", token, "test: a leader at its descriptor limit")[0]))
told = read_frame(b)
try:
    a.sendall(hello[32:])
    begun = read_frame(a)
except OSError as e:
    begun = (None, str(e).encode())
for x in (a, b, c):
    x.close()
holder.release()
holder.wait()
ok(stranger[0] is None and told[0] == 2 and b"a leader at its descriptor limit" in told[1],
   "a stranger dropped, then the ABORT's sender told the final passthrough", [stranger[0], told[0], told[1][-200:]])
ok(begun[0] == 2 and b"a leader at its descriptor limit" in begun[1] and b"passthrough" in begun[1],
   "a rank whose HELLO had begun at the fall-back is told it (DECISION, the cause named) once its HELLO is whole",
   [begun[0], begun[1][-200:]])

done(TMP, keep_on_failure=True)
