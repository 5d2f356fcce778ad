#!/bin/bash
# ncclshim-inspect's peak memory on one large record file: the table view (the
# baseline, same run) against --json, which streams (issue 17: 919 MB against
# 203 MB before).  bench/html_scale.py writes a job of PROCS processes, whose
# files are joined into one file of about 27 KB per process (8000: ~200 MB).
# OLD_INSPECT=<binary> measures an older --json in the same run too.
# usage: bench/inspect_json_mem.sh [PROCS]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROCS=${1:-8000}
INSPECT=${INSPECT:-$ROOT/tools/ncclshim-inspect}
D=$(mktemp -d "${TMPDIR:-/tmp}/ncclshim-jsonbench.XXXXXX")
trap 'rm -rf "$D"' EXIT
python3 "$ROOT/bench/html_scale.py" "$D" --procs "$PROCS" > /dev/null || exit 1
mkdir "$D/one"
find "$D/records" -name '*.jsonl' -print0 | sort -z | xargs -0 cat > "$D/one/ncclshim.job.1.jsonl"
rm -rf "$D/records"
echo "record file: $(stat -c %s "$D/one/ncclshim.job.1.jsonl") bytes, $(wc -l < "$D/one/ncclshim.job.1.jsonl") records"
peak() { # peak <label> <inspect args...>: prints the peak RSS in KiB
    local label=$1; shift
    /usr/bin/time -v "$@" > "$D/out" 2> "$D/time" || { tail -5 "$D/time" >&2; exit 1; }
    local kib; kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$D/time")
    local secs; secs=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$D/time")
    echo "$label: peak RSS $kib KiB, wall $secs, output $(stat -c %s "$D/out") bytes" >&2
    echo "$kib"
}
table=$(peak "table" "$INSPECT" "$D/one/ncclshim.job.1.jsonl")
json=$(peak "--json" "$INSPECT" --json "$D/one/ncclshim.job.1.jsonl")
jq -e '.communicators | length > 0' "$D/out" > /dev/null || { echo "--json output is not a valid document" >&2; exit 1; }
awk -v j="$json" -v t="$table" 'BEGIN { printf "--json / table: %.2fx\n", j / t }'
if [ -n "${OLD_INSPECT:-}" ]; then
    old=$(peak "--json (OLD_INSPECT)" "$OLD_INSPECT" --json "$D/one/ncclshim.job.1.jsonl")
    awk -v j="$old" -v t="$table" 'BEGIN { printf "old --json / table: %.2fx\n", j / t }'
fi
