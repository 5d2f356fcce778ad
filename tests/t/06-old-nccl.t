#!/bin/bash
# Case 7: the shim forwards by name, so an older real NCCL (2.18) keeps working;
# what it lacks stays absent, or fails cleanly when called anyway.
. "$(dirname "$0")/../tap.sh"
OLD=$FAKE/old/libnccl.so.2

mkdir -p "$TMP/d"
FAKE_NCCL_LOG=$TMP/d/fake.log NCCLSHIM_LOG_DIR=$TMP/d/rec LD_PRELOAD=$SHIM \
    timeout -k 5 "$(tap_scale 30)" "$BIN/client_dlopen" dlopen "$OLD" basic > "$TMP/d/out" 2>&1
is "$?" 0 "the dlopen client works against NCCL 2.18 under the shim"
import_checks "$TMP/d/out"
like "$(cat "$TMP/d/out")" 'VERSION 21805' "it talks to 2.18.5"
lib=$(jqr "$TMP/d/rec" 'select(.type=="library")')
like "$lib" '"version":21805' "library record: version"
like "$lib" '"missing":\[[^]]*"ncclCommShrink"' "library record lists what 2.18 lacks"
is "$(jqr "$TMP/d/rec" 'select(.type=="comm") | .nccl_version' | sort -u)" 21805 "comm records carry the NCCL version"

# A program built against 2.28 (linked, so it reaches the shim's export of
# ncclCommShrink) run with a 2.18 library: the call fails with an error, not a crash.
mkdir -p "$TMP/s"
FAKE_NCCL_LOG=$TMP/s/fake.log NCCLSHIM_LOG_DIR=$TMP/s/rec LD_PRELOAD=$SHIM LD_LIBRARY_PATH=$FAKE/old \
    timeout -k 5 "$(tap_scale 30)" "$BIN/client_linked" linked shrink > "$TMP/s/out" 2> "$TMP/s/err"
is "$?" 0 "the program runs to its end"
is "$(sed -n 's/^SHRINK //p' "$TMP/s/out")" 3 "ncclCommShrink returns ncclInternalError"
like "$(cat "$TMP/s/err")" 'ncclCommShrink called but .*old/libnccl.so.2 \(NCCL 21805\) does not have it' "stderr names the function and the library"
is "$(jqr "$TMP/s/rec" 'select(.type=="warning") | .what')" '"missing-function"' "and a warning record says so"
like "$(head -1 "$TMP/s/fake.log")" '^old ' "the calls went to the 2.18 library"
done_testing
