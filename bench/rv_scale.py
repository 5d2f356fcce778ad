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

Usage: bench/rv_scale.py [--reps N] [--baseline /path/libncclshim.so [--baseline-max RANKS]]
                        [--sizes 16,128,1024,4096] [--big 8192]
       bench/rv_scale.py --grid 1024x1,4096x1,8192x1,4096x8,8192x8 [--reps N] [--baseline LIB]
"""
import argparse, glob, json, os, resource, select, selectors, statistics, subprocess, sys, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MANY = os.path.join(ROOT, "tests", "bin", "many_ranks")
SHIM = os.path.join(ROOT, "build", "libncclshim.so")
PER_PROC = 256


def nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def env_of(base, **kw):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_"))}
    e.update(base)
    e.update(kw)
    return e


def hold_until_created(procs, hold_w, deadline):
    """Reads each process's stdout up to its CREATED line (or its end), then closes the write end
    of the one pipe every process holds as stdin: the processes then destroy their communicators
    and exit.  Returns what was read, by process."""
    bufs = {p.stdout.fileno(): b"" for p in procs}
    sel = selectors.DefaultSelector()  # epoll: thousands of processes, past select()'s FD_SETSIZE
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    waiting = set(bufs)
    while waiting and time.monotonic() < deadline:
        for key, _ in sel.select(max(0, deadline - time.monotonic())):
            fd = key.fd
            chunk = os.read(fd, 4096)
            bufs[fd] += chunk
            if not chunk or b"CREATED\n" in bufs[fd]:
                waiting.discard(fd)
                sel.unregister(fd)
    sel.close()
    os.close(hold_w)
    return [bufs[p.stdout.fileno()].decode(errors="replace") for p in procs]


def one(lib, nranks, hosts, d, extra=None, per_host=False):
    base = {"NCCLSHIM_LOG_DIR": d + "/rec", "NCCLSHIM_WEIGHT_UPDATE": "socket", "LD_PRELOAD": lib,
            "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": "60000"}
    base.update(extra or {})
    root = subprocess.Popen([MANY, "id"], env=env_of(base, NCCLSHIM_ROLE="training"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=nofile)
    fd = root.stdout.fileno()
    buf = b""
    while b"\n" not in buf:
        if not select.select([fd], [], [], 60)[0]:
            raise RuntimeError("no ID")
        buf += os.read(fd, 4096)
    hid = buf.split()[1].decode()
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
    early = hold_until_created(procs, hold_w, time.monotonic() + 120)
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
    root_stats = {}
    for line in rout.splitlines():
        if line.startswith("ROOT "):
            root_stats = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
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
        "procs": nproc,
        "leaders": leaders,
        "redirected": redirected,
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


def grid(a):
    """One process per host, every process and the root under ulimit -n 1024 (issue 34)."""
    tmp = tempfile.mkdtemp(prefix="rv_scale.")
    print("machine: %d cores, %s, %s; one process per host, every process under ulimit -n 1024" % (
        os.cpu_count(), open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip(),
        time.strftime("%Y-%m-%d", time.gmtime())))
    print("load average before: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    print("%-5s %6s %5s %5s %4s %9s %9s %9s %9s %8s %8s %8s %6s" % (
        "build", "ranks", "hosts", "r/h", "ok", "commit_ms", "decide_ms", "deliv_ms", "group_ms", "root_fd",
        "rss_MiB", "leaders", "redir"))
    for cfg in a.grid.split(","):
        hosts, per = (int(x) for x in cfg.split("x"))
        builds = [("new", SHIM)] + ([("base", a.baseline)] if a.baseline else [])
        res = {}
        for name, lib in builds:
            runs = repeat(a.reps, tmp, lambda d: one(lib, hosts * per, hosts, d, per_host=True))
            res[name] = runs
            print("%-5s %6d %5d %5d %4s %s %s %s %s %8s %8s %8s %6s" % (
                name, hosts * per, hosts, per, "yes" if all(r["ok"] for r in runs) else "NO %s" % runs[0]["acts"],
                fmt(med(runs, "commit_ms"), 9), fmt(med(runs, "decide_ms"), 9), fmt(med(runs, "delivered_ms"), 9),
                fmt(med(runs, "group_ms"), 9), max(r["root_fds"] or 0 for r in runs),
                fmt(max(r["root_rss_mib"] for r in runs), 8), runs[0]["leaders"], runs[0]["redirected"]))
            sys.stdout.flush()
        if "base" in res:
            gn, gb = med(res["new"], "group_ms"), med(res["base"], "group_ms")
            print("      ratio new/base at %dx%d: group %s" % (hosts, per, "%.2f" % (gn / gb) if gn and gb else "-"))
    print("load average after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
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
    a = ap.parse_args()
    # This harness holds 3 pipes per process: its own limit up to the hard one
    # (the processes it starts get 1024, preexec_fn=nofile).
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if a.grid:
        return grid(a)
    tmp = tempfile.mkdtemp(prefix="rv_scale.")
    print("machine: %d cores, %s, %s; every process under ulimit -n 1024; ranks are threads (<= %d a process)" % (
        os.cpu_count(), open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip(),
        time.strftime("%Y-%m-%d", time.gmtime()), PER_PROC))
    print("load average before: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
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
            n += 1
            d = os.path.join(tmp, str(n))
            os.makedirs(d)
            r = one(SHIM, a.big, hosts, d)
            print("%-7s %5d %5d %-8s %4s %s %s %s %s %s %8s %8s %6d  (one run)" % (
                "new", a.big, hosts, "-", "yes" if r["ok"] else "NO %s" % r["acts"], fmt(r["decide_ms"], 9),
                fmt(r["commit_ms"], 9), fmt(r["delivered_ms"], 9), fmt(r["calls_ms"], 9), fmt(r["group_ms"], 9), r["root_fds"],
                fmt(r["root_rss_mib"], 8), r["procs"]))
    print("load average after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
