/*
 * Default patterns for the evidence rules; docs/policy.md explains each.
 * Every one can be replaced by its NCCLSHIM_* variable.
 */
#ifndef NCCLSHIM_POLICY_DEFAULTS_H
#define NCCLSHIM_POLICY_DEFAULTS_H

/* Ray names actor processes "ray::ClassName[.method]" (NeMo-RL: DTensorPolicyWorker,
 * MegatronPolicyWorker; vLLM: VllmGenerationWorker, VllmAsyncGenerationWorker). */
#define DEFAULT_TRAINING_TITLES \
    "ray::*PolicyWorker*,ray::*Trainer*,ray::*Megatron*,ray::*DTensor*,ray::*Learner*,ray::*Actor*Train*"
#define DEFAULT_INFERENCE_TITLES \
    "ray::*Vllm*,ray::*VLLM*,ray::*Generation*Worker*,ray::*Rollout*,ray::*Inference*,*vllm serve*,*sglang*"
/* A process that has loaded an inference engine's native code runs inference. */
#define DEFAULT_INFERENCE_LIBS "*/vllm/_C*.so,*/vllm/_moe_C*.so,*/sglang/*.so,*/sgl_kernel/*.so"
/* Python functions on the stack when RL frameworks create their weight-update groups:
 * NeMo-RL init_collective, vLLM's weight transfer engine, verl/OpenRLHF update groups. */
#define DEFAULT_WEIGHT_UPDATE_CALLSITES \
    "* init_collective,*weight_transfer*,*weight_update*,*model_update*,*update_weights*,*init_process_group_for_weight*"

/* Libraries whose code calls NCCL, by API family (matched on the caller's path). */
#define API_TORCH_LIBS "*/libtorch_cuda*.so*,*/libtorch*.so*,*/libc10d*.so*,*/torch/lib/*"
#define API_CTYPES_LIBS "*/libffi.so*,*/libffi-*.so*,*/_ctypes*.so"
#define API_NCCL4PY_LIBS "*/nccl/bindings/*,*/nccl4py*,*/nccl/core/*,*/nccl/_*.so"
#define API_CUPY_LIBS "*/cupy_backends/*,*/cupy/*"

#endif
