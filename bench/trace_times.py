"""Where a broadcast's host time goes, from NCCLSHIM_IPC_TRACE=1 lines (issue 36):
per rank, the median and 90th percentile of each timed step of shim/ipc's
broadcast ('locked in', 'planned in', 'enqueued in'), over the broadcasts of
the given stderr files.

    python3 bench/trace_times.py DIR/rank0.err DIR/rank1.err
"""
import re
import statistics
import sys

STEPS = {"lock": re.compile(r"b (\d+): locked in (\d+) us"),
         "plan+enqueue": re.compile(r"b (\d+): planned in (\d+) us, enqueued in (\d+) us")}


def main(paths):
    for path in paths:
        got = {"lock": [], "plan": [], "enqueue": []}
        with open(path, errors="replace") as fh:
            for line in fh:
                m = STEPS["lock"].search(line)
                if m:
                    got["lock"].append(int(m.group(2)))
                    continue
                m = STEPS["plan+enqueue"].search(line)
                if m:
                    got["plan"].append(int(m.group(2)))
                    got["enqueue"].append(int(m.group(3)))
        print(path)
        for k, v in got.items():
            if v:
                v.sort()
                print("  %-8s n=%6d median %4d us  p90 %4d us  mean %6.1f us" % (
                    k, len(v), statistics.median(v), v[int(len(v) * 0.9)], statistics.mean(v)))


if __name__ == "__main__":
    main(sys.argv[1:])
