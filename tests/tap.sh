# A small TAP library for the bash tests: source it, call the checks, call done_testing.
# Every test runs under a time bound (tap_run), so nothing can hang CI; the bounds are a quiet
# machine's, stretched to this one (tap_scale), so the verdict does not depend on the load.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SHIM_LIB=${SHIM_LIB:-$ROOT/build/libncclshim.so}
# Under `make test-asan` the sanitizer runtime must be preloaded before the shim.  Under
# `make test-aarch64` SHIM_PRELOAD names the library by the loader's $LIB, which each
# architecture's loader expands to its own (tools/cross/README.md).
SHIM="${SHIM_PRELOAD_EXTRA:+$SHIM_PRELOAD_EXTRA }${SHIM_PRELOAD:-$SHIM_LIB}"
# Under `make test-aarch64` (SHIM_TEST_ARCH=aarch64) the programs are aarch64's, each
# run by qemu-user through a script in its place (tools/cross/wrap_exec.sh); a test that
# compiles a program uses TARGET_CC and target_wrap, so that it runs there too, and
# target_elf names the program behind a script.
TEST_ARCH=${SHIM_TEST_ARCH:-}
EMULATOR=${TEST_ARCH:+qemu-$TEST_ARCH-static}
TARGET_CC=${TEST_ARCH:+$TEST_ARCH-linux-gnu-gcc}
TARGET_CC=${TARGET_CC:-cc}
target_wrap() { [ -z "$TEST_ARCH" ] || "$ROOT/tools/cross/wrap_exec.sh" "$@"; }
target_elf() { if [ -n "$TEST_ARCH" ] && [ -f "$1.$TEST_ARCH" ]; then echo "$1.$TEST_ARCH"; else echo "$1"; fi; }
FAKE=$ROOT/tests/fake
# (under make test-aarch64, SHIM_PRELOAD names the library by the loader's $LIB: no one path)
. "$ROOT/tests/built.sh"
[ -n "${SHIM_PRELOAD:-}" ] || need_built "$SHIM_LIB"
BIN=$ROOT/tests/bin
INSPECT=${INSPECT:-$ROOT/tools/ncclshim-inspect}
_tap_n=0
_tap_fail=0
TMP=$(mktemp -d /tmp/ncclshim-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

ok() { # ok <status> <description>
    _tap_n=$((_tap_n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $_tap_n - $2"; else echo "not ok $_tap_n - $2"; _tap_fail=$((_tap_fail + 1)); fi
}
is() { # is <got> <expected> <description>
    if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; echo "#   got:      '$1'"; echo "#   expected: '$2'"; fi
}
like() { # like <text> <extended regex> <description>
    if printf '%s' "$1" | grep -Eq -- "$2"; then ok 0 "$3"; else ok 1 "$3"; echo "#   '$(printf '%s' "$1" | head -c 600)'"; echo "#   does not match /$2/"; fi
}
unlike() {
    if printf '%s' "$1" | grep -Eq -- "$2"; then ok 1 "$3"; echo "#   matched /$2/"; else ok 0 "$3"; fi
}
skip_all() { echo "1..0 # SKIP $1"; exit 0; }
# skip_emulated <why>: the whole test, where the programs run under an emulator.
skip_emulated() { [ -z "$EMULATOR" ] || skip_all "under $EMULATOR: $1"; }
done_testing() { echo "1..$_tap_n"; [ "$_tap_fail" -eq 0 ]; }
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }

# second_user <name>: a fresh unprivileged user of this run (root only), deleted at exit with
# $TMP; sets VU and VG (its uid and gid), or returns 1.  Its own per run: another checkout's
# tests on the same machine must not share its /tmp/ncclshim-<uid>.  getent, not id: some
# sandboxes' id answers 0 for any name.  useradd is retried: another test's may hold
# /etc/passwd's lock at that moment.
second_user() {
    local u=$1
    trap 'rm -rf "$TMP"; userdel "'"$u"'" > /dev/null 2>&1' EXIT
    for _ in 1 2 3 4 5; do
        getent passwd "$u" > /dev/null || useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$u" > /dev/null 2>&1 && break
        sleep 1
    done
    VU=$(getent passwd "$u" | cut -d: -f3); VG=$(getent passwd "$u" | cut -d: -f4)
    case "$VU" in ''|0) return 1 ;; esac
}

# tap_scale <seconds>: a quiet machine's bound for this machine now, in whole seconds: times
# SHIM_TEST_SLOW (the build's own factor: make test-asan, test-aarch64, test-valgrind set it)
# and the load (runnable tasks per core, the 1-minute average; 1 at most counts as none), as
# tests/tap.py's scaled().  CONTRIBUTING.md, "Bounds".
tap_scale() {
    awk -v s="$1" -v b="${SHIM_TEST_SLOW:-1}" -v n="$(nproc)" \
        '{ l = $1 / n; if (l < 1) l = 1; t = s * b * l; printf "%d\n", t == int(t) ? t : int(t) + 1 }' /proc/loadavg
}
case ${SHIM_TEST_SLOW:-1} in
    ''|*[!0-9.]*|*.*.*|.*|*.) _tap_slow_ok=1 ;;
    *) _tap_slow_ok=$(awk -v b="${SHIM_TEST_SLOW:-1}" 'BEGIN { print (b >= 1 && b <= 1000) ? 0 : 1 }') ;;
esac
if [ "$_tap_slow_ok" != 0 ]; then
    echo "Bail out! SHIM_TEST_SLOW='${SHIM_TEST_SLOW}': want a number from 1 to 1000" \
         "(how many times slower than a plain build this run is)"
    exit 255
fi

# tap_run <seconds> <command...>: runs with a bound (a quiet machine's seconds, scaled);
# exit status 124 means it hung.
tap_run() { local t; t=$(tap_scale "$1"); shift; timeout -k 5 "$t" "$@"; }

# Import CHECK lines that a client printed ("CHECK ok desc" / "CHECK fail desc") as TAP.
import_checks() { # import_checks <file>
    local line
    while IFS= read -r line; do
        case $line in
            "CHECK ok "*) ok 0 "${line#CHECK ok }" ;;
            "CHECK fail "*) ok 1 "${line#CHECK fail }" ;;
        esac
    done < "$1"
}

# The one record file a run left in a log dir.
record_file() { ls "$1"/ncclshim.*.jsonl 2>/dev/null | head -1; }
# jq over the records of a dir: jqr <dir> <filter>
jqr() { cat "$1"/ncclshim.*.jsonl 2>/dev/null | jq -c "$2"; }

# The nccl* names of nccl_api.def whose release group satisfies <cond on v>,
# in table order: table_names '(v) > 22809' lists the functions newer than 2.28.9.
table_names() {
    cpp -P -I "$ROOT/shim/nccl" -x c - <<X | tr -s ' \n' '\n' | grep -v '^$'
#define NCCL_API_SINCE(v) ($1)
#define NCCL_PLAIN(ret, name, params, args) name
#define NCCL_COMM(ret, name, params, args) name
#define NCCL_DATA(name, op, params, args, count, dtype) name
#define NCCL_LIFE(ret, name, params, args) name
#define NCCL_VOID(name, params, args) name
#include "nccl_api.def"
X
}
