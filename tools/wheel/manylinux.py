#!/usr/bin/env python3
"""manylinux.py FILE...: the manylinux platform tag (PEP 600) that the ELF files allow, by
auditwheel's rules (auditwheel is not packaged in Debian 12), read with binutils' readelf:

  - every file is of one architecture, which names the tag (x86_64, aarch64);
  - every library a file needs (DT_NEEDED) is one that every manylinux system has:
    auditwheel's policy list (glibc's own libraries and a few others);
  - every symbol version a file needs is glibc's (GLIBC_2.N), and the newest, 2.N, is the
    glibc the files need at least: the tag is manylinux_2_N_ARCH (never older than the
    architecture's first manylinux: 2.5 for x86_64, 2.17 for aarch64).  A version of any other
    library (libstdc++'s GLIBCXX_, libgcc's GCC_) would need auditwheel's limits for them: such
    a file is refused, as is GLIBC_PRIVATE.

Prints the tag, then for each file what fixes it; exits 1, saying why, when no tag fits.
tools/wheel/build_wheel.py tags the wheel with it (make wheel, make wheel-aarch64)."""
import re
import subprocess
import sys

# readelf's name of each machine, and the architecture's name in a platform tag.
ARCH = {"Advanced Micro Devices X86-64": "x86_64", "AArch64": "aarch64"}
# The oldest manylinux of each architecture (manylinux1 for x86_64, manylinux2014 for aarch64).
FIRST_GLIBC = {"x86_64": (2, 5), "aarch64": (2, 17)}
# The legacy names of three manylinux tags (PEP 600): a wheel carries both.
LEGACY = {(2, 5): "manylinux1", (2, 12): "manylinux2010", (2, 17): "manylinux2014"}
# auditwheel's policy: the libraries a manylinux wheel may need from the system.
SYSTEM_LIBS = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libresolv.so.2", "libutil.so.1",
    "libnsl.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libX11.so.6", "libXext.so.6", "libXrender.so.1",
    "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0",
    "libglib-2.0.so.0", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}


class NoTag(Exception):
    pass


def readelf(args, path):
    r = subprocess.run(["readelf", "-W"] + args + [path], capture_output=True, text=True)
    if r.returncode != 0:
        raise NoTag("%s: not an ELF file readelf can read (%s)" % (path, r.stderr.strip()))
    return r.stdout


def elf_facts(path):
    """(architecture, needed libraries, {version: [symbols]}) of one ELF file."""
    m = re.search(r"^\s*Machine:\s*(.*?)\s*$", readelf(["-h"], path), re.M)
    arch = ARCH.get(m.group(1)) if m else None
    if not arch:
        raise NoTag("%s: machine %r has no manylinux tag here" % (path, m.group(1) if m else "?"))
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", readelf(["-d"], path))
    versions = {}
    for v in re.findall(r"Name: (\S+)\s+Flags", readelf(["-V"], path)):
        versions.setdefault(v, [])
    for sym, v in re.findall(r"\sUND (\S+?)@(\S+)", readelf(["--dyn-syms"], path)):
        versions.setdefault(v, []).append(sym)
    return arch, needed, versions


def glibc_version(v):
    m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", v)
    return (int(m.group(1)), int(m.group(2))) if m else None


def platform_tag(paths):
    """The tag the files allow, and for each file a line saying what sets it; NoTag if none fits."""
    arches, newest, notes = set(), (0, 0), []
    for path in paths:
        arch, needed, versions = elf_facts(path)
        arches.add(arch)
        foreign = [n for n in needed if n not in SYSTEM_LIBS]
        if foreign:
            raise NoTag("%s needs %s, which a manylinux system need not have" % (path, ", ".join(foreign)))
        odd = [v for v in versions if glibc_version(v) is None]
        if odd:
            raise NoTag("%s needs symbol versions %s, which only glibc's (GLIBC_2.N) may be" % (path, ", ".join(odd)))
        top = max((glibc_version(v) for v in versions), default=(0, 0))
        syms = sorted({s for v, ss in versions.items() if glibc_version(v) == top for s in ss})
        notes.append("%s: %s, needs %s; newest glibc symbol version 2.%d%s" % (
            path, arch, " ".join(needed) or "nothing", top[1], " (" + " ".join(syms) + ")" if syms else ""))
        newest = max(newest, top)
    if len(arches) != 1:
        raise NoTag("the files are of several architectures: %s" % ", ".join(sorted(arches)))
    arch = arches.pop()
    major, minor = max(newest, FIRST_GLIBC[arch])
    tag = "manylinux_%d_%d_%s" % (major, minor, arch)
    if (major, minor) in LEGACY:
        tag += ".%s_%s" % (LEGACY[(major, minor)], arch)
    return tag, notes


def main(argv):
    if not argv:
        sys.exit("usage: manylinux.py ELF-FILE...")
    try:
        tag, notes = platform_tag(argv)
    except NoTag as e:
        sys.exit("manylinux.py: no manylinux tag: %s" % e)
    print(tag)
    for n in notes:
        print("  " + n)


if __name__ == "__main__":
    main(sys.argv[1:])
