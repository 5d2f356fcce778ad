"""GPU test (d): the decisions on real NCCL.  Two processes, as in NeMo-RL: a
weight-update communicator made through ctypes (vLLM's pynccl style) between a
trainer (rank 0) and an inference process (rank 1), then a torch all-reduce
communicator, then a warm-up all-reduce and a broadcast on the weight-update
one.  Run by run.sh with NCCLSHIM_WEIGHT_UPDATE=socket, =frugal and =drop; the roles come
from the process titles (NCCLSHIM_TRAINING_TITLES / NCCLSHIM_INFERENCE_TITLES
match "--rank 0" / "--rank 1").

    python3 tests/gpu/decisions.py --outdir DIR [--preload SHIM]
    python3 tests/gpu/decisions.py --check DIR socket|frugal|drop      (CHECK lines)
"""
import glob
import os
import re
import sys

import common
import ctypes_bcast
import torch_allreduce

BCAST_BYTES = 8 << 20


def worker(args):
    import torch
    import torch.distributed as dist
    lib = ctypes_bcast.NCCLLibrary(common.nccl_so_path())
    rank, world = args["rank"], args["world"]
    dev = torch.device("cuda", rank)
    comm = ctypes_bcast.make_comm(lib, args, "weights")  # the weight-update communicator, first
    torch_allreduce.init_torch(args)
    res = torch_allreduce.allreduce_checks(args)  # the training communicator
    stream = torch.cuda.current_stream()
    warm = torch.zeros(1, dtype=torch.float32, device=dev) + 1
    rc_warm = lib.ncclAllReduce(ctypes_bcast.buffer_type(warm.data_ptr()), ctypes_bcast.buffer_type(warm.data_ptr()),
                                1, ctypes_bcast.ncclFloat32, ctypes_bcast.ncclSum, comm,
                                ctypes_bcast.cudaStream_t(stream.cuda_stream))
    src = ctypes_bcast.payload(BCAST_BYTES)
    buf = src.to(dev) if rank == 0 else torch.zeros(BCAST_BYTES, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    rc_bcast = lib.ncclBroadcast(ctypes_bcast.buffer_type(buf.data_ptr()), ctypes_bcast.buffer_type(buf.data_ptr()),
                                 BCAST_BYTES, ctypes_bcast.ncclUint8, 0, comm,
                                 ctypes_bcast.cudaStream_t(stream.cuda_stream))
    stream.synchronize()
    # NCCLLibrary raises on an error (like vLLM's NCCL_CHECK): returning means ncclSuccess.
    rc_warm = 0 if rc_warm is None else rc_warm
    rc_bcast = 0 if rc_bcast is None else rc_bcast
    res.update({"warmup": warm.item(), "warmup_rc": rc_warm, "bcast_rc": rc_bcast,
                "bcast": common.sha256_tensor(buf), "bcast_expected": common.sha256_tensor(src),
                "bcast_zero": common.sha256_tensor(torch.zeros(BCAST_BYTES, dtype=torch.uint8))})
    lib.ncclCommDestroy(comm)
    dist.destroy_process_group()
    return res


AUTO_REASONS = {  # auto across hosts (run.sh d3): what each fabric's reason must say
    "frugal": "fabric scarce, one channel fits (host 'node-a': InfiniBand/RoCE, NCCLSHIM_FABRIC_BUDGET 12",
    "socket": "fabric scarce (host 'node-a': InfiniBand/RoCE, NCCLSHIM_FABRIC_BUDGET 4",
    "passthrough": "fabric ample (every host; host 'node-a' has 8 EFA devices for 2 GPUs",
}


def check(outdir, mode):
    """mode: socket, frugal, drop, socket-ncclnet (socket while NCCL_NET=EFASim is set), or
    auto-<socket|frugal|passthrough> (auto across two hosts, on the fabric a fake sysfs presents)."""
    ncclnet = mode == "socket-ncclnet"
    mode = "socket" if ncclnet else mode
    auto = mode.startswith("auto-")
    mode = mode[5:] if auto else mode
    chk = common.checker(("auto-" if auto else "") + mode)

    summary, ranks = common.read_summary(outdir)
    chk(summary["ok"], "both ranks finished")
    chk(all(r.get("allreduce_f32") == r.get("allreduce_f32_expected") and
            r.get("allreduce_bf16") == r.get("allreduce_bf16_expected") for r in ranks),
        "the torch training all-reduce is exact (f32 and bf16)")
    recs = common.read_records(outdir)
    comms = [r for r in recs if r["type"] == "comm"]
    wu = [c for c in comms if c["caller"]["api"] == "ctypes"]
    tr = [c for c in comms if c["caller"]["api"] == "torch"]
    chk(len(wu) == 2 and all(c["purpose"] == "weight-update" for c in wu),
        "the ctypes communicator is weight-update on both ranks (training + inference rank)")
    chk(len(wu) == 2 and all(c["action"] == mode for c in wu) and len({c["decision"]["id"] for c in wu}) == 1,
        "both ranks carry out %s, from one decision" % mode)
    chk(tr and all(c["action"] == "passthrough" and "decision" not in c for c in tr),
        "the torch communicator is untouched (unmarked, passthrough)")
    if auto:
        why = [c.get("action_reason", "") for c in wu]
        chk(len(wu) == 2 and all("ranks on 2 hosts, " + AUTO_REASONS[mode] in w for w in why),
            "auto across hosts weighed the fabric: %s" % (why[:1],))
    # NCCL's own log: which communicators NCCL initialised, with which function and network.
    inits, channels = {}, {}
    for f in glob.glob(os.path.join(outdir, "nccl.*.log")):
        lines = open(f, errors="replace").read().splitlines()
        net_by_tid, comm_by_tid = {}, {}
        for line in lines:
            m = re.match(r"(\S+):(\d+):(\d+) .*Using network (\S+)", line)
            if m:
                net_by_tid[m.group(3)] = m.group(4)
            m = re.match(r"(\S+):(\d+):(\d+) .* comm (0x[0-9a-f]+) .*Init START", line)
            if m:
                comm_by_tid[m.group(3)] = m.group(4)
            m = re.match(r"(\S+):(\d+):(\d+) .*NCCL INFO (\d+) coll channels, .* (\d+) p2p channels per peer", line)
            if m and m.group(3) in comm_by_tid:  # the channels NCCL chose for the comm that thread initialises
                channels[comm_by_tid[m.group(3)]] = (int(m.group(4)), int(m.group(5)))
            m = re.match(r"(\S+):(\d+):(\d+) .*(ncclCommInit\w+|ncclCommSplit\w*) comm (0x[0-9a-f]+) .*Init COMPLETE",
                         line)
            if m:
                inits[m.group(5)] = (m.group(4), net_by_tid.get(m.group(3)))
    real = lambda c: c["comm"]
    if mode == "frugal":
        got = [inits.get(real(c)) for c in wu]
        chk(all(g and g[0] == "ncclCommInitRankConfig" for g in got),
            "NCCL's log: the weight-update comm was made by ncclCommInitRankConfig %s" % got)
        chk(all(c.get("frugal") == {"minCTAs": 1, "maxCTAs": 1, "nChannelsPerNetPeer": 1} for c in wu),
            "the records say NCCL was told minCTAs = maxCTAs = nChannelsPerNetPeer = 1")
        ch = [channels.get(real(c)) for c in wu]
        chk(all(x and x[0] == 1 for x in ch),
            "NCCL's log: one coll channel for the weight-update comm on both ranks (coll, p2p per peer: %s)" % ch)
        tch = [channels.get(real(c)) for c in tr]
        chk(all(x and x[0] > 1 for x in tch), "and more for the torch communicator beside it, untouched (%s)" % tch)
        chk(all(r.get("bcast") == r.get("bcast_expected") for r in ranks),
            "the %d-byte broadcast arrives bit-exact on the one-channel communicator" % BCAST_BYTES)
        chk(all(r.get("warmup") == 2.0 for r in ranks), "the warm-up all-reduce gives 2.0 on both ranks")
    elif mode == "socket":
        got = [inits.get(real(c)) for c in wu]
        chk(all(g and g[0] == "ncclCommInitRankConfig" and g[1] == "Socket" for g in got),
            "NCCL's log: the weight-update comm was made by ncclCommInitRankConfig on network Socket %s" % got)
        chk(all(r.get("bcast") == r.get("bcast_expected") for r in ranks),
            "the %d-byte broadcast arrives bit-exact on the Socket-configured communicator" % BCAST_BYTES)
        chk(all(r.get("warmup") == 2.0 for r in ranks), "the warm-up all-reduce gives 2.0 on both ranks")
    elif mode == "passthrough":
        got = [inits.get(real(c)) for c in wu]
        chk(all(g and g[0] == "ncclCommInitRank" for g in got),
            "NCCL's log: the weight-update comm made as the application asked (ncclCommInitRank) %s" % got)
        chk(all(r.get("bcast") == r.get("bcast_expected") for r in ranks),
            "the %d-byte broadcast arrives bit-exact" % BCAST_BYTES)
    else:
        chk(all(c["comm"] is None for c in wu) and len(inits) == len(tr),
            "NCCL's log: no init for the dropped communicator (%d inits, all torch's)" % len(inits))
        chk(all(r.get("bcast_rc") == 0 and r.get("warmup_rc") == 0 for r in ranks),
            "data calls on the dropped communicator return ncclSuccess")
        chk(ranks[1].get("bcast") == ranks[1].get("bcast_zero") and ranks[1].get("warmup") == 1.0,
            "and move nothing: rank 1's buffer is untouched (zeros), its warm-up stays 1.0")
        ends = [r for r in recs if r["type"] == "comm_end" and r.get("action") == "drop"]
        chk(len(ends) == 2 and all(e["ops"].get("Broadcast", {}).get("bytes") == BCAST_BYTES for e in ends),
            "comm_end records count the dropped broadcast's bytes")
    chk(all(real(c) in inits for c in tr), "NCCL's log has the torch communicator on both ranks")
    if ncclnet:
        chk(all(c.get("net") == "Socket" and "NCCL_NET=EFASim was hidden" in c.get("net_by", "") for c in wu),
            "with NCCL_NET=EFASim set: the records say NCCL was told Socket, NCCL_NET hidden from that init")
        got = [inits.get(real(c)) for c in tr]
        chk(all(g and g[1] == "EFASim" for g in got),
            "with NCCL_NET=EFASim set: the torch communicator uses the container's EFASim %s" % got)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(common.main(__file__, worker))
