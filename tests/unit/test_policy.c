/* Unit tests of policy/: pure functions, so plain asserts over tables of cases. */
#include "tap.h"
#include "classify.h"
#include "pattern.h"

#include <stdio.h>
#include <string.h>


/* Issue 32: a title that names a role wins over a loaded library; where
 * both lists match a title, the more specific pattern says which. */
static void test_titles_and_libs(void)
{
    struct policy_patterns pp = { 0 };
    const char *vllm_libs[] = { "/x/site-packages/vllm/_C.abi3.so", NULL };
    const char *sgl_libs[] = { "/x/site-packages/sgl_kernel/sm90/common_ops.abi3.so", NULL };
    const struct { const char *title; const char *const *libs; enum role want; const char *what; } cases[] = {
        { "ray::PolicyModelActor.init_model_from_pretrained", vllm_libs, ROLE_TRAINING,
          "OpenRLHF's trainer, vllm/_C loaded: training (its title wins)" },
        { "ray::MegatronTrainRayActor.update_weights", sgl_libs, ROLE_TRAINING,
          "slime's trainer, sgl_kernel loaded: training" },
        { "ray::WorkerDict.actor_rollout_ref_execute_checkpoint_engine", vllm_libs, ROLE_TRAINING,
          "verl's WorkerDict 'actor_rollout_' method: training (more specific than *Rollout*)" },
        { "ray::CheckpointEngineWorker.execute_checkpoint_engine", vllm_libs, ROLE_INFERENCE,
          "verl's CheckpointEngineWorker: inference" },
        { "ray::RolloutRayActor.init_process_group", vllm_libs, ROLE_INFERENCE, "OpenRLHF's vLLM actor: inference" },
        { "VLLM::EngineCore", vllm_libs, ROLE_INFERENCE, "vLLM's engine core: inference" },
        { "VLLM::Worker_TP1", vllm_libs, ROLE_INFERENCE, "vLLM's worker: inference" },
        { "ray::RayWorkerProc.run", vllm_libs, ROLE_INFERENCE, "vLLM's Ray worker (v2): inference" },
        { "ray::RayWorkerWrapper.execute_method", vllm_libs, ROLE_INFERENCE, "vLLM's Ray worker: inference" },
        { "sglang::scheduler_TP0", sgl_libs, ROLE_INFERENCE, "SGLang's scheduler: inference" },
        { "ray::SGLangEngine.init_weights_update_group", sgl_libs, ROLE_INFERENCE, "slime's SGLang engine: inference" },
        { "ray::TrainModel.init_weight_transfer", vllm_libs, ROLE_TRAINING, "vLLM's example trainer: training" },
        { "ray::DTensorPolicyWorkerV2.init_collective", NULL, ROLE_TRAINING, "NeMo-RL's trainer: training" },
        { "python train.py", vllm_libs, ROLE_INFERENCE, "no title, vllm/_C loaded: inference (the library rule)" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct verdict v = classify_role(&pp, cases[i].title, cases[i].libs);
        ok(v.value == (int)cases[i].want, "%s [%s]", cases[i].what, v.reason);
    }
    struct verdict v = classify_role(&pp, "ray::WorkerDict.actor_rollout_x", NULL);
    ok(strstr(v.reason, "more specific than the inference pattern 'ray::*Rollout*'") != NULL,
       "the reason names both patterns where both match");
    pp.training_titles = "ray::*x*";
    pp.inference_titles = "ray::*y*";
    v = classify_role(&pp, "ray::xy", NULL);
    ok(v.value == ROLE_INFERENCE, "equally specific patterns: inference");
    char m[64];
    ok(pattern_list_best("ray::*,ray::*Rollout*,*", "ray::RolloutRayActor", m, sizeof(m)) == 12 &&
           strcmp(m, "ray::*Rollout*") == 0, "pattern_list_best: the most literal characters");
    ok(pattern_list_best("a*,b*", "xyz", m, sizeof(m)) == -1, "pattern_list_best: none");
}

/* A trainer call site makes the rank training for that communicator. */
static void test_rank_role(void)
{
    struct policy_patterns pp = { 0 };
    const char frames[2][EVIDENCE_FRAME_LEN] = {
        "/x/vllm/distributed/device_communicators/pynccl.py:137 __init__",
        "/x/vllm/distributed/weight_transfer/nccl_engine.py:272 trainer_init",
    };
    struct verdict lib = { ROLE_INFERENCE, "loaded library '/x/vllm/_C.abi3.so' matches ..." };
    struct verdict v = classify_rank_role(&pp, lib, 2, frames);
    ok(v.value == ROLE_TRAINING && strstr(v.reason, "trainer_init") && strstr(v.reason, "process alone: inference"),
       "vLLM's trainer_init frame: training for this communicator, the process's own role in the reason");
    v = classify_rank_role(&pp, lib, 1, frames);
    ok(v.value == ROLE_INFERENCE, "without it: the process's role");
    pp.role_env = "inference";
    struct verdict env = { ROLE_INFERENCE, "NCCLSHIM_ROLE=inference" };
    v = classify_rank_role(&pp, env, 2, frames);
    ok(v.value == ROLE_INFERENCE, "NCCLSHIM_ROLE is never overridden");
    pp.role_env = NULL;
    pp.trainer_callsites = "*my_sender*";
    v = classify_rank_role(&pp, lib, 2, frames);
    ok(v.value == ROLE_INFERENCE, "NCCLSHIM_TRAINER_CALLSITES replaces the defaults");
}

/* NeMo-RL's nccl_reshard and vLLM's m2n need NCCL's whole API. */
static void test_full_api(void)
{
    struct policy_patterns pp = { 0 };
    const char frames[2][EVIDENCE_FRAME_LEN] = {
        "/x/nemo_rl/distributed/stateless_process_group.py:130 init_nccl_communicator",
        "/x/nemo_rl/models/policy/workers/base_policy_worker.py:70 init_nccl_reshard_comm_group",
    };
    const char *m2n[] = { "/lib/libc.so.6", "/x/site-packages/nccl/m2n/libnccl_m2n.so", NULL };
    const char *plain[] = { "/lib/libc.so.6", NULL };
    struct verdict v = classify_full_api(&pp, 2, frames, plain);
    ok(v.value == 1 && strstr(v.reason, "init_nccl_reshard_comm_group"), "an nccl_reshard frame: whole API (%s)",
       v.reason);
    v = classify_full_api(&pp, 1, frames, m2n);
    ok(v.value == 1 && strstr(v.reason, "libnccl_m2n"), "libnccl_m2n loaded: whole API");
    v = classify_full_api(&pp, 1, frames, plain);
    ok(v.value == 0, "neither: no");
}

/* A torch-made ID is marked under weight-update evidence only. */
static void test_torch_id(void)
{
    struct policy_patterns pp = { 0 };
    const char slime[3][EVIDENCE_FRAME_LEN] = {
        "/x/torch/distributed/distributed_c10d.py:2800 broadcast",
        "/x/slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py:352 _update_bucket",
        "/x/slime/backends/megatron_utils/actor.py:640 update_weights",
    };
    const char train[2][EVIDENCE_FRAME_LEN] = {
        "/x/torch/distributed/distributed_c10d.py:2950 all_reduce",
        "/x/megatron/core/distributed/param_and_grad_buffer.py:300 start_grad_sync",
    };
    struct verdict v = classify_torch_id(&pp, "ray::MegatronTrainRayActor.train", 3, slime, 0);
    ok(v.value == 1 && strstr(v.reason, "update_weights"), "slime's first broadcast under update_weights: marked (%s)",
       v.reason);
    v = classify_torch_id(&pp, "ray::MegatronTrainRayActor.update_weights", 0, NULL, 0);
    ok(v.value == 1 && strstr(v.reason, "titled"), "no Python frames, a Ray title naming update_weights: marked");
    v = classify_torch_id(&pp, "ray::MegatronTrainRayActor.train", 2, train, 0);
    ok(v.value == 0 && strstr(v.reason, "training group"), "a gradient all-reduce: unmarked, and why (%s)", v.reason);
    /* Engine evidence in the process marks it, whatever the names (issue 43). */
    v = classify_torch_id(&pp, "python train.py", 2, train, ENGINE_LIB | ENGINE_ROLE_BY_LIB);
    ok(v.value == 1 && strstr(v.reason, "engine library"), "a process that imports an engine: marked (%s)", v.reason);
    v = classify_torch_id(&pp, "sglang::scheduler_TP0", 2, train, ENGINE_TITLE);
    ok(v.value == 1 && strstr(v.reason, "its title"), "an engine's own process: marked (%s)", v.reason);
    pp.role_env = "training";
    v = classify_torch_id(&pp, "python train.py", 2, train, 0);
    ok(v.value == 1 && strstr(v.reason, "NCCLSHIM_ROLE=training"), "NCCLSHIM_ROLE=training: marked (%s)", v.reason);
    pp.role_env = NULL;
}

/* Engine evidence by who set it: the engine's titles and frames, strong; its library, weak. */
static void test_engine(void)
{
    struct policy_patterns pp = { 0 };
    const char *vllm[] = { "/x/site-packages/vllm/_C.abi3.so", NULL };
    const char *plain[] = { "/lib/libc.so.6", NULL };
    const char ext[3][EVIDENCE_FRAME_LEN] = {
        "/x/vllm/distributed/device_communicators/pynccl.py:112 PyNcclCommunicator.__init__",
        "/x/acme_rl/serve_ext.py:40 SyncExt.join_group",
        "/x/vllm/v1/serial_utils.py:486 run_method",
    };
    const char client[2][EVIDENCE_FRAME_LEN] = {
        "/x/vllm/distributed/device_communicators/pynccl.py:112 PyNcclCommunicator.__init__",
        "/x/acme_rl/client.py:88 Client.join_group",
    };
    struct verdict inf = { ROLE_INFERENCE, "" }, unk = { ROLE_UNKNOWN, "" };
    struct engine_verdict e = classify_engine(&pp, "VLLM::EngineCore", 3, ext, vllm, inf);
    ok(e.bits == (ENGINE_TITLE | ENGINE_FRAMES | ENGINE_LIB) && e.frame == 2 && strstr(e.reason, "VLLM::*") &&
           strstr(e.reason, "run_method"),
       "an engine core at collective_rpc: title, frame (index 2) and library (%s)", e.reason);
    e = classify_engine(&pp, "python train.py", 2, client, vllm, inf);
    ok(e.bits == (ENGINE_LIB | ENGINE_ROLE_BY_LIB) && e.frame == -1 && strstr(e.reason, "only an engine library"),
       "a trainer that imports vLLM, its PyNccl frames: weak, inference by the library alone (%s)", e.reason);
    e = classify_engine(&pp, "python train.py", 2, client, plain, unk);
    ok(e.bits == 0 && strstr(e.reason, "no engine"), "a plain trainer: no engine evidence");
    e = classify_engine(&pp, "ray::RayWorkerWrapper.execute_method", 0, NULL, plain, inf);
    ok(e.bits == ENGINE_TITLE, "vLLM's own Ray worker class is the engine's title");
    e = classify_engine(&pp, "ray::VllmGenerationWorker", 2, client, vllm, inf);
    ok(e.bits == ENGINE_LIB, "a stack's own Ray class names no engine, and its inference role is by title, not library");
    pp.engine_frames = "*/acme_rl/serve_ext.py:*";
    e = classify_engine(&pp, "python -m acme_rl.serve", 3, ext, plain, unk);
    ok(e.bits == ENGINE_FRAMES && e.frame == 1, "NCCLSHIM_ENGINE_FRAMES replaces the defaults");
    pp.engine_frames = NULL;
    pp.engine_titles = "acme-engine*";
    e = classify_engine(&pp, "acme-engine worker 3", 0, NULL, plain, unk);
    ok(e.bits == ENGINE_TITLE, "NCCLSHIM_ENGINE_TITLES replaces the defaults");
    e = classify_engine(&pp, "VLLM::EngineCore", 0, NULL, plain, unk);
    ok(e.bits == 0, "... and the defaults are gone");
}

int main(void)
{
    char m[64];
    ok(pattern_list_match("a*,b*", "bcd", m, sizeof(m)) == 1 && strcmp(m, "b*") == 0, "second pattern matches");
    ok(pattern_list_match("a*,,b*", "xyz", NULL, 0) == -1, "no match, empty item ignored");
    ok(pattern_list_match("RAY::*", "ray::Foo", NULL, 0) == 0, "matching ignores case");
    ok(pattern_list_match("", "x", NULL, 0) == -1, "empty list matches nothing");
    ok(pattern_list_match(NULL, "x", NULL, 0) == -1, "NULL list matches nothing");
    char longpat[400];
    memset(longpat, '*', sizeof(longpat) - 1);
    longpat[sizeof(longpat) - 1] = '\0';
    ok(pattern_list_match(longpat, "x", NULL, 0) == -1, "an over-long pattern never matches");

    struct { const char *path; enum api_family want; } apis[] = {
        { "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so", API_TORCH },
        { "/usr/lib/x86_64-linux-gnu/libffi.so.8", API_CTYPES },
        { "/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so", API_CTYPES },
        { "/x/site-packages/cupy_backends/cuda/libs/nccl.cpython-312-x86_64-linux-gnu.so", API_CUPY },
        { "/x/site-packages/nccl/bindings/_internal/nccl.cpython-312-x86_64-linux-gnu.so", API_NCCL4PY },
        { "/usr/bin/my_app", API_OTHER },
        { "", API_OTHER },
    };
    for (size_t i = 0; i < sizeof(apis) / sizeof(apis[0]); i++) {
        char what[256];
        snprintf(what, sizeof(what), "api family of '%s' is %s", apis[i].path, api_family_name(apis[i].want));
        ok(classify_api(apis[i].path) == apis[i].want, "%s", what);
    }

    struct policy_patterns pp = { 0 };
    const char *vllm_libs[] = { "/lib/libc.so.6", "/x/site-packages/vllm/_C.abi3.so", NULL };
    const char *plain_libs[] = { "/lib/libc.so.6", NULL };
    struct verdict v = classify_role(&pp, "ray::DTensorPolicyWorker.train", plain_libs);
    ok(v.value == ROLE_TRAINING && strstr(v.reason, "PolicyWorker"), "Ray policy worker title -> training");
    v = classify_role(&pp, "ray::VllmGenerationWorker", plain_libs);
    ok(v.value == ROLE_INFERENCE, "Ray vLLM worker title -> inference");
    v = classify_role(&pp, "python train.py", vllm_libs);
    ok(v.value == ROLE_INFERENCE && strstr(v.reason, "vllm/_C"), "vllm/_C loaded -> inference, reason names it");
    v = classify_role(&pp, "python train.py", plain_libs);
    ok(v.value == ROLE_UNKNOWN, "plain python -> unknown");
    pp.role_env = "training";
    v = classify_role(&pp, "ray::VllmGenerationWorker", vllm_libs);
    ok(v.value == ROLE_TRAINING && strstr(v.reason, "NCCLSHIM_ROLE"), "NCCLSHIM_ROLE wins over every other rule");
    pp.role_env = "bogus";
    v = classify_role(&pp, "ray::VllmGenerationWorker", plain_libs);
    ok(v.value == ROLE_INFERENCE && strstr(v.reason, "ignored"), "a bad NCCLSHIM_ROLE is reported and ignored");
    pp.role_env = NULL;
    pp.training_titles = "*my_trainer*";
    v = classify_role(&pp, "python my_trainer.py", plain_libs);
    ok(v.value == ROLE_TRAINING, "custom training title patterns");
    pp.training_titles = NULL;

    const char frames[2][EVIDENCE_FRAME_LEN] = {
        "/x/vllm/distributed/pynccl.py:99 __init__",
        "/x/nemo_rl/models/generation/vllm/vllm_backend.py:120 init_collective",
    };
    struct local_evidence ev = { API_CTYPES, ROLE_INFERENCE, 2, 2, frames, 0 };
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_WEIGHT_UPDATE && strstr(v.reason, "init_collective"), "init_collective frame -> weight-update");
    ev.nframes = 1;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_INFERENCE, "ctypes in an inference process -> inference");
    ev.role = ROLE_TRAINING;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_WEIGHT_UPDATE, "ctypes in a training process -> weight-update");
    ev.api = API_TORCH;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_TRAINING, "torch in a training process -> training");
    ev.role = ROLE_UNKNOWN;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_TRAINING, "torch, role unknown -> training");
    ev.role = ROLE_INFERENCE;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_INFERENCE, "torch in an inference process -> inference");
    ev.engine = ENGINE_LIB | ENGINE_ROLE_BY_LIB;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_TRAINING && strstr(v.reason, "trainer that imports"),
       "torch in a process inference by an engine library alone -> training (%s)", v.reason);
    ev.engine |= ENGINE_FRAMES;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_INFERENCE, "... with the engine's frames -> inference");
    ev.engine = 0;
    ev.api = API_OTHER;
    ev.role = ROLE_UNKNOWN;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_UNKNOWN, "other API, unknown role -> unknown");

    test_titles_and_libs();
    test_rank_role();
    test_full_api();
    test_torch_id();
    test_engine();
    return tap_done();
}
