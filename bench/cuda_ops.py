"""The CUDA driver calls the copy probe (bench/copy_probe.py) makes itself,
through ctypes: a copy, and the stream
memory operations of the ipc protocol.  Each raises RuntimeError with the
CUresult when the driver refuses."""
import ctypes

cu = ctypes.CDLL("libcuda.so.1")
u64, vp = ctypes.c_uint64, ctypes.c_void_p
for name in ("cuMemcpyDtoDAsync_v2", "cuStreamWriteValue64_v2", "cuStreamWaitValue64_v2"):
    getattr(cu, name).restype = ctypes.c_int


def ck(r, what):
    if r != 0:
        raise RuntimeError("%s: CUresult %d" % (what, r))


def copy(dst, src, n, s):
    ck(cu.cuMemcpyDtoDAsync_v2(u64(dst), u64(src), ctypes.c_size_t(n), vp(s)), "cuMemcpyDtoDAsync")


def write(addr, v, s):
    ck(cu.cuStreamWriteValue64_v2(vp(s), u64(addr), u64(v), ctypes.c_uint(0)), "cuStreamWriteValue64")


def wait(addr, v, s):
    ck(cu.cuStreamWaitValue64_v2(vp(s), u64(addr), u64(v), ctypes.c_uint(0)), "cuStreamWaitValue64")
