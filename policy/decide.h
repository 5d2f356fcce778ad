/*
 * Where a communicator's purpose and action are decided, at the root, from
 * the facts of all its ranks and the root's policy (NCCLSHIM_WEIGHT_UPDATE,
 * NCCLSHIM_RULES, NCCLSHIM_STRICT).  Pure functions: no I/O, no NCCL, no CUDA.
 * docs/policy.md documents every rule.
 */
#ifndef NCCLSHIM_POLICY_DECIDE_H
#define NCCLSHIM_POLICY_DECIDE_H

#include "facts.h"
#include "rules.h"

#include <stddef.h>

/* The most ranks the shim's ipc chain takes (shim/rendezvous/rv_wire.h RV_MAX_PEERS: a
 * counter per peer; shim/rendezvous/rv_server.c asserts they agree).  auto chooses socket
 * for more ranks on one host. */
#define POLICY_IPC_MAX_RANKS 64

/* What the root decides for one communicator. */
struct decision {
    enum purpose purpose;
    char purpose_reason[EVIDENCE_REASON_LEN];
    enum action action;
    char action_reason[EVIDENCE_REASON_LEN];
    int rule;                           /* index of the NCCLSHIM_RULES rule that matched, or -1 */
    int ntraining, ninference, nunknown;/* ranks per role */
    int nhosts;                         /* distinct host_id values */
    int nengine;                        /* ranks with an engine's own evidence (title or frames) */
    int nweak;                          /* ranks with only an engine library loaded */
    /* Not empty where the group looks like a weight-update bridge but is not
     * redirected for want of evidence, or its ranks' evidence disagrees: why,
     * and the setting that would protect it (docs/policy.md, "Never silent"). */
    char unrecognized[EVIDENCE_REASON_LEN];
};

/*
 * Purpose from the merged facts, then the action.  `facts` holds nranks
 * entries, index = rank.  `pp` gives the root's patterns (for call sites).
 */
void decide(const struct policy *p, const struct policy_patterns *pp, const struct rank_facts *facts, int nranks,
            struct decision *out);

#endif
