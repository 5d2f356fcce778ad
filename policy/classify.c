#include "classify.h"

#include "defaults.h"
#include "pattern.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

const char *api_family_name(enum api_family a)
{
    switch (a) {
    case API_TORCH: return "torch";
    case API_CTYPES: return "ctypes";
    case API_NCCL4PY: return "nccl4py";
    case API_CUPY: return "cupy";
    default: return "other";
    }
}

const char *role_name(enum role r)
{
    switch (r) {
    case ROLE_TRAINING: return "training";
    case ROLE_INFERENCE: return "inference";
    default: return "unknown";
    }
}

const char *purpose_name(enum purpose p)
{
    switch (p) {
    case PURPOSE_TRAINING: return "training";
    case PURPOSE_WEIGHT_UPDATE: return "weight-update";
    case PURPOSE_INFERENCE: return "inference";
    default: return "unknown";
    }
}

enum api_family classify_api(const char *path)
{
    if (!path || !*path)
        return API_OTHER;
    /* nccl4py and CuPy before ctypes: their extension modules are specific. */
    if (pattern_list_match(API_NCCL4PY_LIBS, path, NULL, 0) >= 0)
        return API_NCCL4PY;
    if (pattern_list_match(API_CUPY_LIBS, path, NULL, 0) >= 0)
        return API_CUPY;
    if (pattern_list_match(API_TORCH_LIBS, path, NULL, 0) >= 0)
        return API_TORCH;
    if (pattern_list_match(API_CTYPES_LIBS, path, NULL, 0) >= 0)
        return API_CTYPES;
    return API_OTHER;
}

static const char *or_default(const char *v, const char *def)
{
    return v ? v : def;
}

struct verdict classify_role(const struct policy_patterns *pp, const char *title,
                             const char *const *libs)
{
    struct verdict v = { ROLE_UNKNOWN, "" };
    char pat[256];
    char bad_env[100] = "";

    if (pp->role_env && *pp->role_env) {
        if (strcasecmp(pp->role_env, "training") == 0)
            v.value = ROLE_TRAINING;
        else if (strcasecmp(pp->role_env, "inference") == 0)
            v.value = ROLE_INFERENCE;
        else if (strcasecmp(pp->role_env, "unknown") == 0)
            v.value = ROLE_UNKNOWN;
        else
            snprintf(bad_env, sizeof(bad_env), "NCCLSHIM_ROLE='%.40s' ignored (not training|inference|unknown); ",
                     pp->role_env);
        if (!bad_env[0]) {
            snprintf(v.reason, sizeof(v.reason), "NCCLSHIM_ROLE=%s", role_name((enum role)v.value));
            return v;
        }
    }
    const char *inf_libs = or_default(pp->inference_libs, DEFAULT_INFERENCE_LIBS);
    for (const char *const *l = libs; l && *l; l++) {
        if (pattern_list_match(inf_libs, *l, pat, sizeof(pat)) >= 0) {
            v.value = ROLE_INFERENCE;
            snprintf(v.reason, sizeof(v.reason), "%sloaded library '%.200s' matches inference pattern '%.80s'",
                     bad_env, *l, pat);
            return v;
        }
    }
    /* Inference first: a vLLM actor's title may also look like a worker's. */
    const struct { const char *patterns; enum role role; } titles[] = {
        { or_default(pp->inference_titles, DEFAULT_INFERENCE_TITLES), ROLE_INFERENCE },
        { or_default(pp->training_titles, DEFAULT_TRAINING_TITLES), ROLE_TRAINING },
    };
    for (size_t i = 0; title && *title && i < sizeof(titles) / sizeof(titles[0]); i++) {
        if (pattern_list_match(titles[i].patterns, title, pat, sizeof(pat)) >= 0) {
            v.value = titles[i].role;
            snprintf(v.reason, sizeof(v.reason), "%sprocess title '%.160s' matches %s pattern '%.80s'",
                     bad_env, title, role_name(titles[i].role), pat);
            return v;
        }
    }
    snprintf(v.reason, sizeof(v.reason), "%sno NCCLSHIM_ROLE, no inference library loaded, title '%.160s' matches no pattern",
             bad_env, title ? title : "");
    return v;
}

struct verdict classify_purpose(const struct policy_patterns *pp, const struct local_evidence *ev)
{
    struct verdict v = { PURPOSE_UNKNOWN, "" };
    char pat[256];
    const char *sites = or_default(pp->weight_update_callsites, DEFAULT_WEIGHT_UPDATE_CALLSITES);

    for (int i = 0; i < ev->nframes && ev->frames; i++) {
        if (pattern_list_match(sites, ev->frames[i], pat, sizeof(pat)) >= 0) {
            v.value = PURPOSE_WEIGHT_UPDATE;
            snprintf(v.reason, sizeof(v.reason), "Python frame '%.200s' matches weight-update pattern '%.80s'",
                     ev->frames[i], pat);
            return v;
        }
    }
    if (ev->api == API_TORCH) {
        v.value = ev->role == ROLE_INFERENCE ? PURPOSE_INFERENCE : PURPOSE_TRAINING;
        snprintf(v.reason, sizeof(v.reason), "created by torch in a%s process",
                 ev->role == ROLE_INFERENCE ? "n inference" : ev->role == ROLE_TRAINING ? " training" : " role-unknown");
        return v;
    }
    if (ev->role == ROLE_TRAINING) {
        v.value = PURPOSE_WEIGHT_UPDATE;
        snprintf(v.reason, sizeof(v.reason), "created through %s (not torch) in a training process",
                 api_family_name(ev->api));
        return v;
    }
    if (ev->role == ROLE_INFERENCE) {
        v.value = PURPOSE_INFERENCE;
        snprintf(v.reason, sizeof(v.reason), "created through %s in an inference process, no weight-update call site",
                 api_family_name(ev->api));
        return v;
    }
    snprintf(v.reason, sizeof(v.reason), "created through %s in a process of unknown role", api_family_name(ev->api));
    return v;
}
