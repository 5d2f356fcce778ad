"""GPU test (c): torch.distributed and a ctypes (pynccl-style) communicator in the
same two processes, as in a NeMo-RL trainer: the records must show two groups,
one created by torch and one through ctypes.

    python3 tests/gpu/combined.py --outdir DIR [--preload SHIM]
"""
import sys

import common
import ctypes_bcast
import torch_allreduce


def worker(args):
    import torch.distributed as dist
    torch_allreduce.init_torch(args)
    res = torch_allreduce.allreduce_checks(args)
    lib = ctypes_bcast.NCCLLibrary(common.nccl_so_path())
    res.update(ctypes_bcast.bcast_checks(lib, args, 1 << 20, "combined"))
    dist.destroy_process_group()
    return res


if __name__ == "__main__":
    sys.exit(common.main(__file__, worker))
