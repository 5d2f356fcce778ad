"""Shared code of the GPU tests (tests/gpu/*.py).

Each test script is both a launcher and a worker:

    python3 tests/gpu/X.py --outdir DIR [--preload SHIM] [--timeout S]

starts one worker process per rank (`X.py --worker --rank R ...`), each with its
own stdout/stderr files in DIR, and writes DIR/summary.json.  Workers are plain
subprocesses (not torch.multiprocessing) so that every rank's stderr can be shown
on failure, and so that LD_PRELOAD (--preload) reaches only the workers: the
launcher itself never loads NCCL and leaves no records.

A worker prints one line `RESULT <json>` on stdout; the launcher collects them.
Workers rendezvous through files in DIR (torch's FileStore, and a file for the
NCCL unique ID of the ctypes tests): no TCP port to pick, so no port race.
"""
import ctypes
import hashlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

# Required on the GPU machine (NVLink SHARP is not usable there); set here too in
# case a script is run by hand without run.sh.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

WORLD = 2


def nccl_so_path():
    """Path of the libnccl.so.2 that torch uses (the nvidia-nccl wheel)."""
    env = os.environ.get("NCCL_LIB")
    if env:
        return env
    try:
        import nvidia.nccl
        for d in list(nvidia.nccl.__path__):
            p = os.path.join(d, "lib", "libnccl.so.2")
            if os.path.exists(p):
                return p
    except ImportError:
        pass
    # Older wheels bundle it in torch/lib.
    import torch
    p = os.path.join(os.path.dirname(torch.__file__), "lib", "libnccl.so.2")
    if os.path.exists(p):
        return p
    raise RuntimeError("cannot find torch's libnccl.so.2 (set NCCL_LIB)")


def tensor_bytes(t):
    """The raw bytes of a tensor, copied to the CPU (no numpy needed)."""
    t = t.detach().contiguous().cpu()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def sha256_tensor(t):
    return hashlib.sha256(tensor_bytes(t)).hexdigest()


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def emit_result(d):
    print("RESULT " + json.dumps(d, sort_keys=True), flush=True)


def parse_args(argv):
    """--worker, --rank R, --world N, --outdir D, --preload SHIM, --timeout S."""
    a = {"worker": False, "rank": 0, "world": WORLD, "outdir": None, "preload": None, "timeout": 240.0}
    i = 1
    while i < len(argv):
        k = argv[i]
        if k == "--worker":
            a["worker"] = True
        elif k in ("--rank", "--world", "--outdir", "--preload", "--timeout") and i + 1 < len(argv):
            v = argv[i + 1]
            i += 1
            key = k[2:]
            a[key] = int(v) if key in ("rank", "world") else float(v) if key == "timeout" else v
        else:
            raise SystemExit("usage: %s --outdir DIR [--preload SHIM] [--timeout S]  (bad argument %r)"
                             % (argv[0], k))
        i += 1
    if not a["outdir"]:
        raise SystemExit("--outdir is required")
    return a


def put_file(path, data):
    """Write a file atomically (a reader polling for it never sees half of it)."""
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def wait_file(path, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError("timed out after %.0fs waiting for %s" % (timeout, path))
        time.sleep(0.05)
    with open(path, "rb") as f:
        return f.read()


def shared_id(args, tag, make):
    """A unique ID's bytes, the same on every rank: rank 0 makes them (make()) and writes
    them to a file of the run's outdir, which the other ranks wait for."""
    path = os.path.join(os.path.abspath(args["outdir"]), "ncclid.%s" % tag)
    if args["rank"] != 0:
        return wait_file(path)
    b = make()
    put_file(path, b)
    return b


def tail(path, n=30):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError as e:
        return ["(cannot read %s: %s)" % (path, e)]
    return lines[-n:]


def stacks(pid):
    """Where a hung worker is: its Python threads (faulthandler, on SIGUSR1)
    go to its stderr; its native threads, with gdb where there is one."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        pass
    if not shutil.which("gdb"):
        return ["(no gdb: native stacks not taken)"]
    try:
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 25"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return ["(gdb failed: %s)" % e]
    return [l for l in out.splitlines() if l.startswith(("Thread ", "#"))][:300]


def launch(script, args):
    """Run `world` workers of `script`; returns the summary dict (also in outdir/summary.json)."""
    outdir = os.path.abspath(args["outdir"])
    os.makedirs(outdir, exist_ok=True)
    for name in os.listdir(outdir):  # a FileStore or ID file left from an earlier run would confuse the rendezvous
        if name.startswith(("torch.store", "ncclid.")):
            os.unlink(os.path.join(outdir, name))
    world, timeout = args["world"], args["timeout"]
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if args["preload"]:
        env["LD_PRELOAD"] = os.path.abspath(args["preload"])
    procs = []
    for r in range(world):
        # GPUTEST_RANK<r>_ENV="K=V K=V": rank r's own settings (a test-only host identity, say)
        renv = dict(env)
        renv.update(kv.split("=", 1) for kv in os.environ.get("GPUTEST_RANK%d_ENV" % r, "").split() if "=" in kv)
        out = open(os.path.join(outdir, "rank%d.out" % r), "wb")
        err = open(os.path.join(outdir, "rank%d.err" % r), "wb")
        cmd = [sys.executable, os.path.abspath(script), "--worker", "--rank", str(r), "--world", str(world),
               "--outdir", outdir]
        # Same process group as the launcher: if the outer `timeout` fires it
        # signals the whole group, workers included.
        procs.append((subprocess.Popen(cmd, stdout=out, stderr=err, env=renv, stdin=subprocess.DEVNULL), out, err))
    summary = {"ok": False, "script": os.path.basename(script), "preload": args["preload"], "ranks": [],
               "errors": []}
    deadline = time.monotonic() + timeout
    first_fail = None
    while True:
        codes = [p.poll() for p, _, _ in procs]
        if all(c is not None for c in codes):
            break
        now = time.monotonic()
        if any(c not in (None, 0) for c in codes) and first_fail is None:
            first_fail = now  # a dead rank leaves its peer waiting in NCCL: give it 15 s, then kill
        if now > deadline or (first_fail is not None and now - first_fail > 15):
            why = "timeout after %.0fs" % timeout if now > deadline else "a peer failed"
            for r, ((p, _, _), c) in enumerate(zip(procs, codes)):
                if c is None:
                    summary["errors"].append("rank %d killed (%s)" % (r, why))
                    summary["errors"] += ["rank %d stacks: %s" % (r, line) for line in stacks(p.pid)]
                    p.send_signal(signal.SIGTERM)
            time.sleep(3)
            for p, _, _ in procs:
                if p.poll() is None:
                    p.kill()
            for p, _, _ in procs:
                p.wait()
            break
        time.sleep(0.1)
    for r, (p, out, err) in enumerate(procs):
        out.close()
        err.close()
        res = None
        for line in tail(os.path.join(outdir, "rank%d.out" % r), 1000):
            if line.startswith("RESULT "):
                res = json.loads(line[len("RESULT "):])
        if p.returncode != 0:
            summary["errors"].append("rank %d exited with status %s" % (r, p.returncode))
        if res is None:
            summary["errors"].append("rank %d printed no RESULT line" % r)
        summary["ranks"].append({"rank": r, "pid": p.pid, "returncode": p.returncode, "result": res})
    summary["ok"] = not summary["errors"]
    put_file(os.path.join(outdir, "summary.json"), json.dumps(summary, indent=1, sort_keys=True).encode())
    if not summary["ok"]:
        for e in summary["errors"]:
            log("launcher: " + e)
        for r in range(world):
            log("launcher: --- tail of rank %d stderr ---" % r)
            for line in tail(os.path.join(outdir, "rank%d.err" % r), 60):
                log("  " + line)
    return summary


def checker(label):
    """chk(cond, what): prints a `CHECK ok|fail <label>: <what>` line, which run.sh counts."""
    def chk(cond, what):
        print("CHECK %s %s: %s" % ("ok" if cond else "fail", label, what), flush=True)
    return chk


def read_summary(outdir):
    """A launch's summary.json, and each rank's result (an empty dict for a rank without one)."""
    with open(os.path.join(outdir, "summary.json")) as f:
        summary = json.load(f)
    return summary, [r["result"] or {} for r in summary["ranks"]]


def read_records(outdir):
    """Every record the shim wrote under outdir/records, in file order."""
    recs = []
    for f in sorted(glob.glob(os.path.join(outdir, "records", "*.jsonl"))):
        with open(f) as fh:
            recs += [json.loads(line) for line in fh]
    return recs


def main(script, worker, one_gpu=False):
    """Entry point of every test script: worker(args) -> result dict, run in each rank,
    rank r on GPU r, or every rank on the worker's own choice (one_gpu: colocated)."""
    args = parse_args(sys.argv)
    if args["worker"]:
        import faulthandler
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # the launcher asks where a hung rank is
        if not one_gpu:
            import torch
            torch.cuda.set_device(args["rank"])  # each rank on its own GPU
        res = worker(args)
        res["rank"] = args["rank"]
        res["pid"] = os.getpid()
        emit_result(res)
        return 0
    summary = launch(script, args)
    print(json.dumps(summary, sort_keys=True))
    return 0 if summary["ok"] else 1
