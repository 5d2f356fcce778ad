#!/usr/bin/env python3
# Multi-process tests of the rendezvous and the actions, on loopback with the
# fake NCCL: every rank of a marked communicator gets the root's one decision,
# whatever goes wrong (missing, slow, killed or shim-less ranks, strangers on
# the port), and nothing hangs: every process runs under a bound, and a test
# that overruns it fails and says so.
import json, os, select, signal, socket, struct, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import (BIN, CUDA, PRELOAD, ROOT, Deadline, communicate_until, done, env_time, is_, ok,  # noqa: E402
                 diag, records, scaled)

CLIENT = os.path.join(BIN, "rank_client")
FRAME = os.path.join(BIN, "rv_frame")
# Seconds no process of these tests may live longer, on a quiet machine: every bound and product
# timeout here is scaled to this one (tap.py: scaled, env_time, Deadline).
BOUND = 30
TMP = tempfile.mkdtemp(prefix="ncclshim-rv.")

class Proc:
    """One process of a scenario, killed (and reported) if it outlives `bound` (BOUND by default)."""

    def __init__(self, name, args, env, shim=True, stdin=False, bound=BOUND):
        self.name = name
        self.bound = bound
        full = dict(os.environ)
        for k in list(full):
            if k.startswith("NCCLSHIM_") or k.startswith("FAKE_"):
                del full[k]
        full.update(env)
        if shim:
            full["LD_PRELOAD"] = PRELOAD
        else:
            full.pop("LD_PRELOAD", None)
        self.p = subprocess.Popen([CLIENT] + args, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True)
        self.start = time.monotonic()
        self.lines = []
        self.out = None
        self.err = ""

    def release(self):
        """Closes its stdin: a `hold` process then exits."""
        self.p.stdin.close()
        self.p.stdin = None

    def read_ids(self, n):
        """The first n "ID <hex>" lines, read within the bound (raw reads: a
        buffered readline would hide lines from select)."""
        ids = []
        buf = b""
        fd = self.p.stdout.fileno()
        deadline = Deadline(self.bound)
        while len(ids) < n:
            while b"\n" not in buf:
                left = deadline.left()
                if left <= 0 or not select.select([fd], [], [], min(left, 1))[0]:
                    if deadline.passed():
                        raise RuntimeError("%s printed %d of %d IDs within %ds" % (self.name, len(ids), n,
                                                                                 deadline.bound()))
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise RuntimeError("%s exited before printing its IDs: %s" % (self.name, self.p.stderr.read()))
                buf += chunk
            line, buf = buf.split(b"\n", 1)
            line = line.decode() + "\n"
            self.lines.append(line)
            if line.startswith("ID "):
                ids.append(line.split()[1])
        self.lines.append(buf.decode())
        return ids

    def wait(self):
        if self.out is not None:
            return self.out
        deadline = Deadline(self.bound, self.start)
        out, self.err, killed = communicate_until(self.p, deadline)
        if killed:
            self.err += "\nKILLED: %s ran past %ds (a hang)" % (self.name, deadline.bound())
        self.out = "".join(self.lines) + out
        self.elapsed = time.monotonic() - self.start
        return self.out

    def comms(self):
        """COMM lines: {index: {rc, count, rank, dev, ops, destroy}}."""
        res = {}
        for line in self.wait().splitlines():
            if line.startswith("COMM "):
                parts = line.split()
                res[int(parts[1])] = dict(kv.split("=") for kv in parts[2:])
        return res


def fake_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return fh.read().splitlines()


def scenario(name, nranks, env=None, per_rank=None, shimless=(), absent=(), root_args=(), rank_args=(),
             k=1, rank0_env=None, one_gpu=False, bound=BOUND):
    """Rank 0 is the root (makes the IDs, then inits); ranks 1.. init with them.
    per_rank(r) -> extra env of rank r; ranks in `shimless` run without the
    shim; ranks in `absent` never start; rank r on the fake's device r % 8,
    or all on device 0 (`one_gpu`: colocated processes); each process bounded
    by `bound` (a quiet machine's seconds)."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    base = {"NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log", "RANK_CLIENT_CUDA": CUDA}
    base.update(env or {})

    def env_of(r):
        e = dict(base)
        e.update((per_rank or (lambda r: {}))(r))
        e["FAKE_CUDA_DEVICE"] = "0" if one_gpu else str(r % 8)
        return e

    procs = [Proc("root", ["root", str(k), str(nranks)] + list(root_args), env_of(0), bound=bound)]
    ids = procs[0].read_ids(k)
    for r in range(1, nranks):
        if r in absent:
            continue
        procs.append(Proc("rank%d" % r, ["rank", str(r), str(nranks), ",".join(ids)] + list(rank_args),
                          env_of(r), shim=r not in shimless, bound=bound))
    for p in procs:
        p.wait()
    return d, procs, ids


def ipc_ends(d):
    """comm_end records of ipc communicators, by rank."""
    return sorted((r for r in records(d + "/rec") if r["type"] == "comm_end" and "ipc" in r), key=lambda r: r["rank"])


def hops(e, way):
    """The kinds of hop a rank's broadcasts took in (`in`) or out (`out`)."""
    return sorted(k for k, v in e["ipc"][way].items() if v)


def counted_all(ends):
    """Every hop of every broadcast (an all-gather is one per rank) counted once on each side, and
    on each hop exactly one of its two ranks came first."""
    o = ends[0]["ops"]
    b = sum(o.get(k, {}).get("count", 0) for k in ("Broadcast", "Bcast")) + ends[0]["nranks"] * o.get(
        "AllGather", {}).get("count", 0)
    hops_in = sum(sum(e["ipc"]["in"].values()) for e in ends)
    hops_out = sum(sum(e["ipc"]["out"].values()) for e in ends)
    n = len(ends)
    return b > 0 and hops_in == hops_out == b * (n - 1) and sum(e["ipc"]["first"] for e in ends) == b * (n - 1)


def comm_records(d):
    return [x for x in records(d + "/rec") if x.get("type") == "comm"]


def decision_records(d):
    return [x for x in records(d + "/rec") if x.get("type") == "decision"]


def all_comms_ok(procs, what):
    bad = [(p.name, p.comms(), p.err[-400:]) for p in procs
           if not p.comms() or any(c["rc"] != "0" or c["destroy"] != "0" for c in p.comms().values())]
    ok(not bad, what, bad)


TRAIN = {"NCCLSHIM_ROLE": "training"}
INFER = {"NCCLSHIM_ROLE": "inference"}


def roles(n_train):
    return lambda r: TRAIN if r < n_train else INFER


# 1. Two ranks, trainer and inference, NCCLSHIM_WEIGHT_UPDATE=socket.
d, procs, ids = scenario("socket2", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket"}, roles(1), rank_args=["ops=2"],
                         root_args=["ops=2"])
all_comms_ok(procs, "socket, 2 ranks: both inits and destroys succeed")
cr = comm_records(d)
is_(sorted((c["rank"], c["purpose"], c["action"]) for c in cr),
    [(0, "weight-update", "socket"), (1, "weight-update", "socket")],
    "both ranks: purpose weight-update (training + inference ranks), action socket")
is_(len({c["decision"]["id"] for c in cr}), 1, "both ranks carry the same decision id")
inits = [l for l in fake_lines(d + "/fake.log") if "ncclCommInitRank" in l]
ok(len(inits) == 2 and all("ncclCommInitRankConfig" in l and "netName=Socket" in l for l in inits),
   "NCCL saw two ncclCommInitRankConfig calls with netName=Socket (the app called ncclCommInitRank)", inits)
ok(all("idtail=0" in l for l in inits), "NCCL got the marked ID unchanged (tail not stripped)", inits)
dr = decision_records(d)
ok(len(dr) == 1 and dr[0]["stage"] == "commit" and dr[0]["arrived"] == 2 and dr[0]["missing"] == "",
   "the root records one committed decision with both ranks", dr)
ok(all(c["decision"]["rounds"] == 1 for c in cr) and dr and dr[0]["rounds"] == 1,
   "socket is committed in one round (every rank said ready in its HELLO): ranks' and root's records say 1", (cr, dr))
# 1b. A rank that sends no socket_ready (as a shim before issue 19, here through
# NCCLSHIM_RENDEZVOUS_ONE_ROUND=0): the root takes the vote round, same action.
d, procs, ids = scenario("socket2_old", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket"},
                         lambda r: dict(roles(1)(r), **({"NCCLSHIM_RENDEZVOUS_ONE_ROUND": "0"} if r == 1 else {})))
all_comms_ok(procs, "socket, a rank without the capability: both inits and destroys succeed")
cr, dr = comm_records(d), decision_records(d)
ok(len(cr) == 2 and all(c["action"] == "socket" and c["decision"]["rounds"] == 2 for c in cr)
   and len(dr) == 1 and dr[0]["rounds"] == 2 and len({c["decision"]["id"] for c in cr}) == 1,
   "a rank without socket_ready: socket in two rounds, one decision", (cr, dr))

# 2. A caller's config keeps its fields; only netName changes.
d, procs, ids = scenario("socketcfg", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket"}, roles(1),
                         root_args=["fn=config"], rank_args=["fn=config"])
inits = [l for l in fake_lines(d + "/fake.log") if "ncclCommInitRankConfig" in l]
ok(len(inits) == 2 and all("netName=Socket blocking=1" in l for l in inits),
   "InitRankConfig: the caller's blocking=1 is kept, netName becomes Socket", inits)

# 3. NCCL_NET set: hidden from the redirected init (NCCL reads it there and would
# let it win over netName), and the record says which network NCCL was told and why.
d, procs, ids = scenario("ncclnet", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket", "NCCL_NET": "IB"}, roles(1))
inits = [l for l in fake_lines(d + "/fake.log") if "ncclCommInitRankConfig" in l]
ok(len(inits) == 2 and all(" net=Socket " in l for l in inits),
   "NCCL_NET=IB set: NCCL still picks Socket on both ranks (it reads NCCL_NET at init)", inits)
ok(all(c["action"] == "socket" and c["net"] == "Socket" and "NCCL_NET=IB was hidden" in c["net_by"]
       for c in comm_records(d)), "each rank records net Socket, and that NCCL_NET=IB was hidden", comm_records(d))
# ... but where that cannot be guaranteed (an NCCL newer than the shim knows),
# every rank passes through and the reason says why, never a silent half-redirect.
d, procs, ids = scenario("ncclnetnew", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket", "NCCL_NET": "IB",
                                           "FAKE_NCCL_VERSION": "23100"}, roles(1))
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "passthrough" and "newer than the releases whose reading of NCCL_NET"
                        in c["action_reason"] and c["net"] == "IB" for c in cr),
   "NCCL 2.31 with NCCL_NET set: both ranks pass through, the reason names NCCL_NET, the record net IB", cr)
inits = [l for l in fake_lines(d + "/fake.log") if "ncclCommInitRank" in l]
ok(len(inits) == 2 and all(" net=IB " in l and "netName=Socket" not in l for l in inits),
   "and NCCL was called as without the shim on both", inits)

# 3b. frugal: a real NCCL communicator on the container's network, held to one channel
#     (minCTAs = maxCTAs = 1, and on NCCL 2.28+ nChannelsPerNetPeer = 1); every other
#     config field the application set is kept, NCCL_NET is left alone, and the record
#     says what NCCL was told.
d, procs, ids = scenario("frugal", 2, {"NCCLSHIM_WEIGHT_UPDATE": "frugal", "NCCL_NET": "IB"}, roles(1),
                         root_args=["fn=config", "ops=2"], rank_args=["ops=2"])
all_comms_ok(procs, "frugal: both inits, operations and destroys succeed")
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "frugal" and c["frugal"] == {"minCTAs": 1, "maxCTAs": 1,
                                                                    "nChannelsPerNetPeer": 1} for c in cr),
   "both ranks: action frugal, the record says minCTAs 1, maxCTAs 1, nChannelsPerNetPeer 1", cr)
ok(all(c["net"] == "IB" for c in cr), "the network stays the container's (NCCL_NET=IB, not hidden)", cr)
inits = sorted(l for l in fake_lines(d + "/fake.log") if "ncclCommInitRank" in l)
ok(len(inits) == 2 and all("ncclCommInitRankConfig" in l and "netName=(null)" in l and " ctas=1,1 perpeer=1" in l
                           and " net=IB " in l for l in inits),
   "NCCL saw ncclCommInitRankConfig with one channel on both ranks, no netName, on IB (the app called "
   "ncclCommInitRank on rank 1)", inits)
ok(len([l for l in inits if "blocking=1 " in l]) == 1, "rank 0's own config field (blocking=1) is kept", inits)
# An NCCL from before nChannelsPerNetPeer (2.18): the channels only, and the record says so.
d, procs, ids = scenario("frugal218", 2, {"NCCLSHIM_WEIGHT_UPDATE": "frugal", "FAKE_NCCL_VERSION": "21806"},
                         roles(1))
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "frugal" and c["frugal"]["maxCTAs"] == 1
                        and c["frugal"]["nChannelsPerNetPeer"] is None for c in cr),
   "NCCL 2.18: frugal with minCTAs/maxCTAs 1, nChannelsPerNetPeer not set (null in the record)", cr)
# A rank whose NCCL predates minCTAs/maxCTAs (2.16) vetoes: passthrough for all, its reason given.
d, procs, ids = scenario("frugalveto", 2, {"NCCLSHIM_WEIGHT_UPDATE": "frugal"},
                         lambda r: dict(roles(1)(r), **({"FAKE_NCCL_VERSION": "21605"} if r == 1 else {})))
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "passthrough" and "rank 1 could not set up frugal" in c["action_reason"]
                        and "2.17" in c["action_reason"] for c in cr),
   "a rank that vetoes frugal (NCCL 2.16): passthrough for all, with its reason", cr)
ok(not [l for l in fake_lines(d + "/fake.log") if " ctas=1,1" in l], "and nobody called NCCL with one channel")
# NCCL_MIN_NCHANNELS (or NCCL_MIN_CTAS, NCCL_MAX_CTAS) above 1 on a rank would win over the config: it vetoes.
d, procs, ids = scenario("frugalenv", 2, {"NCCLSHIM_WEIGHT_UPDATE": "frugal"},
                         lambda r: dict(roles(1)(r), **({"NCCL_MIN_NCHANNELS": "4"} if r == 1 else {})))
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "passthrough" and "NCCL_MIN_NCHANNELS=4 in the environment" in
                        c["action_reason"] for c in cr),
   "NCCL_MIN_NCHANNELS=4 on rank 1: passthrough for all, the reason names the variable", cr)

# 3c. Configs of older headers (issue 33): NCCL honours a field by the config's version,
#     not its size, so the shim hands NCCL a version that carries what it sets, and the
#     fake NCCL reads configs as parseCommConfig does.  2.16's config has no netName and
#     no channel bounds at all; 2.27's no nChannelsPerNetPeer; ncclCommInitRank none.
CFG_CASES = [("2.16", ["fn=config", "cfgver=21605"]), ("2.17", ["fn=config", "cfgver=21709"]),
             ("2.27", ["fn=config", "cfgver=22703"]), ("2.30", ["fn=config", "cfgver=23007"]),
             ("InitRank", [])]
for hdr, args in CFG_CASES:
    d, procs, ids = scenario("sockcfg" + hdr, 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket"}, roles(1),
                             root_args=args, rank_args=args)
    cr = comm_records(d)
    inits = [l for l in fake_lines(d + "/fake.log") if "ncclCommInitRank" in l]
    ok(len(inits) == 2 and all("ncclCommInitRankConfig" in l and "netName=Socket" in l and " net=Socket " in l
                               for l in inits),
       "socket, a config of %s: NCCL reads netName Socket on both ranks and picks Socket" % hdr, inits)
    want = max(21700, int(args[1][7:])) if args else 21700
    ok(len(cr) == 2 and all(c["action"] == "socket" and c["net"] == "Socket" and c["told"]["netName"] == "Socket"
                            and c["told"]["version"] == want for c in cr),
       "socket, a config of %s: the record says Socket, told at version %d" % (hdr, want), cr)
    d, procs, ids = scenario("frugcfg" + hdr, 2, {"NCCLSHIM_WEIGHT_UPDATE": "frugal"}, roles(1),
                             root_args=args, rank_args=args)
    cr = comm_records(d)
    inits = [l for l in fake_lines(d + "/fake.log") if "ncclCommInitRank" in l]
    ok(len(inits) == 2 and all(" ctas=1,1 perpeer=1" in l for l in inits),
       "frugal, a config of %s: NCCL 2.28 reads one channel and one per network peer on both ranks" % hdr, inits)
    want = max(22800, int(args[1][7:])) if args else 22800
    ok(len(cr) == 2 and all(c["action"] == "frugal" and c["frugal"] == {"minCTAs": 1, "maxCTAs": 1,
                                                                        "nChannelsPerNetPeer": 1}
                            and c["told"]["version"] == want for c in cr),
       "frugal, a config of %s: the record says 1, 1, 1, told at version %d" % (hdr, want), cr)
# On NCCL 2.18 a 2.16 config is raised to 2.17 for the channel bounds only (2.18 has no
# nChannelsPerNetPeer, so frugal does not set it).
d, procs, ids = scenario("frugcfg218", 2, {"NCCLSHIM_WEIGHT_UPDATE": "frugal", "FAKE_NCCL_VERSION": "21806"},
                         roles(1), root_args=["fn=config", "cfgver=21605"], rank_args=["fn=config", "cfgver=21605"])
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "frugal" and c["told"]["version"] == 21700
                        and c["frugal"]["nChannelsPerNetPeer"] is None for c in cr),
   "frugal on NCCL 2.18, a config of 2.16: told at 2.17, the channel bounds only", cr)
ok(all(" ctas=1,1" in l and "perpeer" not in l for l in fake_lines(d + "/fake.log") if "ncclCommInitRank" in l),
   "and NCCL reads them")
# What the application set but NCCL ignores for its version is named in the record.
d, procs, ids = scenario("ignored", 2, {"NCCLSHIM_WEIGHT_UPDATE": "passthrough", "NCCL_NET": "IB"}, roles(1),
                         root_args=["fn=config", "cfgver=21605"], rank_args=["fn=config", "cfgver=22703"])
cr = sorted(comm_records(d), key=lambda c: c["rank"])
ok(len(cr) == 2 and cr[0]["config"]["version"] == 21605 and cr[0]["config"]["blocking"] == 1
   and "ignored_by_nccl" not in cr[0]["config"] and cr[1]["config"]["nChannelsPerNetPeer"] is None,
   "passthrough: the application's config is recorded as it was given (2.16: size %s)" %
   (cr[0]["config"]["size"] if cr else "?"), cr)

# 4. drop: no NCCL communicator, the shim answers, traffic is counted.
d, procs, ids = scenario("drop", 2, {"NCCLSHIM_WEIGHT_UPDATE": "drop"}, roles(1), root_args=["ops=3"],
                         rank_args=["ops=3"])
all_comms_ok(procs, "drop: init, 3 AllReduce+Broadcast pairs and destroy all succeed")
is_(sorted((c["rank"], c["count"], c["dev"]) for c in [procs[0].comms()[0], procs[1].comms()[0]]),
    [("0", "2", "0"), ("1", "2", "1")], "drop: ncclCommCount, UserRank and CuDevice answer as NCCL would")
log = fake_lines(d + "/fake.log")
ok(not [l for l in log if "ncclCommInit" in l or "comm=" in l],
   "drop: NCCL saw no init and no call with a communicator", log)
ends = [x for x in records(d + "/rec") if x.get("type") == "comm_end"]
ok(len(ends) == 2 and all(e["action"] == "drop" and e["ops"]["AllReduce"] == {"count": 3, "bytes": 3072}
                          for e in ends), "drop: comm_end records count the dropped operations with their bytes",
   ends)

# 5. Every function that takes a communicator, given a dropped handle: none reaches NCCL.
d, procs, ids = scenario("allapi", 2, {"NCCLSHIM_WEIGHT_UPDATE": "drop"}, roles(1), root_args=["allapi=1"],
                         rank_args=["allapi=1"])
log = fake_lines(d + "/fake.log")
ok(not [l for l in log if "comm=" in l or "INVALID-COMM" in l],
   "every API function given a shim-only handle is answered by the shim", [l for l in log if "comm=" in l])
api = [l for l in procs[0].wait().splitlines() if l.startswith("API 0")]
want_ok = ["ncclCommCount", "ncclCommUserRank", "ncclCommCuDevice", "ncclCommGetAsyncError", "ncclCommRegister",
           "ncclCommDeregister", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclAllReduce", "ncclSend",
           "ncclCommRevoke", "ncclCommFinalize"]
got_ok = [w for w in want_ok if any(l.startswith("API 0 %s(" % w) and l.endswith(" 0") for l in api)]
is_(got_ok, want_ok, "queries, registration, PreMulSum, data ops, revoke, finalize succeed on a dropped comm")
refused = ["ncclCommSplit", "ncclCommShrink", "ncclDevCommCreate", "ncclCommWindowRegister"]
got_ref = [w for w in refused if any(l.startswith("API 0 %s(" % w) and l.endswith(" 5") for l in api)]
is_(got_ref, refused, "split, shrink, device API and windows are refused with ncclInvalidUsage")
ok("API 0 split-child NULL" in api, "a refused split leaves *newcomm NULL")
warn = [x for x in records(d + "/rec") if x.get("type") == "warning" and x.get("what") == "dropped-comm-call"]
ok(warn and "dropped" in warn[0]["message"], "a refused call is recorded, naming the cause", warn[:1])

# 5b. Splits and shrinks of a redirected communicator (issue 32): every rank holds the parent's
#     decision, so the child takes it, through the child's config (socket: netName Socket,
#     NCCL_NET hidden from the split too; frugal: one channel), and records where it came from.
for act, want in (("socket", "netName=Socket"), ("frugal", "ctas=1,1 perpeer=1")):
    d, procs, ids = scenario("split" + act, 2, {"NCCLSHIM_WEIGHT_UPDATE": act, "NCCL_NET": "IB"}, roles(1),
                             root_args=["allapi=1"], rank_args=["allapi=1"])
    splits = [l for l in fake_lines(d + "/fake.log") if "ncclCommSplit " in l or "ncclCommShrink " in l]
    ok(len(splits) == 4 and all(want in l for l in splits) and
       all((" net=Socket" if act == "socket" else " net=IB") in l for l in splits if "*newcomm=" in l) and
       len([l for l in splits if "*newcomm=" in l]) >= 3,
       "%s parent: NCCL got the split's and the shrink's config with %s on both ranks, and picked %s (NCCL_NET=IB "
       "%s)" % (act, want, "Socket" if act == "socket" else "IB", "hidden from the split" if act == "socket"
                else "left alone"), splits)
    kids = [c for c in comm_records(d) if c.get("parent")]
    ok(len(kids) == 4 and all(c["action"] == act and c["purpose"] == "weight-update" and
                              c["inherited"]["from"] == c["parent"] and "unprotected" not in c and
                              "ranks that split together decide together" in c["action_reason"] for c in kids),
       "%s parent: each child recorded %s, inherited from its parent, with the reason" % (act, act), kids)
# A weight-update communicator no rendezvous decided (here: the root does not mark its IDs,
# NCCLSHIM_TAG=none, while rank 1 would): rank 1 records it as unprotected, and --check says so.
d, procs, ids = scenario("unprotected", 2, {}, lambda r: dict(roles(2)(r), **({"NCCLSHIM_TAG": "none"} if r == 0 else {})))
cr = sorted(comm_records(d), key=lambda c: c["rank"])
ok(len(cr) == 2 and all(c["action"] == "passthrough" for c in cr) and "unprotected" not in cr[0]
   and "no rendezvous decided it" in cr[1].get("unprotected", ""),
   "an unmarked weight-update ID: passthrough; the rank whose own setting would mark it records why it is unprotected",
   cr)
chk = subprocess.run([os.path.join(ROOT, "tools", "ncclshim-inspect"), "--check", d + "/rec"], capture_output=True,
                     text=True, timeout=scaled(BOUND))
ok(chk.returncode == 1 and "weight-update communicator not redirected on rank 1" in chk.stderr,
   "inspect --check fails and names it", chk.stderr[-600:])

# 6. auto: one inference rank on one host -> ipc: no NCCL communicator, three rounds.
d, procs, ids = scenario("auto1host", 3, {}, roles(2))
cr = comm_records(d)
ok(len(cr) == 3 and all(c["purpose"] == "weight-update" and c["action"] == "ipc" and c["decision"]["rounds"] == 3
                        for c in cr),
   "auto, 2 trainers + 1 inference rank on one host: ipc on all 3 ranks, after the connect round", cr)
ok(not [l for l in fake_lines(d + "/fake.log") if "ncclCommInit" in l], "ipc: NCCL saw no init")

# 7. auto across hosts (test-only host override) -> socket.
d, procs, ids = scenario("auto2host", 3, {}, lambda r: dict(roles(2)(r), NCCLSHIM_HOSTNAME="node%d" % (r // 2)))
cr = comm_records(d)
ok(len(cr) == 3 and all(c["action"] == "socket" and c["decision"]["hosts"] == 2 for c in cr),
   "auto, inference rank on another host: socket for all 3 ranks", cr)

# 8. 16 ranks with different local evidence (titles, roles, APIs) reach one decision.
def mixed(r):
    if r == 15:
        return INFER
    return TRAIN if r % 3 == 0 else {"NCCLSHIM_TRAINING_TITLES": "*rank_client*"} if r % 3 == 1 else {}


d, procs, ids = scenario("sixteen", 16, {"NCCLSHIM_WEIGHT_UPDATE": "drop"}, mixed)
all_comms_ok(procs, "16 ranks: every init succeeds")
cr = comm_records(d)
ok(len(cr) == 16 and len({(c["purpose"], c["action"], c["decision"]["id"]) for c in cr}) == 1,
   "16 ranks with different local evidence: one purpose, one action, one decision id",
   sorted({(c["purpose"], c["action"], c["decision"]["id"]) for c in cr}))
ok(len({c["local_purpose"] for c in cr}) > 1, "(their local verdicts did differ)")

# 9. A rank without the shim: the others wait the timeout, then all pass through.
d, procs, ids = scenario("noshim", 3, {"NCCLSHIM_WEIGHT_UPDATE": "drop",
                                       "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": env_time(800)},
                         roles(2), shimless=(2,))
all_comms_ok(procs, "a rank without the shim: every rank's init succeeds")
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "passthrough" and "timed out" in c["action_reason"]
                        and "missing: 2" in c["action_reason"] for c in cr),
   "the shim ranks pass through after the timeout, naming the missing rank", cr)
ok(len([l for l in fake_lines(d + "/fake.log") if "ncclCommInitRank " in l]) == 3,
   "all 3 ranks (with and without the shim) init NCCL with the same ID")

# 10. A rank that never comes: bounded, passthrough, named.
d, procs, ids = scenario("absent", 3, {"NCCLSHIM_WEIGHT_UPDATE": "drop",
                                       "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": env_time(500)},
                         roles(2), absent=(1,))
ok(all(p.elapsed < scaled(10) for p in procs), "a rank that never comes: the others return within the bound",
   [(p.name, p.elapsed) for p in procs])
dr = decision_records(d)
ok(dr and dr[0]["missing"] == "1" and dr[0]["action"] == "passthrough", "the root's record names the missing rank",
   dr)

# 11. A slow root (its own init comes late, within the timeout): still one real decision.
d, procs, ids = scenario("slowroot", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket",
                                         "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": env_time(10000)}, roles(1),
                         root_args=["delay_ms=" + env_time(400)])
ok([c["action"] for c in comm_records(d)] == ["socket", "socket"], "slow root: both ranks still get socket",
   comm_records(d))

# 12. A slow rank past the timeout: the first ones give up together, the late one is refused: all passthrough.
d, procs, ids = scenario("slowrank", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket",
                                         "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": env_time(300)}, roles(1),
                         rank_args=["delay_ms=" + env_time(1200)])
is_(sorted(c["action"] for c in comm_records(d)), ["passthrough", "passthrough"],
    "a rank later than the timeout: passthrough on both sides")

# 13. A killed root: its ranks notice at once (connection refused or closed) and pass through.
d = os.path.join(TMP, "killed")
os.makedirs(d)
env = {"NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log", "NCCLSHIM_WEIGHT_UPDATE": "socket",
       "NCCLSHIM_ROLE": "training"}
holder = Proc("holder", ["ids", "1", "hold"], env, stdin=True)
hid = holder.read_ids(1)[0]
waiting = Proc("rank1", ["rank", "1", "2", hid], dict(env, NCCLSHIM_ROLE="inference"))
# The rank is connected and waiting once the root has its HELLO: a rejected-free
# root holds one connection.  Kill the root then.
deadline = Deadline(BOUND)
while not deadline.passed():
    try:
        fds = os.listdir("/proc/%d/fd" % holder.p.pid)
        socks = [os.readlink("/proc/%d/fd/%s" % (holder.p.pid, f)) for f in fds]
    except OSError:
        socks = []
    if sum(s.startswith("socket:") for s in socks) >= 2:  # listener + the rank's connection
        break
    time.sleep(0.005)
holder.p.kill()
diag("the root (the ID's holder) killed on purpose (SIGKILL) mid-rendezvous")
holder.wait()
out = waiting.wait()
ok(waiting.elapsed < scaled(5) and " rc=0 " in out,
   "root killed mid-rendezvous: the waiting rank passes through at once",
   (waiting.elapsed, out, waiting.err[-300:]))
cr = comm_records(d)
ok(cr and cr[0]["action"] == "passthrough" and "connection closed" in cr[0]["decision"]["fallback"],
   "and its record says the root's connection closed", cr)
late = Proc("late", ["rank", "1", "2", hid], dict(env, NCCLSHIM_ROLE="inference"))
late.wait()
ok(late.elapsed < scaled(5) and
   "refused (nothing listens there: the root's process exited" in json.dumps(comm_records(d)[-1]),
   "a rank arriving after the root died: connection refused, passthrough, and the reason says why", comm_records(d)[-1:])

# 14. Strangers on the port: garbage, a truncated frame, an oversized length, a wrong token,
#     a silent connection.  The real ranks still get their decision.
d = os.path.join(TMP, "strangers")
os.makedirs(d)
env = {"NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log", "NCCLSHIM_WEIGHT_UPDATE": "socket"}
holder = Proc("holder", ["ids", "1", "hold"], dict(env, NCCLSHIM_ROLE="training"), stdin=True)
hid = holder.read_ids(1)[0]
tok_port = subprocess.run([FRAME, "token", hid], capture_output=True, text=True).stdout.split()
ok(len(tok_port) == 2, "the ID carries a token and a port", tok_port)
token, port = tok_port[0], int(tok_port[1])
wrong = "%032x" % (int(token, 16) ^ 1)
hello_wrong = bytes.fromhex(subprocess.run([FRAME, "hello", wrong, "0", "2"], capture_output=True,
                                           text=True).stdout.strip())
silent = socket.create_connection(("127.0.0.1", port), timeout=5)
answers = {}
for name, payload in [("garbage", os.urandom(64)),
                      ("truncated", struct.pack("<IHHI", 0x5652534E, 1, 1, 100) + b"\0" * 10),
                      ("oversized", struct.pack("<IHHI", 0x5652534E, 1, 1, 1 << 30)),
                      ("wrongtoken", hello_wrong)]:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(payload)
    if name == "truncated":
        s.shutdown(socket.SHUT_WR)
    try:
        answers[name] = s.recv(100)  # the root closes on us: b""
    except ConnectionResetError:
        answers[name] = b""  # closed with our bytes unread: a reset
    except socket.timeout:
        answers[name] = "timeout"
    s.close()
is_(answers, {"garbage": b"", "truncated": b"", "oversized": b"", "wrongtoken": b""},
    "garbage, truncated, oversized and wrong-token messages: the root drops the connection, answers nothing")
# Now the real ranks: rank 0 inits from a second process, as if it had received the ID.
r0 = Proc("rank0", ["rank", "0", "2", hid], dict(env, NCCLSHIM_ROLE="training"))
r1 = Proc("rank1", ["rank", "1", "2", hid], dict(env, NCCLSHIM_ROLE="inference"))
r0.wait(), r1.wait()
silent.close()
holder.release()
holder.wait()
is_(sorted(c["action"] for c in comm_records(d)), ["socket", "socket"],
    "after the strangers (and one silent connection still open), the real ranks get their socket decision")
rej = [x for x in records(d + "/rec") if x.get("what") == "rendezvous-rejected"]
reasons = " | ".join(x["message"] for x in rej)
ok(len(rej) >= 4 and "wrong token" in reasons and "magic" in reasons.lower(),
   "each rejection is recorded with its reason", reasons)

# 15. A duplicate rank (someone replays rank 0's HELLO with the right token) is refused, not counted.
d = os.path.join(TMP, "duplicate")
os.makedirs(d)
env = {"NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log", "NCCLSHIM_WEIGHT_UPDATE": "socket",
       "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": env_time(600)}
holder = Proc("holder", ["ids", "1", "hold"], dict(env, NCCLSHIM_ROLE="training"), stdin=True)
hid = holder.read_ids(1)[0]
token, port = subprocess.run([FRAME, "token", hid], capture_output=True, text=True).stdout.split()
fake0 = bytes.fromhex(subprocess.run([FRAME, "hello", token, "0", "3"], capture_output=True, text=True).stdout.strip())
s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
s.sendall(fake0)
r0 = Proc("rank0", ["rank", "0", "3", hid], dict(env, NCCLSHIM_ROLE="training"))
r0.wait()
holder.release()
holder.wait()
s.close()
rej = " | ".join(x["message"] for x in records(d + "/rec") if x.get("what") == "rendezvous-rejected")
ok("arrived twice" in rej, "a second HELLO for the same rank is refused and recorded", rej)
ok([c["action"] for c in comm_records(d)] == ["passthrough"], "and the real rank 0 passes through (rank 2 never came)")

# 16. Concurrent inits of 4 communicators in each of 2 processes.
d, procs, ids = scenario("concurrent", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket"}, roles(1), k=4,
                         root_args=["leaks=1"], rank_args=["leaks=1"])
all_comms_ok(procs, "4 communicators initialised concurrently in each of 2 processes")
cr = comm_records(d)
ok(len(cr) == 8 and all(c["action"] == "socket" for c in cr) and len({c["decision"]["id"] for c in cr}) == 4,
   "each of the 4 gets its own decision, socket, on both ranks", sorted((c["group"], c["action"]) for c in cr))

# 17. No leaks: after the decisions, the root's listener sockets and serving thread are gone.
leak = [l for l in procs[0].wait().splitlines() if l.startswith("LEAKS")]
ok(leak and (lambda f: f[2] == f[3] and f[5] == f[6])(leak[0].replace("->", " ").split()),
   "the root process ends with as many descriptors and threads as it began with", leak)

# 18. An ID never used: its listener closes after NCCLSHIM_RENDEZVOUS_IDLE_MS, and says so.
d = os.path.join(TMP, "idle")
os.makedirs(d)
holder = Proc("holder", ["ids", "1", "hold"], {"NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log",
                                               "NCCLSHIM_RENDEZVOUS_IDLE_MS": env_time(200)}, stdin=True)
hid = holder.read_ids(1)[0]
port = int(subprocess.run([FRAME, "token", hid], capture_output=True, text=True).stdout.split()[1])
refused = False
deadline = Deadline(10)
while not deadline.passed() and not refused:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        time.sleep(0.02)
    except ConnectionRefusedError:
        refused = True
ok(refused, "an unused ID's listener is closed after the idle time")
holder.release()
holder.wait()
ok([x for x in records(d + "/rec") if x.get("type") == "rendezvous_expired"], "and an expiry record says so")

# 19. Veto: a rank whose NCCL predates netName (2.17's config) cannot set socket up: passthrough for all.
d, procs, ids = scenario("veto", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket"},
                         lambda r: dict(roles(1)(r), **({"FAKE_NCCL_VERSION": "21605"} if r == 1 else {})))
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "passthrough" and "rank 1 could not set up socket" in c["action_reason"]
                        and "ncclConfig_t.netName (NCCL 2.17 or later" in c["action_reason"] for c in cr),
   "a rank that vetoes socket (NCCL 2.16, whose config has no netName): passthrough for all, with its reason", cr)
dr = decision_records(d)
ok(all(c["decision"]["rounds"] == 1 for c in cr) and len(dr) == 1 and dr[0]["rounds"] == 1
   and dr[0]["action"] == "passthrough" and dr[0]["action_reason"] == cr[0]["action_reason"],
   "it said so in its HELLO: decided in one round, the root's record has the same reason", (cr, dr))
veto_reason = cr[0]["action_reason"] if cr else None
table = subprocess.run([os.environ.get("INSPECT", os.path.join(ROOT, "tools", "ncclshim-inspect")), d + "/rec"],
                       capture_output=True, text=True).stdout
ok("1 round: passthrough, undone by a rank's HELLO (it could not set the action up)" in table,
   "inspect: the decisions line says the HELLO, not a vote round, undid socket", table[-800:])
# The same with the vote round (the not-ready rank sends no socket_ready): the same result.
d, procs, ids = scenario("veto_old", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket", "NCCLSHIM_RENDEZVOUS_ONE_ROUND": "0"},
                         lambda r: dict(roles(1)(r), **({"FAKE_NCCL_VERSION": "21605"} if r == 1 else {})))
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "passthrough" and c["action_reason"] == veto_reason
                        and c["decision"]["rounds"] == 2 for c in cr),
   "the vote round's veto gives the very same action and reason as the HELLO's word", (veto_reason, cr))
ok(not [l for l in fake_lines(d + "/fake.log") if "netName=Socket" in l], "and nobody called NCCL with Socket")

# 20. NCCLSHIM_STRICT=1 with a malformed policy on one rank: every rank's init fails, none touches NCCL.
d, procs, ids = scenario("strict", 2, {"NCCLSHIM_STRICT": "1"},
                         lambda r: dict(roles(1)(r), **({"NCCLSHIM_RULES": "purpose=bogus:drop"} if r == 1 else {})))
is_(sorted(p.comms()[0]["rc"] for p in procs), ["5", "5"], "strict + a malformed policy on rank 1: both inits fail")
ok(not [l for l in fake_lines(d + "/fake.log") if "ncclCommInit" in l], "and none reached NCCL")
ok("NCCLSHIM_RULES" in procs[1].err and "position" in procs[1].err,
   "the bad rank's stderr names the variable and the position", procs[1].err[-500:])

# 21. Without strict, a malformed policy fails open.
d, procs, ids = scenario("failopen", 2, {"NCCLSHIM_RULES": "purpose=bogus:drop"}, roles(1))
cr = comm_records(d)
ok(len(cr) == 2 and all(c["action"] == "passthrough" and "policy error" in c["action_reason"] for c in cr),
   "a malformed NCCLSHIM_RULES without strict: passthrough, the reason quotes the error", cr)

# 22. NCCLSHIM_RULES decides before NCCLSHIM_WEIGHT_UPDATE.
d, procs, ids = scenario("rules", 2, {"NCCLSHIM_RULES": "nranks=2,inference=1:drop",
                                      "NCCLSHIM_WEIGHT_UPDATE": "socket"}, roles(1))
ok([c["action"] for c in comm_records(d)] == ["drop", "drop"] and "rule" in comm_records(d)[0]["action_reason"],
   "a matching rule wins over NCCLSHIM_WEIGHT_UPDATE, and the reason quotes it", comm_records(d))

# 23. NCCLSHIM_TAG=none: nothing is marked, no rendezvous, passthrough.
d, procs, ids = scenario("tagnone", 2, {"NCCLSHIM_TAG": "none", "NCCLSHIM_WEIGHT_UPDATE": "drop"}, roles(1))
ok(ids[0][128:] == "0" * 128, "NCCLSHIM_TAG=none: the ID's tail stays zero")
ok(all(c["action"] == "passthrough" and "decision" not in c for c in comm_records(d)),
   "and its communicator passes through without a rendezvous")

# 24. ncclCommInitRankScalable with a marked first ID takes the same path.
d, procs, ids = scenario("scalable", 2, {"NCCLSHIM_WEIGHT_UPDATE": "socket"}, roles(1),
                         root_args=["fn=scalable"], rank_args=["fn=scalable"])
inits = [l for l in fake_lines(d + "/fake.log") if "ncclCommInitRankScalable" in l]
ok(len(inits) == 2 and all("netName=Socket" in l for l in inits), "InitRankScalable: socket through its config",
   inits)

# 25. The ipc transport on the fake libcuda: 2, 4 and 8 processes, broadcasts of odd sizes
#     (1 byte to 100000, 4 KiB chunks in 2 slots: many slot reuses) from every root, and
#     all-reduces of int32/float/int8/double with sum/max/prod/avg; no memory left behind.
# The fake libcuda's FAKE_CUDA_LOG line, "<pid> allocs=.. ipc_opens=.. opened=.. vmm_handles=..
# vmm_maps=.. vmm_reserves=.. vmm_imports=..": a token of a process that left nothing held.
CUDA_LOG_FIELDS = 8
def cuda_released(x):
    return (x in ("allocs=0", "ipc_opens=0", "vmm_handles=0", "vmm_maps=0", "vmm_reserves=0") or x.isdigit() or
            x.startswith(("opened=", "vmm_imports=")))
# A sender's wait for its receiver, NCCLSHIM_IPC_PUSH_WAIT_US, at the most the setting takes (1 s: not
# stretched with the machine, which it cannot be).
PUSH_WAIT_US = "1000000"
IPC_ENV = {"NCCLSHIM_WEIGHT_UPDATE": "ipc", "NCCLSHIM_IPC_CHUNK_BYTES": "4096", "NCCLSHIM_IPC_SLOTS": "2", "NCCLSHIM_IPC_STEP_BYTES": "8192",
           "FAKE_CUDA_WAIT_TIMEOUT_MS": env_time(10000)}
for n in (2, 4, 8):
    d, procs, ids = scenario("ipc%d" % n, n, dict(IPC_ENV, FAKE_CUDA_LOG=os.path.join(TMP, "ipc%d.cuda" % n)),
                             roles(n - 1), root_args=["xfer=1"], rank_args=["xfer=1"])
    xfer = [l for p in procs for l in p.wait().splitlines() if l.startswith("XFER")]
    ok(len(xfer) == n and all(" ok" in l for l in xfer),
       "ipc, %d processes: every broadcast (every root, odd sizes) and all-reduce is exact" % n,
       xfer + [p.err[-300:] for p in procs if p.err])
    cr = comm_records(d)
    ok(len(cr) == n and all(c["action"] == "ipc" for c in cr) and
       not [l for l in fake_lines(d + "/fake.log") if "ncclCommInit" in l or "comm=" in l],
       "ipc, %d processes: action ipc everywhere, NCCL never called" % n, cr[:2])
    with open(os.path.join(TMP, "ipc%d.cuda" % n)) as fh:
        left = fh.read().split()
    ok(len(left) == CUDA_LOG_FIELDS * n and all(cuda_released(x)
                                  for x in left),
       "ipc, %d processes: destroy freed every allocation and closed every mapping" % n, left)
    ok(all(x == "opened=%d" % (n - 1) for x in left if x.startswith("opened=")),
       "ipc, %d processes, buffers the shim cannot export: staged (only the peers' staging was opened; their "
       "counters are shared host memory)" % n, left)
    ends = ipc_ends(d)
    ok(len(ends) == n and all(hops(e, "in") == ["staged"] and hops(e, "out") == ["staged"] for e in ends) and
       counted_all(ends),
       "ipc, %d processes: comm_end says every hop was staged, and counts every broadcast" % n,
       [e.get("ipc") for e in ends])

# 25b. The same with buffers of cuMemAlloc, which the shim exports: each rank writes into its
#      successor's buffer directly (a new allocation per broadcast: the mapping cache turns over),
#      and a 4-rank chain where rank 1's buffers cannot be exported (rank 1 reads rank 0's instead);
#      ipc-single4: a driver that refuses cuStreamBatchMemOp (the counter operations one by one).
for n, name, mem, extra in ((2, "ipc-direct2", lambda r: "cuda", {}), (4, "ipc-direct4", lambda r: "cuda", {}),
                            (4, "ipc-mixed4", lambda r: "host" if r == 1 else "cuda", {}),
                            (4, "ipc-single4", lambda r: "cuda", {"FAKE_CUDA_NO_BATCH_MEMOPS": "1"})):
    log = os.path.join(TMP, name + ".cuda")
    d, procs, ids = scenario(name, n, dict(IPC_ENV, FAKE_CUDA_LOG=log, **extra),
                             lambda r, n=n, mem=mem: dict(roles(n - 1)(r), RANK_CLIENT_MEM=mem(r)),
                             root_args=["xfer=1"], rank_args=["xfer=1"])
    xfer = [l for p in procs for l in p.wait().splitlines() if l.startswith("XFER")]
    ok(len(xfer) == n and all(" ok" in l for l in xfer),
       "%s: every broadcast, all-gather and all-reduce is exact" % name, xfer + [p.err[-300:] for p in procs if p.err])
    with open(log) as fh:
        left = fh.read().split()
    opened = [int(x.split("=")[1]) for x in left if x.startswith("opened=")]
    ok(len(opened) == n and all(cuda_released(x)
                                for x in left) and sum(opened) > n * (n - 1) + 10,
       "%s: user buffers were opened by their neighbours (%s opens), and all closed at destroy" % (name, opened), left)
    # Exportable buffers are pushed into (the receiver came first) or pulled from (the sender did);
    # mixed4's rank 1 can be neither pushed into nor pulled from, so its hops may be staged.
    def allowed(r, way):
        if name == "ipc-mixed4" and (r, way) in ((0, "out"), (1, "in")):
            return {"pull", "staged"}   # into rank 1: pulled, or staged if rank 1 came first
        if name == "ipc-mixed4" and (r, way) in ((1, "out"), (2, "in")):
            return {"push", "staged"}   # out of rank 1: pushed, or staged if rank 1 came first
        return {"push", "pull"}
    ends = ipc_ends(d)
    ok(len(ends) == n and all(set(hops(e, w)) <= allowed(e["rank"], w) for e in ends for w in ("in", "out")) and
       counted_all(ends),
       "%s: comm_end says how each rank's data came in and went out, within what its buffers allow" % name,
       [(e["rank"], e.get("ipc")) for e in ends])

# 25b'. The chain's own steps (no NCCLSHIM_IPC_STEP_BYTES: 8 MiB up to 32 MiB, 46 MiB above),
#       4 ranks pushing and pulling 20 and 60 MiB from every root: several steps a hop, exact.
log = os.path.join(TMP, "ipc-steps4.cuda")
env = {k: v for k, v in IPC_ENV.items() if k != "NCCLSHIM_IPC_STEP_BYTES"}
# Bounded by what it moves: each rank fills (or clears) and checks byte by byte 20 + 60 MiB for each of
# the 4 roots (rank_client.c, transfers), besides the copies; a quiet machine's ASan build does 16 MiB/s.
RANK_MIB = 4 * (20 + 60) * 2
d, procs, ids = scenario("ipc-steps4", 4, dict(env, FAKE_CUDA_LOG=log),
                         lambda r: dict(roles(3)(r), RANK_CLIENT_MEM="cuda", RANK_CLIENT_HUGE="1"),
                         root_args=["xfer=1"], rank_args=["xfer=1"], bound=BOUND + RANK_MIB / 16)
xfer = [l for p in procs for l in p.wait().splitlines() if l.startswith("XFER")]
ends = ipc_ends(d)
ok(len(xfer) == 4 and all(" ok" in l for l in xfer) and len(ends) == 4 and counted_all(ends) and
   all(set(hops(e, w)) <= {"push", "pull"} for e in ends for w in ("in", "out")),
   "ipc-steps4: broadcasts of 20 and 60 MiB in the chain's own steps, pushed or pulled, exact on every rank",
   xfer + [(e["rank"], e.get("ipc")) for e in ends] + [p.err[-300:] for p in procs if p.err])

# 25c. A sender that finds its successor one broadcast behind waits for it (up to
#      NCCLSHIM_IPC_PUSH_WAIT_US), so in a run of broadcasts every hop is pushed. The fake's
#      streams are synchronous: a rank returns from broadcast b - 1 only once its neighbour has
#      counted in on it, so from the second broadcast on every receiver is one behind at worst,
#      and with a generous wait only the first broadcast can be pulled.
log = os.path.join(TMP, "ipc-push2.cuda")
d, procs, ids = scenario("ipc-push2", 2, dict(IPC_ENV, FAKE_CUDA_LOG=log, NCCLSHIM_IPC_PUSH_WAIT_US=PUSH_WAIT_US),
                         lambda r: dict(roles(1)(r), RANK_CLIENT_MEM="cuda"), root_args=["xfer=1"],
                         rank_args=["xfer=1"])
xfer = [l for p in procs for l in p.wait().splitlines() if l.startswith("XFER")]
ends = ipc_ends(d)
ok(len(xfer) == 2 and all(" ok" in l for l in xfer) and len(ends) == 2 and counted_all(ends) and
   sum(e["ipc"]["out"].get("push", 0) for e in ends) >= sum(sum(e["ipc"]["out"].values()) for e in ends) - 1,
   "ipc-push2: the senders waited for their receivers: every hop pushed but perhaps the first, all exact",
   [(e["rank"], e.get("ipc")) for e in ends] + xfer)

# 25d. Colocated processes (every rank on one device): a root pushing to its successor leaves
#      no DONE (its fence is the AVAIL it wrote on the successor's page) and a last receiver no
#      TAKEN_MINE (the next broadcast on another stream waits for its TAKEN on the predecessor's
#      page): broadcasts on 3 streams in turn, every root, odd sizes, stay exact, 2 and 4 ranks.
for n in (2, 4):
    name = "ipc-one-gpu%d" % n
    log = os.path.join(TMP, name + ".cuda")
    d, procs, ids = scenario(name, n, dict(IPC_ENV, FAKE_CUDA_LOG=log, NCCLSHIM_IPC_PUSH_WAIT_US=PUSH_WAIT_US),
                             lambda r, n=n: dict(roles(n - 1)(r), RANK_CLIENT_MEM="cuda"), root_args=["xfer=1"],
                             rank_args=["xfer=1"], one_gpu=True)
    xfer = [l for p in procs for l in p.wait().splitlines() if l.startswith("XFER")]
    ends = ipc_ends(d)
    with open(log) as fh:
        left = fh.read().split()
    ok(len(xfer) == n and all(" ok" in l for l in xfer) and len(ends) == n and counted_all(ends) and
       sum(e["ipc"]["out"].get("push", 0) for e in ends) > 0 and
       all(cuda_released(x) for x in left),
       "%s: colocated ranks, broadcasts on 3 streams in turn pushed and exact, everything freed" % name,
       [(e["rank"], e.get("ipc")) for e in ends] + xfer + left + [p.err[-300:] for p in procs if p.err])

# 25e. Buffers of PyTorch's expandable segments (cuMemCreate'd 2 MiB pieces mapped back to back, a
#      buffer at an offset, some straddling pieces, one broadcast over 2 MiB): exportable ones
#      (POSIX descriptors), ones created with no handle type (vLLM's sleep mode), and a chain that
#      mixes them with cuMemAlloc'ed ones. Every result exact, and every handle, mapping and
#      reservation the clients and the shim made is given back (the fake's exit lines).
#      The exportable ones are pushed or pulled (shim/ipc/ipc_vmm.c), never staged; the others, and
#      all of them with NCCLSHIM_IPC_VMM=0, are staged, and the records say why.
def vmm_allowed(name, r, way):
    """The hops a rank of these scenarios may take (each hop's first rank decides from its own buffer)."""
    if name in ("ipc-vmm-noexport2", "ipc-vmm-off2"):
        return {"staged"}
    if name == "ipc-vmm-mixed3":        # rank 2's buffers cannot be shared: into it pulled or staged, out staged or pushed
        return {(1, "out"): {"pull", "staged"}, (2, "in"): {"pull", "staged"}, (2, "out"): {"push", "staged"},
                (0, "in"): {"push", "staged"}}.get((r, way), {"push", "pull"})
    return {"push", "pull"}


for n, name, mem, extra in ((2, "ipc-vmm2", lambda r: "vmm", {}),
                            (2, "ipc-vmm-noexport2", lambda r: "vmm-noexport", {}),
                            (2, "ipc-vmm-off2", lambda r: "vmm", {"NCCLSHIM_IPC_VMM": "0"}),
                            (3, "ipc-vmm-mixed3", lambda r: ("vmm", "cuda", "vmm-noexport")[r], {})):
    log = os.path.join(TMP, name + ".cuda")
    d, procs, ids = scenario(name, n, dict(IPC_ENV, FAKE_CUDA_LOG=log, RANK_CLIENT_BIG="1", **extra),
                             lambda r, n=n, mem=mem: dict(roles(n - 1)(r), RANK_CLIENT_MEM=mem(r)),
                             root_args=["xfer=1"], rank_args=["xfer=1"])
    xfer = [l for p in procs for l in p.wait().splitlines() if l.startswith("XFER")]
    ends = ipc_ends(d)
    with open(log) as fh:
        left = fh.read().split()
    ok(len(xfer) == n and all(" ok" in l for l in xfer) and len(ends) == n and counted_all(ends),
       "%s: every broadcast (one over 2 MiB), all-gather and all-reduce is exact, every hop counted" % name,
       xfer + [(e["rank"], e.get("ipc")) for e in ends] + [p.err[-300:] for p in procs if p.err])
    ok(len(left) == CUDA_LOG_FIELDS * n and all(cuda_released(x) for x in left),
       "%s: every VMM handle, mapping and reservation released at exit" % name, left)
    ok(len(ends) == n and all(set(hops(e, w)) <= vmm_allowed(name, e["rank"], w) for e in ends for w in ("in", "out")),
       "%s: each rank's hops in and out are what its and its neighbours' buffers allow" % name,
       [(e["rank"], e["ipc"]["in"], e["ipc"]["out"]) for e in ends])
    vmm = [e["ipc"].get("vmm", {}) for e in ends]
    if name == "ipc-vmm2":
        ok(all(v.get("pieces_sent", 0) > 0 and v.get("pieces_mapped", 0) > 0 and "note" not in v for v in vmm),
           "%s: both ranks sent pieces and mapped the other's, with no note" % name, vmm)
    elif name == "ipc-vmm-noexport2":
        ok(all("cannot be exported" in v.get("note", "") and "POSIX_FILE_DESCRIPTOR" in v["note"] for v in vmm) and
           not any(v.get("pieces_sent") or v.get("pieces_mapped") for v in vmm),
           "%s: the records say why it was staged (no file descriptor handle type)" % name, vmm)
    elif name == "ipc-vmm-off2":
        ok(all("NCCLSHIM_IPC_VMM=0" in v.get("note", "") for v in vmm),
           "%s: the records say NCCLSHIM_IPC_VMM=0 staged it" % name, vmm)

# 25f. What the transfers above leave untried of shim/ipc/ipc_vmm.c, on expandable-segment buffers
#      (RANK_CLIENT_MEM=vmm) between two ranks; each process's FAKE_CUDA_LOG line says nothing is held
#      at exit.
VMM_ENV = dict(IPC_ENV, RANK_CLIENT_MEM="vmm", RANK_CLIENT_BIG="0")


def tagged(procs, tag):
    """The key=value fields of the processes' "<tag> <i> ..." lines."""
    return [dict(kv.split("=", 1) for kv in l.split()[1:] if "=" in kv)
            for p in procs for l in p.wait().splitlines() if l.startswith(tag + " ")]


def vmm_of(ends):
    return [e["ipc"].get("vmm", {}) for e in ends]


def released(log, n):
    with open(log) as fh:
        left = fh.read().split()
    return len(left) == CUDA_LOG_FIELDS * n and all(cuda_released(x) for x in left), left


# 25c'. Mappings kept ("Mappings kept", ipc_proto.h): buffers A and B broadcast into from both roots
#      (every hop but the first pushed: the long push wait), a pause longer than the old 1 s
#      idle time, the same broadcasts: nothing opened again; then both ranks free A: the memory
#      the neighbour's mapping kept allocated is given back within 10 s (the freeing rank's
#      reaper says A is gone; the neighbour's closes its mapping), and B's mappings stay.
log = os.path.join(TMP, "ipc-keep.cuda")
d, procs, ids = scenario("ipc-keep", 2, dict(IPC_ENV, FAKE_CUDA_LOG=log, NCCLSHIM_IPC_PUSH_WAIT_US=PUSH_WAIT_US),
                         lambda r: dict(roles(1)(r), RANK_CLIENT_MEM="cuda"), root_args=["keep=1"],
                         rank_args=["keep=1"])
kp = tagged(procs, "KEEP")
ok(len(kp) == 2 and all(k["bad"] == "-" and int(k["opened"]) >= 2 and k["reopened"] == "0" for k in kp),
   "ipc-keep: after a 1.5 s pause the same broadcasts opened no buffer again (exact)",
   kp + [p.err[-300:] for p in procs if p.err])
ok(len(kp) == 2 and all(k["freed_mapped"] == "1" and int(k["back_ms"]) >= 0 for k in kp),
   "ipc-keep: a buffer freed while the neighbour mapped it was given back within 10 s, the communicator alive",
   kp)
opens = [[int(x) for x in k["open"].split("/")] for k in kp]
ok(len(opens) == 2 and all(1 <= after < before for before, after in opens),
   "ipc-keep: only the freed buffer's mappings were closed (the other's stay open)", kp)
rel, left = released(log, 2)
ok(all(c["destroy"] == "0" for p in procs for c in p.comms().values()) and rel,
   "ipc-keep: destroyed, nothing held at exit", left)

# 25c''. The same with rank 0 the only root and its buffers the client's own memory (not
#      exportable), so every hop is pushed: rank 1 exports its buffers and maps nothing of rank 0's.
#      Its reaper must still find A freed (on an H100 it slept without a bound while nothing was
#      mapped, and the trainer's mappings kept 512 MiB of freed buffers).
d, procs, ids = scenario("ipc-keep-pushed", 2, dict(IPC_ENV, NCCLSHIM_IPC_PUSH_WAIT_US=PUSH_WAIT_US),
                         lambda r: dict(roles(1)(r), **({"RANK_CLIENT_MEM": "cuda"} if r else {})),
                         root_args=["keep=2"], rank_args=["keep=2"])
kp = tagged(procs, "KEEP")  # rank 0 first
ok(len(kp) == 2 and all(k["bad"] == "-" and k["reopened"] == "0" for k in kp) and
   int(kp[0]["opened"]) >= 2 and kp[1]["freed_mapped"] == "1" and int(kp[1]["back_ms"]) >= 0,
   "ipc-keep-pushed: a receiver that maps nothing finds its freed buffer and it is given back within 10 s",
   kp + [p.err[-300:] for p in procs if p.err])

#  (forget) Both ranks broadcast into buffers they keep (so the neighbour maps their pieces), then free
#  them and keep the communicator: the exporter's reaper (once a second) tells the neighbour to
#  forget the pieces it no longer maps, and the neighbour unmaps them, so within 10 s neither
#  process holds a VMM handle, mapping or reservation while the communicator is still there.
name = "ipc-vmm-forget"
log = os.path.join(TMP, name + ".cuda")
d, procs, ids = scenario(name, 2, dict(VMM_ENV, FAKE_CUDA_LOG=log), roles(1), root_args=["vmm=forget"],
                         rank_args=["vmm=forget"])
fg = tagged(procs, "FORGET")
# Which rank of a hop maps the other's buffer is the arrival order's (the first publishes, the
# second maps): usually both do, at least one always.
ok(len(fg) == 2 and all(f["bad"] == "-" for f in fg) and sum(int(f["peer_maps"]) for f in fg) > 0 and
   sum(int(f["imports"]) for f in fg) > 0,
   "%s: broadcasts into kept buffers exact, pieces of the neighbour's mapped" % name,
   fg + [p.err[-300:] for p in procs if p.err])
ok(len(fg) == 2 and all(f["left"] == "0/0/0" and int(f["ms"]) >= 0 for f in fg),
   "%s: once both gave their buffers back, each neighbour's pieces were forgotten and unmapped within 10 s, "
   "the communicator still alive" % name, fg)
ends = ipc_ends(d)
rel, left = released(log, 2)
ok(len(ends) == 2 and all(c["destroy"] == "0" for p in procs for c in p.comms().values()) and rel and
   all("note" not in v for v in vmm_of(ends)),
   "%s: then destroyed, no note, nothing held at exit" % name, left + [p.comms() for p in procs] + vmm_of(ends))

#  (remap) A buffer over several pieces kept in its reservation: its pieces replaced in place (new
#  memory at the same addresses), then its first two swapped (the same memory mapped elsewhere),
#  with broadcasts from both roots after each: exact, so the neighbour neither wrote into nor read
#  from memory no longer mapped there; each new or moved piece sent at most once by each rank, and
#  by one of them at least (the first on a hop describes its buffer; a rank second on every hop of
#  a phase's broadcasts sends nothing for it).
name = "ipc-vmm-remap"
log = os.path.join(TMP, name + ".cuda")
d, procs, ids = scenario(name, 2, dict(VMM_ENV, FAKE_CUDA_LOG=log), roles(1), root_args=["vmm=remap"],
                         rank_args=["vmm=remap"])
rm = tagged(procs, "REMAP")
ok(len(rm) == 2 and all(x["bad"] == "-" for x in rm),
   "%s: broadcasts from both roots exact as made, after each piece was replaced in place, and after two "
   "were swapped" % name, rm + [p.err[-300:] for p in procs if p.err])
ends = ipc_ends(d)
want = [2 * int(x["pieces"]) + 2 for x in rm]
vm = vmm_of(ends)
# A rank maps the pieces it is sent when it needs them, or when its reaper reads them: one
# that never needed a phase's pieces may leave that message unread until destroy, so it maps
# at most what was sent; the second of each hop maps the first's, so each phase's pieces are
# mapped by one of the two.
ok(len(ends) == 2 and len(rm) == 2 and rm[0]["pieces"] == rm[1]["pieces"] and
   all(v.get("pieces_sent", 0) <= want[0] and "note" not in v for v in vm) and
   sum(v.get("pieces_sent", 0) for v in vm) >= want[0] and
   all(0 <= vm[r].get("pieces_mapped", 0) <= vm[1 - r].get("pieces_sent", 0) for r in (0, 1)) and
   sum(v.get("pieces_mapped", 0) for v in vm) >= want[0] and
   all(set(hops(e, w)) <= {"push", "pull"} for e in ends for w in ("in", "out")),
   "%s: each rank sent at most 2 x pieces + 2 (as made, replaced, the two moved: each once), the two at "
   "least that many, each mapped no more than its neighbour sent, never staged" % name,
   [want, vm, [(e["ipc"]["in"], e["ipc"]["out"]) for e in ends]])
rel, left = released(log, 2)
ok(rel, "%s: nothing held at exit" % name, left)

#  (alias) A buffer over one piece mapped twice in its reservation (CUDA allows it; both mappings
#  are one memory block): a neighbour maps a block once, so the buffer is staged, exact, and the
#  record says why (before, the importer unmapped the first mapping, still in the list it was
#  mapping, for the second: a double free aborted both processes).
name = "ipc-vmm-alias"
log = os.path.join(TMP, name + ".cuda")
d, procs, ids = scenario(name, 2, dict(VMM_ENV, FAKE_CUDA_LOG=log), roles(1), root_args=["vmm=alias"],
                         rank_args=["vmm=alias"])
al = tagged(procs, "ALIAS")
ends = ipc_ends(d)
ok(len(al) == 2 and all(x["bad"] == "-" for x in al) and all(p.p.returncode == 0 for p in procs) and
   len(ends) == 2 and all(hops(e, w) == ["staged"] for e in ends for w in ("in", "out")),
   "%s: broadcasts into a buffer mapping one piece twice: staged, exact, no process aborted" % name,
   al + [(e["ipc"]["in"], e["ipc"]["out"]) for e in ends] + [(p.p.returncode, p.err[-300:]) for p in procs])
vm = vmm_of(ends)
rel, left = released(log, 2)
# A rank that came second on every hop never looked at its buffer (nobody reads its description).
ok(len(vm) == 2 and any("note" in v for v in vm) and
   all(("note" not in v or "maps one piece of cuMemCreate memory at two addresses" in v["note"]) and
       not v.get("pieces_sent") for v in vm) and rel,
   "%s: the record of each rank that described the buffer says why (one did at least), no piece was sent, "
   "nothing held at exit" % name, vm + left)

#  (fresh) A loop of broadcasts from rank 0 only into fresh buffers (each of two pieces), as a refit:
#  with NCCLSHIM_IPC_PUSH_WAIT_US large, rank 0 finds rank 1 in on each before it describes its
#  buffer, so it comes second on every hop after the first and never shares its pieces (before,
#  it sent them all, and rank 1's reaper imported and mapped them: ~0.25 ms a piece on H100 for
#  nothing); rank 1 shares its buffers' pieces, rank 0 maps them and pushes, exact.
name = "ipc-vmm-fresh"
log = os.path.join(TMP, name + ".cuda")
d, procs, ids = scenario(name, 2, dict(VMM_ENV, FAKE_CUDA_LOG=log, NCCLSHIM_IPC_PUSH_WAIT_US=PUSH_WAIT_US),
                         roles(1),
                         root_args=["vmm=fresh"], rank_args=["vmm=fresh"])
fr = tagged(procs, "FRESH")
ends = ipc_ends(d)
vm = vmm_of(ends)
nfresh = int(fr[0]["n"]) * int(fr[0]["pieces"]) if len(fr) == 2 and fr[0]["pieces"].isdigit() else -1
by_rank = {e["rank"]: e for e in ends}
ok(len(fr) == 2 and all(x["bad"] == "-" and x["pieces"] == "2" for x in fr) and len(ends) == 2 and
   by_rank.get(0, {}).get("ipc", {}).get("out", {}).get("push", 0) >= int(fr[0]["n"]),
   "%s: broadcasts from rank 0 into fresh buffers exact, pushed (rank 1 in first)" % name,
   fr + [(e["rank"], e["ipc"]["in"], e["ipc"]["out"]) for e in ends] + [p.err[-300:] for p in procs if p.err])
ok(len(vm) == 2 and 0 in by_rank and 1 in by_rank and vmm_of([by_rank[0]])[0].get("pieces_sent", 0) <= 1 and
   vmm_of([by_rank[1]])[0].get("pieces_sent", 0) >= nfresh > 0 and
   vmm_of([by_rank[0]])[0].get("pieces_mapped", 0) >= nfresh and
   vmm_of([by_rank[1]])[0].get("pieces_mapped", 0) <= 1 and all("note" not in v for v in vm),
   "%s: rank 0 (second on every hop but maybe the first) shared at most the first buffer's piece, rank 1 all "
   "of its fresh buffers' pieces, which rank 0 mapped; no note" % name, [nfresh] + vm)
rel, left = released(log, 2)
ok(rel, "%s: nothing held at exit" % name, left)

#  (half) NCCLSHIM_IPC_VMM=1 on rank 0, =0 on rank 1: every hop staged, exact, and each rank's
#  record says why: rank 1 its setting, rank 0 that rank 1 does not share (its page says it does
#  not listen), at connect, without waiting for its socket.
def staged_xfer(name, rank_env, what):
    """Two ranks' transfers (xfer=1) on expandable-segment buffers, rank r's environment with
    rank_env(r): checks that every hop was staged and every result exact.  (procs, ends, log)."""
    log = os.path.join(TMP, name + ".cuda")
    d, procs, ids = scenario(name, 2, dict(VMM_ENV, FAKE_CUDA_LOG=log), lambda r: dict(roles(1)(r), **rank_env(r)),
                             root_args=["xfer=1"], rank_args=["xfer=1"])
    xfer = [l for p in procs for l in p.wait().splitlines() if l.startswith("XFER")]
    ends = ipc_ends(d)
    ok(len(xfer) == 2 and all(" ok" in l for l in xfer) and len(ends) == 2 and counted_all(ends) and
       all(hops(e, w) == ["staged"] for e in ends for w in ("in", "out")),
       "%s: %s: every hop staged, all exact" % (name, what),
       xfer + [(e["rank"], e["ipc"]["in"], e["ipc"]["out"]) for e in ends] + [p.err[-300:] for p in procs if p.err])
    return procs, ends, log


name = "ipc-vmm-half"
procs, ends, log = staged_xfer(name, lambda r: {"NCCLSHIM_IPC_VMM": str(1 - r)}, "NCCLSHIM_IPC_VMM=0 on one rank only")
vm = vmm_of(ends)
ok(len(vm) == 2 and vm[1].get("note", "").startswith("NCCLSHIM_IPC_VMM=0: ") and
   "rank 1 does not share cuMemCreate memory (NCCLSHIM_IPC_VMM=0 there" in vm[0].get("note", "") and
   not any(v.get("pieces_sent") or v.get("pieces_mapped") for v in vm),
   "%s: rank 1's record says NCCLSHIM_IPC_VMM=0, rank 0's that rank 1 does not share (NCCLSHIM_IPC_VMM=0 there?)"
   % name, vm)
rel, left = released(log, 2)
ok(rel and all(p.elapsed < scaled(BOUND - 5) for p in procs), "%s: nothing held at exit, no wait for the socket" % name,
   left + [p.elapsed for p in procs])

#  (probe) Rank 1 cannot import cuMemCreate memory at all (the fake's FAKE_CUDA_FAIL on
#  cuMemImportFromShareableHandle: a container without the driver's file descriptor support, GPUs
#  without peer access): the piece rank 0's HELLO lends it to try fails at connect, before any
#  broadcast counts on it, so every hop is staged and exact (not failed), rank 1's record names the
#  driver's error, rank 0's that the sockets did not come up.
name = "ipc-vmm-probe"
procs, ends, log = staged_xfer(name, lambda r: {"FAKE_CUDA_FAIL": "cuMemImportFromShareableHandle"} if r else {},
                               "a rank that cannot import cuMemCreate memory")
vm = vmm_of(ends)
ok(len(vm) == 2 and "cuMemImportFromShareableHandle" in vm[1].get("note", "") and
   "did not come up" in vm[0].get("note", "") and not any(v.get("pieces_mapped") for v in vm),
   "%s: rank 1's record names the driver's error, rank 0's that the sockets did not come up" % name, vm)
rel, left = released(log, 2)
ok(rel, "%s: nothing held at exit (the probe piece given back too)" % name, left)

#  (strangers) While rank 1 is held in its ipc set-up (the fake's FAKE_CUDA_PAUSE, at the pinning of its
#  counters, which it does before it connects), strangers
#  connect to rank 0's socket: garbage, and a good HELLO claiming rank 1, from another process; and
#  from rank 1's own process a HELLO claiming the wrong rank (poke=1).  Rank 0 closes all three
#  (while it lives: it holds before destroy), accepts the real rank 1 after them (in its connect's
#  wait for it, or later in its reaper), and shares its pieces as ever: exact, no note.
name = "ipc-vmm-strangers"
d = os.path.join(TMP, name)
os.makedirs(d)
sync = os.path.join(TMP, name + ".sync")
os.makedirs(sync)
log = os.path.join(TMP, name + ".cuda")
go = os.path.join(sync, "connect")
env = dict(VMM_ENV, NCCLSHIM_LOG_DIR=d + "/rec", FAKE_NCCL_LOG=d + "/fake.log", RANK_CLIENT_CUDA=CUDA,
           FAKE_CUDA_LOG=log, RANK_CLIENT_SYNC=sync)
root = Proc("root", ["root", "1", "2", "xfer=1", "hold=1"], dict(env, FAKE_CUDA_DEVICE="0", **TRAIN))
rid = root.read_ids(1)
rank1 = Proc("rank1", ["rank", "1", "2", rid[0], "xfer=1", "poke=1"],
             dict(env, FAKE_CUDA_DEVICE="1", FAKE_CUDA_PAUSE="cuMemHostRegister:" + go, **INFER))
deadline = Deadline(20)


def wait_for(cond):
    while not deadline.passed():
        got = cond()
        if got:
            return got
        time.sleep(0.005)  # a bounded poll of the condition, not a synchronisation
    return None


# Rank 0's socket is made in its round 2, while rank 1 is held in its own.
sock = wait_for(lambda: [os.path.join("/dev/shm", f) for f in os.listdir("/dev/shm")
                         if f.startswith("ncclshim.ipc.%d." % root.p.pid) and f.endswith(".sock")])
sock = sock[0] if sock else None
strangers = []


def stranger(payload):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(sock)
    except ConnectionRefusedError:  # bound, not yet listening
        s.close()
        return False
    try:
        s.send(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # rank 0 (in its connect's wait for rank 1) accepted and closed it already: closed() sees it
    strangers.append(s)
    return True


if sock:
    for payload in (os.urandom(64), struct.pack("<IIQiI", 0x766d6d73, 1, 0, 1, 0)):
        wait_for(lambda: stranger(payload))
    with open(os.path.join(sync, "pokepath.0.tmp"), "w") as fh:
        fh.write(sock + "\n")
    os.rename(os.path.join(sync, "pokepath.0.tmp"), os.path.join(sync, "pokepath.0"))
    wait_for(lambda: os.path.exists(os.path.join(sync, "poked.0")))
open(go, "w").close()


def closed(s):
    left = deadline.left()
    if left <= 0 or not select.select([s], [], [], left)[0]:
        return False
    try:
        return s.recv(100) == b""
    except ConnectionResetError:  # closed with our message unread
        return True


shut = [closed(s) for s in strangers]
alive = root.p.poll() is None
# Accepting rank 1 (after the strangers: they queued first) ends the listening, and the name.
gone = sock is not None and bool(wait_for(lambda: not os.path.exists(sock)))
open(os.path.join(sync, "release.0"), "w").close()
for p in (root, rank1):
    p.wait()
for s in strangers:
    s.close()
ok(sock is not None and len(strangers) == 2 and all(shut) and alive,
   "%s: rank 0 closed the stranger's connections (garbage; a HELLO as rank 1 from another process) while it "
   "ran" % name, [sock, shut, alive, root.err[-300:], rank1.err[-300:]])
pk = tagged([rank1], "POKE")
ok(pk == [{"sent": "1", "closed": "1"}], "%s: and the HELLO claiming the wrong rank from rank 1's own process" % name,
   pk)
xfer = [l for p in (root, rank1) for l in p.wait().splitlines() if l.startswith("XFER")]
ends = ipc_ends(d)
vm = vmm_of(ends)
ok(gone and len(xfer) == 2 and all(" ok" in l for l in xfer) and len(ends) == 2 and counted_all(ends) and
   all(v.get("pieces_sent", 0) > 0 and v.get("pieces_mapped", 0) > 0 and "note" not in v for v in vm) and
   all(set(hops(e, w)) <= {"push", "pull"} for e in ends for w in ("in", "out")),
   "%s: then the real rank 1 was accepted (the socket's name gone), pieces shared both ways, all exact, no "
   "note" % name, [gone] + xfer + vm + [(e["ipc"]["in"], e["ipc"]["out"]) for e in ends])
rel, left = released(log, 2)
ok(rel, "%s: nothing held at exit" % name, left)

# 25b. NCCL 2.29's suspend/resume on an ipc communicator (the fake NCCL 2.30.7, found
#      before the 2.28 one the client links): answered by the shim, operations refused
#      in between, the rank's own staging reported as suspendable, nothing as persistent.
d, procs, ids = scenario("ipcsuspend", 2, dict(IPC_ENV, LD_LIBRARY_PATH=os.path.join(ROOT, "tests/fake/new")),
                         roles(1), root_args=["ops=1", "suspend=1"], rank_args=["ops=1", "suspend=1"])
sus = [l for p in procs for l in p.wait().splitlines() if l.startswith("SUSPEND")]
ok(len(sus) == 2 and all("found=1" in l and " rc=0 suspended=1 refused=5 resume=0 after=0" in l for l in sus),
   "ipc: ncclCommSuspend succeeds, MemStats says suspended, a broadcast is refused, Resume, then it works", sus)
ok(len(sus) == 2 and all(" again=5" in l for l in sus),
   "ipc: a second ncclCommSuspend is refused with ncclInvalidUsage, as NCCL refuses it", sus)
ok(all(int(l.split("persist=")[1].split()[0]) == 0 for l in sus),
   "ipc: MemStats reports no persistent GPU memory (the counters are host memory; the staging can be suspended)", sus)
ok(not [l for l in fake_lines(d + "/fake.log") if "Suspend" in l or "MemStats" in l or "Resume" in l],
   "ipc: none of them reached NCCL", fake_lines(d + "/fake.log"))

# 25c. ncclCommSuspend gives the staging back, on one rank alone: 2 and 3 ranks, the last one
#      suspends after each refit (a broadcast from rank 0); its free memory grows by its staging
#      once the peers let go, never freed while a peer maps it (the fake counts that); the peers'
#      next broadcast, from the suspended rank, waits for its resume and is exact; 50 cycles leave
#      nothing behind; the last suspend is followed by destroy.
def cycles(name, n, args, env=None):
    sync = os.path.join(TMP, name + ".sync")
    os.makedirs(sync)
    log = os.path.join(TMP, name + ".cuda")
    e = dict(IPC_ENV, LD_LIBRARY_PATH=os.path.join(ROOT, "tests/fake/new"), RANK_CLIENT_SYNC=sync,
             FAKE_CUDA_LOG=log)
    e.update(env or {})
    d, procs, ids = scenario(name, n, e, roles(n - 1), root_args=["suspend=2"] + args,
                             rank_args=["suspend=2"] + args)
    out = [l for p in procs for l in p.wait().splitlines() if l.startswith("CYCLES") or l.startswith("COMM")]
    cyc = {int(l.split("rank=")[1].split()[0]): dict(kv.split("=", 1) for kv in l.split()[2:])
           for l in out if l.startswith("CYCLES")}
    with open(log) as fh:
        left = fh.read().split()
    return d, procs, out, cyc, left

for n in (2, 3):
    d, procs, out, cyc, left = cycles("ipc-sleep%d" % n, n, ["cycles=3"])
    S = cyc.get(n - 1, {})
    ok(len(cyc) == n and all(c["ok"] == "3" and c["bad"] == "-" for c in cyc.values()),
       "ipc sleep, %d ranks: every refit and every broadcast from the suspended rank is exact" % n, out)
    ok(S.get("released") == "3" and S.get("held") == "0" and S.get("freed_mapped") == "0",
       "ipc sleep, %d ranks: each suspend gave the staging back (free memory grew by it), never while mapped" % n, S)
    ok(S.get("refused") == "3" and S.get("leak") == "0",
       "ipc sleep, %d ranks: operations refused while suspended; nothing leaked across cycles" % n, S)
    ok(S.get("final") == "0" and len([l for l in out if l.startswith("COMM") and "destroy=0" in l]) == n,
       "ipc sleep, %d ranks: destroy while suspended succeeds everywhere" % n, out)
    ok(len(left) == CUDA_LOG_FIELDS * n and all(cuda_released(x)
                                  for x in left),
       "ipc sleep, %d ranks: destroy freed every allocation and closed every mapping" % n, left)

d, procs, out, cyc, left = cycles("ipc-sleep50", 2, ["cycles=50"])
S = cyc.get(1, {})
ok(len(cyc) == 2 and all(c["ok"] == "50" and c["bad"] == "-" for c in cyc.values()) and
   S.get("released") == "50" and S.get("leak") == "0" and S.get("freed_mapped") == "0",
   "ipc sleep: 50 suspend/resume cycles, all exact, the staging given back each time, nothing leaked", S)

d, procs, out, cyc, left = cycles("ipc-sleep-p2p", 3, ["cycles=3", "p2p=1"])
ok(len(cyc) == 3 and all(c["ok"] == "3" and c["bad"] == "-" for c in cyc.values()) and
   cyc[2].get("released") == "3" and cyc[2].get("freed_mapped") == "0",
   "ipc sleep, 3 ranks: a Recv from the suspended rank waits for its resume and is exact; the staging was "
   "given back each time", out)

d, procs, out, cyc, left = cycles("ipc-sleep-mid", 2, ["cycles=2", "midbcast=1"])
ok(len(cyc) == 2 and all(c["bad"] == "-" for c in cyc.values()) and cyc[1]["freed_mapped"] == "0",
   "ipc sleep: a suspend while the peer is mid-broadcast (waiting for this rank) returns; after the resume "
   "the broadcast completes, exact; the staging is never freed while mapped", out)

d, procs, out, cyc, left = cycles("ipc-sleep-fail", 2, ["cycles=1", "resumefail=1"],
                                  {"NCCLSHIM_IPC_RESUME_WAIT_MS": "200"})
err = "".join(p.err for p in procs)
ok(len(cyc) == 2 and all(c["bad"] == "-" for c in cyc.values()) and cyc[0].get("failed_first") == "1",
   "ipc sleep: a broadcast that needs a suspended rank's staging fails past NCCLSHIM_IPC_RESUME_WAIT_MS, "
   "and works once it resumed", out)
ok("rank 1 is suspended" in err and "call ncclCommResume on rank 1" in err,
   "ipc sleep: its message names the cause (the peer is suspended) and the fix (resume it)", err[-600:])

# 26. Four ipc communicators at once in each of two processes.
d, procs, ids = scenario("ipc-concurrent", 2, IPC_ENV, roles(1), k=4, root_args=["xfer=1", "leaks=1"],
                         rank_args=["xfer=1", "leaks=1"])
xfer = [l for p in procs for l in p.wait().splitlines() if l.startswith("XFER")]
ok(len(xfer) == 8 and all(" ok" in l for l in xfer), "4 concurrent ipc communicators per process: all exact", xfer)

# 27. A rank that cannot set ipc up (no memory, or its counters cannot be pinned) vetoes: passthrough for all.
for fn, rnd in (("cuMemAlloc", "set up"), ("cuMemHostRegister", "set up")):
    d, procs, ids = scenario("ipc-veto-" + fn, 2, IPC_ENV,
                             lambda r, fn=fn: dict(roles(1)(r), **({"FAKE_CUDA_FAIL": fn} if r == 1 else {})))
    cr = comm_records(d)
    ok(len(cr) == 2 and all(c["action"] == "passthrough" and fn in c["action_reason"] for c in cr) and
       len([l for l in fake_lines(d + "/fake.log") if "ncclCommInitRank " in l]) == 2,
       "%s fails on rank 1: it vetoes, both ranks pass through to NCCL, the reason names %s" % (fn, fn), cr)

# 28. ipc across hosts is impossible: the root passes through and says why.
d, procs, ids = scenario("ipc-2hosts", 2, IPC_ENV, lambda r: dict(roles(1)(r), NCCLSHIM_HOSTNAME="node%d" % r))
ok(all(c["action"] == "passthrough" and "one host" in c["action_reason"] for c in comm_records(d)),
   "NCCLSHIM_WEIGHT_UPDATE=ipc with ranks on 2 hosts: passthrough, 'needs every rank on one host'",
   comm_records(d))

# 29. A peer that dies: the survivor's waits are released, its operations fail with
#     ncclRemoteError (ncclCommGetAsyncError says so), destroy returns; nothing hangs.
d, procs, ids = scenario("ipc-dead-peer", 2, IPC_ENV, roles(1), root_args=["xfer=1"], rank_args=["vanish=1"])
out = procs[0].wait()
ok(procs[0].elapsed < scaled(20) and "ASYNC 0 6" in out and " destroy=0" in out,
   "rank 1 exits after init: rank 0's transfers stop, GetAsyncError gives ncclRemoteError (6), destroy returns",
   (procs[0].elapsed, out[-400:], procs[0].err[-400:]))
# The fake's work queues (fake_cuda.c) hold what the driver would: a release that a stream wait
# holds up (a synchronous copy behind a wait on the legacy stream) ends in the wait's bound, not at once.
ok("fake libcuda" not in procs[0].err,
   "and nothing rank 0 did waited behind its stream's wait (the driver would have hung there)", procs[0].err[-800:])
lost = [x for x in records(d + "/rec") if x.get("what") == "ipc-peer-lost"]
ok(lost and "gone" in lost[0]["message"], "and a warning record says the peer is gone",
   [lost[:1], procs[0].elapsed, [x for x in records(d + "/rec") if x.get("type") in ("warning", "ipc_peer_left")],
    procs[0].err[-1500:]])

# 30. Every record line of every scenario is valid JSON.
bad = [x for sub in os.listdir(TMP) for x in records(os.path.join(TMP, sub, "rec")) if x.get("type") == "UNPARSABLE"]
ok(not bad, "every record of every scenario parses", bad[:3])

done(TMP)
