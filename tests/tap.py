"""A small TAP library for the Python tests, as tests/tap.sh is for the bash ones:
numbered checks, their diagnostics (on stdout for `prove -v`, and on stderr for a
failure, which prove shows without -v), the plan at the end, and the paths every
test uses.  A test imports it with `sys.path.insert(0, <tests/>)`."""
import json
import os
import select
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "tests", "bin")
SHIM = os.environ.get("SHIM_LIB", os.path.join(ROOT, "build", "libncclshim.so"))
# Under `make test-asan` the sanitizer runtime must be preloaded before the shim; under
# `make test-aarch64` SHIM_PRELOAD names it for the loader of either architecture (tap.sh).
PRELOAD = " ".join(filter(None, [os.environ.get("SHIM_PRELOAD_EXTRA", ""), os.environ.get("SHIM_PRELOAD", SHIM)]))
# Set where the programs under test are another architecture's, run by qemu-user (tap.sh).
TEST_ARCH = os.environ.get("SHIM_TEST_ARCH", "")
EMULATOR = "qemu-%s-static" % TEST_ARCH if TEST_ARCH else ""
CUDA = os.path.join(ROOT, "tests", "fake", "cuda", "libcuda.so.1")

_n = 0
_failed = 0


def ok(cond, what, diag=None):
    global _n, _failed
    _n += 1
    print(("ok" if cond else "not ok") + " %d - %s" % (_n, what), flush=True)
    if cond:
        return
    _failed += 1
    sys.stderr.write("not ok %d - %s\n" % (_n, what))
    if diag is not None and diag != "":
        for line in str(diag).splitlines()[:40]:
            print("#   " + line)
            sys.stderr.write("#   " + line + "\n")


def is_(got, want, what):
    ok(got == want, what, "got:      %r\nexpected: %r" % (got, want))


def records(d):
    """Every record of the files in directory d (none if it does not exist); a line
    that is not JSON is kept as {"type": "UNPARSABLE", "line": ...}."""
    out = []
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        with open(os.path.join(d, f), errors="replace") as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    out.append({"type": "UNPARSABLE", "line": line})
    return out


def failed():
    return _failed


def done(tmp=None, keep_on_failure=False):
    """The plan; `tmp` removed (unless NCCLSHIM_TEST_KEEP is set, or something
    failed and keep_on_failure); exits 1 if any check failed."""
    print("1..%d" % _n)
    if tmp and not os.environ.get("NCCLSHIM_TEST_KEEP") and not (keep_on_failure and _failed):
        subprocess.run(["rm", "-rf", tmp])
    sys.exit(1 if _failed else 0)


def skip_all(why):
    """The whole test is skipped, saying why (TAP: a plan of none)."""
    print("1..0 # SKIP " + why)
    sys.exit(0)


def skip_emulated(why):
    """skip_all, where the programs under test run under an emulator (make test-aarch64)."""
    if EMULATOR:
        skip_all("under %s: %s" % (EMULATOR, why))


def read_first_id(p, bound):
    """The ID a process prints first ("ID <hex>" or "UID <hex>"), read within `bound` seconds
    (raw reads of its stdout: the process goes on running)."""
    fd, buf = p.stdout.fileno(), b""
    deadline = time.monotonic() + bound
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError("no ID within %ds" % bound)
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError("the ID's process exited: %s" % p.stderr.read())
        buf += chunk
    return buf.split(b"\n", 1)[0].decode().split()[1]


def collect_bounded(procs, head, deadline, bound):
    """Each process's (returncode, stdout, stderr) by `deadline`; one that runs past it is killed
    and its stderr says so.  `head`: what was already read of the first one's stdout."""
    res = []
    for k, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err += b"\nKILLED: ran past the bound of %ds (a hang)" % bound
        res.append((p.returncode, ((head if k == 0 else b"") + out).decode(errors="replace"),
                    err.decode(errors="replace")))
    return res


def read_until(p, word, deadline):
    """What a process printed up to `word` (rank 0's "UID ", said once the ID file is whole),
    or up to its end or the deadline; the process goes on running."""
    head = b""
    while word not in head:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            break
        chunk = os.read(p.stdout.fileno(), 65536)
        if not chunk:
            break
        head += chunk
    return head


def wait_bounded(p, start, bound):
    """A process's (stdout, stderr), killed once it has lived `bound` seconds since `start`
    (its stderr then says so)."""
    try:
        return p.communicate(timeout=max(1, bound - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return out, err + "\nKILLED: ran past %ds (a hang)" % bound
