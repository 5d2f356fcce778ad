#!/usr/bin/env python3
"""Writes the efasim_* fixtures of tests/inspect/test_inspect.sh: the three runs of
tools/scenario (the weight-update communicator of 3 ranks made first, then the
training communicator of 2), as NCCL 2.28.9 logs them with the EFASim net plugin
(NCCL_NET_PLUGIN=efasim), with and without shim records.  Synthetic: the lines are
NCCL's own formats (src/plugin/net.cc, src/init.cc, src/transport/net.cc of
v2.28.9-1) and the records those of docs/records.md, cut to what inspect reads.

    python3 tests/inspect/gen_efasim_fixtures.py tests/inspect/fixtures
"""
import json
import os
import sys

HOST = "gpu1"
T0, T1, INF = 4100, 4101, 4102          # pids: trainer ranks 0 and 1, inference
WU_ID, TR_ID = "0x5eed0000a11ce001", "0x7a1200b0b0000002"   # NCCL commIds
WU_SHIM, TR_SHIM = "id:0x3c0ffee1000000a1", "id:0x9a1bed22000000b2"  # shim groups
WU_PTR = {T0: "0x55d0a0001000", T1: "0x55d0a0002000", INF: "0x55d0a0003000"}
TR_PTR = {T0: "0x55d0b0001000", T1: "0x55d0b0002000"}


def head(pid, dev):
    p = "%s:%d:%d [%d] NCCL INFO " % (HOST, pid, pid, dev)
    return [p + "NCCL version 2.28.9+cuda13.0",
            p + "NCCL_NET_PLUGIN set by environment to efasim",
            p + "NCCL_P2P_DISABLE set by environment to 1",
            p + "NCCL_SHM_DISABLE set by environment to 1."]


def init(pid, dev, ptr, cid, rank, nranks, net, failed=False, loaded=False):
    p = "%s:%d:%d [%d] NCCL INFO " % (HOST, pid, pid, dev)
    out = []
    if loaded:
        out.append(p + "NET/Plugin: Loaded net plugin EFASim (v10)")
        out.append(p + "Successfully loaded external network plugin libnccl-net-efasim.so")
    if failed:
        out.append(p + "EFASim: comm %s refused: 0 of 24 QPs left on this host, a connection needs 2; NCCL will use "
                   "its next network (Socket) for this communicator" % ("0x%016x" % int(cid, 16)))
        out.append(p + "Failed to initialize NET plugin EFASim")
        # NCCL then tries its own IB, which fails too where there is none (as on the GPU machine)
        out.append(p + "Failed to initialize NET plugin IB")
    if net == "Socket":
        out.append(p + "NET/Socket : Using [0]eth0:10.0.0.7<0>")
    out.append(p + "Initialized NET plugin %s" % net)
    out.append(p + "Assigned NET plugin %s to comm" % net)
    out.append(p + "Using network %s" % net)
    out.append(p + "ncclCommInitRank%s comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %d000 commId %s - Init START"
               % ("Config" if nranks == 2 else "", ptr, rank, nranks, dev, dev, dev + 1, cid))
    for ch in range(2):
        nxt = (rank + 1) % nranks
        out.append(p + "Channel %02d/0 : %d[%d] -> %d[%d] [send] via NET/%s/0" % (ch, rank, dev, nxt, nxt, net))
    out.append(p + "ncclCommInitRank%s comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %d000 commId %s - Init COMPLETE"
               % ("Config" if nranks == 2 else "", ptr, rank, nranks, dev, dev, dev + 1, cid))
    return out


def logs(wu_net, tr_net, wu_in_nccl=True, tr_failed=False):
    """NCCL's log per process: {pid: [lines]}."""
    out = {}
    for rank, pid in enumerate((T0, T1, INF)):
        lines = head(pid, rank)
        if wu_in_nccl:
            lines += init(pid, rank, WU_PTR[pid], WU_ID, rank, 3, wu_net, loaded=True)
        if pid != INF:
            lines += init(pid, rank, TR_PTR[pid], TR_ID, rank, 2, tr_net, failed=tr_failed, loaded=not wu_in_nccl)
        out[pid] = lines
    return out


def records(wu_action, inf_host=HOST):
    """Shim records per process: {(host, pid): [records]}."""
    out = {}
    ts = 1763800000.0
    for rank, pid in enumerate((T0, T1, INF)):
        host = inf_host if pid == INF else HOST
        title = "ray::VllmGenerationWorker" if pid == INF else "ray::DTensorPolicyWorker"
        role = "inference" if pid == INF else "training"
        recs = [{"type": "load", "ts": ts, "host": host, "pid": pid, "tid": pid, "shim_version": "0.3.0",
                 "mode": "enforce", "log_file": "/rec/ncclshim.%s.%d.jsonl" % (host, pid), "title": title}]
        ipc = wu_action == "ipc"
        wu = {"type": "comm", "ts": ts + 1 + rank * 0.01, "host": host, "pid": pid, "tid": pid,
              "fn": "ncclCommInitRank", "comm": None if ipc else WU_PTR[pid], "handle": "0x7f00%04x" % pid,
              "group": WU_SHIM, "id_hash": WU_SHIM[3:], "rank": rank, "nranks": 3, "cuda_device": rank,
              "result": 0, "result_str": "no error", "duration_us": 900000,
              "caller": {"lib": "/usr/lib/x86_64-linux-gnu/libffi.so.8", "api": "ctypes"}, "title": title,
              "role": role, "purpose": "weight-update",
              "purpose_reason": "rank 0 training, rank 1 training, rank 2 inference: training and inference ranks "
                                "in one communicator",
              "action": wu_action, "action_reason": "purpose weight-update, NCCLSHIM_WEIGHT_UPDATE=auto",
              "decision": {"by": "root", "id": "0xd0d0%04x" % 1, "root": "10.0.0.7:41000", "rounds": 3 if ipc else 2,
                           "wait_us": 800, "hosts": 2 if inf_host != HOST else 1}}
        if wu_action == "socket":
            wu["net"] = "Socket"
        recs.append(wu)
        if pid != INF:
            recs.append({"type": "comm", "ts": ts + 3 + rank * 0.01, "host": host, "pid": pid, "tid": pid,
                         "fn": "ncclCommInitRankConfig", "comm": TR_PTR[pid], "handle": "0x7f01%04x" % pid,
                         "group": TR_SHIM, "id_hash": TR_SHIM[3:], "rank": rank, "nranks": 2, "cuda_device": rank,
                         "result": 0, "result_str": "no error", "duration_us": 700000,
                         "caller": {"lib": "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so",
                                    "api": "torch"},
                         "title": title, "role": role, "purpose": "training",
                         "purpose_reason": "created by torch in a training process", "action": "passthrough",
                         "action_reason": "unmarked unique ID (NCCLSHIM_TAG, or made without the shim): decided on "
                                          "this rank's evidence"})
            recs.append({"type": "comm_end", "ts": ts + 20, "host": host, "pid": pid, "tid": pid,
                         "comm": TR_PTR[pid], "handle": "0x7f01%04x" % pid, "group": TR_SHIM, "rank": rank,
                         "nranks": 2, "how": "destroy", "result": 0, "action": "passthrough",
                         "ops": {"AllReduce": {"count": 12, "bytes": 12 << 28}}})
        recs.append({"type": "comm_end", "ts": ts + 30, "host": host, "pid": pid, "tid": pid,
                     "comm": None if ipc else WU_PTR[pid], "handle": "0x7f00%04x" % pid, "group": WU_SHIM,
                     "rank": rank, "nranks": 3, "how": "destroy", "result": 0, "action": wu_action,
                     "decision_id": "0xd0d00001",
                     "ops": {"AllReduce": {"count": 1, "bytes": 4}, "Broadcast": {"count": 9, "bytes": 9 << 30}}})
        recs.append({"type": "exit", "ts": ts + 31, "host": host, "pid": pid, "tid": pid, "comms_created": 2,
                     "comms_alive": 0})
        out[(host, pid)] = recs
    return out


def write(d, nccl, recs=None):
    os.makedirs(d, exist_ok=True)
    for pid, lines in nccl.items():
        with open(os.path.join(d, "nccl.%s.%d.log" % (HOST, pid)), "w") as f:
            f.write("\n".join(lines) + "\n")
    for (host, pid), rs in (recs or {}).items():
        with open(os.path.join(d, "ncclshim.%s.%d.jsonl" % (host, pid)), "w") as f:
            for r in rs:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")


def main():
    top = sys.argv[1]
    # no shim: the weight-update comm takes EFASim's budget, the training comm falls back to Socket
    write(os.path.join(top, "efasim_noshim"), logs("EFASim", "Socket", tr_failed=True))
    # the shim with NCCLSHIM_WEIGHT_UPDATE=passthrough: the same, with records
    write(os.path.join(top, "efasim_passthrough"), logs("EFASim", "Socket", tr_failed=True), records("passthrough"))
    # the shim, auto, one host: ipc (no NCCL comm), training on EFASim
    write(os.path.join(top, "efasim_ipc"), logs(None, "EFASim", wu_in_nccl=False), records("ipc"))
    # the shim, auto, inference "on node-b" (NCCLSHIM_HOSTNAME): socket by policy, training on EFASim
    write(os.path.join(top, "efasim_socket"), logs("Socket", "EFASim"), records("socket", inf_host="node-b"))


if __name__ == "__main__":
    main()
