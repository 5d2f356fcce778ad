/*
 * The evidence policy/ decides on.  Plain data: the shim gathers it (shim/evidence/creator.c),
 * policy/ reads it.  No NCCL or CUDA types here, on purpose.
 */
#ifndef NCCLSHIM_POLICY_EVIDENCE_H
#define NCCLSHIM_POLICY_EVIDENCE_H

enum api_family { API_OTHER = 0, API_TORCH, API_CTYPES, API_NCCL4PY, API_CUPY };
enum role { ROLE_UNKNOWN = 0, ROLE_TRAINING, ROLE_INFERENCE };
enum purpose { PURPOSE_UNKNOWN = 0, PURPOSE_TRAINING, PURPOSE_WEIGHT_UPDATE, PURPOSE_INFERENCE };

#define EVIDENCE_MAX_FRAMES 8
#define EVIDENCE_FRAME_LEN 320
#define EVIDENCE_REASON_LEN 512

/* The patterns that turn facts into roles and purposes (NCCLSHIM_* variables,
 * defaults in policy/defaults.h).  Comma-separated globs. */
struct policy_patterns {
    const char *role_env;               /* NCCLSHIM_ROLE, or NULL */
    const char *training_titles;        /* NCCLSHIM_TRAINING_TITLES */
    const char *inference_titles;       /* NCCLSHIM_INFERENCE_TITLES */
    const char *inference_libs;         /* NCCLSHIM_INFERENCE_LIBS */
    const char *weight_update_callsites;/* NCCLSHIM_WEIGHT_UPDATE_CALLSITES */
    const char *trainer_callsites;      /* NCCLSHIM_TRAINER_CALLSITES */
    const char *full_api;               /* NCCLSHIM_FULL_API */
};

/* What one process knows about one communicator it is creating. */
struct local_evidence {
    enum api_family api;
    enum role role;
    int nranks;
    int nframes;
    const char (*frames)[EVIDENCE_FRAME_LEN]; /* Python call site, innermost first */
};

struct verdict {
    int value;                          /* enum role or enum purpose */
    char reason[EVIDENCE_REASON_LEN];
};

const char *api_family_name(enum api_family a);
const char *role_name(enum role r);
const char *purpose_name(enum purpose p);

#endif
