#!/usr/bin/env python3
"""One rank of a stack's replay (tests/replay/replay.py starts one process per rank).

What the rank does is in the JSON file named by REPLAY_SPEC: the native libraries to load
(copies of tests/replay/stubs/native.c at the stack's paths in the fake site-packages), the
binding that makes its NCCL calls (vLLM's ctypes PyNccl, nccl4py, torch's ProcessGroupNCCL,
CuPy) and its steps.  Every step that reaches NCCL is called through the stack's Python frames:
functions of generated .py files at the stack's paths, each calling the next on the line the
stack does, the innermost calling the binding's foreign function itself, so that the frames
the shim reads at that NCCL call are the stack's (file:line function, innermost first).

The harness is the store (TCPStore, Ray's named actor): a rank that makes a unique ID prints
"UID <key> <hex>"; the others read "<key> <hex>" lines from stdin.  The rank prints "PID <pid>",
"STEP <i> <op> begin" and "STEP <i> <op> rc <r>" (so that a hang names its step), "APP <function>" for
each NCCL call the application makes (the C stubs print their own), "BYTES <k> <n> ok|wrong at
<i>" for each broadcast buffer at the end (what arrived), and "DONE".  Exit status 0 when every
step returned 0.
"""
import ctypes
import importlib.util
import json
import os
import sys


def say(*a):
    print(*a, flush=True)


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


class Store:
    """Unique IDs by key: published on stdout, read from stdin (unbuffered, so that the
    C stubs' reads of fd 0 and ours never share a buffer; a rank uses one or the other)."""

    def __init__(self):
        self.buf = b""
        self.have = {}

    @staticmethod
    def publish(key, uid):
        say("UID %s %s" % (key, bytes(uid.internal).hex()))

    def fetch(self, key):
        while key not in self.have:
            while b"\n" not in self.buf:
                chunk = os.read(0, 4096)
                if not chunk:
                    raise EOFError("the store closed before key %r came" % key)
                self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            k, h = line.decode().split()
            self.have[k] = h
        uid = UniqueId()
        ctypes.memmove(ctypes.byref(uid), bytes.fromhex(self.have[key]), 128)
        return uid


class Cursor:
    """Walks a chain of generated frames: frame i's function finds its line with at(), then
    calls target() with argv(): the next frame's function, or at the innermost frame the
    foreign function itself (no Python frame of ours in between)."""

    def __init__(self, frames, fns, fn, args):
        self.frames, self.fns, self.fn, self.args, self.i = frames, fns, fn, args, 0

    def at(self, line):
        return self.frames[self.i][1] == line

    def target(self):
        self.i += 1
        return self.fns[self.i] if self.i < len(self.fns) else self.fn

    def argv(self):
        return (self,) if self.i < len(self.fns) else self.args


class Frames:
    """The generated modules of the tree, loaded on first use."""

    def __init__(self, tree):
        self.tree, self.mods = tree, {}

    def fn(self, path, func):
        if path not in self.mods:
            spec = importlib.util.spec_from_file_location("replay_frames_%d" % len(self.mods),
                                                          os.path.join(self.tree, path))
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            self.mods[path] = mod
        return self.mods[path].FUNCS[func]

    def call(self, frames, fn, args):
        if not frames:
            return fn(*args)
        k = Cursor(frames, [self.fn(f[0], f[2]) for f in frames], fn, args)
        return k.fns[0](k)


class Device:
    """Buffers and a stream of the tests' fake libcuda (host memory), loaded RTLD_GLOBAL as a
    CUDA runtime loads the driver, before any NCCL: the shim's ipc transport finds it."""

    def __init__(self, path):
        cu = self.cu = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t]
        cu.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
        cu.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        self.stream = ctypes.c_void_p()
        if cu.cuStreamCreate(ctypes.byref(self.stream), 0) != 0:
            raise RuntimeError("cuStreamCreate failed")

    def alloc(self, n, fill):
        p = ctypes.c_ulonglong()
        if self.cu.cuMemAlloc_v2(ctypes.byref(p), max(n, 1)) != 0:
            raise RuntimeError("cuMemAlloc of %d bytes failed" % n)
        ctypes.memmove(p.value, fill, n)
        return p.value

    def sync(self):
        return self.cu.cuStreamSynchronize(self.stream)


def pattern(k, n):
    """Broadcast k's bytes: byte i is (i * 131 + k * 7 + 1) mod 256."""
    period = bytes((i * 131 + k * 7 + 1) & 0xFF for i in range(256))
    return (period * (n // 256 + 1))[:n]


VP, I, SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t


def typed(lib, name, restype, argtypes):
    f = getattr(lib, name)  # dlsym on the library's handle, as ctypes does
    f.restype, f.argtypes = restype, argtypes
    return f


class Binding:
    """The library that makes the NCCL calls, and each step's foreign call: op -> (function,
    arguments).  Buffers are fake device memory on the rank's one stream."""

    def __init__(self, spec, dev, store):
        self.spec, self.dev, self.store = spec, dev, store
        self.rank, self.nranks = spec["rank"], spec["nranks"]
        self.tree = spec["tree"]
        self.libnccl = os.path.join(self.tree, "nvidia/nccl/lib/libnccl.so.2")
        self.comm = ctypes.c_void_p()
        self.uid = UniqueId()
        self.kind = spec["binding"]
        path = {"ctypes": self.libnccl, "nccl4py": "nccl/bindings/_internal/nccl_linux.so",
                "torch": "torch/lib/libtorch_replay.so", "cupy": "cupy_backends/cuda/libs/nccl.so"}[self.kind]
        self.lib = ctypes.CDLL(os.path.join(self.tree, path))
        self.pg = None
        getattr(self, "load_" + self.kind)()

    def load_ctypes(self):
        # vLLM's pynccl_wrapper.NCCLLibrary: CDLL(libnccl.so.2), one dlsym per function.
        L, U = self.lib, UniqueId
        self.f = {
            "ncclGetUniqueId": typed(L, "ncclGetUniqueId", I, [ctypes.POINTER(U)]),
            "ncclCommInitRank": typed(L, "ncclCommInitRank", I, [ctypes.POINTER(VP), I, U, I]),
            "ncclAllReduce": typed(L, "ncclAllReduce", I, [VP, VP, SZ, I, I, VP, VP]),
            "ncclBroadcast": typed(L, "ncclBroadcast", I, [VP, VP, SZ, I, I, VP, VP]),
            "ncclGroupStart": typed(L, "ncclGroupStart", I, []),
            "ncclGroupEnd": typed(L, "ncclGroupEnd", I, []),
            "ncclCommDestroy": typed(L, "ncclCommDestroy", I, [VP]),
        }

    def load_nccl4py(self):
        L, P = self.lib, ctypes.POINTER
        self.f = {
            "load": typed(L, "replay_n4py_load", I, [ctypes.c_char_p]),
            "uid": typed(L, "replay_n4py_get_unique_id", I, [P(UniqueId)]),
            "init": typed(L, "replay_n4py_init_scalable", I, [P(VP), I, I, P(UniqueId)]),
            "allreduce": typed(L, "replay_n4py_all_reduce", I, [VP, VP, SZ, I, VP]),
            "bcast": typed(L, "replay_n4py_broadcast", I, [VP, VP, SZ, I, I, VP]),
            "destroy": typed(L, "replay_n4py_destroy", I, [VP]),
        }
        # cuda.pathfinder's load_nvidia_dynamic_lib("nccl"), where RTLD_DEFAULT finds nothing
        if self.f["load"](self.libnccl.encode()) != 0:
            raise RuntimeError("nccl4py stand-in could not load %s" % self.libnccl)

    def load_torch(self):
        L = self.lib
        self.f = {
            "new": typed(L, "replay_pg_new", VP, [I, I, ctypes.c_char_p]),
            "bcast": typed(L, "replay_pg_broadcast", I, [VP, VP, SZ, I, I, VP]),
            "allreduce": typed(L, "replay_pg_allreduce", I, [VP, VP, SZ, I, VP]),
            "destroy": typed(L, "replay_pg_destroy", I, [VP]),
        }

    def load_cupy(self):
        L, P = self.lib, ctypes.POINTER
        self.f = {
            "uid": typed(L, "replay_cupy_get_unique_id", I, [P(UniqueId)]),
            "group_start": typed(L, "replay_cupy_group_start", I, []),
            "group_end": typed(L, "replay_cupy_group_end", I, []),
            "init": typed(L, "replay_cupy_comm_init_rank", I, [P(VP), I, P(UniqueId), I]),
            "allreduce": typed(L, "replay_cupy_all_reduce", I, [VP, VP, SZ, I, VP]),
            "bcast": typed(L, "replay_cupy_broadcast", I, [VP, VP, SZ, I, I, VP]),
            "destroy": typed(L, "replay_cupy_destroy", I, [VP]),
        }

    def app(self, fn):
        """ctypes calls NCCL from Python: say what the application called (the stubs say it)."""
        if self.kind == "ctypes":
            say("APP " + fn)

    # Each returns (foreign function, arguments) for one call.
    def uid_call(self):
        if self.kind == "ctypes":
            self.app("ncclGetUniqueId")
            return self.f["ncclGetUniqueId"], (ctypes.byref(self.uid),)
        return self.f["uid"], (ctypes.byref(self.uid),)

    def init_call(self):
        n, r = self.nranks, self.rank
        if self.kind == "ctypes":
            self.app("ncclCommInitRank")
            return self.f["ncclCommInitRank"], (ctypes.byref(self.comm), n, self.uid, r)
        if self.kind == "nccl4py":
            return self.f["init"], (ctypes.byref(self.comm), n, r, ctypes.byref(self.uid))
        return self.f["init"], (ctypes.byref(self.comm), n, ctypes.byref(self.uid), r)

    def group_call(self, which):
        if self.kind == "ctypes":
            name = "ncclGroupStart" if which == "group_start" else "ncclGroupEnd"
            self.app(name)
            return self.f[name], ()
        return self.f[which], ()

    def allreduce_call(self, buf, count, dtype):
        if self.kind == "ctypes":
            self.app("ncclAllReduce")
            return self.f["ncclAllReduce"], (buf, buf, count, dtype, 0, self.comm, self.dev.stream)
        if self.kind == "torch":
            return self.f["allreduce"], (self.pg, buf, count, dtype, self.dev.stream)
        return self.f["allreduce"], (self.comm, buf, count, dtype, self.dev.stream)

    def bcast_call(self, buf, n):
        uint8 = 1
        if self.kind == "ctypes":
            self.app("ncclBroadcast")
            return self.f["ncclBroadcast"], (buf, buf, n, uint8, 0, self.comm, self.dev.stream)
        if self.kind == "torch":
            return self.f["bcast"], (self.pg, buf, n, uint8, 0, self.dev.stream)
        return self.f["bcast"], (self.comm, buf, n, uint8, 0, self.dev.stream)

    def destroy_call(self):
        if self.kind == "ctypes":
            self.app("ncclCommDestroy")
            return self.f["ncclCommDestroy"], (self.comm,)
        if self.kind == "torch":
            return self.f["destroy"], (self.pg,)
        return self.f["destroy"], (self.comm,)


class Rank:
    def __init__(self, spec):
        self.spec = spec
        self.store = Store()
        self.dev = Device(spec["cuda"])
        self.keep = [ctypes.CDLL(os.path.join(spec["tree"], p)) for p in spec["libs"]]
        self.frames = Frames(spec["tree"])
        self.b = Binding(spec, self.dev, self.store)
        self.sent = []  # (k, pointer, size) of every broadcast buffer
        self.fetched = False

    def step(self, st):
        """One step: its foreign calls, each through the step's frames.  Returns the first
        non-zero result, or 0."""
        op, frames, b, call = st["op"], [tuple(f) for f in st.get("frames", [])], self.b, self.frames.call
        key = st.get("key", "g")
        if op == "uid":  # this rank makes the ID (the stack's group rank 0) and publishes it
            r = call(frames, *b.uid_call())
            if r == 0:
                self.store.publish(key, b.uid)
            return r
        if op == "fetch":  # the others take the ID from the store (no NCCL call)
            b.uid = self.store.fetch(key)
            self.fetched = True
            return 0
        if op == "init":
            if self.spec["rank"] != 0 and not self.fetched:
                b.uid = self.store.fetch(key)
            return call(frames, *b.init_call())
        if op == "pg":  # torch: a ProcessGroupNCCL made without a bound device calls no NCCL
            b.pg = b.f["new"](self.spec["rank"], self.spec["nranks"], key.encode())
            return 0 if b.pg else 1
        if op in ("group_start", "group_end"):
            return call(frames, *b.group_call(op))
        if op == "allreduce":
            size = {4: 8, 7: 4}[st["dtype"]]
            buf = self.dev.alloc(size * st["count"], b"\x01" + b"\x00" * (size * st["count"] - 1))
            return call(frames, *b.allreduce_call(buf, st["count"], st["dtype"]))
        if op == "bcast":  # one broadcast from rank 0 per size, as the stack sends its weights
            for n in st["sizes"]:
                k = len(self.sent)
                buf = self.dev.alloc(n, pattern(k, n) if self.spec["rank"] == 0 else b"\xee" * n)
                self.sent.append((k, buf, n))
                r = call(frames, *b.bcast_call(buf, n))
                if r:
                    return r
            return 0
        if op == "m2n":  # nccl.m2n.reshard on the communicator (libnccl_m2n's own NCCL calls)
            m2n = ctypes.CDLL(os.path.join(self.spec["tree"], "nccl/m2n/libnccl_m2n.so"))
            f = typed(m2n, "replay_m2n_reshard", I, [VP, I])
            return call(frames, f, (b.comm, self.spec["rank"]))
        if op == "destroy":
            return call(frames, *b.destroy_call())
        raise ValueError("unknown step %r" % op)

    def check_bytes(self):
        self.dev.sync()
        for k, p, n in self.sent:
            got, want = ctypes.string_at(p, n), pattern(k, n)
            bad = next((i for i in range(n) if got[i] != want[i]), None) if got != want else None
            say("BYTES %d %d %s" % (k, n, "ok" if bad is None else "wrong at %d" % bad))


def main():
    with open(os.environ["REPLAY_SPEC"]) as fh:
        spec = json.load(fh)
    say("PID %d" % os.getpid())
    rank = Rank(spec)
    for i, st in enumerate(spec["steps"]):
        say("STEP %d %s begin" % (i, st["op"]))
        r = rank.step(st)
        say("STEP %d %s rc %d" % (i, st["op"], r))
        if r:
            say("FAILED step %d %s: %d" % (i, st["op"], r))
            sys.exit(1)
    rank.check_bytes()
    say("DONE")


if __name__ == "__main__":
    main()
