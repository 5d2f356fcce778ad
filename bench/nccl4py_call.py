"""Host time of nccl4py's own work per collective call, without NCCL or the
shim: Communicator.broadcast turns each buffer argument into an NcclBuffer
(cuda.core's StridedMemoryView of the tensor) before it calls NCCL, once for
the receive buffer and once more on the root.  Timed on views of one 4.3 GB
torch tensor (a refit's flat buffer), with PyTorch's default allocator and
with expandable segments (cuMemCreate pieces), each in a process of its own;
beside it, what the ctypes client does per call (t.data_ptr()).

    python3 bench/nccl4py_call.py [--json FILE]

nccl4py must import (pip install nccl4py, or NCCL's bindings/nccl4py built).
"""
import json
import os
import subprocess
import sys
import time

MiB = 1 << 20
SIZES = [4096, MiB, 64 * MiB, 256 * MiB]
TOTAL = 4100 * MiB
REPS = 2000


def child():
    import torch
    from nccl.core.buffer import NcclBuffer
    t = torch.empty(TOTAL, dtype=torch.uint8, device="cuda")
    out = {"alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default"),
           "gpu": torch.cuda.get_device_name(0), "us": {}}
    for sz in SIZES:
        for where, off in (("start", 0), ("middle", TOTAL // 2)):
            v = t[off:off + sz]
            NcclBuffer(v)
            t0 = time.perf_counter()
            for _ in range(REPS):
                NcclBuffer(v)
            t1 = time.perf_counter()
            for _ in range(REPS):
                v.data_ptr()
            t2 = time.perf_counter()
            out["us"]["%d@%s" % (sz, where)] = {"nccl4py": (t1 - t0) / REPS * 1e6, "ctypes": (t2 - t1) / REPS * 1e6}
    print("RESULT " + json.dumps(out), flush=True)


def main():
    if "--child" in sys.argv:
        child()
        return 0
    results = []
    for conf in (None, "expandable_segments:True"):
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env, capture_output=True,
                           text=True, timeout=300)
        got = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode or not got:
            print("child (%s) failed: %s" % (conf or "default", p.stderr[-2000:]))
            return 1
        results.append(got[0])
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as fh:
            json.dump(results, fh, indent=1)
    print("nccl4py's NcclBuffer(view) per call, us (ctypes client's t.data_ptr() in brackets), %d calls each, %s"
          % (REPS, results[0]["gpu"]))
    keys = list(results[0]["us"])
    print("%-28s" % "allocator" + "".join("%20s" % k for k in keys))
    for r in results:
        print("%-28s" % r["alloc_conf"] + "".join("%12.1f [%4.1f]" % (r["us"][k]["nccl4py"], r["us"][k]["ctypes"])
                                                  for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
