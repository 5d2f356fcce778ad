"""Colocated refit: trainer and inference engine as two processes on ONE GPU
(rank 0 trains, rank 1 serves), weights shipped as NeMo-RL does: ~4.3 GB in
45 broadcasts of packed buffers (up to 256 MiB), 2 CUDA streams in turn,
through a ctypes NCCL client written like vLLM's pynccl (tests/gpu/ctypes_bcast.py),
or nccl4py (NeMo-RL's trainer's) in the -4py cases (tests/gpu/clients.py).

In one run (each case a fresh pair of processes):
  plain     one process copies the same 45 pieces on the same GPU with
            cuMemcpyDtoDAsync (2 streams in turn): the limit, and the baseline
            of every ratio (measured in rank 0 of every case; the first case's is shown)
  nccl      NCCL alone (no shim): it refuses two ranks on one GPU
  shim      the shim's ipc communicator, NCCLSHIM_IPC_COPY=auto (copy engines)
  shim-ce   the same with NCCLSHIM_IPC_COPY=ce (copy engines only)
  shim-sm   the same with NCCLSHIM_IPC_COPY=sm (the copy kernel; not run by default)
  vmm       PyTorch's expandable segments (cuMemCreate memory, shared as file
            descriptors over Unix sockets: shim/ipc/ipc_vmm.c)
  staged-N  the same with NCCLSHIM_IPC_VMM=0 (the staged path, as before),
            NCCLSHIM_IPC_CHUNK_BYTES=N MiB pieces
  vmm-root  expandable segments on rank 0 (the trainer) only, the receiver's buffers
            cuMemAlloc memory (vLLM's sleep mode refuses expandable segments)
  nccl-4py, shim-4py, vmm-4py
            nccl, shim and vmm through nccl4py (it must import: pip install nccl4py,
            or build NCCL's bindings/nccl4py)
  torch-ipc the usual hand-written alternative, no NCCL: torch CUDA-IPC handles of
            2 staging buffers (256 MiB) in the inference process and interprocess
            events; the trainer copies into them, the inference process out of them
For each: the first refit (right after the communicator's warm-up) and warm
ones (rank 1's host time from a common start to its streams' end), bit-exact
checks, and single broadcasts of 4 KiB to 256 MiB against a plain copy of the
same size (back to back, 16 GiB's worth or 8 to 200 of them; the host's time
per call too).

    python3 bench/colocated.py --outdir DIR --preload build/libncclshim.so [--cases shim,shim-ce,...]
        [--shapes bucketed,per-param,moe]

Shapes (SHAPES): bucketed (above), per-param (the 291 tensors of a 7B dense model, one
broadcast each, one stream, as OpenRLHF), moe (20,000 tensors of 64 KiB to 4 MiB); each case of
each shape against the plain copy of the same tensors, measured in the same run.
JSON in DIR/colocated.json (by shape, then case); a table per shape on stdout.
"""
import ctypes
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
import clients  # noqa: E402
import common  # noqa: E402

MiB = 1 << 20
KiB = 1 << 10


def llama7b():
    """The tensors of a 7B dense model (Llama-2-7B, bf16), one broadcast each, as
    OpenRLHF sends them: embedding, 32 layers of q/k/v/o, gate/up/down and two
    norms, the final norm and the output head: 291 tensors, 13.5 GB."""
    h, ffn, vocab, bf16 = 4096, 11008, 32000, 2
    layer = [h * h * bf16] * 4 + [h * ffn * bf16] * 3 + [h * bf16] * 2
    return [vocab * h * bf16] + layer * 32 + [h * bf16, vocab * h * bf16]


def moe_like():
    """20,000 tensors of 64 KiB to 4 MiB (an MoE model's experts' matrices, each
    its own broadcast): 60% up to 256 KiB, 30% up to 1 MiB, 10% up to 4 MiB,
    from a fixed seed: about 10.6 GB."""
    import random
    rnd = random.Random(36)
    out = []
    for _ in range(20000):
        u = rnd.random()
        lo, hi = (64 * KiB, 256 * KiB) if u < 0.6 else (256 * KiB, MiB) if u < 0.9 else (MiB, 4 * MiB)
        out.append(rnd.randrange(lo // 4096, hi // 4096 + 1) * 4096)
    return out


# The refit's shapes (--shapes; COLOCATED_SHAPE in each child).  bucketed: 4100 MiB
# (4.30 GB) in 45 broadcasts of packed buffers, 2 streams in turn, as NeMo-RL:
# 14 full 256 MiB buffers, then smaller ones (the last of each group of tensors,
# norms, biases); slices of one allocation.  per-param and moe: a tensor a
# broadcast, each its own allocation (as a model's parameters are), one stream.
SHAPES = {"bucketed": [256 * MiB] * 14 + [32 * MiB] * 14 + [4 * MiB] * 17, "per-param": llama7b(),
          "moe": moe_like()}
SHAPE = os.environ.get("COLOCATED_SHAPE", "bucketed")
LAYOUT = SHAPES[SHAPE] if SHAPE in SHAPES else SHAPES["bucketed"]
NSTREAMS = 2 if SHAPE == "bucketed" else 1
SIZES = [4096, MiB, 16 * MiB, 64 * MiB, 256 * MiB]
# COLOCATED_REFITS: more refits show the steady state of expandable segments, whose
# pieces a rank exports only when it comes first on a hop (docs/benchmarks.md).
REFITS = int(os.environ.get("COLOCATED_REFITS", "6"))
# COLOCATED_PAUSE_S: seconds between refits (a training step; 0: back to back).
PAUSE_S = float(os.environ.get("COLOCATED_PAUSE_S", "0"))
CASES = ["nccl", "shim", "shim-ce", "vmm", "staged-64", "torch-ipc"]
DEV = int(os.environ.get("COLOCATED_DEVICE", "0"))


def reps(sz):
    """Broadcasts timed back to back at size sz: 16 GiB's worth, 8 to 200
    (at 64 MiB 200, ~9 ms on H200: the ranks' ~0.1 ms skew out of the
    barrier stays near 1%)."""
    return max(8, min(200, (16 << 30) // sz))


def offsets():
    out, off = [], 0
    for sz in LAYOUT:
        out.append((off, sz))
        off += sz
    return out, off


def fill(n, seed):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=g)


class Barrier:
    """Both ranks through a file each (no port); spins with 50 us sleeps, so
    that the two leave within ~0.1 ms of each other."""

    def __init__(self, outdir, rank):
        self.dir, self.rank, self.n = outdir, rank, 0

    def __call__(self):
        self.n += 1
        common.put_file(os.path.join(self.dir, "bar.%d.%d" % (self.n, self.rank)), b"1")
        other = os.path.join(self.dir, "bar.%d.%d" % (self.n, 1 - self.rank))
        deadline = time.monotonic() + 120
        while not os.path.exists(other):
            if time.monotonic() > deadline:
                raise TimeoutError("barrier %d: the other rank did not come" % self.n)
            time.sleep(5e-5)


def libcuda():
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuMemcpyDtoDAsync_v2
    f.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return f


def tensors(rank):
    """This rank's buffers of the refit: the root's filled (bytes of fill(total, 1), piece by piece),
    the receiver's zeroed.  bucketed: slices of one allocation; the others: an allocation each."""
    import torch
    pieces, total = offsets()
    if SHAPE == "bucketed":
        whole = fill(total, 1) if rank == 0 else torch.zeros(total, dtype=torch.uint8, device="cuda")
        return whole, [whole[off:off + sz] for off, sz in pieces]
    bufs = [torch.empty(sz, dtype=torch.uint8, device="cuda") for _, sz in pieces]
    if rank == 0:
        W = fill(total, 1)
        for b, (off, sz) in zip(bufs, pieces):
            b.copy_(W[off:off + sz])
        del W
    else:
        for b in bufs:
            b.zero_()
    torch.cuda.synchronize()
    return None, bufs


def exact(bufs):
    """Whether the receiver's buffers hold the root's bytes."""
    import torch
    pieces, total = offsets()
    W = fill(total, 1)
    ok = all(bool(torch.equal(b, W[off:off + sz])) for b, (off, sz) in zip(bufs, pieces))
    del W
    return ok


def plain(src, streams):
    """The plain copy in this process: the same tensors, into buffers of the same shape (a big
    one for bucketed), on the shape's streams; and, bucketed, the single sizes."""
    import torch
    cp = libcuda()
    _, dst = tensors(1)
    pairs = [(d.data_ptr(), s_.data_ptr(), s_.numel()) for d, s_ in zip(dst, src)]

    def refit():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i, (d, s_, n) in enumerate(pairs):
            assert cp(d, s_, n, streams[i % NSTREAMS].cuda_stream) == 0
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    times = [refit() for _ in range(REFITS)]
    ok = all(bool(torch.equal(d, s_)) for d, s_ in zip(dst, src))
    sizes = {}
    big = src[0] if SHAPE == "bucketed" else None
    for sz in (SIZES if big is not None else []):
        n = reps(sz)
        s = streams[0]
        cp(dst[0].data_ptr(), big.data_ptr(), sz, s.cuda_stream)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            cp(dst[0].data_ptr(), big.data_ptr(), sz, s.cuda_stream)
        torch.cuda.synchronize()
        sizes[str(sz)] = (time.perf_counter() - t0) / n
    del dst, pairs
    torch.cuda.synchronize()
    return {"first_s": times[0], "warm_s": statistics.median(times[1:]), "all_s": times, "exact": ok,
            "size_s": sizes}


def worker_nccl_like(args, whole, bufs, streams, barrier, res):
    """The NCCL client (tests/gpu/clients.py: ctypes, or nccl4py for the -4py
    cases): init, warm-up all-reduce, refits, single sizes."""
    import torch
    rank = args["rank"]
    t0 = time.perf_counter()
    try:
        client = clients.make(os.environ.get("COLOCATED_CLIENT", "ctypes"), args, "colocated", DEV)
    except RuntimeError as e:
        res["init_error"] = str(e)
        return
    res["init_s"] = time.perf_counter() - t0
    one = torch.ones(1, dtype=torch.float32, device="cuda")
    streams[0].wait_stream(torch.cuda.current_stream())  # the buffer is written before the stream reads it
    client.sum_floats(one, streams[0])
    torch.cuda.synchronize()
    res["warmup"] = one.item()
    refit_ops = [client.prepare(b, 0, streams[i % NSTREAMS]) for i, b in enumerate(bufs)]

    def refit():
        torch.cuda.synchronize()
        time.sleep(PAUSE_S)  # the training step between two refits
        barrier()
        t0 = time.perf_counter()
        for op in refit_ops:
            op()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return time.perf_counter() - t0, t1 - t0
    times, enq, ok = [], [], []
    for k in range(REFITS):
        check = rank == 1 and k in (0, REFITS - 1)
        if check:
            for b in bufs:
                b.zero_()
        t, e = refit()
        times.append(t)
        enq.append(e)
        if check:
            ok.append(exact(bufs))
    res.update(first_s=times[0], warm_s=statistics.median(times[1:]), all_s=times, enqueue_s=enq, exact=ok,
               calls=len(refit_ops))
    if whole is None:  # the single sizes: bucketed only
        barrier()
        client.destroy()
        return
    buf = whole
    sizes, enq = {}, {}
    for sz in SIZES:
        n = reps(sz)
        op = client.prepare(buf[:sz], 0, streams[0])
        op()
        torch.cuda.synchronize()
        barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            op()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        sizes[str(sz)] = (time.perf_counter() - t0) / n
        enq[str(sz)] = (t1 - t0) / n
    res["size_s"] = sizes
    res["size_enqueue_s"] = enq  # the host's time per call: under size_s, the GPU sets the pace
    # The same sizes on 2 streams in turn (a refit's pattern): a broadcast's
    # round trip between the processes overlaps the one before.
    sizes2 = {}
    for sz in SIZES:
        n = reps(sz) // 2 * 2
        ops = [client.prepare(buf[:sz], 0, s) for s in streams]
        torch.cuda.synchronize()
        barrier()
        t0 = time.perf_counter()
        for i in range(n):
            ops[i % 2]()
        torch.cuda.synchronize()
        sizes2[str(sz)] = (time.perf_counter() - t0) / n
    res["size2_s"] = sizes2
    barrier()
    client.destroy()


def worker_torch_ipc(args, W, D, streams, barrier, res):
    """The hand-written alternative: 2 staging buffers of the inference process,
    shared with torch's CUDA IPC, and interprocess events; host counters in a
    shared file say when a record may be waited for."""
    import mmap
    import torch
    from torch.multiprocessing.reductions import reduce_tensor
    rank, outdir = args["rank"], args["outdir"]
    cpath = os.path.join(outdir, "counters")
    if rank == 1:
        with open(cpath + ".tmp", "wb") as f:
            f.write(b"\0" * 4096)
        os.replace(cpath + ".tmp", cpath)
        staging = [torch.empty(max(LAYOUT), dtype=torch.uint8, device="cuda") for _ in range(2)]
        evs = [torch.cuda.Event(interprocess=True) for _ in range(2)]
        common.put_file(os.path.join(outdir, "share.1"),
                        pickle.dumps(([reduce_tensor(s) for s in staging], [e.ipc_handle() for e in evs])))
        peer = pickle.loads(common.wait_file(os.path.join(outdir, "share.0")))
        pevs = [torch.cuda.Event.from_ipc_handle(torch.device("cuda", DEV), h) for h in peer]
    else:
        evs = [torch.cuda.Event(interprocess=True) for _ in range(2)]
        common.put_file(os.path.join(outdir, "share.0"), pickle.dumps([e.ipc_handle() for e in evs]))
        t0 = time.perf_counter()
        shared, peer = pickle.loads(common.wait_file(os.path.join(outdir, "share.1")))
        staging = [f(*a) for f, a in shared]
        res["open_s"] = time.perf_counter() - t0
        pevs = [torch.cuda.Event.from_ipc_handle(torch.device("cuda", DEV), h) for h in peer]
    common.wait_file(cpath)
    fd = os.open(cpath, os.O_RDWR)
    mm = mmap.mmap(fd, 4096)
    os.close(fd)
    cnt = ctypes.c_uint64.from_buffer(mm, 0 if rank == 0 else 64)       # this rank's count
    other = ctypes.c_uint64.from_buffer(mm, 64 if rank == 0 else 0)     # the other's
    pieces, total = offsets()
    state = {"n": 0}  # broadcasts so far, the same on both ranks

    def wait_other(v):
        deadline = time.monotonic() + 60
        while other.value < v:
            if time.monotonic() > deadline:
                raise TimeoutError("torch-ipc: the other rank stopped at %d (want %d)" % (other.value, v))

    def one(off, sz, i):
        g = state["n"]  # global sequence number of this broadcast
        slot, s = g % 2, streams[i % 2]
        if rank == 0:
            if g >= 2:
                wait_other(g - 1)  # the consumer recorded its copy-out of g - 2
                s.wait_event(pevs[slot])
            with torch.cuda.stream(s):
                staging[slot][:sz].copy_(W[off:off + sz], non_blocking=True)
            evs[slot].record(s)
        else:
            wait_other(g + 1)
            s.wait_event(pevs[slot])
            with torch.cuda.stream(s):
                D[off:off + sz].copy_(staging[slot][:sz], non_blocking=True)
            evs[slot].record(s)
        state["n"] = g + 1
        cnt.value = g + 1

    def refit():
        torch.cuda.synchronize()
        barrier()
        t0 = time.perf_counter()
        for i, (off, sz) in enumerate(pieces):
            one(off, sz, i)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return time.perf_counter() - t0, t1 - t0
    times, enq, exact = [], [], []
    for k in range(REFITS):
        check = rank == 1 and k in (0, REFITS - 1)
        if check:
            D.zero_()
        t, e = refit()
        times.append(t)
        enq.append(e)
        if check:
            exact.append(bool(torch.equal(D, fill(total, 1))))
    res.update(first_s=times[0], warm_s=statistics.median(times[1:]), all_s=times, enqueue_s=enq, exact=exact)
    sizes = {}
    for sz in SIZES:
        n = reps(sz)
        one(0, sz, 0)
        torch.cuda.synchronize()
        barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            one(0, sz, 0)
        torch.cuda.synchronize()
        sizes[str(sz)] = (time.perf_counter() - t0) / n
    res["size_s"] = sizes
    barrier()
    del cnt, other
    torch.cuda.synchronize()


def worker(args):
    rank = args["rank"]
    # vmm-root: expandable segments on the trainer only (vLLM's sleep mode refuses them), set
    # before torch's allocator reads it.
    if os.environ.get("COLOCATED_CASE") == "vmm-root" and rank == 0:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch
    torch.cuda.set_device(DEV)  # both ranks on one GPU
    res = {"gpu": torch.cuda.get_device_name(DEV), "case": os.environ.get("COLOCATED_CASE")}
    res["shape"] = SHAPE
    streams = [torch.cuda.Stream() for _ in range(2)]
    barrier = Barrier(os.path.abspath(args["outdir"]), rank)
    whole, bufs = tensors(rank)
    if rank == 0:
        res["plain"] = plain(bufs, streams)
    torch.cuda.synchronize()
    barrier()
    if res["case"] == "torch-ipc":
        worker_torch_ipc(args, whole if rank == 0 else None, whole if rank == 1 else None, streams, barrier, res)
    else:
        worker_nccl_like(args, whole, bufs, streams, barrier, res)
    return res


def run_case(out, preload, case, shape):
    d = os.path.join(out, shape, case)
    os.makedirs(os.path.join(d, "records"), exist_ok=True)
    for name in os.listdir(d):
        if name.startswith(("bar.", "ncclid", "share.", "counters")):
            os.unlink(os.path.join(d, name))
    env = dict(os.environ, COLOCATED_CASE=case, COLOCATED_CHILD="1", NCCLSHIM_LOG_DIR=os.path.join(d, "records"),
               NCCL_DEBUG="WARN", COLOCATED_SHAPE=shape)
    cmd = [sys.executable, os.path.abspath(__file__), "--outdir", d, "--timeout", "150"]
    if case.startswith(("shim", "staged", "vmm")):
        env.update(NCCLSHIM_WEIGHT_UPDATE="auto",
                   NCCLSHIM_TRAINING_TITLES="*colocated.py --worker --rank 0 *",
                   NCCLSHIM_INFERENCE_TITLES="*colocated.py --worker --rank 1 *")
        cmd += ["--preload", preload]
    if case.endswith("-4py"):
        env["COLOCATED_CLIENT"] = "nccl4py"
    if case == "shim-ce":
        env["NCCLSHIM_IPC_COPY"] = "ce"
    if case == "shim-sm":
        env["NCCLSHIM_IPC_COPY"] = "sm"
    if case.startswith(("staged-", "vmm")) and case != "vmm-root":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if case.startswith("staged-"):
        env["NCCLSHIM_IPC_VMM"] = "0"
        env["NCCLSHIM_IPC_CHUNK_BYTES"] = str(int(case.split("-")[1]) * MiB)
    t0 = time.monotonic()
    subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL)
    s = json.load(open(os.path.join(d, "summary.json")))
    s["wall_s"] = time.monotonic() - t0
    return s


def main():
    if "--worker" in sys.argv:
        # Not common.main: it puts rank r on GPU r.
        args = common.parse_args(sys.argv)
        res = worker(args)
        res["rank"], res["pid"] = args["rank"], os.getpid()
        common.emit_result(res)
        return 0
    cases, shapes = CASES, ["bucketed"]
    for opt in ("--cases", "--shapes"):
        if opt in sys.argv:
            i = sys.argv.index(opt)
            if opt == "--cases":
                cases = sys.argv[i + 1].split(",")
            else:
                shapes = sys.argv[i + 1].split(",")
            del sys.argv[i:i + 2]
    bad = [x for x in shapes if x not in SHAPES]
    if bad:
        raise SystemExit("unknown shape(s) %s: %s" % (bad, ", ".join(SHAPES)))
    args = common.parse_args(sys.argv)
    if os.environ.get("COLOCATED_CHILD"):
        s = common.launch(__file__, args)
        print(json.dumps(s, sort_keys=True))
        return 0 if s["ok"] else 1
    out = os.path.abspath(args["outdir"])
    preload = os.path.abspath(args["preload"]) if args["preload"] else None
    every = {}
    for shape in shapes:
        results = {}
        for case in cases:
            if (case.startswith(("shim", "staged", "vmm")) and not preload) or (case == "torch-ipc" and
                                                                               shape != "bucketed"):
                continue
            results[case] = run_case(out, preload, case, shape)
        every[shape] = results
        report(results, shape)
    common.put_file(os.path.join(out, "colocated.json"), json.dumps(every, indent=1, sort_keys=True).encode())
    return 0 if all(case == "nccl" or s["ok"] for r in every.values() for case, s in r.items()) else 1


def report(results, shape):
    pl = None
    for case, s in results.items():
        r = [x["result"] for x in s["ranks"]]
        if r and r[0] and "plain" in r[0]:
            pl = r[0]["plain"]
            gpu = r[0]["gpu"]
            break
    if not pl:
        print("no plain copy measured; errors: %s" % {c: s["errors"] for c, s in results.items()})
        return
    layout = SHAPES[shape]
    GB = sum(layout) / 1e9
    print("colocated refit, shape %s, on one %s: %.2f GB in %d broadcasts (%s); rank 1's time, ms" % (
        shape, gpu, GB, len(layout), "2 streams in turn" if shape == "bucketed" else "one stream"))
    print("plain copy (one process, cuMemcpyDtoDAsync): warm %.2f ms (%.0f GB/s), first %.2f ms; exact %s" % (
        pl["warm_s"] * 1e3, GB / pl["warm_s"], pl["first_s"] * 1e3, pl["exact"]))
    print("%-10s %9s %9s %8s %9s %10s %10s %s" % ("case", "warm ms", "GB/s", "x plain", "first ms", "first/warm",
                                                  "enq0 ms", "bit-exact / note"))
    for case, s in results.items():
        r = [x["result"] for x in s["ranks"]]
        r1 = r[1] if len(r) > 1 else None
        if not r1 or "warm_s" not in r1:
            why = (r1 or {}).get("init_error") or (r[0] or {}).get("init_error") if r else None
            print("%-10s %s" % (case, "init failed: %s" % why if why else "FAILED: %s" % s["errors"][:3]))
            continue
        r0 = r[0]
        print("%-10s %9.2f %9.0f %8.2f %9.2f %10.2f %10.2f %s" % (
            case, r1["warm_s"] * 1e3, GB / r1["warm_s"], r1["warm_s"] / pl["warm_s"], r1["first_s"] * 1e3,
            r1["first_s"] / r1["warm_s"], statistics.median(r0.get("enqueue_s", [0])[1:]) * 1e3,
            r1["exact"]))
    if shape != "bucketed":
        return
    print("single broadcasts back to back (same buffer, one stream), rank 1's time per broadcast: us, and x the "
          "plain copy's rate")
    print("%-10s" % "case" + "".join("%18s" % ("%d KiB" % (sz >> 10) if sz < MiB else "%d MiB" % (sz >> 20))
                                     for sz in SIZES))
    print("%-10s" % "plain" + "".join("%10.1f us %5s" % (pl["size_s"][str(sz)] * 1e6, "") for sz in SIZES))
    rows = [(case, "size_s") for case in results] + [(case + " 2s", "size2_s") for case in results]
    for label, key in rows:
        s = results[label.split()[0]]
        r = [x["result"] for x in s["ranks"]]
        r1 = r[1] if len(r) > 1 else None
        if not r1 or key not in r1:
            continue
        case = label
        print("%-10s" % case + "".join("%10.1f us %5.2f" % (r1[key][str(sz)] * 1e6,
                                                             pl["size_s"][str(sz)] / r1[key][str(sz)])
                                       for sz in SIZES))
    print("(\"2s\": the same broadcasts on 2 streams in turn, as in a refit; the plain copy on one stream)")
    print("host time per call in those single broadcasts (rank 0, the root, then rank 1), us:")
    for case, s in results.items():
        r = [x["result"] for x in s["ranks"]]
        if len(r) > 1 and all(x and "size_enqueue_s" in x for x in r):
            print("%-10s" % case + "".join("%10.1f /%6.1f " % (r[0]["size_enqueue_s"][str(sz)] * 1e6,
                                                               r[1]["size_enqueue_s"][str(sz)] * 1e6)
                                           for sz in SIZES))


if __name__ == "__main__":
    sys.exit(main())
