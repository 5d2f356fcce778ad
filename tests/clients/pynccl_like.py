#!/usr/bin/env python3
"""A ctypes NCCL client written the way vLLM's pynccl wrapper is
(vllm/distributed/device_communicators/pynccl_wrapper.py): CDLL of the library
(RTLD_LOCAL), then one attribute lookup (dlsym on the handle) per function,
with argtypes and restype set.  `--nccl4py` looks names up the way nccl4py
does: RTLD_DEFAULT first, then the handle.

Options: --rank=R --nranks=N --uid-out=FILE (write the ID made, then print
"UID <file>") --uid-in=FILE (use another rank's ID).  Prints "CHECK ok|fail
<what>" lines for the .t scripts.

A refit, as NeMo-RL's packed broadcast makes it (every rank of the inference
engine, whatever its tensor-parallel width, receives every buffer whole):
--cuda=LIB loads a libcuda first (RTLD_GLOBAL, as torch's runtime does; the
tests' fake one) and takes the buffers from its cuMemAlloc and two of its
streams in turn; --refit=S1,S2,... broadcasts buffers of those sizes from rank
0 after the warm-up; every rank prints "BYTES <k> <size> ok" or "BYTES <k>
<size> wrong at <offset>" per buffer (the fake NCCL moves no data between
processes: only the shim's ipc transport makes them ok there).
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
            print("UID %s" % uid_out, flush=True)
        comm = ncclComm_t()
        check(self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank) == 0,
              "ncclCommInitRank through ctypes")
        return comm


def pattern(k, n):
    """Buffer k's bytes: byte i is (i * 131 + k * 7 + 1) mod 256 (period 256)."""
    period = bytes((i * 131 + k * 7 + 1) & 0xFF for i in range(256))
    return (period * (n // 256 + 1))[:n]


class FakeDevice:
    """Buffers and streams from the tests' fake libcuda, loaded the way an application's
    CUDA runtime loads the driver (RTLD_GLOBAL, before NCCL: the shim finds it already
    loaded).  Its device pointers are host memory, which the checks read directly: with a
    real libcuda they could not."""

    def __init__(self, path):
        self.cu = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        self.cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t]
        self.cu.cuMemFree_v2.argtypes = [ctypes.c_ulonglong]
        self.cu.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
        self.cu.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        self.streams = []
        for _ in range(2):
            st = ctypes.c_void_p()
            if self.cu.cuStreamCreate(ctypes.byref(st), 0) != 0:
                raise RuntimeError("cuStreamCreate failed")
            self.streams.append(st)

    def alloc(self, n):
        p = ctypes.c_ulonglong()
        if self.cu.cuMemAlloc_v2(ctypes.byref(p), max(n, 1)) != 0:
            raise RuntimeError("cuMemAlloc of %d bytes failed" % n)
        return p.value

    def free(self, p):
        self.cu.cuMemFree_v2(p)

    def sync(self):
        for st in self.streams:
            self.cu.cuStreamSynchronize(st)


def refit(lib, dev, comm, rank, sizes):
    """Rank 0 broadcasts one buffer per size, on the two streams in turn (NeMo-RL's
    packed_broadcast_producer); every other rank receives into buffers of its own."""
    bufs = []
    for k, n in enumerate(sizes):
        p = dev.alloc(n)
        ctypes.memmove(p, pattern(k, n) if rank == 0 else b"\xee" * n, n)
        bufs.append(p)
    rcs = [lib.ncclBroadcast(p, p, n, 1, 0, comm, dev.streams[k % 2]) for k, (p, n) in enumerate(zip(bufs, sizes))]
    dev.sync()
    check(all(r == 0 for r in rcs), "refit: %d broadcasts from rank 0 returned ncclSuccess (%s)" % (len(sizes), rcs))
    for k, (p, n) in enumerate(zip(bufs, sizes)):
        got, want = ctypes.string_at(p, n), pattern(k, n)
        bad = next((i for i in range(n) if got[i] != want[i]), None) if got != want else None
        print("BYTES %d %d %s" % (k, n, "ok" if bad is None else "wrong at %d" % bad), flush=True)
        dev.free(p)


def main():
    path = sys.argv[1]
    opt = {a.split("=", 1)[0][2:]: a.split("=", 1)[1] for a in sys.argv[2:] if "=" in a}
    if "refit" in opt and "cuda" not in opt:
        sys.exit("--refit needs --cuda=LIB (its buffers and streams)")
    dev = FakeDevice(opt["cuda"]) if "cuda" in opt else None
    lib = NCCLLibrary(path, nccl4py="--nccl4py" in sys.argv)
    v = ctypes.c_int(0)
    check(lib.ncclGetVersion(ctypes.byref(v)) == 0 and v.value > 0, f"ncclGetVersion {v.value}")
    check(lib.ncclGetErrorString(0) == b"no error", "ncclGetErrorString(0)")
    nranks = int(opt.get("nranks", 1))
    comm = WeightUpdater(lib).init_collective(int(opt.get("rank", 0)), nranks, opt.get("uid-in"), opt.get("uid-out"))
    src = (ctypes.c_float * 4)(1, 2, 3, 4)
    dst = (ctypes.c_float * 4)()
    # The warm-up NeMo-RL and vLLM clients issue right after init.
    check(lib.ncclAllReduce(src, dst, 4, 7, 0, comm, None) == 0 and (nranks > 1 or list(dst) == [1, 2, 3, 4]),
          "warm-up all-reduce through ctypes")
    # On device memory where there is some (--cuda: the fake's cuMemAlloc, which the shim's
    # ipc transport can reach directly, as a real client's tensors), else host arrays.
    wsrc, wdst = (dev.alloc(16), dev.alloc(16)) if dev else (src, dst)
    if dev:
        ctypes.memmove(wsrc, src, 16)
    for _ in range(2):
        lib.ncclBroadcast(wsrc, wdst, 4, 7, 0, comm, None)
    if dev:
        dev.sync()
        dev.free(wsrc)
        dev.free(wdst)
    if "refit" in opt:
        refit(lib, dev, comm, int(opt.get("rank", 0)), [int(x) for x in opt["refit"].split(",")])
    check(lib.ncclCommDestroy(comm) == 0, "ncclCommDestroy through ctypes")


if __name__ == "__main__":
    main()
