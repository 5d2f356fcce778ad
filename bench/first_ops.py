"""What the first broadcasts of an ipc communicator cost, op by op, on the
GPU: is a slow start paid once per communicator, per buffer the peer maps
for the first time, or for a stretch of time?  Rank 1's stream records an
event after each broadcast; printed: per phase, the first few ops' times
and the median (us).

    python3 bench/first_ops.py --outdir DIR --preload build/libncclshim.so

Phases: A) 40 broadcasts of 1 MiB from a 1 GiB buffer right after init;
B) 40 more on the same buffer; C) 40 on a new 1 GiB buffer; D) after a
200 ms pause, 40 on buffer C again.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
import common  # noqa: E402
import ctypes_bcast  # noqa: E402

N = 40
SIZE = 1 << 20


def worker(args):
    import torch
    rank = args["rank"]
    dev = torch.device("cuda", rank)
    torch.cuda.init()
    torch.empty(1, device=dev)
    lib = ctypes_bcast.NCCLLibrary(common.nccl_so_path())
    comm = ctypes_bcast.make_comm(lib, args, "first")
    vp, st = ctypes_bcast.buffer_type, ctypes_bcast.cudaStream_t
    stream = torch.cuda.current_stream()
    barrier = ctypes_bcast.make_barrier(lib, comm, stream, dev)

    def phase(buf):
        barrier()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(N + 1)]
        ev[0].record(stream)
        for i in range(N):
            lib.ncclBroadcast(vp(buf.data_ptr()), vp(buf.data_ptr()), SIZE, ctypes_bcast.ncclUint8, 0, comm,
                              st(stream.cuda_stream))
            ev[i + 1].record(stream)
        ev[N].synchronize()
        return [ev[i].elapsed_time(ev[i + 1]) * 1000.0 for i in range(N)]

    barrier()
    a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    res = {"A": phase(a), "B": phase(a)}
    c = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    res["C"] = phase(c)
    time.sleep(0.2)
    res["D"] = phase(c)
    barrier()
    lib.ncclCommDestroy(comm)
    return res


def main():
    if "--worker" in sys.argv:
        return common.main(__file__, worker)
    args = common.parse_args(sys.argv)
    if os.environ.get("FIRST_OPS_CHILD"):
        return common.main(__file__, worker)
    out = os.path.abspath(args["outdir"])
    env = dict(os.environ, FIRST_OPS_CHILD="1", NCCLSHIM_LOG_DIR=os.path.join(out, "records"))
    runs = [("NCCL", None, {})]
    if args["preload"]:
        runs.insert(0, ("ipc", os.path.abspath(args["preload"]), {
            "NCCLSHIM_WEIGHT_UPDATE": "ipc", "NCCLSHIM_TRAINING_TITLES": "*first_ops.py --worker --rank 0 *",
            "NCCLSHIM_INFERENCE_TITLES": "*first_ops.py --worker --rank 1 *"}))
    for name, shim, extra in runs:
        d = os.path.join(out, name)
        cmd = [sys.executable, os.path.abspath(__file__), "--outdir", d, "--timeout", "200"]
        if shim:
            cmd += ["--preload", shim]
        subprocess.run(cmd, env=dict(env, **extra), check=False)
        s = json.load(open(os.path.join(d, "summary.json")))
        r = s["ranks"][1].get("result")
        if not s["ok"] or not r:
            print("%s: FAIL %s" % (name, s.get("errors")))
            return 1
        for ph in "ABCD":
            t = r[ph]
            print("%-5s %s: first %s us; median %.1f; total %.0f us" % (
                name, ph, " ".join("%.0f" % x for x in t[:6]), sorted(t)[len(t) // 2], sum(t)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
