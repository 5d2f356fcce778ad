/*
 * Classification on one rank's evidence (classify.h): the caller's API
 * family, the process's role, the communicator's purpose, and what a call
 * site says.  Pure: the shim gathers the evidence, this only reads it.
 */
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

/*
 * The role a process title names, if it names one.  Both lists are tried:
 * where both match (verl's "ray::WorkerDict.actor_rollout_..." trains, though
 * it says rollout), the pattern with more literal characters wins, and a tie
 * goes to inference (an engine's title may also look like a worker's).
 */
static int title_role(const struct policy_patterns *pp, const char *title, const char *bad_env, struct verdict *v)
{
    char inf_pat[256] = "", tr_pat[256] = "";
    if (!title || !*title)
        return 0;
    int inf = pattern_list_best(or_default(pp->inference_titles, DEFAULT_INFERENCE_TITLES), title, inf_pat,
                                sizeof(inf_pat));
    int tr = pattern_list_best(or_default(pp->training_titles, DEFAULT_TRAINING_TITLES), title, tr_pat,
                               sizeof(tr_pat));
    if (inf < 0 && tr < 0)
        return 0;
    enum role r = inf >= tr ? ROLE_INFERENCE : ROLE_TRAINING;
    const char *won = r == ROLE_INFERENCE ? inf_pat : tr_pat, *lost = r == ROLE_INFERENCE ? tr_pat : inf_pat;
    v->value = r;
    if (inf >= 0 && tr >= 0)
        snprintf(v->reason, sizeof(v->reason), "%sprocess title '%.160s' matches %s pattern '%.80s', more specific "
                 "than the %s pattern '%.80s' it also matches", bad_env, title, role_name(r), won,
                 role_name(r == ROLE_INFERENCE ? ROLE_TRAINING : ROLE_INFERENCE), lost);
    else
        snprintf(v->reason, sizeof(v->reason), "%sprocess title '%.160s' matches %s pattern '%.80s'", bad_env, title,
                 role_name(r), won);
    return 1;
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
    if (title_role(pp, title, bad_env, &v))
        return v;
    const char *inf_libs = or_default(pp->inference_libs, DEFAULT_INFERENCE_LIBS);
    for (const char *const *l = libs; l && *l; l++) {
        if (pattern_list_match(inf_libs, *l, pat, sizeof(pat)) >= 0) {
            v.value = ROLE_INFERENCE;
            snprintf(v.reason, sizeof(v.reason), "%sloaded library '%.200s' matches inference pattern '%.80s' "
                     "(the title '%.100s' names no role)", bad_env, *l, pat, title ? title : "");
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
        /* A process that only loaded an engine is a trainer that imports it. */
        int weak = ev->role == ROLE_INFERENCE && (ev->engine & ENGINE_ROLE_BY_LIB) && !(ev->engine & ENGINE_STRONG);
        v.value = ev->role == ROLE_INFERENCE && !weak ? PURPOSE_INFERENCE : PURPOSE_TRAINING;
        if (weak)
            snprintf(v.reason, sizeof(v.reason), "created by torch in a process that loaded an engine library but "
                     "shows no engine title or frame: a trainer that imports the engine");
        else
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

int classify_role_setting_valid(const char *r)
{
    return r && (strcasecmp(r, "training") == 0 || strcasecmp(r, "inference") == 0 || strcasecmp(r, "unknown") == 0);
}

/* NCCLSHIM_ROLE set to a role this file accepts. */
static int role_env_valid(const struct policy_patterns *pp)
{
    return classify_role_setting_valid(pp->role_env);
}

/* The first frame matching `list`, or -1; `pat` gets the pattern. */
static int frame_match(const char *list, int nframes, const char (*frames)[EVIDENCE_FRAME_LEN], char *pat,
                       size_t patlen)
{
    for (int i = 0; i < nframes && frames; i++)
        if (pattern_list_match(list, frames[i], pat, patlen) >= 0)
            return i;
    return -1;
}

struct verdict classify_rank_role(const struct policy_patterns *pp, struct verdict role, int nframes,
                                  const char (*frames)[EVIDENCE_FRAME_LEN])
{
    char pat[256];
    if (role.value == ROLE_TRAINING || role_env_valid(pp))
        return role;
    int i = frame_match(or_default(pp->trainer_callsites, DEFAULT_TRAINER_CALLSITES), nframes, frames, pat,
                        sizeof(pat));
    if (i < 0)
        return role;
    struct verdict v = { ROLE_TRAINING, "" };
    snprintf(v.reason, sizeof(v.reason), "Python frame '%.200s' matches trainer call-site pattern '%.80s' (the "
             "process alone: %s, %.120s)", frames[i], pat, role_name((enum role)role.value), role.reason);
    return v;
}

struct verdict classify_full_api(const struct policy_patterns *pp, int nframes,
                                 const char (*frames)[EVIDENCE_FRAME_LEN], const char *const *libs)
{
    struct verdict v = { 0, "" };
    char pat[256];
    const char *list = or_default(pp->full_api, DEFAULT_FULL_API);
    int i = frame_match(list, nframes, frames, pat, sizeof(pat));
    if (i >= 0) {
        v.value = 1;
        snprintf(v.reason, sizeof(v.reason), "Python frame '%.200s' matches NCCLSHIM_FULL_API pattern '%.80s'",
                 frames[i], pat);
        return v;
    }
    for (const char *const *l = libs; l && *l; l++) {
        if (pattern_list_match(list, *l, pat, sizeof(pat)) >= 0) {
            v.value = 1;
            snprintf(v.reason, sizeof(v.reason), "loaded library '%.200s' matches NCCLSHIM_FULL_API pattern '%.80s'",
                     *l, pat);
            return v;
        }
    }
    return v;
}

struct verdict classify_callsite(const struct policy_patterns *pp, int nframes,
                                 const char (*frames)[EVIDENCE_FRAME_LEN])
{
    struct verdict v = { 0, "" };
    char pat[256];
    int i = frame_match(or_default(pp->weight_update_callsites, DEFAULT_WEIGHT_UPDATE_CALLSITES), nframes, frames,
                        pat, sizeof(pat));
    if (i >= 0) {
        v.value = 1;
        snprintf(v.reason, sizeof(v.reason), "Python frame '%.200s' matches weight-update pattern '%.80s'", frames[i],
                 pat);
    }
    return v;
}

/* Whether the rank's role rests on a loaded library alone (classify_role's rule 3). */
static int role_by_lib(const struct policy_patterns *pp, const char *title, struct verdict role)
{
    struct verdict t;
    if (role.value != ROLE_INFERENCE || role_env_valid(pp))
        return 0;
    return !title_role(pp, title, "", &t);
}

struct engine_verdict classify_engine(const struct policy_patterns *pp, const char *title, int nframes,
                                      const char (*frames)[EVIDENCE_FRAME_LEN], const char *const *libs,
                                      struct verdict role)
{
    struct engine_verdict e = { 0, -1, "" };
    char pat[256], lib_pat[256] = "";
    const char *lib = NULL;
    if (title && *title &&
        pattern_list_match(or_default(pp->engine_titles, DEFAULT_ENGINE_TITLES), title, pat, sizeof(pat)) >= 0) {
        e.bits |= ENGINE_TITLE;
        snprintf(e.reason, sizeof(e.reason), "process title '%.160s' matches engine title pattern '%.80s'", title,
                 pat);
    }
    e.frame = frame_match(or_default(pp->engine_frames, DEFAULT_ENGINE_FRAMES), nframes, frames, pat, sizeof(pat));
    if (e.frame >= 0) {
        size_t n = strlen(e.reason);
        e.bits |= ENGINE_FRAMES;
        snprintf(e.reason + n, sizeof(e.reason) - n, "%sPython frame '%.200s' matches engine frame pattern '%.80s'",
                 n ? "; " : "", frames[e.frame], pat);
    }
    for (const char *const *l = libs; l && *l && !lib; l++)
        if (pattern_list_match(or_default(pp->inference_libs, DEFAULT_INFERENCE_LIBS), *l, lib_pat,
                               sizeof(lib_pat)) >= 0)
            lib = *l;
    if (lib) {
        e.bits |= ENGINE_LIB;
        if (!e.reason[0])
            snprintf(e.reason, sizeof(e.reason), "only an engine library loaded ('%.200s' matches '%.80s'), no "
                     "engine title or frame", lib, lib_pat);
    }
    if (role_by_lib(pp, title, role))
        e.bits |= ENGINE_ROLE_BY_LIB;
    if (!e.bits)
        snprintf(e.reason, sizeof(e.reason), "no engine title, frame or library");
    return e;
}

struct verdict classify_torch_id(const struct policy_patterns *pp, const char *title, int nframes,
                                 const char (*frames)[EVIDENCE_FRAME_LEN], int engine)
{
    char pat[256];
    const char *sites = or_default(pp->weight_update_callsites, DEFAULT_WEIGHT_UPDATE_CALLSITES);
    struct verdict v = classify_callsite(pp, nframes, frames);
    if (v.value) {
        char at[EVIDENCE_REASON_LEN];
        snprintf(at, sizeof(at), "%s", v.reason);
        snprintf(v.reason, sizeof(v.reason), "made by torch at a %.400s", at);
        return v;
    }
    if (title && *title && pattern_list_match(sites, title, pat, sizeof(pat)) >= 0) {
        v.value = 1;
        snprintf(v.reason, sizeof(v.reason), "made by torch in a process titled '%.160s', which matches weight-update "
                 "pattern '%.80s'", title, pat);
        return v;
    }
    if (engine & (ENGINE_STRONG | ENGINE_LIB)) {
        /* The engine's side of a bridge, or a trainer that imports the engine
         * (its groups' IDs are where a bridge's would be): the root sees all. */
        v.value = 1;
        snprintf(v.reason, sizeof(v.reason), "made by torch in a process with engine evidence (%s): decided with "
                 "every rank's facts", (engine & ENGINE_TITLE) ? "its title" : (engine & ENGINE_FRAMES) ? "its frames"
                                                                                  : "an engine library loaded");
        return v;
    }
    if (pp->role_env && strcasecmp(pp->role_env, "training") == 0) {
        v.value = 1;
        snprintf(v.reason, sizeof(v.reason), "made by torch in a process with NCCLSHIM_ROLE=training: decided with "
                 "every rank's facts");
        return v;
    }
    snprintf(v.reason, sizeof(v.reason), "made by torch with no weight-update evidence (%d Python frame%s, title "
             "'%.120s': none matches NCCLSHIM_WEIGHT_UPDATE_CALLSITES) and no engine evidence in its process: a "
             "training group, NCCLSHIM_TAG=bindings", nframes, nframes == 1 ? "" : "s", title ? title : "");
    return v;
}
