"""One GPU, the real NCCL (torch's): NCCL honours a config field by the config's version, not
its size (parseCommConfig), so the shim hands NCCL a version that carries what it sets
(issue 33).  A 1-rank communicator, through ctypes, with a config as an application built
against older headers makes it (2.27's: version 22703, no nChannelsPerNetPeer; 2.16's: version
21605, no netName and no channel bounds), under NCCLSHIM_RULES='nranks=1:socket' or ':frugal';
NCCL's own INFO log must show what the record claims.  And without the shim: a config that holds
nChannelsPerNetPeer = 1 but says 2.27 is NCCL's default there (the bug, on the real library).

    python3 tests/gpu/config_versions.py OUTDIR SHIM        (run.sh; prints CHECK lines)
"""
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

UNDEF = -2147483648
# ncclConfig_t of 2.30.7 (the shim's nccl_abi.h): size, magic, version, then the fields.
FIELDS = ["blocking", "cgaClusterSize", "minCTAs", "maxCTAs", "netName", "splitShare", "trafficClass",
          "commName", "collnetEnable", "CTAPolicy", "shrinkShare", "nvlsCTAs", "nChannelsPerNetPeer",
          "nvlinkCentricSched", "graphUsageMode", "numRmaCtx", "maxP2pPeers", "graphStreamOrdering"]


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * 128)]  # passed by value, as NCCL takes it


class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint)] + [
        (f, ctypes.c_char_p if f in ("netName", "commName") else ctypes.c_int) for f in FIELDS]


def config(version, last_field, **set_):
    """As release `version`'s NCCL_CONFIG_INITIALIZER: its size (up to `last_field`), its version."""
    c = Config()
    for f in FIELDS:
        if f not in ("netName", "commName"):
            setattr(c, f, UNDEF)
    end = getattr(Config, last_field).offset + getattr(Config, last_field).size
    c.size = (end + 7) // 8 * 8
    c.magic = 0xcafebeef
    c.version = version
    c.blocking = 1
    for k, v in set_.items():
        setattr(c, k, v)
    return c


CASES = {
    # name: (rules, config version, the config's last field, fields the application sets)
    "socket-2.27": ("nranks=1:socket", 22703, "nvlsCTAs", {}),
    "socket-2.16": ("nranks=1:socket", 21605, "blocking", {}),
    "frugal-2.27": ("nranks=1:frugal", 22703, "nvlsCTAs", {}),
    "frugal-2.16": ("nranks=1:frugal", 21605, "blocking", {}),
    "noshim-2.27": (None, 22703, "nvlinkCentricSched", {"nChannelsPerNetPeer": 1}),
}


def worker(name):
    """One communicator of case `name`: init, a 4-float all-reduce checked, destroy."""
    import torch
    torch.cuda.set_device(0)
    _, version, last, set_ = CASES[name]
    lib = ctypes.CDLL(common.nccl_so_path())
    uid = UniqueId()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
    comm = ctypes.c_void_p()
    cfg = config(version, last, **set_)
    rc = lib.ncclCommInitRankConfig(ctypes.byref(comm), 1, uid, 0, ctypes.byref(cfg))
    x = torch.arange(4, dtype=torch.float32, device="cuda") + 1
    y = torch.zeros(4, dtype=torch.float32, device="cuda")
    r = lib.ncclAllReduce(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_size_t(4), 7, 0,
                          comm, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    torch.cuda.synchronize()
    d = lib.ncclCommDestroy(comm)
    print(json.dumps({"init": rc, "allreduce": r, "exact": torch.equal(x, y), "destroy": d}), flush=True)


def nccl_log(d):
    text = ""
    for f in glob.glob(os.path.join(d, "nccl.*.log")):
        text += open(f, errors="replace").read()
    return text


def run_case(outdir, shim, name):
    rules = CASES[name][0]
    d = os.path.join(outdir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,ENV,NET",
               NCCL_DEBUG_FILE=os.path.join(d, "nccl.%h.%p.log"), NCCLSHIM_LOG_DIR=os.path.join(d, "records"))
    env.pop("NCCL_NET", None)
    if rules:
        env.update(LD_PRELOAD=shim, NCCLSHIM_RULES=rules)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", name], env=env,
                       capture_output=True, text=True, timeout=150)
    out = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return d, p, (out[0] if out else None)


def check(cond, what):
    print("CHECK %s %s" % ("ok" if cond else "fail", what), flush=True)
    return cond


def main(outdir, shim):
    for name in CASES:
        d, p, res = run_case(outdir, shim, name)
        check(p.returncode == 0 and res and res["init"] == 0 and res["exact"] and res["destroy"] == 0,
              "%s: init, the all-reduce (exact) and destroy succeed %s" % (name, res or p.stderr[-300:]))
        log = nccl_log(d)
        nets = re.findall(r"Using network (\S+)", log)
        chans = [int(n) for n in re.findall(r"(\d+) coll channels", log)]
        honoured = set(re.findall(r"Comm config (.+?) set to (\S+)", log))
        print("# %s: NCCL says network %s, coll channels %s, config %s" % (name, nets, chans, sorted(honoured)))
        comms = [r for r in common.read_records(d) if r["type"] == "comm"] if CASES[name][0] else []
        if name.startswith("socket"):
            c = comms[0] if comms else {}
            check(nets == ["Socket"] and ("Net name", "Socket") in honoured,
                  "%s: NCCL's log: it read netName Socket and used network Socket" % name)
            check(c.get("action") == "socket" and c.get("net") == "Socket" and
                  c.get("told", {}).get("version", 0) >= 21700,
                  "%s: the record claims the same: socket, net Socket, told at version %s (the app's %s)" %
                  (name, c.get("told", {}).get("version"), c.get("told", {}).get("app_version")))
        elif name.startswith("frugal"):
            c = comms[0] if comms else {}
            per_peer = ("nChannelsPerNetPeer", "1") in honoured
            check(chans == [1] and ("Min CTAs", "1") in honoured and ("Max CTAs", "1") in honoured and per_peer,
                  "%s: NCCL's log: min/max CTAs 1 and nChannelsPerNetPeer 1 read, 1 coll channel" % name)
            check(c.get("action") == "frugal" and c.get("frugal") == {"minCTAs": 1, "maxCTAs": 1,
                                                                    "nChannelsPerNetPeer": 1} and
                  c.get("told", {}).get("version") == 22800,
                  "%s: the record claims the same: frugal 1/1/1, told at version 2.28 (the app's %s)" %
                  (name, c.get("told", {}).get("app_version")))
        else:
            check(("nChannelsPerNetPeer", "1") not in honoured,
                  "%s: without the shim, NCCL ignores the nChannelsPerNetPeer a 2.27 config holds (its version, "
                  "not its size, decides): why the shim raises the version" % name)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    elif len(sys.argv) == 3:
        main(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)
