"""GPU test (b): a ctypes NCCL client written like vLLM's pynccl
(vllm/distributed/device_communicators/pynccl_wrapper.py), 2 ranks.

ctypes.CDLL of torch's libnccl.so.2 (RTLD_LOCAL, as vLLM does), functions looked
up by attribute (dlsym on the handle: the shim's dlsym interposition must answer
with its wrappers), argtypes/restype set.  Rank 0 makes the unique ID and hands
it to rank 1 through a file.  Buffers are torch CUDA tensors (data_ptr()) and
the stream is torch's current stream.  Like NeMo-RL, a one-float all-reduce
warms the communicator up, then rank 0 broadcasts 64 MiB of seeded random bytes.

The NCCLLibrary class lives in this file on purpose: the shim's `python` frames
of the ncclCommInitRank call must name this file innermost.

    python3 tests/gpu/ctypes_bcast.py --outdir DIR [--preload SHIM]
"""
import ctypes
import sys

import common

BCAST_BYTES = 64 << 20

# NCCL's ABI (nccl.h): enums are ints, handles are pointers.
ncclResult_t = ctypes.c_int
ncclComm_t = ctypes.c_void_p
ncclDataType_t = ctypes.c_int
ncclRedOp_t = ctypes.c_int
cudaStream_t = ctypes.c_void_p
buffer_type = ctypes.c_void_p
ncclUint8, ncclFloat32 = 1, 7
ncclSum = 0


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


class NCCLLibrary:
    # name, restype, argtypes: as in vLLM's pynccl_wrapper.py
    exported_functions = [
        ("ncclGetErrorString", ctypes.c_char_p, [ncclResult_t]),
        ("ncclGetVersion", ncclResult_t, [ctypes.POINTER(ctypes.c_int)]),
        ("ncclGetUniqueId", ncclResult_t, [ctypes.POINTER(ncclUniqueId)]),
        ("ncclCommInitRank", ncclResult_t, [ctypes.POINTER(ncclComm_t), ctypes.c_int, ncclUniqueId, ctypes.c_int]),
        ("ncclAllReduce", ncclResult_t,
         [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t]),
        ("ncclBroadcast", ncclResult_t,
         [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
        ("ncclCommDestroy", ncclResult_t, [ncclComm_t]),
        ("ncclAllGather", ncclResult_t,
         [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclComm_t, cudaStream_t]),
        ("ncclSend", ncclResult_t, [buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t,
                                    cudaStream_t]),
        ("ncclRecv", ncclResult_t, [buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t,
                                    cudaStream_t]),
        ("ncclGroupStart", ncclResult_t, []),
        ("ncclGroupEnd", ncclResult_t, []),
    ]

    def __init__(self, so_file):
        self.lib = ctypes.CDLL(so_file)  # default mode: RTLD_LOCAL, like vLLM
        self._funcs = {}
        for name, restype, argtypes in self.exported_functions:
            f = getattr(self.lib, name)  # dlsym(handle, name)
            f.restype = restype
            f.argtypes = argtypes
            self._funcs[name] = f

    def NCCL_CHECK(self, result):
        if result != 0:
            raise RuntimeError("NCCL error %d: %s" % (result, self.ncclGetErrorString(result)))

    def ncclGetErrorString(self, result):
        return self._funcs["ncclGetErrorString"](result).decode("utf-8", "replace")

    def ncclGetVersion(self):
        v = ctypes.c_int()
        self.NCCL_CHECK(self._funcs["ncclGetVersion"](ctypes.byref(v)))
        return v.value

    def ncclGetUniqueId(self):
        uid = ncclUniqueId()
        self.NCCL_CHECK(self._funcs["ncclGetUniqueId"](ctypes.byref(uid)))
        return uid

    @staticmethod
    def unique_id_from_bytes(data):
        assert len(data) == 128, len(data)
        uid = ncclUniqueId()
        ctypes.memmove(ctypes.addressof(uid.internal), data, 128)
        return uid

    def ncclCommInitRank(self, world_size, unique_id, rank):
        comm = ncclComm_t()
        self.NCCL_CHECK(self._funcs["ncclCommInitRank"](ctypes.byref(comm), world_size, unique_id, rank))
        return comm

    def ncclAllReduce(self, sendbuff, recvbuff, count, datatype, op, comm, stream):
        self.NCCL_CHECK(self._funcs["ncclAllReduce"](sendbuff, recvbuff, count, datatype, op, comm, stream))

    def ncclBroadcast(self, sendbuff, recvbuff, count, datatype, root, comm, stream):
        self.NCCL_CHECK(self._funcs["ncclBroadcast"](sendbuff, recvbuff, count, datatype, root, comm, stream))

    def ncclCommDestroy(self, comm):
        self.NCCL_CHECK(self._funcs["ncclCommDestroy"](comm))

    def ncclAllGather(self, sendbuff, recvbuff, count, datatype, comm, stream):
        self.NCCL_CHECK(self._funcs["ncclAllGather"](sendbuff, recvbuff, count, datatype, comm, stream))

    def ncclSend(self, sendbuff, count, datatype, peer, comm, stream):
        self.NCCL_CHECK(self._funcs["ncclSend"](sendbuff, count, datatype, peer, comm, stream))

    def ncclRecv(self, recvbuff, count, datatype, peer, comm, stream):
        self.NCCL_CHECK(self._funcs["ncclRecv"](recvbuff, count, datatype, peer, comm, stream))

    def ncclGroupStart(self):
        self.NCCL_CHECK(self._funcs["ncclGroupStart"]())

    def ncclGroupEnd(self):
        self.NCCL_CHECK(self._funcs["ncclGroupEnd"]())


def make_comm(lib, args, tag, device=None):
    """Rank 0 makes the ID and writes it to a file that the other ranks wait for.  Each
    rank on GPU `rank`, or every rank on `device` (colocated)."""
    import torch
    rank, world = args["rank"], args["world"]
    uid = lib.unique_id_from_bytes(common.shared_id(args, tag, lambda: bytes(lib.ncclGetUniqueId().internal)))
    with torch.cuda.device(rank if device is None else device):
        return lib.ncclCommInitRank(world, uid, rank)


def make_barrier(lib, comm, stream, dev):
    """A barrier of the communicator's ranks: a one-float all-reduce on `stream`, then the host
    waits for the device."""
    import torch
    one = torch.ones(1, dtype=torch.float32, device=dev)
    stream.wait_stream(torch.cuda.current_stream())  # the buffer is written before the stream reads it

    def barrier():
        lib.ncclAllReduce(buffer_type(one.data_ptr()), buffer_type(one.data_ptr()), 1, ncclFloat32, ncclSum, comm,
                          cudaStream_t(stream.cuda_stream))
        torch.cuda.synchronize()
    return barrier


def payload(nbytes):
    """Seeded random bytes, made on the CPU (the same on every rank and every run)."""
    import torch
    g = torch.Generator().manual_seed(20251121)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def bcast_checks(lib, args, nbytes, tag):
    """Warm-up all-reduce of one float, then a broadcast from rank 0; destroys the comm."""
    import torch
    rank, world = args["rank"], args["world"]
    dev = torch.device("cuda", rank)
    comm = make_comm(lib, args, tag)
    stream = torch.cuda.current_stream()
    warm = torch.ones(1, dtype=torch.float32, device=dev)
    lib.ncclAllReduce(buffer_type(warm.data_ptr()), buffer_type(warm.data_ptr()), 1, ncclFloat32, ncclSum,
                      comm, cudaStream_t(stream.cuda_stream))
    src = payload(nbytes)
    if rank == 0:
        buf = src.to(dev)
        sendbuff = buffer_type(buf.data_ptr())  # NCCL wants the root's recvbuff too (vLLM does the same)
    else:
        buf = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
        sendbuff = buffer_type()
    torch.cuda.synchronize()  # the buffers are ready before NCCL's stream reads them
    lib.ncclBroadcast(sendbuff, buffer_type(buf.data_ptr()), nbytes, ncclUint8, 0, comm,
                      cudaStream_t(stream.cuda_stream))
    stream.synchronize()
    res = {"warmup": warm.item(), "warmup_expected": float(world),
           "bcast": common.sha256_tensor(buf), "bcast_expected": common.sha256_tensor(src)}
    lib.ncclCommDestroy(comm)
    return res


def worker(args):
    lib = NCCLLibrary(common.nccl_so_path())
    res = bcast_checks(lib, args, BCAST_BYTES, "bcast")
    res["nccl_version"] = lib.ncclGetVersion()
    return res


if __name__ == "__main__":
    sys.exit(common.main(__file__, worker))
