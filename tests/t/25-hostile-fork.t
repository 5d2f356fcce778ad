#!/bin/bash
# fork() while other threads create communicators (Python multiprocessing and
# Ray workers do this), then a communicator in each child: no child may hang
# (issue 17: 4-6 of 10 hung in their first init, on a lock another thread held
# at the fork) or crash.  Every child is bounded by alarm(10) (fork_threads; 10 s on a quiet
# machine, stretched as every bound is: tests/clients/test_bound.h).
. "$(dirname "$0")/../tap.sh"
# qemu-user is not fork-safe in a threaded guest: a child forked while another thread holds
# the emulator's own locks hangs (4 of 100 children of fork_threads, without the shim).
skip_emulated "qemu-user hangs fork children of a threaded guest (4 of 100 without the shim too)"
# GCC 12's AddressSanitizer allocator is not fork-safe in a multi-threaded process: without
# the shim, 10-11 of 300 such children hang in malloc (in the fake NCCL alone).
[ -n "${SHIM_PRELOAD_EXTRA:-}" ] && skip_all "the sanitizer runtime's allocator hangs fork children of threaded parents, with or without the shim"

for run in 1 2 3 4; do
    out=$(NCCLSHIM_LOG_DIR=$TMP/rec$run LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 240)" "$BIN/fork_threads" 100 4 2>"$TMP/err$run")
    rc=$?
    is "$rc" 0 "run $run: 100 children of a parent with 4 threads creating communicators all made one ($out)"
    like "$out" '^hung 0 failed 0 made [0-9]+$' "run $run: 0 hung, 0 failed"
done
# Each child wrote its own file, with its own load record and communicator.
n=$(ls "$TMP/rec1" | wc -l)
is "$n" 101 "the parent and each of its 100 children have a record file"
bad=0
for f in "$TMP/rec1"/*.jsonl; do
    pid=${f##*/}; pid=$(echo "$pid" | cut -d. -f3)  # ncclshim.<host>.<pid>.<boot8>.<start>.jsonl
    [ "$(jq -r 'select(.type=="load") | .pid' "$f" | sort -u)" = "$pid" ] || bad=$((bad + 1))
    # and its own start time (a child's, not its parent's), which its name carries
    [ "$(jq -r 'select(.type=="load") | .start_ticks' "$f")" = "$(echo "${f##*/}" | cut -d. -f5)" ] || bad=$((bad + 1))
done
is "$bad" 0 "every file holds its own process's load record, and no other's, and is named by its start time"
done_testing
