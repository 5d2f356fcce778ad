"""The ipc transport's copy kernel (shim/ipc_kernel.c) against cuMemcpyDtoDAsync,
in one process on one GPU, at several launch shapes: how the kernel's grid
was chosen (docs/benchmarks.md, "Colocated").

    python3 bench/copy_kernel.py

The PTX is read out of shim/ipc_kernel.c (one source); loaded and launched
through the driver API with ctypes, as the shim does.
"""
import ctypes
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def ptx_text():
    src = open(os.path.join(HERE, "..", "shim", "ipc_kernel.c")).read()
    body = src.split("copy_ptx[] =", 1)[1].split(";\n", 1)[0]
    lines = re.findall(r'^\s*"(.*)"\s*$', body, re.M)
    return "".join(l.encode().decode("unicode_escape") for l in lines)


def main():
    import torch
    torch.cuda.init()
    dev = torch.device("cuda", 0)
    src = torch.randint(0, 256, (512 << 20,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    cu = ctypes.CDLL("libcuda.so.1")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ptx = ptx_text().encode() + b"\0"
    r = cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(ptx))
    assert r == 0, "cuModuleLoadData: %d" % r
    assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"ncclshim_copy") == 0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    memcpy = cu.cuMemcpyDtoDAsync_v2
    memcpy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    launch = cu.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    stream = torch.cuda.current_stream()

    def kernel(threads, per_sm, nbytes):
        d, s = ctypes.c_uint64(dst.data_ptr()), ctypes.c_uint64(src.data_ptr())
        n16, tail = ctypes.c_uint64(nbytes // 16), ctypes.c_uint64(nbytes % 16)
        blocks = (nbytes // 16 + threads * 4 - 1) // (threads * 4)
        if per_sm:
            blocks = min(blocks, sms * per_sm)
        params = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in (d, s, n16, tail)])
        return lambda: launch(fn, max(1, blocks), 1, 1, threads, 1, 1, 0, stream.cuda_stream, params, None)

    def timed(op, n):
        op()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            op()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / n * 1e3  # us

    sizes = [4 << 20, 32 << 20, 256 << 20]
    print("%s, %d SMs: us per copy (GB/s)" % (torch.cuda.get_device_name(0), sms))
    print("%-26s" % "copy" + "".join("%22s" % ("%d MiB" % (s >> 20)) for s in sizes))
    rows = [("cuMemcpyDtoDAsync", lambda n: (lambda: memcpy(dst.data_ptr(), src.data_ptr(), n, stream.cuda_stream)))]
    for threads in (256, 512, 1024):
        for per_sm in (2, 4, 8, 16, 0):
            rows.append(("kernel %4d thr, %s" % (threads, "%2d/SM" % per_sm if per_sm else "all"),
                         lambda n, t=threads, p=per_sm: kernel(t, p, n)))
    # Copy engines within one GPU: cuMemcpyBatchAsync (12.8 signature, through
    # cuGetProcAddress as the shim does) with the overlap-with-compute hint, which
    # keeps a same-device copy off the SMs; split over k streams (forked and joined
    # with events) to see whether several copy engines together reach the SMs' rate.
    class Loc(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    class Attr(ctypes.Structure):
        _fields_ = [("srcAccessOrder", ctypes.c_int), ("src", Loc), ("dst", Loc), ("flags", ctypes.c_uint)]
    fnp, status = ctypes.c_void_p(), ctypes.c_int()
    gp = cu.cuGetProcAddress_v2
    gp.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                   ctypes.POINTER(ctypes.c_int)]
    if gp(b"cuMemcpyBatchAsync", ctypes.byref(fnp), 12080, 0, ctypes.byref(status)) == 0 and fnp.value:
        U64P, SZP = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t)
        batch = ctypes.CFUNCTYPE(ctypes.c_int, U64P, U64P, SZP, ctypes.c_size_t, ctypes.POINTER(Attr), SZP,
                                 ctypes.c_size_t, SZP, ctypes.c_void_p)(fnp.value)
        side = [torch.cuda.Stream() for _ in range(3)]

        def ce(k):
            def mk(n):
                part = (n // k + 4095) & ~4095
                calls = []
                for i in range(k):
                    off = i * part
                    ln = max(0, min(part, n - off))
                    d, sr, z = (ctypes.c_uint64 * 1)(dst.data_ptr() + off), (ctypes.c_uint64 * 1)(
                        src.data_ptr() + off), (ctypes.c_size_t * 1)(ln)
                    a = Attr(1, Loc(1, 0), Loc(1, 0), 1)
                    calls.append((d, sr, z, a, (ctypes.c_size_t * 1)(0), (ctypes.c_size_t * 1)(0)))

                def op():
                    ev = torch.cuda.Event()
                    ev.record(stream)
                    for i, (d, sr, z, a, idx, fail) in enumerate(calls):
                        s = stream if i == 0 else side[i - 1]
                        if i:
                            s.wait_event(ev)
                        batch(d, sr, z, 1, ctypes.byref(a), idx, 1, fail, s.cuda_stream)
                    for i in range(1, k):
                        e = torch.cuda.Event()
                        e.record(side[i - 1])
                        stream.wait_event(e)
                return op
            return mk
        rows += [("copy engine x%d (streams)" % k, ce(k)) for k in (1, 2, 3)]
    for name, mk in rows:
        cells = []
        for n in sizes:
            us = timed(mk(n), max(20, (8 << 30) // n))
            cells.append("%10.1f (%7.0f)" % (us, n / us / 1e3))
        print("%-26s" % name + "".join("%22s" % c for c in cells))
    dst.zero_()
    kernel(512, 4, (256 << 20) + 7)()
    torch.cuda.synchronize()
    print("kernel bit-exact (256 MiB + 7):", bool(torch.equal(dst[:(256 << 20) + 7], src[:(256 << 20) + 7])),
          "byte after untouched:", int(dst[(256 << 20) + 7]) == 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
