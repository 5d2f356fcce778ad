/*
 * One creation of a communicator in progress: what lifecycle.c, which owns
 * it, knows of it before and after the real call, and what its comm record
 * (comm_record.c) shows.  Types alone, so that the two share it and neither
 * calls the other back.
 */
#ifndef NCCLSHIM_CREATION_H
#define NCCLSHIM_CREATION_H

#include "comm.h"
#include "creator.h"
#include "decision.h"
#include "nccl_decls.h"
#include "slots.h"

#include <stdint.h>

struct creation {
    const char *fn;
    struct shim_slot *slot;
    const void *caller;
    int rank, nranks;
    int has_id;
    uint64_t id_hash;
    const ncclConfig_t *config;
    char group[sizeof(((struct shim_comm *)0)->group)];
    /* Splits, shrinks and grows. */
    struct shim_comm *parent;
    int is_split, color, key;
    const int *exclude;
    int nexclude;
    /* Filled by begin_creation. */
    struct creator cr;
    struct plan plan;
    uint64_t t0;
    /* What NCCL 2.29+ reports of a communicator the shim redirected. */
    int has_props;
    ncclCommProperties_t props;
};

#endif
