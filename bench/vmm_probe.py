"""What the driver says of memory from cuMemCreate (PyTorch's expandable
segments, vLLM's sleep-mode allocator), and whether another process on the
same GPU can map it and copy into it at the rate of a plain copy.

    python3 bench/vmm_probe.py [--json FILE] [--mib 64]

Rank 0 allocates with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
prints the pointer attributes the shim reads (range, buffer id, mapping
base and size, memory block id) at the start and inside the tensor, walks
its physical pieces (cuMemRetainAllocationHandle), exports each as a file
descriptor (cuMemExportToShareableHandle, POSIX_FD) and sends them to rank 1
over a Unix socket (SCM_RIGHTS).  Rank 1 imports them, maps them into one
reserved range, and copies its own data into it (only rank 1 copies: the
pushed hop's shape), timed with events against a copy within its own
memory; rank 0 then checks the bytes.  Also: the export of an allocation
made without a handle type (vLLM's CuMemAllocator) and its error.
"""
import argparse
import ctypes
import json
import os
import socket
import subprocess
import sys
import time

CU = None
ATTR = {"buffer_id": 7, "range_start": 11, "range_size": 12, "mapping_size": 18, "mapping_base": 19,
        "memory_block_id": 20}
POSIX_FD = 1


def cu():
    global CU
    if CU is None:
        CU = ctypes.CDLL("libcuda.so.1")
    return CU


def check(r, what):
    if r != 0:
        s = ctypes.c_char_p()
        cu().cuGetErrorName(r, ctypes.byref(s))
        raise RuntimeError("%s: %s (%d)" % (what, s.value.decode() if s.value else "?", r))


def attr(name, ptr):
    v = ctypes.c_uint64(0)
    r = cu().cuPointerGetAttribute(ctypes.byref(v), ATTR[name], ctypes.c_uint64(ptr))
    return v.value if r == 0 else "err %d" % r


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("loc_type", ctypes.c_int),
                ("loc_id", ctypes.c_int), ("win32", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class Access(ctypes.Structure):
    _fields_ = [("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int), ("flags", ctypes.c_ulonglong)]


def rank0(sock, mib, out):
    import torch
    torch.cuda.set_device(0)
    n = mib << 20
    pad = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # the tensor starts inside a piece
    t = torch.full((n,), 7, dtype=torch.uint8, device="cuda")
    t[: n // 2] = 3
    torch.cuda.synchronize()
    p = t.data_ptr()
    out["attrs_start"] = {k: attr(k, p) for k in ATTR}
    out["attrs_mid"] = {k: attr(k, p + n // 2 + 12345) for k in ATTR}
    pieces = []
    at = p
    t_export = 0.0
    while at < p + n:
        base, size = attr("mapping_base", at), attr("mapping_size", at)
        h = ctypes.c_uint64()
        check(cu().cuMemRetainAllocationHandle(ctypes.byref(h), ctypes.c_void_p(at)), "cuMemRetainAllocationHandle")
        prop = Prop()
        check(cu().cuMemGetAllocationPropertiesFromHandle(ctypes.byref(prop), h), "cuMemGetAllocationPropertiesFromHandle")
        fd = ctypes.c_int(-1)
        t0 = time.perf_counter()
        r = cu().cuMemExportToShareableHandle(ctypes.byref(fd), h, POSIX_FD, ctypes.c_ulonglong(0))
        t_export += time.perf_counter() - t0
        check(cu().cuMemRelease(h), "cuMemRelease")
        pieces.append({"base": base, "size": size, "block": attr("memory_block_id", at),
                       "handle_types": prop.requestedHandleTypes, "export": r, "fd": fd.value})
        at = base + size
    out["pieces"] = [dict(x, base=x["base"] - p) for x in pieces]
    out["export_us_per_piece"] = round(t_export * 1e6 / len(pieces), 1)
    if any(x["export"] != 0 for x in pieces):
        sock.send(b"noexport")
        return
    first = pieces[0]["base"]
    desc = json.dumps({"off": p - first, "n": n, "pieces": [[x["base"] - first, x["size"]] for x in pieces]})
    socket.send_fds(sock, [desc.encode()], [x["fd"] for x in pieces])
    for x in pieces:
        os.close(x["fd"])
    # rank 1 copies and says so
    msg = sock.recv(4096)
    out["rank1"] = json.loads(msg.decode())
    torch.cuda.synchronize()
    out["bit_exact_after_push"] = bool((t == 9).all().item())
    # an allocation with no handle type (vLLM's CuMemAllocator)
    prop = Prop()
    prop.type, prop.loc_type, prop.loc_id = 1, 1, 0
    gran = ctypes.c_size_t()
    check(cu().cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
    h = ctypes.c_uint64()
    check(cu().cuMemCreate(ctypes.byref(h), gran, ctypes.byref(prop), ctypes.c_ulonglong(0)), "cuMemCreate")
    fd = ctypes.c_int(-1)
    out["export_without_handle_type"] = cu().cuMemExportToShareableHandle(ctypes.byref(fd), h, POSIX_FD,
                                                                          ctypes.c_ulonglong(0))
    cu().cuMemRelease(h)
    del pad


def rank1(sock, out):
    import torch
    torch.cuda.set_device(0)
    msg, fds, _, _ = socket.recv_fds(sock, 65536, 64)
    if msg == b"noexport":
        return
    d = json.loads(msg.decode())
    total = d["pieces"][-1][0] + d["pieces"][-1][1]
    va = ctypes.c_uint64()
    check(cu().cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(total), ctypes.c_size_t(0), ctypes.c_uint64(0),
                                   ctypes.c_ulonglong(0)), "cuMemAddressReserve")
    handles = []
    acc = Access(1, 0, 3)
    tim = {"import": 0.0, "map": 0.0, "access_each": 0.0}
    half = len(fds) // 2
    for i, ((off, size), fd) in enumerate(zip(d["pieces"], fds)):
        h = ctypes.c_uint64()
        t0 = time.perf_counter()
        check(cu().cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd), POSIX_FD), "import")
        t1 = time.perf_counter()
        os.close(fd)
        check(cu().cuMemMap(ctypes.c_uint64(va.value + off), ctypes.c_size_t(size), ctypes.c_size_t(0), h,
                            ctypes.c_ulonglong(0)), "cuMemMap")
        t2 = time.perf_counter()
        if i < half:  # the first half one piece at a time, the rest in one call
            check(cu().cuMemSetAccess(ctypes.c_uint64(va.value + off), ctypes.c_size_t(size), ctypes.byref(acc),
                                      ctypes.c_size_t(1)), "cuMemSetAccess")
        t3 = time.perf_counter()
        tim["import"] += t1 - t0
        tim["map"] += t2 - t1
        tim["access_each"] += t3 - t2
        handles.append(h)
    rest = d["pieces"][half][0]
    t0 = time.perf_counter()
    check(cu().cuMemSetAccess(ctypes.c_uint64(va.value + rest), ctypes.c_size_t(total - rest), ctypes.byref(acc),
                              ctypes.c_size_t(1)), "cuMemSetAccess")
    t_batch = time.perf_counter() - t0
    npc = len(fds)
    out["import_us_per_piece"] = round(tim["import"] * 1e6 / npc, 1)
    out["map_us_per_piece"] = round(tim["map"] * 1e6 / npc, 1)
    out["access_us_per_piece_each"] = round(tim["access_each"] * 1e6 / max(half, 1), 1)
    out["access_us_per_piece_batched"] = round(t_batch * 1e6 / max(npc - half, 1), 1)
    big = ctypes.c_uint64()
    t0 = time.perf_counter()
    r = cu().cuMemAddressReserve(ctypes.byref(big), ctypes.c_size_t(95 << 30), ctypes.c_size_t(0), ctypes.c_uint64(0),
                                 ctypes.c_ulonglong(0))
    out["reserve_95GiB_us"] = round((time.perf_counter() - t0) * 1e6, 1) if r == 0 else "err %d" % r
    if r == 0:
        cu().cuMemAddressFree(big, ctypes.c_size_t(95 << 30))
    n = d["n"]
    dst = va.value + d["off"]
    src = torch.full((n,), 9, dtype=torch.uint8, device="cuda")
    mine = torch.empty(n, dtype=torch.uint8, device="cuda")
    s = torch.cuda.current_stream()
    res = {}
    for name, to in (("own", mine.data_ptr()), ("mapped", dst), ("own2", mine.data_ptr()), ("mapped2", dst)):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            check(cu().cuMemcpyDtoDAsync_v2(ctypes.c_uint64(to), ctypes.c_uint64(src.data_ptr()), ctypes.c_size_t(n),
                                            ctypes.c_void_p(s.cuda_stream)), "copy")
        e0.record()
        it = 50
        for _ in range(it):
            check(cu().cuMemcpyDtoDAsync_v2(ctypes.c_uint64(to), ctypes.c_uint64(src.data_ptr()), ctypes.c_size_t(n),
                                            ctypes.c_void_p(s.cuda_stream)), "copy")
        e1.record()
        e1.synchronize()
        res[name + "_us"] = round(e0.elapsed_time(e1) * 1000 / it, 1)
    res.update({k: v for k, v in out.items() if "per_piece" in k or k.startswith("reserve")})
    torch.cuda.synchronize()
    for h in handles:
        cu().cuMemRelease(h)
    out.update(res)
    sock.send(json.dumps(res).encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--role")
    ap.add_argument("--fd", type=int)
    a = ap.parse_args()
    out = {}
    if a.role:
        sock = socket.socket(fileno=a.fd)
        try:
            sock.settimeout(60)
            if a.role == "0":
                rank0(sock, a.mib, out)
            else:
                rank1(sock, out)
        except Exception as e:  # report, not hide
            out["error"] = repr(e)
        print(json.dumps(out))
        return
    s0, s1 = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    procs = [subprocess.Popen([sys.executable, __file__, "--role", str(r), "--fd", str(s.fileno()), "--mib",
                               str(a.mib)], env=env, pass_fds=[s.fileno()], stdout=subprocess.PIPE)
             for r, s in ((0, s0), (1, s1))]
    s0.close()
    s1.close()
    res = {}
    for r, p in enumerate(procs):
        o, _ = p.communicate(timeout=120)
        res["rank%d" % r] = json.loads(o.decode().strip().splitlines()[-1]) if o.strip() else {"rc": p.returncode}
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
