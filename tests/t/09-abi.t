#!/bin/bash
# The shim declares NCCL's ABI itself (it must build without nccl.h, and serve
# every release from 2.18 on); check those declarations against every real
# header we have: the installed one (2.28.9 on the development and CI
# machines) and ../shared/nccl-headers (2.18.6, 2.29.7, 2.30.7; NCCL_HEADERS_DIR).
# For each: the layout of every type and field that release has, and the type
# of every function of the table that release has.
. "$(dirname "$0")/../tap.sh"
HEADERS=${NCCL_HEADERS_DIR:-$ROOT/../shared/nccl-headers}
CUDAINC=""
for d in ${CUDA_INCLUDE:-} /usr/local/cuda/include /usr/include; do
    [ -n "$d" ] && [ -f "$d/cuda_runtime.h" ] && CUDAINC=$d && break
done
[ -n "$CUDAINC" ] || skip_all "no CUDA headers (cuda_runtime.h), which every nccl.h includes"
incs=()
for d in ${NCCL_INCLUDE:-} /usr/local/cuda/include /usr/include; do
    [ -n "$d" ] && [ -f "$d/nccl.h" ] && incs+=("$d") && break
done
for v in 2.18.6 2.29.7 2.30.7; do
    if [ -f "$HEADERS/$v/nccl.h" ]; then incs+=("$HEADERS/$v"); else diag "no $HEADERS/$v/nccl.h: skipped"; fi
done
[ ${#incs[@]} -gt 0 ] || skip_all "no nccl.h installed and no NCCL_HEADERS_DIR"

for inc in "${incs[@]}"; do
    code=$(sed -n 's/^#define NCCL_VERSION_CODE \([0-9]*\).*/\1/p' "$inc/nccl.h" | head -1)
    name="NCCL $code ($inc/nccl.h)"
    # (the target's compiler: under make test-aarch64, the layouts are aarch64's)
    "$TARGET_CC" -std=gnu11 -I"$ROOT/shim/nccl" -DABI_AS="$code" -o "$TMP/ours" "$ROOT/tests/clients/abi_layout.c" 2> "$TMP/err1" &&
        "$TARGET_CC" -std=gnu11 -I"$inc" -I"$CUDAINC" -DREAL_NCCL_H -o "$TMP/real" "$ROOT/tests/clients/abi_layout.c" 2>> "$TMP/err1" &&
        target_wrap "$TMP/ours" "$TMP/real"
    ok $? "$name: layout programs build $(head -c 300 "$TMP/err1")"
    is "$("$TMP/ours")" "$("$TMP/real")" "$name: ncclUniqueId, ncclConfig_t (every field's offset and size), ncclSimInfo_t, 2.29's types, enums match"
    "$TARGET_CC" -std=gnu11 -Wall -Werror -I"$inc" -I"$CUDAINC" -I"$ROOT/shim/nccl" -fsyntax-only \
        "$ROOT/tests/clients/abi_signatures.c" 2> "$TMP/err2"
    ok $? "$name: every function of nccl_api.def it has is of the same type as in its nccl.h $(head -c 400 "$TMP/err2")"
    n=$(table_names "(v) <= $code" | wc -l)
    declared=$(grep -Eo '^(ncclResult_t|const char ?\*|void) +nccl[A-Za-z0-9]+\(' "$inc/nccl.h" | grep -Eo 'nccl[A-Za-z0-9]+\(' | tr -d '(' | grep -vx ncclResetDebugInit | sort -u)
    is "$(comm -23 <(echo "$declared") <(table_names "(v) <= $code" | sort))" "" "$name: the table's groups up to $code hold every function it declares ($n)"
done
done_testing
