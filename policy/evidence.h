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

/*
 * Whether a rank is a worker of an inference engine, by who set the evidence
 * (docs/policy.md, "Engine evidence").  Bits of rank_facts.engine.  TITLE and
 * FRAMES are the engine's own (its process titles, its code on the creating
 * thread's stack): strong.  LIB, an engine library loaded, is weak: trainers
 * import engines.  ROLE_BY_LIB says the rank's inference role rests on LIB alone.
 */
enum engine_evidence {
    ENGINE_LIB = 1,
    ENGINE_TITLE = 2,
    ENGINE_FRAMES = 4,
    ENGINE_ROLE_BY_LIB = 8,
};
#define ENGINE_STRONG (ENGINE_TITLE | ENGINE_FRAMES)
#define ENGINE_ALL_BITS 15

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
    const char *engine_titles;          /* NCCLSHIM_ENGINE_TITLES */
    const char *engine_frames;          /* NCCLSHIM_ENGINE_FRAMES */
};

/* What one process knows about one communicator it is creating. */
struct local_evidence {
    enum api_family api;
    enum role role;
    int nranks;
    int nframes;
    const char (*frames)[EVIDENCE_FRAME_LEN]; /* Python call site, innermost first */
    int engine;                         /* enum engine_evidence bits */
};

/* A rank's engine evidence (classify_engine): bits, and the frame that matched. */
struct engine_verdict {
    int bits;                           /* enum engine_evidence */
    int frame;                          /* index of the engine frame, or -1 */
    char reason[EVIDENCE_REASON_LEN];
};

struct verdict {
    int value;                          /* enum role or enum purpose */
    char reason[EVIDENCE_REASON_LEN];
};

const char *api_family_name(enum api_family a);
const char *role_name(enum role r);
const char *purpose_name(enum purpose p);

#endif
