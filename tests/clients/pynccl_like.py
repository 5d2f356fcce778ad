#!/usr/bin/env python3
"""A ctypes NCCL client written the way vLLM's pynccl wrapper is
(vllm/distributed/device_communicators/pynccl_wrapper.py): CDLL of the library
(RTLD_LOCAL), then one attribute lookup (dlsym on the handle) per function,
with argtypes and restype set.  `--nccl4py` looks names up the way nccl4py
does: RTLD_DEFAULT first, then the handle.

Prints "CHECK ok|fail <what>" lines for the .t scripts.
"""
import ctypes
import sys

ncclResult_t = ctypes.c_int
ncclComm_t = ctypes.c_void_p


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


FUNCS = [
    ("ncclGetErrorString", ctypes.c_char_p, [ncclResult_t]),
    ("ncclGetVersion", ncclResult_t, [ctypes.POINTER(ctypes.c_int)]),
    ("ncclGetUniqueId", ncclResult_t, [ctypes.POINTER(NcclUniqueId)]),
    ("ncclCommInitRank", ncclResult_t, [ctypes.POINTER(ncclComm_t), ctypes.c_int, NcclUniqueId, ctypes.c_int]),
    ("ncclAllReduce", ncclResult_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                     ctypes.c_int, ncclComm_t, ctypes.c_void_p]),
    ("ncclBroadcast", ncclResult_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                     ctypes.c_int, ncclComm_t, ctypes.c_void_p]),
    ("ncclCommDestroy", ncclResult_t, [ncclComm_t]),
]


def check(cond, what):
    print(f"CHECK {'ok' if cond else 'fail'} {what}", flush=True)
    return cond


class NCCLLibrary:
    def __init__(self, path, nccl4py=False):
        self.lib = ctypes.CDLL(path)
        glob = ctypes.CDLL(None) if nccl4py else None
        self.fns = {}
        for name, restype, argtypes in FUNCS:
            f = None
            if glob is not None:
                try:
                    f = getattr(glob, name)  # dlsym(RTLD_DEFAULT, name)
                except AttributeError:
                    f = None
            if f is None:
                f = getattr(self.lib, name)  # dlsym(handle, name)
            f.restype = restype
            f.argtypes = argtypes
            self.fns[name] = f

    def __getattr__(self, name):
        return self.fns[name]


class WeightUpdater:
    """Shaped like NeMo-RL's vllm_backend: the weight-update group is made in init_collective."""

    def __init__(self, lib):
        self.lib = lib

    def init_collective(self):
        uid = NcclUniqueId()
        check(self.lib.ncclGetUniqueId(ctypes.byref(uid)) == 0, "ncclGetUniqueId through ctypes")
        comm = ncclComm_t()
        check(self.lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0, "ncclCommInitRank through ctypes")
        return comm


def main():
    path = sys.argv[1]
    lib = NCCLLibrary(path, nccl4py="--nccl4py" in sys.argv)
    v = ctypes.c_int(0)
    check(lib.ncclGetVersion(ctypes.byref(v)) == 0 and v.value > 0, f"ncclGetVersion {v.value}")
    check(lib.ncclGetErrorString(0) == b"no error", "ncclGetErrorString(0)")
    comm = WeightUpdater(lib).init_collective()
    src = (ctypes.c_float * 4)(1, 2, 3, 4)
    dst = (ctypes.c_float * 4)()
    # The warm-up NeMo-RL and vLLM clients issue right after init.
    check(lib.ncclAllReduce(src, dst, 4, 7, 0, comm, None) == 0 and list(dst) == [1, 2, 3, 4],
          "warm-up all-reduce through ctypes moves the data")
    for _ in range(2):
        lib.ncclBroadcast(src, dst, 4, 7, 0, comm, None)
    check(lib.ncclCommDestroy(comm) == 0, "ncclCommDestroy through ctypes")


if __name__ == "__main__":
    main()
