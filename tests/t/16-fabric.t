#!/bin/bash
# EFASim, the stand-in EFA fabric (tools/fabric): the plugin driven as NCCL 2.28.9 drives it,
# between processes, and its host-wide queue-pair budget (build/efasim-test prints the TAP).
cd "$(dirname "$0")/../.." || exit 1
if [ ! -x build/efasim-test ] || [ ! -f build/libnccl-net-efasim.so ] || [ ! -x build/efasim-stat ]; then
  echo "1..1"
  echo "not ok 1 - build/efasim-test, build/efasim-stat or build/libnccl-net-efasim.so missing (run make all)"
  exit 1
fi
exec timeout -k 5 170 build/efasim-test build
