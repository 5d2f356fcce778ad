#!/usr/bin/env python3
# Host identity the way NCCL sees it (issue 34): NCCL_HOSTID if set (environment, else
# NCCL's config file), else the whole host name and the kernel's boot id.  Pods of one
# node (one boot id, their own host names) are two hosts to NCCL, and so to the shim:
# NCCLSHIM_WEIGHT_UPDATE=auto takes the cross-host action (socket), not ipc, which needs
# one /dev/shm.  NCCL_HOSTID makes them one host again, for NCCL and the shim alike.
# Every load record says what its identity is made of; the root's decision record says
# which identity each rank had.  And record files are never shared: a taken name costs
# the next one, records whole.  Ranks are vLLM-style ctypes clients
# (tests/clients/pynccl_like.py) on the fake NCCL and the fake libcuda, each bounded.
import glob, json, os, select, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import (BIN, CUDA, PRELOAD, ROOT, Deadline, collect_bounded, done, env_time, is_, ok,  # noqa: E402
                 read_until, records, scaled, skip_emulated)

skip_emulated("its ranks are Python ctypes clients, and the host's python3 cannot load the aarch64 "
              "library and fakes")

CLIENT = os.path.join(ROOT, "tests", "clients", "pynccl_like.py")
NCCL = os.path.join(ROOT, "tests", "fake", "a", "libnccl.so.2")
INSPECT = os.path.join(ROOT, "tools", "ncclshim-inspect")
BOUND = 60  # seconds (a quiet machine's, scaled) for one group, all its processes together
TMP = tempfile.mkdtemp(prefix="ncclshim-hostid.")
REFIT = [1, 200003]
TITLES = ["ray::DTensorPolicyWorker", "ray::VllmGenerationWorker"]  # a trainer, an inference rank
with open("/proc/sys/kernel/random/boot_id") as fh:
    BOOT = fh.read().split()[0]


def can_unshare():
    try:
        return subprocess.run(["unshare", "--uts", "hostname", "x"], capture_output=True,
                              timeout=scaled(10)).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start(d, r, env_r, uts):
    """Rank r (0: the trainer, which makes the ID) with env_r added; in a UTS namespace of
    its own named `uts` (a pod's own host name, as Kubernetes gives it) if set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_", "NCCL_"))}
    env.update({"LD_PRELOAD": PRELOAD, "NCCLSHIM_LOG_DIR": d + "/rec", "FAKE_NCCL_LOG": d + "/fake.log",
                "FAKE_CUDA_DEVICE": str(r), "FAKE_CUDA_WAIT_TIMEOUT_MS": env_time(20000),
                "NCCLSHIM_WEIGHT_UPDATE": "auto",
                "NCCLSHIM_IPC_CHUNK_BYTES": "65536", "NCCLSHIM_IPC_SLOTS": "2", "HOME": d})
    env.update(env_r)
    uid = "--uid-out=" if r == 0 else "--uid-in="
    args = [sys.executable, CLIENT, NCCL, "--rank=%d" % r, "--nranks=2", uid + d + "/uid", "--cuda=" + CUDA,
            "--refit=" + ",".join(map(str, REFIT))]
    if uts:
        # hostname is set in the new namespace, then the client runs titled as Ray titles it
        args = ["unshare", "--uts", "bash", "-c", 'hostname "$1" || exit 97; shift; exec -a "$T" "$@"', "x",
                uts] + args
        env["T"] = TITLES[r]
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)
    args[0] = TITLES[r]
    return subprocess.Popen(args, executable=sys.executable, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def group(name, envs, uts=(None, None)):
    """A trainer and an inference rank; rank 1 starts once rank 0 wrote the ID.
    Returns (dir, [(rc, out, err)])."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    deadline = Deadline(BOUND)
    procs = [start(d, 0, envs[0], uts[0])]
    head = read_until(procs[0], b"UID ", deadline)  # rank 0 says when the ID file is complete
    if b"UID " in head:
        procs.append(start(d, 1, envs[1], uts[1]))
    res = collect_bounded(procs, head, deadline)
    while len(res) < 2:
        res.append((None, "", "never started: rank 0 wrote no ID"))
    return d, res


def check(name, envs, want, hosts, uts=(None, None)):
    """Runs the group; checks every process passed, both ranks got `want` from one decision,
    the root counted `hosts` hosts.  Returns (loads by rank, the decision record)."""
    d, res = group(name, envs, uts)
    bad = [(r, rc, err[-600:]) for r, (rc, out, err) in enumerate(res) if rc != 0 or "CHECK fail" in out]
    ok(not bad, "%s: both processes exit 0, every CHECK passes" % name, bad)
    recs = records(d + "/rec")
    comms = sorted((c for c in recs if c["type"] == "comm"), key=lambda c: c["rank"])
    decs = [x for x in recs if x["type"] == "decision" and x.get("stage") == "final"] or \
        [x for x in recs if x["type"] == "decision"]
    acts = [c["action"] for c in comms]
    ok(acts == [want, want] and decs and decs[-1]["hosts"] == hosts,
       "%s: %s on both ranks, the root counted %d host%s" % (name, want, hosts, "s" if hosts > 1 else ""),
       [acts, comms[0]["action_reason"] if comms else "no comm", decs[-1] if decs else "no decision"])
    got = [[l.split()[3] for l in out.splitlines() if l.startswith("BYTES ")] for _, out, _ in res]
    if want == "ipc":
        ok(all(g == ["ok"] * len(REFIT) for g in got), "%s: the inference rank holds the refit, every byte" % name,
           got)
    pids = {c["rank"]: c["pid"] for c in comms}
    loads = {r: next((x for x in recs if x["type"] == "load" and x["pid"] == pid), {}) for r, pid in pids.items()}
    return loads, decs[-1] if decs else {}


# --- the identity from its parts (tests/unit/test_host_id.c), relayed --------------------------
u = subprocess.run([os.path.join(BIN, "test_host_id")], capture_output=True, text=True, timeout=scaled(60))
unit = [l for l in u.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
for l in unit:
    ok(l.startswith("ok "), "unit: " + l.split(" - ", 1)[-1])
ok(u.returncode == 0 and unit, "unit: test_host_id ran whole (%d checks)" % len(unit), u.stderr[-400:])

# --- pods: one boot id, their own host names: two hosts, as NCCL counts them -------------------
loads, dec = check("pods", [{"NCCLSHIM_HOSTNAME": "pod-a"}, {"NCCLSHIM_HOSTNAME": "pod-b"}], "socket", 2)
ids = [loads.get(r, {}).get("host_identity", {}) for r in (0, 1)]
is_([i.get("boot_id") for i in ids], [BOOT, BOOT], "pods: both load records show the one boot id they share")
is_([(i.get("hostname"), i.get("id"), i.get("nccl_hostid")) for i in ids],
    [("pod-a", "pod-a" + BOOT, None), ("pod-b", "pod-b" + BOOT, None)],
    "pods: and their host names, which make two identities (host name + boot id, NCCL's), no NCCL_HOSTID")
is_([(x.get("rank"), x.get("host_id")) for x in dec.get("ranks", [])], [(0, "pod-a" + BOOT), (1, "pod-b" + BOOT)],
    "pods: the root's decision record names each rank's host identity")

if can_unshare():
    # Real UTS namespaces (what a pod is to gethostname), with a domain: NCCL hashes the whole
    # name; the records name the host up to the '.', as NCCL's log prefix does.
    loads, dec = check("uts", [{}, {}], "socket", 2, uts=("pod-a.ns.svc", "pod-b.ns.svc"))
    is_([(loads.get(r, {}).get("host"), loads.get(r, {}).get("host_identity", {}).get("id")) for r in (0, 1)],
        [("pod-a", "pod-a.ns.svc" + BOOT), ("pod-b", "pod-b.ns.svc" + BOOT)],
        "uts: two pods' own host names (gethostname, whole) make two hosts; records show the short name")
    loads, dec = check("uts-same-short", [{}, {}], "socket", 2, uts=("pod.a", "pod.b"))
    ok(True, "uts-same-short: names equal up to the '.' are still two hosts (NCCL hashes the whole name)")
else:
    ok(True, "# SKIP UTS namespaces: unshare --uts needs root (NCCLSHIM_HOSTNAME cases cover the logic)")

# --- NCCL_HOSTID: NCCL's own override, honoured as NCCL honours it ------------------------------
loads, dec = check("hostid-env", [{"NCCLSHIM_HOSTNAME": "pod-a", "NCCL_HOSTID": "node-1"},
                                  {"NCCLSHIM_HOSTNAME": "pod-b", "NCCL_HOSTID": "node-1"}], "ipc", 1)
is_([(loads.get(r, {}).get("host_identity", {}).get(k)) for r in (0, 1) for k in ("id", "nccl_hostid",
                                                                                     "nccl_hostid_from")],
    ["node-1", "node-1", "environment"] * 2,
    "hostid-env: NCCL_HOSTID alone is the identity (host name and boot id ignored, as NCCL does): one host, ipc")

loads, dec = check("hostid-differs", [{"NCCLSHIM_HOSTNAME": "pod", "NCCL_HOSTID": "node-1"},
                                      {"NCCLSHIM_HOSTNAME": "pod", "NCCL_HOSTID": "node-2"}], "socket", 2)
ok(True, "hostid-differs: one host name, two NCCL_HOSTIDs: two hosts")

conf = os.path.join(TMP, "nccl.conf")
with open(conf, "w") as fh:
    fh.write("#NCCL_HOSTID=commented\nNCCL_DEBUG=WARN\nNCCL_HOSTID=node-9\nNCCL_HOSTID=later\n")
loads, dec = check("hostid-conf", [{"NCCLSHIM_HOSTNAME": "pod-a", "NCCL_HOSTID": "node-9"},
                                   {"NCCLSHIM_HOSTNAME": "pod-b", "NCCL_CONF_FILE": conf}], "ipc", 1)
is_([loads.get(1, {}).get("host_identity", {}).get(k) for k in ("id", "nccl_hostid_from")], ["node-9", conf],
    "hostid-conf: NCCL_HOSTID from NCCL_CONF_FILE (first definition, comments skipped) matches the environment's")

loads, dec = check("hostid-empty", [{"NCCLSHIM_HOSTNAME": "pod-a", "NCCL_HOSTID": ""},
                                    {"NCCLSHIM_HOSTNAME": "pod-b", "NCCL_HOSTID": ""}], "ipc", 1)
is_([loads.get(r, {}).get("host_identity", {}).get("nccl_hostid") for r in (0, 1)], ["", ""],
    "hostid-empty: an empty NCCL_HOSTID is one identity for NCCL (it hashes the empty string), and for the shim")

# NCCL cuts NCCL_HOSTID at 1023 bytes: values that differ only after that are one host; an
# identity longer than the shim's 127 bytes travels as its start and a hash of the whole.
long_a, long_b = "h" * 1023 + "a", "h" * 1023 + "b"
loads, dec = check("hostid-long", [{"NCCLSHIM_HOSTNAME": "pod-a", "NCCL_HOSTID": long_a},
                                   {"NCCLSHIM_HOSTNAME": "pod-b", "NCCL_HOSTID": long_b}], "ipc", 1)
hid = loads.get(0, {}).get("host_identity", {}).get("id", "")
ok(hid.startswith("h" * 100 + "#") and len(hid) == 117 and hid == loads.get(1, {}).get("host_identity", {}).get("id"),
   "hostid-long: NCCL_HOSTID cut at 1023 bytes as NCCL cuts it, sent as 100 bytes and a hash", hid)
loads, dec = check("hostid-long-differs", [{"NCCLSHIM_HOSTNAME": "pod", "NCCL_HOSTID": "h" * 1000 + "a"},
                                           {"NCCLSHIM_HOSTNAME": "pod", "NCCL_HOSTID": "h" * 1000 + "b"}], "socket", 2)
ok(True, "hostid-long-differs: long values that differ within 1023 bytes are two hosts (the hash tells them apart)")

# --- record files: never shared -------------------------------------------------------------
# Every numbered name of this process's file is taken (as by processes of the same host name,
# boot, start tick and pid in other PID namespaces): the records go to a random name, whole.
rd = os.path.join(TMP, "collide")
os.makedirs(rd)
plant = ('N="ncclshim.coll.$$.$(head -c 8 /proc/sys/kernel/random/boot_id).$(sed "s/.*) //" /proc/$$/stat | '
         'cut -d" " -f20)"; echo "$N" > "$1/stem"; echo other > "$1/$N.jsonl"; '
         'for k in 1 2 3 4 5 6 7; do echo other > "$1/$N.$k.jsonl"; done; exec "$2" linked basic')
env = {k: v for k, v in os.environ.items() if not k.startswith("NCCLSHIM_")}
env.update({"LD_PRELOAD": PRELOAD, "NCCLSHIM_LOG_DIR": rd, "NCCLSHIM_HOSTNAME": "coll"})
p = subprocess.run(["timeout", "-k", "5", "30", "bash", "-c", plant, "x", rd, os.path.join(BIN, "client_linked")],
                   env=env, capture_output=True, text=True)
is_(p.returncode, 0, "collide: the application runs on")
stem = open(os.path.join(rd, "stem")).read().strip()
planted = sorted(glob.glob(os.path.join(rd, stem + ".jsonl")) + glob.glob(os.path.join(rd, stem + ".[1-7].jsonl")))
ok(len(planted) == 8 and all(open(f).read() == "other\n" for f in planted),
   "collide: the 8 files already there are untouched (no records appended to another's file)", planted)
mine = glob.glob(os.path.join(rd, stem + ".r*.jsonl"))
types = [json.loads(l)["type"] for l in open(mine[0])] if len(mine) == 1 else []
ok(len(mine) == 1 and types[:1] == ["load"] and "exit" in types,
   "collide: the records go to a random name beside them, from the load record to the exit", [mine, types])
lines = [l for l in p.stderr.splitlines() if l.startswith("ncclshim: ")]
ok(len(lines) == 1 and "is taken (a file already); records go to %s" % (mine[0] if mine else "?") in lines[0],
   "collide: one line says the name was taken and where the records went", lines)

# --- inspect reads old-named and new-named files side by side -----------------------------------
mixed = os.path.join(TMP, "mixed")
os.makedirs(mixed)
old = sorted(glob.glob(os.path.join(ROOT, "tests", "inspect", "fixtures", "healthy", "ncclshim.*.jsonl")))
for f in old:
    shutil.copy(f, mixed)
shutil.copy(mine[0] if mine else os.devnull, os.path.join(mixed, os.path.basename(mine[0]) if mine else "none"))
for f in glob.glob(os.path.join(TMP, "pods", "rec", "*.jsonl")):
    shutil.copy(f, mixed)
q = subprocess.run([INSPECT, "--json", mixed], capture_output=True, text=True, timeout=scaled(60))
try:
    procs = json.loads(q.stdout).get("processes", [])
except ValueError:
    procs = []
want = len(old) + 1 + len(glob.glob(os.path.join(TMP, "pods", "rec", "*.jsonl")))
ok(q.returncode in (0, 1) and len(procs) >= want and old,
   "inspect: a directory of old names (ncclshim.<host>.<pid>.jsonl) and new ones reads every process's file",
   [q.returncode, len(procs), want, q.stderr[-400:]])

# Two containers of one host name with the same pid in different PID namespaces: the tool joins
# records by host and pid, so it says when two load records there are two processes.
twin = os.path.join(TMP, "twin")
os.makedirs(twin)
src = mine[0] if mine else os.devnull
with open(src) as fh:
    lines = fh.read().splitlines()
shutil.copy(src, twin)
with open(os.path.join(twin, os.path.basename(src).replace(".jsonl", ".1.jsonl")), "w") as fh:
    for l in lines:
        r = json.loads(l)
        if r["type"] == "load":
            r["start_ticks"] += 1
        fh.write(json.dumps(r) + "\n")
q = subprocess.run([INSPECT, "--check", twin], capture_output=True, text=True, timeout=scaled(60))
ok(q.returncode == 1 and "two processes recorded as host coll pid" in q.stdout + q.stderr,
   "inspect --check: two load records of one host and pid, started apart, are named as two processes",
   [q.returncode, q.stderr[-800:]])
q = subprocess.run([INSPECT, "--check", os.path.dirname(src)], capture_output=True, text=True, timeout=scaled(60))
ok("two processes recorded" not in q.stdout + q.stderr, "inspect --check: one process's single file is not",
   q.stderr[-400:])

done(TMP)
