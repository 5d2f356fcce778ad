"""GPU test (h): a rank of an ipc communicator is lost mid-refit (SIGKILL, as the
OOM killer or a preempted node does it), and every survivor must be released.

Every rank runs a loop of operations of a weight-update communicator that the
shim carries over CUDA IPC (libnccl through ctypes, as vLLM's pynccl), on
torch's current stream (the legacy default stream), each followed by
torch.cuda.synchronize() and ncclCommGetAsyncError.  Rank $LOST_VICTIM kills
itself before its operation KILL_AT.  Each survivor must then, within 5 s of
the death: return from its synchronisation, see ncclRemoteError from the next
call and from ncclCommGetAsyncError, destroy the communicator, and still run a
matmul.  Then recovery as an RL framework does it: a new process takes the
lost rank's place (the launcher starts it), everyone creates a new
communicator with a new unique ID, broadcasts a refit buffer bit-exact, and
(on several GPUs) runs a torch.distributed all-reduce.

    python3 tests/gpu/lost_rank.py --outdir DIR --preload SHIM [--world N] [--timeout S]
    python3 tests/gpu/lost_rank.py --check DIR [push|pull|staged]   (CHECK lines; the
                          hop kind named must have carried some of the broadcasts)

Environment:
  LOST_VICTIM=<rank>      the rank that dies (default: the last)
  LOST_OP=bcast|allreduce|sendrecv|allgather   the operation of the loop (default
                          bcast: 256 MiB from rank 0; allreduce: one float, host
                          synchronous; sendrecv: 64 MiB around the ring; allgather:
                          64 MiB from each rank)
  LOST_DEVICE=<n>         every rank on GPU n (colocated); default: rank r on GPU r
  LOST_HOW=kill|exit|abort  how the victim goes: SIGKILL (default), os._exit(3)
                          without destroying anything, or os.abort() (a crash, SIGABRT)
A survivor that stays stuck dumps its Python stack (faulthandler) after
STUCK_S: the failure names where it was.
"""
import ctypes
import faulthandler
import json
import os
import signal
import subprocess
import sys
import time

import common
import ctypes_bcast as cb

KILL_AT = 5
ITERS = 40
STUCK_S = 20
BCAST_BYTES = 256 << 20
P2P_BYTES = 64 << 20
REFIT_BYTES = (64 << 20) + 7
RELEASE_BOUND_S = 5.0
ncclRemoteError = 6

VICTIM_ENV = "LOST_VICTIM"
OP = os.environ.get("LOST_OP", "bcast")
ONE_GPU = os.environ.get("LOST_DEVICE")
GEN = int(os.environ.get("LOST_GEN", "0"))  # 1: the replacement of the lost rank
HOW = os.environ.get("LOST_HOW", "kill")
HOW_STATUS = {"kill": -signal.SIGKILL, "exit": 3, "abort": -signal.SIGABRT}  # the victim's exit status


def victim(world):
    return int(os.environ.get(VICTIM_ENV, str(world - 1)))


def device_of(rank):
    return int(ONE_GPU) if ONE_GPU is not None else rank


def seeded(nbytes, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


class Loop:
    """The operation of the loop, on torch's current stream; returns NCCL's result."""

    def __init__(self, lib, comm, rank, world, dev):
        import torch
        self.lib, self.comm, self.rank, self.world = lib, comm, rank, world
        self.stream = cb.cudaStream_t(torch.cuda.current_stream().cuda_stream)
        n = {"bcast": BCAST_BYTES, "sendrecv": P2P_BYTES, "allgather": P2P_BYTES, "allreduce": 4}[OP]
        self.a = torch.full((n,), rank, dtype=torch.uint8, device=dev)
        self.b = torch.zeros(n * (world if OP == "allgather" else 1), dtype=torch.uint8, device=dev)
        self.f = lib.lib
        self.f.ncclBroadcast.restype = self.f.ncclAllReduce.restype = self.f.ncclAllGather.restype = ctypes.c_int
        self.f.ncclCommGetAsyncError.restype = ctypes.c_int
        self.f.ncclCommGetAsyncError.argtypes = [cb.ncclComm_t, ctypes.POINTER(ctypes.c_int)]

    def run(self):
        vp, f, s = cb.buffer_type, self.f, self.stream
        if OP == "bcast":
            return f.ncclBroadcast(vp(self.a.data_ptr()), vp(self.a.data_ptr()), ctypes.c_size_t(self.a.numel()),
                                   cb.ncclUint8, 0, self.comm, s)
        if OP == "allgather":
            return f.ncclAllGather(vp(self.a.data_ptr()), vp(self.b.data_ptr()), ctypes.c_size_t(self.a.numel()),
                                   cb.ncclUint8, self.comm, s)
        if OP == "allreduce":
            return f.ncclAllReduce(vp(self.a.data_ptr()), vp(self.b.data_ptr()), ctypes.c_size_t(1),
                                   cb.ncclFloat32, cb.ncclSum, self.comm, s)
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1 + self.world) % self.world
        rc = f.ncclGroupStart()
        rc = rc or f.ncclSend(vp(self.a.data_ptr()), ctypes.c_size_t(self.a.numel()), cb.ncclUint8, nxt, self.comm, s)
        rc = rc or f.ncclRecv(vp(self.b.data_ptr()), ctypes.c_size_t(self.b.numel()), cb.ncclUint8, prv, self.comm, s)
        return f.ncclGroupEnd() or rc

    def async_error(self):
        e = ctypes.c_int(-1)
        rc = self.f.ncclCommGetAsyncError(self.comm, ctypes.byref(e))
        return e.value if rc == 0 else -100 - rc


def die():
    """The victim goes, LOST_HOW's way, its communicator alive."""
    sys.stdout.flush()
    if HOW == "exit":
        os._exit(3)
    if HOW == "abort":
        faulthandler.disable()  # a crash, not a report of one
        os.abort()
    os.kill(os.getpid(), signal.SIGKILL)


def synchronize_bounded(where):
    """torch.cuda.synchronize(), with the stack dumped if it is still there after STUCK_S."""
    import torch
    faulthandler.dump_traceback_later(STUCK_S, exit=False)
    print("# in %s" % where, file=sys.stderr, flush=True)
    torch.cuda.synchronize()
    faulthandler.cancel_dump_traceback_later()


def lose(args, res, lib, dev):
    """The loop until the loss, and what a survivor sees after it."""
    import torch
    rank, world = args["rank"], args["world"]
    comm = cb.make_comm(lib, args, "lost", device=dev)
    loop = Loop(lib, comm, rank, world, dev)
    death_file = os.path.join(args["outdir"], "death.time")
    for i in range(ITERS):
        if rank == victim(world) and i == KILL_AT:
            common.put_file(death_file, repr(time.time()).encode())
            die()
        rc = loop.run()
        synchronize_bounded("torch.cuda.synchronize() after operation %d" % i)
        t = time.time()
        err = loop.async_error()
        if rc != 0 or err != 0:
            res.update(lost_at=i, lost_rc=rc, lost_async=err, released_at=t)
            break
    else:
        res["lost_at"] = None
        return
    death = float(common.wait_file(death_file, 30))
    res["release_s"] = res["released_at"] - death
    res["next_rc"] = loop.run()
    synchronize_bounded("torch.cuda.synchronize() after the call that follows the loss")
    res["async_after"] = loop.async_error()
    t = time.time()
    res["destroy_rc"] = lib.lib.ncclCommDestroy(comm)
    res["destroy_s"] = time.time() - t
    x = torch.ones((1024, 1024), device=dev)
    y = (x @ x).sum().item()
    synchronize_bounded("torch.cuda.synchronize() after a matmul")
    res["matmul_ok"] = y == 1024.0 ** 3


def recover(args, res, lib, dev):
    """A new communicator of the survivors and the replacement: a bit-exact refit,
    then (rank per GPU) a torch all-reduce on another communicator."""
    import torch
    comm = cb.make_comm(lib, args, "recover", device=dev)
    src = seeded(REFIT_BYTES, 77)
    buf = src.to(dev) if args["rank"] == 0 else torch.zeros(REFIT_BYTES, dtype=torch.uint8, device=dev)
    lib.ncclBroadcast(cb.buffer_type(buf.data_ptr()), cb.buffer_type(buf.data_ptr()), REFIT_BYTES, cb.ncclUint8, 0,
                      comm, cb.cudaStream_t(torch.cuda.current_stream().cuda_stream))
    synchronize_bounded("torch.cuda.synchronize() after the refit of the new communicator")
    res["recover_exact"] = common.sha256_tensor(buf) == common.sha256_tensor(src)
    lib.ncclCommDestroy(comm)
    if ONE_GPU is None:
        import torch.distributed as dist
        store = os.path.join(os.path.abspath(args["outdir"]), "torch.store.recover")
        dist.init_process_group("nccl", init_method="file://" + store, rank=args["rank"], world_size=args["world"],
                                device_id=torch.device("cuda", dev))
        t = torch.ones(1 << 20, device=dev)
        dist.all_reduce(t)
        synchronize_bounded("torch.cuda.synchronize() after a torch all-reduce")
        res["torch_allreduce_ok"] = bool((t == args["world"]).all().item())
        dist.destroy_process_group()


def worker(args):
    import torch
    dev = device_of(args["rank"])
    torch.cuda.set_device(dev)
    lib = cb.NCCLLibrary(common.nccl_so_path())
    res = {"gen": GEN, "op": OP, "victim": victim(args["world"]), "device": dev, "one_gpu": ONE_GPU is not None}
    if GEN == 0:
        lose(args, res, lib, dev)
    recover(args, res, lib, dev)
    return res


def where(outdir, r, gen):
    """The step a worker was last in, from its stderr's "# in ..." lines."""
    steps = [l[len("# in "):] for l in common.tail(os.path.join(outdir, "rank%d%s.err" % (r, ".gen%d" % gen if gen
                                                                                          else "")), 400)
             if l.startswith("# in ")]
    return "in " + steps[-1] if steps else "before its first operation"


def run_one(args, r, gen, env):
    outdir = args["outdir"]
    env = dict(env, LOST_GEN=str(gen))
    suffix = "" if gen == 0 else ".gen%d" % gen
    out = open(os.path.join(outdir, "rank%d%s.out" % (r, suffix)), "wb")
    err = open(os.path.join(outdir, "rank%d%s.err" % (r, suffix)), "wb")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r), "--world", str(args["world"]),
           "--outdir", outdir]
    return subprocess.Popen(cmd, stdout=out, stderr=err, env=env, stdin=subprocess.DEVNULL)


def launch(args):
    """The workers, and the replacement of the victim once it is dead; bounded."""
    outdir = args["outdir"] = os.path.abspath(args["outdir"])
    os.makedirs(outdir, exist_ok=True)
    for name in os.listdir(outdir):
        if name.startswith(("torch.store", "ncclid.", "death.time")):
            os.unlink(os.path.join(outdir, name))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args["preload"]:
        env["LD_PRELOAD"] = os.path.abspath(args["preload"])
    world, v = args["world"], victim(args["world"])
    procs = {(r, 0): run_one(args, r, 0, env) for r in range(world)}
    deadline = time.monotonic() + args["timeout"]
    summary = {"errors": [], "ranks": [], "victim": v, "how": HOW}
    while any(p.poll() is None for p in procs.values()) or (v, 1) not in procs:
        if (v, 1) not in procs and procs[(v, 0)].poll() is not None:
            procs[(v, 1)] = run_one(args, v, 1, env)
        if time.monotonic() > deadline:
            for (r, g), p in procs.items():
                if p.poll() is None:
                    summary["errors"].append("rank %d (generation %d) still running after %.0f s, stuck %s: killed"
                                             % (r, g, args["timeout"], where(outdir, r, g)))
                    summary["errors"] += ["rank %d stacks: %s" % (r, l) for l in common.stacks(p.pid)]
                    p.kill()
            for p in procs.values():
                p.wait()
            break
        time.sleep(0.05)
    for (r, g), p in sorted(procs.items()):
        suffix = "" if g == 0 else ".gen%d" % g
        result = None
        for line in common.tail(os.path.join(outdir, "rank%d%s.out" % (r, suffix)), 1000):
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
        expected_rc = HOW_STATUS[HOW] if (r, g) == (v, 0) else 0
        if p.returncode != expected_rc:
            summary["errors"].append("rank %d (generation %d) exited with status %s" % (r, g, p.returncode))
        summary["ranks"].append({"rank": r, "gen": g, "returncode": p.returncode, "result": result})
    summary["ok"] = not summary["errors"]
    common.put_file(os.path.join(outdir, "summary.json"), json.dumps(summary, indent=1, sort_keys=True).encode())
    for e in summary["errors"]:
        common.log("launcher: " + e)
    return summary


def hops_by_comm(outdir):
    """Each ipc communicator's hops into its ranks (push/pull/staged), from the records."""
    by = {}
    for r in common.read_records(outdir):
        if r.get("type") == "comm_end" and r.get("action") == "ipc":
            h = by.setdefault(r.get("group", "?"), {"push": 0, "pull": 0, "staged": 0})
            for k, v in r.get("ipc", {}).get("in", {}).items():
                h[k] = h.get(k, 0) + v
    return by


def check(outdir, hop=None):
    chk = common.checker("lost_rank")
    with open(os.path.join(outdir, "summary.json")) as f:
        summary = json.load(f)
    label = os.path.basename(os.path.normpath(outdir))
    chk(summary["ok"], "%s: every process ended as it should, none stuck (%s)"
        % (label, "; ".join(summary["errors"][:3]) or "no error"))
    for e in summary["errors"]:
        if "stacks" in e or "still running" in e:
            print("# " + e)
    for r in summary["ranks"]:
        res, who = r["result"] or {}, "%s rank %d" % (label, r["rank"])
        if r["gen"] == 0 and r["rank"] == summary["victim"]:
            continue
        if r["gen"] == 0:
            rel = res.get("release_s")
            chk(res.get("lost_at") is not None, "%s saw the loss (operation %s, rc %s, async %s)"
                % (who, res.get("lost_at"), res.get("lost_rc"), res.get("lost_async")))
            chk(rel is not None and rel < RELEASE_BOUND_S, "%s released within %.0f s of the death (%s s)"
                % (who, RELEASE_BOUND_S, "%.3f" % rel if rel is not None else "never"))
            chk(res.get("next_rc") == ncclRemoteError, "%s: the next call says ncclRemoteError (%s)"
                % (who, res.get("next_rc")))
            chk(res.get("async_after") == ncclRemoteError, "%s: ncclCommGetAsyncError says ncclRemoteError (%s)"
                % (who, res.get("async_after")))
            chk(res.get("destroy_rc") == 0, "%s: destroy returned ncclSuccess (%s, in %s s)"
                % (who, res.get("destroy_rc"), res.get("destroy_s")))
            chk(res.get("matmul_ok") is True, "%s: a matmul after the loss is right" % who)
        chk(res.get("recover_exact") is True, "%s%s: the refit of the new communicator is bit-exact"
            % (who, " (replacement)" if r["gen"] else ""))
        if not res.get("one_gpu", False):
            chk(res.get("torch_allreduce_ok") is True, "%s: a torch all-reduce afterwards is right" % who)
    by = hops_by_comm(outdir) if os.path.isdir(os.path.join(outdir, "records")) else {}
    print("# hops into the ranks, per communicator (the lost one, then the new one): %s" % by)
    if hop:
        chk(any(h.get(hop, 0) > 0 for h in by.values()), "%s: some broadcasts were %s (%s)" % (label, hop, by))
    warned = False
    for name in os.listdir(outdir):
        if name.endswith(".err"):
            with open(os.path.join(outdir, name), errors="replace") as f:
                text = f.read()
            warned |= "are released (a stream synchronisation returns)" in text
    chk(warned, "%s: the survivors' warning says their streams are released" % label)


def main():
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
        return 0
    args = common.parse_args(sys.argv)
    if args["worker"]:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        res = worker(args)
        res["rank"], res["pid"] = args["rank"], os.getpid()
        common.emit_result(res)
        return 0
    summary = launch(args)
    print(json.dumps(summary, sort_keys=True))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
