"""python -m ncclshim --lib | --inspect | --version, and the ncclshim-inspect console script."""
import argparse
import os
import sys

from . import inspect_path, lib_path

try:
    from ._version import VERSION
except ImportError:  # a source tree, not an installed wheel
    VERSION = "unknown"


def _existing(path):
    # A broken installation should say so here, not as a silent LD_PRELOAD failure later
    # (the loader only prints a warning and the job runs without the shim).
    if not os.path.isfile(path):
        sys.exit("ncclshim: %s is missing: reinstall the wheel" % path)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ncclshim",
                                 description="Paths of the ncclshim library and tool in this installation.")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--lib", action="store_true", help="print the path of libncclshim.so (for LD_PRELOAD)")
    g.add_argument("--inspect", action="store_true", help="print the path of ncclshim-inspect")
    g.add_argument("--version", action="store_true", help="print the version")
    a = ap.parse_args(argv)
    if a.version:
        print(VERSION)
    else:
        print(_existing(lib_path() if a.lib else inspect_path()))
    return 0


def inspect_main():
    """The `ncclshim-inspect` console script: the tool itself, with its arguments and exit status."""
    tool = _existing(inspect_path())
    os.execv(tool, [tool] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
