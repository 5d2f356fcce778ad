#!/bin/bash
# Transparency against the real NCCL, where it is installed (no GPU needed for
# these calls): the same answers with and without the shim, through dlopen and
# through linking.
. "$(dirname "$0")/../tap.sh"
skip_emulated "the real NCCL installed here is the host's, and so is python3: no aarch64 code would run"
REAL=${REAL_NCCL:-}
for p in /usr/local/cuda/lib64/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2; do
    [ -z "$REAL" ] && [ -f "$p" ] && REAL=$p
done
[ -n "$REAL" ] || skip_all "no real libnccl.so.2 installed"

cat > "$TMP/real.py" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
v = ctypes.c_int()
print("version", lib.ncclGetVersion(ctypes.byref(v)), v.value)
lib.ncclGetErrorString.restype = ctypes.c_char_p
for r in range(9):
    print("errstr", r, lib.ncclGetErrorString(r).decode())
uid = (ctypes.c_ubyte * 128)()
rc = lib.ncclGetUniqueId(uid)
print("uniqueid", rc, "tail-zero", all(b == 0 for b in uid[64:]), "head-set", any(b != 0 for b in uid[:40]))
print("has", hasattr(lib, "ncclCommShrink"), hasattr(lib, "ncclNoSuchThing"))
PY
without=$(timeout -k 5 "$(tap_scale 60)" python3 "$TMP/real.py" "$REAL" 2>&1)
# NCCLSHIM_TAG=none: the ID exactly as NCCL made it (the mark is tested below).
with=$(NCCLSHIM_TAG=none NCCLSHIM_LOG_DIR=$TMP/rec LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 60)" python3 "$TMP/real.py" "$REAL" 2>&1)
like "$without" '^version 0 2[0-9]{4}' "the real NCCL answers without the shim"
is "$with" "$without" "and the same through the shim's dlsym wrappers (version, error strings, unique ID layout, hasattr)"
like "$(jqr "$TMP/rec" 'select(.type=="library") | .path')" "$(basename "$REAL")" "the library record names the real NCCL"
ver=$(jqr "$TMP/rec" 'select(.type=="library") | .version')
newer=$(table_names "(v) > $ver" | jq -R . | jq -sc .)
is "$(jqr "$TMP/rec" 'select(.type=="library") | .missing')" "$newer" "NCCL $ver lacks exactly the table's functions of later releases"

# By default a ctypes caller's ID is marked: NCCL's 40 bytes stay, the tail
# carries the mark, and the root listens on the address NCCL put in the ID.
marked=$(NCCLSHIM_LOG_DIR=$TMP/rec3 LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 60)" python3 "$TMP/real.py" "$REAL" 2>&1)
like "$marked" 'uniqueid 0 tail-zero False head-set True' "the real NCCL's ID gets the mark in its tail, its head is NCCL's"
like "$(jqr "$TMP/rec3" 'select(.type=="unique_id") | .rendezvous')" '^"[0-9.]+:[0-9]+"$' \
    "the unique_id record names the rendezvous address (NCCL's bootstrap address, our port)"

# Linked, like torch.
cat > "$TMP/linked.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "nccl_abi.h"
#include "nccl_decls.h"
int main(void) {
    int v = 0; ncclUniqueId id; memset(&id, 0, sizeof id);
    int r1 = ncclGetVersion(&v), r2 = ncclGetUniqueId(&id);
    int tail = 1; for (int i = 64; i < 128; i++) tail &= id.internal[i] == 0;
    printf("%d %d %d %d %s\n", r1, v, r2, tail, ncclGetErrorString(ncclInvalidUsage));
    return 0;
}
C
if cc -std=gnu11 -I"$ROOT/shim/nccl" -o "$TMP/linked" "$TMP/linked.c" "$REAL" -Wl,-rpath,"$(dirname "$REAL")" 2> "$TMP/cc.err"; then
    a=$(timeout -k 5 "$(tap_scale 60)" "$TMP/linked" 2>&1)
    b=$(NCCLSHIM_TAG=none NCCLSHIM_LOG_DIR=$TMP/rec2 LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 60)" "$TMP/linked" 2>&1)
    like "$a" '^0 2[0-9]{4} 0 1 ' "linked against the real NCCL: version, unique ID with a zero tail"
    is "$b" "$a" "the same answers with the shim interposing the symbols"
    is "$(jqr "$TMP/rec2" 'select(.type=="library") | .how')" '"symbol"' "found as a global symbol"
else
    ok 1 "compile against $REAL: $(head -3 "$TMP/cc.err")"
fi
done_testing
