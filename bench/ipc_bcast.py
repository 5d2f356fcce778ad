"""Broadcast from rank 0 to every other rank, one process per GPU: the shim's
ipc communicator (the chain through all ranks) against an NCCL communicator,
measured in the same run, plus a copy-engine peer copy (tensor.copy_ from GPU 0
to GPU 1) as the ceiling.  Also creation time and GPU memory per rank, and a
bit-exact check of every size on every rank.  Prints a table per shape; JSON in
OUTDIR/<shape>/<run>/summary.json.

    python3 bench/ipc_bcast.py --outdir DIR --preload build/libncclshim.so
        [--shapes 1+1,1+3,2+2] [--runs ipc,ipc-staged,nccl] [--timeout S] [--dry-run]

A shape T+I is a weight-update group of T trainer ranks and I inference ranks
(ranks 0..T-1 titled as training, the rest as inference, through
NCCLSHIM_TRAINING_TITLES / NCCLSHIM_INFERENCE_TITLES), on GPUs 0..T+I-1; the
default 1+1 is the 2-GPU bench of docs/benchmarks.md.  For each shape the
launcher runs: `ipc` with the shim and NCCLSHIM_WEIGHT_UPDATE=auto (which must
choose ipc: the records are read back and the action and its reason printed),
`ipc-staged` the same with PyTorch's expandable segments (cuMemCreate memory,
which cuIpcGetMemHandle does not export: the staged path), and `nccl` without
the shim.  Bandwidths are the slowest receiver's (the end of the chain).
--dry-run prints the launches (world, environment) and exits: what runs
without a GPU.
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
RUNS = ("ipc", "ipc-staged", "nccl")
# The goals (issues 4 and 24; docs/benchmarks.md): ipc/NCCL idle by size, under a matmul load at
# 1 GiB and 64 MiB, creation, memory per rank.
GOAL_RATIO = {1 << 20: 1.0, 16 << 20: 1.0, 64 << 20: 1.0, 256 << 20: 1.05, 1 << 30: 1.05, 4 << 30: 1.05}
GOAL_LOAD_1G, GOAL_LOAD_64M = 1.2, 4.0
GOAL_CREATE_S, GOAL_MEM_MIB = 0.050, 64
EXACT_SLICE = 256 << 20


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


def seeded_slices(size, seed, dev):
    """The bytes rank 0 sends in the bit-exact check, as (offset, tensor) slices of at most
    EXACT_SLICE: seeded on the GPU, so that every rank makes the same without holding a
    second copy of 4 GiB (the same generator, seed and GPU model give the same bytes)."""
    import torch
    for off in range(0, size, EXACT_SLICE):
        n = min(EXACT_SLICE, size - off)
        g = torch.Generator(device=dev)
        g.manual_seed(seed * 4099 + off // EXACT_SLICE)
        yield off, torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev, generator=g)


def exact_checks(lib, comm, buf, stream, dev, rank):
    """Every size once more with known bytes (and one odd size): every rank compares all it got.
    {size: true|false}."""
    import torch
    vp, st = ctypes_bcast.buffer_type, ctypes_bcast.cudaStream_t
    out = {}
    for k, size in enumerate(SIZES + [(64 << 20) + 7]):
        if rank == 0:
            for off, t in seeded_slices(size, k + 1, dev):
                buf[off:off + t.numel()].copy_(t)
        else:
            buf[:size].fill_(0xEE)
        torch.cuda.synchronize()
        lib.ncclBroadcast(vp(buf.data_ptr()), vp(buf.data_ptr()), size, ctypes_bcast.ncclUint8, 0, comm,
                          st(stream.cuda_stream))
        stream.synchronize()
        out[str(size)] = all(torch.equal(buf[off:off + t.numel()], t) for off, t in seeded_slices(size, k + 1, dev))
    return out


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
        # (docs/history/benchmarks-history.md, "Pushed when the sender waits
        # a little for its receiver"), and falls into the first round of 1 MiB
        # whenever the warm-up broadcast went the other way.
        t = timed(op, stream, iters(size))
        res.setdefault("bw_cold", {})[str(size)] = size / t / 1e9
        barrier()
        t = timed(op, stream, iters(size))
        res["bw"][str(size)] = size / t / 1e9
    res["exact"] = exact_checks(lib, comm, buf, stream, dev, rank)
    barrier()
    # Under load: a bf16 matmul loop on a side stream of every GPU while 1 GiB
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


def launch(outdir, preload, env_extra, world, timeout):
    env = dict(os.environ)
    env.update(env_extra)
    cmd = [sys.executable, os.path.abspath(__file__), "--outdir", outdir, "--timeout", str(timeout),
           "--world", str(world)]
    if preload:
        cmd += ["--preload", preload]
    subprocess.run(cmd, env=env, check=False)
    try:
        with open(os.path.join(outdir, "summary.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"ok": False, "errors": ["no summary.json in %s: %s" % (outdir, e)], "ranks": []}


def parse_shape(text):
    """'T+I' -> (T, I): T >= 1 trainer ranks, I >= 1 inference ranks."""
    parts = text.split("+")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise SystemExit("bad shape %r: write TRAINERS+INFERENCE, e.g. 1+3" % text)
    t, i = int(parts[0]), int(parts[1])
    if t < 1 or i < 1 or t + i > 64:
        raise SystemExit("bad shape %r: at least one rank of each, at most 64 ranks" % text)
    return t, i


def bench_args(argv):
    """This script's own options, taken out of argv; the rest goes to common.parse_args."""
    opts = {"shapes": "1+1", "runs": ",".join(RUNS), "dry_run": False}
    rest = [argv[0]]
    i = 1
    while i < len(argv):
        k = argv[i]
        if k in ("--shapes", "--runs"):
            if i + 1 >= len(argv):
                raise SystemExit("%s needs a value" % k)
            opts[k[2:]] = argv[i + 1]
            i += 2
            continue
        if k == "--dry-run":
            opts["dry_run"] = True
        else:
            rest.append(k)
        i += 1
    opts["shapes"] = [parse_shape(x) for x in opts["shapes"].split(",") if x.strip()]
    opts["runs"] = [r for r in opts["runs"].split(",") if r]
    bad = [r for r in opts["runs"] if r not in RUNS]
    if bad or not opts["runs"] or not opts["shapes"]:
        raise SystemExit("--runs takes some of %s; --shapes at least one T+I (got %r, %r)"
                         % (",".join(RUNS), opts["runs"], opts["shapes"]))
    return opts, rest


def plan(out, shim, t, i, runs):
    """[(run, outdir, preload, env)] for one shape."""
    world = t + i
    base = os.path.join(out, "%d+%d" % (t, i))
    titles = lambda ranks: ",".join("*ipc_bcast.py --worker --rank %d *" % r for r in ranks)  # noqa: E731
    shimmed = {"NCCLSHIM_WEIGHT_UPDATE": "auto", "NCCLSHIM_TRAINING_TITLES": titles(range(t)),
               "NCCLSHIM_INFERENCE_TITLES": titles(range(t, world))}
    envs = {"ipc": (shim, shimmed),
            # PyTorch's expandable segments: cuMemCreate memory, not exportable: the staged path
            "ipc-staged": (shim, dict(shimmed, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")),
            "nccl": (None, {})}
    out = []
    for r in runs:
        d = os.path.join(base, r)
        pre, extra = envs[r]
        out.append((r, d, pre, dict(extra, IPC_BENCH_CHILD="1", NCCLSHIM_LOG_DIR=os.path.join(d, "records"))))
    return out


def decisions(d):
    """(action, reason) of every rank's ctypes communicator in a run's records."""
    got = []
    rec = os.path.join(d, "records")
    for f in sorted(os.listdir(rec)) if os.path.isdir(rec) else []:
        with open(os.path.join(rec, f), errors="replace") as fh:
            for line in fh:
                try:
                    c = json.loads(line)
                except ValueError:
                    continue
                if c.get("type") == "comm" and c.get("caller", {}).get("api") == "ctypes":
                    got.append((c.get("rank"), c.get("action"), c.get("action_reason", "")))
    return sorted(got, key=lambda x: (x[0] is None, x[0]))


def slowest(rr, key, sub=None):
    """The slowest receiver's figure (ranks 1..N-1): the end of the chain, for a broadcast."""
    vals = []
    for r in rr[1:]:
        v = r[key] if sub is None else r[key][sub]
        vals.append(v)
    return min(vals)


def report(t, i, res, dec):
    """Prints one shape's tables; returns the goals as [(what, ok)]."""
    world = t + i
    r_ipc, r_st, r_nccl = res.get("ipc"), res.get("ipc-staged"), res.get("nccl")
    goals = []
    print("== %d trainer + %d inference ranks (%d GPUs): broadcast from rank 0, the slowest receiver's algorithm "
          "bandwidth (GB/s), same run; ipc-staged: the buffers in expandable segments (not exportable)"
          % (t, i, world))
    if dec:
        acts = sorted({a for _, a, _ in dec})
        print("the shim decided (NCCLSHIM_WEIGHT_UPDATE=auto): %s on %d ranks; rank 0's reason: %s"
              % ("/".join(map(str, acts)), len(dec), dec[0][2]))
        goals.append(("auto chose ipc on all %d ranks" % world, acts == ["ipc"] and len(dec) == world))
    print("%10s %10s %10s %8s %10s %12s %11s" % ("size", "NCCL", "ipc", "ipc/NCCL", "peer copy", "ipc/peer",
                                                 "ipc-staged"))
    nan = float("nan")
    peer = (r_ipc or r_nccl or [{}])[0].get("peer") or {}
    for size in SIZES:
        k = str(size)
        a = slowest(r_nccl, "bw", k) if r_nccl else nan
        b = slowest(r_ipc, "bw", k) if r_ipc else nan
        c = slowest(r_st, "bw", k) if r_st else nan
        p = peer.get(k, nan)
        print("%8d MiB %10.1f %10.1f %8.2f %10.1f %12.2f %11.1f" % (size >> 20, a, b, b / a if a else nan, p,
                                                                    b / p if p else nan, c))
        if r_ipc and r_nccl and size in GOAL_RATIO:
            want = GOAL_RATIO[size]
            goals.append(("ipc/NCCL >= %.2f at %d MiB (%.2f)" % (want, size >> 20, b / a), b / a >= want))
    print("the untimed first round of each size (slowest receiver; for 1 MiB, perhaps a process's first mapping):")
    for name, rr in (("NCCL", r_nccl), ("ipc", r_ipc)):
        if rr:
            print("%-10s" % name + "".join(" %d MiB %.1f;" % (int(k) >> 20, slowest(rr, "bw_cold", k))
                                           for k in sorted(rr[1]["bw_cold"], key=int)))
    print("bit-exact, every rank, every size (and 64 MiB + 7):")
    for name, rr in (("NCCL", r_nccl), ("ipc", r_ipc), ("ipc-staged", r_st)):
        if rr:
            bad = ["rank %d: %s" % (q, ",".join(str(int(k) >> 20) + " MiB" for k, v in sorted(r["exact"].items(),
                                                                                             key=lambda kv: int(kv[0]))
                                                   if not v))
                   for q, r in enumerate(rr) if not all(r["exact"].values())]
            print("%-10s %s" % (name, "yes" if not bad else "NO: " + "; ".join(bad)))
            goals.append(("%s bit-exact on all %d ranks" % (name, world), not bad))
    print("1 GiB broadcast while a bf16 matmul loop (8192^3) runs on every GPU (slowest receiver):")
    for name, rr in (("NCCL", r_nccl), ("ipc", r_ipc), ("ipc-staged", r_st)):
        if rr:
            ld = rr[-1]["load"]
            print("%-10s %6.1f GB/s; matmul %.0f TFLOPS alone, %.0f during the broadcasts (rank %d); a 512 MiB "
                  "same-device copy: %.0f GB/s under the load, %.0f alone" % (
                      name, min(r["load"]["bw"] for r in rr[1:]), ld["mm_alone_tflops"], ld["mm_load_tflops"],
                      len(rr) - 1, ld["local_copy_gbs"], ld["local_copy_alone_gbs"]))
    if r_ipc and r_nccl:
        ratio = min(r["load"]["bw"] for r in r_ipc[1:]) / min(r["load"]["bw"] for r in r_nccl[1:])
        print("ipc/NCCL under load: %.2f" % ratio)
        goals.append(("under load, ipc/NCCL >= %.1f at 1024 MiB (%.2f)" % (GOAL_LOAD_1G, ratio), ratio >= GOAL_LOAD_1G))
        for k in sorted(r_ipc[1]["load"].get("sizes", {}), key=int):
            a = min(r["load"]["sizes"][k] for r in r_nccl[1:])
            b = min(r["load"]["sizes"][k] for r in r_ipc[1:])
            print("under load, %4d MiB: NCCL %6.1f GB/s, ipc %6.1f, ipc/NCCL %.2f" % (int(k) >> 20, a, b, b / a))
            if int(k) == 64 << 20:
                goals.append(("under load, ipc/NCCL >= %.1f at 64 MiB (%.2f)" % (GOAL_LOAD_64M, b / a),
                              b / a >= GOAL_LOAD_64M))
    print("creation: from the last rank's call of ncclCommInitRank to the last return (each rank's own call, "
          "waiting for the others included); GPU memory per rank (torch.cuda.mem_get_info)")
    for name, rr in (("NCCL", r_nccl), ("ipc", r_ipc), ("ipc-staged", r_st)):
        if not rr:
            continue
        last_in = max(r["init_wall"][0] for r in rr)
        last_out = max(r["init_wall"][1] for r in rr)
        print("%-10s creation: %.3f s (per rank %s s); GPU memory per rank: %s MiB" % (
            name, last_out - last_in, " / ".join("%.3f" % r["init_s"] for r in rr),
            " / ".join("%.0f" % r["mem_mib"] for r in rr)))
        if name == "ipc":
            goals.append(("ipc creation <= %.0f ms (%.1f)" % (GOAL_CREATE_S * 1e3, (last_out - last_in) * 1e3),
                          last_out - last_in <= GOAL_CREATE_S))
            goals.append(("ipc memory <= %d MiB on every rank (%s)" % (GOAL_MEM_MIB, max(r["mem_mib"] for r in rr)),
                          all(r["mem_mib"] <= GOAL_MEM_MIB for r in rr)))
    for what, ok in goals:
        print("%s %s" % ("goal met:    " if ok else "goal NOT met:", what))
    print()
    return goals


def main():
    if "--worker" in sys.argv:
        return common.main(__file__, worker)
    if os.environ.get("IPC_BENCH_CHILD"):
        return common.main(__file__, worker)
    opts, rest = bench_args(sys.argv)
    args = common.parse_args(rest)
    out = os.path.abspath(args["outdir"])
    shim = os.path.abspath(args["preload"]) if args["preload"] else None
    if not shim and any(r != "nccl" for r in opts["runs"]):
        raise SystemExit("--preload SHIM is needed for the ipc runs (or --runs nccl)")
    # each run's bound (common.launch kills its workers after it): 4 GiB broadcasts, their check
    # and the load phase take minutes on 4 GPUs
    timeout = args["timeout"] if "--timeout" in rest else 400.0
    failed = False
    for t, i in opts["shapes"]:
        runs = plan(out, shim, t, i, opts["runs"])
        if opts["dry_run"]:
            for r, d, pre, env in runs:
                print("%d+%d %s: world %d, outdir %s, preload %s, env %s" % (
                    t, i, r, t + i, d, pre or "-", " ".join("%s=%s" % kv for kv in sorted(env.items()))))
            continue
        res, dec = {}, []
        for r, d, pre, env in runs:
            summary = launch(d, pre, env, t + i, timeout)
            rr = [x["result"] for x in summary["ranks"]]
            if not summary["ok"] or len(rr) != t + i or None in rr:
                print("FAIL: %d+%d %s: %s" % (t, i, r, summary["errors"]))
                failed = True
                continue
            res[r] = rr
            if r == "ipc":
                dec = decisions(d)
        if res:
            goals = report(t, i, res, dec)
            with open(os.path.join(out, "%d+%d" % (t, i), "goals.json"), "w") as f:
                json.dump([{"what": w, "ok": bool(ok)} for w, ok in goals], f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
