#!/bin/bash
# GPU tests of a rank lost mid-refit (TAP; tests/gpu/lost_rank.py): an ipc
# communicator's rank SIGKILLs itself inside a loop of operations, and every
# survivor must be released within 5 s, see ncclRemoteError, destroy, go on
# with other GPU work, and recover with a replacement process.
# Run by `make test-gpu` as `prove -v tests/gpu/lost.sh`; same variables as run.sh
# (SHIM, PYTHON, NCCLSHIM_GPU_KEEP), and:
#   NCCLSHIM_GPU_LOST=<names>  only these cases (comma-separated; default: all that fit)
#   LOST_TIMEOUT=<s>           each run's bound (default 120)
# Colocated cases run on one GPU, the others on 2 and 4 GPUs where there are.
# Every run is bounded (timeout -k 5): a survivor that hangs fails its case and
# its stack (Python's faulthandler after 20 s, gdb's) says where it was.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
[ -f "$nccl" ] && export NCCL_LIB=$nccl

# lost <name> <gpus> <world> [VAR=value ...]: one run, its case named <name>;
# <gpus>: 1 (every rank on the last GPU), or the number of GPUs it spreads over.
# A name ending in -pull or -staged must have had hops of that kind.
lost() {
    local name=$1 gpus=$2 world=$3 dir=$WORK/lost-$1 rc hop=
    shift 3
    case $name in *-pull) hop=pull ;; *-staged) hop=staged ;; esac
    case ",${NCCLSHIM_GPU_LOST:-$name}," in *",$name,"*) ;; *) return ;; esac
    if [ "$gpus" -gt "$ngpu" ]; then
        skip "lost rank $name: needs $gpus GPUs, $ngpu here"
        return
    fi
    local place=()
    if [ "$gpus" -eq 1 ]; then
        place=(LOST_DEVICE=$((ngpu - 1)))
    else
        place=(CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((gpus - 1)))")
    fi
    rm -rf "$dir"
    mkdir -p "$dir/records"
    env "${place[@]}" "$@" NCCLSHIM_WEIGHT_UPDATE=ipc NCCLSHIM_TRAINING_TITLES='*lost_rank.py --worker --rank 0 *' \
        NCCLSHIM_INFERENCE_TITLES='*lost_rank.py --worker --rank [1-9]*' NCCLSHIM_LOG_DIR="$dir/records" \
        timeout -k 5 150 "$PY" "$HERE/lost_rank.py" --outdir "$dir" --world "$world" --timeout "${LOST_TIMEOUT:-120}" \
        --preload "$SHIM" > "$dir/launcher.out" 2> "$dir/launcher.err"
    rc=$?
    ok $rc "lost rank $name ($world ranks on $gpus GPU(s), $*): the run ended in time, as expected"
    [ $rc -ne 0 ] && tail -n 40 "$dir/launcher.err" | diag
    import_checks < <(timeout -k 5 60 "$PY" "$HERE/lost_rank.py" --check "$dir" $hop 2>&1)
}

XS=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
# Colocated: trainer and inference process on one GPU.
lost colo-last 1 2 LOST_VICTIM=1
lost colo-root 1 2 LOST_VICTIM=0
lost colo-vmm 1 2 LOST_VICTIM=1 $XS
# Two GPUs: root and last; expandable segments shared (vmm) and staged.
lost two-root 2 2 LOST_VICTIM=0
lost two-last 2 2 LOST_VICTIM=1
lost two-vmm 2 2 LOST_VICTIM=1 $XS
lost two-staged 2 2 LOST_VICTIM=0 $XS NCCLSHIM_IPC_VMM=0
lost two-allreduce 2 2 LOST_VICTIM=1 LOST_OP=allreduce
lost two-sendrecv 2 2 LOST_VICTIM=1 LOST_OP=sendrecv
# Four GPUs: the chain's root, middle and last; every operation.
lost four-root 4 4 LOST_VICTIM=0
lost four-middle 4 4 LOST_VICTIM=2
# Pulled hops: a sender that does not wait for its receiver (NCCLSHIM_IPC_PUSH_WAIT_US=0) and comes
# first says its data is ready, and the receiver copies from it.
lost four-pull 4 4 LOST_VICTIM=2 NCCLSHIM_IPC_PUSH_WAIT_US=0
lost two-pull 2 2 LOST_VICTIM=0 NCCLSHIM_IPC_PUSH_WAIT_US=0
lost four-last 4 4 LOST_VICTIM=3
lost four-vmm 4 4 LOST_VICTIM=2 $XS
lost four-staged 4 4 LOST_VICTIM=1 $XS NCCLSHIM_IPC_VMM=0
lost four-allreduce 4 4 LOST_VICTIM=2 LOST_OP=allreduce
lost four-sendrecv 4 4 LOST_VICTIM=2 LOST_OP=sendrecv
lost four-allgather 4 4 LOST_VICTIM=1 LOST_OP=allgather
# Megatron's setting: every stream in one work queue of the device.
lost four-one-connection 4 4 LOST_VICTIM=2 CUDA_DEVICE_MAX_CONNECTIONS=1
# Not only killed: a rank that exits without destroying anything, and one that crashes.
lost colo-exit 1 2 LOST_VICTIM=1 LOST_HOW=exit
lost two-abort 2 2 LOST_VICTIM=0 LOST_HOW=abort
lost four-exit 4 4 LOST_VICTIM=3 LOST_HOW=exit
lost four-abort 4 4 LOST_VICTIM=1 LOST_HOW=abort

echo "1..$n"
[ "$nfail" -eq 0 ]
