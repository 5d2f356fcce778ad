"""GPU test (h): NCCL 2.31's nccl*Config collectives on a real ipc communicator:
trainer (rank 0) and inference process (rank 1) on ONE GPU (the colocated case,
which NCCL refuses and the shim's ipc transport carries), a ctypes client as in
colocated.py, roles from the process titles, NCCLSHIM_WEIGHT_UPDATE=auto.

What it proves: the GPU machine's NCCL (2.28.9) does not have these functions,
so an application built against 2.31 reaches them as nccl231_calls.c does, by
a linked call that binds to the preloaded shim's export (a dlsym lookup finds
nothing, as without the shim).  On a shim-only communicator the real library
is never called, so the shim's own answer is what runs: ncclBroadcastConfig
from each root (odd sizes, 3 streams, with and without a config),
ncclAllGatherConfig and ncclAllReduceConfig move the data bit-exact over CUDA
IPC; the 2.32 config's launchCompletionEvent (a driver event the test made and
never recorded itself) is recorded on the stream (cuEventElapsedTime from an
event recorded before the call succeeds only if it was); a config of another
magic gets ncclInvalidArgument; ncclReduceConfig answers as ncclReduce does.
It does not prove forwarding to a real 2.31 NCCL (none on the machine): the CPU
suite's fake 2.32.3 covers that (tests/t/44-nccl-2-32.t).

    python3 tests/gpu/collconfig.py --outdir DIR [--preload SHIM]
    python3 tests/gpu/collconfig.py --check DIR      (CHECK lines)

Both ranks use GPU $COLOCATED_DEVICE (default 0).
"""
import ctypes
import os
import subprocess
import sys

import common
import ctypes_bcast as cb

SIZES = [1, 4097, (4 << 20) + 3, (64 << 20) + 7]
GATHER_BYTES = (1 << 20) + 5
DEV = int(os.environ.get("COLOCATED_DEVICE", "0"))
NCCL_UNDEF = -2147483648
ncclInt32 = 2


class CollConfig(ctypes.Structure):
    """ncclCollConfig_t of NCCL 2.32.3 (shim/nccl/nccl_abi.h, from newer-releases.md)."""
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("ext", ctypes.c_void_p), ("minCTAs", ctypes.c_int), ("maxCTAs", ctypes.c_int),
                ("nvlsCTAs", ctypes.c_int), ("cgaClusterSize", ctypes.c_int), ("algSelection", ctypes.c_char_p),
                ("forceAlgSelection", ctypes.c_int), ("CTAPolicy", ctypes.c_int),
                ("userProfilerTag", ctypes.c_uint64), ("launchCompletionEvent", ctypes.c_void_p)]


def coll_config(event, magic=0xCAFEBEEF):
    return CollConfig(ctypes.sizeof(CollConfig), magic, 23203, None, NCCL_UNDEF, NCCL_UNDEF, NCCL_UNDEF,
                      NCCL_UNDEF, None, 1, NCCL_UNDEF, 44, event)


def seeded(nbytes, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def nccl231_calls(outdir, rank):
    """The four calls as a linked caller has them: nccl231_calls.c, built here,
    whose undefined symbols bind to the preloaded shim's exports (or to NCCL's
    own, where NCCL 2.31+ is loaded)."""
    so = os.path.join(outdir, "nccl231_calls.%d.so" % rank)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl231_calls.c")
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", so, src], check=True)
    calls = ctypes.CDLL(so)
    vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    calls.call_broadcast.argtypes = [vp, vp, sz, i, i, vp, vp, vp]
    calls.call_allgather.argtypes = [vp, vp, sz, i, vp, vp, vp]
    calls.call_allreduce.argtypes = [vp, vp, sz, i, i, vp, vp, vp]
    calls.call_reduce.argtypes = [vp, vp, sz, i, i, i, vp, vp, vp]
    for f in (calls.call_broadcast, calls.call_allgather, calls.call_allreduce, calls.call_reduce):
        f.restype = ctypes.c_int
    return calls


def driver():
    """libcuda's event functions (the application's context is current: torch made it)."""
    cu = ctypes.CDLL("libcuda.so.1")
    for name, args in (("cuEventCreate", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]),
                       ("cuEventRecord", [ctypes.c_void_p, ctypes.c_void_p]),
                       ("cuEventSynchronize", [ctypes.c_void_p]),
                       ("cuEventElapsedTime", [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]),
                       ("cuEventDestroy_v2", [ctypes.c_void_p])):
        getattr(cu, name).argtypes = args
        getattr(cu, name).restype = ctypes.c_int
    return cu


def worker(args):
    import torch
    torch.cuda.set_device(DEV)
    rank = args["rank"]
    dev = torch.device("cuda", DEV)
    lib = cb.NCCLLibrary(common.nccl_so_path())
    res = {"device": DEV, "gpu": torch.cuda.get_device_name(DEV), "nccl": lib.ncclGetVersion()}
    outdir = os.path.abspath(args["outdir"])
    comm = cb.make_comm(lib, args, "collconfig", device=DEV)
    calls = nccl231_calls(outdir, rank)
    glob_ns = ctypes.CDLL(None)
    res["dlsym_finds"] = hasattr(glob_ns, "ncclBroadcastConfig")
    cu = driver()
    start, bdone, done = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    res["event_create"] = [cu.cuEventCreate(ctypes.byref(e), 0) for e in (start, bdone, done)]
    cfg = coll_config(bdone.value)
    streams = [torch.cuda.Stream(device=dev) for _ in range(3)]
    torch.cuda.synchronize()
    # Broadcasts from each root, 3 streams in turn, every other one with the 2.32 config.
    results, exact, k = [], [], 0
    for root in (0, 1):
        for size in SIZES:
            src = seeded(size, 4400 + 1000 * root + size)
            buf = src.to(dev) if rank == root else torch.zeros(size, dtype=torch.uint8, device=dev)
            torch.cuda.synchronize()
            st = streams[k % 3]
            results.append(calls.call_broadcast(buf.data_ptr(), buf.data_ptr(), size, cb.ncclUint8, root, comm,
                                                st.cuda_stream, ctypes.byref(cfg) if k % 2 else None))
            torch.cuda.synchronize()
            exact.append(common.sha256_tensor(buf) == common.sha256_tensor(src))
            k += 1
    res["bcast_rc"], res["bcast_exact"] = results, exact
    # The event: recorded by the shim behind an all-gather whose start the test records itself.
    mine = seeded(GATHER_BYTES, 4500 + rank).to(dev)
    everyone = torch.zeros(2 * GATHER_BYTES, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    res["start_record"] = cu.cuEventRecord(start, ctypes.c_void_p(streams[1].cuda_stream))
    gcfg = coll_config(done.value)  # an event nothing else records
    res["gather_rc"] = calls.call_allgather(mine.data_ptr(), everyone.data_ptr(), GATHER_BYTES, cb.ncclUint8, comm,
                                            streams[1].cuda_stream, ctypes.byref(gcfg))
    res["event_sync"] = cu.cuEventSynchronize(done)
    ms = ctypes.c_float(-1)
    res["elapsed_rc"] = cu.cuEventElapsedTime(ctypes.byref(ms), start, done)
    res["elapsed_ms"] = ms.value
    torch.cuda.synchronize()
    res["gather_exact"] = all(common.sha256_tensor(everyone[q * GATHER_BYTES:(q + 1) * GATHER_BYTES]) ==
                              common.sha256_tensor(seeded(GATHER_BYTES, 4500 + q)) for q in (0, 1))
    # All-reduce of 64 int32: element i is the sum over ranks q of i + 1000 q.
    vals = torch.arange(64, dtype=torch.int32, device=dev) + 1000 * rank
    torch.cuda.synchronize()
    res["allreduce_rc"] = calls.call_allreduce(vals.data_ptr(), vals.data_ptr(), 64, ncclInt32, cb.ncclSum, comm,
                                               streams[0].cuda_stream, ctypes.byref(cfg))
    torch.cuda.synchronize()
    res["allreduce_exact"] = vals.cpu().tolist() == [2 * i + 1000 for i in range(64)]
    # A config NCCL cannot read; and Reduce, which ipc does not do, as its plain form.
    bad = coll_config(done.value, magic=0x12345678)
    res["badmagic_rc"] = calls.call_allreduce(vals.data_ptr(), vals.data_ptr(), 64, ncclInt32, cb.ncclSum, comm,
                                              streams[0].cuda_stream, ctypes.byref(bad))
    res["reduce_rc"] = calls.call_reduce(vals.data_ptr(), vals.data_ptr(), 64, ncclInt32, cb.ncclSum, 0, comm,
                                         streams[0].cuda_stream, ctypes.byref(cfg))
    torch.cuda.synchronize()
    lib.ncclCommDestroy(comm)
    for e in (start, bdone, done):
        cu.cuEventDestroy_v2(e)
    return res


def check(outdir):
    chk = common.checker("collconfig")
    summary, ranks = common.read_summary(outdir)
    chk(summary["ok"] and len(ranks) == 2,
        "both processes finished on one GPU (%s, NCCL %s)" % (ranks[0].get("gpu") if ranks else "?",
                                                              ranks[0].get("nccl") if ranks else "?"))
    chk(all(r.get("bcast_rc") == [0] * 2 * len(SIZES) and r.get("bcast_exact") == [True] * 2 * len(SIZES)
            for r in ranks),
        "ncclBroadcastConfig from each root, %s bytes, with and without a config: bit-exact (%s)"
        % (",".join(map(str, SIZES)), [(r.get("bcast_rc"), r.get("bcast_exact")) for r in ranks]))
    chk(all(r.get("gather_rc") == 0 and r.get("gather_exact") for r in ranks),
        "ncclAllGatherConfig: bit-exact on both ranks")
    chk(all(r.get("allreduce_rc") == 0 and r.get("allreduce_exact") for r in ranks),
        "ncclAllReduceConfig of 64 int32: the exact sums on both ranks")
    chk(all(r.get("event_create") == [0, 0, 0] and r.get("start_record") == 0 and r.get("event_sync") == 0 and
            r.get("elapsed_rc") == 0 and r.get("elapsed_ms", -1) >= 0 for r in ranks),
        "the 2.32 launchCompletionEvent was recorded on the stream (cuEventElapsedTime from the test's own start "
        "event: %s)" % [(r.get("elapsed_rc"), r.get("elapsed_ms")) for r in ranks])
    chk(all(r.get("badmagic_rc") == 4 for r in ranks), "a config of another magic: ncclInvalidArgument (%s)"
        % [r.get("badmagic_rc") for r in ranks])
    chk(all(r.get("reduce_rc") == 5 for r in ranks),
        "ncclReduceConfig answers as ncclReduce does on ipc: ncclInvalidUsage (%s)" % [r.get("reduce_rc") for r in ranks])
    recs = common.read_records(outdir)
    comms = [c for c in recs if c["type"] == "comm" and c["caller"]["api"] == "ctypes"]
    chk(len(comms) == 2 and all(c["action"] == "ipc" for c in comms),
        "auto made it ipc on both ranks (%s)" % [c.get("action") for c in comms])
    ends = [e for e in recs if e["type"] == "comm_end" and e.get("action") == "ipc"]
    chk(len(ends) == 2 and all(e["ops"].get("Broadcast", {}).get("count") == 2 * len(SIZES) and
                               not [k for k in e["ops"] if "Config" in k] for e in ends),
        "records count the broadcasts under Broadcast (%s)" % [e.get("ops") for e in ends])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
        sys.exit(0)
    sys.exit(common.main(__file__, worker, one_gpu=True))
