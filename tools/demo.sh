#!/bin/bash
# `make demo`: run NCCL clients under the shim and show what ncclshim-inspect
# makes of their records.  With 2 GPUs: real NCCL (torch's), a torch.distributed
# training communicator and a vLLM-style ctypes communicator in the same two
# processes, with NCCL's own logs joined in.  Without: the same shapes on the
# fake NCCL of the test suite (the data path needs a GPU).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHIM=$ROOT/build/libncclshim.so
INSPECT=$ROOT/tools/ncclshim-inspect
OUT=${DEMO_DIR:-$(mktemp -d /tmp/ncclshim-demo.XXXXXX)}
mkdir -p "$OUT/records"
export NCCL_NVLS_ENABLE=0

gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${gpus:-0}" -ge 2 ] && nvidia-smi -L > /dev/null 2>&1; then
    echo "== $gpus GPUs: real NCCL. torch all-reduce + ctypes broadcast in 2 processes, under the shim"
    NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$OUT/records/nccl.%h.%p.log" NCCLSHIM_LOG_DIR="$OUT/records" \
        timeout -k 5 300 python3 "$ROOT/tests/gpu/combined.py" --outdir "$OUT/run" --preload "$SHIM" \
        > "$OUT/combined.out" 2>&1 || { echo "demo run failed:"; tail -30 "$OUT/combined.out"; exit 1; }
else
    echo "== no 2 GPUs here: the fake NCCL of the test suite (records and decisions only; the data path needs a GPU)"
    FAKE=$ROOT/tests/fake/a/libnccl.so.2
    PYBIN=$(python3 -c 'import sys; print(sys.executable)')
    # A "trainer" (Ray-named policy worker) making a torch-like linked communicator and a
    # ctypes weight-update one, and a "vLLM" actor making its side of the latter.
    NCCLSHIM_LOG_DIR="$OUT/records" LD_PRELOAD="$SHIM" \
        bash -c 'exec -a "ray::DTensorPolicyWorker" "$0" "$@"' "$ROOT/tests/bin/client_linked" linked basic > /dev/null
    # The weight-update group: trainer rank 0 makes the ID, the vLLM actor on "node-b" is rank 1.
    NCCLSHIM_LOG_DIR="$OUT/records" LD_PRELOAD="$SHIM" \
        bash -c 'exec -a "ray::DTensorPolicyWorker" "$0" "$@"' "$PYBIN" "$ROOT/tests/clients/pynccl_like.py" "$FAKE" \
        --rank=0 --nranks=2 --uid-out="$OUT/uid" > /dev/null
    NCCLSHIM_LOG_DIR="$OUT/records" NCCLSHIM_HOSTNAME=node-b LD_PRELOAD="$SHIM" \
        bash -c 'exec -a "ray::VllmGenerationWorker" "$0" "$@"' "$PYBIN" "$ROOT/tests/clients/pynccl_like.py" "$FAKE" \
        --rank=1 --nranks=2 --uid-in="$OUT/uid" > /dev/null
fi
echo "== records in $OUT/records"
ls "$OUT/records"
echo
echo "== ncclshim-inspect $OUT/records"
"$INSPECT" "$OUT/records"
echo
echo "== ncclshim-inspect --check"
"$INSPECT" --check "$OUT/records" > /dev/null
echo "exit status $?"
