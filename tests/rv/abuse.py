#!/usr/bin/env python3
"""A hostile neighbour of a rendezvous root: strangers on its port.

    abuse.py PORT MODE N [--host H] [--seconds S] [--payload HEX] [--no-reconnect]
             [--report-closed K]

MODE
  idle   N connections that send nothing, each opened again as soon as the
         root closes it (a persistent attacker: the root cannot wait it out)
  drip   N connections that send one byte a second (the start of a valid
         frame header, so no byte is "wrong" before the 12th), reopened too
  flood  N processes that connect, send 64 random bytes (or --payload) and
         close, in a loop, as fast as they can

Prints "READY" once the N connections have been opened (idle, drip) or every
flood process has made its first 100 connections; with --report-closed K,
"CLOSED K" once the root has closed K of them (idle, drip: the cap or the
deadline at work); then runs until --seconds pass (default 30) or stdin
closes, and prints one line:
  "STATS connects=C closed_by_root=K refused=R errors=E"
(refused: connect() refused, e.g. after the decision closed the listener).

Every close is a reset (SO_LINGER 0): a flood of ordinary closes would leave
hundreds of thousands of TIME_WAIT sockets on this host's loopback and
exhaust its ephemeral ports, for every other process too (bind() of port 0
then fails with EADDRINUSE).
"""
import argparse, errno, multiprocessing, os, select, socket, struct, sys, time

LINGER0 = struct.pack("ii", 1, 0)
# The first 12 bytes of a HELLO frame's header ("NSRV", version 1, type 1,
# payload 4096): a dripping stranger looks like a slow rank until the token.
DRIP = struct.pack("<IHHI", 0x5652534E, 1, 1, 4096) + b"\0" * 4096


def stop_requested(deadline):
    if time.monotonic() >= deadline:
        return True
    try:
        r = select.select([sys.stdin], [], [], 0)[0]
    except (OSError, ValueError):
        return False
    return bool(r) and not os.read(sys.stdin.fileno(), 4096)


def new_conn(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
    s.setblocking(False)
    e = s.connect_ex(addr)
    if e not in (0, errno.EINPROGRESS):
        s.close()
        raise OSError(e, os.strerror(e))
    return s


def hold(addr, n, drip, deadline, reconnect, report_closed):
    """idle and drip: keeps n connections open, reopening what the root closes."""
    stats = dict(connects=0, closed_by_root=0, refused=0, errors=0)
    conns = {}  # socket -> bytes sent

    def open_one():
        try:
            s = new_conn(addr)
        except OSError as e:
            stats["refused" if e.errno == errno.ECONNREFUSED else "errors"] += 1
            return False
        stats["connects"] += 1
        conns[s] = 0
        return True

    for _ in range(n):
        open_one()
    print("READY", flush=True)
    next_drip = time.monotonic() + 1
    reported = False
    while not stop_requested(deadline):
        if report_closed and not reported and stats["closed_by_root"] >= report_closed:
            print("CLOSED %d" % report_closed, flush=True)
            reported = True
        want = n - len(conns) if reconnect else 0
        for _ in range(want):
            if not open_one():
                break
        if reconnect and len(conns) < n:
            time.sleep(0.01)  # refused: the listener is gone; do not spin
        if not conns:
            time.sleep(0.05)  # all closed, none reopened: wait for the end
        r = select.select(list(conns), [], [], 0.05)[0] if conns else []
        for s in r:
            try:
                data = s.recv(4096)
            except OSError as e:
                data = b""
                if e.errno != errno.ECONNRESET:
                    stats["errors"] += 1
            if not data:
                stats["closed_by_root"] += 1
                del conns[s]
                s.close()
        if drip and time.monotonic() >= next_drip:
            next_drip += 1
            for s in list(conns):
                try:
                    s.send(DRIP[conns[s]:conns[s] + 1])
                    conns[s] += 1
                except OSError:
                    pass  # not connected yet, or closed: the recv above sees it
    for s in conns:
        s.close()
    return stats


def flood_one(addr, payload, deadline, stop, started, q):
    stats = dict(connects=0, closed_by_root=0, refused=0, errors=0)
    counted = False
    while time.monotonic() < deadline and not stop.is_set():
        for _ in range(100):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
            try:
                s.connect(addr)
                stats["connects"] += 1
                s.send(payload or os.urandom(64))
            except ConnectionRefusedError:
                stats["refused"] += 1
                time.sleep(0.001)
            except OSError:
                stats["errors"] += 1
            s.close()
        if not counted:
            counted = True
            with started.get_lock():
                started.value += 1
    if not counted:
        with started.get_lock():
            started.value += 1
    q.put(stats)


def flood(addr, n, payload, deadline):
    q = multiprocessing.Queue()
    stop = multiprocessing.Event()
    started = multiprocessing.Value("i", 0)
    procs = [multiprocessing.Process(target=flood_one, args=(addr, payload, deadline, stop, started, q), daemon=True)
             for _ in range(n)]
    for p in procs:
        p.start()
    ready = False
    while not stop_requested(deadline):
        if not ready and started.value >= n:
            print("READY", flush=True)
            ready = True
        time.sleep(0.01)
    stop.set()
    total = dict(connects=0, closed_by_root=0, refused=0, errors=0)
    for _ in procs:
        try:
            for k, v in q.get(timeout=5).items():
                total[k] += v
        except Exception:
            total["errors"] += 1  # a child that did not report within 5 s
    for p in procs:
        p.join(1)
        if p.is_alive():
            p.kill()
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("mode", choices=("idle", "drip", "flood"))
    ap.add_argument("n", type=int)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--payload", default="", help="hex bytes a flood sends instead of random ones")
    ap.add_argument("--no-reconnect", action="store_true", help="idle, drip: do not reopen what the root closes")
    ap.add_argument("--report-closed", type=int, default=0, metavar="K")
    a = ap.parse_args()
    addr = (a.host, a.port)
    deadline = time.monotonic() + a.seconds
    if a.mode == "flood":
        stats = flood(addr, a.n, bytes.fromhex(a.payload), deadline)
    else:
        stats = hold(addr, a.n, a.mode == "drip", deadline, not a.no_reconnect, a.report_closed)
    print("STATS " + " ".join("%s=%d" % kv for kv in stats.items()), flush=True)


if __name__ == "__main__":
    main()
