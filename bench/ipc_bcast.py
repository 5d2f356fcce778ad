"""Broadcast between two processes on two GPUs: the shim's ipc communicator
against an NCCL communicator, measured in the same run, plus a copy-engine
peer copy (tensor.copy_ across devices) as the ceiling.  Also creation time
and GPU memory per rank.  Prints a table; JSON in OUTDIR/*/summary.json.

    python3 bench/ipc_bcast.py --outdir DIR --preload build/libncclshim.so

Runs the launcher twice: with the shim (NCCLSHIM_WEIGHT_UPDATE=ipc, the ctypes
communicator of rank 0 "training" and rank 1 "inference") and without it (NCCL).
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
import common  # noqa: E402
import ctypes_bcast  # noqa: E402

SIZES = [1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30]


def iters(size):
    return max(3, min(50, (2 << 30) // size))


def timed(fn, stream, n):
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(n):
        fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / n


def worker(args):
    import torch
    rank = args["rank"]
    dev = torch.device("cuda", rank)
    torch.cuda.init()
    torch.empty(1, device=dev)  # the context exists before the communicator
    lib = ctypes_bcast.NCCLLibrary(common.nccl_so_path())
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info(dev)
    # The ID travels through a file polled every 50 ms: time the init call
    # alone, on the wall clock, so the launcher can take the communicator's
    # creation from the last rank's arrival (the rest is waiting for it).
    path = os.path.join(os.path.abspath(args["outdir"]), "ncclid.bench")
    if rank == 0:
        uid = lib.ncclGetUniqueId()
        common.put_file(path, bytes(uid.internal))
    else:
        uid = lib.unique_id_from_bytes(common.wait_file(path))
    t0, w0 = time.monotonic(), time.time()
    with torch.cuda.device(rank):
        comm = lib.ncclCommInitRank(args["world"], uid, rank)
    t_init, w1 = time.monotonic() - t0, time.time()
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info(dev)
    vp, st = ctypes_bcast.buffer_type, ctypes_bcast.cudaStream_t
    stream = torch.cuda.current_stream()
    barrier = ctypes_bcast.make_barrier(lib, comm, stream, dev)

    barrier()
    res = {"init_s": t_init, "init_wall": [w0, w1], "mem_mib": (free0 - free1) / 2**20, "bw": {}}
    buf = torch.empty(max(SIZES), dtype=torch.uint8, device=dev)
    for size in SIZES:
        def op():
            lib.ncclBroadcast(vp(buf.data_ptr()), vp(buf.data_ptr()), size, ctypes_bcast.ncclUint8, 0, comm,
                              st(stream.cuda_stream))
        op()
        barrier()
        # A first round untimed, kept in bw_cold: a process's first
        # cuIpcOpenMemHandle of an application buffer takes ~9 ms
        # (bench/first_ops.py), and falls into the first round of 1 MiB
        # whenever the warm-up broadcast went the other way.
        t = timed(op, stream, iters(size))
        res.setdefault("bw_cold", {})[str(size)] = size / t / 1e9
        barrier()
        t = timed(op, stream, iters(size))
        res["bw"][str(size)] = size / t / 1e9
    # Under load: a bf16 matmul loop on a side stream of both GPUs while 1 GiB
    # broadcasts run (async RL: refit while inference generates).
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
    c = torch.empty(n, n, dtype=torch.bfloat16, device=dev)
    side = torch.cuda.Stream(device=dev)

    def mm():
        with torch.cuda.stream(side):
            torch.mm(a, b, out=c)
    mm()
    torch.cuda.synchronize()
    t_mm = timed(mm, side, 20)
    size = 1 << 30

    def op1g():
        lib.ncclBroadcast(vp(buf.data_ptr()), vp(buf.data_ptr()), size, ctypes_bcast.ncclUint8, 0, comm,
                          st(stream.cuda_stream))
    barrier()
    k = int(0.5 / t_mm) + 1  # about half a second of matmuls
    s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s0.record(side)
    for _ in range(k):
        mm()
    s1.record(side)
    # One broadcast first, untimed: the timed ones start on this rank's stream
    # once the other rank has come too.  Else the ranks' unequal time
    # enqueueing the matmuls (a launch blocks once the queue is full) counts
    # as transfer time (measured: 1 GiB at 340 or 391 GB/s from run to run,
    # with either transport).
    op1g()
    t_b = timed(op1g, stream, 10)
    # Other sizes under the same load (IPC_BENCH_LOAD_SIZES: bytes, comma-separated;
    # default 64 and 256 MiB).
    res["load_sizes"] = {}
    for ls in [int(x) for x in os.environ.get("IPC_BENCH_LOAD_SIZES", "67108864,268435456").split(",") if x]:
        def opl(ls=ls):
            lib.ncclBroadcast(vp(buf.data_ptr()), vp(buf.data_ptr()), ls, ctypes_bcast.ncclUint8, 0, comm,
                              st(stream.cuda_stream))
        res["load_sizes"][str(ls)] = ls / timed(opl, stream, max(10, (10 << 30) // ls // 4)) / 1e9
    # A same-device copy of 1 GiB meanwhile (the kind of copy a receiving rank
    # makes from its staging into its buffer): does it wait for the SMs?
    half = buf[: size // 2]

    def local():
        buf[size // 2: size].copy_(half, non_blocking=True)
    t_local = timed(local, stream, 5)
    s1.synchronize()
    t_local_alone = timed(local, stream, 5)
    res["load"] = {"bw": size / t_b / 1e9, "local_copy_gbs": size / 2 / t_local / 1e9,
                   "local_copy_alone_gbs": size / 2 / t_local_alone / 1e9,
                   "mm_alone_tflops": 2 * n ** 3 / t_mm / 1e12,
                   "mm_load_tflops": 2 * n ** 3 * k / (s0.elapsed_time(s1) / 1000.0) / 1e12,
                   "sizes": res.pop("load_sizes")}
    del a, b, c
    if rank == 0 and torch.cuda.device_count() > 1:
        # Copy-engine peer copy, the same sizes: the ceiling of a pull over NVLink.
        res["peer"] = {}
        dst = torch.empty(max(SIZES), dtype=torch.uint8, device=torch.device("cuda", 1))
        for size in SIZES:
            def cp():
                dst[:size].copy_(buf[:size], non_blocking=True)
            cp()
            torch.cuda.synchronize()
            t = timed(cp, torch.cuda.current_stream(), iters(size))
            res["peer"][str(size)] = size / t / 1e9
        del dst
    barrier()
    lib.ncclCommDestroy(comm)
    return res


def launch(outdir, preload, env_extra):
    env = dict(os.environ)
    env.update(env_extra)
    cmd = [sys.executable, os.path.abspath(__file__), "--outdir", outdir, "--timeout", "400"]
    if preload:
        cmd += ["--preload", preload]
    subprocess.run(cmd, env=env, check=False)
    return json.load(open(os.path.join(outdir, "summary.json")))


def main():
    if "--worker" in sys.argv:
        return common.main(__file__, worker)
    args = common.parse_args(sys.argv)
    if os.environ.get("IPC_BENCH_CHILD"):
        return common.main(__file__, worker)
    out = os.path.abspath(args["outdir"])
    shim = os.path.abspath(args["preload"]) if args["preload"] else None
    child = {"IPC_BENCH_CHILD": "1", "NCCLSHIM_LOG_DIR": os.path.join(out, "records")}
    shimmed = dict(child, NCCLSHIM_WEIGHT_UPDATE="ipc",
                   NCCLSHIM_TRAINING_TITLES="*ipc_bcast.py --worker --rank 0 *",
                   NCCLSHIM_INFERENCE_TITLES="*ipc_bcast.py --worker --rank 1 *")
    ipc = launch(os.path.join(out, "ipc"), shim, shimmed)
    # The same with PyTorch's expandable segments (cuMemCreate memory, which
    # cuIpcGetMemHandle does not export): the staged fallback.
    staged = launch(os.path.join(out, "ipc-staged"), shim,
                    dict(shimmed, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"))
    nccl = launch(os.path.join(out, "nccl"), None, child)
    ok = ipc["ok"] and nccl["ok"] and staged["ok"]
    r_ipc = [r["result"] for r in ipc["ranks"]]
    r_st = [r["result"] for r in staged["ranks"]]
    r_nccl = [r["result"] for r in nccl["ranks"]]
    if not ok or None in r_ipc or None in r_nccl or None in r_st:
        print("FAIL: ipc %s, ipc-staged %s, nccl %s" % (ipc["errors"], staged["errors"], nccl["errors"]))
        return 1
    print("broadcast, 2 processes, rank 1's algorithm bandwidth (GB/s), same run; ipc-staged: the buffers "
          "in expandable segments (not exportable)")
    print("%10s %10s %10s %8s %10s %12s %11s" % ("size", "NCCL", "ipc", "ipc/NCCL", "peer copy", "ipc/peer",
                                                 "ipc-staged"))
    peer = r_ipc[0].get("peer") or r_nccl[0].get("peer") or {}
    for size in SIZES:
        k = str(size)
        a, b, p = r_nccl[1]["bw"][k], r_ipc[1]["bw"][k], peer.get(k, float("nan"))
        print("%8d MiB %10.1f %10.1f %8.2f %10.1f %12.2f %11.1f" % (size >> 20, a, b, b / a, p, b / p,
                                                                    r_st[1]["bw"][k]))
    print("the untimed first round of each size (for 1 MiB, perhaps a process's first mapping of a buffer):")
    for name, rr in (("NCCL", r_nccl), ("ipc", r_ipc)):
        print("%-10s" % name + "".join(" %d MiB %.1f;" % (int(k) >> 20, v)
                                       for k, v in sorted(rr[1]["bw_cold"].items(), key=lambda kv: int(kv[0]))))
    print("1 GiB broadcast while a bf16 matmul loop (8192^3) runs on both GPUs (rank 1):")
    for name, rr in (("NCCL", r_nccl), ("ipc", r_ipc), ("ipc-staged", r_st)):
        ld = rr[1]["load"]
        print("%-10s %6.1f GB/s; matmul %.0f TFLOPS alone, %.0f during the broadcasts; a 512 MiB same-device "
              "copy: %.0f GB/s under the load, %.0f alone" % (
                  name, ld["bw"], ld["mm_alone_tflops"], ld["mm_load_tflops"], ld["local_copy_gbs"],
                  ld["local_copy_alone_gbs"]))
    print("ipc/NCCL under load: %.2f" % (r_ipc[1]["load"]["bw"] / r_nccl[1]["load"]["bw"]))
    for k in sorted(r_ipc[1]["load"].get("sizes", {}), key=int):
        print("under load, %4d MiB: NCCL %6.1f GB/s, ipc %6.1f, ipc/NCCL %.2f" % (
            int(k) >> 20, r_nccl[1]["load"]["sizes"][k], r_ipc[1]["load"]["sizes"][k],
            r_ipc[1]["load"]["sizes"][k] / r_nccl[1]["load"]["sizes"][k]))
    print("creation: from the last rank's call of ncclCommInitRank to the last return (each rank's own call, "
          "waiting for the other included); GPU memory per rank (torch.cuda.mem_get_info)")
    for name, rr in (("NCCL", r_nccl), ("ipc", r_ipc), ("ipc-staged", r_st)):
        last_in = max(r["init_wall"][0] for r in rr)
        last_out = max(r["init_wall"][1] for r in rr)
        print("%-10s creation: %.3f s (per rank %s s); GPU memory per rank: %s MiB" % (
            name, last_out - last_in, " / ".join("%.3f" % r["init_s"] for r in rr),
            " / ".join("%.0f" % r["mem_mib"] for r in rr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
