"""GPU test (e): the ipc action on real GPUs.  A ctypes (vLLM pynccl style)
weight-update communicator between a trainer (rank 0) and an inference process
(rank 1), decided `ipc` (auto: inference ranks, one host), beside a torch
training communicator.  Warm-up all-reduce of one float, then broadcasts of
seeded random bytes from each root, odd sizes, issued on 3 streams in turn
without synchronising in between, then NeMo-RL's refit pattern: 2 GiB of packed
buffers on 2 streams in turn.  Every buffer is compared with its expected hash.

    python3 tests/gpu/ipc.py --outdir DIR [--preload SHIM] [--world N]
    python3 tests/gpu/ipc.py --check DIR        (CHECK lines)

With N > 2 ranks (one per GPU: a trainer and an inference engine of N - 1 ranks)
the broadcasts form a chain through every GPU, again decided by auto.
"""
import glob
import os
import re
import sys

import common
import ctypes_bcast
import torch_allreduce

SIZES = [1, 4097, (4 << 20) + 3, (64 << 20) + 7]
REFIT_BYTES = 2 << 30
REFIT_BUFFERS = 8


def seeded(nbytes, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def worker(args):
    import torch
    import torch.distributed as dist
    lib = ctypes_bcast.NCCLLibrary(common.nccl_so_path())
    rank, world = args["rank"], args["world"]
    dev = torch.device("cuda", rank)
    comm = ctypes_bcast.make_comm(lib, args, "ipc")
    torch_allreduce.init_torch(args)
    res = torch_allreduce.allreduce_checks(args)
    vp = ctypes_bcast.buffer_type
    st = ctypes_bcast.cudaStream_t
    warm = torch.ones(1, dtype=torch.float32, device=dev)
    lib.ncclAllReduce(vp(warm.data_ptr()), vp(warm.data_ptr()), 1, ctypes_bcast.ncclFloat32, ctypes_bcast.ncclSum,
                      comm, st(torch.cuda.current_stream().cuda_stream))
    torch.cuda.synchronize()
    res["warmup"] = warm.item()
    streams = [torch.cuda.Stream(device=dev) for _ in range(3)]
    bufs, expect = [], []
    i = 0
    for root in range(world):
        for size in SIZES:
            src = seeded(size, 1000 * root + i)
            buf = src.to(dev) if rank == root else torch.zeros(size, dtype=torch.uint8, device=dev)
            s = streams[i % 3]
            s.wait_stream(torch.cuda.current_stream())  # the buffer is ready before the stream reads it
            lib.ncclBroadcast(vp(buf.data_ptr()), vp(buf.data_ptr()), size, ctypes_bcast.ncclUint8, root, comm,
                              st(s.cuda_stream))
            bufs.append(buf)
            expect.append(common.sha256_tensor(src))
            i += 1
    torch.cuda.synchronize()
    res["bcast_ok"] = [common.sha256_tensor(b) == e for b, e in zip(bufs, expect)]
    del bufs
    # AllGather (in place), and Send/Recv around the ring at once in a group.
    per = (16 << 20) + 5
    gath = torch.zeros(world * per, dtype=torch.uint8, device=dev)
    gath[rank * per:(rank + 1) * per] = seeded(per, 500 + rank).to(dev)
    cs = st(torch.cuda.current_stream().cuda_stream)
    lib.ncclAllGather(vp(gath[rank * per:].data_ptr()), vp(gath.data_ptr()), per, ctypes_bcast.ncclUint8, comm, cs)
    out = seeded(33 << 20, 600 + rank).to(dev)
    inn = torch.zeros(33 << 20, dtype=torch.uint8, device=dev)
    nxt, prv = (rank + 1) % world, (rank - 1 + world) % world
    lib.ncclGroupStart()
    lib.ncclSend(vp(out.data_ptr()), out.numel(), ctypes_bcast.ncclUint8, nxt, comm, cs)
    lib.ncclRecv(vp(inn.data_ptr()), inn.numel(), ctypes_bcast.ncclUint8, prv, comm, cs)
    lib.ncclGroupEnd()
    torch.cuda.synchronize()
    res["allgather_ok"] = all(common.sha256_tensor(gath[q * per:(q + 1) * per]) ==
                              common.sha256_tensor(seeded(per, 500 + q)) for q in range(world))
    res["sendrecv_ok"] = common.sha256_tensor(inn) == common.sha256_tensor(seeded(33 << 20, 600 + prv))
    del gath, out, inn
    # Refit: packed buffers, 2 streams in turn, from rank 0.
    per = REFIT_BYTES // REFIT_BUFFERS
    refit = []
    for k in range(REFIT_BUFFERS):
        buf = (seeded(1 << 20, 77 + k).to(dev).repeat(per >> 20) if rank == 0
               else torch.zeros(per, dtype=torch.uint8, device=dev))
        s = streams[k % 2]
        s.wait_stream(torch.cuda.current_stream())
        lib.ncclBroadcast(vp(buf.data_ptr()), vp(buf.data_ptr()), per, ctypes_bcast.ncclUint8, 0, comm,
                          st(s.cuda_stream))
        refit.append(buf)
    torch.cuda.synchronize()
    res["refit_ok"] = all(common.sha256_tensor(b) == common.sha256_tensor(seeded(1 << 20, 77 + k).repeat(per >> 20))
                          for k, b in enumerate(refit))
    del refit
    lib.ncclCommDestroy(comm)
    # Repeated create / use / destroy gives back every byte of device memory.
    torch.cuda.synchronize()
    # Every rank is through its destroy: a peer gives back its mappings of this
    # rank's memory last, and until then that memory stays allocated.
    dist.barrier()
    free0, _ = torch.cuda.mem_get_info(dev)
    small = torch.ones(1 << 20, dtype=torch.uint8, device=dev)
    for k in range(5):
        c2 = ctypes_bcast.make_comm(lib, args, "again%d" % k)
        lib.ncclBroadcast(vp(small.data_ptr()), vp(small.data_ptr()), small.numel(), ctypes_bcast.ncclUint8, 0, c2,
                          st(torch.cuda.current_stream().cuda_stream))
        torch.cuda.synchronize()
        lib.ncclCommDestroy(c2)
    torch.cuda.synchronize()
    dist.barrier()
    free1, _ = torch.cuda.mem_get_info(dev)
    res["leak_mib"] = (free0 - free1) / 2**20
    dist.destroy_process_group()
    return res


def check(outdir):
    chk = common.checker("ipc")

    summary, ranks = common.read_summary(outdir)
    world = len(ranks)
    chk(summary["ok"], "all %d ranks finished" % world)
    chk(all(r.get("warmup") == float(world) for r in ranks),
        "the warm-up all-reduce of one float gives %d.0 on every rank" % world)
    chk(all(r.get("bcast_ok") and all(r["bcast_ok"]) for r in ranks),
        "broadcasts from each root, sizes %s, on 3 streams in turn: bit-exact %s" % (SIZES, [r.get("bcast_ok") for r in ranks]))
    chk(all(r.get("allgather_ok") for r in ranks), "AllGather of 16 MiB + 5 per rank, in place: exact")
    chk(all(r.get("sendrecv_ok") for r in ranks), "Send/Recv of 33 MiB around the ring at once in a group: exact")
    chk(all(r.get("leak_mib", 99) <= 2 for r in ranks),
        "5 more ipc communicators created, used and destroyed: device memory back (%s MiB)"
        % [r.get("leak_mib") for r in ranks])
    chk(all(r.get("refit_ok") for r in ranks), "refit: %d GiB in %d packed buffers on 2 streams in turn, bit-exact"
        % (REFIT_BYTES >> 30, REFIT_BUFFERS))
    chk(all(r.get("allreduce_f32") == r.get("allreduce_f32_expected") for r in ranks),
        "the torch training all-reduce beside it is exact")
    recs = common.read_records(outdir)
    wu = [c for c in recs if c["type"] == "comm" and c["caller"]["api"] == "ctypes"]
    main = [c for c in wu if c.get("decision", {}).get("id") == wu[0].get("decision", {}).get("id")] if wu else []
    chk(len(main) == world and all(c["action"] == "ipc" and c["comm"] is None for c in wu),
        "the ctypes communicators are ipc on every rank, with no NCCL communicator")
    want = "NCCLSHIM_WEIGHT_UPDATE=auto: %d inference rank" % (world - 1)
    chk(wu and all(want in c["action_reason"] and "all %d ranks on one host: ipc" % world in c["action_reason"]
                   for c in wu),
        "auto chose it: '%s ... all %d ranks on one host: ipc' (%s)" % (want, world, wu[0]["action_reason"] if wu else "-"))
    inits = []
    for f in glob.glob(os.path.join(outdir, "nccl.*.log")):
        inits += [l for l in open(f, errors="replace") if re.search(r"Init COMPLETE", l)]
    chk(len(inits) == world, "NCCL's log has %d inits (torch's, one per rank), none for the ipc communicators" % world)
    ends = [r for r in recs if r["type"] == "comm_end" and r.get("action") == "ipc"]
    chk(len(ends) == 6 * world, "every rank destroyed its 6 ipc communicators (comm_end records)")
    warns = [r for r in recs if r["type"] == "warning"]
    chk(not warns, "no warning records %s" % [w.get("message", "")[:200] for w in warns])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
        sys.exit(0)
    sys.exit(common.main(__file__, worker))
