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


def _need_build():
    """A test run before `make` says so in one TAP line, not with a traceback and no plan."""
    missing = [f for f in (SHIM, os.path.join(BIN, "rank_client")) if not os.path.exists(f)]
    if missing and not os.environ.get("SHIM_PRELOAD"):
        print("Bail out! run make first: %s is missing (make builds what the tests run)" % missing[0], flush=True)
        sys.exit(255)


_need_build()


# How much slower than a quiet machine this run may be: SHIM_TEST_SLOW (the build's own
# factor: `make test-asan`, `test-aarch64` and `test-valgrind` set it) times the load, the
# runnable tasks per core (1 at most counts as none).  Every bound and every product timeout a
# test sets is a quiet machine's figure times this, so a verdict does not depend on the
# neighbours (CONTRIBUTING.md, "Bounds").  The load is re-read at each look and the highest
# seen kept (loadavg lags a change by tens of seconds; a bound once given only grows).
# The peak is one float, replaced whole: safe from the tests' threads under the GIL.
def _build_factor():
    v = os.environ.get("SHIM_TEST_SLOW", "") or "1"
    try:
        f = float(v)
    except ValueError:
        f = 0.0
    if not 1 <= f <= 1000:
        print("Bail out! SHIM_TEST_SLOW=%r: want a number from 1 to 1000 (how many times slower than a "
              "plain build this run is)" % v, flush=True)
        sys.exit(255)
    return f


_BUILD_SLOW = _build_factor()
_peak = 1.0


def load_factor():
    """Runnable tasks per core now (the 1-minute load average over the cores), at least 1,
    and never less than an earlier look of this test saw."""
    global _peak
    try:
        with open("/proc/loadavg") as fh:
            load = float(fh.read().split()[0])
        f = load / len(os.sched_getaffinity(0))  # the cores this test may run on, as nproc counts
    except (OSError, ValueError, IndexError):
        f = 1.0
    if f > _peak:
        _peak = f
    return _peak


def slow():
    """The factor every bound of this test is multiplied by (SHIM_TEST_SLOW times the load)."""
    return _BUILD_SLOW * load_factor()


def scaled(seconds):
    """A bound of `seconds` on a quiet machine, for this one now."""
    return seconds * slow()


def env_time(n):
    """A product's timeout (an NCCLSHIM_*_MS or _US, FAKE_*_MS value, or a fault's delay) of `n`
    on a quiet machine, as the string an environment takes: the test's time relations (a rank
    later than the timeout, a delay inside it) hold at any speed.  Not for a setting already at
    the top of its range (NCCLSHIM_IPC_PUSH_WAIT_US=1000000), nor for a delay measured against the
    shim's fixed times (t/39's LATE)."""
    return str(int(n * slow()))


def env_fault(spec):
    """NCCLSHIM_TEST_RV_FAULT's delays ("point=<ms>") stretched as env_time does; its kills and
    "fanout=N" (a count) as given.  A delay that must stay short of one of the shim's fixed times
    (the 1 s a connection has to show its token) is not for this."""
    out = []
    for item in spec.split(","):
        point, _, what = item.partition("=")
        stretch = what.isdigit() and point != "fanout"
        out.append("%s=%s" % (point, env_time(int(what))) if stretch else item)
    return ",".join(out)


class Deadline:
    """`seconds` (a quiet machine's) from now, stretched as the load grows."""

    def __init__(self, seconds, start=None):
        self.seconds = seconds
        self.start = time.monotonic() if start is None else start

    def left(self):
        return self.start + scaled(self.seconds) - time.monotonic()

    def passed(self):
        return self.left() <= 0

    def bound(self):
        """The bound as it stands, in seconds (for messages)."""
        return round(scaled(self.seconds))


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


def diag(*lines):
    """TAP comments (shown by prove -v): what a test did on purpose, a process it killed."""
    for line in lines:
        for part in str(line).splitlines():
            print("# " + part, flush=True)


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
    (a quiet machine's, scaled; raw reads of its stdout: the process goes on running)."""
    fd, buf = p.stdout.fileno(), b""
    deadline = Deadline(bound)
    while b"\n" not in buf:
        left = deadline.left()
        if left <= 0 or not select.select([fd], [], [], min(left, 1))[0]:
            if deadline.passed():
                raise RuntimeError("no ID within %ds" % deadline.bound())
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError("the ID's process exited: %s" % p.stderr.read())
        buf += chunk
    return buf.split(b"\n", 1)[0].decode().split()[1]


def communicate_until(p, deadline):
    """p.communicate() by a Deadline, looked at every second (it may stretch meanwhile); past it
    the process is killed.  (stdout, stderr, True if it was killed.)"""
    while True:
        try:
            out, err = p.communicate(timeout=max(0.05, min(deadline.left(), 1)))
            return out, err, False
        except subprocess.TimeoutExpired:
            if deadline.passed():
                p.kill()
                out, err = p.communicate()
                return out, err, True


def collect_bounded(procs, head, deadline):
    """Each process's (returncode, stdout, stderr) by `deadline` (a Deadline); one that runs past
    it is killed and its stderr says so.  `head`: what was already read of the first one's stdout."""
    res = []
    for k, p in enumerate(procs):
        out, err, killed = communicate_until(p, deadline)
        if killed:
            err += b"\nKILLED: ran past the bound of %ds (a hang)" % deadline.bound()
        res.append((p.returncode, ((head if k == 0 else b"") + out).decode(errors="replace"),
                    err.decode(errors="replace")))
    return res


def read_until(p, word, deadline):
    """What a process printed up to `word` (rank 0's "UID ", said once the ID file is whole),
    or up to its end or the deadline (a Deadline); the process goes on running."""
    head = b""
    while word not in head:
        left = deadline.left()
        if left <= 0 or not select.select([p.stdout], [], [], min(left, 1))[0]:
            if deadline.passed():
                break
            continue
        chunk = os.read(p.stdout.fileno(), 65536)
        if not chunk:
            break
        head += chunk
    return head


def wait_bounded(p, start, bound):
    """A process's (stdout, stderr), killed once it has lived `bound` seconds (a quiet
    machine's, scaled) since `start` (its stderr then says so)."""
    deadline = Deadline(bound, start)
    out, err, killed = communicate_until(p, deadline)
    if killed:
        err += "\nKILLED: ran past %ds (a hang)" % deadline.bound()
    return out, err
