/*
 * Where a new communicator's action is decided (before NCCL is called):
 * through the rendezvous when its unique ID carries the root's mark, on this
 * rank's own evidence otherwise (and then always passthrough, or fail under
 * NCCLSHIM_STRICT with a malformed policy).  The rules themselves are in
 * policy/decide.c, what each action sets up in shim/action/; lifecycle.c
 * carries the plan out.
 */
#ifndef NCCLSHIM_DECISION_H
#define NCCLSHIM_DECISION_H

#include "plan.h"

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

/* At ncclGetUniqueId: whether the ID gets the rendezvous mark (NCCLSHIM_TAG),
 * and why or why not: an ID a binding makes does; one torch makes does where
 * its creator shows weight-update evidence (classify_torch_id). */
int plan_mark_id(enum api_family caller_api, char *why, size_t whylen);

#endif
