"""The RL stacks' communicators, as data, for the replays (tests/replay/replay.py, run by
tests/t/37-stacks.t).  Read from each stack's source; the citations (path:line at the commit
named) are those of the research notes stacks_A.md (NeMo-RL 7ea279ab, vLLM fork 28be48fa,
verl 1dda039b) and stacks_B.md (OpenRLHF 3c3be62, slime 624b824, SGLang fork 8905cbd).

A frame is (path in site-packages, line, "Class.function"): the shim records "<file>:<line>
<function>".  Lines the notes cite are the stack's; a line marked ~ is where the notes give
only the function (the frames' file and function are what the shim's patterns read).
Frames are listed outermost first; each step's frames end where its NCCL call is made.

Each scenario says what every rank must get under the shim's defaults (docs/policy.md and
the target rules of issue 32): its purpose, its action on one host and across hosts, the
evidence its records must name, and whether its unique ID is marked for the rendezvous.
The reasons are regular expressions (re.search) over the records' reason strings; each of
`variants` (V below) is a placement of the ranks and what it must give.
"""
from replay import Rank

# The refit's buffers, in bytes: one per parameter or packed bucket (a byte-odd size, one
# that crosses the test's 64 KiB ipc chunks, one of several chunks and chain steps).
REFIT = [4096, 65537, 200003]
A, B = "node-a", "node-b"


def V(label, hosts, action, why, env=None, problems=None):
    """A variant: hosts (a host name per rank, None: one host), the action every rank must
    take and a regular expression its reason must match, extra settings of every rank, and
    the problems `ncclshim-inspect --check` must report (a regular expression; None: none,
    exit 0)."""
    return {"label": label, "hosts": hosts, "action": action, "why": why, "env": env, "problems": problems}


# --- vLLM's PyNcclCommunicator (ctypes on libnccl.so.2, one dlsym per function on the CDLL's
# handle): vllm/distributed/device_communicators/pynccl.py:61-146 __init__: ncclGetUniqueId
# on group rank 0 (:112), the ID through the group (:127), ncclCommInitRank (:137), a warm-up
# all-reduce of one fp32 (:141-145); broadcast() :376-400.  The wrapper's methods
# (pynccl_wrapper.py:150-319) make the foreign calls.  (stacks_A §2.3, stacks_B §1.2)
PYNCCL = "vllm/distributed/device_communicators/pynccl.py"
PYNCCL_W = "vllm/distributed/device_communicators/pynccl_wrapper.py"
PYNCCL_UID = [(PYNCCL, 112, "PyNcclCommunicator.__init__"), (PYNCCL_W, 290, "NCCLLibrary.ncclGetUniqueId")]  # ~290
PYNCCL_INIT = [(PYNCCL, 137, "PyNcclCommunicator.__init__"), (PYNCCL_W, 300, "NCCLLibrary.ncclCommInitRank")]  # ~300
PYNCCL_WARM = [(PYNCCL, 144, "PyNcclCommunicator.__init__"), (PYNCCL, 180, "PyNcclCommunicator.all_reduce"),  # ~180
               (PYNCCL_W, 310, "NCCLLibrary.ncclAllReduce")]  # ~310
PYNCCL_BCAST = [(PYNCCL, 398, "PyNcclCommunicator.broadcast"), (PYNCCL_W, 320, "NCCLLibrary.ncclBroadcast")]  # ~320


def pynccl_rank(title, libs, outer_init, outer_bcast, root=False, script="rank.py"):
    """A rank whose weight communicator is a vLLM PyNcclCommunicator made eagerly under
    `outer_init` (its ID made on the group's rank 0), then one broadcast per refit buffer."""
    steps = [{"op": "uid", "frames": outer_init + PYNCCL_UID}] if root else [{"op": "fetch"}]
    steps += [{"op": "init", "frames": outer_init + PYNCCL_INIT},
              {"op": "allreduce", "count": 1, "dtype": 7, "frames": outer_init + PYNCCL_WARM},
              {"op": "bcast", "sizes": REFIT, "frames": outer_bcast + PYNCCL_BCAST},
              {"op": "destroy"}]
    return Rank(title, "ctypes", steps, libs, script)


# Native libraries (stacks_A §2.5): importing vllm.distributed on a CUDA host imports
# vllm/platforms/cuda.py:21-22 (import vllm._C, vllm._C_stable_libtorch); an engine also
# loads _moe_C (Platform.import_kernels) and cumem_allocator (sleep mode).
VLLM_TRAINER_LIBS = ["vllm/_C.abi3.so", "vllm/_C_stable_libtorch.abi3.so"]
VLLM_ENGINE_LIBS = VLLM_TRAINER_LIBS + ["vllm/_moe_C.abi3.so", "vllm/cumem_allocator.abi3.so"]
# sgl_kernel (sglang-kernel 0.4.5) loads sgl_kernel/sm90/common_ops.*.so (load_utils.py:48-159).
SGL_LIBS = ["sgl_kernel/sm90/common_ops.abi3.so"]

# --- NeMo-RL's StatelessProcessGroup (nemo_rl/distributed/stateless_process_group.py:102-153
# init_nccl_communicator): nccl4py's get_unique_id on rank 0 (:116), Communicator.init
# (:130) -> nccl/core/communicator.py:317 init -> :407 initialize -> :441
# comm_init_rank_scalable (ncclCommInitRankScalable, nId=1); the warm-up broadcast of one
# fp32 from rank 0 (:145-150) and every refit broadcast through broadcast() (:155-162).
SPG = "nemo_rl/distributed/stateless_process_group.py"
NCOMM = "nccl/core/communicator.py"
N4PY_UID = [(SPG, 116, "StatelessProcessGroup.init_nccl_communicator"),
            ("nccl/core/utils.py", 40, "get_unique_id")]  # ~40
N4PY_INIT = [(SPG, 130, "StatelessProcessGroup.init_nccl_communicator"), (NCOMM, 330, "Communicator.init"),  # ~330
             (NCOMM, 441, "Communicator.initialize")]
N4PY_WARM = [(SPG, 150, "StatelessProcessGroup.init_nccl_communicator"), (SPG, 161, "StatelessProcessGroup.broadcast"),
             (NCOMM, 600, "Communicator.broadcast")]  # ~600
N4PY_BCAST = [(SPG, 161, "StatelessProcessGroup.broadcast"), (NCOMM, 600, "Communicator.broadcast")]
# Frames around it: base_policy_worker.py:28 AbstractPolicyWorker.init_collective (:55
# init_nccl_communicator) on every trainer; packed_tensor.py:39 packed_broadcast_producer
# (:111) / :129 packed_broadcast_consumer (:224); vLLM's side vllm_backend.py:228-251
# VllmInternalWorkerExtension.init_collective, reached through collective_rpc (vllm_worker.py:838).
BPW = "nemo_rl/models/policy/workers/base_policy_worker.py"
VBACK = "nemo_rl/models/generation/vllm/vllm_backend.py"
PACKED = "nemo_rl/utils/packed_tensor.py"
NEMO_TRAIN_INIT = [(BPW, 55, "AbstractPolicyWorker.init_collective")]
NEMO_TRAIN_BCAST = [("nemo_rl/models/policy/workers/dtensor_policy_worker_v2.py", 1214,
                     "DTensorPolicyWorkerV2.broadcast_weights_for_collective"),
                    (PACKED, 111, "packed_broadcast_producer")]
NEMO_GEN_EXT_INIT = [("vllm/v1/serial_utils.py", 486, "run_method"),
                     (VBACK, 251, "VllmInternalWorkerExtension.init_collective")]
NEMO_GEN_EXT_BCAST = [("vllm/v1/serial_utils.py", 486, "run_method"),
                      (VBACK, 770, "VllmInternalWorkerExtension.update_weights_from_collective"),
                      (PACKED, 224, "packed_broadcast_consumer")]
# Where the vLLM side's rank runs (stacks_A §1.3): sync engine TP=1 in the Ray actor
# (vllm_worker.py:838 -> LLM.collective_rpc -> uniproc executor :80); async engine TP=1 in
# the VLLM::EngineCore child (core.py:779 EngineCore.collective_rpc); TP>1 in Ray workers
# ray::RayWorkerProc.run (ray_executor_v2.py:189-199 run -> worker_busy_loop).
NEMO_SYNC_OUTER = [("nemo_rl/models/generation/vllm/vllm_worker.py", 838, "VllmGenerationWorker.init_collective"),
                   ("vllm/entrypoints/llm.py", 1100, "LLM.collective_rpc"),  # ~1100
                   ("vllm/v1/executor/uniproc_executor.py", 80, "UniProcExecutor.collective_rpc")]
NEMO_SYNC_RECV = [("nemo_rl/models/generation/vllm/vllm_worker.py", 900,  # ~900
                   "VllmGenerationWorker.update_weights_from_collective"),
                  ("vllm/entrypoints/llm.py", 1100, "LLM.collective_rpc"),
                  ("vllm/v1/executor/uniproc_executor.py", 80, "UniProcExecutor.collective_rpc")]
ENGINECORE_OUTER = [("vllm/v1/engine/core.py", 779, "EngineCore.collective_rpc"),
                    ("vllm/v1/executor/uniproc_executor.py", 80, "UniProcExecutor.collective_rpc")]
RAYWORKER_OUTER = [("vllm/v1/executor/ray_executor_v2.py", 197, "RayWorkerProc.run"),
                   ("vllm/v1/executor/multiproc_executor.py", 880, "WorkerProc.worker_busy_loop")]  # ~880


def nccl4py_rank(title, libs, outer_init, outer_bcast, root=False):
    """A rank whose weight communicator is NeMo-RL's StatelessProcessGroup's (nccl4py), made
    under `outer_init` (the ID made on train rank 0), warmed up with one broadcast, then the
    refit's packed broadcasts."""
    steps = [{"op": "uid", "frames": outer_init + N4PY_UID}] if root else [{"op": "fetch"}]
    steps += [{"op": "init", "frames": outer_init + N4PY_INIT},
              {"op": "bcast", "sizes": [4], "frames": outer_init + N4PY_WARM},
              {"op": "bcast", "sizes": REFIT, "frames": outer_bcast + N4PY_BCAST},
              {"op": "destroy"}]
    return Rank(title, "nccl4py", steps, libs)


def nemo_trainer(root):
    # trainer titles: ray::DTensorPolicyWorkerV2.init_collective (stacks_A §1.3); the
    # trainers' venvs hold no vLLM (stateless_process_group.py:45-47): no engine library.
    return nccl4py_rank("ray::DTensorPolicyWorkerV2.init_collective", [], NEMO_TRAIN_INIT, NEMO_TRAIN_BCAST, root)


NEMO_DEFAULT = {
    "short": "NeMo-RL refit",
    "name": "NeMo-RL default refit: 2 DTensorPolicyWorkerV2 + ray::VllmGenerationWorker (sync, TP=1), nccl4py",
    # grpo.py:1577/1580 init_collective on both sides, world = T + G, root = train rank 0
    "ranks": [nemo_trainer(True), nemo_trainer(False),
              nccl4py_rank("ray::VllmGenerationWorker.init_collective", VLLM_ENGINE_LIBS,
                           NEMO_SYNC_OUTER + NEMO_GEN_EXT_INIT, NEMO_SYNC_RECV + NEMO_GEN_EXT_BCAST)],
    "purpose": "weight-update",
    "roles": ["training", "training", "inference"],
    "role_why": {0: "ray::DTensorPolicyWorkerV2", 2: "ray::VllmGenerationWorker"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "made by nccl4py"),
    "api": "nccl4py",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, A, B], "socket", "ranks on 2 hosts")],
}

NEMO_ASYNC = {
    "short": "NeMo-RL async engine",
    "name": "NeMo-RL async engine: DTensorPolicyWorkerV2 + VLLM::EngineCore (TP=1), nccl4py",
    # vllm_worker_async.py:980-988 init_collective_async -> AsyncLLM's EngineCore process
    "ranks": [nemo_trainer(True),
              nccl4py_rank("VLLM::EngineCore", VLLM_ENGINE_LIBS, ENGINECORE_OUTER + NEMO_GEN_EXT_INIT,
                           ENGINECORE_OUTER + NEMO_GEN_EXT_BCAST)],
    "purpose": "weight-update",
    "roles": ["training", "inference"],
    "role_why": {0: "ray::DTensorPolicyWorkerV2", 1: "VLLM::EngineCore"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "made by nccl4py"),
    "api": "nccl4py",
    "variants": [V("one host", None, "ipc", "all 2 ranks on one host: ipc"),
                 V("two hosts", [A, B], "socket", "ranks on 2 hosts")],
}

NEMO_TP2 = {
    "short": "NeMo-RL TP=2 engine",
    "name": "NeMo-RL TP=2 engine: DTensorPolicyWorkerV2 + 2 ray::RayWorkerProc.run (vLLM 0.25's Ray executor v2), "
            "nccl4py",
    # vllm_worker.py:417-422 distributed_executor_backend="ray"; ray_executor_v2.py:75, :189-199
    "ranks": [nemo_trainer(True)] + [
        nccl4py_rank("ray::RayWorkerProc.run", VLLM_ENGINE_LIBS, RAYWORKER_OUTER + NEMO_GEN_EXT_INIT,
                     RAYWORKER_OUTER + NEMO_GEN_EXT_BCAST) for _ in range(2)],
    "purpose": "weight-update",
    "roles": ["training", "inference", "inference"],
    "role_why": {0: "ray::DTensorPolicyWorkerV2", 1: "ray::RayWorkerProc.run"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "made by nccl4py"),
    "api": "nccl4py",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, B, B], "socket", "ranks on 2 hosts")],
}

# --- NeMo-RL refit_transport: nccl_reshard (stacks_A §1.4): one nccl4py group per train PP
# stage (nccl_reshard_weight_synchronizer.py:156-197): train lm_policy.py:1131 ->
# base_policy_worker.py:57-84 init_nccl_reshard_comm_group; gen vllm_worker.py:1222 ->
# vllm_backend.py:253-285; then per parameter megatron_policy_worker.py:2835 /
# vllm_backend.py:1096 nccl_reshard_refit -> weight_sync/xferdtensor.py:98 xferdtensor ->
# nccl.m2n.reshard (:165-174) in libnccl_m2n: ncclMemAlloc, ncclCommWindowRegister,
# ncclDevCommCreate, ncclCommSplit on the group's communicator.  nccl.m2n is loaded where it
# is installed: in both the Megatron trainer and the vLLM worker.
XFER = "nemo_rl/weight_sync/xferdtensor.py"
M2N_LIBS = ["nccl/m2n/libnccl_m2n.so"]


def reshard_rank(title, libs, outer_init, outer_m2n, root=False):
    steps = [{"op": "uid", "frames": outer_init + N4PY_UID}] if root else [{"op": "fetch"}]
    steps += [{"op": "init", "frames": outer_init + N4PY_INIT},
              {"op": "bcast", "sizes": [4], "frames": outer_init + N4PY_WARM},
              {"op": "m2n", "frames": outer_m2n + [(XFER, 170, "xferdtensor")]},
              {"op": "destroy"}]
    return Rank(title, "nccl4py", steps, libs)


def reshard_trainer(root):
    return reshard_rank("ray::MegatronPolicyWorker.init_nccl_reshard_comm_group", M2N_LIBS,
                        [(BPW, 80, "AbstractPolicyWorker.init_nccl_reshard_comm_group")],
                        [("nemo_rl/models/policy/workers/megatron_policy_worker.py", 2835,
                          "MegatronPolicyWorker.nccl_reshard_refit")], root)


NEMO_RESHARD = {
    "short": "NeMo-RL nccl_reshard",
    "name": "NeMo-RL nccl_reshard per-stage group: 2 MegatronPolicyWorker + VllmGenerationWorker, nccl4py, then m2n",
    "ranks": [reshard_trainer(True), reshard_trainer(False),
              reshard_rank("ray::VllmGenerationWorker.init_nccl_reshard_comm_group", VLLM_ENGINE_LIBS + M2N_LIBS,
                           [("nemo_rl/models/generation/vllm/vllm_worker.py", 1222,
                             "VllmGenerationWorker.init_nccl_reshard_comm_group")] + NEMO_SYNC_OUTER[1:] +
                           [("vllm/v1/serial_utils.py", 486, "run_method"),
                            (VBACK, 280, "VllmInternalWorkerExtension.init_nccl_reshard_comm_group")],
                           NEMO_SYNC_OUTER[1:] + [("vllm/v1/serial_utils.py", 486, "run_method"),
                                                  (VBACK, 1100, "VllmInternalWorkerExtension.nccl_reshard_refit")])],
    "purpose": "weight-update",
    "roles": ["training", "training", "inference"],
    "role_why": {0: "ray::MegatronPolicyWorker", 2: "ray::VllmGenerationWorker"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "made by nccl4py"),
    "api": "nccl4py",
    # one host: NCCL's whole API is needed (windows, device API, split): never ipc
    # (the reason names the rank and its evidence)
    "variants": [V("one host", None, "passthrough", r"rank \d.*nccl_reshard.*passthrough"),
                 # an explicit ipc is overridden the same way
                 V("one host, NCCLSHIM_WEIGHT_UPDATE=ipc", None, "passthrough", r"rank \d.*nccl_reshard.*passthrough",
                   {"NCCLSHIM_WEIGHT_UPDATE": "ipc"}),
                 V("two hosts", [A, A, B], "socket", "ranks on 2 hosts")],
    "m2n": True,
}

# --- vLLM's own weight-transfer API (stacks_A §2.1): the trainer, any process that imports
# vLLM (so vllm/_C is loaded), NCCLWeightTransferEngine.trainer_init (nccl_engine.py:272-321,
# "Trainer is always rank 0") -> _stateless_init_process_group (:323-340) ->
# PyNcclCommunicator; trainer_send_weights (:214-270, one broadcast per tensor :262-270).
# Workers: gpu_worker.py:1019-1031 Worker.init_weight_transfer_engine -> nccl_engine.py:124-152
# init_transfer_engine -> the same; receiving :196-206.  Titles VLLM::Worker_TP<r> (mp
# executor, multiproc_executor.py:973-1006).
WT = "vllm/distributed/weight_transfer/nccl_engine.py"
WT_TRAINER_INIT = [(WT, 318, "NCCLWeightTransferEngine.trainer_init"),
                   (WT, 339, "NCCLWeightTransferEngine._stateless_init_process_group")]
WT_WORKER_INIT = RAYWORKER_OUTER[1:] + [("vllm/v1/serial_utils.py", 486, "run_method"),
                                        ("vllm/v1/worker/gpu_worker.py", 1030, "Worker.init_weight_transfer_engine"),
                                        (WT, 150, "NCCLWeightTransferEngine.init_transfer_engine"),
                                        (WT, 339, "NCCLWeightTransferEngine._stateless_init_process_group")]
WT_WORKER_RECV = RAYWORKER_OUTER[1:] + [("vllm/v1/serial_utils.py", 486, "run_method"),
                                        ("vllm/v1/worker/gpu_worker.py", 1040, "Worker.update_weights"),  # ~1040
                                        (WT, 200, "NCCLWeightTransferEngine.receive_weights")]  # ~200
VLLM_WT = {
    "short": "vLLM weight transfer",
    "name": "vLLM weight-transfer API: python train.py (trainer_init, vllm imported) + VLLM::Worker_TP0/1, "
            "ctypes PyNccl",
    "ranks": [pynccl_rank("python", VLLM_TRAINER_LIBS, WT_TRAINER_INIT,
                          [(WT, 266, "NCCLWeightTransferEngine.trainer_send_weights")], root=True, script="train.py")] +
             [pynccl_rank("VLLM::Worker_TP%d" % t, VLLM_ENGINE_LIBS, WT_WORKER_INIT, WT_WORKER_RECV) for t in range(2)],
    "purpose": "weight-update",
    "roles": ["training", "inference", "inference"],
    # the trainer's process alone is inference (vllm/_C loaded, its title names no role): its
    # trainer_init frame makes it the trainer of this communicator
    "role_why": {0: "trainer_init.*vllm/_C", 1: "VLLM::Worker_TP0"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "made by ctypes"),
    "api": "ctypes",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, B, B], "socket", "ranks on 2 hosts")],
}

# --- vLLM's nccl_m2n weight-transfer engine (stacks_A §2.1, newer upstream, read from the
# index: vllm/distributed/weight_transfer/m2n_trainer.py @1ca6ac9f, m2n_engine.py @1825fdb3):
# M2NTrainerWeightTransferEngine.trainer_init runs on *every* trainer rank (ranks [0,
# num_trainer_ranks), the workers after them): import_m2n() (libnccl_m2n loaded), then the
# module's trainer_init -> stateless_init_process_group (nccl_common.py) -> PyNccl; each
# parameter then goes through nccl.m2n.reshard on comm_ptr(group) (_send), whose libnccl_m2n
# makes the calls of §1.4 on it.  Workers: init_weight_transfer_engine -> M2NWeightTransferEngine.
M2NT = "vllm/distributed/weight_transfer/m2n_trainer.py"
M2NE = "vllm/distributed/weight_transfer/m2n_engine.py"
NCOMMON = "vllm/distributed/weight_transfer/nccl_common.py"
M2N_TRAINER_INIT = [(M2NT, 214, "M2NTrainerWeightTransferEngine.trainer_init"),  # ~214
                    (NCOMMON, 120, "trainer_init"), (NCOMMON, 160, "stateless_init_process_group")]  # ~120, ~160
M2N_WORKER_INIT = RAYWORKER_OUTER[1:] + [("vllm/v1/serial_utils.py", 486, "run_method"),
                                         ("vllm/v1/worker/gpu_worker.py", 1030, "Worker.init_weight_transfer_engine"),
                                         (M2NE, 150, "M2NWeightTransferEngine.init_transfer_engine"),  # ~150
                                         (NCOMMON, 140, "worker_init_process_group"),  # ~140
                                         (NCOMMON, 160, "stateless_init_process_group")]


def m2n_rank(title, libs, outer_init, outer_m2n, root, script="rank.py"):
    steps = [{"op": "uid", "frames": outer_init + PYNCCL_UID}] if root else [{"op": "fetch"}]
    steps += [{"op": "init", "frames": outer_init + PYNCCL_INIT},
              {"op": "allreduce", "count": 1, "dtype": 7, "frames": outer_init + PYNCCL_WARM},
              {"op": "m2n", "frames": outer_m2n}, {"op": "destroy"}]
    return Rank(title, "ctypes", steps, libs, script)


VLLM_M2N = {
    "short": "vLLM nccl_m2n engine",
    "name": "vLLM nccl_m2n weight transfer: 2 trainer ranks (python train.py, vllm and nccl.m2n imported) + "
            "VLLM::Worker_TP0/1, ctypes PyNccl, then m2n.reshard",
    "ranks": [m2n_rank("python", VLLM_TRAINER_LIBS + M2N_LIBS, M2N_TRAINER_INIT,
                       [(M2NT, 330, "M2NTrainerWeightTransferEngine.send_weights"),  # ~330
                        (M2NT, 360, "M2NTrainerWeightTransferEngine._send")], r == 0, "train.py")  # ~360
              for r in range(2)] +
             [m2n_rank("VLLM::Worker_TP%d" % t, VLLM_ENGINE_LIBS + M2N_LIBS, M2N_WORKER_INIT,
                       WT_WORKER_RECV[:-1] + [(M2NE, 260, "M2NWeightTransferEngine.receive_weights")], False)  # ~260
              for t in range(2)],
    "purpose": "weight-update",
    "roles": ["training", "training", "inference", "inference"],
    "role_why": {0: "trainer_init", 1: "trainer_init", 2: "VLLM::Worker_TP0"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "made by ctypes"),
    "api": "ctypes",
    "variants": [V("one host", None, "passthrough", r"rank \d.*m2n.*passthrough"),
                 V("two hosts", [A, A, B, B], "socket", "ranks on 2 hosts")],
    "m2n": True,
}

# --- vLLM's own TP group (stacks_A §2.3, stacks_B §1.8): at worker start,
# gpu_worker.py:240 init_device -> :1164 init_worker_distributed_environment (-> :1194
# ensure_model_parallel_initialized) -> parallel_state.py initialize_model_parallel ->
# GroupCoordinator (:320-381) -> CudaCommunicator (cuda_communicator.py:73-80) ->
# PyNcclCommunicator(cpu_group).  Made while the title is still VLLM::Worker (:606/:613).
PSTATE = "vllm/distributed/parallel_state.py"
VLLM_TP_OUTER = [("vllm/v1/worker/gpu_worker.py", 240, "Worker.init_device"),
                 ("vllm/v1/worker/gpu_worker.py", 1194, "init_worker_distributed_environment"),
                 (PSTATE, 1620, "ensure_model_parallel_initialized"),  # ~1620
                 (PSTATE, 1530, "initialize_model_parallel"),  # ~1530
                 (PSTATE, 1110, "init_model_parallel_group"),  # ~1110
                 (PSTATE, 375, "GroupCoordinator.__init__"),
                 ("vllm/distributed/device_communicators/cuda_communicator.py", 75, "CudaCommunicator.__init__")]
VLLM_TP_USE = [("vllm/distributed/device_communicators/cuda_communicator.py", 140,  # ~140
                "CudaCommunicator.all_reduce")]
VLLM_TP = {
    "short": "vLLM TP group",
    "name": "vLLM's own TP group: 2 VLLM::Worker, ctypes PyNccl (an engine's group: untouched)",
    "ranks": [pynccl_rank("VLLM::Worker", VLLM_ENGINE_LIBS, VLLM_TP_OUTER, VLLM_TP_USE, root=r == 0) for r in range(2)],
    "purpose": "inference",
    "roles": ["inference", "inference"],
    "role_why": {0: "VLLM::Worker", 1: "VLLM::Worker"},
    "purpose_why": "inference",
    "uid": (True, "made by ctypes"),
    "api": "ctypes",
    "variants": [V("one host", None, "passthrough", "")],
    "app_calls": True,
}

# --- SGLang's own TP group (stacks_B §3.5): model_runner.py:882-895 init_torch_distributed ->
# distributed/bootstrap.py:211-266 _init_parallel_groups -> parallel_state.py:2043
# initialize_model_parallel -> :1671-1710 init_model_parallel_group -> GroupCoordinator
# (:422-427) -> its own PyNcclCommunicator (pynccl.py:29-126: ncclGetUniqueId :83-85,
# ncclCommInitRank :110-113, warm-up all_reduce :114-121), ctypes.  Titles sglang::scheduler_TP<t>.
SGP = "sglang/srt/distributed/device_communicators/pynccl.py"
SGW = "sglang/srt/distributed/device_communicators/pynccl_wrapper.py"
SGL_TP_OUTER = [("sglang/srt/model_executor/model_runner.py", 890, "ModelRunner.init_torch_distributed"),
                ("sglang/srt/distributed/bootstrap.py", 230, "_init_parallel_groups"),
                ("sglang/srt/distributed/parallel_state.py", 2060, "initialize_model_parallel"),
                ("sglang/srt/distributed/parallel_state.py", 1700, "init_model_parallel_group"),
                ("sglang/srt/distributed/parallel_state.py", 425, "GroupCoordinator.__init__")]
SGL_TP = {
    "short": "SGLang TP group",
    "name": "SGLang's own TP group: sglang::scheduler_TP0/1, its ctypes PyNccl (an engine's group: untouched)",
    "ranks": [Rank("sglang::scheduler_TP%d" % r, "ctypes",
                   ([{"op": "uid", "frames": SGL_TP_OUTER + [(SGP, 84, "PyNcclCommunicator.__init__"),
                                                               (SGW, 300, "NCCLLibrary.ncclGetUniqueId")]}]
                    if r == 0 else [{"op": "fetch"}]) +
                   [{"op": "init", "frames": SGL_TP_OUTER + [(SGP, 111, "PyNcclCommunicator.__init__"),
                                                             (SGW, 310, "NCCLLibrary.ncclCommInitRank")]},
                    {"op": "allreduce", "count": 1, "dtype": 7,
                     "frames": SGL_TP_OUTER + [(SGP, 118, "PyNcclCommunicator.__init__"),
                                               (SGP, 150, "PyNcclCommunicator.all_reduce"),
                                               (SGW, 320, "NCCLLibrary.ncclAllReduce")]},
                    {"op": "destroy"}], SGL_LIBS) for r in range(2)],
    "purpose": "inference",
    "roles": ["inference", "inference"],
    "role_why": {0: "sglang::scheduler_TP0", 1: "sglang::scheduler_TP1"},
    "purpose_why": "inference",
    "uid": (True, "made by ctypes"),
    "api": "ctypes",
    "variants": [V("one host", None, "passthrough", "")],
    "app_calls": True,
}

# --- OpenRLHF (stacks_B §1): trainer DS rank 0, ray::PolicyModelActor, imports vllm (vllm/_C
# loaded, §1.6); ppo_actor.py:584 init_model_from_pretrained -> :106 ActorPPOTrainer.__init__
# -> :149 _init_vllm_sync_group -> distributed_util.py:25 stateless_init_process_group ->
# PyNcclCommunicator; per sync ppo_actor.py:645-646 -> :408-489 broadcast_to_vllm ->
# :420-436 _broadcast_param, one broadcast per parameter (:435).  vLLM side, TP=1:
# VLLM::EngineCore, core.py:779 collective_rpc -> uniproc_executor.py:80 ->
# serial_utils.py:486 run_method -> vllm_worker_wrap.py:20 WorkerWrap.init_process_group ->
# distributed_util.py:25; update_weight :32-50 (broadcast :46).  world = 1 + engines x TP.
PPO = "openrlhf/trainer/ray/ppo_actor.py"
OR_DIST = "openrlhf/utils/distributed_util.py"
OR_WRAP = "openrlhf/trainer/ray/vllm_worker_wrap.py"
OR_TRAIN_INIT = [(PPO, 584, "PolicyModelActor.init_model_from_pretrained"), (PPO, 106, "ActorPPOTrainer.__init__"),
                 (PPO, 149, "ActorPPOTrainer._init_vllm_sync_group"), (OR_DIST, 25, "stateless_init_process_group")]
OR_TRAIN_BCAST = [(PPO, 646, "PolicyModelActor.broadcast_to_vllm"), (PPO, 484, "ActorPPOTrainer.broadcast_to_vllm"),
                  (PPO, 435, "ActorPPOTrainer._broadcast_param")]
OR_ENGINE_INIT = ENGINECORE_OUTER + [("vllm/v1/serial_utils.py", 486, "run_method"),
                                     (OR_WRAP, 20, "WorkerWrap.init_process_group"),
                                     (OR_DIST, 25, "stateless_init_process_group")]
OR_ENGINE_RECV = ENGINECORE_OUTER + [("vllm/v1/serial_utils.py", 486, "run_method"),
                                     (OR_WRAP, 46, "WorkerWrap.update_weight")]
OPENRLHF = {
    "short": "OpenRLHF",
    "name": "OpenRLHF: ray::PolicyModelActor (vllm/_C loaded) + 2 VLLM::EngineCore (TP=1), ctypes PyNccl",
    "ranks": [pynccl_rank("ray::PolicyModelActor.init_model_from_pretrained", VLLM_TRAINER_LIBS, OR_TRAIN_INIT,
                          OR_TRAIN_BCAST, root=True)] +
             [pynccl_rank("VLLM::EngineCore", VLLM_ENGINE_LIBS, OR_ENGINE_INIT, OR_ENGINE_RECV) for _ in range(2)],
    "purpose": "weight-update",
    "roles": ["training", "inference", "inference"],
    "role_why": {0: "ray::PolicyModelActor.*training", 1: "VLLM::EngineCore"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "made by ctypes"),
    "api": "ctypes",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, B, B], "socket", "ranks on 2 hosts"),
                 # a typo in a policy fails open (the refit passes through), never silently:
                 # --check, what users put in CI, says so
                 V("one host, a malformed NCCLSHIM_RULES", None, "passthrough", "policy error, failing open",
                   {"NCCLSHIM_RULES": "purpose=weight-update:explode"}, r"malformed setting.*NCCLSHIM_RULES")],
}

# --- verl's NCCL checkpoint engine (stacks_A §3): senders = actor rank 0 and the relays on
# its node (multi_sender, nccl_checkpoint_engine.py:142, :200-219), then every rollout GPU's
# CheckpointEngineWorker (base.py:303-378).  Trainer title ray::WorkerDict.<role>_execute_
# checkpoint_engine (single_controller/ray/base.py:958, :1004); engine_workers.py:822
# execute_checkpoint_engine -> nccl_checkpoint_engine.py:279-312 init_process_group ->
# collective.init_collective_group (:298, lazy), collective.barrier (:310): Ray's NCCLGroup
# makes the communicator at that first collective: _get_nccl_collective_communicator ->
# _generate_nccl_uid (cupy get_unique_id, group rank 0) -> groupStart, NcclCommunicator
# (ncclCommInitRank), groupEnd; the barrier is an all-reduce of one int64.  Weights:
# send_weights (:315) / receive -> BroadcastOperation._run (:95-106) -> collective.broadcast.
# Every verl process imports vllm through verl.checkpoint_engine (hccl_checkpoint_engine.py:23, §3.4).
NCE = "verl/checkpoint_engine/nccl_checkpoint_engine.py"
RAYC = "ray/util/collective/collective.py"
NCG = "ray/util/collective/collective_group/nccl_collective_group.py"
NUTIL = "ray/util/collective/collective_group/nccl_util.py"
# Ray's lines are ~ (the notes read one stored version of nccl_collective_group.py).
VERL_TRAIN_OUTER = [("verl/workers/engine_workers.py", 822, "ActorRolloutRefWorker.execute_checkpoint_engine")]
VERL_ROLL_OUTER = [("verl/checkpoint_engine/base.py", 350, "CheckpointEngineWorker.execute_checkpoint_engine")]
VERL_BARRIER = [(NCE, 310, "NCCLCheckpointEngine.init_process_group"), (RAYC, 480, "barrier"),
                (NCG, 240, "NCCLGroup.barrier"), (NCG, 260, "NCCLGroup.allreduce")]
VERL_CREATE = [(NCG, 560, "NCCLGroup._collective")]  # -> _get_nccl_collective_communicator
VERL_GET = (NCG, "NCCLGroup._get_nccl_collective_communicator")


def verl_rank(title, outer, outer_bcast, root):
    b = outer + VERL_BARRIER + VERL_CREATE
    steps = ([{"op": "uid", "frames": b + [(VERL_GET[0], 430, VERL_GET[1]), (NCG, 700, "NCCLGroup._generate_nccl_uid"),
                                           (NUTIL, 110, "get_nccl_unique_id")]}] if root else [{"op": "fetch"}])
    steps += [{"op": "group_start", "frames": b + [(VERL_GET[0], 440, VERL_GET[1]), (NUTIL, 150, "groupStart")]},
              {"op": "init", "frames": b + [(VERL_GET[0], 446, VERL_GET[1]), (NUTIL, 120, "create_nccl_communicator")]},
              {"op": "group_end", "frames": b + [(VERL_GET[0], 449, VERL_GET[1]), (NUTIL, 156, "groupEnd")]},
              {"op": "allreduce", "count": 1, "dtype": 4,
               "frames": outer + VERL_BARRIER + [(NCG, 575, "NCCLGroup._collective"),
                                                 (NCG, 272, "NCCLGroup.allreduce.<locals>.collective_fn")]},
              {"op": "bcast", "sizes": REFIT,
               "frames": outer_bcast + [(NCE, 100, "BroadcastOperation._run"), (RAYC, 520, "broadcast"),
                                        (NCG, 300, "NCCLGroup.broadcast"), (NCG, 575, "NCCLGroup._collective"),
                                        (NCG, 312, "NCCLGroup.broadcast.<locals>.collective_fn")]},
              {"op": "destroy"}]
    return Rank(title, "cupy", steps, VLLM_TRAINER_LIBS)


VERL_SEND = [("verl/workers/engine_workers.py", 760, "ActorRolloutRefWorker.update_weights"),
             (NCE, 330, "NCCLCheckpointEngine.send_weights")]
VERL_RECV = [("verl/checkpoint_engine/base.py", 360, "CheckpointEngineWorker.update_weights"),
             (NCE, 460, "NCCLCheckpointEngine.receive_weights")]  # ~460
VERL = {
    "short": "verl checkpoint engine",
    "name": "verl checkpoint engine: 2 ray::WorkerDict senders + 2 ray::CheckpointEngineWorker (vllm/_C in all), "
            "Ray collective on CuPy",
    "ranks": [verl_rank("ray::WorkerDict.actor_rollout_ref_execute_checkpoint_engine", VERL_TRAIN_OUTER, VERL_SEND,
                        r == 0) for r in range(2)] +
             [verl_rank("ray::CheckpointEngineWorker.execute_checkpoint_engine", VERL_ROLL_OUTER, VERL_RECV, False)
              for _ in range(2)],
    "purpose": "weight-update",
    "roles": ["training", "training", "inference", "inference"],
    "role_why": {0: "ray::WorkerDict.*training", 2: "ray::CheckpointEngineWorker"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "made by cupy"),
    "api": "cupy",
    "variants": [V("one host", None, "ipc", "all 4 ranks on one host: ipc"),
                 V("two hosts", [A, A, B, B], "socket", "ranks on 2 hosts")],
}

# --- torch's ProcessGroupNCCL made lazily (stacks_B §2.2): the group is made without a
# device, the communicator at its first collective, inside libtorch: rank 0's
# ncclGetUniqueId under that collective's Python frames, then ncclCommInitRankConfig.
TORCH_BCAST = [("torch/distributed/c10d_logger.py", 81, "_exception_logger.<locals>.wrapper"),
               ("torch/distributed/distributed_c10d.py", 2851, "broadcast")]
TORCH_ALLREDUCE = [("torch/distributed/c10d_logger.py", 81, "_exception_logger.<locals>.wrapper"),
                   ("torch/distributed/distributed_c10d.py", 2950, "all_reduce")]


def torch_rank(title, libs, outer_pg, outer_bcast, sizes=REFIT):
    return Rank(title, "torch", [{"op": "pg", "frames": outer_pg},
                                 {"op": "bcast", "sizes": sizes, "frames": outer_bcast + TORCH_BCAST},
                                 {"op": "destroy"}], libs)


# slime (stacks_B §2): trainer ray::MegatronTrainRayActor (actor.py:58), which imports sglang
# and so loads sgl_kernel (§2.6); the group is made (TCPStore only) in
# connect_rollout_engines_from_distributed (update_weight_from_distributed.py:269-316 ->
# distributed_utils.py:55-108, no device_id) inside the first update_weights
# (actor.py:596-657), its communicator at the first broadcast (§2.2's stack).  SGLang side:
# sglang::scheduler_TP<t> (scheduler.py:4554), its first broadcast in
# update_weights_from_distributed (§2.3's stack).  world = 1 + engine GPUs.
UWD = "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py"
SLIME_PG = [("slime/backends/megatron_utils/actor.py", 627, "MegatronTrainRayActor.update_weights"),
            (UWD, 88, "UpdateWeightFromDistributed.connect_rollout_engines"),
            (UWD, 308, "connect_rollout_engines_from_distributed"),
            ("slime/utils/distributed_utils.py", 95, "init_process_group")]
SLIME_BCAST = [("slime/backends/megatron_utils/actor.py", 640, "MegatronTrainRayActor.update_weights"),
               (UWD, 124, "UpdateWeightFromDistributed.update_weights"),
               (UWD, 146, "UpdateWeightFromDistributed._send_weights"),
               (UWD, 254, "UpdateWeightFromDistributed._update_bucket_weights_from_distributed"),
               (UWD, 352, "update_weights_from_distributed"),
               ("slime/utils/reloadable_process_group.py", 224, "monkey_patch_torch_dist.<locals>.new_function")]
SGL_SCHED = [("sglang/srt/managers/scheduler.py", 1676, "Scheduler.process_input_requests"),
             ("sglang/utils.py", 634, "TypeBasedDispatcher.__call__")]
SGL_PG = SGL_SCHED + [("sglang/srt/managers/scheduler_components/weight_updater.py", 127,
                       "SchedulerWeightUpdaterManager.init_weights_update_group"),
                      ("sglang/srt/managers/tp_worker.py", 124, "BaseTpWorker.init_weights_update_group"),
                      ("sglang/srt/model_executor/model_runner_components/weight_updater.py", 80,
                       "WeightUpdater.init_weights_update_group"),
                      ("sglang/srt/utils/common.py", 2480, "init_custom_process_group")]
SGL_RECV = SGL_SCHED + [("sglang/srt/managers/scheduler_components/weight_updater.py", 144,
                         "SchedulerWeightUpdaterManager.update_weights_from_distributed"),
                        ("sglang/srt/managers/tp_worker.py", 166, "BaseTpWorker.update_weights_from_distributed"),
                        ("sglang/srt/model_executor/model_runner_components/weight_updater.py", 219,
                         "WeightUpdater.update_weights_from_distributed")]
SLIME = {
    "short": "slime",
    "name": "slime: ray::MegatronTrainRayActor.update_weights (sgl_kernel loaded) + sglang::scheduler_TP0/1, "
            "torch ProcessGroupNCCL made at the first broadcast",
    "ranks": [torch_rank("ray::MegatronTrainRayActor.update_weights", SGL_LIBS, SLIME_PG, SLIME_BCAST)] +
             [torch_rank("sglang::scheduler_TP%d" % t, SGL_LIBS, SGL_PG, SGL_RECV) for t in range(2)],
    "purpose": "weight-update",
    "roles": ["training", "inference", "inference"],
    "role_why": {0: "ray::MegatronTrainRayActor.*training", 1: "sglang::scheduler_TP0"},
    "purpose_why": "training and inference ranks",
    # made inside libtorch under update_weights: marked, and the record says why
    "uid": (True, "update_weights"),
    "api": "torch",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, B, B], "socket", "ranks on 2 hosts")],
}

# SGLang's own API (stacks_B §3.1-3.3), as its own test drives it
# (sgl-project/sglang test/srt/rl/test_update_weights_from_distributed.py @372461d4): the
# trainer is an mp.spawn child (init_process -> init_process_hf: init_custom_process_group,
# then torch.distributed.broadcast per parameter, ~l.177); the engine's schedulers join
# through init_weights_update_group (weight_updater.py:48-92 -> common.py:2424-2492
# init_custom_process_group, no device_id) and receive in update_weights_from_distributed
# (:183-240).  The trainer's title is the spawn child's command line: no role.
SPAWN = "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7) " \
        "--multiprocessing-fork"
SGL_TEST = "test/srt/rl/test_update_weights_from_distributed.py"
SGL_OWN_TRAIN = [("torch/multiprocessing/spawn.py", 90, "_wrap"), (SGL_TEST, 75, "init_process")]
SGLANG_OWN = {
    "short": "SGLang weight API",
    "name": "SGLang's own API: a spawned trainer (its test's init_process_hf) + sglang::scheduler_TP0/1, torch",
    "ranks": [torch_rank(SPAWN, [], SGL_OWN_TRAIN + [(SGL_TEST, 157, "init_process_hf"),
                                                     ("sglang/srt/utils/common.py", 2480, "init_custom_process_group")],
                         SGL_OWN_TRAIN + [(SGL_TEST, 177, "init_process_hf")])] +
             [torch_rank("sglang::scheduler_TP%d" % t, SGL_LIBS, SGL_PG, SGL_RECV) for t in range(2)],
    "purpose": "weight-update",
    "roles": ["unknown", "inference", "inference"],
    "role_why": {1: "sglang::scheduler_TP0"},
    "purpose_why": "update_weights",
    "uid": (True, "update_weights"),
    "api": "torch",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, B, B], "socket", "ranks on 2 hosts")],
}

# --- Training only (stacks_A §1.6: torch.distributed.init_process_group("nccl") with no
# device_id, lazy, automodel/setup.py:453, dtensor_policy_worker.py:262): a torch group of
# two trainers whose first collective is the gradient all-reduce: its ID is made by torch
# with no weight-update evidence, so it stays unmarked; no rendezvous, and NCCL sees exactly
# the application's calls.
TRAIN_ONLY = {
    "short": "training only",
    "name": "training only: 2 ray::DTensorPolicyWorkerV2.train, torch group (lazy), gradient all-reduce",
    "ranks": [Rank("ray::DTensorPolicyWorkerV2.train", "torch",
                   [{"op": "pg", "frames": [("nemo_rl/models/automodel/setup.py", 453, "setup_distributed")]},
                    {"op": "allreduce", "count": 1024, "dtype": 7,
                     "frames": [("nemo_rl/models/policy/workers/dtensor_policy_worker_v2.py", 700,  # ~700
                                 "DTensorPolicyWorkerV2.train"),
                                ("torch/nn/utils/clip_grad.py", 90, "clip_grad_norm_")] + TORCH_ALLREDUCE},
                    {"op": "destroy"}]) for _ in range(2)],
    "purpose": "training",
    "roles": ["training", "training"],
    "role_why": {0: "ray::DTensorPolicyWorkerV2", 1: "ray::DTensorPolicyWorkerV2"},
    "purpose_why": "torch",
    "uid": (False, "no weight-update evidence"),
    "api": "torch",
    "variants": [V("one host", None, "passthrough", "")],
    "app_calls": True,
    "no_rendezvous": True,
}

# --- Hugging Face TRL's GRPO with `trl vllm-serve` (huggingface/trl main, read from the index:
# trl/scripts/vllm_serve.py, trl/extras/vllm_client.py; lines ~).  The server's llm_worker
# makes an LLM with worker_extension_cls=WeightSyncWorkerExtension; the trainer's
# VLLMClient.init_communicator asks the server (HTTP) to call init_communicator on every worker
# through LLM.collective_rpc, then joins itself: a StatelessProcessGroup and vLLM's
# PyNcclCommunicator, the workers ranks 0..W-1 (rank 0 makes the ID), the trainer the last rank.
# Weights: GRPOTrainer._move_model_to_vllm -> VLLMClient.update_named_param -> broadcast from the
# trainer (the replay broadcasts from rank 0: the group's shape, not the direction, is tested).
# The trainer is `python train.py` (accelerate launch / torchrun), vllm/_C loaded by the
# client's import; the workers VLLM::Worker_TP<r> (TP=2, mp executor).  No name here matches a
# default pattern: the engine's titles and frames decide (issue 43).
TRL_EXT = "trl/scripts/vllm_serve.py"
TRL_CLIENT = "trl/extras/vllm_client.py"
MP_BUSY = [("vllm/v1/executor/multiproc_executor.py", 880, "WorkerProc.worker_busy_loop"),
           ("vllm/v1/serial_utils.py", 486, "run_method")]
TRL = {
    "short": "TRL GRPO + vllm-serve",
    "name": "TRL GRPO: python train.py (vllm imported) + trl vllm-serve's VLLM::Worker_TP0/1 with its weight-sync "
            "worker extension, ctypes PyNccl",
    "ranks": [pynccl_rank("VLLM::Worker_TP%d" % t, VLLM_ENGINE_LIBS,
                          MP_BUSY + [(TRL_EXT, 120, "WeightSyncWorkerExtension.init_communicator")],  # ~120
                          MP_BUSY + [(TRL_EXT, 160, "WeightSyncWorkerExtension.update_named_param")],  # ~160
                          root=t == 0) for t in range(2)] +
             [pynccl_rank("python", VLLM_TRAINER_LIBS,
                          [("trl/trainer/grpo_trainer.py", 640, "GRPOTrainer.__init__"),  # ~640
                           (TRL_CLIENT, 420, "VLLMClient.init_communicator")],  # ~420
                          [("trl/trainer/grpo_trainer.py", 1100, "GRPOTrainer._move_model_to_vllm"),  # ~1100
                           (TRL_CLIENT, 470, "VLLMClient.update_named_param")], script="train.py")],  # ~470
    "purpose": "weight-update",
    # the trainer reads as inference by vllm/_C alone (weak): the structure decides, not the roles
    "roles": ["inference", "inference", "inference"],
    "role_why": {0: "VLLM::Worker_TP0", 2: "loaded library.*vllm/_C"},
    "purpose_why": r"ranks 0-1 carry the engine's own evidence \(rank 0: title 'VLLM::Worker_TP0.*rank 2 does not "
                   r"\(rank 2: only an engine library loaded.*a bridge",
    "uid": (True, "made by ctypes"),
    "api": "ctypes",
    "variants": [V("one host", None, "ipc", r"2 engine ranks \(ranks 0-1\) beside 1 other, all 3 ranks on one host: ipc"),
                 V("two hosts", [A, A, B], "socket", "ranks on 2 hosts")],
}

# --- Invented stacks (issue 43): only what the engine and the platform set is real (vLLM's
# titles, its executor and collective_rpc frames, its native libraries, the bindings); every
# name the RL stack chose (package, functions, Ray actor classes, titles) is made up, and none
# matches a default pattern.  The group's structure must decide.

# torch, made lazily at the trainer's first broadcast, the trainer a Ray actor of an invented
# class that imports vLLM (vllm/_C): its torch IDs are marked for the engine evidence in its
# process; the engine's side VLLM::Worker_TP<r> runs an invented worker extension.
ORCA_PG = [("orca/learner.py", 50, "Seal.publish"), ("orca/links.py", 20, "open_link")]
ORCA_BCAST = [("orca/learner.py", 80, "Seal.publish")]
ORCA_ENGINE_PG = MP_BUSY + [("orca/ext.py", 30, "Flipper.join_link"), ("orca/links.py", 20, "open_link")]
ORCA_ENGINE_RECV = MP_BUSY + [("orca/ext.py", 60, "Flipper.take")]
INVENTED_TORCH = {
    "short": "invented torch bridge",
    "name": "invented: ray::Seal.publish (vllm imported) + VLLM::Worker_TP0/1 with an invented extension, torch "
            "ProcessGroupNCCL made at the first broadcast",
    "ranks": [torch_rank("ray::Seal.publish", VLLM_TRAINER_LIBS, ORCA_PG, ORCA_BCAST)] +
             [torch_rank("VLLM::Worker_TP%d" % t, VLLM_ENGINE_LIBS, ORCA_ENGINE_PG, ORCA_ENGINE_RECV) for t in range(2)],
    "purpose": "weight-update",
    "roles": ["inference", "inference", "inference"],
    "role_why": {0: "loaded library.*vllm/_C", 1: "VLLM::Worker_TP0"},
    "purpose_why": r"ranks 1-2 carry the engine's own evidence.*rank 0 does not.*a bridge",
    "uid": (True, "engine evidence.*engine library loaded"),
    "api": "torch",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, B, B], "socket", "ranks on 2 hosts")],
}

# nccl4py's scalable init (NeMo-RL's shape), every name invented: the trainers' Ray class
# imports no engine; the engine side is a Ray actor of an invented class that runs vLLM's sync
# engine in-process (LLM.collective_rpc -> the uniproc executor -> an invented extension).
HERON_TRAIN = [("heron/coach.py", 40, "Coach.link")]
HERON_TRAIN_SEND = [("heron/coach.py", 70, "Coach.ship")]
HERON_GEN = [("heron/actor.py", 30, "Player.link"), ("vllm/entrypoints/llm.py", 1100, "LLM.collective_rpc"),
             ("vllm/v1/executor/uniproc_executor.py", 80, "UniProcExecutor.collective_rpc"),
             ("vllm/v1/serial_utils.py", 486, "run_method"), ("heron/ext.py", 20, "Plug.link")]
HERON_GEN_RECV = [("heron/actor.py", 60, "Player.absorb"), ("vllm/entrypoints/llm.py", 1100, "LLM.collective_rpc"),
                  ("vllm/v1/executor/uniproc_executor.py", 80, "UniProcExecutor.collective_rpc"),
                  ("vllm/v1/serial_utils.py", 486, "run_method"), ("heron/ext.py", 50, "Plug.absorb")]


def heron_rank(title, libs, outer, outer_bcast, root=False):
    steps = [{"op": "uid", "frames": outer + [("heron/mesh.py", 10, "Mesh.found")] + N4PY_UID[1:]}] if root \
        else [{"op": "fetch"}]
    steps += [{"op": "init", "frames": outer + [(NCOMM, 330, "Communicator.init"), (NCOMM, 441, "Communicator.initialize")]},
              {"op": "bcast", "sizes": REFIT, "frames": outer_bcast + [(NCOMM, 600, "Communicator.broadcast")]},
              {"op": "destroy"}]
    return Rank(title, "nccl4py", steps, libs)


INVENTED_N4PY = {
    "short": "invented nccl4py bridge",
    "name": "invented: 2 ray::Coach.link (no engine) + ray::Player.link hosting vLLM's sync engine, nccl4py "
            "scalable init",
    "ranks": [heron_rank("ray::Coach.link", [], HERON_TRAIN, HERON_TRAIN_SEND, root=r == 0) for r in range(2)] +
             [heron_rank("ray::Player.link", VLLM_ENGINE_LIBS, HERON_GEN, HERON_GEN_RECV)],
    "purpose": "weight-update",
    "roles": ["unknown", "unknown", "inference"],
    "role_why": {0: "no NCCLSHIM_ROLE", 2: "loaded library.*vllm/_C"},
    "purpose_why": r"rank 2 carries the engine's own evidence \(rank 2: Python frame '.*run_method'.*ranks 0-1 do not",
    "uid": (True, "made by nccl4py"),
    "api": "nccl4py",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, A, B], "socket", "ranks on 2 hosts")],
}

# CuPy through Ray collective, called from an invented worker extension under vLLM's
# collective_rpc in VLLM::EngineCore (the shape of OpenRLHF's --vllm.sync_with_ray), the
# trainer an invented Ray class that imports vLLM; Ray makes the communicator at a barrier.
KITE_OUTER = [("kite/teacher.py", 30, "Owl.open_bus")]
KITE_SEND = [("kite/teacher.py", 60, "Owl.pour")]
KITE_ENGINE = ENGINECORE_OUTER + [("vllm/v1/serial_utils.py", 486, "run_method"), ("kite/ext.py", 30, "Nest.open_bus")]
KITE_ENGINE_RECV = ENGINECORE_OUTER + [("vllm/v1/serial_utils.py", 486, "run_method"), ("kite/ext.py", 60, "Nest.fill")]
KITE_BARRIER = [("kite/bus.py", 40, "Bus.open"), (RAYC, 480, "barrier"), (NCG, 240, "NCCLGroup.barrier"),
                (NCG, 260, "NCCLGroup.allreduce")]


def kite_rank(title, outer, outer_bcast, root):
    """verl_rank's Ray collective calls (the platform's), under invented callers."""
    b = outer + KITE_BARRIER + VERL_CREATE
    steps = ([{"op": "uid", "frames": b + [(VERL_GET[0], 430, VERL_GET[1]), (NCG, 700, "NCCLGroup._generate_nccl_uid"),
                                           (NUTIL, 110, "get_nccl_unique_id")]}] if root else [{"op": "fetch"}])
    steps += [{"op": "group_start", "frames": b + [(VERL_GET[0], 440, VERL_GET[1]), (NUTIL, 150, "groupStart")]},
              {"op": "init", "frames": b + [(VERL_GET[0], 446, VERL_GET[1]), (NUTIL, 120, "create_nccl_communicator")]},
              {"op": "group_end", "frames": b + [(VERL_GET[0], 449, VERL_GET[1]), (NUTIL, 156, "groupEnd")]},
              {"op": "allreduce", "count": 1, "dtype": 4,
               "frames": outer + KITE_BARRIER + [(NCG, 575, "NCCLGroup._collective"),
                                                 (NCG, 272, "NCCLGroup.allreduce.<locals>.collective_fn")]},
              {"op": "bcast", "sizes": REFIT,
               "frames": outer_bcast + [(RAYC, 520, "broadcast"), (NCG, 300, "NCCLGroup.broadcast"),
                                        (NCG, 575, "NCCLGroup._collective"),
                                        (NCG, 312, "NCCLGroup.broadcast.<locals>.collective_fn")]},
              {"op": "destroy"}]
    return Rank(title, "cupy", steps, VLLM_TRAINER_LIBS)


INVENTED_CUPY = {
    "short": "invented CuPy bridge",
    "name": "invented: ray::Owl.open_bus (vllm imported) + 2 VLLM::EngineCore with an invented extension, Ray "
            "collective on CuPy",
    "ranks": [kite_rank("ray::Owl.open_bus", KITE_OUTER, KITE_SEND, True)] +
             [kite_rank("VLLM::EngineCore", KITE_ENGINE, KITE_ENGINE_RECV, False) for _ in range(2)],
    "purpose": "weight-update",
    "roles": ["inference", "inference", "inference"],
    "role_why": {0: "loaded library.*vllm/_C", 1: "VLLM::EngineCore"},
    "purpose_why": r"ranks 1-2 carry the engine's own evidence.*rank 0 does not.*a bridge",
    "uid": (True, "made by cupy"),
    "api": "cupy",
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc"),
                 V("two hosts", [A, B, B], "socket", "ranks on 2 hosts")],
}

# torch, lazy, the trainer a plain process that imports no engine (SGLang's own test trainer's
# shape, its names invented): its ID stays unmarked, every rank passes through alone, and the
# engine's workers say so: an `unrecognized` record, one stderr line naming NCCLSHIM_ROLE=training
# for the ID's maker, `--check` fails.  Then the same with that setting: protected.
MOTH_PG = [("moth/run.py", 20, "main"), ("moth/pipe.py", 30, "dial")]
MOTH_BCAST = [("moth/run.py", 50, "main")]
MOTH_ENGINE_PG = MP_BUSY + [("moth/ext.py", 20, "Lamp.dial"), ("moth/pipe.py", 30, "dial")]
MOTH_ENGINE_RECV = MP_BUSY + [("moth/ext.py", 50, "Lamp.glow")]
INVENTED_UNMARKED = {
    "short": "invented bridge, no evidence at its maker",
    "name": "invented: python run.py (no engine imported) + VLLM::Worker_TP0/1, torch made at the trainer's first "
            "broadcast: unmarked, loud",
    "ranks": [torch_rank("python", [], MOTH_PG, MOTH_BCAST)] +
             [torch_rank("VLLM::Worker_TP%d" % t, VLLM_ENGINE_LIBS, MOTH_ENGINE_PG, MOTH_ENGINE_RECV) for t in range(2)],
    "purpose": ["training", "inference", "inference"],
    "roles": ["unknown", "inference", "inference"],
    "role_why": {1: "VLLM::Worker_TP0"},
    "purpose_why": "created by torch",
    "uid": (False, "no engine evidence"),
    "api": "torch",
    "variants": [V("one host", None, "passthrough", "unmarked unique ID",
                   problems=r"weight-update bridge not recognized on ranks 1,2: .*NCCLSHIM_ROLE=training in the "
                            r"environment of the process that made the ID")],
    "stderr": {1: r"ncclshim: warning: rank 1 of 3 .*NCCLSHIM_ROLE=training", 2: r"NCCLSHIM_ROLE=training"},
}
INVENTED_UNMARKED_FIXED = dict(INVENTED_UNMARKED)
INVENTED_UNMARKED_FIXED.update({
    "short": "invented bridge, its maker NCCLSHIM_ROLE=training",
    "name": "the same, the trainer's process with NCCLSHIM_ROLE=training (the setting the engine's workers named)",
    "purpose": "weight-update",
    "roles": ["training", "inference", "inference"],
    "role_why": {0: "NCCLSHIM_ROLE=training", 1: "VLLM::Worker_TP0"},
    "purpose_why": "training and inference ranks",
    "uid": (True, "NCCLSHIM_ROLE=training"),
    "variants": [V("one host", None, "ipc", "all 3 ranks on one host: ipc", {0: {"NCCLSHIM_ROLE": "training"}})],
    "stderr": None,
})

# An engine the engine patterns do not know: a receiver with vLLM's kernels loaded under its own
# title and code (no vLLM title, no vLLM frame), the trainer without them, nccl4py.  Nothing
# says which side is the engine, but the library on one side only looks like a bridge: the root
# passes it through and says so (its decision record, one stderr line, `--check` fails).
INVENTED_WEAK = {
    "short": "invented engine, no engine title or frame",
    "name": "invented: ray::Lark.run (no engine) + ray::Owl.run (vllm/_C loaded, its own code), nccl4py: loud",
    "ranks": [heron_rank("ray::Lark.run", [], [("lark/run.py", 20, "Lark.run")], [("lark/run.py", 50, "Lark.send")],
                         root=True),
              heron_rank("ray::Owl.run", VLLM_ENGINE_LIBS, [("owl/serve.py", 20, "Owl.run")],
                         [("owl/serve.py", 50, "Owl.recv")])],
    "purpose": "unknown",
    "roles": ["unknown", "inference"],
    "role_why": {1: "loaded library.*vllm/_C"},
    "purpose_why": "no consensus rule applies",
    "uid": (True, "made by nccl4py"),
    "api": "nccl4py",
    "variants": [V("one host", None, "passthrough", "purpose unknown: only weight-update communicators",
                   problems=r"weight-update bridge not recognized on ranks 0,1: rank 1 loaded an engine library and "
                            r"1 rank did not.*NCCLSHIM_ROLE=inference in the engine's processes \(rank 1")],
    "stderr": {0: r"looks like a weight-update bridge but passes through: .*NCCLSHIM_ROLE=inference"},
}

# --- Controls: groups that must stay untouched, with the right purpose in every record.
# A trainer's own world group (torchrun / accelerate: `python train.py`), vLLM imported (a GRPO
# trainer's client): its torch ID is marked (engine evidence in the process), the root sees that
# no rank is an engine's worker: training, passthrough.
TRAINER_WORLD = {
    "short": "trainer world group, vLLM imported",
    "name": "control: 2 python train.py (vllm imported), torch world group (lazy), gradient all-reduce",
    "ranks": [Rank("python", "torch",
                   [{"op": "pg", "frames": [("acme/train.py", 30, "setup")]},
                    {"op": "allreduce", "count": 1024, "dtype": 7,
                     "frames": [("acme/train.py", 60, "step"), ("torch/nn/utils/clip_grad.py", 90, "clip_grad_norm_")]
                     + TORCH_ALLREDUCE},
                    {"op": "destroy"}], VLLM_TRAINER_LIBS, "train.py") for _ in range(2)],
    "purpose": "training",
    "roles": ["inference", "inference"],
    "role_why": {0: "loaded library.*vllm/_C"},
    "purpose_why": "only loaded an engine library.*trainers that import the engine",
    "uid": (True, "engine library loaded"),
    "api": "torch",
    "variants": [V("one host", None, "passthrough", "purpose training: only weight-update communicators")],
    "app_calls": True,
}

# A data channel between two training actors (invented Ray classes, vLLM imported), through
# vLLM's PyNccl over a StatelessProcessGroup: marked (a binding's ID), training, passthrough.
OTTER = [("otter/actor.py", 40, "Otter.pair"), ("vllm/distributed/utils.py", 200, "StatelessProcessGroup.create")]
OTTER_USE = [("otter/actor.py", 80, "Otter.swap")]
TRAINER_CHANNEL = {
    "short": "data channel between two trainers",
    "name": "control: 2 ray::Otter.pair (vllm imported) exchanging data through PyNccl",
    "ranks": [pynccl_rank("ray::Otter.pair", VLLM_TRAINER_LIBS, OTTER[:1], OTTER_USE, root=r == 0) for r in range(2)],
    "purpose": "training",
    "roles": ["inference", "inference"],
    "role_why": {0: "loaded library.*vllm/_C"},
    "purpose_why": "only loaded an engine library.*trainers that import the engine",
    "uid": (True, "made by ctypes"),
    "api": "ctypes",
    "variants": [V("one host", None, "passthrough", "purpose training: only weight-update communicators")],
    "app_calls": True,
}

# --- The named stacks again with every name the RL stack chose replaced (issue 43: "right by
# luck"): its packages, modules, functions and Ray actor classes become made-up ones; what the
# engine and the platform set stays (vLLM's and SGLang's titles, files and functions, torch,
# Ray, nccl4py, CuPy, multiprocessing, the native libraries, `python`).  Each weight-update group
# must still be one, with the same action, by its structure now; where its maker shows no
# evidence at all (SGLang's own API), loudly left alone.  Not verl's checkpoint engine: its
# receivers run outside the engine's processes and code, so once renamed nothing tells them from
# the trainer (docs/policy.md, "Stacks").
PLATFORM = ("vllm/", "sglang/", "torch/", "ray/", "nccl/", "cupy", "sgl_kernel/")
ENGINE_TITLE_PREFIXES = ("VLLM::", "sglang::", "ray::RayWorkerProc", "ray::RayWorkerWrapper", "python")


def _renamer():
    names = {}

    def new(kind, old):
        return names.setdefault((kind, old), "%s%d" % (kind, len(names)))
    return new


def renamed(sc, variants=None, **expect):
    """sc with the stack's own names replaced, expecting `expect` (purpose, stderr) and the
    original's actions, unless `variants` are given."""
    new = _renamer()

    def frame(f):
        path, line, func = f
        if path.startswith(PLATFORM):
            return f
        return ("zz%s/%s.py" % (new("pkg", path.split("/")[0]), new("mod", path)), line,
                ".".join(new("Fn", part) for part in func.split(".")))

    def title(t):
        if t.startswith(ENGINE_TITLE_PREFIXES) or t.startswith("python -c from multiprocessing"):
            return t
        cls, _, meth = t[len("ray::"):].partition(".")
        return "ray::%s%s" % (new("Actor", cls), "." + new("meth", meth) if meth else "")

    ranks = [Rank(title(rk.title), rk.binding,
                  [dict(st, frames=[frame(f) for f in st.get("frames", [])]) for st in rk.steps], rk.libs, rk.script)
             for rk in sc["ranks"]]
    out = dict(sc, short=sc["short"] + ", renamed", name=sc["name"] + " -- every name the stack chose replaced",
               ranks=ranks, roles=None, role_why={}, purpose_why="", uid=(sc["uid"][0], ""))
    out["variants"] = variants or [dict(v, why="") for v in sc["variants"] if not v["env"]]
    out.update(expect)
    return out


RENAMED = [renamed(NEMO_DEFAULT), renamed(NEMO_ASYNC), renamed(NEMO_TP2), renamed(NEMO_RESHARD),
           renamed(OPENRLHF), renamed(SLIME),
           renamed(SGLANG_OWN, [V("one host", None, "passthrough", "unmarked unique ID",
                                  problems=r"weight-update bridge not recognized on ranks 1,2: .*NCCLSHIM_ROLE=training")],
                   purpose=["training", "weight-update", "weight-update"], uid=(False, ""),
                   stderr={1: "NCCLSHIM_ROLE=training", 2: "NCCLSHIM_ROLE=training"})]

SCENARIOS = [NEMO_DEFAULT, NEMO_ASYNC, NEMO_TP2, NEMO_RESHARD, VLLM_WT, VLLM_M2N, VLLM_TP, SGL_TP, OPENRLHF, VERL,
             SLIME, SGLANG_OWN, TRAIN_ONLY, TRL, INVENTED_TORCH, INVENTED_N4PY, INVENTED_CUPY, INVENTED_UNMARKED,
             INVENTED_UNMARKED_FIXED, INVENTED_WEAK, TRAINER_WORLD, TRAINER_CHANNEL] + RENAMED
