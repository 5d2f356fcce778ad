#!/usr/bin/env python3
"""The queue-pair starvation scenario, on one host with 3 or 4 GPUs (run by `make demo`).

NeMo-RL creates its weight-update communicator (trainer + vLLM) before the
training communicator.  On an EFA instance with few NICs the first takes the
NIC's queue pairs and the training communicator, created later, falls back to
NCCL's Socket network.  Here the EFA NIC is EFASim (build/libnccl-net-efasim.so,
NCCL_NET_PLUGIN=efasim: a NET plugin over shared memory with a host-wide
queue-pair budget), NCCL's intra-host paths are off (NCCL_P2P_DISABLE=1,
NCCL_SHM_DISABLE=1, NCCL_IB_DISABLE=1) so that every communicator crosses the
"fabric" as between hosts, and each rank has its own GPU:

    trainer rank 0 (GPU 0), trainer rank 1 (GPU 1): torch.distributed, NCCL backend
    inference (GPU 2): a ctypes NCCL client written like vLLM's pynccl
    --inference-ranks 2 (4 GPUs): an inference engine of 2 ranks (tensor parallelism 2,
    GPUs 2 and 3, processes inference0 and inference1), each rank receiving every buffer

Six runs, side by side:
    noshim   without the shim: the weight-update communicator takes the budget,
             the training communicator lands on Socket
    roomy    without the shim, a budget with room for both (256 QPs): the refit's
             rate on EFASim with the training communicator on it too, the
             baseline of the shim's cross-host runs (on EFASim, one host's shared
             memory, the refit measured 0.83x noshim's with the training
             communicator present, idle: docs/benchmarks.md)
    ipc      the shim, NCCLSHIM_WEIGHT_UPDATE=auto: every rank on the trainer's
             host, so the weight update goes along the shim's chain over CUDA IPC
             and the training communicator gets EFASim
    ample, frugal, socket
             the same, with the inference processes presented as another host
             (NCCLSHIM_HOSTNAME=node-b on them only: a test-only override of the
             host identity), so that auto weighs the fabric each host presents (a
             fake sysfs tree per run, NCCLSHIM_SYSFS_ROOT, test-only; and
             NCCLSHIM_FABRIC_BUDGET): ample (8 EFA devices for 2 GPUs): the
             weight update passes through; frugal (one IB device, a budget where
             one channel fits beside training): one channel; socket (a budget
             where even that does not fit): Socket.  Training gets EFASim in all three.

Before the runs, a calibration run (no shim, a budget that cannot run out) measures
the QPs the weight-update communicator holds, and a second (the shim,
NCCLSHIM_WEIGHT_UPDATE=frugal) what it holds at one channel; noshim and ipc get
exactly the first as budget; frugal gets training's QPs, one channel's and half
the difference to the default's, socket training's and half one channel's,
each stated to the shim as NCCLSHIM_FABRIC_BUDGET (the share of the spare QPs
of the host's ranks: the "hosts" share one EFASim NIC); ample gets 256,
so nothing is left for a later communicator (EFASim refuses a communicator's init
when fewer than EFASIM_QPS_PER_CONN QPs are left).  NCCL_RUNTIME_CONNECT=0 makes
NCCL connect everything at init, so the figure does not depend on which
collectives ran.  --qp-budget N skips the calibration.

    python3 tools/scenario/scenario.py --outdir DIR [--runs noshim,roomy,ipc,ample,frugal,socket] [--inference-ranks 1|2]
        [--refit-gib 3] [--buffer-mib 1024] [--refits 3] [--allreduce-mib 256]
        [--iters 5] [--qp-budget N] [--timeout 420] [--python PY]

Writes DIR/scenario.json (everything) and, per run, DIR/<run>/: records/ (shim
records and NCCL logs), rank*.out|err, inspect.json, inspect.txt, check.txt,
efasim-stat.{before,after}.json.  Exit status 0 when every run finished and came
out as expected (see `expect` in scenario.json), 1 otherwise.  This launcher
does not import torch (the workers do).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, "build")
SHIM = os.path.join(BUILD, "libncclshim.so")
PLUGIN = os.path.join(BUILD, "libnccl-net-efasim.so")
STAT = os.path.join(BUILD, "efasim-stat")
INSPECT = os.path.join(ROOT, "tools", "ncclshim-inspect")
WORKER = os.path.join(HERE, "worker.py")

TRAINER_TITLE = "ray::DTensorPolicyWorker"
INFERENCE_TITLE = "ray::VllmGenerationWorker"

RUNS = {
    "noshim": "no shim",
    "roomy": "no shim, room for both",
    "ipc": "shim auto, same host",
    "ample": "auto, other host, ample fabric",
    "frugal": "auto, other host, one channel fits",
    "socket": "auto, other host, scarce fabric",
}
# The runs where the inference processes count as another host (NCCLSHIM_HOSTNAME=node-b), each
# with the fabric it presents to the shim (a fake sysfs tree: NCCLSHIM_SYSFS_ROOT, test-only)
# and how EFASim charges (tools/fabric/README.md, "What a communicator costs").
FABRIC = {
    # 8 EFA devices for 2 GPUs on each host (a p5's 4 a GPU), no budget stated: ample by the
    # devices alone; EFASim charges as aws-ofi-nccl 1.18+ does, one EFA NIC's 256 QPs.
    "ample": {"kind": "efa", "devices": 8, "charge": "efa"},
    # one InfiniBand device a host, QPs charged per connection as NCCL's IB transport does, and a
    # budget stated (NCCLSHIM_FABRIC_BUDGET) where one channel fits beside training, not the default
    "frugal": {"kind": "ib", "devices": 1, "charge": "ib"},
    # the same with a budget where not even one channel fits beside training
    "socket": {"kind": "ib", "devices": 1, "charge": "ib"},
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def tail(path, n=25):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace").splitlines()[-n:]
    except OSError as e:
        return ["(cannot read %s: %s)" % (path, e)]


class ScenarioError(Exception):
    pass


LIVE = []  # process groups of running ranks: killed if the launcher is stopped


def stop_all(signum, frame):
    for p in LIVE:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    log("scenario: stopped by signal %d; killed %d rank processes" % (signum, len(LIVE)))
    sys.exit(128 + signum)


# ---------------------------------------------------------------- efasim-stat
def stat(env, *args, timeout=30):
    """Runs efasim-stat with the run's EFASIM_* environment; (rc, stdout, stderr)."""
    try:
        p = subprocess.run([STAT] + list(args), env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, "", str(e)


def fig(d, *names):
    """The first of `names` found in the efasim-stat JSON (top level first, then nested)."""
    if not isinstance(d, dict):
        return None
    for n in names:
        if n in d and not isinstance(d[n], (dict, list)):
            return d[n]
    for v in d.values():
        if isinstance(v, dict):
            r = fig(v, *names)
            if r is not None:
                return r
    return None


def stat_figures(text):
    try:
        d = json.loads(text)
    except (ValueError, TypeError):
        return {"raw": text}
    return {
        "budget": fig(d, "budget", "qp_budget"),
        "qps_per_conn": fig(d, "qps_per_conn", "qps_per_connection"),
        "in_use": fig(d, "in_use", "qps_in_use"),
        "peak": fig(d, "peak", "qps_peak", "peak_in_use"),
        "connections": fig(d, "conns", "connections"),
        "refused_connections": fig(d, "conns_refused", "connections_refused", "refusals"),
        "inits": fig(d, "inits"),
        "refused_inits": fig(d, "inits_refused", "refused_inits"),
        "raw": d,
    }


# ---------------------------------------------------------------- one run
def base_env(a, records, state, budget):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("NCCLSHIM_", "NCCL_", "EFASIM_")) and k not in ("EFASIM_QPS_PER_CONN", "NCCL_LIB"):
            del env[k]
    env.pop("LD_PRELOAD", None)
    env.update({
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NCCL_DEBUG": "INFO",
        # INIT has what inspect reads (Using network, Init START/COMPLETE, Channel ... via NET/,
        # NET/Plugin, Failed to initialize NET plugin); NET and ENV for people reading the logs
        "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
        "NCCL_DEBUG_FILE": os.path.join(records, "nccl.%h.%p.log"),
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1",
        "NCCL_IB_DISABLE": "1",        # no real IB/RoCE NIC may take EFASim's place
        "NCCL_NET_PLUGIN": "efasim",
        "NCCL_RUNTIME_CONNECT": "0",   # every connection at init: the budget is spent when the next comm starts
        "LD_LIBRARY_PATH": BUILD + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else ""),
        "EFASIM_STATE": state,
        "EFASIM_QP_BUDGET": str(budget),
    })
    return env


def rank_specs(ninf):
    """(name, role, trainer or engine rank, weight-update rank, GPU, title) of every rank: 2
    trainer ranks, then the inference engine's `ninf` ranks (one process, GPU and
    weight-update rank each, as vLLM's tensor-parallel workers join NeMo-RL's group)."""
    specs = [("trainer0", "trainer", 0, 0, 0, TRAINER_TITLE),
             ("trainer1", "trainer", 1, 1, 1, TRAINER_TITLE)]
    for k in range(ninf):
        specs.append(("inference" if ninf == 1 else "inference%d" % k, "inference", k, 2 + k, 2 + k, INFERENCE_TITLE))
    return specs


def launch(a, name, rundir, env_of, worker_args, timeout):
    """Starts every rank; waits (bounded); returns {rank name: result}; raises ScenarioError
    with the failing step and the tails of the logs."""
    procs = []
    specs = rank_specs(a.inference_ranks)
    for rname, role, rank, grank, gpu, title in specs:
        env = env_of(rname)
        cmd = [a.python, WORKER, "--role", role, "--rank", str(rank), "--group-rank", str(grank), "--gpu", str(gpu),
               "--world", str(len(specs)), "--dir", rundir, "--title", title, "--wait", str(timeout)] + worker_args
        out = open(os.path.join(rundir, rname + ".out"), "wb")
        err = open(os.path.join(rundir, rname + ".err"), "wb")
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        procs.append((rname, p, out, err))
        LIVE.append(p)
    deadline = time.monotonic() + timeout
    first_fail = None
    problems = []
    while True:
        codes = [p.poll() for _, p, _, _ in procs]
        if all(c is not None for c in codes):
            break
        now = time.monotonic()
        if first_fail is None and any(c not in (None, 0) for c in codes):
            first_fail = now  # its peers wait in NCCL for it: 20 s, then kill them
        if now > deadline or (first_fail is not None and now - first_fail > 20):
            why = "timed out after %.0f s" % timeout if now > deadline else "killed after a peer failed"
            for (rname, p, _, _), c in zip(procs, codes):
                if c is None:
                    problems.append("%s: %s" % (rname, why))
                    try:
                        os.killpg(p.pid, signal.SIGTERM)
                    except OSError:
                        pass
            t = time.monotonic()
            while time.monotonic() - t < 5 and any(p.poll() is None for _, p, _, _ in procs):
                time.sleep(0.1)
            for _, p, _, _ in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    p.wait()
            break
        time.sleep(0.1)
    del LIVE[:]
    results = {}
    for rname, p, out, err in procs:
        out.close()
        err.close()
        res = None
        for line in tail(os.path.join(rundir, rname + ".out"), 1000):
            if line.startswith("RESULT "):
                try:
                    res = json.loads(line[7:])
                except ValueError:
                    pass
        results[rname] = res
        if p.returncode != 0 and not any(x.startswith(rname + ":") for x in problems):
            problems.append("%s: exited with status %s" % (rname, p.returncode))
        elif res is None and p.returncode == 0:
            problems.append("%s: printed no RESULT line" % rname)
    if problems:
        lines = ["run %s failed:" % name] + ["  " + x for x in problems]
        for rname, p, _, _ in procs:
            steps = [l for l in tail(os.path.join(rundir, rname + ".err"), 5000) if l.startswith("STEP ")]
            lines.append("--- %s (pid %d, status %s): last step: %s" % (
                rname, p.pid, p.returncode, steps[-1].split(" ", 2)[2] if steps else "(none: it did not start)"))
            lines += ["    " + l for l in tail(os.path.join(rundir, rname + ".err"), 25)]
            records = os.path.join(rundir, "records")
            for f in sorted(os.listdir(records)) if os.path.isdir(records) else []:
                if f.startswith("nccl.") and f.endswith(".%d.log" % p.pid):
                    lines.append("    --- tail of %s" % f)
                    lines += ["    " + l for l in tail(os.path.join(records, f), 15)]
        raise ScenarioError("\n".join(lines))
    return results


def fresh(d):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "records"))


def measure(a, name, frugal):
    """The weight-update communicator alone, then the training one, with a budget that
    cannot run out: the QPs each holds (efasim-stat's in_use, read by trainer rank 0).
    frugal: the weight-update communicator held to one channel by the shim."""
    rundir = os.path.join(a.outdir, name)
    fresh(rundir)
    records = os.path.join(rundir, "records")
    state = "/efasim-scenario-%d-%s" % (os.getpid(), name)
    env = base_env(a, records, state, 1 << 20)
    rc, out, err = stat(env, "--reset")
    if rc != 0:
        raise ScenarioError("efasim-stat --reset failed (%s): %s%s" % (rc, out, err))

    def env_of(rname):
        if not frugal:
            return env
        return dict(env, LD_PRELOAD=SHIM, NCCLSHIM_LOG_DIR=records, NCCLSHIM_WEIGHT_UPDATE="frugal",
                    **({"NCCLSHIM_HOSTNAME": "node-b"} if rname.startswith("inference") else {}))
    log("== calibration: the QPs of the weight-update communicator%s (budget %d, cannot run out)"
        % (" at one channel (the shim, NCCLSHIM_WEIGHT_UPDATE=frugal)" if frugal else "", 1 << 20))
    res = launch(a, name, rundir, env_of,
                 ["--refits", "0", "--allreduce-bytes", str(1 << 20), "--iters", "1",
                  "--stat-cmd", "\x1f".join([STAT, "--json"])], a.timeout)
    t0 = res["trainer0"]
    wu = stat_figures(t0.get("stat_after_wu", ""))
    tr = stat_figures(t0.get("stat_after_train", ""))
    try:
        os.unlink("/dev/shm" + state)
    except OSError:
        pass
    if not isinstance(wu.get("in_use"), int) or not isinstance(tr.get("in_use"), int):
        raise ScenarioError("calibration: efasim-stat --json gave no 'in_use' figure: %r / %r" % (wu, tr))
    return wu, tr


def calibrate(a, want_frugal):
    wu, tr = measure(a, "calibrate", False)
    qpc = wu.get("qps_per_conn") if isinstance(wu.get("qps_per_conn"), int) else \
        int(os.environ.get("EFASIM_QPS_PER_CONN", "2"))
    w, t = wu["in_use"], tr["in_use"] - wu["in_use"]
    budget = w
    note = ("budget %d = the weight-update communicator's QPs: a later communicator finds fewer than %d left"
            % (w, qpc))
    if t > w:
        if t <= w + qpc - 1:
            budget = t
            note = "budget %d: the training communicator needs %d, the weight-update one %d (cost %d per connection)" \
                   % (t, t, w, qpc)
        else:
            note = ("WARNING: the training communicator needs %d QPs, more than the weight-update one (%d): with "
                    "budget %d it cannot get EFASim even with the shim" % (t, w, w))
            log(note)
    cal = {"wu_qps": w, "training_qps": t, "qps_per_conn": qpc, "budget": budget, "note": note}
    log("   weight-update communicator: %d QPs, training communicator: %d QPs -> %s" % (w, t, note))
    if want_frugal:
        fwu, _ = measure(a, "calibrate-frugal", True)
        cal["wu_frugal_qps"] = fwu["in_use"]
        log("   weight-update communicator at one channel: %d QPs" % fwu["in_use"])
    return cal


def fabric_budgets(cal, run, world):
    """(EFASim budget, NCCLSHIM_FABRIC_BUDGET of the trainer's host, of node-b) for a run of FABRIC."""
    if run == "ample":
        return 256, None, None
    w, t, wf = cal["wu_qps"], cal["training_qps"], cal.get("wu_frugal_qps")
    if not isinstance(wf, int) or wf <= 0:
        raise ScenarioError("run %s needs the one-channel calibration (calibrate-frugal)" % run)
    # frugal: one channel and training fit, with half the default's extra to spare; socket: not even that
    budget = t + wf + max(0, w - wf) // 2 if run == "frugal" else t + wf // 2
    spare = budget - t
    # The user's statement per host: its share of the spare QPs (the two "hosts" share one EFASim
    # NIC), in proportion to what its ranks take at one channel by the shim's documented estimate
    # (policy/fabric.c: 6 connection ends a rank a channel, plus PAT's 2 log2(N) for a host's only rank).
    def one_channel(r):
        return r * (6 + (2 * (world - 1).bit_length() if r == 1 else 0))
    ea, eb = one_channel(2), one_channel(world - 2)
    return budget, max(1, spare * ea // (ea + eb)), max(1, spare * eb // (ea + eb))


def make_sysfs(root, kind, devices, gpus=2):
    """A fake sysfs tree, as the kernel writes it: `devices` RDMA devices, `gpus` NVIDIA GPUs."""
    def put(rel, text):
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    for g in range(gpus):
        put("bus/pci/devices/0000:%02x:00.0/vendor" % (g + 1), "0x10de\n")
        put("bus/pci/devices/0000:%02x:00.0/class" % (g + 1), "0x030200\n")
    for k in range(devices):
        dev = "class/infiniband/%s_%d/" % ("efa" if kind == "efa" else "mlx5", k)
        put(dev + "device/vendor", "0x1d0f\n" if kind == "efa" else "0x15b3\n")
        put(dev + "ports/1/link_layer", "Unknown\n" if kind == "efa" else "InfiniBand\n")
        put(dev + "ports/1/state", "4: ACTIVE\n")
    return root


def one_run(a, name, cal):
    rundir = os.path.join(a.outdir, name)
    fresh(rundir)
    records = os.path.join(rundir, "records")
    state = "/efasim-scenario-%d-%s" % (os.getpid(), name)
    world = len(rank_specs(a.inference_ranks))
    budget, host_budget = (256 if name == "roomy" else cal["budget"]), {}
    fab = FABRIC.get(name)
    if fab:
        budget, host_budget["a"], host_budget["b"] = fabric_budgets(cal, name, world)
        sysfs = make_sysfs(os.path.join(rundir, "sysfs"), fab["kind"], fab["devices"])
    env = base_env(a, records, state, budget)
    if fab:
        env["EFASIM_CHARGE"] = fab["charge"]
    rc, out, err = stat(env, "--reset")
    if rc != 0:
        raise ScenarioError("efasim-stat --reset failed (%s): %s%s" % (rc, out, err))
    rc, before, _ = stat(env, "--json")
    with open(os.path.join(rundir, "efasim-stat.before.json"), "w") as f:
        f.write(before)

    def env_of(rname):
        e = dict(env)
        if name not in ("noshim", "roomy"):
            e["LD_PRELOAD"] = SHIM
            e["NCCLSHIM_LOG_DIR"] = records
            e["NCCLSHIM_WEIGHT_UPDATE"] = "auto"
            if fab and rname.startswith("inference"):
                # test-only: the inference processes count as another host (docs: NCCLSHIM_HOSTNAME)
                e["NCCLSHIM_HOSTNAME"] = "node-b"
            if fab:
                e["NCCLSHIM_SYSFS_ROOT"] = sysfs  # test-only: the fabric this "host" presents
                hb = host_budget["b" if rname.startswith("inference") else "a"]
                if hb:
                    e["NCCLSHIM_FABRIC_BUDGET"] = str(hb)
        return e

    log("== run %s (%s): budget %d QPs%s%s" % (
        name, RUNS[name], budget, ", EFASIM_CHARGE=%s, %d %s device(s) a host" % (fab["charge"], fab["devices"],
                                                                                   fab["kind"]) if fab else "",
        ", NCCLSHIM_FABRIC_BUDGET %s (trainer's host) / %s (node-b)" % (host_budget["a"], host_budget["b"])
        if fab and host_budget["a"] else ""))
    t = time.monotonic()
    res = launch(a, name, rundir, env_of,
                 ["--refits", str(a.refits), "--refit-bytes", str(int(a.refit_gib * (1 << 30))),
                  "--buffer-bytes", str(a.buffer_mib << 20), "--allreduce-bytes", str(a.allreduce_mib << 20),
                  "--iters", str(a.iters)], a.timeout)
    wall = time.monotonic() - t
    rc, after, _ = stat(env, "--json")
    with open(os.path.join(rundir, "efasim-stat.after.json"), "w") as f:
        f.write(after)
    try:  # the run's state segment (POSIX shm) is not needed any more
        os.unlink("/dev/shm" + state)
    except OSError:
        pass

    # ncclshim-inspect: the network of each communicator (NCCL's logs), --check
    p = subprocess.run([INSPECT, "--json", records], capture_output=True, text=True, timeout=60)
    with open(os.path.join(rundir, "inspect.json"), "w") as f:
        f.write(p.stdout)
    insp = json.loads(p.stdout) if p.stdout.strip() else {"communicators": []}
    p = subprocess.run([INSPECT, "-v", records], capture_output=True, text=True, timeout=60)
    with open(os.path.join(rundir, "inspect.txt"), "w") as f:
        f.write(p.stdout + p.stderr)
    p = subprocess.run([INSPECT, "--check", records], capture_output=True, text=True, timeout=60)
    with open(os.path.join(rundir, "check.txt"), "w") as f:
        f.write(p.stdout + p.stderr)
    check_rc = p.returncode
    check_problems = [l for l in p.stderr.splitlines() if l.startswith("PROBLEM ")]
    row = summarize(name, res, insp, check_rc, check_problems, stat_figures(after) if after else None, wall, world)
    row["efasim_budget"] = budget
    row["fabric_budget"] = host_budget or None
    row["wu_reason"] = next(((c.get("ranks") or [{}])[0].get("action_reason") for c in insp.get("communicators", [])
                             if c.get("purpose") == "weight-update"), None)
    return row


def summarize(name, res, insp, check_rc, problems, stat_after, wall, world):
    comms = insp.get("communicators", [])

    def pick(pred):
        for c in comms:
            if pred(c):
                return c
        return None
    wu = pick(lambda c: c.get("purpose") == "weight-update") or pick(lambda c: c.get("nranks") == world)
    tr = pick(lambda c: c.get("purpose") == "training") or pick(lambda c: c.get("nranks") == 2)
    t0 = res.get("trainer0") or {}
    refits0 = t0.get("refits", [])
    # every receiver, each inference rank included, must have every buffer of every refit
    receivers = [v or {} for k, v in sorted(res.items()) if k != "trainer0"]
    exact = all(e.get("bit_exact") for r in receivers for e in r.get("refits", [])) and bool(refits0) and \
        all(len(r.get("refits", [])) == len(refits0) for r in receivers)
    sums = all(e.get("checksums_equal") for r in receivers for e in r.get("refits", [])) and bool(refits0)
    secs = [e["seconds"] for e in refits0]
    nbytes = t0.get("refit_bytes", 0)
    return {
        "run": name, "label": RUNS[name], "wall_s": wall, "world": world,
        "wu_group": wu and wu.get("group"), "wu_action": (wu and wu.get("action")) or "-",
        "wu_network": (wu and wu.get("network")) or "-",
        "train_group": tr and tr.get("group"), "train_network": (tr and tr.get("network")) or "-",
        "train_algbw_GBps": t0.get("train_algbw_GBps"), "train_busbw_GBps": t0.get("train_busbw_GBps"),
        "train_allreduce_MiB": (t0.get("train_allreduce_bytes") or 0) >> 20,
        "train_allreduce_ok": all((res.get(r) or {}).get("train_allreduce_ok") for r in ("trainer0", "trainer1")),
        "refit_bytes": nbytes, "refit_buffers": t0.get("refit_buffers"),
        "refit_s": secs, "refit_best_s": min(secs) if secs else None,
        "refit_GBps": nbytes / min(secs) / 1e9 if secs else None,
        "checksums_equal": sums, "bit_exact": exact,
        "check_rc": check_rc, "check_problems": problems,
        "efasim": stat_after, "ranks": res, "communicators": [
            {k: c.get(k) for k in ("group", "purpose", "action", "nranks", "network", "hosts", "problems")}
            for c in comms],
    }


# ---------------------------------------------------------------- output
def table(rows, cal):
    def f(v, fmt="%.2f"):
        return "-" if v is None else fmt % v if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)

    def st(r, k):
        e = r.get("efasim") or {}
        return f(e.get(k), "%s")
    lines = [
        ("weight-update comm: action", lambda r: r["wu_action"]),
        ("weight-update comm: network", lambda r: r["wu_network"]),
        ("training comm: network", lambda r: r["train_network"]),
        ("training all-reduce GB/s (algbw)", lambda r: f(r["train_algbw_GBps"])),
        ("refit seconds (best)", lambda r: f(r["refit_best_s"], "%.3f")),
        ("refit GB/s", lambda r: f(r["refit_GBps"])),
        ("refit vs noshim", lambda r: f(r.get("refit_vs_noshim"), "%.2fx")),
        ("refit vs roomy", lambda r: f(r.get("refit_vs_roomy"), "%.2fx")),
        ("weights: checksums equal", lambda r: "yes" if r["checksums_equal"] else "NO"),
        ("weights: bit-exact (torch.equal)", lambda r: "yes" if r["bit_exact"] else "NO"),
        ("ncclshim-inspect --check", lambda r: "%d (%s)" % (r["check_rc"], "pass" if r["check_rc"] == 0 else
                                                          "problems" if r["check_rc"] == 1 else "error")),
        ("efasim: budget QPs", lambda r: st(r, "budget")),
        ("NCCLSHIM_FABRIC_BUDGET a host", lambda r: "%s/%s" % (r["fabric_budget"]["a"], r["fabric_budget"]["b"])
         if r.get("fabric_budget") and r["fabric_budget"].get("a") else "-"),
        ("efasim: peak QPs in use", lambda r: st(r, "peak")),
        ("efasim: connections", lambda r: st(r, "connections")),
        ("efasim: refused inits", lambda r: st(r, "refused_inits")),
        ("efasim: refused connections", lambda r: st(r, "refused_connections")),
    ]
    head = [""] + ["%s (%s)" % (r["run"], r["label"]) for r in rows]
    body = [[name] + [get(r) for r in rows] for name, get in lines]
    w = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    out = ["  ".join(c.ljust(w[i]) for i, c in enumerate(row)).rstrip() for row in [head] + body]
    if rows:
        r0 = rows[0]
        out.append("")
        out.append("(weight-update group: %d ranks, 2 trainer + %d inference; training all-reduce: %d MiB fp32, 2 ranks;"
                   " refit: %.2f GiB in %s packed buffers, 2 streams in turn, to every other rank; %s)"
                   % (r0["world"], r0["world"] - 2, r0["train_allreduce_MiB"], (r0["refit_bytes"] or 0) / 2**30,
                      r0["refit_buffers"], cal.get("note", "") if cal else ""))
    return "\n".join(out)


WANT = {"ipc": ("ipc", None, None), "ample": ("passthrough", "EFASim", 0.95), "frugal": ("frugal", "EFASim", 0.9),
        "socket": ("socket", "Socket", None)}


def expectations(rows):
    """What each run must show; [(run, what, ok)]."""
    out = []
    base = next((r["refit_GBps"] for r in rows if r["run"] == "noshim" and r["refit_GBps"]), None)
    roomy = next((r["refit_GBps"] for r in rows if r["run"] == "roomy" and r["refit_GBps"]), None)
    for r in rows:
        n = r["run"]
        r["refit_vs_noshim"] = r["refit_GBps"] / base if base and r["refit_GBps"] else None
        r["refit_vs_roomy"] = r["refit_GBps"] / roomy if roomy and r["refit_GBps"] else None
        out.append((n, "weights bit-exact", r["bit_exact"] and r["checksums_equal"]))
        if n == "roomy":
            out.append((n, "weight-update comm on EFASim", r["wu_network"] == "EFASim"))
            out.append((n, "training comm on EFASim", r["train_network"] == "EFASim"))
            continue
        if n == "noshim":
            out.append((n, "weight-update comm on EFASim", r["wu_network"] == "EFASim"))
            out.append((n, "training comm fell back to Socket", r["train_network"] == "Socket"))
            out.append((n, "inspect --check flags it (exit 1)", r["check_rc"] == 1))
            continue
        action, net, ratio = WANT[n]
        out.append((n, "weight-update comm action %s" % action, r["wu_action"] == action))
        if net:
            out.append((n, "weight-update comm on %s" % net, r["wu_network"] == net))
        out.append((n, "training comm on EFASim", r["train_network"] == "EFASim"))
        out.append((n, "inspect --check passes", r["check_rc"] == 0))
        # Against roomy where it ran: the same fabric with both communicators on it, which only the
        # shim's runs otherwise have.
        key, what = ("refit_vs_roomy", "roomy") if roomy else ("refit_vs_noshim", "no-shim")
        if ratio and (roomy or base):
            out.append((n, "refit at %.2fx the %s refit or more" % (ratio, what),
                        r[key] is not None and r[key] >= ratio))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--outdir", required=True)
    ap.add_argument("--runs", default="noshim,roomy,ipc,ample,frugal,socket")
    ap.add_argument("--refit-gib", type=float, default=3.0)
    ap.add_argument("--buffer-mib", type=int, default=1024)
    ap.add_argument("--refits", type=int, default=3)
    ap.add_argument("--allreduce-mib", type=int, default=256)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--qp-budget", type=int, default=0, help="skip the calibration, use this budget")
    ap.add_argument("--timeout", type=float, default=420.0, help="seconds per run (all its processes)")
    ap.add_argument("--inference-ranks", type=int, default=1, choices=(1, 2),
                    help="ranks of the inference engine (GPUs 2..): 1, or 2 on 4 GPUs")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    signal.signal(signal.SIGHUP, stop_all)
    a.outdir = os.path.abspath(a.outdir)
    os.makedirs(a.outdir, exist_ok=True)
    runs = [r for r in a.runs.split(",") if r]
    for r in runs:
        if r not in RUNS:
            ap.error("unknown run %r (%s)" % (r, ", ".join(RUNS)))
    missing = [p for p in (SHIM, PLUGIN, STAT, INSPECT) if not os.path.exists(p)]
    if missing:
        log("scenario: missing %s (make all, and the EFASim plugin's build)" % ", ".join(missing))
        return 1
    summary = {"runs": [], "calibration": None, "errors": [], "outdir": a.outdir,
               "settings": {k: getattr(a, k) for k in ("refit_gib", "buffer_mib", "refits", "allreduce_mib",
                                                       "iters", "qp_budget", "timeout", "inference_ranks")}}
    rows = []
    try:
        if a.qp_budget > 0:
            cal = {"budget": a.qp_budget, "note": "budget %d (--qp-budget)" % a.qp_budget}
        else:
            cal = calibrate(a, any(r in ("frugal", "socket") for r in runs))
        summary["calibration"] = cal
        for r in runs:
            try:
                rows.append(one_run(a, r, cal))
            except ScenarioError as e:
                log(str(e))
                summary["errors"].append(str(e))
            except (subprocess.TimeoutExpired, OSError, ValueError) as e:
                log("run %s: %s: %s" % (r, type(e).__name__, e))
                summary["errors"].append("run %s: %s" % (r, e))
    except ScenarioError as e:
        log(str(e))
        summary["errors"].append(str(e))
        cal = None
    # the runs' EFASim state segments (POSIX shm), also those of a run that failed before
    # removing its own
    for name in os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []:
        if name.startswith("efasim-scenario-%d-" % os.getpid()):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError as e:
                log("scenario: cannot remove /dev/shm/%s: %s" % (name, e))
    summary["runs"] = rows
    exp = expectations(rows)
    summary["expect"] = [{"run": n, "what": w, "ok": bool(ok)} for n, w, ok in exp]
    txt = table(rows, cal) if rows else "(no run finished)"
    print(txt)
    print()
    for n, w, ok in exp:
        print("%s %s: %s" % ("ok  " if ok else "FAIL", n, w))
    for r in rows:
        if r["run"] in FABRIC and r.get("wu_reason"):
            print("  %s: why: %s" % (r["run"], r["wu_reason"]))
    for r in rows:
        for pr in r["check_problems"]:
            print("  %s: %s" % (r["run"], pr))
    with open(os.path.join(a.outdir, "scenario.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True, default=str)
    with open(os.path.join(a.outdir, "scenario.txt"), "w") as f:
        f.write(txt + "\n")
    print("\nfull results: %s/scenario.json; per run: records, logs, inspect output under %s/<run>/"
          % (a.outdir, a.outdir))
    ok = not summary["errors"] and all(ok for _, _, ok in exp) and len(rows) == len(runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
