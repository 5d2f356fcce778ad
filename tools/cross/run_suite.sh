#!/bin/bash
# usage: tools/cross/run_suite.sh CROSS_DIR ARCH HOST_LIB TEST...
# The CPU suite on ARCH's build, which tools/cross/build_tree.sh made in CROSS_DIR/lib/
# ARCH-linux-gnu: its programs wrapped for qemu-user (wrap_exec.sh), then prove from that
# tree, as `make test` does from this one, with SHIM_TEST_ARCH set for the tests that
# skip there or compile a program (tests/tap.sh).
#
# LD_PRELOAD.  The tests start the programs under test through host programs (timeout, env,
# bash) that get the same LD_PRELOAD, and the host's loader prints an error for an aarch64
# library there.  So LD_PRELOAD names the library by the loader's $LIB:
#     CROSS_DIR/$LIB/build/libncclshim.so
# which Debian's aarch64 loader expands to CROSS_DIR/lib/aarch64-linux-gnu/build/
# libncclshim.so (the tree's own, at the path the tests expect), and the host's to
# CROSS_DIR/lib/x86_64-linux-gnu/build/libncclshim.so: a link to HOST_LIB, which those host
# programs carry in `make test` too.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 3 ] || { echo "usage: $0 CROSS_DIR ARCH HOST_LIB TEST..." >&2; exit 2; }
cross=$(cd "$1" && pwd)
arch=$2
host_lib=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
shift 3
root=$cross/lib/$arch-linux-gnu
host=$(${CC:-cc} -print-multiarch)
mkdir -p "$cross/lib/$host/build"
ln -sfn "$host_lib" "$cross/lib/$host/build/libncclshim.so"
preload="$cross/\$LIB/build/libncclshim.so"

cd "$root"
find tests tools build -type f -perm -u+x ! -name '*.sh' ! -name '*.py' ! -name '*.t' -print0 |
    xargs -0 tools/cross/wrap_exec.sh

# Both loaders must find their library there, or every test fails for that one reason.
err=$(LD_PRELOAD=$preload /bin/true 2>&1) || true
[ -z "$err" ] || { echo "run_suite.sh: the host's loader does not expand \$LIB to lib/$host: $err" >&2; exit 1; }
err=$(LD_PRELOAD=$preload tests/bin/test_loader 2>&1 > /dev/null) || true
[ -z "$err" ] || { echo "run_suite.sh: the $arch loader under qemu-$arch-static: $err" >&2; exit 1; }

# (the NCCL headers beside the checkout, where the tests look for them from the host's tree)
export NCCL_HEADERS_DIR=${NCCL_HEADERS_DIR:-$top/../shared/nccl-headers}
# (SHIM_TEST_SLOW, from cross.mk, stretches the tests' bounds: qemu-user is slower; tests/tap.sh)
SHIM_TEST_ARCH=$arch SHIM_PRELOAD=$preload exec prove -j"${TEST_JOBS:-$(nproc)}" --timer "$@"
