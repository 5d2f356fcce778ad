#!/bin/bash
# The shim's cost on a real NCCL call: bench/gpu_enqueue.c run alternately
# without and with LD_PRELOAD=libncclshim.so (interleaved, so that drift of the
# machine hits both alike), RUNS times each, for each mode; prints a table and
# the ratio with/without of the medians.  Output also goes to $OUT/enqueue.txt
# if OUT is set.  Needs a GPU, cuda.h and torch's libnccl.so.2.
#   SHIM (default build/libncclshim.so), NCCL_LIB (default: torch's, found with python3),
#   RUNS (5), CALLS (200000), MODES ("outofplace inplace"), CUDA_INC (/usr/local/cuda/include)
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SHIM=${SHIM:-$ROOT/build/libncclshim.so}
BIN=${BUILD:-$ROOT/build}/gpu_enqueue
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
RUNS=${RUNS:-5}
CALLS=${CALLS:-200000}
MODES=${MODES:-outofplace inplace}
WARMUP_CALLS=20000 # gpu_enqueue.c: WARMUP_BATCHES * BATCH
export NCCL_NVLS_ENABLE=0 # required on the GPU machine

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

bench() {
    local fail=0 mode i out rec line
    [ -f "$SHIM" ] || { echo "FAIL: no shim at $SHIM (make build/libncclshim.so)"; return 1; }
    mkdir -p "$(dirname "$BIN")"
    # No libnccl, no libcudart: see gpu_enqueue.c.
    cc -O2 -Wall -Wextra -I"$CUDA_INC" -o "$BIN" "$ROOT/bench/gpu_enqueue.c" -ldl || { echo "FAIL: build"; return 1; }
    if [ -z "${NCCL_LIB:-}" ]; then
        NCCL_LIB=$(timeout -k 5 120 python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib/libnccl.so.2"))' | tail -n 1)
    fi
    [ -f "$NCCL_LIB" ] || { echo "FAIL: no libnccl.so.2 at '$NCCL_LIB'"; return 1; }
    rec=$(mktemp -d /tmp/ncclshim-bench.XXXXXX)

    echo "# ncclshim gpu_enqueue: ncclAllReduce enqueue cost, 1-rank communicator, 1 float"
    echo "date:    $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
    echo "host:    $(hostname)"
    echo "machine: $(nvidia-smi -L 2>&1 | tr '\n' ';' | sed 's/;$//')"
    echo "cpu:     $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
    echo "commit:  $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "nccl:    $NCCL_LIB"
    echo "shim:    $SHIM"
    echo "calls:   $CALLS per run (in batches of 1000, only the enqueues timed), $RUNS runs per column"

    for mode in $MODES; do
        local without=() with=() version=""
        echo
        echo "## mode $mode"
        printf '%-4s %16s %16s\n' run "without ns/call" "with ns/call"
        for i in $(seq 1 "$RUNS"); do
            local w s
            for which in without with; do
                if [ $which = with ]; then
                    out=$(NCCLSHIM_LOG_DIR=$rec/$mode timeout -k 5 120 env LD_PRELOAD="$SHIM" "$BIN" "$NCCL_LIB" "$CALLS" "$mode" 2>&1)
                else
                    out=$(timeout -k 5 120 "$BIN" "$NCCL_LIB" "$CALLS" "$mode" 2>&1)
                fi
                local rc=$?
                line=$(printf '%s\n' "$out" | sed -n 's/^enqueue_ns_per_call //p')
                local where
                where=$(printf '%s\n' "$out" | sed -n 's/^ncclAllReduce_in //p')
                [ -n "$version" ] || version=$(printf '%s\n' "$out" | sed -n 's/^nccl_version //p')
                # The calls must reach the shim's wrapper with it, NCCL's own without it.
                local expect_shim=0
                case $where in *libncclshim*) expect_shim=1 ;; esac
                if [ $rc -ne 0 ] || [ -z "$line" ] || { [ $which = with ] && [ $expect_shim -ne 1 ]; } ||
                    { [ $which = without ] && [ $expect_shim -ne 0 ]; }; then
                    echo "FAIL: run $i $which (status $rc, ncclAllReduce in '$where'):"
                    printf '%s\n' "$out" | tail -n 20 | sed 's/^/  /'
                    fail=1
                    line="nan nan"
                fi
                if [ $which = with ]; then s=${line%% *}; with+=("$s"); else w=${line%% *}; without+=("$w"); fi
            done
            printf '%-4s %16s %16s\n' "$i" "$w" "$s"
        done
        local mw ms
        mw=$(printf '%s\n' "${without[@]}" | grep -v nan | median)
        ms=$(printf '%s\n' "${with[@]}" | grep -v nan | median)
        printf '%-4s %16s %16s\n' median "$mw" "$ms"
        echo "nccl_version $version"
        awk -v a="$ms" -v b="$mw" -v m="$mode" 'BEGIN {
            if (b + 0 <= 0 || a + 0 <= 0) { print "ratio " m " with/without: n/a"; exit }
            r = a / b; printf "ratio %s with/without (medians): %.4f  (%+.1f%%, %+.1f ns/call)  within 2%%: %s\n",
                m, r, (r - 1) * 100, a - b, (r <= 1.02 ? "yes" : "no") }'
        # The shim saw every call: each run's comm_end counts CALLS + warm-up all-reduces.
        python3 - "$rec/$mode" $((CALLS / 1000 * 1000 + WARMUP_CALLS)) "$RUNS" <<'EOF' || fail=1
import glob, json, sys
d, want, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ends = [json.loads(l) for p in glob.glob(d + "/ncclshim.*.jsonl") for l in open(p) if '"comm_end"' in l]
counts = [e.get("ops", {}).get("AllReduce", {}).get("count") for e in ends]
ok = len(ends) == runs and all(c == want for c in counts)
print("shim records: %d comm_end, AllReduce counts %s (want %d x %d): %s"
      % (len(ends), sorted(set(counts)), runs, want, "ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)
EOF
    done
    rm -rf "$rec"
    return $fail
}

if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    bench 2>&1 | tee "$OUT/enqueue.txt"
    exit "${PIPESTATUS[0]}"
fi
bench 2>&1
