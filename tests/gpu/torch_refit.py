"""GPU test: a refit over a torch process group, as slime and SGLang make theirs
(issue 32): trainer (rank 0) and inference process (rank 1) on ONE GPU, a
process group of their own (init_process_group, no device_id: torch makes the
NCCL communicator lazily, and its unique ID inside libtorch, at the first
broadcast), one broadcast per tensor from rank 0 inside a function named
`update_weights`.  NCCL refuses two ranks on one GPU; under the shim the ID
torch makes is marked (a weight-update call site on the stack), the ranks meet
at the root, auto chooses ipc, and torch's ProcessGroupNCCL runs its
broadcasts, its watchdog's queries and its teardown on the shim's handle.

    python3 tests/gpu/torch_refit.py --outdir DIR [--preload SHIM]
    python3 tests/gpu/torch_refit.py --check DIR noshim|shim      (CHECK lines)
"""
import os
import sys

import common

DEV = int(os.environ.get("COLOCATED_DEVICE", "0"))
# A model's tensors, as OpenRLHF and slime send them: one broadcast each, odd sizes.
SIZES = [4096 * 4096 * 2, 4096 * 11008 * 2, 1, 4097, 151936 * 4096 * 2 // 16, 3 << 20]


def seeded(nbytes, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def update_weights(dist, bufs):
    """The refit, as slime's UpdateWeightFromDistributed does it: one broadcast per tensor."""
    for b in bufs:
        dist.broadcast(b, src=0)


def worker(args):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(DEV)
    rank = args["rank"]
    dev = torch.device("cuda", DEV)
    res = {"device": DEV, "gpu": torch.cuda.get_device_name(DEV)}
    store = os.path.join(os.path.abspath(args["outdir"]), "torch.store.refit")
    dist.init_process_group("nccl", init_method="file://" + store, world_size=2, rank=rank)
    srcs = [seeded(n, 11 + i) for i, n in enumerate(SIZES)]
    bufs = [s.to(dev) if rank == 0 else torch.zeros(s.numel(), dtype=torch.uint8, device=dev) for s in srcs]
    torch.cuda.synchronize()
    try:
        for _ in range(3):  # three refits
            update_weights(dist, bufs)
        torch.cuda.synchronize()
    except Exception as e:  # NCCL alone: two ranks on one GPU are refused
        res["init_error"] = "%s: %s" % (type(e).__name__, e)
        return res
    res["refit_ok"] = [common.sha256_tensor(b) == common.sha256_tensor(s) for b, s in zip(bufs, srcs)]
    dist.destroy_process_group()
    res["destroyed"] = True
    return res


def check(outdir, mode):
    chk = common.checker("torch_refit (%s)" % mode)
    summary, ranks = common.read_summary(outdir)
    if mode == "noshim":
        errs = [r.get("init_error") or "" for r in ranks]
        chk(any("invalid usage" in e.lower().replace("_", " ") or "ncclInvalidUsage" in e for e in errs) or
            all(r.get("refit_ok") and all(r["refit_ok"]) for r in ranks),
            "NCCL alone refuses two ranks of a torch process group on one GPU: %s" % [e[:200] for e in errs])
        return
    chk(summary["ok"], "both processes finished on one GPU (%s): %s" % (ranks[0].get("gpu") if ranks else "?",
                                                                        summary.get("errors")))
    chk(all(r.get("refit_ok") and all(r["refit_ok"]) for r in ranks),
        "three refits of %d tensors, one torch broadcast each, bit-exact on both ranks %s"
        % (len(SIZES), [r.get("refit_ok") for r in ranks]))
    chk(all(r.get("destroyed") for r in ranks), "destroy_process_group returned on both ranks")
    recs = common.read_records(outdir)
    uids = [u for u in recs if u["type"] == "unique_id" and u["caller"]["api"] == "torch"]
    chk(len(uids) == 1 and "update_weights" in uids[0].get("marked", ""),
        "torch made the ID (rank 0, inside libtorch) and the shim marked it, naming the call site: %s"
        % [u.get("marked", u.get("unmarked")) for u in uids])
    comms = [c for c in recs if c["type"] == "comm"]
    chk(len(comms) == 2 and all(c["action"] == "ipc" and c["comm"] is None and c["caller"]["api"] == "torch"
                                for c in comms),
        "both ranks' communicator (torch's): ipc, no NCCL communicator (%s)"
        % [(c.get("action"), c["caller"]["api"]) for c in comms])
    ends = [e for e in recs if e["type"] == "comm_end" and e.get("action") == "ipc"]
    chk(len(ends) == 2 and all(e["ops"].get("Broadcast", e["ops"].get("Bcast", {})).get("count", 0) >= 3 * len(SIZES)
                               for e in ends), "its broadcasts counted on both ranks")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(common.main(__file__, worker, one_gpu=True))
