"""GPU test (a): torch.distributed all-reduce over NCCL, 2 ranks, one GPU each.

Each rank all-reduces a float32 and a bfloat16 tensor whose sums are exact
(small integers), so the result is bit-identical with and without the shim and
equal to the value computed on the CPU.  Prints (in the RESULT line) the SHA-256
of each result and of the expected value.

    python3 tests/gpu/torch_allreduce.py --outdir DIR [--preload SHIM]
"""
import datetime
import os
import sys

import common

N = 1 << 20


def _base():
    import torch
    f32 = torch.arange(N, dtype=torch.float32)  # up to 3 * 2^20 < 2^24: exact in float32
    bf16 = (torch.arange(N) % 64).to(torch.float32)  # up to 63 * 3 = 189 < 256: exact in bfloat16
    return f32, bf16


def inputs(rank):
    import torch
    f32, bf16 = _base()
    return f32 * (rank + 1), (bf16 * (rank + 1)).to(torch.bfloat16)


def expected(world):
    import torch
    f32, bf16 = _base()
    s = sum(r + 1 for r in range(world))
    return f32 * s, (bf16 * s).to(torch.bfloat16)


def init_torch(args):
    """The default process group on NCCL, rendezvous through a FileStore in outdir."""
    import torch
    import torch.distributed as dist
    rank, world = args["rank"], args["world"]
    store = os.path.join(os.path.abspath(args["outdir"]), "torch.store")
    # No device_id: the communicator is made lazily, blocking, at the first
    # collective (eager init may pick NCCL's non-blocking mode, where the init
    # call returns ncclInProgress rather than ncclSuccess).
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))


def allreduce_checks(args):
    import torch
    import torch.distributed as dist
    dev = torch.device("cuda", args["rank"])
    f32, bf16 = (t.to(dev) for t in inputs(args["rank"]))
    dist.all_reduce(f32)
    dist.all_reduce(bf16)
    torch.cuda.synchronize()
    e32, ebf = expected(args["world"])
    return {"allreduce_f32": common.sha256_tensor(f32), "allreduce_f32_expected": common.sha256_tensor(e32),
            "allreduce_bf16": common.sha256_tensor(bf16), "allreduce_bf16_expected": common.sha256_tensor(ebf)}


def worker(args):
    import torch.distributed as dist
    init_torch(args)
    res = allreduce_checks(args)
    dist.destroy_process_group()  # so that the shim writes comm_end at the destroy
    return res


if __name__ == "__main__":
    sys.exit(common.main(__file__, worker))
