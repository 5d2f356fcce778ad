#!/bin/bash
# Builds build/libncclshim-prof.so: the library of this tree with
# bench/phase_prof.patch applied (clock reads between the host phases of
# ipc_broadcast, summed per phase and printed to stderr at exit as "PHASE"
# lines, us per broadcast).  Not for production: the marks are global and
# assume one broadcasting thread.
#   bash bench/phase_prof.sh
#   PH_SKIP=20001 COLOCATED_REFITS=4 python3 bench/colocated.py --outdir DIR \
#       --preload build/libncclshim-prof.so --cases shim --shapes moe
#   grep ^PHASE DIR/moe/shim/rank0.err      # PH_SKIP: the sums restart at that broadcast
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive HEAD | tar -x -C "$tmp"
patch -s -d "$tmp" -p1 < bench/phase_prof.patch
make -s -C "$tmp" build/libncclshim.so
cp "$tmp/build/libncclshim.so" build/libncclshim-prof.so
echo "build/libncclshim-prof.so"
