/*
 * Default patterns for the evidence rules; docs/policy.md explains each, and
 * its "Stacks" table says which stack's processes and call sites they name
 * (read from each stack's source).  Every one can be replaced by its
 * NCCLSHIM_* variable.
 */
#ifndef NCCLSHIM_POLICY_DEFAULTS_H
#define NCCLSHIM_POLICY_DEFAULTS_H

/* Ray names actor processes "ray::ClassName[.method]".  Trainers: NeMo-RL's
 * DTensorPolicyWorker[V2] and MegatronPolicyWorker, OpenRLHF's PolicyModelActor,
 * slime's MegatronTrainRayActor, verl's WorkerDict (which also hosts the hybrid
 * engine's rollout role: its "actor_rollout_" methods must not read as
 * inference), vLLM's examples' TrainModel. */
#define DEFAULT_TRAINING_TITLES \
    "ray::*PolicyWorker*,ray::*Policy*Actor*,ray::*Train*,ray::*Megatron*,ray::*DTensor*,ray::*Learner*," \
    "ray::WorkerDict*"
/* Inference: NeMo-RL's VllmGenerationWorker and friends, vLLM's own process
 * titles (VLLM::EngineCore, VLLM::Worker_TP<r>) and its Ray workers
 * (RayWorkerProc, RayWorkerWrapper), OpenRLHF's RolloutRayActor, slime's
 * SGLangEngine, SGLang's own (sglang::scheduler_TP<r>, ...), verl's
 * CheckpointEngineWorker (it receives the weights for the engine on its GPU). */
#define DEFAULT_INFERENCE_TITLES \
    "ray::*Vllm*,ray::*VLLM*,ray::*Generation*Worker*,ray::*Rollout*,ray::*Inference*,ray::*SGLang*," \
    "ray::*RayWorkerProc*,ray::*RayWorkerWrapper*,ray::*CheckpointEngineWorker*,VLLM::*,sglang::*," \
    "*vllm serve*,*sglang*"
/* A process that has loaded an inference engine's native code runs inference,
 * unless its title or NCCLSHIM_ROLE says otherwise (trainers import vLLM and
 * SGLang: OpenRLHF, slime, verl, vLLM's own weight-transfer API). */
#define DEFAULT_INFERENCE_LIBS "*/vllm/_C*.so,*/vllm/_moe_C*.so,*/sglang/*.so,*/sgl_kernel/*.so,*/tensorrt_llm/*.so*"
/* Python frames ("file:line function", innermost first) when RL stacks create
 * their weight-update groups: NeMo-RL init_collective[_async|_mcore_generation]
 * and its refit, vLLM's weight_transfer engines, OpenRLHF's
 * _init_vllm_sync_group and broadcast_to_vllm, slime's connect_rollout_engines
 * and update_weights, SGLang's init_weights_update_group and
 * update_weights_from_distributed, verl's checkpoint_engine. */
#define DEFAULT_WEIGHT_UPDATE_CALLSITES \
    "* init_collective*,*weight_transfer*,*weight_update*,*model_update*,*update_weights*,*weights_update*," \
    "*init_process_group_for_weight*,*checkpoint_engine*,*_init_vllm_sync_group*,*broadcast_to_vllm*," \
    "*connect_rollout_engines*,*nccl_reshard*,*refit*"
/* Frames that make a rank the trainer (the sender) of the communicator it
 * creates, whatever its process's role: vLLM's weight-transfer API, whose
 * trainer may be any process, with vLLM (and so its native code) imported. */
#define DEFAULT_TRAINER_CALLSITES "* trainer_init,* trainer_send_weights,*/weight_transfer/*trainer*.py:*"
/* Frames or loaded libraries of a creator that needs NCCL's whole API on the
 * communicator (windows, the device API, split): NeMo-RL's nccl_reshard refit
 * and vLLM's m2n engine (libnccl_m2n, NCCL's nccl_m2n/xferdtensor).  Such a
 * communicator never gets ipc. */
#define DEFAULT_FULL_API "*nccl_reshard*,*xferdtensor*,*m2n*"

/* Titles an inference engine sets for its own worker processes (not those an
 * RL stack chose): strong evidence that a rank is an engine worker.  vLLM's
 * setproctitle (VLLM::EngineCore, VLLM::Worker[_TP<r>]...), its Ray workers'
 * classes (RayWorkerWrapper, RayWorkerProc), SGLang's (sglang::scheduler...),
 * and the CLIs that run an engine in-process (vllm serve, TRL's vllm-serve). */
#define DEFAULT_ENGINE_TITLES \
    "VLLM::*,sglang::*,ray::*RayWorkerWrapper*,ray::*RayWorkerProc*,*vllm serve*,*vllm-serve*"
/* The engine's own code on the creating thread's stack ("file:line function"):
 * its workers, executors and engine core (collective_rpc, run_method, which
 * call an RL stack's worker extension), its model-parallel groups, SGLang's
 * scheduler and model runner.  vLLM's PyNccl, its StatelessProcessGroup and
 * its weight-transfer engine are not here: trainers call them too. */
#define DEFAULT_ENGINE_FRAMES \
    "*/vllm/worker/*,*/vllm/v1/worker/*,*/vllm/executor/*,*/vllm/v1/executor/*,*/vllm/v1/engine/*," \
    "*/vllm/engine/*,*/vllm/v1/serial_utils.py:* run_method,* LLM.collective_rpc,*/vllm/distributed/parallel_state.py:*," \
    "*/sglang/srt/managers/*,*/sglang/srt/model_executor/*,*/sglang/srt/distributed/parallel_state.py:*"

/* Libraries whose code calls NCCL, by API family (matched on the caller's path). */
#define API_TORCH_LIBS "*/libtorch_cuda*.so*,*/libtorch*.so*,*/libc10d*.so*,*/torch/lib/*"
#define API_CTYPES_LIBS "*/libffi.so*,*/libffi-*.so*,*/_ctypes*.so"
#define API_NCCL4PY_LIBS "*/nccl/bindings/*,*/nccl4py*,*/nccl/core/*,*/nccl/_*.so"
#define API_CUPY_LIBS "*/cupy_backends/*,*/cupy/*"

#endif
