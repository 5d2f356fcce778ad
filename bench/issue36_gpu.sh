#!/bin/bash
# One device run for issue 36, old (build/libncclshim-main.so, main before it)
# against new (build/libncclshim.so) in the same run, on one GPU:
#   host    bench/ipc_host_cost.c: each driver call's host time
#   coloc   bench/colocated.py, the shapes in $SHAPES, cases $CASES, each library
#   trace   the new library's bucketed single broadcasts with NCCLSHIM_IPC_TRACE=1
#   gpu     tests/gpu/run.sh (the one-GPU tests) with the new library
# Usage: OUT=dir bench/issue36_gpu.sh host coloc trace gpu
# Built first, here: make; cc -O2 -I. -Ishim/ipc -Ishim/base -Ishim/nccl -Ishim/rendezvous \
#   -o build/ipc_host_cost bench/ipc_host_cost.c -ldl; and main's library:
#   git -C <main> archive <commit> | tar -x -C /tmp/old && make -C /tmp/old build/libncclshim.so &&
#   cp /tmp/old/build/libncclshim.so build/libncclshim-main.so
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/issue36}
mkdir -p "$OUT"
SHAPES=${SHAPES:-bucketed,per-param,moe}
CASES=${CASES:-shim,vmm}
LIBS=${LIBS:-main new}
T0=$(date +%s)
log() { echo "== $(($(date +%s) - T0)) s: $*"; }
nvidia-smi -L
for step in "$@"; do
    case $step in
    host)
        log host; build/ipc_host_cost 20000 ;;
    coloc)
        for lib in $LIBS; do
            so=build/libncclshim.so; [ "$lib" = main ] && so=build/libncclshim-main.so
            log "colocated $lib ($SHAPES; $CASES)"
            python3 bench/colocated.py --outdir /tmp/col-$lib --preload $so --cases $CASES --shapes $SHAPES
            cp /tmp/col-$lib/colocated.json "$OUT/colocated-$lib.json"
        done ;;
    trace)
        log trace
        ts=${TRACE_SHAPE:-bucketed}
        NCCLSHIM_IPC_TRACE=1 COLOCATED_REFITS=3 python3 bench/colocated.py --outdir /tmp/col-trace \
            --preload build/libncclshim.so --cases shim --shapes $ts >/dev/null
        python3 bench/trace_times.py /tmp/col-trace/$ts/shim/rank0.err /tmp/col-trace/$ts/shim/rank1.err ;;
    gpu)
        log gpu-tests
        NCCLSHIM_GPU_KEEP=/tmp/gpukeep timeout 400 prove -v tests/gpu/run.sh > "$OUT/test-gpu.log" 2>&1
        echo "test-gpu rc $?"; grep -E "^not ok|^ok|^#.*fail" "$OUT/test-gpu.log" | grep -v "^ok" | head -30
        tail -3 "$OUT/test-gpu.log" ;;
    esac
done
log done
