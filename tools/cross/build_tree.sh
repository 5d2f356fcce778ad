#!/bin/bash
# usage: tools/cross/build_tree.sh DIR EXCLUDE... -- MAKE-ARGUMENT...
# A build for another architecture: the sources of this checkout copied afresh into DIR
# and built there by make with the arguments given (CC=aarch64-linux-gnu-gcc and goals).
# Everything the tests use sits at the same paths as in the host's tree (tests/bin,
# tests/fake/a, build/), so the test scripts run unchanged from DIR.  The host's own build
# outputs (EXCLUDE: paths relative to the top, the Makefile's list) stay out, or make would
# take them for the target's; a fresh copy each time, so that a source deleted here is gone
# there too (a cross build of the whole tree takes a few seconds).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
dir=$1
shift
excl=(--exclude=./.git --exclude='*.o' --exclude=__pycache__)
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    excl+=("--anchored" "--exclude=./${1#./}" "--no-anchored")
    shift
done
[ "${1:-}" = -- ] && shift
rm -rf "$dir"
mkdir -p "$dir"
tar -C "$top" "${excl[@]}" -cf - . | tar -C "$dir" -xf -
# The top-level make has checked (and installed) what the build needs: the copy's must not
# run apt a second time, from inside a recipe.  Nor may it take the top-level make's
# settings (MAKEFLAGS: its CC, its jobserver).
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$dir" --no-print-directory -j"$(nproc)" NCCLSHIM_BOOTSTRAP=off "$@"
