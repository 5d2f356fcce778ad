#!/usr/bin/env python3
"""The rendezvous under abuse (issue 17): time from the last real rank's arrival to
its decision, with strangers on the root's port, and without (the baseline, same run).

Per run: a holder process makes a marked unique ID and serves it (the root's shim,
NCCLSHIM_WEIGHT_UPDATE=socket); tests/rv/abuse.py attacks the port and reaches
its steady state; then rank 0 (training) and rank 1 (inference) start at the same
moment and init with the ID (fake NCCL).  Each rank's comm record gives its
`decision.wait_us`: from its arrival (the start of its rendezvous) to the root's
final answer (socket takes the vote round: DECISION, VOTE, COMMIT).  Reported:
the last rank's wait (the smaller one: the ranks arrive together, the decision
follows the later of them) and the slower rank's, median and worst of RUNS runs,
the action every rank took, and the root's rejected_connections.

Usage: bench/rv_abuse.py RUNS [SCENARIO...]   (bench/rv_abuse.sh builds first)
Scenarios: baseline, idle200, drip80, flood8 (all by default).
"""
import json, os, select, statistics, subprocess, sys, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CLIENT = os.path.join(ROOT, "tests", "bin", "rank_client")
FRAME = os.path.join(ROOT, "tests", "bin", "rv_frame")
ABUSE = os.path.join(ROOT, "tests", "rv", "abuse.py")
SHIM = os.path.join(ROOT, "build", "libncclshim.so")
CUDA = os.path.join(ROOT, "tests", "fake", "cuda", "libcuda.so.1")
SCENARIOS = {"baseline": None, "idle200": ("idle", 200), "drip80": ("drip", 80), "flood8": ("flood", 8)}
# Let the attack reach its steady state before the ranks come: idle and drip
# connections past the 1 s token deadline (closed, reopened), the flood's
# processes all running.
SETTLE_S = 1.5


def env_for(d, role):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_"))}
    e.update(LD_PRELOAD=SHIM, NCCLSHIM_LOG_DIR=d, FAKE_NCCL_LOG=os.path.join(d, "fake.log"),
             RANK_CLIENT_CUDA=CUDA, NCCLSHIM_WEIGHT_UPDATE="socket", NCCLSHIM_ROLE=role)
    return e


def read_line(p, prefix, bound=30):
    buf = b""
    fd = p.stdout.fileno()
    end = time.monotonic() + bound
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.decode().startswith(prefix):
                return line.decode()
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError("no %r line within %ds" % (prefix, bound))
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError("exited before a %r line" % prefix)
        buf += chunk


def records(d):
    out = []
    for f in sorted(os.listdir(d)):
        if f.endswith(".jsonl") or "ncclshim" in f:
            with open(os.path.join(d, f), errors="replace") as fh:
                for line in fh:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    return out


def one_run(scenario, tmp):
    d = tempfile.mkdtemp(dir=tmp)
    holder = subprocess.Popen([CLIENT, "ids", "1", "hold"], env=env_for(d, "training"), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    abuse = None
    try:
        hid = read_line(holder, "ID ").split()[1]
        port = subprocess.run([FRAME, "token", hid], capture_output=True, text=True, check=True).stdout.split()[1]
        if SCENARIOS[scenario]:
            mode, n = SCENARIOS[scenario]
            abuse = subprocess.Popen([sys.executable, ABUSE, port, mode, str(n), "--seconds", "60"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            read_line(abuse, "READY")
            time.sleep(SETTLE_S)  # a bench, not a test: the attack's steady state, not a synchronisation
        ranks = [subprocess.Popen([CLIENT, "rank", str(r), "2", hid], env=env_for(d, ("training", "inference")[r]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in (0, 1)]
        for p in ranks:
            p.wait(timeout=60)
        stats = ""
        if abuse:
            abuse.stdin.close()
            stats = read_line(abuse, "STATS", 15)
    finally:
        for p in (abuse, holder):
            if p and p.poll() is None:
                try:
                    p.stdin.close()
                except (OSError, ValueError):
                    pass
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    recs = records(d)
    comms = [r for r in recs if r.get("type") == "comm"]
    dec = [r for r in recs if r.get("type") == "decision"]
    waits = sorted(c.get("decision", {}).get("wait_us", 0) / 1000.0 for c in comms)
    return dict(actions=sorted(c.get("action") for c in comms), last_ms=waits[0] if waits else None,
                slow_ms=waits[-1] if waits else None, rejected=dec[-1]["rejected_connections"] if dec else None,
                rejected_by=dec[-1].get("rejected_by", {}) if dec else {}, stats=stats)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    names = sys.argv[2:] or list(SCENARIOS)
    tmp = tempfile.mkdtemp(prefix="rv_abuse.")
    base = None
    print("%-9s %4s  %-22s %13s %13s %13s  %s" % ("scenario", "runs", "actions (all runs)", "last rank ms",
                                                  "worst last ms", "slower rank ms", "rejected (median; by cause, last run)"))
    for name in names:
        res = [one_run(name, tmp) for _ in range(runs)]
        acts = sorted({",".join(r["actions"]) for r in res})
        last = [r["last_ms"] for r in res if r["last_ms"] is not None]
        slow = [r["slow_ms"] for r in res if r["slow_ms"] is not None]
        rej = [r["rejected"] for r in res if r["rejected"] is not None]
        med = statistics.median(last) if last else float("nan")
        if name == "baseline":
            base = med
        ratio = " (x%.1f)" % (med / base) if base and name != "baseline" else ""
        print("%-9s %4d  %-22s %13.1f %13.1f %13.1f  %s; %s%s" % (
            name, runs, " | ".join(acts), med, max(last) if last else float("nan"),
            statistics.median(slow) if slow else float("nan"), int(statistics.median(rej)) if rej else "-",
            json.dumps(res[-1]["rejected_by"]), ratio))
        if res[-1]["stats"]:
            print("          attacker, last run: %s" % res[-1]["stats"][6:])
        sys.stdout.flush()
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
