#!/bin/bash
# What `make test`, `make demo` and the other targets run before compiling: check every
# dependency the target needs (all of them, not only the first missing one); as root on an
# apt machine install the missing packages, saying so in one line; otherwise stop with one
# line naming the exact apt command and its RPM (dnf) equivalent.  A wall of "uthash.h: No
# such file" from every file is what a new user saw before this existed (issue 18).
#
# usage: tools/bootstrap.sh [--stdout] TARGET...
#        (build, test, demo, demo-built, wheel, valgrind, fuzz, cross-aarch64)
# demo-built: the demo of a tree already built (the Makefile's `make -q all`): no compiler
# nor header, only what tools/demo.sh runs.
# --stdout: the final line goes to stdout (the Makefile shows it with $(error)), not stderr.
# CC and BOOTSTRAP_CPPFLAGS (the Makefile's include flags) say how headers are looked for.
# NCCLSHIM_BOOTSTRAP=check: never install, only report; =off: skip the checks altogether.
set -u
CC=${CC:-cc}
mode=${NCCLSHIM_BOOTSTRAP:-auto}
out=2
[ "${1:-}" = --stdout ] && { out=1; shift; }
[ "$mode" = off ] && exit 0

# One row per dependency: name, how to check, Debian package, RPM package.
# Checks are run by `check`, below; the names say what is missing in the message.
need_build() {
    want "${CC%% *}"  "cmd ${CC%% *}"            gcc              gcc
    want make         "cmd make"                 make             make
    want libc-headers "hdr stdio.h"              libc6-dev        glibc-devel
    want uthash.h     "hdr uthash.h"             uthash-dev       uthash-devel
    want jansson.h    "hdr jansson.h"            libjansson-dev   jansson-devel
}

missing_names=() deb=() rpm=()
want() { # want NAME CHECK DEB RPM
    local i
    for i in "${missing_names[@]+"${missing_names[@]}"}"; do [ "$i" = "$1" ] && return; done
    # shellcheck disable=SC2086 # "cmd NAME": two words
    check $2 && return
    missing_names+=("$1")
    deb+=("$3")
    rpm+=("$4")
}

# hdr: the compiler the build uses, with the build's include flags: the same lookup as the
# build's own, so a header found here is found there.  lib: the library as compiler CC2
# finds it (-print-file-name answers the bare name when it finds nothing).  file: a path.
# shellcheck disable=SC2086
check() { # check cmd NAME | check hdr HEADER | check lib CC2 FILE | check file PATH
    case $1 in
    cmd) command -v "$2" > /dev/null 2>&1 ;;
    hdr) printf '#include <%s>\n' "$2" | $CC ${BOOTSTRAP_CPPFLAGS:-} -E -x c - > /dev/null 2>&1 ;;
    lib) case $("$2" -print-file-name="$3" 2> /dev/null) in /*) ;; *) false ;; esac ;;
    file) [ -e "$2" ] ;;
    esac
}

# aarch64 built here and run under qemu-user (tools/cross): Debian's cross compiler, the
# emulator, and the arm64 libraries the programs run with (libc6:arm64, through the
# packages of the foreign architecture arm64; the inspect tool links libjansson.a of
# libjansson-dev:arm64).  The programs run with the loader and libc of libc6:arm64, not
# with those of libc6-arm64-cross beside the compiler: the two are different builds, and a
# loader of one with the libc of the other hangs in the first pthread_create.
need_cross_aarch64() {
    want aarch64-linux-gnu-gcc "cmd aarch64-linux-gnu-gcc" gcc-aarch64-linux-gnu -
    want libc6-dev-arm64-cross "file /usr/aarch64-linux-gnu/include/stdio.h" libc6-dev-arm64-cross -
    want qemu-aarch64-static "cmd qemu-aarch64-static" qemu-user-static -
    want libjansson.a:arm64 "lib aarch64-linux-gnu-gcc libjansson.a" libjansson-dev:arm64 -
    want ld-linux-aarch64.so.1 "file /lib/ld-linux-aarch64.so.1" libc6:arm64 -
}

# Packages of a foreign architecture (name:arm64) need it added to dpkg first; the
# install then finds no package lists for it, and updates them.
add_foreign_archs() {
    local d a
    for d in "${deb[@]}"; do
        case $d in *:*) a=${d##*:} ;; *) continue ;; esac
        dpkg --print-foreign-architectures 2> /dev/null | grep -qx "$a" || dpkg --add-architecture "$a" || return 1
    done
}

collect() {
    local t
    for t in "$@"; do
        case $t in
        build) need_build ;;
        test)
            need_build
            want prove   "cmd prove"   perl    perl-Test-Harness
            want jq      "cmd jq"      jq      jq
            want python3 "cmd python3" python3 python3
            ;;
        demo)
            need_build
            want python3 "cmd python3" python3 python3
            ;;
        demo-built) want python3 "cmd python3" python3 python3 ;;
        wheel)
            need_build
            want python3 "cmd python3" python3 python3
            ;;
        valgrind) want valgrind "cmd valgrind" valgrind valgrind ;;
        fuzz) want clang "cmd clang" clang clang ;;
        cross-aarch64) need_cross_aarch64 ;;
        *) echo "bootstrap.sh: unknown target '$t'" >&2; exit 2 ;;
        esac
    done
}

collect "${@:-build}"
[ ${#missing_names[@]} -eq 0 ] && exit 0

names=${missing_names[*]}
names=${names// /, }
sudo=sudo
[ "$(id -u 2> /dev/null)" = 0 ] && sudo=
apt_cmd="${sudo:+sudo }apt-get install -y ${deb[*]}"
case " ${deb[*]}" in
*:arm64*) apt_cmd="${sudo:+sudo }dpkg --add-architecture arm64 && ${sudo:+sudo }apt-get update && $apt_cmd" ;;
esac
rpm_hint="RPM-based: '${sudo:+sudo }dnf install -y ${rpm[*]}'"
case " ${rpm[*]} " in *" uthash-devel "*) rpm_hint="$rpm_hint, uthash-devel from EPEL" ;; esac
# (-: the aarch64 build's arm64 libraries and loader come as Debian's multiarch packages)
case " ${rpm[*]} " in *" - "*) rpm_hint="RPM-based: not packaged there, build aarch64 on Debian or Ubuntu" ;; esac

if [ "$mode" != check ] && [ "$(id -u 2> /dev/null)" = 0 ] && command -v apt-get > /dev/null 2>&1; then
    echo "ncclshim: missing ${names}: installing with: $apt_cmd" >&2
    log=$(mktemp "${TMPDIR:-/tmp}/ncclshim-bootstrap.XXXXXX") || exit 1
    add_foreign_archs >> "$log" 2>&1
    # A fresh image has no package lists: update only when the install cannot find a package.
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${deb[@]}" > "$log" 2>&1; then
        { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${deb[@]}"; } > "$log" 2>&1
    fi
    last=$(grep -v '^\s*$' "$log" | tail -n 1)
    rm -f "$log"
    missing_names=() deb=() rpm=()
    collect "${@:-build}"
    [ ${#missing_names[@]} -eq 0 ] && exit 0
    echo "ncclshim: still missing ${missing_names[*]} after '$apt_cmd'${last:+ (apt-get: $last)}" >&$out
    exit 1
fi

echo "ncclshim: missing ${names}: run '$apt_cmd' ($rpm_hint), then this command again" >&$out
exit 1
