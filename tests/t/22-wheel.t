#!/bin/bash
# The wheel (make wheel: tools/wheel/build_wheel.py): tagged manylinux_2_N_ARCH, N the newest
# glibc symbol version the library and the tool ask for; installed offline (pip --no-index)
# in a fresh virtual environment, `python -m ncclshim --lib` names the library inside it, the
# console script runs the tool, and the CPU demo runs with the printed path in LD_PRELOAD.
# Under make test-aarch64 the wheel is aarch64's, which this machine's pip must refuse.
source "$(dirname "$0")/../tap.sh"
INSPECT=$(target_elf "$INSPECT")
{ [ -f "$SHIM_LIB" ] && [ -x "$INSPECT" ]; } || skip_all "build/libncclshim.so or the inspect tool not built (make all)"
PY=${PYTHON:-python3}
command -v "$PY" > /dev/null || skip_all "no $PY"
tap_run 60 "$PY" -m venv "$TMP/venv" > "$TMP/venv.err" 2>&1 ||
    skip_all "python3 -m venv cannot make an environment here ($(tail -1 "$TMP/venv.err"); Debian: apt-get install python3-venv)"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
version=$(sed -n 's/^#define NCCLSHIM_VERSION "\(.*\)"/\1/p' "$ROOT/shim/base/version.h")

whl=$(tap_run 60 "$PY" "$ROOT/tools/wheel/build_wheel.py" --lib "$SHIM_LIB" --inspect "$INSPECT" \
      --version "$version" --out "$TMP/dist" 2>&1)
st=$?
if [ -n "${SHIM_PRELOAD_EXTRA:-}" ]; then # make test-asan: the build needs the sanitizer runtimes
    like "$st: $whl" "^1: build_wheel.py: no manylinux tag fits: .*needs .*libasan" \
        "a sanitizer build gets no wheel: it needs libasan, which a manylinux system need not have"
    done_testing
    exit $?
fi
is "$st" 0 "build_wheel.py: exit 0"
# The tag by this test's own reading (objdump; build_wheel.py reads with readelf): the files'
# architecture, and the newest GLIBC_2.N they ask for, or the architecture's first manylinux.
case $(readelf -h "$SHIM_LIB") in *AArch64*) arch=aarch64 first=17 ;; *) arch=x86_64 first=5 ;; esac
n=$(objdump -T "$SHIM_LIB" "$INSPECT" | grep -o 'GLIBC_2\.[0-9]*' | cut -d. -f2 | sort -n | tail -1)
[ "${n:-0}" -ge "$first" ] || n=$first
like "$whl" "/ncclshim-$version-py3-none-manylinux_2_${n}_$arch(\.manylinux[0-9]+_$arch)?\.whl$" \
    "named ncclshim-VERSION-py3-none-manylinux_2_${n}_$arch.whl: GLIBC_2.$n is the newest version the files need"
is "$("$PY" -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())' \
      "$whl" "ncclshim-$version.dist-info/WHEEL" | sed -n 's/^Tag: //p' | head -1)" \
    "py3-none-manylinux_2_${n}_$arch" "and its WHEEL file says so"
# A library that needs what a manylinux system need not have gets no wheel.
echo 'int f(void) { return 0; }' > "$TMP/needs.c"
"$TARGET_CC" -shared -fPIC -o "$TMP/needs.so" "$TMP/needs.c" -Wl,--no-as-needed -ljansson
out=$(tap_run 60 "$PY" "$ROOT/tools/wheel/build_wheel.py" --lib "$TMP/needs.so" --inspect "$INSPECT" \
      --version "$version" --out "$TMP/dist2" 2>&1)
st=$?
like "$st: $out" "^1: build_wheel.py: no manylinux tag fits: .*needs.so needs libjansson.so.4" \
    "a library that needs libjansson.so.4: no wheel, and the reason"
"$PY" - "$whl" <<'PY' > "$TMP/record.out" 2>&1
import base64, hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
rec = [l.split(",") for l in z.read([n for n in z.namelist() if n.endswith("/RECORD")][0]).decode().splitlines()]
for name, h, size in rec:
    if not h:
        continue
    d = z.read(name)
    assert h == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode(), name
    assert int(size) == len(d), name
assert sorted(n for n, _, _ in rec) == sorted(z.namelist()), "RECORD lists every file"
print("ok", len(rec))
PY
like "$(cat "$TMP/record.out")" "^ok [0-9]+$" "RECORD: every file, with its hash and size"

V=$TMP/venv
tap_run 120 "$V/bin/pip" install --no-index -q "$whl" > "$TMP/pip.out" 2>&1
st=$?
if [ "$arch" != "$(uname -m)" ]; then
    like "$st: $(cat "$TMP/pip.out")" "^1: .*is not a supported wheel on this platform" \
        "pip on $(uname -m) refuses the $arch wheel"
    ok 0 "# SKIP the $arch wheel installed and run: pip on $(uname -m) installs only its own"
    done_testing
    exit $?
fi
is "$st" 0 "pip install --no-index in a fresh venv (exit $st)"
[ "$st" -eq 0 ] || sed 's/^/# /' "$TMP/pip.out"
lib=$("$V/bin/python" -m ncclshim --lib)
is "$lib" "$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')/ncclshim/lib/libncclshim.so" \
    "python -m ncclshim --lib: the library inside the environment"
cmp -s "$lib" "$SHIM_LIB"
ok $? "it is the library that was built"
is "$("$V/bin/python" -m ncclshim --version)" "$version" "--version"
tool=$("$V/bin/python" -m ncclshim --inspect)
ok $([ -x "$tool" ]; echo $?) "python -m ncclshim --inspect: an executable ($tool)"
like "$("$V/bin/ncclshim-inspect" --help 2>&1)" "^usage: ncclshim-inspect" "the ncclshim-inspect console script runs the tool"
"$V/bin/ncclshim-inspect" --check "$ROOT/tests/inspect/fixtures/rv_drop" > /dev/null 2>&1
is "$?" 1 "and passes its exit status on (--check on a problem: 1)"
# (under make test-asan the sanitizer runtimes come first: SHIM_PRELOAD_EXTRA, tests/tap.sh)
pre=${SHIM_PRELOAD_EXTRA:+$SHIM_PRELOAD_EXTRA }
like "$(LD_PRELOAD="$pre$lib" NCCLSHIM_MODE=off tap_run 20 "$V/bin/python" -c 'print(open("/proc/self/maps").read())')" \
    "$V/.*/ncclshim/lib/libncclshim.so" "a process with the printed path in LD_PRELOAD maps the wheel's library"

# The CPU demo with the installed library and tool (tools/demo.sh: DEMO_SHIM, DEMO_INSPECT).
DEMO_SHIM="$pre$lib" DEMO_INSPECT=$V/bin/ncclshim-inspect DEMO_CPU=1 DEMO_DIR=$TMP/demo \
    tap_run 150 "$ROOT/tools/demo.sh" > "$TMP/demo.out" 2>&1
st=$?
is "$st" 0 "the CPU demo with the wheel's library (exit $st)"
[ "$st" -eq 0 ] || tail -20 "$TMP/demo.out" | sed 's/^/# /'
like "$(cat "$TMP/demo.out")" "weight-update +ipc " "same host: the weight update went over ipc"
like "$(cat "$TMP/demo.out")" "weight-update +socket " "other host: socket"
is "$(grep -c 'ncclshim-inspect --check: exit status 0' "$TMP/demo.out")" 2 "no problems in either run"
done_testing
