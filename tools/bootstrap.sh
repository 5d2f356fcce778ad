#!/bin/bash
# What `make test`, `make demo` and the other targets run before compiling: check every
# dependency the target needs (all of them, not only the first missing one); as root on an
# apt machine install the missing packages, saying so in one line; otherwise stop with one
# line naming the exact apt command and its RPM (dnf) equivalent.  A wall of "uthash.h: No
# such file" from every file is what a new user saw before this existed (issue 18).
#
# usage: tools/bootstrap.sh [--stdout] TARGET...   (build, test, demo, wheel, valgrind, fuzz)
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
# build's own, so a header found here is found there.
# shellcheck disable=SC2086
check() { # check cmd NAME | check hdr HEADER
    case $1 in
    cmd) command -v "$2" > /dev/null 2>&1 ;;
    hdr) printf '#include <%s>\n' "$2" | $CC ${BOOTSTRAP_CPPFLAGS:-} -E -x c - > /dev/null 2>&1 ;;
    esac
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
        wheel)
            need_build
            want python3 "cmd python3" python3 python3
            ;;
        valgrind) want valgrind "cmd valgrind" valgrind valgrind ;;
        fuzz) want clang "cmd clang" clang clang ;;
        *) echo "bootstrap.sh: unknown target '$t'" >&2; exit 2 ;;
        esac
    done
}

collect "${@:-build}"
[ ${#missing_names[@]} -eq 0 ] && exit 0

names=${missing_names[*]}
names=${names// /, }
apt_cmd="apt-get install -y ${deb[*]}"
rpm_cmd="dnf install -y ${rpm[*]}"
epel=
case " ${rpm[*]} " in *" uthash-devel "*) epel=", uthash-devel from EPEL" ;; esac

if [ "$mode" != check ] && [ "$(id -u 2> /dev/null)" = 0 ] && command -v apt-get > /dev/null 2>&1; then
    echo "ncclshim: missing ${names}: installing with: $apt_cmd" >&2
    log=$(mktemp "${TMPDIR:-/tmp}/ncclshim-bootstrap.XXXXXX") || exit 1
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

sudo=sudo
[ "$(id -u 2> /dev/null)" = 0 ] && sudo=
echo "ncclshim: missing ${names}: run '${sudo:+sudo }$apt_cmd' (RPM-based: '${sudo:+sudo }$rpm_cmd'$epel), then this command again" >&$out
exit 1
