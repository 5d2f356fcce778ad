#!/bin/bash
# tools/bootstrap.sh, what the Makefile runs before compiling: on a machine without a
# package the goal stops with exactly one line naming the apt command and the dnf one; as
# root with apt it installs what is missing (one line) and goes on.  "Without a package" is
# a compiler sysroot whose /usr/include lacks uthash.h and a PATH without jq: nothing on
# this machine is uninstalled.
source "$(dirname "$0")/../tap.sh"
skip_emulated "host-only: it checks tools/bootstrap.sh, and no aarch64 program runs in it (make test runs it)"
cd "$ROOT" || exit 1
CCBIN=$(command -v cc || command -v gcc) || skip_all "no C compiler"

sys=$TMP/root
mkdir -p "$sys/usr/include" "$TMP/bin"
for f in /usr/include/*; do
    [ "${f##*/}" = uthash.h ] || ln -s "$f" "$sys/usr/include/"
done
for c in make prove python3 id mktemp grep tail rm ln chmod; do
    p=$(command -v "$c") && ln -s "$p" "$TMP/bin/$c"
done
ln -s "$CCBIN" "$TMP/bin/cc"
BARE_CC="cc --sysroot=$sys"

# 1. The make goal itself, uthash absent: one line, before any compilation.  As a top-level
# make, as a user runs it: under `make test` the environment says MAKELEVEL=1.
out=$(NCCLSHIM_BOOTSTRAP=check tap_run 60 env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make --no-print-directory CC="$BARE_CC" BUILD="$TMP/build" demo 2>&1)
st=$?
ok $((st == 0 ? 1 : 0)) "make demo stops when uthash.h is missing (exit $st)"
is "$(printf '%s\n' "$out" | wc -l)" 1 "make demo says so in one line"
like "$out" "missing uthash.h: run 'apt-get install -y uthash-dev' \(RPM-based: 'dnf install -y uthash-devel'" \
    "the line names the apt command and the dnf one"
unlike "$out" "jansson|libc6" "only what is missing is named"
ok $([ ! -e "$TMP/build" ]; echo $?) "nothing was compiled"

# 1b. The tree already built (a build carried to a GPU host that cannot install packages):
# `make demo` and `make install` compile nothing, so a missing header does not stop them.
if make -q all > /dev/null 2>&1; then
    out=$(NCCLSHIM_BOOTSTRAP=check DEMO_CPU=1 DEMO_DIR="$TMP/demo" tap_run 120 env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS \
          make --no-print-directory CC="$BARE_CC" demo 2>&1)
    unlike "$out" "missing|uthash" "built tree: make demo does not ask for uthash.h"
    like "$out" "== no GPU here" "built tree: make demo runs the demo"
    out=$(NCCLSHIM_BOOTSTRAP=check tap_run 60 env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS \
          make --no-print-directory CC="$BARE_CC" DESTDIR="$TMP/inst" install 2>&1)
    is "$?" 0 "built tree: make install goes on without uthash.h"
    ok $([ -x "$TMP/inst/usr/local/lib/libncclshim.so" ]; echo $?) "and installs the library"
else
    for _ in 1 2 3 4; do ok 0 "# SKIP the tree is not built (make all first)"; done
fi

# 2. Every missing dependency, not just the first (PATH without jq, nor apt-get; the
# coreutils the script uses are there).
out=$(tap_run 30 env PATH="$TMP/bin" CC="$BARE_CC" /bin/bash tools/bootstrap.sh test 2>&1)
st=$?
is "$st" 1 "bootstrap test: exit 1 with two dependencies missing"
is "$(printf '%s\n' "$out" | wc -l)" 1 "one line"
like "$out" "missing uthash.h, jq: run '(sudo )?apt-get install -y uthash-dev jq' \(RPM-based: '(sudo )?dnf install -y uthash-devel jq', uthash-devel from EPEL\)" \
    "both named, with both package managers' commands"

# 3. As root with apt: install them, say so in one line, go on.  apt-get and id are stubs
# that log their arguments and put the header and jq where the checks look.  The stub
# replaces the link to the real id (writing through the link would overwrite the system's).
rm -f "$TMP/bin/id"
cat > "$TMP/bin/id" <<'SH'
#!/bin/sh
echo 0
SH
cat > "$TMP/bin/apt-get" <<SH
#!/bin/sh
echo "\$*" >> "$TMP/apt.log"
case "\$*" in *install*) ln -sf /usr/include/uthash.h "$sys/usr/include/uthash.h"
                         printf '#!/bin/sh\n' > "$TMP/bin/jq"; chmod +x "$TMP/bin/jq" ;; esac
SH
chmod +x "$TMP/bin/id" "$TMP/bin/apt-get"
out=$(tap_run 30 env PATH="$TMP/bin" CC="$BARE_CC" /bin/bash tools/bootstrap.sh test 2>&1)
st=$?
is "$st" 0 "as root with apt: the missing packages are installed and the goal goes on"
is "$out" "ncclshim: missing uthash.h, jq: installing with: apt-get install -y uthash-dev jq" "in one line"
is "$(cat "$TMP/apt.log")" "install -y -qq uthash-dev jq" "apt-get install ran once, with both packages"

# 4. Nothing missing: silent.
out=$(tap_run 30 env PATH="$TMP/bin" CC="$BARE_CC" /bin/bash tools/bootstrap.sh test 2>&1)
is "$?:$out" "0:" "nothing missing: no output, exit 0"
out=$(tap_run 30 tools/bootstrap.sh nonsense 2>&1)
is "$?" 2 "an unknown target is a usage error"
done_testing
