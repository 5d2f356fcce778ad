#!/bin/bash
# Many threads at once, and NCCL calling back into NCCL and dlsym from inside an
# init: no deadlock, no recursion, exact counts.
. "$(dirname "$0")/../tap.sh"

mkdir -p "$TMP/th"
FAKE_NCCL_LOG=$TMP/th/fake.log NCCLSHIM_LOG_DIR=$TMP/th/rec LD_PRELOAD=$SHIM \
    timeout -k 5 "$(tap_scale 60)" "$BIN/client_linked" linked threads 16 25 > "$TMP/th/out" 2>&1
rc=$?
ok $([ $rc -eq 0 ] && echo 0 || echo 1) "16 threads x 25 communicators finish in bounds (rc=$rc; 124 = hung)"
import_checks "$TMP/th/out"
rec=$TMP/th/rec
is "$(jqr "$rec" 'select(.type=="comm")' | wc -l)" 400 "400 comm records"
is "$(jqr "$rec" 'select(.type=="comm_end" and .how=="destroy") | .ops.AllReduce.count' | sort -u)" 100 "each communicator's record counts exactly its 100 all-reduces"
is "$(jqr "$rec" 'select(.type=="comm_end" and .how=="destroy") | .ops.AllReduce.bytes' | sort -u)" 6400 "and exactly their bytes"
is "$(jqr "$rec" 'select(.type=="exit") | [.comms_created, .comms_alive]')" '[400,0]' "exit: 400 created, none left"
lines=$(cat "$rec"/*.jsonl | wc -l)
parsed=$(cat "$rec"/*.jsonl | python3 -c 'import sys,json; print(sum(1 for l in sys.stdin if json.loads(l)))')
is "$parsed" "$lines" "all $lines lines written concurrently are whole JSON objects"
is "$(grep -c 'ncclAllReduce' "$TMP/th/fake.log")" 40000 "40000 all-reduces reached the real library"
unlike "$(cat "$TMP/th/fake.log")" 'INVALID-COMM' "no handle leaked to the real library under concurrency"

# Re-entrancy: the fake's init calls dlsym(RTLD_DEFAULT, "ncclGetVersion"), calls
# it, and dlopens/dlsyms like a plugin loader, from inside the shim's wrapper.
mkdir -p "$TMP/re"
FAKE_NCCL_REENTER=1 FAKE_NCCL_LOG=$TMP/re/fake.log NCCLSHIM_LOG_DIR=$TMP/re/rec LD_PRELOAD=$SHIM \
    timeout -k 5 "$(tap_scale 30)" "$BIN/client_linked" linked reenter > "$TMP/re/out" 2>&1
rc=$?
ok $([ $rc -eq 0 ] && echo 0 || echo 1) "init with a re-entrant NCCL returns (rc=$rc; 124 = deadlock)"
import_checks "$TMP/re/out"
like "$(cat "$TMP/re/fake.log")" 'reenter ok version=22809' "the nested lookups and calls reached NCCL"
is "$(jqr "$TMP/re/rec" 'select(.type=="comm")' | wc -l)" 1 "one comm record: nested calls are not recorded twice"
# The same, from 8 threads of the dlopen client at once.
FAKE_NCCL_REENTER=1 NCCLSHIM_LOG_DIR=$TMP/re2/rec LD_PRELOAD=$SHIM \
    timeout -k 5 "$(tap_scale 60)" "$BIN/client_dlopen" dlopen "$FAKE/a/libnccl.so.2" threads 8 10 > "$TMP/re/out2" 2>&1
rc=$?
ok $([ $rc -eq 0 ] && echo 0 || echo 1) "8 threads of re-entrant inits through dlsym wrappers finish (rc=$rc)"
done_testing
