/* Unit tests of policy/: pure functions, so plain asserts over tables of cases. */
#include "tap.h"
#include "classify.h"
#include "pattern.h"

#include <stdio.h>
#include <string.h>


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
    struct local_evidence ev = { API_CTYPES, ROLE_INFERENCE, 2, 2, frames };
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
    ev.api = API_OTHER;
    ev.role = ROLE_UNKNOWN;
    v = classify_purpose(&pp, &ev);
    ok(v.value == PURPOSE_UNKNOWN, "other API, unknown role -> unknown");

    return tap_done();
}
