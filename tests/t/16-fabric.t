#!/bin/bash
# EFASim, the stand-in EFA fabric (tools/fabric): the plugin driven as NCCL 2.28.9 drives it,
# between processes, and its host-wide queue-pair budget (build/efasim-test prints the TAP).
cd "$(dirname "$0")/../.." || exit 1
# EFASim tells a live process from a reused pid by the start time in /proc/<pid>/stat, and
# qemu-user fakes a process's own (/proc/self/stat), one clock tick off from what the others
# read: EFASim then reclaims live processes' queue pairs.  EFASim is a test fabric; the shim
# never reads that file.
if [ -n "${SHIM_TEST_ARCH:-}" ]; then
  echo "1..0 # SKIP under qemu-$SHIM_TEST_ARCH-static: it fakes /proc/self/stat's start time, by which EFASim tells a live process"
  exit 0
fi
. tests/built.sh && need_built build/efasim-test build/libnccl-net-efasim.so build/efasim-stat
# Its bound, a quiet machine's 170 s stretched to this one (tests/tap.sh; in a subshell, whose
# exit removes the directory tap.sh makes).
bound=$(. tests/tap.sh > /dev/null && tap_scale 170) || bound=170
exec timeout -k 5 "$bound" build/efasim-test build
