#!/bin/bash
# Interposition cases 2-5: dlopen + dlsym(handle) (vLLM's ctypes pynccl),
# RTLD_DEFAULT / RTLD_NEXT (nccl4py), two different libnccl files in one
# process, absent names, non-NCCL names and dlerror.
. "$(dirname "$0")/../tap.sh"
A=$FAKE/a/libnccl.so.2 B=$FAKE/b/libnccl.so.2 OLD=$FAKE/old/libnccl.so.2

look() { timeout -k 5 "$(tap_scale 20)" "$BIN/dl_lookup" "$A" "$B" "$OLD"; }
# (Under test-asan the sanitizer runtime is preloaded in both runs.)
without=$(LD_PRELOAD=${SHIM_PRELOAD_EXTRA:-} look 2>&1)
with=$(LD_PRELOAD=$SHIM NCCLSHIM_LOG_DIR=$TMP/rec look 2>&1)
field() { printf '%s\n' "$1" | awk -v k="$2" '$1==k {print $2" "$3}' | sed 's/ *$//'; }

for k in default-ncclGetVersion default-nonexistent old-ncclCommShrink a-ncclTeamWorld-unwrapped; do
    is "$(field "$with" $k)" "$(field "$without" $k)" "$k: absent, with dlerror set, as without the shim"
done
for k in m-cos default-malloc; do
    is "$(field "$with" $k)" "$(field "$without" $k)" "$k: a non-NCCL name resolves exactly as without the shim"
done
is "$(field "$with" a-ncclGetVersion)" "build/libncclshim.so -" "dlsym(handle of libnccl a) returns the shim's wrapper"
is "$(field "$with" b-ncclGetVersion)" "build/libncclshim.so -" "dlsym(handle of libnccl b) returns the shim's wrapper"
is "$(field "$with" a-pncclAllReduce)" "build/libncclshim.so -" "pnccl names are wrapped too"
is "$(field "$with" old-ncclCommInitRank)" "build/libncclshim.so -" "an older NCCL's functions are wrapped"
is "$(field "$with" version-old)" "21805" "a call through an old library's wrapper reaches that library"
is "$(field "$with" next-dlsym-is-own)" "1" "dlsym(RTLD_NEXT) from the program finds what the program binds to (the caller's position is kept)"
is "$(field "$without" next-dlsym-is-own)" "1" "(and the same holds without the shim)"

# A global NCCL (like torch linked against it): RTLD_DEFAULT finds the shim's export.
with_g=$(DL_LOOKUP_GLOBAL=1 LD_PRELOAD=$SHIM NCCLSHIM_LOG_DIR=$TMP/recg look 2>&1)
without_g=$(DL_LOOKUP_GLOBAL=1 LD_PRELOAD=${SHIM_PRELOAD_EXTRA:-} look 2>&1)
is "$(field "$without_g" default-ncclGetVersion)" "a/libnccl.so.2 -" "without the shim RTLD_DEFAULT finds the global libnccl"
is "$(field "$with_g" default-ncclGetVersion)" "build/libncclshim.so -" "with it, RTLD_DEFAULT finds the shim's wrapper"
is "$(field "$with_g" version-a)" "22809" "and calls reach libnccl a"

# Two libraries, one process: each caller reaches the library it looked up
# (docs/design.md, "One forwarding table per library").
mkdir -p "$TMP/two"
FAKE_NCCL_LOG=$TMP/two/fake.log NCCLSHIM_LOG_DIR=$TMP/two/rec LD_PRELOAD=$SHIM \
    timeout -k 5 "$(tap_scale 20)" "$BIN/client_linked" linked basic > "$TMP/two/linked.out" 2>&1
FAKE_NCCL_LOG=$TMP/two/fake.log NCCLSHIM_LOG_DIR=$TMP/two/rec LD_PRELOAD=$SHIM \
    timeout -k 5 "$(tap_scale 20)" "$BIN/client_dlopen" dlopen "$B" basic > "$TMP/two/dlopen.out" 2>&1
is "$?" 0 "the dlopen client (like vLLM's pynccl) passes under the shim"
import_checks "$TMP/two/dlopen.out"
is "$(awk '{print $1}' "$TMP/two/fake.log" | sort -u | tr '\n' ' ')" "a b " "both libraries were called"
unlike "$(cat "$TMP/two/fake.log")" 'INVALID-COMM' "no handle reached a library that did not make it"
is "$(jqr "$TMP/two/rec" 'select(.type=="library") | [.slot,.how]' | sort | tr '\n' ' ')" '[0,"loaded"] [0,"symbol"] ' \
   "each process bound slot 0 to its one library (global symbol; found loaded)"

# Both in one process: linked to a, dlopen b.
cat > "$TMP/both.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include "nccl_abi.h"
#include "nccl_decls.h"
int main(int argc, char **argv) {
    void *hb = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    ncclResult_t (*getid_b)(ncclUniqueId *) = (ncclResult_t (*)(ncclUniqueId *))dlsym(hb, "ncclGetUniqueId");
    ncclResult_t (*init_b)(ncclComm_t *, int, ncclUniqueId, int) = (ncclResult_t (*)(ncclComm_t *, int, ncclUniqueId, int))dlsym(hb, "ncclCommInitRank");
    ncclResult_t (*destroy_b)(ncclComm_t) = (ncclResult_t (*)(ncclComm_t))dlsym(hb, "ncclCommDestroy");
    ncclUniqueId ia, ib; ncclComm_t ca, cb;
    int ok = ncclGetUniqueId(&ia) == 0 && ncclCommInitRank(&ca, 1, ia, 0) == 0;
    ok = ok && getid_b(&ib) == 0 && init_b(&cb, 1, ib, 0) == 0;
    float x = 1, y = 0;
    ok = ok && ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, ca, 0) == 0;
    ok = ok && ncclCommDestroy(ca) == 0 && destroy_b(cb) == 0;
    printf("%s\n", ok ? "both-ok" : "both-fail");
    return !ok;
}
C
"$TARGET_CC" -std=gnu11 -I"$ROOT/shim/nccl" -o "$TMP/both" "$TMP/both.c" -L"$FAKE/a" -l:libnccl.so.2 -Wl,-rpath,"$FAKE/a" -ldl
target_wrap "$TMP/both"
: > "$TMP/both.log"
out=$(FAKE_NCCL_LOG=$TMP/both.log NCCLSHIM_LOG_DIR=$TMP/bothrec LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 20)" "$TMP/both" "$B" 2>&1)
is "$out" "both-ok" "linked libnccl a and dlopened libnccl b in one process both work"
is "$(grep -c '^a [0-9]* ncclCommInitRank' "$TMP/both.log") $(grep -c '^b [0-9]* ncclCommInitRank' "$TMP/both.log")" "1 1" "each init reached its own library"
is "$(grep -E '^(a|b) [0-9]* ncclCommDestroy' "$TMP/both.log" | awk '{print $1}' | tr '\n' ' ')" "a b " "each destroy reached the library that made the communicator"
unlike "$(cat "$TMP/both.log")" 'INVALID-COMM' "no communicator crossed libraries"
is "$(jqr "$TMP/bothrec" 'select(.type=="library") | [.slot, (.path|test("/b/"))]' | sort | tr '\n' ' ')" '[0,false] [1,true] ' "a in slot 0, b in slot 1"
done_testing
