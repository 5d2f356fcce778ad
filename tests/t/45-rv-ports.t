#!/usr/bin/env python3
# The root's listener on a host whose ephemeral ports are all taken (live
# connections and ones in TIME_WAIT: seen with three test suites side by side).
# In a network namespace of its own (unshare -n), the ephemeral range is cut to
# four ports and each is left in TIME_WAIT by a connection this test closes.
# The root cannot listen there (nor could NCCL's own bootstrap root, which
# takes its port from the same range), so it fails open: the ID stays
# unmarked, the group passes through, and the root's process says why and what
# to widen, on stderr and in a warning record; then, the range widened, the
# same two ranks rendezvous and take socket.
import fcntl, json, os, socket, struct, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import BIN, PRELOAD, Deadline, communicate_until, done, ok, read_first_id, records, skip_all  # noqa: E402

MANY = os.path.join(BIN, "many_ranks")
FRAME = os.path.join(BIN, "rv_frame")
RANGE = (40000, 40003)
BOUND = 30  # seconds a process may live, on a quiet machine (tap.py scales it)

if os.environ.get("NCCLSHIM_TEST_IN_NETNS") != "1":
    # Into a network namespace of our own, where the ephemeral range is ours to cut.
    try:
        usable = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        usable = False
    if not usable:
        skip_all("unshare -n does not work here (needs CAP_SYS_ADMIN)")
    env = dict(os.environ, NCCLSHIM_TEST_IN_NETNS="1")
    os.execvpe("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__)], env)


def loopback_up():
    """`ip link set lo up`, without needing iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    req = struct.pack("16sH14x", b"lo", 0)
    flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, req))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))
    s.close()


def fill_range_with_time_wait():
    """Every port of RANGE held by a closed connection in TIME_WAIT (the client closes first)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 5000))
    srv.listen(16)
    clients = []
    for _ in range(RANGE[1] - RANGE[0] + 1):
        c = socket.create_connection(("127.0.0.1", 5000))
        clients.append((c, srv.accept()[0]))
    ports = sorted(c.getsockname()[1] for c, _ in clients)
    for c, a in clients:
        c.close()  # first: its side goes to TIME_WAIT
        a.close()
    srv.close()
    return ports


loopback_up()
with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
    f.write("%d %d" % RANGE)
ports = fill_range_with_time_wait()
ok(ports == list(range(RANGE[0], RANGE[1] + 1)), "the four ephemeral ports are each in TIME_WAIT", ports)
plain = socket.socket()
try:
    plain.bind(("127.0.0.1", 0))
    used_up = False
except OSError:
    used_up = True
plain.close()
ok(used_up, "a listener's bind to port 0 fails here")

tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ncclshim-ports.%d" % os.getpid())
os.makedirs(tmp)
base = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSHIM_", "FAKE_", "MANY_RANKS_"))}
base.update({"LD_PRELOAD": PRELOAD, "NCCLSHIM_WEIGHT_UPDATE": "socket", "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS": "10000"})


def job(name):
    """A root and two ranks: (the ID's token or "none", the root's stderr, the records, the ranks' stderr)."""
    env = dict(base, NCCLSHIM_LOG_DIR="%s/%s" % (tmp, name))
    root = subprocess.Popen([MANY, "id"], env=dict(env, NCCLSHIM_ROLE="training"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hexid = read_first_id(root, BOUND)
    token = subprocess.run([FRAME, "token", hexid], capture_output=True, text=True, timeout=BOUND).stdout.strip()
    # A trainer and an inference engine: the group that bridges them is weight-update.
    ranks = [subprocess.Popen([MANY, "ranks", hexid, "2", str(r), "1"], env=dict(env, NCCLSHIM_ROLE=role),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r, role in ((0, "training"), (1, "inference"))]
    deadline = Deadline(BOUND)
    ends = [communicate_until(p, deadline) for p in ranks]
    rerr, killed = "".join(e[1] for e in ends), any(e[2] for e in ends)
    root.stdin.close()
    root.stdin = None  # closed: communicate() must not flush it
    _, err, root_killed = communicate_until(root, deadline)
    ok(not killed and not root_killed, "%s: the ranks and the root finish within %d s" % (name, deadline.bound()),
       rerr[-800:])
    return token, err, records(env["NCCLSHIM_LOG_DIR"]), rerr


token, err, recs, rerr = job("used-up")
ok(token == "none", "used up: the root leaves the ID unmarked", token)
WHY = "every port of this host's ephemeral range is taken"
ok(WHY in err and "net.ipv4.ip_local_port_range" in err, "the root's stderr names the cause and the setting",
   err[-800:])
warn = [r for r in recs if r.get("type") == "warning" and WHY in json.dumps(r)]
ok(warn, "and so does its warning record", [r.get("type") for r in recs])
comms = [r for r in recs if r.get("type") == "comm"]
ok(len(comms) == 2 and all(c.get("action") == "passthrough" for c in comms), "both ranks pass through",
   [(c.get("action"), c.get("action_reason", "")[:200]) for c in comms] or rerr[-800:])

with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
    f.write("%d %d" % (RANGE[0], RANGE[0] + 2000))
token, err, recs, rerr = job("widened")
ok(token not in ("", "none"), "the range widened: the root marks the ID", token + " " + err[-400:])
comms = [r for r in recs if r.get("type") == "comm"]
ok(len(comms) == 2 and all(c.get("action") == "socket" for c in comms), "both ranks take socket",
   [(c.get("action"), c.get("action_reason", "")[:200]) for c in comms] or rerr[-800:])
done(tmp)
