# The GPU test scripts' shared start (sourced by tests/gpu/run.sh and tests/gpu/lost.sh):
# paths, the TAP helpers, a skip (1..0) without a GPU, the GPU count ($ngpu), the work
# folder ($WORK: NCCLSHIM_GPU_KEEP, or a temporary one removed at exit), and the path of torch's
# libnccl ($nccl; each script exports it as NCCL_LIB for its workers).
# shellcheck shell=bash
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/gpu
SHIM=${SHIM:-$ROOT/build/libncclshim.so}
PY=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 # required on the GPU machine
export PYTHONDONTWRITEBYTECODE=1

. "$HERE/tap.sh"

if ! timeout -k 5 60 nvidia-smi -L >/dev/null 2>&1; then
    echo "1..0 # SKIP no GPU (nvidia-smi -L failed)"
    exit 0
fi
ngpu=$(timeout -k 5 120 "$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null | tail -n 1)
case $ngpu in '' | *[!0-9]*) ngpu=0 ;; esac
if [ "$ngpu" -lt 1 ]; then
    echo "1..0 # SKIP no GPU (torch sees $ngpu)"
    exit 0
fi
if [ ! -f "$SHIM" ]; then
    echo "Bail out! no shim at $SHIM (make build/libncclshim.so)"
    exit 1
fi

if [ -n "${NCCLSHIM_GPU_KEEP:-}" ]; then
    WORK=$NCCLSHIM_GPU_KEEP
    mkdir -p "$WORK"
else
    WORK=$(mktemp -d /tmp/ncclshim-gpu.XXXXXX)
    trap 'rm -rf "$WORK"' EXIT
fi
echo "# shim: $SHIM"
echo "# work: $WORK"
timeout -k 5 60 nvidia-smi -L 2>&1 | diag
nccl=$(timeout -k 5 120 "$PY" -c 'import sys; sys.path.insert(0, "'"$HERE"'"); import common; print(common.nccl_so_path())' 2>&1 | tail -n 1)
echo "# nccl: $nccl"
