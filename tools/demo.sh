#!/bin/bash
# `make demo`: the queue-pair starvation that ncclshim exists for, and what the
# shim does about it.
#   With 3 GPUs or more: tools/scenario/scenario.py, on real NCCL (torch's) with the
#   EFASim net plugin (build/libnccl-net-efasim.so) as the fabric: a trainer of 2 ranks
#   and an inference engine (1 rank; with 4 GPUs or more, 2), without the shim, with it
#   (NCCLSHIM_WEIGHT_UPDATE=auto: ipc) and with the inference processes presented as
#   another host (NCCLSHIM_HOSTNAME=node-b, test-only) on three fabrics, each shown to
#   the shim as a fake sysfs tree (NCCLSHIM_SYSFS_ROOT, test-only) with its budget
#   (NCCLSHIM_FABRIC_BUDGET): ample (auto: passthrough), one channel fits beside
#   training (auto: frugal), scarce (auto: socket), side by side.
#   With 1 or 2: the colocated story (bench/colocated.py): a trainer and an inference
#   process on one GPU, which NCCL refuses; the shim's ipc transport carries their
#   refit (4.3 GB in 45 packed broadcasts, 2 streams in turn), bit-exact, timed against
#   a plain copy on that GPU and the usual torch CUDA-IPC alternative, and again with
#   PyTorch's expandable segments (vmm: shared as file descriptors); its records
#   shown by ncclshim-inspect.
#   Without a GPU: the shim's decisions on the fake NCCL of the test suite, and a small refit
#   through the ipc transport on the fake libcuda's host memory (NCCL's own data path needs a GPU).
# DEMO_DIR=<dir> keeps the output there; DEMO_ARGS="..." passes options to the scenario
# (e.g. "--refit-gib 2 --refits 2", "--qp-budget 24"); DEMO_CPU=1 forces the CPU path.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# DEMO_SHIM / DEMO_INSPECT: another build of the library and the tool (an installed wheel's:
# tests/t/22-wheel.t runs the demo with `python -m ncclshim --lib`).
SHIM=${DEMO_SHIM:-$ROOT/build/libncclshim.so}
INSPECT=${DEMO_INSPECT:-$ROOT/tools/ncclshim-inspect}
OUT=${DEMO_DIR:-$(mktemp -d /tmp/ncclshim-demo.XXXXXX)}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0

gpus=0
if [ -z "${DEMO_CPU:-}" ] && timeout -k 5 60 nvidia-smi -L > /dev/null 2>&1; then
    gpus=$(timeout -k 5 120 "$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null | tail -n 1)
    case $gpus in '' | *[!0-9]*) gpus=0 ;; esac
fi

if [ "$gpus" -ge 3 ]; then
    # 4 GPUs or more: the inference engine has 2 ranks (tensor parallelism 2, GPUs 2 and 3)
    inf=1
    [ "$gpus" -ge 4 ] && inf=2
    echo "== $gpus GPUs: the scenario on real NCCL with the EFASim fabric, a trainer of 2 ranks and an" \
         "inference engine of $inf (2 calibrations, 5 runs; several minutes)"
    # The scenario bounds every run itself (--timeout per run) and kills its ranks; this
    # outer bound is for the scenario as a whole.
    # shellcheck disable=SC2086
    timeout -k 10 1800 "$PY" "$ROOT/tools/scenario/scenario.py" --outdir "$OUT" --python "$PY" \
        --inference-ranks "$inf" ${DEMO_ARGS:-}
    st=$?
    [ $st -eq 124 ] && echo "demo: the scenario ran past 30 minutes and was stopped; see $OUT" >&2
    exit $st
fi

if [ "$gpus" -ge 1 ]; then
    echo "== $gpus GPU(s) here (the queue-pair scenario needs 3): colocated RL on one GPU, for real"
    echo "   rank 0 trains, rank 1 serves, both on GPU 0; a vLLM-style ctypes NCCL client; a few minutes"
    timeout -k 10 900 "$PY" "$ROOT/bench/colocated.py" --outdir "$OUT" --preload "$SHIM" --cases nccl,shim,vmm,torch-ipc
    st=$?
    echo
    echo "== ncclshim-inspect $OUT/shim/records (the shim's run)"
    "$INSPECT" "$OUT/shim/records" | sed 's/^/   /'
    "$INSPECT" --check "$OUT/shim/records" > /dev/null 2> "$OUT/check.err"
    echo "   ncclshim-inspect --check: exit status $?"
    sed 's/^/   /' "$OUT/check.err"
    echo
    echo "records and logs: $OUT (per case: rank*.err, records/)"
    exit $st
fi

echo "== no GPU here: the shim's decisions on the fake NCCL of the test suite."
echo "   The data path (training all-reduce, refits, EFASim's queue pairs) needs a GPU host with 3 GPUs."
FAKE=$ROOT/tests/fake/a/libnccl.so.2
FAKECUDA=$ROOT/tests/fake/cuda/libcuda.so.1
PYBIN=$("$PY" -c 'import sys; print(sys.executable)')
fail=0

# titled NAME TITLE CMD...: CMD with process title TITLE (what Ray does for its actors), bounded
titled() {
    local title=$1
    shift
    timeout -k 2 60 bash -c 'title=$1; shift; exec -a "$title" "$@"' _ "$title" "$@"
}

# The weight-update group as NeMo-RL makes it: trainer ranks 0 and 1 (DTensorPolicyWorker)
# and one inference rank (VllmGenerationWorker), through a ctypes client written like
# vLLM's pynccl; trainer rank 0 makes the unique ID.  The fake libcuda is preloaded so
# that the ipc transport can run on host memory, and the clients take their buffers from
# its cuMemAlloc (device memory, as a real client's tensors: the hops are pushed or
# pulled); a small refit follows the warm-up.  Then a training communicator (a
# torch-like linked client in a trainer) beside it.
# group NAME [ENV=VALUE...]: the extra environment is the inference process's.
REFIT=1048576,4194307,65536
group() {
    local name=$1
    shift
    local d=$OUT/$name
    mkdir -p "$d/records"
    local common=(env NCCLSHIM_LOG_DIR="$d/records" NCCLSHIM_WEIGHT_UPDATE=auto LD_PRELOAD="$SHIM $FAKECUDA"
                  FAKE_CUDA_WAIT_TIMEOUT_MS=10000)
    "${common[@]}" FAKE_CUDA_DEVICE=0 bash -c "$(declare -f titled); titled ray::DTensorPolicyWorker \
        '$PYBIN' '$ROOT/tests/clients/pynccl_like.py' '$FAKE' --rank=0 --nranks=3 --uid-out='$d/uid' \
        --cuda='$FAKECUDA' --refit=$REFIT" \
        > "$d/trainer0.out" 2>&1 &
    local p0=$! i=0
    while [ ! -s "$d/uid" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    "${common[@]}" FAKE_CUDA_DEVICE=1 bash -c "$(declare -f titled); titled ray::DTensorPolicyWorker \
        '$PYBIN' '$ROOT/tests/clients/pynccl_like.py' '$FAKE' --rank=1 --nranks=3 --uid-in='$d/uid' \
        --cuda='$FAKECUDA' --refit=$REFIT" \
        > "$d/trainer1.out" 2>&1 &
    local p1=$!
    "${common[@]}" FAKE_CUDA_DEVICE=2 "$@" bash -c "$(declare -f titled); titled ray::VllmGenerationWorker \
        '$PYBIN' '$ROOT/tests/clients/pynccl_like.py' '$FAKE' --rank=2 --nranks=3 --uid-in='$d/uid' \
        --cuda='$FAKECUDA' --refit=$REFIT" \
        > "$d/inference.out" 2>&1 &
    local p2=$!
    local st=0
    wait $p0 || st=1
    wait $p1 || st=1
    wait $p2 || st=1
    "${common[@]}" bash -c "$(declare -f titled); titled ray::DTensorPolicyWorker '$ROOT/tests/bin/client_linked' linked basic" \
        > "$d/training.out" 2>&1 || st=1
    if [ $st -ne 0 ] || grep -q "^CHECK fail" "$d"/*.out; then
        echo "demo: a process of '$name' failed:"
        for f in "$d"/*.out; do echo "--- $f"; tail -15 "$f"; done
        fail=1
    fi
}

show() { # show NAME TITLE
    local d=$OUT/$1
    echo
    echo "== $2"
    # The fake NCCL moves no bytes between processes: only the shim's ipc transport does.
    local ok total
    ok=$(grep -c "^BYTES .* ok$" "$d/inference.out")
    total=$(grep -c "^BYTES " "$d/inference.out")
    local why=""
    [ "$name_ipc" = "$1" ] || why=" (the fake NCCL moves no data: only ipc makes them arrive here)"
    echo "   refit ($REFIT bytes from trainer 0): $ok of $total buffers arrived whole at the inference process$why"
    "$INSPECT" "$d/records" | sed 's/^/   /'
    "$INSPECT" --check "$d/records" > /dev/null 2> "$d/check.err"
    echo "   ncclshim-inspect --check: exit status $?"
    sed 's/^/   /' "$d/check.err"
}

name_ipc=same-host
group same-host
group other-host NCCLSHIM_HOSTNAME=node-b
show same-host "one host, 4 processes: trainer 0, trainer 1 and the inference process in the weight-update group (auto: ipc), and a training communicator in a fourth (it passes through)"
show other-host "the inference process as another host (NCCLSHIM_HOSTNAME=node-b on it, test-only): auto chooses socket for the weight update"

echo
echo "records and logs: $OUT"
if "$INSPECT" --html "$OUT/report.html" "$OUT"/*/records > /dev/null 2>&1; then
    echo "a picture of what happened: $OUT/report.html (open it in a browser: a timeline per process, the table beside it)"
fi
echo "the data path needs a GPU: on a host with 1 or 2, make demo runs the colocated refit (bench/colocated.py); with 3,"
echo "make demo runs tools/scenario/scenario.py (see docs/inspect.md, 'The scenario')."
exit $fail
