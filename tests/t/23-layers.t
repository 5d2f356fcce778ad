#!/usr/bin/env bash
# The layering of shim/ (docs/design.md, "Layers"), on the code as built: each
# folder includes and calls only itself and the folders below it, and no files
# call each other in a loop.  Calls are read from each file's object (nm).
source "$(dirname "$0")/../tap.sh"
skip_emulated "host-only: the layering is the source's, and make test checks it on the host's objects"
command -v python3 > /dev/null || skip_all "python3 not found"
command -v nm > /dev/null || skip_all "nm not found (binutils)"
CC=${CC:-cc}
UTHASH=()
[ -f /usr/include/uthash.h ] || UTHASH=(-I"$ROOT/.deps/include")
DIRS=(interpose comm action registry evidence ipc rendezvous nccl base)
INC=(-I"$ROOT")
for d in "${DIRS[@]}"; do INC+=(-I"$ROOT/shim/$d"); done
for d in "${DIRS[@]}"; do
    mkdir -p "$TMP/obj/$d"
    for f in "$ROOT"/shim/"$d"/*.c; do
        if ! "$CC" -std=gnu11 -fPIC -O0 -c "${INC[@]}" "${UTHASH[@]}" -o "$TMP/obj/$d/$(basename "$f" .c).o" "$f" 2> "$TMP/cc.err"; then
            echo "1..1"; echo "not ok 1 - $f compiles"; sed 's/^/# /' "$TMP/cc.err"; exit 1
        fi
    done
done
tap_run 60 python3 "$ROOT/tests/layers/check_layers.py" "$ROOT" "$TMP/obj"
