"""ncclshim: the preloaded NCCL shim and its inspect tool, as a wheel.

Put the library in LD_PRELOAD of every process that may create an NCCL communicator:

    export LD_PRELOAD=$(python -m ncclshim --lib)

and read the records with `ncclshim-inspect` (on PATH once the wheel is installed).
See the project's README.md."""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def lib_path():
    """The absolute path of libncclshim.so inside this installation."""
    return os.path.join(_HERE, "lib", "libncclshim.so")


def inspect_path():
    """The absolute path of the ncclshim-inspect executable inside this installation."""
    return os.path.join(_HERE, "bin", "ncclshim-inspect")
