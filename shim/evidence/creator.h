/* Where the evidence about a communicator's creator is gathered (policy/evidence.h: what policy/ decides on). */
#ifndef NCCLSHIM_CREATOR_H
#define NCCLSHIM_CREATOR_H

#include "policy/evidence.h"

#include <limits.h>
#include <stddef.h>

struct creator {
    char caller_path[PATH_MAX];         /* library holding the return address */
    enum api_family api;
    char title[256];                    /* /proc/self/cmdline, NULs as spaces */
    struct verdict role;                /* this rank's, for this communicator (classify_rank_role) */
    int nframes;
    char frames[EVIDENCE_MAX_FRAMES][EVIDENCE_FRAME_LEN];
    struct verdict full_api;            /* 1: the creator needs NCCL's whole API (classify_full_api) */
    struct engine_verdict engine;       /* whether this rank is an engine's worker (classify_engine) */
};

/* The library holding `caller` and its API family (cheap: one dladdr). */
void evidence_caller(struct creator *c, const void *caller);

/* Fills `c` for a call into NCCL whose return address is `caller`.  Takes no
 * shim lock (it may take Python's), so call it before any. */
void evidence_gather(struct creator *c, const void *caller);

/* This process's engine evidence now (classify_engine's bits), for a unique ID
 * made inside torch: its title, this thread's frames, its loaded libraries. */
int evidence_engine_now(const char *title, int nframes, const char (*frames)[EVIDENCE_FRAME_LEN]);

/* In a fork child (the atfork handler): the loaded libraries are read from
 * /proc/self/maps from then on (creator.c says why). */
void evidence_after_fork_child(void);

/* The process title (Ray renames actor processes through argv). */
void evidence_title(char *buf, size_t len);

#endif
