"""What a broadcast between two GPUs can cost, without the shim: raw copies
and the stream memory operations of the ipc protocol, in one process with
both GPUs.  Used to choose the ipc broadcast's design (docs/benchmarks.md).

    python3 bench/copy_probe.py [--load]

--load: the same while a bf16 matmul loop (8192^3) runs on a side stream of
both GPUs, as in bench/ipc_bcast.py's run under load.

Cases (each timed over back-to-back iterations with CUDA events):
  torch    tensor.copy_ from GPU 0 to GPU 1 (the bench's "peer copy")
  push     cuMemcpyDtoDAsync on a stream of GPU 0
  pull     the same on a stream of GPU 1 (how the ipc successor copies)
  pullN    the copy split in N parts on N streams of GPU 1
  hand     pull, plus the handshake of one pulled broadcast: GPU 0's stream
           writes AVAIL (on GPU 1), waits TAKEN (its own), writes DONE;
           GPU 1's stream waits AVAIL, copies, writes TAKEN (on GPU 0) and DONE
  handN    hand with the copy split over N streams
  hmin     hand without the DONE writes
  hpush    the handshake of a pushed broadcast: GPU 1's stream writes READY
           (on GPU 0) and waits WRITTEN (its own), then DONE; GPU 0's stream
           waits READY, copies into GPU 1, writes WRITTEN (on GPU 1) and DONE
  hpushmin hpush without the DONE writes
  bothN    N% pushed by GPU 0, the rest pulled by GPU 1, at once
"""
import sys

import torch

from cuda_ops import copy, wait, write


def main():
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    big = 256 << 20
    src = torch.randint(0, 255, (big,), dtype=torch.uint8, device=d0)
    dst = torch.empty(big, dtype=torch.uint8, device=d1)
    back = torch.empty(16, dtype=torch.uint8, device=d0)
    back.copy_(dst[:16])  # peer access both ways
    dst[:16].copy_(back)
    f0 = torch.zeros(64, dtype=torch.int64, device=d0)  # TAKEN at 0, DONE at 8
    f1 = torch.zeros(64, dtype=torch.int64, device=d1)  # AVAIL at 0, DONE at 8
    torch.cuda.synchronize(d0)
    torch.cuda.synchronize(d1)
    s0 = torch.cuda.Stream(device=d0)
    s1 = [torch.cuda.Stream(device=d1) for _ in range(4)]
    ev = [[torch.cuda.Event() for _ in range(4)] for _ in range(2)]
    seq = [0]

    def split(n, size, k):
        part = (size + k - 1) // k
        if k == 1:
            copy(dst.data_ptr(), src.data_ptr(), size, s1[0].cuda_stream)
            return
        ev[0][0].record(s1[0])
        for i in range(1, k):
            s1[i].wait_event(ev[0][0])
        for i in range(k):
            off = i * part
            copy(dst.data_ptr() + off, src.data_ptr() + off, min(part, size - off), s1[i].cuda_stream)
        for i in range(1, k):
            ev[1][i].record(s1[i])
            s1[0].wait_event(ev[1][i])

    def hand(size, k):
        seq[0] += 1
        v = seq[0]
        write(f1.data_ptr(), v, s0.cuda_stream)
        wait(f0.data_ptr(), v, s0.cuda_stream)
        write(f0.data_ptr() + 8, v, s0.cuda_stream)
        wait(f1.data_ptr(), v, s1[0].cuda_stream)
        split(None, size, k)
        write(f0.data_ptr(), v, s1[0].cuda_stream)
        write(f1.data_ptr() + 8, v, s1[0].cuda_stream)

    def hpush(size, done):
        # Push: GPU 1's stream says its buffer is ready (f0[0]) and waits
        # for the data (f1[0]); GPU 0's stream waits for ready and copies.
        seq[0] += 1
        v = seq[0]
        write(f0.data_ptr(), v, s1[0].cuda_stream)
        wait(f1.data_ptr(), v, s1[0].cuda_stream)
        if done:
            write(f1.data_ptr() + 8, v, s1[0].cuda_stream)
        wait(f0.data_ptr(), v, s0.cuda_stream)
        copy(dst.data_ptr(), src.data_ptr(), size, s0.cuda_stream)
        write(f1.data_ptr(), v, s0.cuda_stream)
        if done:
            write(f0.data_ptr() + 8, v, s0.cuda_stream)

    def hmin(size):
        seq[0] += 1
        v = seq[0]
        write(f1.data_ptr(), v, s0.cuda_stream)
        wait(f0.data_ptr(), v, s0.cuda_stream)
        wait(f1.data_ptr(), v, s1[0].cuda_stream)
        copy(dst.data_ptr(), src.data_ptr(), size, s1[0].cuda_stream)
        write(f0.data_ptr(), v, s1[0].cuda_stream)

    def both(size, frac):
        # The first part pushed by GPU 0's copy engines, the rest pulled by
        # GPU 1's, at once: more engines on the one NVLink direction.
        k = (int(size * frac) >> 12) << 12
        ev[0][0].record(s1[0])
        s0.wait_event(ev[0][0])
        copy(dst.data_ptr(), src.data_ptr(), k, s0.cuda_stream)
        copy(dst.data_ptr() + k, src.data_ptr() + k, size - k, s1[0].cuda_stream)
        ev[1][0].record(s0)
        s1[0].wait_event(ev[1][0])

    cases = {
        "torch": lambda size: dst[:size].copy_(src[:size], non_blocking=True),
        "push": lambda size: copy(dst.data_ptr(), src.data_ptr(), size, s0.cuda_stream),
        "pull": lambda size: split(None, size, 1),
        "pull2": lambda size: split(None, size, 2),
        "pull4": lambda size: split(None, size, 4),
        "hand": lambda size: hand(size, 1),
        "hand2": lambda size: hand(size, 2),
        "hand4": lambda size: hand(size, 4),
        "hmin": hmin,
        "both50": lambda size: both(size, 0.5),
        "both60": lambda size: both(size, 0.6),
        "hpush": lambda size: hpush(size, True),
        "hpushmin": lambda size: hpush(size, False),
    }
    timing = {"torch": lambda: torch.cuda.current_stream(d0), "push": lambda: s0}
    sizes = [16 << 20, 64 << 20, 256 << 20]
    load = "--load" in sys.argv
    if load:
        sizes.append(1 << 30)
        big = max(sizes)
        src = torch.randint(0, 255, (big,), dtype=torch.uint8, device=d0)
        dst = torch.empty(big, dtype=torch.uint8, device=d1)
        mats = []
        for d in (d0, d1):
            a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=d)
            mats.append((d, torch.cuda.Stream(device=d), a, torch.empty_like(a)))
        torch.cuda.synchronize(d0)
        torch.cuda.synchronize(d1)

    def busy(n):
        # Enough matmuls on both GPUs' side streams to outlast n copies.
        for d, st, a, out in mats:
            with torch.cuda.device(d), torch.cuda.stream(st):
                for _ in range(n):
                    torch.mm(a, a, out=out)

    def settle():
        for d, st, a, out in mats:
            st.synchronize()
    print("%8s" % "case" + "".join("%12s" % ("%d MiB" % (s >> 20)) for s in sizes))
    for name, fn in cases.items():
        row = []
        for size in sizes:
            st = timing.get(name, lambda: s1[0])()
            n = max(10, min(100, (4 << 30) // size))
            fn(size)
            torch.cuda.synchronize(d0)
            torch.cuda.synchronize(d1)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if load:
                busy(max(20, n * size // (64 << 20)))  # ~1.4 ms each: longer than the copies
            a.record(st)
            for _ in range(n):
                fn(size)
            b.record(st)
            b.synchronize()
            torch.cuda.synchronize(d0)
            if load:
                settle()
            row.append(size / (a.elapsed_time(b) / 1000.0 / n) / 1e9)
        print("%8s" % name + "".join("%12.1f" % x for x in row))
        sys.stdout.flush()
    assert torch.equal(dst[:64].cpu(), src[:64].cpu())


if __name__ == "__main__":
    main()
