#!/bin/bash
# Cost of a decision (issue 3): time from the first rank's ncclCommInitRank to the
# last rank's return, 2 and 16 rank processes on loopback with the fake NCCL, without
# the shim, with an unmarked ID and with marked ones (passthrough, socket, drop).
# See bench/decision_cost.c.  Usage: bench/decision_cost.sh [ITERS_2 [ITERS_16 [ROUNDS [WARMUP]]]]
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$ROOT"
make -s build/libncclshim.so fake-nccl
cc -O2 -g -std=gnu11 -Wall -Wextra -Werror -I. -Ishim/nccl -o "$T/decision_cost" bench/decision_cost.c \
    -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,"$ROOT/tests/fake/a" -ldl
echo "machine: $(nproc) cores,$(sed -n 's/^model name[[:space:]]*:\(.*\)/\1/p' /proc/cpuinfo | head -1), $(date -u +%F)"
# 16 rank processes share these cores: anything else running shows in the numbers.
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The parent runs without the shim; it gives each rank process its own environment.
# Each rank loads the fake CUDA driver first, as a CUDA application has it loaded.
env -u LD_PRELOAD DECISION_COST_CUDA="$ROOT/tests/fake/cuda/libcuda.so.1" "$T/decision_cost" "$T" "$ROOT/build/libncclshim.so" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
