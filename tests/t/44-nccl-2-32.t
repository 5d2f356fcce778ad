#!/usr/bin/env python3
# NCCL 2.31/2.32 (issue 44): the eight nccl*Config collectives (a trailing
# per-collective config after the stream) on every kind of communicator, looked
# up with dlsym(RTLD_DEFAULT) as a caller built against 2.31 reaches them:
#   - NCCL's (passthrough), on the fake NCCL 2.32.3 (tests/fake/newest): forwarded
#     unchanged, config and all, and counted under the plain collective's name;
#     on the fake 2.28.9 (tests/fake/a), which lacks them: refused, never a crash;
#   - ipc, 2 and 3 processes, and 2 colocated on one device: broadcast, all-gather
#     and all-reduce bit-exact, the other five answered as their plain forms, a
#     config NCCL cannot read refused with ncclInvalidArgument, NCCL never
#     called; a 2.32 launchCompletionEvent recorded (FAKE_CUDA_FAIL=cuEventRecord:
#     the calls that carry one fail, the others do not);
#   - drop: every call counted and successful.
# Every process runs under a bound (BOUND); one that overruns it fails the test.
import os, re, select, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import BIN, CUDA, PRELOAD, ROOT, done, env_time, is_, ok, records, scaled  # noqa: E402

CLIENT = os.path.join(BIN, "rank_client")
NEWEST = os.path.join(ROOT, "tests", "fake", "newest")
BOUND = scaled(30)  # a quiet machine's 30 s, stretched as every bound of the suite (tap.slow())
TMP = tempfile.mkdtemp(prefix="ncclshim-t44.")
FIVE = ("ncclReduceConfig", "ncclReduceScatterConfig", "ncclAlltoAllConfig", "ncclGatherConfig", "ncclScatterConfig")


class Proc:
    """One rank_client under the shim, killed (and reported) past BOUND."""

    def __init__(self, args, env):
        full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_"))}
        full.update(env)
        full["LD_PRELOAD"] = PRELOAD
        self.p = subprocess.Popen([CLIENT] + args, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True)
        self.start = time.monotonic()
        self.out = None

    def first_id(self):
        """The "ID <hex>" line rank 0 prints before its init, read within the bound
        (raw reads, kept: a buffered reader would hide what follows from communicate)."""
        self.head, fd, deadline = b"", self.p.stdout.fileno(), self.start + BOUND
        while b"\n" not in self.head:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError("the root printed no ID within %.0fs" % BOUND)
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError("the root exited before printing its ID: " + self.p.stderr.read())
            self.head += chunk
        self.head = self.head.decode()
        return self.head.split("\n")[0].split()[1]

    def wait(self):
        if self.out is None:
            try:
                out, self.err = self.p.communicate(timeout=max(1, BOUND - (time.monotonic() - self.start)))
            except subprocess.TimeoutExpired:
                self.p.kill()
                out, self.err = self.p.communicate()
                self.err += "\nKILLED: ran past %.0fs (a hang)" % BOUND
            self.out = getattr(self, "head", "") + out
        return self.out

    def lines(self, tag):
        return [l for l in self.wait().splitlines() if l.startswith(tag + " ")]


def run(name, nranks, env, args, per_rank=lambda r: {}, one_gpu=False):
    """Rank 0 makes the ID and is the root; every rank runs `args` after its init."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    base = dict({"NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log", "RANK_CLIENT_CUDA": CUDA}, **env)

    def env_of(r):
        return dict(base, FAKE_CUDA_DEVICE="0" if one_gpu else str(r), **per_rank(r))

    procs = [Proc(["root", "1", str(nranks)] + args, env_of(0))]
    hexid = procs[0].first_id()
    procs += [Proc(["rank", str(r), str(nranks), hexid] + args, env_of(r)) for r in range(1, nranks)]
    for p in procs:
        p.wait()
    return d, procs


def rcs(p, name):
    """The results a process printed for `name`: [config form] or [config, plain]."""
    return [l.split()[3::2] for l in p.lines("COLLCFG-RC") if l.split()[2] == name]


def fake_log(d):
    path = d + "/fake.log"
    return open(path).read().splitlines() if os.path.exists(path) else []


def ends(d):
    return sorted((r for r in records(d + "/rec") if r.get("type") == "comm_end"), key=lambda r: r.get("rank", 0))


def summary(procs):
    return [l for p in procs for l in p.lines("COLLCFG")] + [p.err[-400:] for p in procs if p.err]


# --- NCCL's communicator, on an NCCL that has them (2.32.3) -------------------
d, procs = run("nccl", 1, {"LD_LIBRARY_PATH": NEWEST}, ["collcfg=1"])
p = procs[0]
is_(p.lines("COLLCFG"), ["COLLCFG 0 ok"], "NCCL 2.32.3, NCCL's communicator: every nccl*Config call succeeds, "
    "data in place (1 rank)")
ok(all(r[0] == r[1] for n in FIVE for r in rcs(p, n)) and len([1 for n in FIVE for r in rcs(p, n)]) == 5,
   "the other five return what their plain forms return", p.lines("COLLCFG-RC"))
is_([rcs(p, "badmagic"), rcs(p, "smallsize")], [[["4"]], [["4"]]],
    "a config of another magic, or smaller than 2.31's, is refused by NCCL (ncclInvalidArgument)")
calls = [l for l in fake_log(d) if "Config " in l and "InitRank" not in l]
ok(len(calls) == 3 + 2 + 5 + 2 and all(" comm=0x" in l and "INVALID-COMM" not in l for l in calls),
   "every call reached NCCL with NCCL's own communicator (%d calls)" % len(calls), calls[:3])
event = re.compile(r" cc=72,1,23203,0x[1-9a-f][0-9a-f]* -> ")
ok(len([l for l in calls if event.search(l)]) == len(calls) - 4 and
   len([l for l in calls if " config=0x0 " in l]) == 2 and
   [l for l in calls if " cc=72,0," in l] and [l for l in calls if " cc=%d,1," % (72 - 16) in l],
   "the caller's config reached NCCL unchanged (size, magic, version, event), NULL ones as NULL, bad ones as "
   "they were", calls)
e = ends(d)
ops = e[0]["ops"] if e else {}
ok(len(e) == 1 and ops.get("Broadcast", {}).get("count") == 3 and ops.get("AllReduce", {}).get("count") == 3 and
   ops.get("AllGather", {}).get("count") == 1 and ops.get("Reduce", {}).get("count") == 2 and
   not [k for k in ops if "Config" in k],
   "records count them under their plain collective's name (broadcasts 3, all-reduces 3 with the refused two)", ops)

# --- on an NCCL without them (2.28.9): refused by the shim, no crash ---------
d, procs = run("nccl228", 1, {}, ["collcfg=1"])
p = procs[0]
ok(p.lines("COLLCFG") and p.lines("COLLCFG")[0].startswith("COLLCFG 0 fail") and
   rcs(p, "ncclBroadcastConfig") and all(r[0] == "3" for r in rcs(p, "ncclBroadcastConfig")) and
   p.lines("COMM") == ["COMM 0 rc=0 count=1 rank=0 dev=0 ops=0 destroy=0"],
   "NCCL 2.28.9, which lacks them: the shim's symbol answers ncclInternalError (the table's answer for a "
   "function the loaded NCCL lacks), the process goes on", summary(procs))
ok(not [l for l in fake_log(d) if "Config " in l and "InitRank" not in l], "and nothing reached that NCCL")

# --- ipc: 2 and 3 processes, and 2 colocated on one device -------------------
IPC = {"NCCLSHIM_WEIGHT_UPDATE": "ipc", "NCCLSHIM_IPC_CHUNK_BYTES": "4096", "NCCLSHIM_IPC_SLOTS": "2",
       "NCCLSHIM_IPC_STEP_BYTES": "8192", "FAKE_CUDA_WAIT_TIMEOUT_MS": env_time(10000)}


def roles(n_train):
    return lambda r: {"NCCLSHIM_ROLE": "training" if r < n_train else "inference"}


for name, n, one_gpu, mem in (("ipc2", 2, False, "cuda"), ("ipc3", 3, False, "host"), ("ipc2-colocated", 2, True,
                                                                                         "cuda")):
    d, procs = run(name, n, IPC, ["collcfg=1"], lambda r, n=n, mem=mem: dict(roles(n - 1)(r), RANK_CLIENT_MEM=mem),
                   one_gpu=one_gpu)
    is_([l for p in procs for l in p.lines("COLLCFG")], ["COLLCFG 0 ok"] * n,
        "%s: ncclBroadcastConfig from every root, ncclAllGatherConfig and ncclAllReduceConfig are bit-exact "
        "on every rank" % name)
    if [l for p in procs for l in p.lines("COLLCFG")] != ["COLLCFG 0 ok"] * n:
        print("#", summary(procs))
    ok(all(len(rcs(p, f)) == 1 and rcs(p, f)[0][0] == rcs(p, f)[0][1] for p in procs for f in FIVE),
       "%s: the other five answer as their plain forms do" % name, [p.lines("COLLCFG-RC") for p in procs][:1])
    ok(all(rcs(p, "badmagic") == [["4"]] and rcs(p, "smallsize") == [["4"]] for p in procs),
       "%s: a config of another magic, or smaller than 2.31's, gets ncclInvalidArgument" % name)
    ok(not [l for l in fake_log(d) if "comm=" in l or "ncclCommInit" in l],
       "%s: NCCL was never called" % name, fake_log(d)[:3])
    e = ends(d)
    ok(len(e) == n and all(x.get("action") == "ipc" or "ipc" in x for x in e) and
       all(x["ops"].get("Broadcast", {}).get("count") == 3 * n and x["ops"].get("AllGather", {}).get("count") == 1
           and not [k for k in x["ops"] if "Config" in k] for x in e),
       "%s: counted as Broadcast (3 per root) and AllGather, under their plain names" % name,
       [x.get("ops") for x in e])

# --- ipc, a driver that refuses cuEventRecord: only calls that carry an event fail ---
d, procs = run("ipc-noevent", 2, dict(IPC, FAKE_CUDA_FAIL="cuEventRecord"), ["collcfg=1"],
               lambda r: dict(roles(1)(r), RANK_CLIENT_MEM="cuda"))
got = [rcs(p, "ncclBroadcastConfig") for p in procs]
is_(got, [[["0"], ["1"]]] * 2,
    "no cuEventRecord: the broadcast without a config succeeds, the next (a 2.32 config with an event) returns "
    "ncclUnhandledCudaError on both ranks: the shim records the caller's event")
ok(all("launchCompletionEvent could not be recorded" in p.err for p in procs), "and says why",
   [p.err[-300:] for p in procs])

# --- drop: counted, successful -----------------------------------------------
d, procs = run("drop2", 2, {"NCCLSHIM_WEIGHT_UPDATE": "drop"}, ["collcfg=2"], roles(1))
is_([l for p in procs for l in p.lines("COLLCFG")], ["COLLCFG 0 ok"] * 2,
    "drop: every nccl*Config call succeeds, with a 2.32 event recorded", )
ok(all(r[0] == r[1] == "0" for p in procs for f in FIVE for r in rcs(p, f)) and
   all(rcs(p, "badmagic") == [["4"]] for p in procs),
   "drop: the other five succeed like their plain forms; a bad config is still refused",
   [p.lines("COLLCFG-RC") for p in procs][:1])
e = ends(d)
ok(len(e) == 2 and all(x["ops"].get("Broadcast", {}).get("count") == 6 and
                       x["ops"].get("AllReduce", {}).get("count") == 1 and
                       x["ops"].get("Scatter", {}).get("count") == 2 for x in e),
   "drop: records count them under their plain names (6 broadcasts, 1 all-reduce, 2 scatters)",
   [x.get("ops") for x in e])
ok(not [l for l in fake_log(d) if "comm=" in l], "drop: NCCL was never called")

done(TMP, keep_on_failure=True)
