#!/bin/bash
# The CPU clients with the shim preloaded, and the inspect tool, under valgrind
# memcheck: no invalid access, no uninitialised use, no definite leak.  Its bounds are a plain
# run's: `make test-valgrind` stretches them by SHIM_TEST_SLOW (10) and the load (tap_scale).
. "$(dirname "$0")/../tap.sh"
command -v valgrind >/dev/null || skip_all "valgrind not installed"
VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --trace-children=no"
vg() { # vg <description> <command...>
    local d=$1; shift
    timeout -k 5 "$(tap_scale 30)" env NCCLSHIM_LOG_DIR="$TMP/rec" LD_PRELOAD="$SHIM" $VG "$@" > "$TMP/out" 2> "$TMP/err"
    local rc=$?
    ok $rc "$d (rc=$rc)"
    [ $rc -eq 0 ] || sed 's/^/#   /' "$TMP/err" | head -40
}
vg "linked client, basic scenario" "$BIN/client_linked" linked basic
vg "dlopen client on library b" "$BIN/client_dlopen" dlopen "$FAKE/b/libnccl.so.2" basic
vg "dlopen client on NCCL 2.18" "$BIN/client_dlopen" dlopen "$FAKE/old/libnccl.so.2" basic
vg "4 threads x 5 communicators" "$BIN/client_linked" linked threads 4 5
FAKE_NCCL_REENTER=1 vg "re-entrant init" "$BIN/client_linked" linked reenter
vg "dlsym lookups" "$BIN/dl_lookup" "$FAKE/a/libnccl.so.2" "$FAKE/b/libnccl.so.2" "$FAKE/old/libnccl.so.2"
vg "fork" "$BIN/fork_client"
LD_LIBRARY_PATH="$FAKE/old" vg "missing function" "$BIN/client_linked" linked shrink
vg "NCCL 2.29/2.30 functions on NCCL's communicator" "$BIN/newer_linked" linked nccl
NCCLSHIM_RULES='nranks=1:drop' vg "NCCL 2.29/2.30 functions on a dropped one" "$BIN/newer_linked" linked shim
vg "communicator table across 200 creations and destroys" "$BIN/newer_linked" linked reuse 200
RANK_CLIENT_CUDA="$ROOT/tests/fake/cuda/libcuda.so.1" LD_LIBRARY_PATH="$FAKE/newest" \
    vg "NCCL 2.31's nccl*Config collectives on NCCL's communicator (the fake 2.32.3)" "$BIN/rank_client" root 1 1 collcfg=1
# The rendezvous: root and rank of a 2-rank communicator, both under memcheck
# (the root's serving thread, both rounds, the socket and drop actions).
rv_pair() { # rv_pair <description> <extra args> <env...>
    local d=$1 extra=$2 line rc0 rc1; shift 2
    rm -f "$TMP/fifo"; mkfifo "$TMP/fifo"
    timeout -k 5 "$(tap_scale 30)" env "$@" NCCLSHIM_ROLE=training NCCLSHIM_LOG_DIR="$TMP/rec" LD_PRELOAD="$SHIM" \
        $VG "$BIN/rank_client" root 1 2 ops=2 $extra > "$TMP/fifo" 2> "$TMP/err0" &
    local pid=$!
    exec 3< "$TMP/fifo"
    read -r -t "$(tap_scale 20)" -u 3 line
    timeout -k 5 "$(tap_scale 30)" env "$@" NCCLSHIM_ROLE=inference NCCLSHIM_LOG_DIR="$TMP/rec" LD_PRELOAD="$SHIM" \
        $VG "$BIN/rank_client" rank 1 2 "${line#ID }" ops=2 $extra > "$TMP/out1" 2> "$TMP/err1"
    rc1=$?
    cat <&3 > "$TMP/out0"
    exec 3<&-
    wait $pid
    rc0=$?
    ok $([ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && grep -q ' rc=0 ' "$TMP/out0" && grep -q ' rc=0 ' "$TMP/out1" && echo 0 || echo 1) \
        "$d (root rc=$rc0, rank rc=$rc1)"
    [ $rc0 -eq 0 ] || sed 's/^/#   /' "$TMP/err0" | head -40
    [ $rc1 -eq 0 ] || sed 's/^/#   /' "$TMP/err1" | head -40
}
rv_pair "rendezvous, action socket" "" NCCLSHIM_WEIGHT_UPDATE=socket
rv_pair "rendezvous, action drop, every API function on the dropped handle" "allapi=1" NCCLSHIM_WEIGHT_UPDATE=drop
rv_pair "ipc: broadcasts from both roots, all-reduces (fake libcuda)" "xfer=1" NCCLSHIM_WEIGHT_UPDATE=ipc \
    NCCLSHIM_IPC_CHUNK_BYTES=4096 NCCLSHIM_IPC_STEP_BYTES=8192 FAKE_CUDA_WAIT_TIMEOUT_MS=60000 RANK_CLIENT_CUDA="$ROOT/tests/fake/cuda/libcuda.so.1"
rv_pair "ipc: buffers of cuMemCreate (expandable segments) shared as file descriptors over Unix sockets" "xfer=1" \
    NCCLSHIM_WEIGHT_UPDATE=ipc NCCLSHIM_IPC_CHUNK_BYTES=4096 NCCLSHIM_IPC_STEP_BYTES=8192 FAKE_CUDA_WAIT_TIMEOUT_MS=60000 \
    RANK_CLIENT_CUDA="$ROOT/tests/fake/cuda/libcuda.so.1" RANK_CLIENT_MEM=vmm RANK_CLIENT_BIG=1
rv_pair "ipc: NCCL 2.31's nccl*Config collectives, a 2.32 completion event recorded" "collcfg=1" \
    NCCLSHIM_WEIGHT_UPDATE=ipc NCCLSHIM_IPC_CHUNK_BYTES=4096 NCCLSHIM_IPC_STEP_BYTES=8192 FAKE_CUDA_WAIT_TIMEOUT_MS=60000 \
    RANK_CLIENT_CUDA="$ROOT/tests/fake/cuda/libcuda.so.1"
mkdir -p "$TMP/sync"
rv_pair "ipc: 10 suspend/resume cycles (staging given back and taken again), destroy while suspended" \
    "suspend=2 cycles=10" NCCLSHIM_WEIGHT_UPDATE=ipc NCCLSHIM_IPC_CHUNK_BYTES=4096 NCCLSHIM_IPC_STEP_BYTES=8192 FAKE_CUDA_WAIT_TIMEOUT_MS=60000 \
    RANK_CLIENT_CUDA="$ROOT/tests/fake/cuda/libcuda.so.1" RANK_CLIENT_SYNC="$TMP/sync" \
    LD_LIBRARY_PATH="$ROOT/tests/fake/new"
grep -q ' ok=10 .*bad=-' "$TMP/out1" && grep -q ' released=10 .*freed_mapped=0 .*bad=-' "$TMP/out1"
ok $? "... every cycle exact, the staging given back each time, never while mapped"

timeout -k 5 "$(tap_scale 30)" $VG "$INSPECT" "$TMP/rec" > "$TMP/out" 2> "$TMP/err"
rc=$?
ok $([ $rc -le 2 ] && echo 0 || echo 1) "ncclshim-inspect over those records (rc=$rc)"
[ $rc -le 2 ] || sed 's/^/#   /' "$TMP/err" | head -40
# --html over the same records and fixtures with every kind of problem (decisions, peers lost, drops)
timeout -k 5 "$(tap_scale 300)" $VG "$INSPECT" --html "$TMP/r.html" "$TMP/rec" "$ROOT/tests/inspect/fixtures/rv_ipc_dead_peer" \
    "$ROOT/tests/inspect/fixtures/rv_drop" "$ROOT/tests/inspect/fixtures/efasim_passthrough" \
    "$ROOT/tests/inspect/fixtures/nccl232_attn" > /dev/null 2> "$TMP/err"
rc=$?
ok $([ $rc -le 2 ] && [ -s "$TMP/r.html" ] && echo 0 || echo 1) "ncclshim-inspect --html (rc=$rc)"
[ $rc -le 2 ] || sed 's/^/#   /' "$TMP/err" | head -40
done_testing
