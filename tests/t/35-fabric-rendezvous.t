#!/usr/bin/env python3
# auto across hosts, end to end on the fake NCCL: four ranks (trainer ranks 0-1 on
# node-a, inference ranks 2-3 on node-b: NCCLSHIM_HOSTNAME), each reading a fake
# sysfs tree (NCCLSHIM_SYSFS_ROOT, test-only) and its NCCLSHIM_FABRIC_BUDGET, send
# their fabric in the HELLO; the root decides once for all.  Checked: the action and
# its reason on every rank for each kind of evidence, the config each rank's NCCL
# received (fake NCCL's log: netName, ctas, perpeer, the application's own fields),
# and a group where one rank cannot take frugal.  Every process is bounded.
import os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import BIN, CUDA, PRELOAD, Deadline, done, ok, records, wait_bounded  # noqa: E402

CLIENT = os.path.join(BIN, "rank_client")
BOUND = 30  # seconds a process may live, on a quiet machine (tap.py scales it)
TMP = tempfile.mkdtemp(prefix="ncclshim-fabric.")
HOSTS = ["node-a", "node-a", "node-b", "node-b"]


class Proc:
    def __init__(self, name, args, env):
        full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_", "NCCL_"))}
        full.update(env)
        full["LD_PRELOAD"] = PRELOAD
        self.name = name
        self.p = subprocess.Popen([CLIENT] + args, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True)
        self.start = time.monotonic()

    def first_line(self):
        deadline = Deadline(BOUND)
        line = ""
        while not line.startswith("ID ") and not deadline.passed():
            line = self.p.stdout.readline()
            if not line:
                break
        return line.split()[1] if line.startswith("ID ") else None

    def wait(self):
        self.out, self.err = wait_bounded(self.p, self.start, BOUND)
        return self.p.returncode


def tree(name, kind, devices=1, gpus=2, state="4: ACTIVE", garble=None):
    """A fake sysfs root: `devices` RDMA devices of `kind` (efa, ib, none), `gpus` NVIDIA GPUs."""
    root = os.path.join(TMP, "sys-" + name)
    if os.path.isdir(root):
        return root

    def put(rel, text):
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    os.makedirs(root)
    for g in range(gpus):
        put("bus/pci/devices/0000:%02x:00.0/vendor" % (g + 1), "0x10de\n")
        put("bus/pci/devices/0000:%02x:00.0/class" % (g + 1), "0x030200\n")
    for k in range(devices if kind != "none" else 0):
        dev = "class/infiniband/%s_%d/" % ("efa" if kind == "efa" else "mlx5", k)
        put(dev + "device/vendor", "0x1d0f\n" if kind == "efa" else "0x15b3\n")
        put(dev + "ports/1/link_layer", "Unknown\n" if kind == "efa" else "InfiniBand\n")
        put(dev + "ports/1/state", garble or state + "\n")
    return root


def group(name, per_rank, env=None, root_args=(), rank_args=()):
    """Rank 0 (root, makes the ID), ranks 1-3; per_rank(r) -> rank r's extra env."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    base = {"NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log", "RANK_CLIENT_CUDA": CUDA}
    base.update(env or {})

    def env_of(r):
        e = dict(base, NCCLSHIM_ROLE="training" if r < 2 else "inference", NCCLSHIM_HOSTNAME=HOSTS[r],
                 FAKE_CUDA_DEVICE=str(r))
        e.update(per_rank(r))
        return e
    procs = [Proc("root", ["root", "1", "4"] + list(root_args), env_of(0))]
    uid = procs[0].first_line()
    if uid:
        procs += [Proc("rank%d" % r, ["rank", str(r), "4", uid] + list(rank_args), env_of(r)) for r in (1, 2, 3)]
    rcs = [p.wait() for p in procs]
    comms = sorted((x for x in records(d + "/rec") if x.get("type") == "comm"), key=lambda c: c["rank"])
    inits = sorted(l for l in open(d + "/fake.log").read().splitlines() if "ncclCommInitRank" in l) \
        if os.path.exists(d + "/fake.log") else []
    if any(rcs) or len(comms) != 4:
        print("# %s: exit codes %s, %d comm records" % (name, rcs, len(comms)))
        for p in procs:
            print("# --- %s\n# %s" % (p.name, p.err[-600:].replace("\n", "\n# ")))
    return d, comms, inits, rcs


def same(comms, action, reason):
    good = len(comms) == 4 and all(c["action"] == action and reason in c["action_reason"] for c in comms) and \
        len({c["decision"]["id"] for c in comms}) == 1
    return good, [(c["rank"], c["action"], c["action_reason"]) for c in comms]


def check(name, per_rank, action, reason, what, want_inits, env=None, **kw):
    d, comms, inits, rcs = group(name, per_rank, env, **kw)
    good, diag = same(comms, action, reason)
    ok(good and not any(rcs), "%s: every rank %s, one decision, the reason says '%s'" % (what, action, reason), diag)
    ok(len(inits) == 4 and all(want_inits(l) for l in inits), "%s: what each rank's NCCL received" % what, inits)
    return d, comms, inits


EFA8 = tree("efa8", "efa", devices=8, gpus=2)
IB1 = tree("ib1", "ib", devices=1, gpus=2)
NONE = tree("none", "none")
BADSTATE = tree("badstate", "ib", garble="ACTIVE\n")


def untouched(l):
    return "netName=Socket" not in l and " ctas=1,1" not in l


def one_channel(l):
    return " ctas=1,1 perpeer=1" in l and "netName=(null)" in l


def on_socket(l):
    return "netName=Socket" in l and " ctas=1,1" not in l


# Ample: 8 EFA devices for 2 GPUs on each host, no budget: the refit keeps the fabric.
check("ample", lambda r: {"NCCLSHIM_SYSFS_ROOT": EFA8}, "passthrough",
      "ranks on 2 hosts, fabric ample (every host; host 'node-a' has 8 EFA devices for 2 GPUs (at least 2 a GPU)): "
      "passthrough", "8 EFA devices for 2 GPUs a host", untouched)
# Scarce, one channel fits: 1 IB device, a budget of 18 QPs (about 24 at NCCL's default, 12 at one).
d, comms, inits = check("frugal", lambda r: {"NCCLSHIM_SYSFS_ROOT": IB1, "NCCLSHIM_FABRIC_BUDGET": "18"}, "frugal",
                        "fabric scarce, one channel fits (host 'node-a': InfiniBand/RoCE, NCCLSHIM_FABRIC_BUDGET 18 QPs a "
                        "device; this group's 2 ranks there take about 24 at NCCL's default channels, 12 at one): frugal",
                        "1 IB device, budget 18", one_channel, root_args=["fn=config"])
ok(len([l for l in inits if "blocking=1 " in l]) == 1 and all("ncclCommInitRankConfig" in l for l in inits),
   "frugal: every rank through ncclCommInitRankConfig, rank 0's own config field (blocking=1) kept", inits)
ok(all(c["frugal"] == {"minCTAs": 1, "maxCTAs": 1, "nChannelsPerNetPeer": 1} for c in comms),
   "frugal: every record says what NCCL was told", [c.get("frugal") for c in comms])
# Scarce, not even one channel fits: socket, training keeps the fabric.
check("scarce", lambda r: {"NCCLSHIM_SYSFS_ROOT": IB1, "NCCLSHIM_FABRIC_BUDGET": "8"}, "socket",
      "fabric scarce (host 'node-a': InfiniBand/RoCE, NCCLSHIM_FABRIC_BUDGET 8 QPs a device", "1 IB device, budget 8",
      on_socket)
# The worst host decides: node-a ample, node-b at budget 12 (its 2 ranks: 12 at one channel).
check("worst", lambda r: {"NCCLSHIM_SYSFS_ROOT": IB1, "NCCLSHIM_FABRIC_BUDGET": "100" if r < 2 else "12"}, "frugal",
      "fabric scarce, one channel fits (host 'node-b'", "node-a budget 100, node-b budget 12", one_channel)
# Without a budget, 1 device for 2 GPUs is scarce and nobody said one channel fits: socket.
check("nobudget", lambda r: {"NCCLSHIM_SYSFS_ROOT": IB1}, "socket",
      "host 'node-a' has 1 InfiniBand/RoCE device for 2 GPUs (fewer than 2 a GPU) and no NCCLSHIM_FABRIC_BUDGET",
      "1 IB device for 2 GPUs, no budget", on_socket)
# Beyond judging: socket, as before the fabric was weighed.
check("norodma", lambda r: {"NCCLSHIM_SYSFS_ROOT": NONE}, "socket",
      "fabric not judged (host 'node-a' has no RDMA device: not a fabric auto can weigh): socket",
      "no RDMA device", on_socket)
check("garbled", lambda r: {"NCCLSHIM_SYSFS_ROOT": BADSTATE if r == 3 else EFA8}, "socket",
      "fabric not judged (rank 3 (host 'node-b') could not read its fabric: ", "rank 3's sysfs garbled", on_socket)
d, comms, inits = check("badbudget", lambda r: {"NCCLSHIM_SYSFS_ROOT": EFA8,
                                                "NCCLSHIM_FABRIC_BUDGET": "lots" if r == 2 else "64"}, "socket",
                        "rank 2 (host 'node-b') could not read its fabric: NCCLSHIM_FABRIC_BUDGET='lots' is malformed",
                        "rank 2's NCCLSHIM_FABRIC_BUDGET=lots", on_socket)
warn = [x for x in records(d + "/rec") if x.get("type") == "warning" and "NCCLSHIM_FABRIC_BUDGET='lots'" in
        x.get("message", "")]
ok(len(warn) == 1 and "1..16777216" in warn[0]["message"], "a bad-setting warning names the value and the range",
   warn)
check("relroot", lambda r: {"NCCLSHIM_SYSFS_ROOT": "sys" if r == 1 else EFA8}, "socket",
      "NCCLSHIM_SYSFS_ROOT='sys' is not an absolute path", "rank 1's relative NCCLSHIM_SYSFS_ROOT", on_socket)
# A mixed group: rank 3's NCCL is 2.16, whose config has neither minCTAs nor netName
# (both came with 2.17's): frugal and socket are both vetoed, so every rank passes
# through, and the reason names the field.
check("oldnccl", lambda r: dict({"NCCLSHIM_SYSFS_ROOT": IB1, "NCCLSHIM_FABRIC_BUDGET": "18"},
                                **({"FAKE_NCCL_VERSION": "21605"} if r == 3 else {})), "passthrough",
      "rank 3 could not set up socket (NCCL 2.16 (21605) does not read ncclConfig_t.netName (NCCL 2.17 or later "
      "does))", "frugal fits but rank 3's NCCL is 2.16 (no frugal, no socket)", untouched)
check("minchannels", lambda r: dict({"NCCLSHIM_SYSFS_ROOT": IB1, "NCCLSHIM_FABRIC_BUDGET": "18"},
                                    **({"NCCL_MIN_NCHANNELS": "4"} if r == 1 else {})), "socket",
      "but rank 1 cannot take frugal (NCCL_MIN_NCHANNELS=4 in the environment", "frugal fits but rank 1 sets "
      "NCCL_MIN_NCHANNELS=4", on_socket)
# Chosen by name, frugal with a rank that cannot take it: that rank vetoes, everyone passes through.
check("vetoed", lambda r: dict({"NCCLSHIM_SYSFS_ROOT": IB1}, **({"FAKE_NCCL_VERSION": "21605"} if r == 3 else {})),
      "passthrough", "rank 3 could not set up frugal", "NCCLSHIM_WEIGHT_UPDATE=frugal, rank 3's NCCL 2.16", untouched,
      env={"NCCLSHIM_WEIGHT_UPDATE": "frugal"})

shutil.rmtree(TMP, ignore_errors=True)
sys.exit(done())
