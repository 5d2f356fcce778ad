#!/bin/bash
# The shim declares NCCL's ABI itself (it must build without nccl.h, and serve
# every release from 2.18 on); check those declarations against every real
# header there is: the installed nccl.h (2.28.9 on the development and CI
# machines) and each release under NCCL_HEADERS_DIR (default
# ../shared/nccl-headers beside the checkout: 2.18.6, 2.28.9, 2.29.7, 2.30.7 (2.31.2, 2.32.3),
# nccl.h and, from 2.28 on, the device API's nccl_device.h and nccl_device/).
# A header that is not there is a SKIP line that names it.  For each:
#   - every function that takes a communicator (nccl.h and the device API's
#     host side) is in the table, in a version group that release has: read
#     from the text, no compiler needed, so that a release's new function is
#     caught the day its headers arrive;
#   - the layout of every type and field that release has, ncclConfig_t's from
#     the shim's field table (needs the CUDA headers every nccl.h includes);
#   - the type of every function of the table that release has (C for nccl.h,
#     C++ for the device API).
. "$(dirname "$0")/../tap.sh"
HEADERS=${NCCL_HEADERS_DIR:-$ROOT/../shared/nccl-headers}
# 2.31.2 and 2.32.3: no released header could be had yet (a SKIP each until
# one is put there; then their functions, ncclConfig_t and ncclCollConfig_t are
# checked like the others').
RELEASES="2.18.6 2.28.9 2.29.7 2.30.7 2.31.2 2.32.3"
skip() { _tap_n=$((_tap_n + 1)); echo "ok $_tap_n # SKIP $1"; }

CUDAINC=""
for d in ${CUDA_INCLUDE:-} /usr/local/cuda/include /usr/include; do
    [ -n "$d" ] && [ -f "$d/cuda_runtime.h" ] && CUDAINC=$d && break
done
CXX=${TEST_ARCH:+$TEST_ARCH-linux-gnu-g++}
CXX=${CXX:-g++}
command -v "$CXX" > /dev/null || CXX=""

# The header directories: the installed one, then each release's.
incs=()
for d in ${NCCL_INCLUDE:-} /usr/local/cuda/include /usr/include; do
    [ -n "$d" ] && [ -f "$d/nccl.h" ] && incs+=("$d") && break
done
[ ${#incs[@]} -gt 0 ] || skip "no nccl.h installed (NCCL_INCLUDE, /usr/local/cuda/include, /usr/include)"
for v in $RELEASES; do
    if [ -f "$HEADERS/$v/nccl.h" ]; then
        incs+=("$HEADERS/$v")
    else
        skip "NCCL $v: no $HEADERS/$v/nccl.h (point NCCL_HEADERS_DIR at a folder of <release>/nccl.h, nccl_device/)"
    fi
done

# ncclConfig_t's fields, each under the release that added it (the table's `added`).
cpp -P -I "$ROOT/shim/nccl" -x c - > "$TMP/fields" <<'X'
#define NCCL_CONFIG_FIELD(name, kind, added, honoured) FIELD name added
#include "nccl_config.def"
X
awk '$1 == "FIELD" { printf "#if %s <= V\n    F(%s)\n#endif\n", $3, $2 }' "$TMP/fields" > "$TMP/config_fields.inc"

# The table's functions up to a release, of the device API (NCCL_COMM_DEV, NCCL_COMM_VALUE) or all.
table_device() {
    cpp -P -I "$ROOT/shim/nccl" -x c - <<X | tr -s ' \n' '\n' | grep -v '^$'
#define NCCL_API_SINCE(v) ((v) <= $1)
#define NCCL_COMM_DEV(ret, name, params, args) name
#include "nccl_api.def"
X
}

for inc in "${incs[@]}"; do
    code=$(sed -n 's/^#define NCCL_VERSION_CODE \([0-9]*\).*/\1/p' "$inc/nccl.h" | head -1)
    name="NCCL $code ($inc)"
    # --- from the text: no compiler -------------------------------------------------
    n=$(table_names "(v) <= $code" | wc -l)
    declared=$(grep -Eo '^(ncclResult_t|const char ?\*|void) +nccl[A-Za-z0-9]+\(' "$inc/nccl.h" | grep -Eo 'nccl[A-Za-z0-9]+\(' | tr -d '(' | grep -vx ncclResetDebugInit | sort -u)
    is "$(comm -23 <(echo "$declared") <(table_names "(v) <= $code" | sort))" "" "$name: the table's groups up to $code hold every function nccl.h declares ($n)"
    takes=$(python3 "$ROOT/tests/abi/header_functions.py" "$inc" --comm)
    is "$(comm -23 <(echo "$takes") <(table_names "(v) <= $code" | sort))" "" \
        "$name: every function of nccl.h and nccl_device/ that takes an ncclComm_t is in the table ($(echo "$takes" | grep -c .))"
    if [ -f "$inc/nccl_device.h" ]; then
        dev=$(python3 "$ROOT/tests/abi/header_functions.py" "$inc" --device)
        is "$(comm -13 <(echo "$dev") <(table_device "$code" | sort))" "" \
            "$name: every device-API function of the table's groups up to $code is declared in its nccl_device/"
    elif [ "$code" -ge 22800 ]; then
        skip "$name: no nccl_device.h beside its nccl.h: the device API's functions are not checked"
    fi
    # --- compiled -----------------------------------------------------------------
    if [ -z "$CUDAINC" ]; then
        skip "$name: no CUDA headers (cuda_runtime.h, which every nccl.h includes): layout and types not compiled"
        continue
    fi
    real=(-std=gnu11 -I"$inc" -I"$CUDAINC" -I"$TMP" -DREAL_NCCL_H -x c) realcc=$TARGET_CC dev=""
    if [ -f "$inc/nccl_device.h" ] && [ -n "$CXX" ]; then
        real=(-std=c++17 -I"$inc" -I"$CUDAINC" -I"$TMP" -DREAL_NCCL_H -DREAL_NCCL_DEVICE -DDEVICE_TYPES -x c++)
        realcc=$CXX dev=-DDEVICE_TYPES
    fi
    # (the target's compiler: under make test-aarch64, the layouts are aarch64's)
    "$TARGET_CC" -std=gnu11 -I"$ROOT/shim/nccl" -I"$TMP" -DABI_AS="$code" $dev -o "$TMP/ours" "$ROOT/tests/clients/abi_layout.c" 2> "$TMP/err1" &&
        "$realcc" "${real[@]}" -o "$TMP/real" "$ROOT/tests/clients/abi_layout.c" 2>> "$TMP/err1" &&
        target_wrap "$TMP/ours" "$TMP/real"
    ok $? "$name: layout programs build $(head -c 300 "$TMP/err1")"
    is "$("$TMP/ours")" "$("$TMP/real")" "$name: ncclUniqueId, ncclConfig_t (every field of the shim's table: offset and size), ncclSimInfo_t, 2.29's types, the device API's team and properties, enums match"
    "$TARGET_CC" -std=gnu11 -Wall -Werror -I"$inc" -I"$CUDAINC" -I"$ROOT/shim/nccl" -fsyntax-only \
        "$ROOT/tests/clients/abi_signatures.c" 2> "$TMP/err2"
    ok $? "$name: every function of nccl_api.def it has is of the same type as in its nccl.h $(head -c 400 "$TMP/err2")"
    if [ -f "$inc/nccl_device.h" ] && [ -n "$CXX" ]; then
        "$CXX" -std=c++17 -Wall -Werror -I"$inc" -I"$CUDAINC" -I"$ROOT/shim/nccl" -fsyntax-only \
            "$ROOT/tests/clients/abi_device.cc" 2> "$TMP/err3"
        ok $? "$name: every device-API host function of nccl_api.def it has is of the same type as in its nccl_device/ $(head -c 400 "$TMP/err3")"
    elif [ -f "$inc/nccl_device.h" ]; then
        skip "$name: no C++ compiler ($CXX): the device API's function types not compiled"
    fi
done
done_testing
