#!/bin/bash
# GPU tests of ncclshim (TAP): real NCCL (torch's wheel), without and with the shim
# preloaded: the one-GPU tests wherever there is a GPU (identity handles and NCCL_NET;
# the colocated case, two processes on one GPU, its suspend/resume and NCCL 2.31's
# nccl*Config collectives on it), then those of
# 2 (and 4) GPUs.
# Run by `make test-gpu` as `prove -v tests/gpu/run.sh`.
#   SHIM=<libncclshim.so>     default build/libncclshim.so
#   PYTHON=<python>           default python3 (needs torch with CUDA)
#   NCCLSHIM_GPU_KEEP=<dir>   keep every run's files (records, NCCL logs, stderr) in <dir>
#   NCCLSHIM_GPU_SKIP_ONE=1   skip the one-GPU tests (run already, on a one-GPU machine, say)
# Skips (1..0) without a GPU; the tests of 2 GPUs are skipped, with a reason, on one.
# Every process runs under `timeout -k 5`.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
if [ -f "$nccl" ]; then
    export NCCL_LIB=$nccl # the workers (common.nccl_so_path) use the same one
    ok 0 "torch's libnccl.so.2 found"
else
    ok 1 "torch's libnccl.so.2 found"
fi

# launch <name> <script> noshim|shim: one launcher run (2 workers) in $WORK/<name>.<mode>
launch() {
    local name=$1 script=$2 mode=$3 dir=$WORK/$1.$3 rc
    rm -rf "$dir"
    mkdir -p "$dir/records"
    if [ "$mode" = shim ]; then
        # NCCL's own log, to join the records' comm pointers with; the shim is
        # preloaded into the workers only (--preload), not into the launcher.
        NCCLSHIM_LOG_DIR=$dir/records NCCL_DEBUG=INFO NCCL_DEBUG_FILE=$dir/nccl.%h.%p.log \
            timeout -k 5 200 "$PY" "$HERE/$script" --outdir "$dir" --timeout 150 --preload "$SHIM" \
            >"$dir/launcher.out" 2>"$dir/launcher.err"
    else
        timeout -k 5 200 "$PY" "$HERE/$script" --outdir "$dir" --timeout 150 \
            >"$dir/launcher.out" 2>"$dir/launcher.err"
    fi
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        ok 1 "$script ($mode): finished in time (TIMEOUT after 200 s)"
    else
        ok $rc "$script ($mode): both ranks ran and exited 0"
    fi
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        # The launcher was killed before it could show its workers' stderr.
        local f
        for f in "$dir"/rank*.err; do
            [ -f "$f" ] || continue
            echo "# tail of $(basename "$f"):"
            tail -n 30 "$f" | diag
        done
    elif [ $rc -ne 0 ]; then
        # The launcher's stderr has the errors and the tail of each rank's stderr.
        echo "# exit status $rc; launcher stderr:"
        tail -n 100 "$dir/launcher.err" | diag
    fi
}

check() { # check.py <args>: CHECK lines -> TAP, bounded like everything else
    # Process substitution, not a pipe: import_checks must run in this shell to count.
    import_checks < <(timeout -k 5 120 "$PY" "$HERE/check.py" "$@" 2>&1)
}

# --- one GPU -----------------------------------------------------------------
if [ "${NCCLSHIM_GPU_SKIP_ONE:-0}" = 1 ]; then
    echo "# the one-GPU tests skipped: NCCLSHIM_GPU_SKIP_ONE=1"
else
# (i) the application holds NCCL's own communicator, and NCCL_NET (the container's,
# here EFASim standing in for the fabric) is hidden from a socket-redirected init only,
# while another thread creates a passthrough communicator at the same moment.
# The same through nccl4py (ncclCommInitRankScalable, functions found with dlsym), where it imports.
has_nccl4py=0
timeout -k 5 120 "$PY" -c 'import nccl.core' >/dev/null 2>&1 && has_nccl4py=1
for client in ctypes nccl4py; do
    if [ $client = nccl4py ] && [ $has_nccl4py = 0 ]; then
        skip "identity.py through nccl4py: nccl4py does not import here (pip install nccl4py, or build NCCL's bindings/nccl4py)"
        continue
    fi
    if [ -f "$ROOT/build/libnccl-net-efasim.so" ]; then
        dir=$WORK/identity-$client
        rm -rf "$dir"
        mkdir -p "$dir/records"
        IDENTITY_CLIENT=$client EFASIM_STATE=/efasim-gputest-id-$$ NCCL_NET=EFASim NCCL_NET_PLUGIN=efasim \
            NCCL_IB_DISABLE=1 LD_LIBRARY_PATH="$ROOT/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            NCCLSHIM_RULES='nranks=1:socket' NCCLSHIM_LOG_DIR="$dir/records" NCCL_DEBUG=INFO \
            NCCL_DEBUG_SUBSYS=INIT,NET,ENV NCCL_DEBUG_FILE="$dir/nccl.%h.%p.log" LD_PRELOAD="$SHIM" \
            timeout -k 5 200 "$PY" "$HERE/identity.py" "$dir" > "$dir/out" 2> "$dir/err"
        ok $? "identity.py ($client): ran and exited 0"
        import_checks < "$dir/out"
        [ -s "$dir/err" ] && tail -n 20 "$dir/err" | diag
        rm -f "/dev/shm/efasim-gputest-id-$$"
    else
        ok 1 "the EFASim plugin is built (make fabric): needed for identity.py"
    fi
done

# (i2) configs of older headers (issue 33): NCCL honours a config field by the config's
# version, so a socket or frugal redirect of a config that says 2.27 or 2.16 must reach NCCL
# at a version that carries it; NCCL's own log shows what it read, the record the same.
dir=$WORK/config-versions
rm -rf "$dir"
mkdir -p "$dir"
timeout -k 5 600 "$PY" "$HERE/config_versions.py" "$dir" "$SHIM" > "$dir/out" 2> "$dir/err"
ok $? "config_versions.py: ran and exited 0"
import_checks < "$dir/out"
grep '^#' "$dir/out" | head -n 20
[ -s "$dir/err" ] && tail -n 20 "$dir/err" | diag

# (f) colocated: trainer and inference process on one GPU (the last one), which
# NCCL refuses and the shim's ipc transport carries: copy engines (auto), the
# copy kernel (NCCLSHIM_IPC_COPY=sm), PyTorch's expandable segments (cuMemCreate memory shared as
# file descriptors: vmm), and the staged path (the same with NCCLSHIM_IPC_VMM=0).
export COLOCATED_DEVICE=$((ngpu - 1))
launch colocated colocated.py noshim
import_checks < <(timeout -k 5 120 "$PY" "$HERE/colocated.py" --check "$WORK/colocated.noshim" noshim 2>&1)
for colo in shim sm vmm staged; do
    (
        export NCCLSHIM_WEIGHT_UPDATE=auto NCCLSHIM_TRAINING_TITLES='*colocated.py --worker --rank 0 *'
        export NCCLSHIM_INFERENCE_TITLES='*colocated.py --worker --rank 1 *'
        [ $colo = sm ] && export NCCLSHIM_IPC_COPY=sm
        case $colo in vmm | staged) export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ;; esac
        [ $colo = staged ] && export NCCLSHIM_IPC_VMM=0
        launch "colocated-$colo" colocated.py shim
        echo "n=$n nfail=$nfail" > "$WORK/colocated-$colo.count"
    )
    . "$WORK/colocated-$colo.count" # the subshell's counts (it keeps the exports to itself)
    import_checks < <(timeout -k 5 120 "$PY" "$HERE/colocated.py" --check "$WORK/colocated-$colo.shim" $colo 2>&1)
done
# (f2) the same through nccl4py, what NeMo-RL's trainer calls NCCL with (ncclCommInitRankScalable,
# every symbol looked up with dlsym), where it imports: NCCL refuses, the shim carries it, with
# PyTorch's default allocator and its expandable segments.
if [ $has_nccl4py = 1 ]; then
    for colo in noshim shim vmm; do
        (
            export COLOCATED_CLIENT=nccl4py
            export NCCLSHIM_WEIGHT_UPDATE=auto NCCLSHIM_TRAINING_TITLES='*colocated.py --worker --rank 0 *'
            export NCCLSHIM_INFERENCE_TITLES='*colocated.py --worker --rank 1 *'
            [ $colo = vmm ] && export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
            mode=shim
            [ $colo = noshim ] && mode=noshim
            launch "colocated4py-$colo" colocated.py $mode
            echo "n=$n nfail=$nfail" > "$WORK/colocated4py-$colo.count"
        )
        . "$WORK/colocated4py-$colo.count"
        mode=shim
        [ $colo = noshim ] && mode=noshim
        import_checks < <(COLOCATED_CLIENT=nccl4py timeout -k 5 120 "$PY" "$HERE/colocated.py" --check \
            "$WORK/colocated4py-$colo.$mode" $colo 2>&1)
    done
else
    skip "colocated through nccl4py: nccl4py does not import here (pip install nccl4py, or build NCCL's bindings/nccl4py)"
fi
# (f3) a refit over a torch process group (slime, SGLang): the unique ID made inside libtorch
# at the first broadcast, under update_weights, marked by the shim; ipc on one GPU.
launch torch-refit torch_refit.py noshim
import_checks < <(timeout -k 5 120 "$PY" "$HERE/torch_refit.py" --check "$WORK/torch-refit.noshim" noshim 2>&1)
(
    export NCCLSHIM_WEIGHT_UPDATE=auto NCCLSHIM_TRAINING_TITLES='*torch_refit.py --worker --rank 0 *'
    export NCCLSHIM_INFERENCE_TITLES='*torch_refit.py --worker --rank 1 *'
    launch torch-refit torch_refit.py shim
    echo "n=$n nfail=$nfail" > "$WORK/torch-refit.count"
)
. "$WORK/torch-refit.count"
import_checks < <(timeout -k 5 120 "$PY" "$HERE/torch_refit.py" --check "$WORK/torch-refit.shim" shim 2>&1)
# (f4) a refit through CuPy's NCCL (verl's checkpoint engine through Ray collective): the
# communicator made inside ncclGroupStart/End, a barrier, bucketed broadcasts; ipc on one GPU.
launch cupy-refit cupy_refit.py noshim
import_checks < <(timeout -k 5 120 "$PY" "$HERE/cupy_refit.py" --check "$WORK/cupy-refit.noshim" noshim 2>&1)
(
    export NCCLSHIM_WEIGHT_UPDATE=auto NCCLSHIM_TRAINING_TITLES='*cupy_refit.py --worker --rank 0 *'
    export NCCLSHIM_INFERENCE_TITLES='*cupy_refit.py --worker --rank 1 *'
    launch cupy-refit cupy_refit.py shim
    echo "n=$n nfail=$nfail" > "$WORK/cupy-refit.count"
)
. "$WORK/cupy-refit.count"
import_checks < <(timeout -k 5 120 "$PY" "$HERE/cupy_refit.py" --check "$WORK/cupy-refit.shim" shim 2>&1)
# (g) colocated RL's sleep: the inference process suspends (ncclCommSuspend gives the
# shim's staging back: cuMemGetInfo's free memory grows by it) and resumes between refits.
(
    export NCCLSHIM_WEIGHT_UPDATE=auto NCCLSHIM_TRAINING_TITLES='*suspend.py --worker --rank 0 *'
    export NCCLSHIM_INFERENCE_TITLES='*suspend.py --worker --rank 1 *'
    launch suspend suspend.py shim
    echo "n=$n nfail=$nfail" > "$WORK/suspend.count"
)
. "$WORK/suspend.count"
import_checks < <(timeout -k 5 120 "$PY" "$HERE/suspend.py" --check "$WORK/suspend.shim" 2>&1)
# (h) NCCL 2.31's nccl*Config collectives on the colocated ipc communicator, reached by a
# linked call as an application built against 2.31 reaches them (NCCL 2.28.9 lacks them:
# the shim's export answers, NCCL is never called): bit-exact, the 2.32 completion event
# recorded, a bad config refused.
(
    export NCCLSHIM_WEIGHT_UPDATE=auto NCCLSHIM_TRAINING_TITLES='*collconfig.py --worker --rank 0 *'
    export NCCLSHIM_INFERENCE_TITLES='*collconfig.py --worker --rank 1 *'
    launch collconfig collconfig.py shim
    echo "n=$n nfail=$nfail" > "$WORK/collconfig.count"
)
. "$WORK/collconfig.count"
import_checks < <(timeout -k 5 120 "$PY" "$HERE/collconfig.py" --check "$WORK/collconfig.shim" 2>&1)
fi # the one-GPU tests
if [ "$ngpu" -lt 2 ]; then
    echo "# the tests of 2 GPUs or more skipped: $ngpu GPU here"
    echo "1..$n"
    [ "$nfail" -eq 0 ]
    exit
fi

# --- two GPUs ------------------------------------------------------------------
# (a) torch.distributed all-reduce
launch torch torch_allreduce.py noshim
launch torch torch_allreduce.py shim
check results "$WORK/torch.noshim" "$WORK/torch.shim"
check records "$WORK/torch.shim" torch

# (b) ctypes client like vLLM's pynccl: 64 MiB broadcast
launch ctypes ctypes_bcast.py noshim
launch ctypes ctypes_bcast.py shim
check results "$WORK/ctypes.noshim" "$WORK/ctypes.shim"
check records "$WORK/ctypes.shim" ctypes

# (c) both in the same two processes (a NeMo-RL trainer does this)
launch combined combined.py shim
check results "$WORK/combined.shim"
check records "$WORK/combined.shim" combined

# (d) decisions on real NCCL: a ctypes weight-update communicator (trainer rank 0,
# inference rank 1, roles from the process titles) beside a torch training one.
for action in socket frugal drop; do
    NCCLSHIM_WEIGHT_UPDATE=$action NCCLSHIM_TRAINING_TITLES='*decisions.py --worker --rank 0 *' \
        NCCLSHIM_INFERENCE_TITLES='*decisions.py --worker --rank 1 *' NCCL_DEBUG_SUBSYS=INIT,NET \
        launch "decide-$action" decisions.py shim
    import_checks < <(timeout -k 5 120 "$PY" "$HERE/decisions.py" --check "$WORK/decide-$action.shim" "$action" 2>&1)
done
# (d2) socket while the container sets NCCL_NET, as EFA images do (here the EFASim plugin of
# tools/fabric stands in for the fabric): NCCL lets NCCL_NET override the config's netName,
# so the shim hides it from the redirected init only; the weight-update communicator must
# get Socket, the torch training communicator beside it the container's EFASim.
if [ -f "$ROOT/build/libnccl-net-efasim.so" ]; then
    EFASIM_STATE=/efasim-gputest-$$ NCCL_NET=EFASim NCCL_NET_PLUGIN=efasim NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=1 \
        NCCL_SHM_DISABLE=1 LD_LIBRARY_PATH="$ROOT/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        NCCLSHIM_WEIGHT_UPDATE=socket NCCLSHIM_TRAINING_TITLES='*decisions.py --worker --rank 0 *' \
        NCCLSHIM_INFERENCE_TITLES='*decisions.py --worker --rank 1 *' NCCL_DEBUG_SUBSYS=INIT,NET,ENV \
        launch decide-ncclnet decisions.py shim
    import_checks < <(timeout -k 5 120 "$PY" "$HERE/decisions.py" --check "$WORK/decide-ncclnet.shim" socket-ncclnet 2>&1)
    rm -f "/dev/shm/efasim-gputest-$$"
else
    ok 1 "the EFASim plugin is built (make fabric): needed for the NCCL_NET check"
fi
# (d3) auto across hosts (rank 1 presented as node-b: NCCLSHIM_HOSTNAME, test-only), on three
# fabrics a fake sysfs tree presents (NCCLSHIM_SYSFS_ROOT, test-only): one InfiniBand device
# with a budget where one channel fits (about 8 QPs at one channel, 16 at NCCL's default, for a
# host's only rank of 2): frugal; a budget where it does not: socket; 8 EFA devices for 2 GPUs:
# passthrough.
fake_sysfs() { # fake_sysfs DIR efa|ib DEVICES: as the kernel writes it, with 2 NVIDIA GPUs
    local d=$1 kind=$2 n=$3 k g dev
    for g in 1 2; do
        mkdir -p "$d/bus/pci/devices/0000:0$g:00.0"
        echo 0x10de > "$d/bus/pci/devices/0000:0$g:00.0/vendor"
        echo 0x030200 > "$d/bus/pci/devices/0000:0$g:00.0/class"
    done
    for ((k = 0; k < n; k++)); do
        dev=$d/class/infiniband/${kind}_$k
        mkdir -p "$dev/device" "$dev/ports/1"
        if [ "$kind" = efa ]; then echo 0x1d0f; else echo 0x15b3; fi > "$dev/device/vendor"
        if [ "$kind" = efa ]; then echo Unknown; else echo InfiniBand; fi > "$dev/ports/1/link_layer"
        echo "4: ACTIVE" > "$dev/ports/1/state"
    done
}
fake_sysfs "$WORK/sysfs-ib1" ib 1
fake_sysfs "$WORK/sysfs-efa8" efa 8
for c in frugal:ib1:12 socket:ib1:4 passthrough:efa8:; do
    IFS=: read -r want tree budget <<< "$c"
    NCCLSHIM_WEIGHT_UPDATE=auto NCCLSHIM_SYSFS_ROOT=$WORK/sysfs-$tree NCCLSHIM_FABRIC_BUDGET=$budget \
        GPUTEST_RANK0_ENV="NCCLSHIM_HOSTNAME=node-a" GPUTEST_RANK1_ENV="NCCLSHIM_HOSTNAME=node-b" \
        NCCLSHIM_TRAINING_TITLES='*decisions.py --worker --rank 0 *' \
        NCCLSHIM_INFERENCE_TITLES='*decisions.py --worker --rank 1 *' NCCL_DEBUG_SUBSYS=INIT,NET \
        launch "decide-auto-$want" decisions.py shim
    import_checks < <(timeout -k 5 120 "$PY" "$HERE/decisions.py" --check "$WORK/decide-auto-$want.shim" "auto-$want" 2>&1)
done
if [ -x "$ROOT/tools/ncclshim-inspect" ]; then
    "$ROOT/tools/ncclshim-inspect" --check "$WORK/decide-drop.shim/records" > "$WORK/decide-drop.check" 2>&1
    rc=$?
    grep -q "dropped communicator carried data" "$WORK/decide-drop.check" && [ $rc -ne 0 ]
    ok $? "ncclshim-inspect --check flags the dropped communicator that carried data (exit $rc)"
fi

# (e) the ipc action: the weight-update communicator moves its data over CUDA IPC.
NCCLSHIM_TRAINING_TITLES='*ipc.py --worker --rank 0 *' NCCLSHIM_INFERENCE_TITLES='*ipc.py --worker --rank 1 *' \
    launch ipc ipc.py shim
import_checks < <(timeout -k 5 120 "$PY" "$HERE/ipc.py" --check "$WORK/ipc.shim" 2>&1)
# (e2) the same with PyTorch's expandable segments (cuMemCreate memory, which CUDA IPC's
# cuIpcGetMemHandle does not export: the shim shares it as file descriptors).
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True NCCLSHIM_TRAINING_TITLES='*ipc.py --worker --rank 0 *' \
    NCCLSHIM_INFERENCE_TITLES='*ipc.py --worker --rank 1 *' launch ipc-staged ipc.py shim
import_checks < <(timeout -k 5 120 "$PY" "$HERE/ipc.py" --check "$WORK/ipc-staged.shim" 2>&1)
# ... and a chain through 4 GPUs, where there are 4: a trainer and an inference engine of 3
# ranks, which auto sends along the chain.
if [ "$ngpu" -ge 4 ]; then
    rm -rf "$WORK/ipc4.shim"
    mkdir -p "$WORK/ipc4.shim/records"
    NCCLSHIM_TRAINING_TITLES='*ipc.py --worker --rank 0 *' \
        NCCLSHIM_INFERENCE_TITLES='*ipc.py --worker --rank [123] *' \
        NCCLSHIM_LOG_DIR="$WORK/ipc4.shim/records" NCCL_DEBUG=INFO \
        NCCL_DEBUG_FILE="$WORK/ipc4.shim/nccl.%h.%p.log" timeout -k 5 200 "$PY" "$HERE/ipc.py" --outdir "$WORK/ipc4.shim" \
        --world 4 --timeout 150 --preload "$SHIM" > "$WORK/ipc4.shim/launcher.out" 2> "$WORK/ipc4.shim/launcher.err"
    ok $? "ipc.py with 4 ranks on 4 GPUs: all ranks ran and exited 0"
    import_checks < <(timeout -k 5 120 "$PY" "$HERE/ipc.py" --check "$WORK/ipc4.shim" 2>&1)
fi

echo "1..$n"
[ "$nfail" -eq 0 ]
