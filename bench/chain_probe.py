"""What a step of the ipc chain costs, without the shim (issue 24): one process
drives every GPU of the host, and a broadcast goes GPU 0 -> 1 -> ... -> N-1 in
steps, each GPU's stream copying a step into its successor's buffer (a push, as
the shim's chain does) once its predecessor's copy of that step has landed.

    python3 bench/chain_probe.py [--gpus N] [--sizes 64M,1G,4G] [--steps 2M,8M,16M,46M]

For each size and step, GB/s of the whole broadcast (the last GPU's), in these
ways of saying "step k has landed":
  dev    a counter in the successor's device memory (cuStreamWriteValue64 by the
         sender, cuStreamWaitValue64 by the successor: the shim before 2026-11-27)
  host   the same counter in pinned host memory mapped into every GPU (the shim
         since: docs/design.md, "Counters in host memory")
  event  CUDA events instead of counters (cuEventRecord / cuStreamWaitEvent)
  hop    one hop alone (GPU 0 -> 1) in those steps, one stream, no waits: what a
         copy of that size reaches by itself
and "whole" once: the broadcast as one copy per hop, each hop after the last.
The enqueue time of the whole chain (host, ms) is printed beside each figure:
a chain whose enqueue takes longer than its transfer is bound by the host.
"""
import sys
import time

import torch

from cuda_ops import copy, wait, write


def parse_size(v):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(v[:-1]) * mult[v[-1]]) if v[-1] in mult else int(v)


def opt(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


class Chain:
    def __init__(self, n, size):
        self.n = n
        self.dev = [torch.device("cuda", i) for i in range(n)]
        self.buf = [torch.empty(size, dtype=torch.uint8, device=d) for d in self.dev]
        self.buf[0].random_(0, 255)
        for i in range(n - 1):  # peer access along the chain, both ways (torch enables it as it copies)
            self.buf[i + 1][:16].copy_(self.buf[i][:16])
            self.buf[i][:16].copy_(self.buf[i + 1][:16])
        self.s = [torch.cuda.Stream(device=d) for d in self.dev]
        self.dflag = [torch.zeros(8, dtype=torch.int64, device=d) for d in self.dev]
        self.hflag = torch.zeros(8 * n, dtype=torch.int64).pin_memory()
        self.hdev = self.hflag.data_ptr()  # UVA: the host pointer is the device address too
        self.seq = 0
        self.ev = None

    def flag(self, way, i):
        return self.dflag[i].data_ptr() if way == "dev" else self.hdev + 64 * i

    def run(self, way, size, step):
        """Enqueues one broadcast; returns the host's enqueue time (s)."""
        t = time.perf_counter()
        base = self.seq
        nsteps = (size + step - 1) // step
        if way == "event":
            evs = [[torch.cuda.Event() for _ in range(nsteps)] for _ in range(self.n)]
        for i in range(self.n - 1):
            s = self.s[i].cuda_stream
            for k in range(nsteps):
                off, ln = k * step, min(step, size - k * step)
                if i > 0:
                    if way == "event":
                        self.s[i].wait_event(evs[i][k])
                    else:
                        wait(self.flag(way, i), base + k + 1, s)
                copy(self.buf[i + 1].data_ptr() + off, self.buf[i].data_ptr() + off, ln, s)
                if way == "event":
                    evs[i + 1][k].record(self.s[i])
                else:
                    write(self.flag(way, i + 1), base + k + 1, s)
        self.seq += nsteps
        return time.perf_counter() - t

    def hop(self, size, step):
        s = self.s[0].cuda_stream
        for off in range(0, size, step):
            copy(self.buf[1].data_ptr() + off, self.buf[0].data_ptr() + off, min(step, size - off), s)

    def whole(self, size):
        for i in range(self.n - 1):
            if i:
                self.s[i].wait_stream(self.s[i - 1])
            copy(self.buf[i + 1].data_ptr(), self.buf[i].data_ptr(), size, self.s[i].cuda_stream)

    def sync(self):
        for d in self.dev:
            torch.cuda.synchronize(d)

    def join(self):
        """Every stream waits for every other: the next broadcast starts after this one, everywhere."""
        last = self.s[self.n - 2]
        for s in self.s:
            if s is not last:
                last.wait_stream(s)
        for s in self.s:
            if s is not last:
                s.wait_stream(last)

    def time(self, fn, reps):
        """Seconds per fn (from the first stream's start to the end of all), and the host's mean enqueue ms."""
        fn()
        self.join()
        self.sync()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record(self.s[0])
        for s in self.s[1:]:
            s.wait_event(a)
        enq = 0.0
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            enq += time.perf_counter() - t
            self.join()
        b.record(self.s[0])  # after join, the first stream waited for the last: events of one device compare
        b.synchronize()
        return a.elapsed_time(b) / 1000.0 / reps, enq / reps * 1000


def main():
    n = int(opt("--gpus", str(torch.cuda.device_count())))
    sizes = [parse_size(v) for v in opt("--sizes", "16M,64M,256M,1G,4G").split(",")]
    steps = [parse_size(v) for v in opt("--steps", "2M,8M,16M,46M").split(",")]
    ch = Chain(n, max(sizes))
    print("chain of %d GPUs (%s): GB/s of a broadcast (host enqueue ms)" % (n, torch.cuda.get_device_name(0)))
    for size in sizes:
        reps = max(3, min(20, (2 << 30) // size))
        t, e = ch.time(lambda: ch.whole(size), reps)
        print("%6d MiB whole %7.1f (%5.2f)" % (size >> 20, size / t / 1e9, e))
        for step in steps:
            if step > size or size // step > 512:
                continue  # more steps than Python enqueues faster than the GPU copies
            row = []
            for way in ("dev", "host", "event"):
                t, e = ch.time(lambda: ch.run(way, size, step), reps)
                row.append("%s %7.1f (%5.2f)" % (way, size / t / 1e9, e))
            t, e = ch.time(lambda: ch.hop(size, step), reps)
            row.append("hop %7.1f" % (size / t / 1e9))
            print("%6d MiB step %3d MiB (%4d steps): %s" % (size >> 20, step >> 20, (size + step - 1) // step,
                                                           "  ".join(row)))
            sys.stdout.flush()
    ch.sync()
    assert torch.equal(ch.buf[-1][:1 << 20].cpu(), ch.buf[0][:1 << 20].cpu()), "the last GPU's bytes differ"
    print("bit-exact at the end of the chain (first MiB)")


if __name__ == "__main__":
    main()
