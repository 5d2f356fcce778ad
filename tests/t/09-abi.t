#!/bin/bash
# The shim declares NCCL's ABI itself (it must build without nccl.h); check those
# declarations against the real header wherever one is installed.
. "$(dirname "$0")/../tap.sh"
INC=""
for d in ${NCCL_INCLUDE:-} /usr/local/cuda/include /usr/include; do
    [ -n "$d" ] && [ -f "$d/nccl.h" ] && INC=$d && break
done
[ -n "$INC" ] || skip_all "no nccl.h installed"
CUDAINC=$(dirname "$INC")/include
cc -std=gnu11 -I"$ROOT/shim" -o "$TMP/ours" "$ROOT/tests/clients/abi_layout.c" && \
cc -std=gnu11 -I"$INC" -I/usr/local/cuda/include -DREAL_NCCL_H -o "$TMP/real" "$ROOT/tests/clients/abi_layout.c" 2> "$TMP/err1"
ok $? "layout programs build ($(head -2 "$TMP/err1"))"
is "$("$TMP/ours")" "$("$TMP/real")" "ncclUniqueId, ncclConfig_t (every field's offset and size), ncclSimInfo_t, enums match $INC/nccl.h"
cc -std=gnu11 -Wall -Werror -I"$INC" -I/usr/local/cuda/include -I"$ROOT/shim" -include cuda_runtime_api.h -fsyntax-only \
    "$ROOT/tests/clients/abi_signatures.c" 2> "$TMP/err2" || \
cc -std=gnu11 -Wall -Werror -I"$INC" -I/usr/local/cuda/include -I"$ROOT/shim" -fsyntax-only \
    "$ROOT/tests/clients/abi_signatures.c" 2> "$TMP/err2"
ok $? "every function type in nccl_api.def is identical to nccl.h's $(head -c 400 "$TMP/err2")"
done_testing
