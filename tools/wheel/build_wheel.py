#!/usr/bin/env python3
"""build_wheel.py --lib SO --inspect EXE --version V --out DIR: writes DIR/ncclshim-V-py3-none-TAG.whl
holding the package beside this script (ncclshim/), the library and the tool.  `make wheel` runs it
(`make wheel-aarch64` with the aarch64 build).  TAG is the manylinux tag the two files allow
(manylinux.py: the architecture is theirs, not this machine's, and the glibc is the oldest their
symbol versions let them run on); none fitting is an error, not a linux_ARCH wheel that no
package index takes.

A wheel is a zip with a fixed layout (PEP 427); writing it with zipfile needs nothing beyond
Python itself, where setuptools or build would need packages (and a network) on the build
machine.  The library is loaded by absolute path through LD_PRELOAD and the tool links jansson
statically, so nothing in the wheel depends on the Python version: one wheel per architecture."""
import argparse
import base64
import hashlib
import os
import stat
import sys
import zipfile

from manylinux import NoTag, platform_tag

HERE = os.path.dirname(os.path.abspath(__file__))


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--inspect", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for src in (a.lib, a.inspect):
        if not os.path.isfile(src):
            sys.exit("build_wheel.py: %s: no such file (run make first)" % src)
    try:
        platform, _ = platform_tag([a.lib, a.inspect])
    except NoTag as e:
        sys.exit("build_wheel.py: no manylinux tag fits: %s" % e)
    tag = "py3-none-" + platform
    # A compressed tag set (manylinux_2_17_x86_64.manylinux2014_x86_64): one Tag line each.
    tag_lines = "".join("Tag: py3-none-%s\n" % p for p in platform.split("."))
    dist = "ncclshim-%s.dist-info" % a.version
    files = []  # (name in the wheel, bytes, executable)
    for name in sorted(os.listdir(os.path.join(HERE, "ncclshim"))):
        if name.endswith(".py"):
            with open(os.path.join(HERE, "ncclshim", name), "rb") as f:
                files.append(("ncclshim/" + name, f.read(), False))
    files.append(("ncclshim/_version.py", ('VERSION = "%s"\n' % a.version).encode(), False))
    for src, dst in ((a.lib, "ncclshim/lib/libncclshim.so"), (a.inspect, "ncclshim/bin/ncclshim-inspect")):
        try:
            with open(src, "rb") as f:
                files.append((dst, f.read(), True))
        except OSError as e:
            sys.exit("build_wheel.py: %s: %s (run make first)" % (src, e.strerror))
    meta = ("Metadata-Version: 2.1\nName: ncclshim\nVersion: %s\n"
            "Summary: A preloaded library that takes control of NCCL communicators, and its inspect tool\n"
            "License: see the project's repository\nRequires-Python: >=3.8\n" % a.version)
    files.append((dist + "/METADATA", meta.encode(), False))
    files.append((dist + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: ncclshim build_wheel.py\n"
                                    "Root-Is-Purelib: false\n" + tag_lines).encode(), False))
    files.append((dist + "/entry_points.txt",
                  b"[console_scripts]\nncclshim-inspect = ncclshim.__main__:inspect_main\n", False))
    record = "".join("%s,%s,%d\n" % (n, digest(d), len(d)) for n, d, _ in files) + dist + "/RECORD,,\n"
    files.append((dist + "/RECORD", record.encode(), False))

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "ncclshim-%s-%s.whl" % (a.version, tag))
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, exe in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # reproducible
            info.compress_type = zipfile.ZIP_DEFLATED
            # pip keeps the executable bit from the zip entry's Unix mode
            info.external_attr = ((0o755 if exe else 0o644) | stat.S_IFREG) << 16
            z.writestr(info, data)
    os.replace(tmp, path)
    print(path)


main()
