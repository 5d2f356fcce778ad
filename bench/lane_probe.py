"""Whether a chain of copy engines reaches the NVLink rate when it runs in
several lanes (issue 24), without the shim: one process drives every GPU, a
broadcast goes GPU 0 -> 1 -> ... -> N-1, each GPU pushing a step into its
successor once its predecessor's copy of that step has landed (counters in
pinned host memory, as the shim's).  bench/chain_probe.py found one lane
collapsing with small steps; here the buffer is cut into L parts, each sent
along the chain by its own stream on every GPU (a lane), forked from and
joined back to the GPU's main stream by events on each broadcast, as the shim
would do on the caller's stream.

    python3 bench/lane_probe.py [--gpus N] [--sizes 1M,16M,64M,256M,1G,4G]
        [--lanes 1,2,4] [--steps 2M,4M,8M,23M]

Also printed, per size: "hopw", one hop in steps with a counter write after
each (what a write between two copies costs one stream), and "sm": the chain
with the shim's copy kernel (SMs over NVLink) instead of copy engines, one
step per hop; "smc G [step: host/dev]": the SM chain (bench/sm_chain.ptx),
one kernel of G blocks per GPU, each block waiting for its predecessor's
block per step on a flag in host memory / in the receiving GPU's memory (no
stream memory operation inside a broadcast); with --sag, "sag/k": scatter then
all-gather, the root pushing piece j of N-1 to GPU j in k steps and GPU j
pushing each step on to every other GPU (over NVSwitch: no chain).
"""
import ctypes
import os
import sys
import time

import torch

from chain_probe import Chain, opt, parse_size
from copy_kernel import ptx_text
from cuda_ops import copy, cu, ck, wait, write

HERE = os.path.dirname(os.path.abspath(__file__))


class Kernel:
    """The shim's kernels (copy, chain), loaded in each GPU's primary context."""

    def __init__(self, n):
        self.fn = []
        self.chain_fn = []
        for i in range(n):
            torch.cuda.set_device(i)
            torch.cuda.current_stream().synchronize()
            mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
            ck(cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(ptx_text().encode() + b"\0")), "cuModuleLoadData")
            ck(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"ncclshim_copy"), "cuModuleGetFunction")
            self.fn.append(fn)
            cmod, fc = ctypes.c_void_p(), ctypes.c_void_p()
            with open(os.path.join(HERE, "sm_chain.ptx"), "rb") as f:
                text = f.read() + b"\0"
            ck(cu.cuModuleLoadData(ctypes.byref(cmod), ctypes.c_char_p(text)), "cuModuleLoadData sm_chain.ptx")
            ck(cu.cuModuleGetFunction(ctypes.byref(fc), cmod, b"ncclshim_chain"), "cuModuleGetFunction chain")
            self.chain_fn.append(fc)
        torch.cuda.set_device(0)
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.keep = []

    def copy(self, i, dst, src, n, s):
        args = [ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_uint64(n // 16), ctypes.c_uint64(n % 16)]
        self.keep = args
        params = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in args])
        blocks = max(1, min(self.sms * 4, (n // 16 + 2047) // 2048))
        ck(cu.cuLaunchKernel(self.fn[i], ctypes.c_uint(blocks), 1, 1, 512, 1, 1, 0, ctypes.c_void_p(s), params, None),
           "cuLaunchKernel")


    def chain(self, i, dst, src, n, step, fin, fout, base, blocks, s, abort):
        args = [ctypes.c_uint64(v) for v in (dst, src, n, step, fin, fout, base, abort)]
        self.keep = args
        params = (ctypes.c_void_p * 8)(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in args])
        ck(cu.cuLaunchKernel(self.chain_fn[i], ctypes.c_uint(blocks), 1, 1, 512, 1, 1, 0, ctypes.c_void_p(s), params,
                             None), "cuLaunchKernel chain")


class Lanes:
    def __init__(self, n, size, lanes):
        self.n, self.L = n, lanes
        self.dev = [torch.device("cuda", i) for i in range(n)]
        self.buf = [torch.empty(size, dtype=torch.uint8, device=d) for d in self.dev]
        self.buf[0].random_(0, 255)
        for i in range(n - 1):  # peer access along the chain (torch enables it as it copies)
            self.buf[i + 1][:16].copy_(self.buf[i][:16])
            self.buf[i][:16].copy_(self.buf[i + 1][:16])
        self.main = [torch.cuda.Stream(device=d) for d in self.dev]
        self.s = self.main  # Chain.time's streams
        self.lane = [[torch.cuda.Stream(device=d) for _ in range(lanes)] for d in self.dev]
        self.hflag = torch.zeros(8 * n * lanes, dtype=torch.int64).pin_memory()
        self.seq = [0] * lanes
        self.sflag = torch.zeros(8 * n, dtype=torch.int64).pin_memory()
        self.cflag = torch.zeros(64 * n, dtype=torch.int64).pin_memory()
        self.cbase = 0
        self.abort = torch.zeros(8, dtype=torch.int64).pin_memory()
        self.dtens = [torch.zeros(64, dtype=torch.int64, device=d) for d in self.dev]
        self.dflags = [t.data_ptr() for t in self.dtens]
        self.sseq = 0
        for i in range(n):  # peer access between every two GPUs, for the scatter/all-gather
            for j in range(n):
                if i != j:
                    self.buf[j][:16].copy_(self.buf[i][:16])
        self.kernel = None

    def flag(self, i, l):
        return self.hflag.data_ptr() + 64 * (i * self.L + l)

    def run(self, size, step, lanes, sm=False):
        part = (size + lanes - 1) // lanes
        part = (part + 4095) & ~4095
        for i in range(self.n):
            with torch.cuda.device(i):
                if lanes > 1:
                    ev = torch.cuda.Event()
                    ev.record(self.main[i])
                    for l in range(lanes):
                        self.lane[i][l].wait_event(ev)
        for l in range(lanes):
            lo, hi = l * part, min(size, (l + 1) * part)
            if lo >= hi:
                continue
            nsteps = (hi - lo + step - 1) // step
            base = self.seq[l]
            for i in range(self.n - 1):
                st = (self.lane[i][l] if lanes > 1 else self.main[i]).cuda_stream
                for k in range(nsteps):
                    off = lo + k * step
                    ln = min(step, hi - off)
                    if i > 0:
                        wait(self.flag(i, l), base + k + 1, st)
                    if sm:
                        self.kernel.copy(i, self.buf[i + 1].data_ptr() + off, self.buf[i].data_ptr() + off, ln, st)
                    else:
                        copy(self.buf[i + 1].data_ptr() + off, self.buf[i].data_ptr() + off, ln, st)
                    write(self.flag(i + 1, l), base + k + 1, st)
            self.seq[l] += nsteps
        if lanes > 1:
            for i in range(self.n):
                with torch.cuda.device(i):
                    for l in range(lanes):
                        ev = torch.cuda.Event()
                        ev.record(self.lane[i][l])
                        self.main[i].wait_event(ev)

    def sag(self, size, steps):
        """Scatter then all-gather: the root pushes piece j (of n-1) to receiver j, in `steps` steps per
        piece, round robin; receiver j pushes each step of its piece on to every other receiver."""
        r = self.n - 1
        piece = ((size + r - 1) // r + 4095) & ~4095
        base = self.sseq
        root = self.main[0].cuda_stream
        for k in range(steps):
            for j in range(1, self.n):
                lo, hi = (j - 1) * piece, min(size, j * piece)
                st = (hi - lo + steps - 1) // steps
                off, ln = lo + k * st, min(st, hi - lo - k * st)
                if ln <= 0:
                    continue
                copy(self.buf[j].data_ptr() + off, self.buf[0].data_ptr() + off, ln, root)
                write(self.sflag.data_ptr() + 64 * j, base + k + 1, root)
        for j in range(1, self.n):
            s = self.main[j].cuda_stream
            lo, hi = (j - 1) * piece, min(size, j * piece)
            st = (hi - lo + steps - 1) // steps
            for k in range(steps):
                off, ln = lo + k * st, min(st, hi - lo - k * st)
                if ln <= 0:
                    continue
                wait(self.sflag.data_ptr() + 64 * j, base + k + 1, s)
                for m in range(1, self.n):
                    if m != j:
                        copy(self.buf[m].data_ptr() + off, self.buf[j].data_ptr() + off, ln, s)
        self.sseq += steps

    def smc(self, size, step, blocks, dev=False):
        """The SM chain: on every GPU but the last, one ncclshim_chain kernel; block g of GPU i waits on
        its predecessor's block g per step (flags in pinned host memory); the last GPU's stream waits
        for a counter its predecessor's stream writes after its kernel."""
        base = self.cbase
        for i in range(self.n - 1):
            st = self.main[i].cuda_stream
            fl = self.dflags if dev else [self.cflag.data_ptr() + 512 * k for k in range(self.n)]
            fin = fl[i] if i else 0
            fout = fl[i + 1] if i + 1 < self.n - 1 else 0
            self.kernel.chain(i, self.buf[i + 1].data_ptr(), self.buf[i].data_ptr(), size, step, fin, fout, base,
                              blocks, st, self.abort.data_ptr())
            if i + 1 == self.n - 1:
                write(self.flag(self.n - 1, 0) + 32, base + size, st)
        wait(self.flag(self.n - 1, 0) + 32, base + size, self.main[self.n - 1].cuda_stream)
        self.cbase += size

    def hopw(self, size, step):
        s = self.main[0].cuda_stream
        for off in range(0, size, step):
            copy(self.buf[1].data_ptr() + off, self.buf[0].data_ptr() + off, min(step, size - off), s)
            write(self.flag(1, 0) + 8, off, s)

    def join(self):
        last = self.main[self.n - 1]
        for s in self.main[:-1]:
            last.wait_stream(s)
        for s in self.main[:-1]:
            s.wait_stream(last)

    def sync(self):
        for d in self.dev:
            torch.cuda.synchronize(d)

    def time(self, fn, reps):
        """us per broadcast, from the first GPU's start to the end everywhere, and the host's
        enqueue us (chain_probe's clock, over the main streams)."""
        sec, ms = Chain.time(self, fn, reps)
        return sec * 1e6, ms * 1000


def fmt(v):
    return "%dK" % (v >> 10) if v < (1 << 20) else "%dM" % (v >> 20)


def main():
    n = int(opt("--gpus", str(torch.cuda.device_count())))
    sizes = [parse_size(v) for v in opt("--sizes", "1M,4M,16M,64M,256M,1G,4G").split(",")]
    lanes = [int(v) for v in opt("--lanes", "1,2,4").split(",")]
    steps = [parse_size(v) for v in opt("--steps", "2M,4M,8M,23M").split(",")]
    ch = Lanes(n, max(sizes), max(lanes))
    ch.kernel = Kernel(n)
    print("chain of %d GPUs (%s): GB/s of a broadcast [host enqueue us]" % (n, torch.cuda.get_device_name(0)))
    for size in sizes:
        reps = max(3, min(50, (4 << 30) // size))
        row = []
        us, e = ch.time(lambda: ch.run(size, size, 1), reps)
        row.append("whole %6.1f [%5.0f]" % (size / us / 1e3, e))
        us, e = ch.time(lambda: ch.run(size, size, 1, sm=True), reps)
        row.append("sm %6.1f" % (size / us / 1e3))
        if "--sag" in sys.argv:
            for k in (1, 2, 4, 8):
                us, e = ch.time(lambda: ch.sag(size, k), reps)
                row.append("sag/%d %6.1f" % (k, size / us / 1e3))
        for blocks in [int(v) for v in opt("--blocks", "8,16,32").split(",")]:
            cells = []
            for cstep in [parse_size(v) for v in opt("--sm-steps", "256K,1M,4M,16M").split(",")]:
                if cstep > size and cstep != parse_size(opt("--sm-steps", "256K,1M,4M,16M").split(",")[0]):
                    continue
                us, e = ch.time(lambda: ch.smc(size, cstep, blocks), reps)
                ud, e = ch.time(lambda: ch.smc(size, cstep, blocks, True), reps)
                cells.append("%s:%6.1f/%6.1f" % (fmt(cstep), size / us / 1e3, size / ud / 1e3))
            row.append("smc G%d [%s]" % (blocks, " ".join(cells)))
        if size <= (4 << 20):
            for pieces in (2, 4):
                us, e = ch.time(lambda: ch.run(size, size // pieces, 1, sm=True), reps)
                row.append("sm/%d %6.1f" % (pieces, size / us / 1e3))
                us, e = ch.time(lambda: ch.run(size, size // pieces, 1), reps)
                row.append("ce/%d %6.1f" % (pieces, size / us / 1e3))
        print("%6d MiB  %s" % (size >> 20, "  ".join(row)))
        for step in steps:
            if step >= size or size // step > 2048:
                continue
            row = []
            us, _ = ch.time(lambda: ch.hopw(size, step), reps)
            row.append("hopw %6.1f" % (size / us / 1e3))
            for L in lanes:
                if size // L < step:
                    continue
                us, e = ch.time(lambda: ch.run(size, step, L), reps)
                row.append("L%d %6.1f [%5.0f]" % (L, size / us / 1e3, e))
            print("%6d MiB step %4.1f MiB: %s" % (size >> 20, step / (1 << 20), "  ".join(row)))
            sys.stdout.flush()
    for d in ch.dev:
        torch.cuda.synchronize(d)
    ok = torch.equal(ch.buf[-1][:64 << 20].cpu(), ch.buf[0][:64 << 20].cpu())
    print("bit-exact at the end of the chain (first 64 MiB):", ok)
    odd = (64 << 20) + 7
    for b in ch.buf[1:]:
        b.zero_()
    for d in ch.dev:
        torch.cuda.synchronize(d)
    ch.smc(odd, 1 << 20, 16, True)
    ch.join()
    for d in ch.dev:
        torch.cuda.synchronize(d)
    ok2 = all(torch.equal(b[:odd].cpu(), ch.buf[0][:odd].cpu()) for b in ch.buf[1:])
    print("SM chain bit-exact on every GPU (64 MiB + 7, 1 MiB steps, 16 blocks, device flags):", ok2)
    ok = ok and ok2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
