"""What an exporter of legacy CUDA IPC memory can learn, after freeing it, while
another process still has it open (cuIpcOpenMemHandle), through the driver API
alone (ctypes on libcuda.so.1; no shim).  The question behind it: can a rank
tell that an allocation it exported was freed, so that its neighbours close
their mappings (which keep the memory allocated) without an idle limit?

    python3 bench/ipc_freed_probe.py [--mib N]

The parent allocates X (exported, opened by a child process) and Y (not
exported), frees both, and asks the driver about each address; then allocates
again (is X's address reused?), and the child closes its mapping.  Prints one
line per question: the CUresult and the value.
"""
import ctypes
import subprocess
import sys
import time

CU = ctypes.CDLL("libcuda.so.1")
ATTRS = {"BUFFER_ID": 7, "DEVICE_POINTER": 3, "IS_LEGACY_CUDA_IPC_CAPABLE": 10, "RANGE_START_ADDR": 11,
         "RANGE_SIZE": 12, "MAPPED": 13, "CONTEXT": 1, "MEMORY_TYPE": 2}


class Handle(ctypes.Structure):  # CUipcMemHandle: passed by value to cuIpcOpenMemHandle
    _fields_ = [("reserved", ctypes.c_char * 64)]


def ck(name, rc):
    if rc != 0:
        raise SystemExit("%s: CUresult %d" % (name, rc))


def init():
    ck("cuInit", CU.cuInit(0))
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    ck("cuDeviceGet", CU.cuDeviceGet(ctypes.byref(dev), 0))
    ck("cuDevicePrimaryCtxRetain", CU.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    ck("cuCtxSetCurrent", CU.cuCtxSetCurrent(ctx))


def free_mib():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    ck("cuMemGetInfo", CU.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)))
    return f.value >> 20


def ask(tag, ptr):
    out = []
    for name, a in ATTRS.items():
        v = ctypes.c_uint64(0)
        rc = CU.cuPointerGetAttribute(ctypes.byref(v), a, ctypes.c_uint64(ptr))
        out.append("%s=%s" % (name, v.value if rc == 0 else "rc%d" % rc))
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = CU.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    out.append("AddressRange=%s" % ("%#x+%d" % (base.value, size.value) if rc == 0 else "rc%d" % rc))
    h = Handle()
    out.append("IpcGetMemHandle=rc%d" % CU.cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(ptr)))
    print("%-28s %s" % (tag, " ".join(out)), flush=True)


def child(handle_hex):
    init()
    h = Handle.from_buffer_copy(bytes.fromhex(handle_hex))
    d = ctypes.c_uint64()
    ck("cuIpcOpenMemHandle", CU.cuIpcOpenMemHandle_v2(ctypes.byref(d), h, 1))
    print("opened %#x" % d.value, flush=True)
    for line in sys.stdin:
        if line.strip() == "ask":
            ask("importer, its mapping", d.value)
            print("asked", flush=True)
        elif line.strip() == "close":
            ck("cuIpcCloseMemHandle", CU.cuIpcCloseMemHandle(d))
            print("closed", flush=True)
            return


def main():
    mib = int(sys.argv[sys.argv.index("--mib") + 1]) if "--mib" in sys.argv else 512
    init()
    f0 = free_mib()
    x, y = ctypes.c_uint64(), ctypes.c_uint64()
    ck("cuMemAlloc X", CU.cuMemAlloc_v2(ctypes.byref(x), ctypes.c_size_t(mib << 20)))
    ck("cuMemAlloc Y", CU.cuMemAlloc_v2(ctypes.byref(y), ctypes.c_size_t(mib << 20)))
    print("X %#x, Y %#x, %d MiB each; free %d -> %d MiB" % (x.value, y.value, mib, f0, free_mib()), flush=True)
    ask("X live", x.value)
    h = Handle()
    ck("cuIpcGetMemHandle", CU.cuIpcGetMemHandle(ctypes.byref(h), x))
    p = subprocess.Popen([sys.executable, __file__, "--child", bytes(h).hex()], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)

    def say(word, want):
        p.stdin.write(word + "\n")
        p.stdin.flush()
        for line in p.stdout:
            print("  child: " + line.rstrip(), flush=True)
            if line.startswith(want):
                return
        raise SystemExit("child ended before %r" % want)

    for line in p.stdout:
        print("  child: " + line.rstrip(), flush=True)
        if line.startswith("opened"):
            break
    say("ask", "asked")
    ck("cuMemFree X", CU.cuMemFree_v2(x))
    ck("cuMemFree Y", CU.cuMemFree_v2(y))
    print("freed X and Y: free %d MiB" % free_mib(), flush=True)
    ask("X freed, still open there", x.value)
    ask("Y freed", y.value)
    say("ask", "asked")
    z = ctypes.c_uint64()
    ck("cuMemAlloc Z", CU.cuMemAlloc_v2(ctypes.byref(z), ctypes.c_size_t(mib << 20)))
    print("Z %#x (X's address: %s, Y's: %s); free %d MiB" % (z.value, z.value == x.value, z.value == y.value,
                                                             free_mib()), flush=True)
    ask("X's address, Z allocated", x.value)
    ask("Z", z.value)
    say("close", "closed")
    t0 = time.monotonic()
    print("child closed: free %d MiB (%.3f s)" % (free_mib(), time.monotonic() - t0), flush=True)
    ask("X's address after close", x.value)
    p.stdin.close()
    p.wait(timeout=30)
    ck("cuMemFree Z", CU.cuMemFree_v2(z))
    print("end: free %d MiB (start %d)" % (free_mib(), f0), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
