#!/bin/bash
# The rendezvous at frontier scale on the GPU machine's cores (issue 34): one process per
# simulated host (bench/rv_scale.py --grid), every process and the root under ulimit -n 1024.
# Needs a built tree (make; carried to the device machine with build, tests/bin, tests/fake/*)
# and the baseline at build/libncclshim-base.so (main before issue 34: ce6fd33).
#   bench/issue34_gpu.sh OUTDIR
set -u
out=${1:?usage: bench/issue34_gpu.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
# The harness holds a descriptor per process; each process it starts gets 1024 (rv_scale.py).
ulimit -n "$(ulimit -Hn)"
ulimit -u unlimited 2>/dev/null || ulimit -u 65536 2>/dev/null
# Every rank is a thread, and threads take pids: 4096 hosts x 8 ranks needs ~45,000.
sysctl -w kernel.pid_max=4194304 > /dev/null 2>&1
pid_max=$(cat /proc/sys/kernel/pid_max)
big=4096x8
[ "$pid_max" -lt 50000 ] && big=2560x8 # ~11 threads a process of 8 ranks: what fits 32768 pids
{
    echo "# $(date -u +%F) $(nproc) cores; uid $(id -u); ulimit -n $(ulimit -n) -u $(ulimit -u); pid_max $pid_max;" \
         "threads-max $(cat /proc/sys/kernel/threads-max); $(free -g | awk '/Mem/ {print $2 " GiB"}')"
    nvidia-smi -L 2>&1
} > "$out/machine.txt"
run() { # name timeout args...
    local name=$1 t=$2
    shift 2
    timeout -k 10 "$t" python3 bench/rv_scale.py "$@" > "$out/$name.txt" 2>&1
    echo "rc=$?" >> "$out/$name.txt"
}
base=build/libncclshim-base.so
run base1024 110 --grid 1024x1 --reps 1 --baseline "$base"
run grid 250 --grid 4096x1,8192x1 --reps 1
run big 210 --grid $big --reps 3
run huge 200 --grid 8192x8 --reps 1 # 65,536 ranks: in a call of its own if the time is short
