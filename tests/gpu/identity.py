"""One GPU, the real NCCL (torch's), the shim preloaded: the application holds NCCL's own
communicator, and NCCL_NET is hidden from a socket-redirected init only (issue 13).

    NCCL_NET=EFASim NCCL_NET_PLUGIN=efasim NCCLSHIM_RULES='nranks=1:socket' \
        LD_PRELOAD=build/libncclshim.so python3 tests/gpu/identity.py OUTDIR

run by run.sh with NCCLSHIM_LOG_DIR=OUTDIR/records and NCCL's INFO log in OUTDIR.  Two threads
create a 1-rank communicator each, at the same moment, through ctypes (vLLM's way), or with
IDENTITY_CLIENT=nccl4py through nccl4py (NeMo-RL's trainer's: ncclCommInitRankScalable, its
functions found with dlsym): one from a marked unique ID (the rule makes it socket), one from an
unmarked one (passthrough).  Prints CHECK lines; run.sh turns them into TAP.
"""
import ctypes
import glob
import os
import re
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROUNDS = 3
CLIENT = os.environ.get("IDENTITY_CLIENT", "ctypes")


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * 128)]


def check(cond, what):
    print("CHECK %s %s%s" % ("ok" if cond else "fail", "" if CLIENT == "ctypes" else "(%s) " % CLIENT, what), flush=True)
    return cond


def main(outdir):
    import torch

    torch.cuda.set_device(0)
    lib = ctypes.CDLL(common.nccl_so_path())
    version = ctypes.c_int()
    lib.ncclGetVersion(ctypes.byref(version))
    print("# NCCL %d, NCCL_NET=%s, client %s" % (version.value, os.environ.get("NCCL_NET"), CLIENT), flush=True)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    made = []  # (kind, handle value, init rc, allreduce ok, count, what destroy takes)

    def create_ctypes(kind, uid, barrier):
        comm = ctypes.c_void_p()
        barrier.wait()
        rc = lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)
        ok = False
        count = ctypes.c_int(-1)
        if rc == 0:
            lib.ncclCommCount(comm, ctypes.byref(count))
            x = torch.arange(4, dtype=torch.float32, device="cuda") + 1
            y = torch.zeros(4, dtype=torch.float32, device="cuda")
            r = lib.ncclAllReduce(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_size_t(4),
                                  7, 0, comm, stream)  # float32, sum
            torch.cuda.synchronize()
            ok = r == 0 and torch.equal(x, y)
        made.append((kind, comm.value, rc, ok, count.value, comm))

    def create_nccl4py(kind, uid, barrier):
        import nccl.core as nc
        barrier.wait()
        try:
            comm = nc.Communicator.init(1, 0, uid)
        except Exception as e:
            print("# %s init: %s: %s" % (kind, type(e).__name__, e), flush=True)
            made.append((kind, None, -1, False, -1, None))
            return
        x = torch.arange(4, dtype=torch.float32, device="cuda") + 1
        y = torch.zeros(4, dtype=torch.float32, device="cuda")
        comm.allreduce(x, y, nc.SUM, stream=torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        made.append((kind, comm.ptr, 0, torch.equal(x, y), comm.nranks, comm))

    def unique_ids():
        """A marked ID and one without the rendezvous mark (decided on this rank: passthrough)."""
        if CLIENT == "nccl4py":
            import nccl.core as nc
            plain = bytearray(nc.get_unique_id().as_bytes)
            plain[64:128] = bytes(64)
            return nc.get_unique_id(), nc.UniqueId.from_bytes(bytes(plain))
        marked, plain = UniqueId(), UniqueId()
        lib.ncclGetUniqueId(ctypes.byref(marked))
        lib.ncclGetUniqueId(ctypes.byref(plain))
        for i in range(64, 128):
            plain.internal[i] = 0
        return marked, plain

    def destroy(comm):
        if CLIENT != "nccl4py":
            return lib.ncclCommDestroy(comm)
        try:
            comm.destroy()
            return 0
        except Exception as e:
            print("# destroy: %s: %s" % (type(e).__name__, e), flush=True)
            return -1

    create = create_nccl4py if CLIENT == "nccl4py" else create_ctypes
    for _ in range(ROUNDS):
        marked, plain = unique_ids()
        barrier = threading.Barrier(2)
        ts = [threading.Thread(target=create, args=("socket", marked, barrier)),
              threading.Thread(target=create, args=("passthrough", plain, barrier))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
    check(len(made) == 2 * ROUNDS and all(m[2] == 0 for m in made),
          "%d socket and %d passthrough inits at once, all succeed" % (ROUNDS, ROUNDS))
    check(all(m[3] and m[4] == 1 for m in made), "each 1-rank all-reduce is exact, ncclCommCount 1")
    for m in made:
        check(m[5] is not None and destroy(m[5]) == 0, "destroy the %s communicator %#x" % (m[0], m[1] or 0))

    # NCCL's own log: the pointer of each init and its network (by thread).
    inits = {}
    for f in glob.glob(os.path.join(outdir, "nccl.*.log")):
        net_by_tid = {}
        for line in open(f, errors="replace"):
            m = re.match(r"(\S+):(\d+):(\d+) .*Using network (\S+)", line)
            if m:
                net_by_tid[m.group(3)] = m.group(4)
            m = re.match(r"(\S+):(\d+):(\d+) .*ncclCommInitRank\w* comm (0x[0-9a-f]+) .*Init COMPLETE", line)
            if m:
                inits[int(m.group(4), 16)] = net_by_tid.get(m.group(3))
    check(all(m[1] in inits for m in made),
          "the application holds NCCL's own communicator (every handle is a comm of NCCL's log)")
    nets = {k: sorted({inits.get(m[1]) for m in made if m[0] == k}) for k in ("socket", "passthrough")}
    check(nets["socket"] == ["Socket"], "the redirected inits used Socket %s" % nets["socket"])
    want = os.environ.get("NCCL_NET")
    check(nets["passthrough"] == [want], "the others, at the same moments, the container's NCCL_NET=%s %s" %
          (want, nets["passthrough"]))
    recs = common.read_records(outdir)
    comms = [r for r in recs if r["type"] == "comm"]
    check(len(comms) == 2 * ROUNDS and all(c["handle"] == c["comm"] for c in comms),
          "the records: handle == comm for every communicator")
    check(all(c["caller"]["api"] == CLIENT for c in comms),
          "the records: every communicator's caller api is %s %s" % (CLIENT, sorted({c["caller"]["api"] for c in comms})))
    check(sorted((c["action"], c["net"]) for c in comms) ==
          sorted([("socket", "Socket")] * ROUNDS + [("passthrough", want)] * ROUNDS),
          "the records: socket on Socket, passthrough on %s" % want)
    ends = [r for r in recs if r["type"] == "comm_end"]
    check(len(ends) == 2 * ROUNDS and all(e["ops"].get("AllReduce", {}).get("count") == 1 for e in ends),
          "every comm_end counts its one all-reduce")


if __name__ == "__main__":
    main(sys.argv[1])
