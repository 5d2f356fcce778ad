"""GPU test: a refit through CuPy's NCCL, the binding verl's checkpoint engine reaches through
Ray's collective group (issue 32): trainer (rank 0) and the rollout side (rank 1) on ONE GPU,
the communicator made as Ray collective makes it (cupy.cuda.nccl: the ID on rank 0,
ncclGroupStart + ncclCommInitRank + ncclGroupEnd), lazily inside a function named like verl's
`execute_checkpoint_engine`, then a barrier (an all-reduce of one int64) and bucketed
broadcasts from rank 0.  NCCL refuses two ranks on one GPU; under the shim auto chooses ipc.

    python3 tests/gpu/cupy_refit.py --outdir DIR [--preload SHIM]
    python3 tests/gpu/cupy_refit.py --check DIR noshim|shim      (CHECK lines)
"""
import os
import sys

import common

DEV = int(os.environ.get("COLOCATED_DEVICE", "0"))
BUCKETS = [64 << 20, 64 << 20, (3 << 20) + 5]


def execute_checkpoint_engine(nccl, world, rank, uid):
    """As Ray collective's NCCLGroup: the communicator inside a group call."""
    nccl.groupStart()
    try:
        try:
            comm = nccl.NcclCommunicator(world, uid, rank)
        except TypeError:
            # CuPy before 13 takes the ID as a tuple of signed chars; the type check comes
            # before any NCCL call, so asking again inside the same group is safe.
            comm = nccl.NcclCommunicator(world, tuple(b if b < 128 else b - 256 for b in uid), rank)
    finally:
        nccl.groupEnd()
    return comm


def worker(args):
    import cupy
    from cupy.cuda import nccl
    cupy.cuda.Device(DEV).use()
    rank = args["rank"]
    res = {"device": DEV, "nccl": nccl.get_version()}
    uid = common.shared_id(args, "cupy", lambda: bytes(bytearray(x & 0xff for x in nccl.get_unique_id())))
    try:
        comm = execute_checkpoint_engine(nccl, 2, rank, uid)
        stream = cupy.cuda.Stream(non_blocking=True)
        one = cupy.ones(1, dtype=cupy.int64)
        comm.allReduce(one.data.ptr, one.data.ptr, 1, nccl.NCCL_INT64, nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()
        res["barrier"] = int(one.get()[0])
        rng = cupy.random.RandomState(7)
        srcs = [rng.randint(0, 256, n, dtype=cupy.uint8) for n in BUCKETS]
        bufs = [s.copy() if rank == 0 else cupy.zeros(n, dtype=cupy.uint8) for s, n in zip(srcs, BUCKETS)]
        cupy.cuda.Device(DEV).synchronize()
        for b in bufs:
            comm.bcast(b.data.ptr, b.size, nccl.NCCL_UINT8, 0, stream.ptr)
        stream.synchronize()
        res["bcast_ok"] = [bool((b == s).all()) for b, s in zip(bufs, srcs)]
        comm.destroy()
    except Exception as e:
        res["init_error"] = "%s: %s" % (type(e).__name__, e)
    return res


def check(outdir, mode):
    chk = common.checker("cupy_refit (%s)" % mode)
    summary, ranks = common.read_summary(outdir)
    if mode == "noshim":
        errs = [r.get("init_error") or "" for r in ranks]
        chk(any("INVALID_USAGE" in e.upper().replace(" ", "_") or "invalid usage" in e.lower() for e in errs) or
            all(r.get("bcast_ok") and all(r["bcast_ok"]) for r in ranks),
            "NCCL alone refuses two ranks of a CuPy communicator on one GPU: %s" % [e[:160] for e in errs])
        return
    chk(summary["ok"] and not any(r.get("init_error") for r in ranks),
        "both processes finished on one GPU: %s %s" % (summary.get("errors"), [r.get("init_error") for r in ranks]))
    chk(all(r.get("barrier") == 2 for r in ranks), "the barrier (an all-reduce of one int64) gives 2 on both ranks")
    chk(all(r.get("bcast_ok") and all(r["bcast_ok"]) for r in ranks),
        "bucketed broadcasts from rank 0, bit-exact on both ranks %s" % [r.get("bcast_ok") for r in ranks])
    recs = common.read_records(outdir)
    comms = [c for c in recs if c["type"] == "comm"]
    chk(len(comms) == 2 and all(c["action"] == "ipc" and c["caller"]["api"] == "cupy" and
                                c["purpose"] == "weight-update" for c in comms),
        "both ranks' communicator (CuPy's, made inside a group): weight-update, ipc %s"
        % [(c.get("purpose"), c.get("action"), c["caller"]["api"]) for c in comms])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(common.main(__file__, worker, one_gpu=True))
