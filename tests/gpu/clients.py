"""The NCCL clients that the colocated GPU test (tests/gpu/colocated.py) and
benchmark (bench/colocated.py) drive, by name:

  ctypes   vLLM's pynccl, as tests/gpu/ctypes_bcast.py writes it: libnccl through
           ctypes, ncclCommInitRank
  nccl4py  nccl4py's Communicator (nccl.core), what NeMo-RL's trainer uses: every
           symbol looked up with dlsym, ncclCommInitRankScalable; tensors and
           streams passed as torch's

Each takes the unique ID through a file in the run's outdir (rank 0 writes it),
and raises RuntimeError naming NCCL's error when init fails.  `prepare` does
the per-call work once (pointers, ctypes objects), so that a timed loop calls
NCCL as a client that keeps its buffers would.
"""
import common
import ctypes_bcast as cb


class CtypesClient:
    api = "ctypes"

    def __init__(self, args, tag, device):
        self.lib = cb.NCCLLibrary(common.nccl_so_path())
        self.comm = cb.make_comm(self.lib, args, tag, device=device)

    def sum_floats(self, t, s):
        p = cb.buffer_type(t.data_ptr())
        self.lib.ncclAllReduce(p, p, t.numel(), cb.ncclFloat32, cb.ncclSum, self.comm, cb.cudaStream_t(s.cuda_stream))

    def prepare(self, t, root, s):
        """A broadcast of the bytes of t, in place, from root on stream s: a call with no argument."""
        p, n, sp = cb.buffer_type(t.data_ptr()), t.numel() * t.element_size(), cb.cudaStream_t(s.cuda_stream)
        lib, comm = self.lib, self.comm
        return lambda: lib.ncclBroadcast(p, p, n, cb.ncclUint8, root, comm, sp)

    def bcast(self, t, root, s):
        self.prepare(t, root, s)()

    def destroy(self):
        self.lib.ncclCommDestroy(self.comm)


class Nccl4pyClient:
    api = "nccl4py"

    def __init__(self, args, tag, device):
        import torch
        import nccl.core as nc
        self.nc = nc
        rank, world = args["rank"], args["world"]
        uid = nc.UniqueId.from_bytes(common.shared_id(args, tag, lambda: bytes(nc.get_unique_id().as_bytes)))
        try:
            with torch.cuda.device(device):
                self.comm = nc.Communicator.init(world, rank, uid)
        except Exception as e:  # nccl4py's own error types; the message as ctypes_bcast's
            raise RuntimeError("ncclCommInitRankScalable: %s: %s" % (type(e).__name__, e)) from e

    def sum_floats(self, t, s):
        self.comm.allreduce(t, t, self.nc.SUM, stream=s.cuda_stream)

    def prepare(self, t, root, s):
        comm, sp = self.comm, s.cuda_stream
        return lambda: comm.broadcast(t, t, root, stream=sp)

    def bcast(self, t, root, s):
        self.prepare(t, root, s)()

    def destroy(self):
        self.comm.destroy()


def make(name, args, tag, device):
    """The client called `name` ("ctypes" or "nccl4py"), its communicator initialised."""
    if name not in ("ctypes", "nccl4py"):
        raise ValueError("no NCCL client %r (ctypes, nccl4py)" % name)
    return (Nccl4pyClient if name == "nccl4py" else CtypesClient)(args, tag, device)
