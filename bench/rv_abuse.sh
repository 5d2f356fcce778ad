#!/bin/bash
# The rendezvous under abuse (issue 17): time from the last real rank's arrival to the
# decision, with 200 idle connections, 80 slow-drip ones, and a connect/garbage flood on
# the root's port, and without (baseline, same run).  See bench/rv_abuse.py.
# Usage: bench/rv_abuse.sh [RUNS [SCENARIO...]]   (RUNS: 5; scenarios: all)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
make -s all tests-bin
echo "machine: $(nproc) cores,$(sed -n 's/^model name[[:space:]]*:\(.*\)/\1/p' /proc/cpuinfo | head -1), $(date -u +%F)"
# The attacker, the root and both ranks share these cores: anything else running shows.
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
env -u LD_PRELOAD python3 bench/rv_abuse.py "${1:-5}" "${@:2}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
