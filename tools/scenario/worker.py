"""One rank of the scenario (tools/scenario/scenario.py starts 2 trainer ranks and 1 or 2
inference ranks).

    python3 worker.py --role trainer|inference --rank R --gpu G --dir RUNDIR --title TITLE [...]

Roles, in NeMo-RL's order:
  trainer rank 0 and 1 (a DTensorPolicyWorker):
    1. init_collective: the weight-update communicator (all ranks) through a ctypes
       client written like vLLM's pynccl; rank 0 makes the unique ID
       (ncclGetUniqueId through ctypes, so the shim marks it) and writes it to a file
    2. warm-up: all-reduce of one float on it (vLLM's PyNcclCommunicator does this)
    3. torch.distributed (NCCL backend) between the 2 trainers, then a timed all-reduce
    4. refits: packed buffers of seeded random bytes, broadcast from rank 0 on 2 streams
       in turn (NeMo-RL's packed_broadcast_producer / _consumer)
  inference (a VllmGenerationWorker, each rank of a tensor-parallel engine): 1, 2 and 4,
    receiving every buffer whole; checks every byte.

Prints `STEP <name>` lines on stderr as it goes and one `RESULT <json>` line on stdout.
Only this file imports torch; scenario.py (the launcher) does not.
"""
import argparse
import ctypes
import datetime
import json
import os
import sys
import time


def step(name):
    print("STEP %.3f %s" % (time.time(), name), file=sys.stderr, flush=True)


def set_title(title):
    """What Ray does for its actors (setproctitle): /proc/self/cmdline becomes TITLE,
    which the shim reads as the process title (its role evidence).  Rewrites the
    argument area in place (it is longer than TITLE: the arguments include it).
    `exec -a` would do too, but it loses a virtual environment's python."""
    try:
        import setproctitle  # what Ray uses, where it is installed
        setproctitle.setproctitle(title)
    except ImportError:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        start, end = int(fields[48 - 3]), int(fields[49 - 3])  # arg_start, arg_end
        raw = title.encode()[: max(0, end - start - 1)]
        buf = raw + b"\0" * (end - start - len(raw))
        ctypes.memmove(start, buf, len(buf))
    with open("/proc/self/cmdline", "rb") as f:
        got = f.read().split(b"\0")[0].decode(errors="replace")
    return got


# ---------------------------------------------------------------- the ctypes client
# The GPU tests' client, written like vLLM's pynccl_wrapper (CDLL with RTLD_LOCAL,
# one dlsym per function); torch's libnccl.so.2 (the nvidia-nccl wheel), found as
# the GPU tests find it; files between ranks as the GPU tests pass them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"))
from common import nccl_so_path, put_file, wait_file  # noqa: E402
from ctypes_bcast import NCCLLibrary, buffer_type, cudaStream_t, ncclFloat32, ncclSum, ncclUint8  # noqa: E402


def all_reduce(lib, t, comm, stream):
    lib.ncclAllReduce(buffer_type(t.data_ptr()), buffer_type(t.data_ptr()), t.numel(), ncclFloat32, ncclSum, comm,
                      cudaStream_t(stream.cuda_stream))


def broadcast(lib, t, root, comm, stream):
    lib.ncclBroadcast(buffer_type(t.data_ptr()), buffer_type(t.data_ptr()), t.numel(), ncclUint8, root, comm,
                      cudaStream_t(stream.cuda_stream))


# ---------------------------------------------------------------- the weights
def packed_sizes(total, per):
    sizes = []
    while total > 0:
        sizes.append(min(per, total))
        total -= sizes[-1]
    return sizes


def make_weights(torch, dev, sizes, refit):
    """Seeded random bytes, made on this GPU: the sender's buffers, and what a
    receiver compares with (the same generator, seed and size on the same GPU model)."""
    out = []
    for k, n in enumerate(sizes):
        g = torch.Generator(device=dev)
        g.manual_seed(1_000_003 * (refit + 1) + k)
        out.append(torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev, generator=g))
    return out


def checksum(torch, t):
    """Two sums over the int64 words (exact, wrapping): the second weighs each word by
    its position mod 65521, so moved words change it too.  Bytes beyond a multiple of 8
    are added one by one."""
    n8 = t.numel() // 8
    v = t[: n8 * 8].view(torch.int64)
    s1 = int(v.sum().item())
    w = (torch.arange(n8, device=t.device, dtype=torch.int64) % 65521) + 1
    s2 = int((v * w).sum().item())
    tail = int(t[n8 * 8:].to(torch.int64).sum().item()) if t.numel() % 8 else 0
    return "%016x%016x%04x" % (s1 & (2**64 - 1), s2 & (2**64 - 1), tail & 0xFFFF)


# ---------------------------------------------------------------- the rank
def init_collective(lib, a, world):
    """NeMo-RL's vllm_backend.init_collective / the policy worker's: the weight-update
    group.  (The name matters: the shim's default call-site pattern '* init_collective'.)"""
    uid_path = os.path.join(a.dir, "weight_update.uid")
    if a.group_rank == 0:
        uid = lib.ncclGetUniqueId()
        put_file(uid_path, bytes(uid.internal))
    else:
        uid = lib.unique_id_from_bytes(wait_file(uid_path, a.wait))
    return lib.ncclCommInitRank(world, uid, a.group_rank)


def run(a):
    res = {"role": a.role, "rank": a.rank, "group_rank": a.group_rank, "pid": os.getpid(), "gpu": a.gpu}
    step("title")
    res["title"] = set_title(a.title)
    step("import torch")
    import torch
    torch.cuda.set_device(a.gpu)
    dev = torch.device("cuda", a.gpu)
    world = a.world
    step("load NCCL through ctypes")
    lib = NCCLLibrary(nccl_so_path())
    res["nccl_version"] = lib.ncclGetVersion()

    step("init_collective: the weight-update communicator (%d ranks)" % world)
    t0 = time.perf_counter()
    wu = init_collective(lib, a, world)
    res["wu_init_s"] = time.perf_counter() - t0
    step("warm-up all-reduce of one float on the weight-update communicator")
    cur = torch.cuda.current_stream()
    one = torch.ones(1, dtype=torch.float32, device=dev)
    all_reduce(lib, one, wu, cur)
    torch.cuda.synchronize()
    res["warmup"] = one.item()
    if res["warmup"] != float(world):
        raise RuntimeError("warm-up all-reduce gave %s, expected %s" % (res["warmup"], float(world)))

    if a.role == "trainer" and a.rank == 0 and a.stat_cmd:
        # calibration: what the weight-update communicator holds, before training starts
        import subprocess
        step("efasim-stat after the weight-update communicator")
        res["stat_after_wu"] = subprocess.run(a.stat_cmd.split("\x1f"), capture_output=True, text=True,
                                              timeout=30).stdout

    if a.role == "trainer":
        import torch.distributed as dist
        step("torch.distributed init_process_group (NCCL, 2 trainer ranks)")
        dist.init_process_group("nccl", init_method="file://" + os.path.join(a.dir, "torch.store"), rank=a.rank,
                                world_size=2, timeout=datetime.timedelta(seconds=a.wait))
        nel = a.allreduce_bytes // 4
        x = torch.full((nel,), float(a.rank + 1), dtype=torch.float32, device=dev)
        step("training all-reduce: first (creates the training communicator)")
        t0 = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        res["train_first_allreduce_s"] = time.perf_counter() - t0
        res["train_allreduce_ok"] = bool(torch.all(x == 3.0).item())
        if a.rank == 0 and a.stat_cmd:
            import subprocess
            step("efasim-stat after the training communicator")
            res["stat_after_train"] = subprocess.run(a.stat_cmd.split("\x1f"), capture_output=True, text=True,
                                                     timeout=30).stdout
        step("training all-reduce: %d timed iterations of %d MiB" % (a.iters, a.allreduce_bytes >> 20))
        dist.all_reduce(x)  # one more warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / a.iters
        res["train_allreduce_bytes"] = nel * 4
        res["train_allreduce_s"] = dt
        res["train_algbw_GBps"] = nel * 4 / dt / 1e9
        res["train_busbw_GBps"] = res["train_algbw_GBps"] * 2 * (2 - 1) / 2
        del x

    sizes = packed_sizes(a.refit_bytes, a.buffer_bytes)
    res["refit_buffers"] = len(sizes)
    res["refit_bytes"] = sum(sizes)
    res["refits"] = []
    streams = [torch.cuda.Stream(device=dev) for _ in range(2)]
    recv = None
    if a.group_rank != 0:
        recv = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
    go = os.path.join(a.dir, "refit%d.go")
    for refit in range(a.refits):
        step("refit %d: prepare" % refit)
        if a.group_rank == 0:
            bufs = make_weights(torch, dev, sizes, refit)
            sums = [checksum(torch, b) for b in bufs]
            torch.cuda.synchronize()
            put_file(go % refit, json.dumps(sums).encode())
        else:
            # wait on the host for the sender, so that no GPU waits long on the
            # communicator (the training phase before the first refit may be slow)
            wait_file(go % refit, a.wait)
            bufs = recv
            torch.cuda.synchronize()
        step("refit %d: %d packed buffers, %d MiB, broadcast from rank 0 on 2 streams in turn"
             % (refit, len(sizes), sum(sizes) >> 20))
        all_reduce(lib, one, wu, cur)  # every rank is here
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k, b in enumerate(bufs):
            s = streams[k % 2]
            s.wait_stream(cur)
            broadcast(lib, b, 0, wu, s)
        for s in streams:
            cur.wait_stream(s)
        all_reduce(lib, one, wu, cur)  # every rank has received everything
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        step("refit %d: verify" % refit)
        entry = {"refit": refit, "seconds": dt, "GBps": sum(sizes) / dt / 1e9}
        if a.group_rank == 0:
            entry["checksums"] = sums
        else:
            entry["checksums"] = [checksum(torch, b) for b in bufs]
            sent = json.loads(wait_file(go % refit, a.wait))
            entry["checksums_equal"] = entry["checksums"] == sent
            exact = True
            for k, b in enumerate(bufs):
                g = torch.Generator(device=dev)
                g.manual_seed(1_000_003 * (refit + 1) + k)
                ref = torch.randint(0, 256, (sizes[k],), dtype=torch.uint8, device=dev, generator=g)
                if not torch.equal(b, ref):
                    exact = False
                del ref
            entry["bit_exact"] = exact
        res["refits"].append(entry)
        if a.group_rank == 0:
            del bufs
    torch.cuda.synchronize()

    # every rank is done before any destroys (and, in the calibration, the QPs of
    # all ranks stay held until trainer rank 0 has read the figures)
    step("barrier before destroy")
    put_file(os.path.join(a.dir, "exit.%d" % a.group_rank), b"1")
    for r in range(world):
        wait_file(os.path.join(a.dir, "exit.%d" % r), a.wait)
    step("destroy")
    if a.role == "trainer":
        import torch.distributed as dist
        dist.destroy_process_group()
    lib.ncclCommDestroy(wu)
    res["ok"] = True
    step("done")
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--role", choices=("trainer", "inference"), required=True)
    p.add_argument("--rank", type=int, required=True, help="trainer rank (0, 1); the engine's rank for inference")
    p.add_argument("--group-rank", type=int, required=True, help="rank in the weight-update communicator")
    p.add_argument("--world", type=int, default=3, help="ranks in the weight-update communicator")
    p.add_argument("--gpu", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--title", required=True)
    p.add_argument("--allreduce-bytes", type=int, default=256 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--refit-bytes", type=int, default=3 << 30)
    p.add_argument("--buffer-bytes", type=int, default=1 << 30)
    p.add_argument("--refits", type=int, default=3)
    p.add_argument("--wait", type=float, default=240.0, help="seconds to wait for a peer's file")
    p.add_argument("--stat-cmd", default="", help="calibration: efasim-stat command (\\x1f-separated)")
    a = p.parse_args()
    try:
        res = run(a)
    except BaseException as e:  # the launcher shows the last STEP and this
        import traceback
        traceback.print_exc()
        print("FAILED %s: %s" % (type(e).__name__, e), file=sys.stderr, flush=True)
        print("RESULT " + json.dumps({"ok": False, "error": "%s: %s" % (type(e).__name__, e)}), flush=True)
        sys.stdout.flush()
        os._exit(1)
    print("RESULT " + json.dumps(res, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
