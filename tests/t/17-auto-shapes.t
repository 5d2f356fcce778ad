#!/usr/bin/env python3
# NCCLSHIM_WEIGHT_UPDATE=auto for every shape of weight-update group, on the fake NCCL and
# the fake libcuda: a trainer of 1 or 2 ranks and an inference engine of 1, 2 or 7 ranks
# (tensor parallelism: each rank its own process, each a vLLM-style ctypes client,
# tests/clients/pynccl_like.py), on one host or several (NCCLSHIM_HOSTNAME, test-only),
# with ranks of unknown role among them.  On one host every rank gets every buffer of a
# refit whole, byte for byte, through the shim's ipc chain; across hosts every rank's
# NCCL init gets netName=Socket.  Every process runs under a bound and is killed, and the
# test fails, if it outlives it.
import os, select, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import (CUDA, PRELOAD, ROOT, Deadline, collect_bounded, done, env_time, ok, read_until,  # noqa: E402
                 records, skip_emulated)

skip_emulated("its ranks are Python ctypes clients, and the host's python3 cannot load the aarch64 "
              "library and fakes; t/13 runs the ipc chain and the socket redirect from C")

CLIENT = os.path.join(ROOT, "tests", "clients", "pynccl_like.py")
NCCL = os.path.join(ROOT, "tests", "fake", "a", "libnccl.so.2")
BOUND = 60  # seconds (a quiet machine's, scaled) for one group, all its processes together
TMP = tempfile.mkdtemp(prefix="ncclshim-auto.")
# A refit's packed buffers: a byte, a chunk and one, several chunks, several steps of the chain.
REFIT = [1, 65537, 200003, 1 << 20]
TITLES = {"T": "ray::DTensorPolicyWorker", "I": "ray::VllmGenerationWorker", "U": None}

def start(d, r, roles, hosts, extra):
    """Rank r: a Python process titled as Ray titles its actors (argv[0]), or untitled
    (a role the shim cannot tell) for a 'U'."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_"))}
    env.update({"LD_PRELOAD": PRELOAD, "NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log",
                "FAKE_CUDA_DEVICE": str(r % 8), "FAKE_CUDA_WAIT_TIMEOUT_MS": env_time(20000),
                "NCCLSHIM_IPC_CHUNK_BYTES": "65536", "NCCLSHIM_IPC_SLOTS": "2", "NCCLSHIM_IPC_STEP_BYTES": "131072"})
    if hosts:
        env["NCCLSHIM_HOSTNAME"] = hosts[r]
    env.update(extra)
    uid = "--uid-out=" if r == 0 else "--uid-in="
    title = TITLES[roles[r]]
    args = [title or sys.executable, CLIENT, NCCL, "--rank=%d" % r, "--nranks=%d" % len(roles), uid + d + "/uid",
            "--cuda=" + CUDA, "--refit=" + ",".join(map(str, REFIT))]
    return subprocess.Popen(args, executable=sys.executable, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def group(name, roles, hosts=None, extra=None):
    """One weight-update group: roles is one letter per rank (T training, I inference,
    U unknown), hosts one host name per rank (None: all on this host).  Rank 0 makes
    the ID; the others start once it has written it.  Returns (dir, [(rc, out, err)])."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    deadline = Deadline(BOUND)
    procs = [start(d, 0, roles, hosts, extra or {})]
    head = read_until(procs[0], b"UID ", deadline)  # rank 0 says when the ID file is complete
    if b"UID " in head:
        procs += [start(d, r, roles, hosts, extra or {}) for r in range(1, len(roles))]
    res = collect_bounded(procs, head, deadline)
    if len(res) < len(roles):
        res += [(None, "", "never started: rank 0 wrote no ID")] * (len(roles) - len(res))
    return d, res


def check_group(name, roles, hosts, want, reason, extra=None, purpose="weight-update"):
    d, res = group(name, roles, hosts, extra)
    n = len(roles)
    bad = [(r, rc, err[-600:]) for r, (rc, out, err) in enumerate(res) if rc != 0 or "CHECK fail" in out]
    ok(not bad, "%s: all %d processes exit 0, every CHECK passes" % (name, n), bad)
    comms = sorted((c for c in records(d + "/rec") if c["type"] == "comm"), key=lambda c: c["rank"])
    acts = [(c["rank"], c["purpose"], c["action"]) for c in comms]
    ok(acts == [(r, purpose, want) for r in range(n)] and all(reason in c["action_reason"] for c in comms) and
       len({c["decision"]["id"] for c in comms}) == 1,
       "%s: one decision, %s on all %d ranks, the reason says '%s'" % (name, want, n, reason),
       [acts, comms[0]["action_reason"] if comms else "no comm record"])
    with open(d + "/fake.log") if os.path.exists(d + "/fake.log") else open(os.devnull) as fh:
        log = fh.read().splitlines()
    inits = [l for l in log if "ncclCommInit" in l]
    # the warm-up's 2 small broadcasts, then the refit's, on every rank
    bcasts = len([l for l in log if " ncclBroadcast " in l])
    got = {r: [l.split()[3] for l in out.splitlines() if l.startswith("BYTES ")] for r, (_, out, _) in enumerate(res)}
    if want == "ipc":
        ok(all(got[r] == ["ok"] * len(REFIT) for r in range(n)) and not inits,
           "%s: NCCL never initialised; every rank, receivers and root, holds all %d buffers of the refit, "
           "every byte" % (name, len(REFIT)), [got, inits[:2]])
    elif want == "socket":
        ok(len(inits) == n and all("netName=Socket" in l for l in inits) and bcasts == n * (2 + len(REFIT)),
           "%s: NCCL saw %d inits, each with netName=Socket, and every rank's broadcasts" % (name, n),
           [bcasts] + inits)
    else:
        ok(len(inits) == n and not [l for l in inits if "netName=Socket" in l] and bcasts == n * (2 + len(REFIT)),
           "%s: NCCL saw %d inits, untouched, and every rank's broadcasts" % (name, n), [bcasts] + inits)
    return got


A, B, C = "node-a", "node-b", "node-c"
# One host: the ipc chain, every inference rank gets the whole broadcast.
check_group("1+1-one-host", "TI", None, "ipc", "1 inference rank (rank 1), all 2 ranks on one host: ipc")
check_group("2+2-one-host", "TTII", None, "ipc", "2 inference ranks (ranks 2-3), all 4 ranks on one host: ipc")
check_group("1+7-one-host", "TIIIIIII", None, "ipc", "7 inference ranks (ranks 1-7), all 8 ranks on one host: ipc")
# Several hosts: NCCL's Socket network.
check_group("2+1-two-hosts", "TTI", [A, A, B], "socket", "1 inference rank (rank 2), ranks on 2 hosts, fabric not judged (")
check_group("2+2-two-hosts", "TTII", [A, A, B, B], "socket", "2 inference ranks (ranks 2-3), ranks on 2 hosts, fabric not judged (")
check_group("1+7-three-hosts", "TIIIIIII", [A, B, B, B, B, C, C, C], "socket",
            "7 inference ranks (ranks 1-7), ranks on 3 hosts, fabric not judged (")
# An engine that spans the trainer's host and another: several hosts, socket.
check_group("2+2-split-engine", "TTII", [A, A, A, B], "socket", "ranks on 2 hosts, fabric not judged (")
# Ranks of unknown role go with the others, and get the bytes too.
check_group("2+2+1unknown-one-host", "TTIIU", None, "ipc",
            "2 inference ranks (ranks 2-3), rank 4 of unknown role, going with the others, all 5 ranks on one host: ipc")
check_group("1+2+1unknown-two-hosts", "TIUI", [A, B, B, B], "socket",
            "2 inference ranks (ranks 1,3), rank 2 of unknown role, going with the others, ranks on 2 hosts, fabric not judged (")
# A trainer the shim cannot tell (unknown role): the engine's ranks and the call site decide.
check_group("unknown-trainer+2-one-host", "UII", None, "ipc",
            "2 inference ranks (ranks 1-2), rank 0 of unknown role, going with the others, all 3 ranks on one host: ipc")
# No inference rank at all: a call-site match alone is not enough; and an engine's own group.
check_group("unknown-only", "UU", None, "passthrough", "no inference rank: auto redirects only a group of inference")
# (The replay's frames are a weight-update call site on every rank: a real engine's own
# groups have none and are inference, tests/t/37-stacks.t.)
check_group("engine-only", "II", None, "passthrough", "every rank runs inference (2 ranks), an engine's own group",
            purpose="weight-update")
# The byte check has teeth: passed through, the fake NCCL moves nothing between processes.
got = check_group("2+2-passthrough", "TTII", None, "passthrough", "NCCLSHIM_WEIGHT_UPDATE=passthrough",
                  {"NCCLSHIM_WEIGHT_UPDATE": "passthrough"})
ok(got[0] == ["ok"] * len(REFIT) and all(got[r] and "ok" not in got[r] for r in (1, 2, 3)),
   "control: without the ipc chain the receivers' bytes are wrong (only the root's are its own)", got)

done(TMP)
