#!/bin/bash
# Instructions per forwarded call, with and without the shim, counted by callgrind
# (repeatable: it counts instructions, not time).  Usage: bench/forward_cost.sh [N]
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-100000}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$ROOT"
make -s build/libncclshim.so fake-nccl
cc -O2 -g -std=gnu11 -I. -Ishim/nccl -o "$T/fc" bench/forward_cost.c -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,"$ROOT/tests/fake/a" -lpthread
count() { # count <label> <env...>
    local label=$1; shift
    env "$@" valgrind --tool=callgrind --callgrind-out-file="$T/$label.out" --toggle-collect=bench_loop \
        "$T/fc" "$N" > /dev/null 2> "$T/$label.err"
    callgrind_annotate "$T/$label.out" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,
}
direct=$(count direct NCCLSHIM_MODE=observe)
shim=$(count shim LD_PRELOAD="$ROOT/build/libncclshim.so" NCCLSHIM_LOG_DIR="$T/rec")
off=$(count off LD_PRELOAD="$ROOT/build/libncclshim.so" NCCLSHIM_MODE=off)
echo "calls:                          $N"
echo "direct (no shim) instr/call:    $(echo "scale=2; $direct / $N" | bc)"
echo "shim (observe) instr/call:      $(echo "scale=2; $shim / $N" | bc)"
echo "shim (off) instr/call:          $(echo "scale=2; $off / $N" | bc)"
echo "added by the shim (observe):    $(echo "scale=2; ($shim - $direct) / $N" | bc)"
echo "added by the shim (off):        $(echo "scale=2; ($off - $direct) / $N" | bc)"
