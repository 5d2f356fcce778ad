#!/bin/bash
# The CPU clients with the shim preloaded, and the inspect tool, under valgrind
# memcheck: no invalid access, no uninitialised use, no definite leak.
. "$(dirname "$0")/../tap.sh"
command -v valgrind >/dev/null || skip_all "valgrind not installed"
VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --trace-children=no"
vg() { # vg <description> <command...>
    local d=$1; shift
    timeout -k 5 300 env NCCLSHIM_LOG_DIR="$TMP/rec" LD_PRELOAD="$SHIM" $VG "$@" > "$TMP/out" 2> "$TMP/err"
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
timeout -k 5 300 $VG "$INSPECT" "$TMP/rec" > "$TMP/out" 2> "$TMP/err"
rc=$?
ok $([ $rc -le 2 ] && echo 0 || echo 1) "ncclshim-inspect over those records (rc=$rc)"
[ $rc -le 2 ] || sed 's/^/#   /' "$TMP/err" | head -40
done_testing
