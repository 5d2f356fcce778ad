#!/usr/bin/env python3
"""The rendezvous at the size of real RL jobs (issue 19), on this machine with the fake NCCL.

Ranks are threads of tests/bin/many_ranks processes (at most 256 a process, at least one process
per simulated host; hosts by NCCLSHIM_HOSTNAME); every process, the root's included, runs under
`ulimit -n 1024`.  Since 2026-11-25 (issue 19) no process destroys its communicators or exits
before every process has created all of its own (MANY_RANKS_HOLD), and each rank's thread first
touches 64 KiB of its stack (MANY_RANKS_WARM_STACK_KIB), as a process's main thread has.
The unique ID is made by a process of its own (the root: it serves the rendezvous and samples its
own descriptors and peak RSS).  Rank 0's process is training, the others inference,
NCCLSHIM_WEIGHT_UPDATE=socket: the root commits socket in one round (every rank said in its HELLO
that it can carry it out; the baseline took two: DECISION, votes, COMMIT).

Per configuration (median of REPS runs):
  decide_ms   the root's last arrival (its decision record) -> the last rank to learn the decision
              (comm records' decision.decided_ts): what the goal bounds (50 ms + 1 ms per host)
  commit_ms   the root's last arrival -> COMMIT sent to every leader (after_last_arrival_us)
  deliv_ms    the root's last arrival -> the last leader has put the COMMIT in each of its ranks'
              sockets (rendezvous_leader records' relayed_ts): the decision delivered, before the
              ranks' threads are scheduled to read it
  calls_ms    the last thread's call of ncclCommInitRank -> the last return (client clocks)
  group_ms    the first call -> the last return
and the root's peak descriptors and RSS.  With --baseline LIB, the 16-rank rows are run with that
build too (the code before issue 19), in the same run, and the ratio printed.

Since issue 34 (the tree of leaders), --grid HOSTSxRANKS,... runs one process per simulated host
(its ranks threads of it), every process and the root under `ulimit -n 1024`, and prints the root's
leaders, the leaders it sent on (redirected), and its descriptors and memory; the harness waits on
the processes with epoll (selectors), not select(), so it is not bounded by FD_SETSIZE.

Since issue 45, --synthetic-grid HOSTSxRANKS,... runs the same job with one real rank per host
(a many_ranks process of one rank, which becomes the host's real leader through the shim) and the
host's other ranks synthetic: tests/bin/rv_synth_ranks, one single-threaded process (epoll) that
joins each host's leader as a rank's shim does (the shim's own rv_leader_name.c and rv_wire.c) and
says a many_ranks rank's HELLO, socket_ready included.  The root and the leaders are the real code,
so the root's descriptors and memory are what the all-real run makes them, with a task per host
(three: main, rank and leader threads) instead of a thread per rank: 32,768 ranks on a machine whose
pid_max is 32768.  tasks is the machine's peak count of tasks (threads and processes) above the
count before the run, sampled every 20 ms (/proc/loadavg).  B/rank is the root's peak RSS over the
ranks.  synth_ms: the synthetic process's first connect to its last verdict.

Usage: bench/rv_scale.py [--reps N] [--baseline /path/libncclshim.so [--baseline-max RANKS]]
                        [--sizes 16,128,1024,4096] [--big 8192]
       bench/rv_scale.py --grid 1024x1,4096x1,8192x1,4096x8,8192x8 [--reps N] [--baseline LIB]
       bench/rv_scale.py --synthetic-grid 512x8,1024x4,4096x8 [--reps N] [--timeout-ms MS] [--fanin N]
"""
import argparse, glob, json, os, resource, select, selectors, statistics, subprocess, sys, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MANY = os.path.join(ROOT, "tests", "bin", "many_ranks")
SYNTH = os.path.join(ROOT, "tests", "bin", "rv_synth_ranks")
SHIM = os.path.join(ROOT, "build", "libncclshim.so")
PER_PROC = 256


def nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def env_of(base, **kw):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_"))}
    e.update(base)
    e.update(kw)
    return e


def tasks_now():
    """The machine's tasks (threads and processes): /proc/loadavg's fourth field, running/total."""
    return int(open("/proc/loadavg").read().split()[3].split("/")[1])


def hold_until_created(procs, hold_w, deadline, peak=None):
    """Reads each process's stdout up to its CREATED line (or its end), then closes the write end
    of the one pipe every process holds as stdin: the processes then destroy their communicators
    and exit.  Returns what was read, by process.  peak (a list of one int): the most tasks seen,
    sampled every 20 ms while waiting."""
    bufs = {p.stdout.fileno(): b"" for p in procs}
    sel = selectors.DefaultSelector()  # epoll: thousands of processes, past select()'s FD_SETSIZE
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    waiting = set(bufs)
    while waiting and time.monotonic() < deadline:
        if peak is not None:
            peak[0] = max(peak[0], tasks_now())
        left = max(0, deadline - time.monotonic())
        for key, _ in sel.select(min(0.02, left) if peak is not None else left):
            fd = key.fd
            chunk = os.read(fd, 4096)
            bufs[fd] += chunk
            if not chunk or b"CREATED\n" in bufs[fd]:
                waiting.discard(fd)
                sel.unregister(fd)
    sel.close()
    os.close(hold_w)
    return [bufs[p.stdout.fileno()].decode(errors="replace") for p in procs]


def read_records(d):
    """From a run's records: actions of the real ranks, their decided_ts, the root's last arrival,
    commit_ms, the leaders' relayed_ts, the root's leaders and the leaders it sent on."""
    acts, dts, last, commit_ms, relayed, leaders, redirected = {}, [], None, None, [], None, None
    for f in glob.glob(d + "/rec/*"):
        for line in open(f, errors="replace"):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("type") == "comm":
                acts[r["action"]] = acts.get(r["action"], 0) + 1
                if "decided_ts" in r.get("decision", {}):
                    dts.append(r["decision"]["decided_ts"])
            elif r.get("type") == "rendezvous_leader":
                relayed.append(r["relayed_ts"])
            elif r.get("type") == "decision" and "after_last_arrival_us" in r:
                last = r["ts"] - r["after_last_arrival_us"] / 1e6
                commit_ms = r["after_last_arrival_us"] / 1e3
                leaders, redirected = r.get("leaders"), r.get("redirected")
    return acts, dts, last, commit_ms, relayed, leaders, redirected


def root_stats_of(rout):
    for line in rout.splitlines():
        if line.startswith("ROOT "):
            return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    return {}


def job_env(d, lib, timeout_ms, extra=None):
    """What every process of a run has: records in d, socket for the marked group, the shim."""
    base = {"NCCLSHIM_LOG_DIR": d + "/rec", "NCCLSHIM_WEIGHT_UPDATE": "socket", "LD_PRELOAD": lib,
            "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": str(timeout_ms)}
    base.update(extra or {})
    return base


def start_root(base):
    """The root: a process that makes the unique ID and serves it (its shim), under ulimit -n 1024.
    Returns the process and the ID in hex."""
    root = subprocess.Popen([MANY, "id"], env=env_of(base, NCCLSHIM_ROLE="training"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=nofile)
    fd = root.stdout.fileno()
    buf = b""
    while b"\n" not in buf:
        if not select.select([fd], [], [], 60)[0]:
            raise RuntimeError("no ID")
        buf += os.read(fd, 4096)
    return root, buf.split()[1].decode()


def synth_procs(nsynth):
    """How many rv_synth_ranks processes hold nsynth sockets: one where the hard RLIMIT_NOFILE is
    enough or this harness may raise it (the processes it starts inherit it), else as many as the
    hard limit needs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = nsynth + 64
    if hard == resource.RLIM_INFINITY or hard >= need:
        return 1
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
        return 1
    except (ValueError, OSError):
        # Not allowed (no CAP_SYS_RESOURCE, or above fs.nr_open): split the hosts.
        return -(-nsynth // (hard - 64))


def one_synth(lib, hosts, per, d, timeout_ms, fanin=None):
    """hosts x per ranks: one real rank per host (many_ranks, one thread, the host's real leader), the
    other per - 1 of each host synthetic (rv_synth_ranks).  The same environment as one()'s."""
    nranks = hosts * per
    base = job_env(d, lib, timeout_ms, {"NCCLSHIM_RENDEZVOUS_FANIN": str(fanin)} if fanin is not None else None)
    tasks0 = tasks_now()
    root, hid = start_root(base)
    hold_r, hold_w = os.pipe()
    errf = open(os.path.join(d, "stderr"), "ab")
    procs = []
    for h in range(hosts):
        procs.append(subprocess.Popen(
            [MANY, "ranks", hid, str(nranks), str(h * per), "1"],
            env=env_of(base, NCCLSHIM_HOSTNAME="h%d" % h, NCCLSHIM_ROLE="training" if h == 0 else "inference",
                       MANY_RANKS_HOLD="1", MANY_RANKS_WARM_STACK_KIB="64"),
            stdin=hold_r, stdout=subprocess.PIPE, stderr=errf, text=True, preexec_fn=nofile))
    os.close(hold_r)
    # The synthetic ranks need no shim (they speak its protocol with its own code): no LD_PRELOAD.
    senv = env_of({}, RV_SYNTH_EXE=MANY, RV_SYNTH_WAIT_MS=str(timeout_ms + 60000))
    nsp = synth_procs(hosts * (per - 1))
    synths = []
    for k in range(nsp):
        first, last = k * hosts // nsp, (k + 1) * hosts // nsp
        synths.append(subprocess.Popen([SYNTH, hid, str(nranks), str(per), str(first), str(last - first)], env=senv,
                                       stdout=subprocess.PIPE, stderr=errf, text=True))
    errf.close()
    peak = [tasks0]
    wait_s = timeout_ms / 1000 + 120
    early = hold_until_created(procs, hold_w, time.monotonic() + wait_s, peak)
    souts = [sp.communicate(timeout=wait_s)[0] for sp in synths]
    for p in procs:
        p.communicate(timeout=120)
    rout, _ = root.communicate("", timeout=60)
    acts, dts, last, commit_ms, _, leaders, redirected = read_records(d)
    syn = {"ranks": 0, "socket": 0, "passthrough": 0, "other": 0, "abort": 0, "lost": 0, "rounds2": 0}
    span, v1 = 0.0, 0
    for o in souts:
        kv = dict(x.split("=") for x in o.split()[1:]) if o.startswith("SYNTH") else {}
        for k in syn:
            syn[k] += int(kv.get(k, 0))
        span = max(span, float(kv.get("span_ms", 0)))
        v1 = max(v1, int(kv.get("verdict1_ns", 0)))
    for k in ("socket", "passthrough", "other"):
        if syn[k]:
            acts[k] = acts.get(k, 0) + syn[k]
    rs = root_stats_of(rout)
    lastv = max(dts + ([v1 / 1e9] if v1 else []), default=None)
    return {
        "ok": acts == {"socket": nranks} and syn["ranks"] == hosts * (per - 1),
        "acts": acts,
        "synth": syn,
        "commit_ms": commit_ms,
        "decide_ms": (lastv - last) * 1e3 if lastv and last else None,
        "synth_ms": span,
        "root_fds": rs.get("maxfds"),
        "root_rss_mib": rs.get("hwm_kb", 0) / 1024,
        "bytes_per_rank": rs.get("hwm_kb", 0) * 1024 / nranks,
        "leaders": leaders,
        "redirected": redirected,
        "tasks": peak[0] - tasks0,
        "synth_procs": nsp,
        "stderr": open(os.path.join(d, "stderr"), errors="replace").read().splitlines()[:5],
    }


def one(lib, nranks, hosts, d, extra=None, per_host=False):
    base = job_env(d, lib, 60000, extra)
    tasks0 = tasks_now()
    root, hid = start_root(base)
    # Two processes at least: rank 0's trains, the others run inference.
    nproc = hosts if per_host else max(2, hosts, -(-nranks // PER_PROC))
    # The harness holds one descriptor per process (its stdout): every process's stdin is the read
    # end of one pipe, closed for all at once, and their stderr one file; 8192 processes then fit
    # a hard limit of 16384 (three pipes each did not).
    hold_r, hold_w = os.pipe()
    errf = open(os.path.join(d, "stderr"), "ab")
    procs = []
    for p in range(nproc):
        first = p * nranks // nproc
        count = (p + 1) * nranks // nproc - first
        procs.append(subprocess.Popen(
            [MANY, "ranks", hid, str(nranks), str(first), str(count)],
            env=env_of(base, NCCLSHIM_HOSTNAME="h%d" % (p % hosts), NCCLSHIM_ROLE="training" if p == 0 else "inference",
                       MANY_RANKS_HOLD="1", MANY_RANKS_WARM_STACK_KIB="64"),
            stdin=hold_r, stdout=subprocess.PIPE, stderr=errf, text=True, preexec_fn=nofile))
    os.close(hold_r)
    errf.close()
    # MANY_RANKS_WARM_STACK_KIB: a rank's init runs, in a job, on a process's main thread, whose stack
    # pages were touched long before; a fresh thread faults on each on first touch, the record's
    # buffer's after the decision (docs/benchmarks.md, "Rendezvous at scale").
    # Every process's teardown (destroys, threads' and processes' exits) waits
    # until all have their communicators: it is no part of the decision, and on
    # this machine it would take the cores from ranks of other processes still
    # deciding (with a core per rank, as in a job, it would not).
    peak = [tasks0] if per_host else None
    early = hold_until_created(procs, hold_w, time.monotonic() + 120, peak)
    outs = [p.communicate(timeout=120) for p in procs]
    outs = [(e + o, "") for e, (o, _) in zip(early, outs)]
    rout, _ = root.communicate("", timeout=60)
    t0max = t1max = 0
    t0min = float("inf")
    for o, _ in outs:
        for line in o.splitlines():
            if line.startswith("RANKS"):
                kv = dict(x.split("=") for x in line.split()[1:])
                t0max = max(t0max, int(kv["t0max"]) / 1e9)
                t1max = max(t1max, int(kv["t1max"]) / 1e9)
                t0min = min(t0min, int(kv["t0min"]) / 1e9)
    acts, dts, last, commit_ms, relayed, leaders, redirected = read_records(d)
    root_stats = root_stats_of(rout)
    return {
        "ok": acts == {"socket": nranks},
        "acts": acts,
        "decide_ms": (max(dts) - last) * 1e3 if dts and last else None,
        "commit_ms": commit_ms,
        "delivered_ms": (max(relayed) - last) * 1e3 if relayed and last else None,
        "calls_ms": (t1max - t0max) * 1e3,
        "group_ms": (t1max - t0min) * 1e3,
        "root_fds": root_stats.get("maxfds"),
        "root_rss_mib": root_stats.get("hwm_kb", 0) / 1024,
        "bytes_per_rank": root_stats.get("hwm_kb", 0) * 1024 / nranks,
        "procs": nproc,
        "leaders": leaders,
        "redirected": redirected,
        "tasks": peak[0] - tasks0 if peak else None,
    }


def repeat(reps, tmp, run):
    """`reps` runs of run(dir), each in a fresh folder of tmp."""
    runs = []
    for _ in range(reps):
        runs.append(run(tempfile.mkdtemp(dir=tmp)))
    return runs


def med(runs, k):
    v = [r[k] for r in runs if r[k] is not None]
    return statistics.median(v) if v else None


def fmt(x, w=8, p=1):
    return ("%*.*f" % (w, p, x)) if x is not None else "%*s" % (w, "-")


def load_average(when):
    print("load average %s: %s" % (when, " ".join(open("/proc/loadavg").read().split()[:3])))


def machine(how):
    """The header every mode prints: the machine, the date, how the ranks run; the load before."""
    model = open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip()
    print("machine: %d cores, %s, %s; %s" % (os.cpu_count(), model, time.strftime("%Y-%m-%d", time.gmtime()), how))
    load_average("before")


def grid(a):
    """One process per host, every process and the root under ulimit -n 1024 (issue 34)."""
    tmp = tempfile.mkdtemp(prefix="rv_scale.")
    machine("one process per host, every process under ulimit -n 1024")
    print("%-5s %6s %5s %5s %4s %9s %9s %9s %9s %8s %8s %7s %8s %6s %6s" % (
        "build", "ranks", "hosts", "r/h", "ok", "commit_ms", "decide_ms", "deliv_ms", "group_ms", "root_fd",
        "rss_MiB", "B/rank", "leaders", "redir", "tasks"))
    for cfg in a.grid.split(","):
        hosts, per = (int(x) for x in cfg.split("x"))
        builds = [("new", SHIM)] + ([("base", a.baseline)] if a.baseline else [])
        res = {}
        for name, lib in builds:
            runs = repeat(a.reps, tmp, lambda d: one(lib, hosts * per, hosts, d, per_host=True))
            res[name] = runs
            print("%-5s %6d %5d %5d %4s %s %s %s %s %8s %8s %7.0f %8s %6s %6s" % (
                name, hosts * per, hosts, per, "yes" if all(r["ok"] for r in runs) else "NO %s" % runs[0]["acts"],
                fmt(med(runs, "commit_ms"), 9), fmt(med(runs, "decide_ms"), 9), fmt(med(runs, "delivered_ms"), 9),
                fmt(med(runs, "group_ms"), 9), max(r["root_fds"] or 0 for r in runs),
                fmt(max(r["root_rss_mib"] for r in runs), 8), max(r["bytes_per_rank"] for r in runs),
                runs[0]["leaders"], runs[0]["redirected"], max(r["tasks"] or 0 for r in runs)))
            sys.stdout.flush()
        if "base" in res:
            gn, gb = med(res["new"], "group_ms"), med(res["base"], "group_ms")
            print("      ratio new/base at %dx%d: group %s" % (hosts, per, "%.2f" % (gn / gb) if gn and gb else "-"))
    load_average("after")
    subprocess.run(["rm", "-rf", tmp])


def synthetic_grid(a):
    """One real rank per host (the host's real leader), the others synthetic (issue 45)."""
    tmp = tempfile.mkdtemp(prefix="rv_scale.")
    machine("one real rank per host (its leader), the others synthetic (rv_synth_ranks); the root and every "
            "real rank under ulimit -n 1024; pid_max %s" % open("/proc/sys/kernel/pid_max").read().strip())
    print("%-5s %6s %5s %5s %4s %9s %9s %9s %8s %8s %7s %8s %6s %6s %5s" % (
        "build", "ranks", "hosts", "r/h", "ok", "commit_ms", "decide_ms", "synth_ms", "root_fd", "rss_MiB", "B/rank",
        "leaders", "redir", "tasks", "synp"))
    for cfg in a.synthetic_grid.split(","):
        hosts, per = (int(x) for x in cfg.split("x"))
        if not 2 <= per <= 256:
            # One leader takes 256 ranks (RV_LEADER_MAX_RANKS); a synthetic rank never leads.
            sys.exit("--synthetic-grid: ranks per host must be 2..256, not %d" % per)
        if hosts * per <= (a.fanin if a.fanin is not None else 64):
            # At or below NCCLSHIM_RENDEZVOUS_FANIN ranks talk to the root directly: no leader to join.
            sys.exit("--synthetic-grid: %dx%d is not above NCCLSHIM_RENDEZVOUS_FANIN (--fanin)" % (hosts, per))
        runs = repeat(a.reps, tmp, lambda d: one_synth(SHIM, hosts, per, d, a.timeout_ms, a.fanin))
        bad = [r for r in runs if not r["ok"]]
        print("%-5s %6d %5d %5d %4s %s %s %s %8s %8s %7.0f %8s %6s %6s %5d" % (
            "synth", hosts * per, hosts, per, "yes" if not bad else "NO %s %s" % (bad[0]["acts"], bad[0]["synth"]),
            fmt(med(runs, "commit_ms"), 9), fmt(med(runs, "decide_ms"), 9), fmt(med(runs, "synth_ms"), 9),
            max(r["root_fds"] or 0 for r in runs), fmt(max(r["root_rss_mib"] for r in runs), 8),
            max(r["bytes_per_rank"] for r in runs), runs[0]["leaders"], runs[0]["redirected"],
            max(r["tasks"] for r in runs), runs[0]["synth_procs"]))
        for line in (bad[0]["stderr"] if bad else []):
            print("      stderr: %s" % line[:300])
        sys.stdout.flush()
    load_average("after")
    subprocess.run(["rm", "-rf", tmp])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline", help="a libncclshim.so built from the code before issue 19")
    ap.add_argument("--baseline-max", type=int, default=64,
                    help="run the baseline up to this many ranks (a baseline with leaders runs any size)")
    ap.add_argument("--sizes", default="16,128,1024,4096")
    ap.add_argument("--big", type=int, default=8192, help="the correctness and root-footprint run (0: none)")
    ap.add_argument("--grid", help="HOSTSxRANKS_PER_HOST,...: one process per host (issue 34)")
    ap.add_argument("--synthetic-grid",
                    help="HOSTSxRANKS_PER_HOST,...: one real rank per host, the others synthetic (issue 45)")
    ap.add_argument("--timeout-ms", type=int, default=60000,
                    help="NCCLSHIM_RENDEZVOUS_TIMEOUT_MS of --synthetic-grid (thousands of processes starting on "
                         "few cores may need more)")
    ap.add_argument("--fanin", type=int, help="NCCLSHIM_RENDEZVOUS_FANIN of --synthetic-grid (default: the shim's, 64)")
    a = ap.parse_args()
    # This harness holds 3 pipes per process: its own limit up to the hard one
    # (the processes it starts get 1024, preexec_fn=nofile).
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if a.grid:
        return grid(a)
    if a.synthetic_grid:
        return synthetic_grid(a)
    tmp = tempfile.mkdtemp(prefix="rv_scale.")
    machine("every process under ulimit -n 1024; ranks are threads (<= %d a process)" % PER_PROC)
    print("%-7s %5s %5s %-8s %4s %9s %9s %9s %9s %9s %8s %8s %6s" % (
        "build", "ranks", "hosts", "goal_ms", "ok", "decide_ms", "commit_ms", "deliv_ms", "calls_ms", "group_ms",
        "root_fd", "rss_MiB", "procs"))
    rows = {}
    for size in [int(x) for x in a.sizes.split(",")]:
        for hosts in (1, 8, 64):
            if hosts > size:
                continue
            builds = [("new", SHIM)] + ([("base", a.baseline)] if a.baseline and size <= a.baseline_max else [])
            for name, lib in builds:
                runs = repeat(a.reps, tmp, lambda d: one(lib, size, hosts, d))
                rows[(name, size, hosts)] = runs
                print("%-7s %5d %5d %-8s %4s %s %s %s %s %s %8s %8s %6d" % (
                    name, size, hosts, "%d" % (50 + hosts), "yes" if all(r["ok"] for r in runs) else "NO",
                    fmt(med(runs, "decide_ms"), 9), fmt(med(runs, "commit_ms"), 9), fmt(med(runs, "delivered_ms"), 9),
                    fmt(med(runs, "calls_ms"), 9),
                    fmt(med(runs, "group_ms"), 9), max(r["root_fds"] or 0 for r in runs),
                    fmt(max(r["root_rss_mib"] for r in runs), 8), runs[0]["procs"]))
                sys.stdout.flush()
            if (("base", size, hosts)) in rows:
                nw, bs = rows[("new", size, hosts)], rows[("base", size, hosts)]
                dn, db = med(nw, "decide_ms"), med(bs, "decide_ms")
                print("        ratio new/base at %d ranks, %d hosts: %scalls %.2f, group %.2f" % (
                    size, hosts, "decide %.2f, " % (dn / db) if dn and db else "",
                    med(nw, "calls_ms") / med(bs, "calls_ms"), med(nw, "group_ms") / med(bs, "group_ms")))
    if a.big:
        for hosts in (1, 64):
            d = os.path.join(tmp, "big-%d" % hosts)
            os.makedirs(d)
            r = one(SHIM, a.big, hosts, d)
            print("%-7s %5d %5d %-8s %4s %s %s %s %s %s %8s %8s %6d  (one run)" % (
                "new", a.big, hosts, "-", "yes" if r["ok"] else "NO %s" % r["acts"], fmt(r["decide_ms"], 9),
                fmt(r["commit_ms"], 9), fmt(r["delivered_ms"], 9), fmt(r["calls_ms"], 9), fmt(r["group_ms"], 9), r["root_fds"],
                fmt(r["root_rss_mib"], 8), r["procs"]))
    load_average("after")
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
