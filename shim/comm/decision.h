/*
 * Where a new communicator's action is decided (before NCCL is called):
 * through the rendezvous when its unique ID carries the root's mark, on this
 * rank's own evidence otherwise (and then always passthrough, or fail under
 * NCCLSHIM_STRICT with a malformed policy).  The rules themselves are in
 * policy/decide.c; lifecycle.c carries the plan out.
 */
#ifndef NCCLSHIM_DECISION_H
#define NCCLSHIM_DECISION_H

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
    /* Set up in round 2; taken by lifecycle.c, else freed by plan_release. */
    struct shim_comm *vcomm;            /* drop, ipc: the shim-only handle */
    struct ipc_comm *ipc;               /* ipc: the transport */
    /* socket: the caller's config with netName "Socket"; frugal: held to one
     * channel (plan_configures) */
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

/* Whether the action gives NCCL a config of the shim's (net_config). */
static inline int plan_configures(const struct plan *p)
{
    return p->action == ACTION_SOCKET || p->action == ACTION_FRUGAL;
}

void plan_creation(const struct plan_input *in, struct plan *out);

/*
 * A split, shrink or grow of `parent` (a communicator NCCL made): every rank
 * of the parent holds the same decision, so the child takes the parent's
 * purpose and action, and ranks that split together decide together with no
 * exchange.  socket and frugal go through the child's config (the caller's,
 * redirected); passthrough stays passthrough, and a weight-update child of a
 * parent that was not redirected is recorded as unprotected.
 */
struct plan_parent {
    const char *group;                  /* the parent's name in the records */
    enum purpose purpose;
    enum action action;
    int unprotected;                    /* it was itself left to NCCL not by policy */
    uint64_t decision_id;               /* the root's, if any */
};
void plan_child(const struct plan_input *in, const struct plan_parent *parent, struct plan *out);
void plan_release(struct plan *p);

/* At ncclGetUniqueId: whether the ID gets the rendezvous mark (NCCLSHIM_TAG),
 * and why or why not: an ID a binding makes does; one torch makes does where
 * its creator shows weight-update evidence (classify_torch_id). */
int plan_mark_id(enum api_family caller_api, char *why, size_t whylen);

#endif
