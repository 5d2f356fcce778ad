#!/bin/bash
# The C call site of a communicator's creation: the shim reads its caller's return address
# and names the object it lies in (dladdr), whose path gives the API family (torch's
# libraries, ctypes' libffi, or other).  Three callers in one process: a library named like
# torch's, one named like libffi, and the program itself (named by the loader as it was
# started: under qemu, its argv[0]).  Compiled for the target, so that under make
# test-aarch64 the return addresses are aarch64's.
. "$(dirname "$0")/../tap.sh"
mkdir -p "$TMP/torch/lib" "$TMP/ffi"
cat > "$TMP/caller.c" <<'C'
#include "nccl_abi.h"
#include "nccl_decls.h"
int CALLER(void)
{
    ncclUniqueId id;
    ncclComm_t c;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&c, 1, id, 0) != ncclSuccess)
        return 1;
    return ncclCommDestroy(c) != ncclSuccess;
}
C
cat > "$TMP/main.c" <<'C'
#include <stdio.h>
int torch_like(void), ffi_like(void), main_like(void);
int main(void)
{
    int bad = torch_like() | ffi_like() | main_like();
    printf("%s\n", bad ? "callers-fail" : "callers-ok");
    return bad;
}
C
# shellcheck disable=SC2054 # -Wl,-rpath,DIR is one argument
nccl=(-I"$ROOT/shim/nccl" -L"$FAKE/a" -l:libnccl.so.2 -Wl,-rpath,"$FAKE/a")
torch=$TMP/torch/lib/libtorch_like.so ffi=$TMP/ffi/libffi.so.8
"$TARGET_CC" -std=gnu11 -shared -fPIC -DCALLER=torch_like -o "$torch" "$TMP/caller.c" "${nccl[@]}" &&
    "$TARGET_CC" -std=gnu11 -shared -fPIC -DCALLER=ffi_like -o "$ffi" "$TMP/caller.c" "${nccl[@]}" &&
    "$TARGET_CC" -std=gnu11 -DCALLER=main_like -o "$TMP/callers" "$TMP/main.c" "$TMP/caller.c" "$torch" "$ffi" \
        -Wl,-rpath,"$TMP/torch/lib:$TMP/ffi" "${nccl[@]}" &&
    target_wrap "$TMP/callers"
is "$?" 0 "the three callers build"
out=$(NCCLSHIM_LOG_DIR=$TMP/rec LD_PRELOAD=$SHIM tap_run 30 "$TMP/callers" 2>&1)
is "$out" "callers-ok" "each creates a communicator under the shim"
c='select(.type=="comm") | [.caller.api, .caller.lib]'
is "$(jqr "$TMP/rec" "$c" | tr '\n' ' ')" \
   "[\"torch\",\"$torch\"] [\"ctypes\",\"$ffi\"] [\"other\",\"$TMP/callers\"] " \
   "each record names its caller's object and the API family it makes"
done_testing
