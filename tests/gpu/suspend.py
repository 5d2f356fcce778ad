"""GPU test (g): colocated RL's sleep between refits, trainer (rank 0) and
inference process (rank 1) on ONE GPU over the shim's ipc transport (as in
colocated.py).  A refit, then the inference process calls ncclCommSuspend
(NCCL_SUSPEND_MEM) and the GPU's free memory (cuMemGetInfo) must grow by the
staging that ncclCommMemStats calls suspendable, once the trainer's shim has
let go of it; then ncclCommResume, an all-reduce of one float (through both
ranks' staging: the resumed rank's is new) and a second refit, bit-exact.

    python3 tests/gpu/suspend.py --outdir DIR [--preload SHIM]
    python3 tests/gpu/suspend.py --check DIR      (CHECK lines)

Both ranks use GPU $COLOCATED_DEVICE (default 0).
"""
import ctypes
import os
import subprocess
import sys
import time

import common
import ctypes_bcast as cb

REFIT_BUFFERS = 4
REFIT_BYTES = 64 << 20  # each
DEV = int(os.environ.get("COLOCATED_DEVICE", "0"))
NCCL_SUSPEND_MEM = 1
STAT_SUSPEND, STAT_SUSPENDED, STAT_PERSIST, STAT_TOTAL = 0, 1, 2, 3


def seeded(nbytes, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def refit(lib, comm, rank, dev, streams, seed):
    """REFIT_BUFFERS broadcasts from rank 0 on 2 streams in turn: bit-exact?"""
    import torch
    vp, st = cb.buffer_type, cb.cudaStream_t
    srcs = [seeded(REFIT_BYTES, seed + i) for i in range(REFIT_BUFFERS)]
    bufs = [s.to(dev) if rank == 0 else torch.zeros(REFIT_BYTES, dtype=torch.uint8, device=dev) for s in srcs]
    torch.cuda.synchronize()
    for i, b in enumerate(bufs):
        lib.ncclBroadcast(vp(b.data_ptr()), vp(b.data_ptr()), REFIT_BYTES, cb.ncclUint8, 0, comm,
                          st(streams[i % 2].cuda_stream))
    torch.cuda.synchronize()
    return all(common.sha256_tensor(b) == common.sha256_tensor(s) for b, s in zip(bufs, srcs))


def allreduce_one(lib, comm, dev, stream):
    import torch
    one = torch.ones(1, dtype=torch.float32, device=dev)
    stream.wait_stream(torch.cuda.current_stream())  # the buffer is written before the stream reads it (as for NCCL)
    lib.ncclAllReduce(cb.buffer_type(one.data_ptr()), cb.buffer_type(one.data_ptr()), 1, cb.ncclFloat32, cb.ncclSum,
                      comm, cb.cudaStream_t(stream.cuda_stream))
    torch.cuda.synchronize()
    return one.item()


def nccl229_calls(outdir, rank):
    """ncclCommSuspend/Resume/MemStats as a linked caller has them: from the
    global namespace where NCCL has them (2.29+), else through
    nccl229_calls.c, whose linked calls bind to the preloaded shim's exports
    (a lookup answers as NCCL would: not found on 2.28)."""
    glob_ns = ctypes.CDLL(None)
    try:
        return glob_ns.ncclCommSuspend, glob_ns.ncclCommResume, glob_ns.ncclCommMemStats
    except AttributeError:
        pass
    so = os.path.join(outdir, "nccl229_calls.%d.so" % rank)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl229_calls.c")
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", so, src], check=True)
    calls = ctypes.CDLL(so)
    return calls.call_suspend, calls.call_resume, calls.call_mem_stats


def worker(args):
    import torch
    torch.cuda.set_device(DEV)
    rank = args["rank"]
    dev = torch.device("cuda", DEV)
    lib = cb.NCCLLibrary(common.nccl_so_path())
    res = {"device": DEV, "gpu": torch.cuda.get_device_name(DEV)}
    outdir = os.path.abspath(args["outdir"])
    comm = cb.make_comm(lib, args, "suspend", device=DEV)
    suspend, resume, stats = nccl229_calls(outdir, rank)
    suspend.argtypes, suspend.restype = [cb.ncclComm_t, ctypes.c_int], ctypes.c_int
    resume.argtypes, resume.restype = [cb.ncclComm_t], ctypes.c_int
    stats.argtypes, stats.restype = [cb.ncclComm_t, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int

    def stat(which):
        v = ctypes.c_uint64(0)
        rc = stats(comm, which, ctypes.byref(v))
        return v.value if rc == 0 else -rc

    streams = [torch.cuda.Stream(device=dev) for _ in range(2)]
    res["warmup"] = allreduce_one(lib, comm, dev, streams[0])
    res["refit1_ok"] = refit(lib, comm, rank, dev, streams, 77)
    if rank == 1:
        res["suspendable"], res["persist"], res["total"] = stat(STAT_SUSPEND), stat(STAT_PERSIST), stat(STAT_TOTAL)
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info(DEV)[0]
        res["suspend_rc"] = suspend(comm, NCCL_SUSPEND_MEM)
        res["suspended"] = stat(STAT_SUSPENDED)
        # The trainer's shim lets go within milliseconds; bounded.
        grew, deadline = 0, time.monotonic() + 10
        while time.monotonic() < deadline:
            grew = torch.cuda.mem_get_info(DEV)[0] - free0
            if grew >= 0.9 * res["suspendable"]:
                break
            time.sleep(0.01)
        res["freed_bytes"] = grew
        common.put_file(os.path.join(outdir, "suspended"), b"1")
        res["resume_rc"] = resume(comm)
        res["resumed"] = stat(STAT_SUSPENDED)
    else:
        common.wait_file(os.path.join(outdir, "suspended"))
    res["after"] = allreduce_one(lib, comm, dev, streams[0])
    res["refit2_ok"] = refit(lib, comm, rank, dev, streams, 177)
    lib.ncclCommDestroy(comm)
    return res


def check(outdir):
    chk = common.checker("suspend")

    summary, ranks = common.read_summary(outdir)
    chk(summary["ok"], "both processes finished on one GPU (%s)" % (ranks[0].get("gpu") if ranks else "?"))
    inf = ranks[1] if len(ranks) > 1 else {}
    chk(all(r.get("warmup") == 2.0 and r.get("refit1_ok") for r in ranks),
        "warm-up all-reduce and a refit of %d x %d MiB, bit-exact" % (REFIT_BUFFERS, REFIT_BYTES >> 20))
    chk(inf.get("suspend_rc") == 0 and inf.get("suspended") == 1,
        "the inference rank's ncclCommSuspend(NCCL_SUSPEND_MEM) succeeds, MemStats says suspended (%s, %s)"
        % (inf.get("suspend_rc"), inf.get("suspended")))
    sb, freed = inf.get("suspendable", 0), inf.get("freed_bytes", 0)
    chk(sb > 0 and freed >= 0.9 * sb,
        "cuMemGetInfo: free memory grew by %.1f MiB, the staging MemStats calls suspendable is %.1f MiB "
        "(persistent %s, total %s bytes)" % (freed / 2**20, sb / 2**20, inf.get("persist"), inf.get("total")))
    chk(inf.get("resume_rc") == 0 and inf.get("resumed") == 0,
        "ncclCommResume succeeds, MemStats says active (%s, %s)" % (inf.get("resume_rc"), inf.get("resumed")))
    chk(all(r.get("after") == 2.0 for r in ranks), "an all-reduce through the new staging gives 2.0 on both ranks")
    chk(all(r.get("refit2_ok") for r in ranks), "the refit after the resume is bit-exact")
    recs = common.read_records(outdir)
    comms = [c for c in recs if c["type"] == "comm" and c["caller"]["api"] == "ctypes"]
    chk(len(comms) == 2 and all(c["action"] == "ipc" for c in comms),
        "auto made it ipc on both ranks (%s)" % [c.get("action") for c in comms])
    warns = [r for r in recs if r["type"] == "warning"]
    chk(not warns, "no warning records %s" % [w.get("message", "")[:200] for w in warns])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
        sys.exit(0)
    sys.exit(common.main(__file__, worker, one_gpu=True))
