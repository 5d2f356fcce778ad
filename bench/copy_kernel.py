"""The ipc transport's copy kernel (shim/ipc/ipc_kernel.c) against cuMemcpyDtoDAsync,
in one process on one GPU, at several launch shapes: how the kernel's grid
was chosen (docs/benchmarks.md, "Colocated").

    python3 bench/copy_kernel.py

The PTX is read out of shim/ipc/ipc_kernel.c (one source); loaded and launched
through the driver API with ctypes, as the shim does.
"""
import ctypes
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def ptx_text():
    src = open(os.path.join(HERE, "..", "shim", "ipc", "ipc_kernel.c")).read()
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
