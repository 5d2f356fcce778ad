#!/usr/bin/env python3
"""html_scale.py OUTDIR [--procs 2000] [--per-host 8] [--comms 22]: writes the records of a
big job (OUTDIR/records: one file per process, about 51 records each: 102,000 for 2,000
processes) for measuring `ncclshim-inspect --html` (file size, time to write, time for
chromium to render).  Every process is in one world communicator, `--comms` groups of 8
(alternately within a host and across hosts) and a weight-update group of 8 across hosts
whose root records the decision; every 25th weight-update group is `drop` and carried
data (a problem on the page).  See docs/inspect.md, "The HTML report"."""
import argparse
import hashlib
import json
import os
import random


def gid(*key):
    """A group name like the shim's (id:<hash of the unique ID>), deterministic across runs."""
    return "id:0x" + hashlib.sha1(repr(key).encode()).hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--comms", type=int, default=22)
    a = ap.parse_args()
    rec = os.path.join(a.outdir, "records")
    os.makedirs(rec, exist_ok=True)
    rnd = random.Random(18)
    n, ph = a.procs, a.per_host
    across = n // ph          # groups of 8 across hosts: procs with the same i % across
    t0, total = 1795000000.0, 0
    for i in range(n):
        host, pid = "node%04d" % (i // ph), 10000 + i
        title = "ray::VllmGenerationWorker" if i // across == ph - 1 else "ray::DTensorPolicyWorker"
        base = {"host": host, "pid": pid, "tid": pid}
        out = [dict(base, type="load", ts=t0 + i * 0.001, shim_version="0.1.0", mode="enforce",
                    log_file="%s/ncclshim.%s.%d.jsonl" % (rec, host, pid), title=title, exe="/usr/bin/python3",
                    settings={}),
               dict(base, type="library", ts=t0 + i * 0.001, slot=0, path="/usr/lib/libnccl.so.2", version=22809,
                    how="symbol", functions=43, missing=[])]

        def comm(group, rank, nranks, ts, life, purpose, action, ops, dec=None):
            c = dict(base, type="comm", ts=ts, fn="ncclCommInitRank", comm="0x%x" % (0x7f0000000000 + total_comm[0]),
                     handle="0x%x" % (0x7e0000000000 + total_comm[0]), group=group, id_hash=group[3:], rank=rank,
                     nranks=nranks, cuda_device=i % ph, config=None, result=0, result_str="ncclSuccess",
                     duration_us=rnd.randint(200000, 900000), slot=0, nccl_version=22809,
                     caller={"lib": "/usr/lib/python3/torch/lib/libtorch_cuda.so", "api": "torch"}, title=title,
                     role="training", role_reason="title", purpose=purpose, purpose_reason="bench",
                     action=action, action_reason="bench", local_purpose=purpose, local_purpose_reason="bench")
            if dec:
                c["decision"] = dec
            e = dict(base, type="comm_end", ts=ts + life, comm=c["comm"], handle=c["handle"], group=group, rank=rank,
                     nranks=nranks, how="destroy", action=action, result=0, lifetime_s=life,
                     ops={k: {"count": v[0], "bytes": v[1]} for k, v in ops.items()})
            total_comm[0] += 1
            return [c, e]

        total_comm = [0]
        out += comm(gid("world"), i, n, t0 + 5 + i * 0.002, 3000 + rnd.random() * 60,
                    "training", "passthrough", {"AllReduce": (5000, 5000 * 2 ** 26)})
        for j in range(a.comms):
            local = j % 2 == 0
            g, r = (i // ph, i % ph) if local else (i % across, i // across)
            ts = t0 + 20 + j * 120 + rnd.random()
            # distinct leading digits, as real ID hashes have (the table shows the first 8)
            out += comm(gid(j, g), r, ph, ts, 100 + rnd.random() * 10, "training",
                        "passthrough", {"AllReduce": (rnd.randint(10, 900), rnd.randint(1, 400) << 24),
                                        "Broadcast": (3, 3 << 20)})
        g, r = i % across, i // across
        drop = g % 25 == 0
        did = "0x%016x" % (0xd000000 + g)
        ts = t0 + 30 + g * 0.01
        dec = {"by": "root", "id": did, "root": "10.0.%d.%d:41000" % (g // 250, g % 250), "rounds": 2,
               "wait_us": rnd.randint(2000, 90000), "hosts": ph, "fallback": None}
        out += comm(gid("wu", g), r, ph, ts, 3000, "weight-update", "drop" if drop else "socket",
                    {"Broadcast": (400, 400 << 30)}, dec)
        if r == 0:
            out.insert(2, dict(base, type="unique_id", ts=ts - 0.2, id_hash=gid("wu", g)[3:], result=0,
                               duration_us=5, caller={"lib": "x", "api": "torch"},
                               rendezvous="10.0.%d.%d:41000" % (g // 250, g % 250)))
            out.append(dict(base, type="decision", ts=ts - 0.01, tid=pid + 1, stage="commit",
                            listen="10.0.%d.%d:41000" % (g // 250, g % 250), decision_id=did, nranks=ph, arrived=ph,
                            missing="", purpose="weight-update", purpose_reason="bench",
                            action="drop" if drop else "socket", action_reason="bench", rule=-1, hosts=ph,
                            training=ph - 1, inference=1, unknown=0, rejected_connections=0,
                            wait_us=dec["wait_us"], ranks=[]))
        out.append(dict(base, type="exit", ts=t0 + 4000, comms_created=a.comms + 2, comms_alive=0))
        out.sort(key=lambda x: x["ts"])
        with open(os.path.join(rec, "ncclshim.%s.%d.jsonl" % (host, pid)), "w") as f:
            for x in out:
                f.write(json.dumps(x, separators=(",", ":")) + "\n")
        total += len(out)
    print(total, "records,", n, "processes")


main()
