#!/usr/bin/env python3
"""A ctypes NCCL client written the way vLLM's pynccl wrapper is
(vllm/distributed/device_communicators/pynccl_wrapper.py): CDLL of the library
(RTLD_LOCAL), then one attribute lookup (dlsym on the handle) per function,
with argtypes and restype set.  `--nccl4py` looks names up the way nccl4py
does: RTLD_DEFAULT first, then the handle.

Options: --rank=R --nranks=N --uid-out=FILE (write the ID made) --uid-in=FILE
(use another rank's ID).  Prints "CHECK ok|fail <what>" lines for the .t scripts.
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

    def init_collective(self, rank=0, nranks=1, uid_in=None, uid_out=None):
        uid = NcclUniqueId()
        if uid_in:  # another rank made the ID (NeMo-RL passes it through Ray)
            with open(uid_in, "rb") as f:
                ctypes.memmove(ctypes.byref(uid), f.read(128), 128)
        else:
            check(self.lib.ncclGetUniqueId(ctypes.byref(uid)) == 0, "ncclGetUniqueId through ctypes")
        if uid_out:
            with open(uid_out, "wb") as f:
                f.write(bytes(uid.internal))
        comm = ncclComm_t()
        check(self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank) == 0,
              "ncclCommInitRank through ctypes")
        return comm


def main():
    path = sys.argv[1]
    lib = NCCLLibrary(path, nccl4py="--nccl4py" in sys.argv)
    v = ctypes.c_int(0)
    check(lib.ncclGetVersion(ctypes.byref(v)) == 0 and v.value > 0, f"ncclGetVersion {v.value}")
    check(lib.ncclGetErrorString(0) == b"no error", "ncclGetErrorString(0)")
    opt = {a.split("=", 1)[0][2:]: a.split("=", 1)[1] for a in sys.argv[2:] if "=" in a}
    nranks = int(opt.get("nranks", 1))
    comm = WeightUpdater(lib).init_collective(int(opt.get("rank", 0)), nranks, opt.get("uid-in"), opt.get("uid-out"))
    src = (ctypes.c_float * 4)(1, 2, 3, 4)
    dst = (ctypes.c_float * 4)()
    # The warm-up NeMo-RL and vLLM clients issue right after init.
    check(lib.ncclAllReduce(src, dst, 4, 7, 0, comm, None) == 0 and (nranks > 1 or list(dst) == [1, 2, 3, 4]),
          "warm-up all-reduce through ctypes")
    for _ in range(2):
        lib.ncclBroadcast(src, dst, 4, 7, 0, comm, None)
    check(lib.ncclCommDestroy(comm) == 0, "ncclCommDestroy through ctypes")


if __name__ == "__main__":
    main()
