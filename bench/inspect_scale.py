#!/usr/bin/env python3
"""inspect_scale.py OUTDIR --mb N [--shape one|many]: writes about N MB of ncclshim records
for measuring ncclshim-inspect at scale (bench/inspect_scale.sh runs it per size).

one:  one process of a long job that makes and destroys a weight-update communicator per
      refit, as NeMo-RL does without colocation: per refit a unique_id, the root's decision,
      the comm record and its comm_end.  NCCL reuses freed addresses, so the comm pointer
      and handle cycle through a few values: every end must be matched to the right init.
      All in one file (OUTDIR/ncclshim.node0000.4242.jsonl).
many: 8-rank groups (alternately within a host and across hosts) over many processes, 8
      per host, each process making and destroying its groups' communicators; one file
      per process, OUTDIR/ncclshim.<host>.<pid>.jsonl.

The records have the fields and sizes of the shim's own (docs/records.md); only what
inspect joins on is varied.  Deterministic: the same arguments write the same bytes."""
import argparse
import os

T0 = 1795000000.0
COMM = ('{"type":"comm","ts":%.6f,"host":"%s","pid":%d,"tid":%d,"fn":"ncclCommInitRank","comm":"0x%x",'
        '"handle":"0x%x","group":"id:0x%016x","id_hash":"0x%016x","rank":%d,"nranks":%d,"cuda_device":%d,'
        '"config":null,"result":0,"result_str":"no error","duration_us":%d,"slot":0,"nccl_version":22809,'
        '"caller":{"lib":"/opt/venv/lib/python3.12/site-packages/vllm/distributed/device_communicators/'
        'pynccl_wrapper.py","api":"ctypes"},"title":"ray::%s","role":"%s","role_reason":"process title '
        '\'ray::%s\' matches %s pattern \'ray::%s*\'","purpose":"weight-update","purpose_reason":"the root '
        'decided from %d ranks: 1 training, %d inference","action":"%s","action_reason":"rule 0: purpose='
        'weight-update: %s","local_purpose":"weight-update","local_purpose_reason":"created through ctypes '
        '(not torch) in a training process","python":["/opt/nemo_rl/models/policy/workers.py:812 '
        'init_collective","/opt/nemo_rl/algorithms/grpo.py:1020 refit_policy_generation"],"decision":{"by":'
        '"root","id":"0x%x","root":"10.0.%d.%d:4%04d","rounds":2,"wait_us":%d,"hosts":%d}}\n')
END = ('{"type":"comm_end","ts":%.6f,"host":"%s","pid":%d,"tid":%d,"comm":"0x%x","handle":"0x%x",'
       '"group":"id:0x%016x","rank":%d,"nranks":%d,"how":"destroy","action":"%s","decision_id":"0x%x",'
       '"result":0,"lifetime_s":%.3f,"ops":{"Broadcast":{"count":%d,"bytes":%d}}}\n')
UID = ('{"type":"unique_id","ts":%.6f,"host":"%s","pid":%d,"tid":%d,"fn":"ncclGetUniqueId","id_hash":'
       '"0x%016x","rendezvous":"10.0.%d.%d:4%04d","marked":true}\n')
# At a destroy the root may see each other rank leave (ipc_peer_left), and a rank still
# tearing down may warn that its peer is gone: both after the rank's own comm_end.
PEER_LEFT = ('{"type":"ipc_peer_left","ts":%.6f,"host":"%s","pid":%d,"tid":%d,"listen":"10.0.%d.%d:4%04d",'
             '"decision_id":"0x%x","rank":%d}\n')
PEER_LOST = ('{"type":"warning","ts":%.6f,"host":"%s","pid":%d,"tid":%d,"what":"ipc-peer-lost","message":"ipc '
             'communicator id:0x%016x (rank %d of %d): a rank of this communicator is gone (the root\'s shim closed '
             'the connection: a process exited or was killed); its operations now fail with ncclRemoteError, and '
             'the streams waiting on the peer are released (a stream synchronisation returns); what they moved '
             'since is not valid. Destroy or abort it, and create a new one with a new unique ID once the lost '
             'rank is replaced"}\n')
DECISION = ('{"type":"decision","ts":%.6f,"host":"%s","pid":%d,"tid":%d,"stage":"commit","decision_id":"0x%x",'
            '"listen":"10.0.%d.%d:4%04d","nranks":%d,"arrived":%d,"missing":"","purpose":"weight-update",'
            '"purpose_reason":"1 training, %d inference","action":"%s","action_reason":"rule 0","rule":0,'
            '"hosts":%d,"training":1,"inference":%d,"unknown":0,"rejected_connections":0,"wait_us":%d}\n')


def head(host, pid, title, path):
    return ('{"type":"load","ts":%.6f,"host":"%s","pid":%d,"tid":%d,"shim_version":"0.2.0","mode":"enforce",'
            '"log_file":"%s","title":"ray::%s","exe":"/usr/bin/python3.12","start_ticks":%d,"settings":{}}\n'
            '{"type":"library","ts":%.6f,"host":"%s","pid":%d,"tid":%d,"slot":0,"path":"/usr/lib/libnccl.so.2",'
            '"version":22809,"how":"symbol","functions":43,"missing":[]}\n'
            % (T0, host, pid, pid, path, title, pid * 7, T0, host, pid, pid))


def one_comm(out, host, pid, hostno, k, gid, rank, nranks, ts, action, root):
    """The records of one rank of one communicator: created at ts, destroyed 20 s later."""
    gid = (gid + 1) * 0x9E3779B97F4A7C15 % (1 << 64)  # looks like a hash of the unique ID, as the shim's does
    addr = 0x55d0c0000000 + (k % 3) * 0x10000      # freed addresses come back
    handle = 0x7f3a00000000 + (k % 5) * 0x1000
    did = 0x10000000 + gid
    port = gid % 10000
    title, role = ("DTensorPolicyWorker", "training") if rank == 0 else ("VllmGenerationWorker", "inference")
    if root:
        out.write(UID % (ts - 1, host, pid, pid, gid, hostno // 250, hostno % 250, port))
        out.write(DECISION % (ts - 0.5, host, pid, pid, did, hostno // 250, hostno % 250, port, nranks, nranks,
                              nranks - 1, action, 1 + (nranks > 4), nranks - 1, 1500 + k % 700))
    out.write(COMM % (ts, host, pid, pid, addr, handle, gid, gid, rank, nranks, pid % 8, 200000 + k % 9000,
                      title, role, title, role, title, nranks, nranks - 1, action, action, did,
                      hostno // 250, hostno % 250, port, 1500 + k % 700, 1 + (nranks > 4)))
    out.write(END % (ts + 20, host, pid, pid, addr, handle, gid, rank, nranks, action, did, 20.0,
                     1 + k % 40, (1 + k % 40) << 24))
    if action == "ipc":
        if root:
            for peer in range(1, nranks):
                out.write(PEER_LEFT % (ts + 20.001, host, pid, pid, hostno // 250, hostno % 250, port, did, peer))
        out.write(PEER_LOST % (ts + 20.002, host, pid, pid, gid, rank, nranks))


def shape_one(outdir, nbytes):
    host, pid = "node0000", 4242
    path = os.path.join(outdir, "ncclshim.%s.%d.jsonl" % (host, pid))
    comms = 0
    with open(path, "w") as out:
        out.write(head(host, pid, "DTensorPolicyWorker", path))
        while out.tell() < nbytes:
            one_comm(out, host, pid, 0, comms, comms, 0, 2, T0 + 1 + comms * 30.0, "ipc", True)
            comms += 1
    return 1, comms


def shape_many(outdir, nbytes, per_host=8, procs=64, refits=None):
    """procs processes, 8 a host; group g of refit k: ranks i with i % (procs/8) == g % (procs/8), 8 of them."""
    across = procs // per_host
    # about 1.7 KB a rank per refit (root: 2.3 KB): refits to reach nbytes
    refits = refits or max(1, int(nbytes / (procs * 1750)))
    files = []
    for i in range(procs):
        host, pid = "node%04d" % (i // per_host), 10000 + i
        path = os.path.join(outdir, "ncclshim.%s.%d.jsonl" % (host, pid))
        files.append((open(path, "w"), host, pid, i // per_host))
        files[-1][0].write(head(host, pid, "VllmGenerationWorker" if i % per_host else "DTensorPolicyWorker",
                                path))
    comms = 0
    for k in range(refits):
        # two groups per refit: one across hosts (ranks i, i+across, ...), one within a host
        for gi in range(across):
            members = [gi + across * j for j in range(per_host)] if k % 2 == 0 else \
                      [gi * per_host + j for j in range(per_host)]
            gid = (k << 16) | gi
            for rank, p in enumerate(members):
                out, host, pid, hostno = files[p]
                one_comm(out, host, pid, hostno, k, gid, rank, per_host, T0 + 1 + k * 30.0 + rank * 0.01,
                         "socket" if k % 2 == 0 else "ipc", rank == 0)
            comms += 1
    for f in files:
        f[0].close()
    return procs, comms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--mb", type=float, required=True, help="about this many MB (10^6 bytes) of records")
    ap.add_argument("--shape", choices=["one", "many"], default="one")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    nbytes = int(a.mb * 1e6)
    procs, comms = (shape_one if a.shape == "one" else shape_many)(a.outdir, nbytes)
    total = sum(os.path.getsize(os.path.join(a.outdir, f)) for f in os.listdir(a.outdir))
    print("%d bytes, %d processes, %d communicators" % (total, procs, comms))


if __name__ == "__main__":
    main()
