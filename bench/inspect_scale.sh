#!/bin/bash
# ncclshim-inspect's time and peak memory against the size of its input: for each size
# (MB), the records of one process that makes and destroys a communicator per refit
# (`one`), and of 64 processes in groups of 8 (`many`), both written by
# bench/inspect_scale.py; each read by `ncclshim-inspect --check -v` (the table, every
# rank, every rule).  Prints one row per shape and size: bytes, records, communicators,
# CPU seconds (user + system), wall seconds, peak RSS, and CPU and RSS per MB: linear
# when the per-MB columns stay flat.
# usage: bench/inspect_scale.sh [SIZE_MB...]   (default: 1 4 16 64 256)
#   SHAPES="one many" (default), INSPECT=<binary>, TMPDIR=<where the records go: twice
#   the largest size is needed>
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
INSPECT=${INSPECT:-$ROOT/tools/ncclshim-inspect}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1 4 16 64 256)
D=$(mktemp -d "${TMPDIR:-/tmp}/ncclshim-inspect-scale.XXXXXX")
trap 'rm -rf "$D"' EXIT
command -v /usr/bin/time > /dev/null || { echo "inspect_scale.sh: needs GNU time (/usr/bin/time)" >&2; exit 1; }

printf '%-5s %8s %12s %10s %7s %8s %8s %9s %9s %9s\n' shape MB bytes records comms cpu_s wall_s rss_MiB cpu_ms/MB rss/MB
for shape in ${SHAPES:-one many}; do
    for mb in "${SIZES[@]}"; do
        rm -rf "$D/rec"
        made=$(python3 "$ROOT/bench/inspect_scale.py" "$D/rec" --mb "$mb" --shape "$shape") || exit 1
        comms=$(echo "$made" | sed -n 's/.*, \([0-9]*\) communicators/\1/p')
        bytes=$(cat "$D/rec"/*.jsonl | wc -c)
        records=$(cat "$D/rec"/*.jsonl | wc -l)
        # --check exits 1: the one shape's communicators each miss their other rank
        /usr/bin/time -f '%U %S %e %M' -o "$D/time" "$INSPECT" --check -v "$D/rec" > /dev/null 2> "$D/err"
        rc=$?
        if [ "$rc" -gt 1 ]; then
            echo "inspect_scale.sh: ncclshim-inspect exited $rc on $shape $mb MB:" >&2
            tail -3 "$D/err" >&2
            exit 1
        fi
        read -r user sys wall rss < <(tail -1 "$D/time")
        awk -v s="$shape" -v mb="$mb" -v b="$bytes" -v r="$records" -v c="$comms" -v u="$user" -v y="$sys" \
            -v w="$wall" -v k="$rss" 'BEGIN {
                cpu = u + y; m = b / 1e6
                printf "%-5s %8s %12d %10d %7d %8.2f %8.2f %9.1f %9.1f %9.2f\n", s, mb, b, r, c, cpu, w,
                       k / 1024, 1000 * cpu / m, k / 1024 / m }'
    done
done
