"""GPU test (f): colocated RL, trainer (rank 0) and inference process (rank 1)
on ONE GPU, which NCCL refuses (two ranks of a communicator on one device) and
the shim's ipc transport carries.  A weight-update communicator of a ctypes
client (vLLM pynccl style), or with COLOCATED_CLIENT=nccl4py of nccl4py (what
NeMo-RL's trainer uses: ncclCommInitRankScalable, its symbols looked up with
dlsym), roles from the process titles, NCCLSHIM_WEIGHT_UPDATE=auto.
Warm-up all-reduce of one float, broadcasts of seeded random bytes from each
root (odd sizes, 3 streams in turn, no synchronisation in between), then a
refit: packed buffers on 2 streams in turn.  Every buffer against its hash.
Then both free the refit's buffers while each keeps its communicator: the
GPU's free memory rises by them within 10 s.

    python3 tests/gpu/colocated.py --outdir DIR [--preload SHIM]
    python3 tests/gpu/colocated.py --check DIR noshim|shim|sm|vmm|staged   (CHECK lines)
    COLOCATED_CLIENT=nccl4py ... (both; nccl4py must import)

Both ranks use GPU $COLOCATED_DEVICE (default 0): it runs wherever there is one GPU.
"""
import os
import sys
import time

import clients
import common

SIZES = [1, 4097, (4 << 20) + 3, (64 << 20) + 7]
REFIT_BUFFERS = 8
REFIT_BYTES = 64 << 20  # each
DEV = int(os.environ.get("COLOCATED_DEVICE", "0"))
CLIENT = os.environ.get("COLOCATED_CLIENT", "ctypes")


def seeded(nbytes, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def worker(args):
    import torch
    torch.cuda.set_device(DEV)
    rank = args["rank"]
    dev = torch.device("cuda", DEV)
    res = {"device": DEV, "gpu": torch.cuda.get_device_name(DEV), "client": CLIENT}
    try:
        client = clients.make(CLIENT, args, "colocated", DEV)
    except RuntimeError as e:
        res["init_error"] = str(e)
        return res
    streams = [torch.cuda.Stream(device=dev) for _ in range(3)]
    one = torch.ones(1, dtype=torch.float32, device=dev)
    streams[0].wait_stream(torch.cuda.current_stream())  # the buffer is written before the stream reads it (as for NCCL)
    client.sum_floats(one, streams[0])
    torch.cuda.synchronize()
    res["warmup"] = one.item()
    # Broadcasts from each root, 3 streams in turn, no host synchronisation between them.
    jobs, k = [], 0
    for root in (0, 1):
        for size in SIZES:
            src = seeded(size, 1000 * root + size)
            buf = src.to(dev) if rank == root else torch.zeros(size, dtype=torch.uint8, device=dev)
            jobs.append((buf, src))
    torch.cuda.synchronize()
    for root in (0, 1):
        for i in range(len(SIZES)):
            buf = jobs[root * len(SIZES) + i][0]
            s = streams[k % 3]
            k += 1
            client.bcast(buf, root, s)
    torch.cuda.synchronize()
    res["bcast_ok"] = [common.sha256_tensor(b) == common.sha256_tensor(s) for b, s in jobs]
    # The refit: packed buffers, 2 streams in turn, each buffer its own allocation.
    srcs = [seeded(REFIT_BYTES, 77 + i) for i in range(REFIT_BUFFERS)]
    bufs = [s.to(dev) if rank == 0 else torch.zeros(REFIT_BYTES, dtype=torch.uint8, device=dev) for s in srcs]
    torch.cuda.synchronize()
    for i, b in enumerate(bufs):
        client.bcast(b, 0, streams[i % 2])
    torch.cuda.synchronize()
    res["refit_ok"] = all(common.sha256_tensor(b) == common.sha256_tensor(s) for b, s in zip(bufs, srcs))
    # Both processes free their refit buffers (cudaFree, through empty_cache) while each keeps
    # its communicator, and so its mappings of the other's ("Mappings kept",
    # shim/ipc/ipc_proto.h): the GPU's free memory must rise by them all the same, within 10 s,
    # whichever way the hops went (pushed: the trainer maps the inference buffers; pulled: the
    # other way).
    out = os.path.abspath(args["outdir"])
    if rank == 1:
        free0 = torch.cuda.mem_get_info(DEV)[0]
        common.put_file(os.path.join(out, "freed.base"), b"1")
        common.wait_file(os.path.join(out, "freed.0"), 60)
    else:
        common.wait_file(os.path.join(out, "freed.base"), 60)
    del bufs, b  # b: the loop's last
    torch.cuda.empty_cache()
    if rank == 0:
        common.put_file(os.path.join(out, "freed.0"), b"1")
        common.wait_file(os.path.join(out, "freed.done"), 60)
    else:
        # All but two buffers' worth: an allocator may keep a segment.
        want, t0 = free0 + (2 * REFIT_BUFFERS - 2) * REFIT_BYTES, time.monotonic()
        res["freed_back_s"] = None
        while time.monotonic() - t0 < 10:
            if torch.cuda.mem_get_info(DEV)[0] >= want:
                res["freed_back_s"] = round(time.monotonic() - t0, 3)
                break
            time.sleep(0.01)
        res["freed_mib"] = (torch.cuda.mem_get_info(DEV)[0] - free0) >> 20
        common.put_file(os.path.join(out, "freed.done"), b"1")
    client.destroy()
    return res


def check(outdir, mode):
    chk = common.checker("colocated (%s%s)" % (mode, "" if CLIENT == "ctypes" else ", " + CLIENT))

    summary, ranks = common.read_summary(outdir)
    chk(summary["ok"], "both processes finished on one GPU (%s)" % (ranks[0].get("gpu") if ranks else "?"))
    if mode == "noshim":
        errs = [r.get("init_error") for r in ranks]
        # NCCL 2.28.9 refuses; a later NCCL that accepts must at least be exact.
        chk(all(e and "invalid usage" in e.lower().replace("_", " ") for e in errs) or
            all(r.get("refit_ok") for r in ranks),
            "NCCL alone refuses two ranks on one GPU: %s" % errs)
        return
    chk(all(r.get("warmup") == 2.0 for r in ranks), "the warm-up all-reduce of one float gives 2.0 on both ranks")
    chk(all(r.get("bcast_ok") and all(r["bcast_ok"]) for r in ranks),
        "broadcasts from each root, sizes %s, on 3 streams in turn: bit-exact %s" % (SIZES, [r.get("bcast_ok")
                                                                                        for r in ranks]))
    chk(all(r.get("refit_ok") for r in ranks), "refit: %d packed buffers of %d MiB on 2 streams in turn, bit-exact"
        % (REFIT_BUFFERS, REFIT_BYTES >> 20))
    back = ranks[1].get("freed_back_s") if len(ranks) > 1 else None
    chk(back is not None, "both processes' refit buffers (%d MiB), freed while each kept its communicator, went back "
        "to the GPU within 10 s (%s s; %s MiB back)" % (2 * REFIT_BUFFERS * REFIT_BYTES >> 20, back,
                                                       ranks[1].get("freed_mib") if len(ranks) > 1 else "?"))
    recs = common.read_records(outdir)
    comms = [c for c in recs if c["type"] == "comm" and c["caller"]["api"] == CLIENT]
    chk(len(comms) == 2 and all(c["action"] == "ipc" and c["comm"] is None for c in comms),
        "auto made it ipc on both ranks, with no NCCL communicator (%s; api %s)"
        % ([c.get("action") for c in comms], [c["caller"]["api"] for c in recs if c["type"] == "comm"]))
    ends = [r for r in recs if r["type"] == "comm_end" and r.get("action") == "ipc"]
    copies = [e.get("ipc", {}).get("copy", {}) for e in ends]
    chk(len(ends) == 2, "both ranks destroyed it (comm_end records)")
    want = "sm" if mode == "sm" else "ce"
    other = "ce" if want == "sm" else "sm"
    chk(sum(c.get(want, 0) for c in copies) > 0 and sum(c.get(other, 0) for c in copies) == 0,
        "its copies ran on the %s (records: %s)" % ("SMs (NCCLSHIM_IPC_COPY=sm)" if want == "sm"
                                                     else "copy engines", copies))
    hops = [e.get("ipc", {}).get("in", {}) for e in ends]
    vmm = [e.get("ipc", {}).get("vmm", {}) for e in ends]
    if mode == "staged":
        chk(sum(h.get("staged", 0) for h in hops) > 0, "expandable segments with NCCLSHIM_IPC_VMM=0: the staged path (%s)"
            % hops)
    if mode == "vmm":
        chk(sum(h.get("staged", 0) for h in hops) == 0 and sum(h.get("push", 0) + h.get("pull", 0) for h in hops) > 0,
            "expandable segments: every hop pushed or pulled, none staged (%s)" % hops)
        # The first of each hop shares its buffer's pieces and the second maps them; a rank second on
        # every hop of a broadcast does not describe its buffer (ipc_bcast.c, second_on_every_hop).
        sent = [v.get("pieces_sent", 0) for v in vmm]
        mapped = [v.get("pieces_mapped", 0) for v in vmm]
        chk(len(vmm) == 2 and sum(mapped) > 0 and all(mapped[r] <= sent[1 - r] for r in (0, 1)) and
            not any(v.get("note") for v in vmm),
            "pieces of cuMemCreate memory shared and mapped, each rank mapping no more than the other sent "
            "(records: %s)" % vmm)
    warns = [r for r in recs if r["type"] == "warning"]
    chk(not warns, "no warning records %s" % [w.get("message", "")[:200] for w in warns])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(common.main(__file__, worker, one_gpu=True))
