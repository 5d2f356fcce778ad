/*
 * The plan of one creation: which action it takes, why, and what was set up
 * for it (the shim-only handle, the ipc transport, the shim's config for
 * NCCL).  shim/comm/decision.c decides it, the actions (action_ops.h) set it
 * up, shim/comm/lifecycle.c carries it out.  Types alone: every action's file
 * includes it, and action.c holds and frees what a plan owns.
 */
#ifndef NCCLSHIM_PLAN_H
#define NCCLSHIM_PLAN_H

#include "policy/decide.h"
#include "creator.h"
#include "nccl_config.h"
#include "slots.h"
#include "rendezvous.h"

struct shim_comm;
struct ipc_comm;

struct plan_input {
    const char *fn;                     /* the init function called */
    struct shim_slot *slot;
    const ncclUniqueId *id;             /* NULL: split, shrink, InitAll */
    int rank, nranks;
    const ncclConfig_t *config;         /* the caller's, may be NULL */
    const struct creator *cr;           /* this rank's evidence */
    const char *group;                  /* the communicator's name in the records */
};

struct plan {
    enum action action;
    enum purpose purpose, local_purpose;
    char purpose_reason[RV_REASON_LEN];
    char local_purpose_reason[EVIDENCE_REASON_LEN];
    char action_reason[RV_REASON_LEN];
    int marked;                         /* the ID carried the mark: a rendezvous took place */
    struct rv_result rv;                /* its outcome, when marked */
    int cuda_device;                    /* current CUDA device at the call, -1 if unknown */
    /* Set up by the action (action.h); taken by lifecycle.c, else freed by plan_release. */
    struct shim_comm *vcomm;            /* ACT_SHIM_ONLY: the handle the application holds */
    struct ipc_comm *ipc;               /* ACT_PEERS: the transport */
    /* ACT_CONFIGURES: the caller's config as the action changes it */
    ncclConfig_t *net_config;
    struct nccl_config_told told;       /* ... and what in it differs from the caller's */
    /* A weight-update communicator left to NCCL for a reason that is not the
     * policy's (no rendezvous could decide it): why, for the record and
     * `inspect --check`; empty otherwise. */
    char unprotected[RV_REASON_LEN];
    /* A group that looks like a weight-update bridge but that no rendezvous
     * could decide (an engine worker joining an unmarked ID): why, and the
     * setting that would protect it; empty otherwise (docs/policy.md, "Never silent"). */
    char unrecognized[RV_REASON_LEN];
    /* A split, shrink or grow: the decision came from this communicator's
     * parent (its group and the root's decision id), not from a rendezvous. */
    const char *inherited_from;
    uint64_t inherited_decision;
};

/* Whether NCCL gets a config of the shim's (net_config) for this plan. */
static inline int plan_configures(const struct plan *p)
{
    return action_has(p->action, ACT_CONFIGURES);
}

#endif
