/*
 * What several actions share (action_shared.c).
 */
#ifndef NCCLSHIM_ACTION_SHARED_H
#define NCCLSHIM_ACTION_SHARED_H

#include "action_ops.h"

/* What socket and frugal share: whether this NCCL has the init a config goes
 * to (ncclCommInitRank has none: the shim calls ncclCommInitRankConfig). */
int action_config_init_found(const struct plan_input *in, char *why, size_t whylen);

/* The hold of an action that configures NCCL: the config it prepared. */
int action_holds_config(struct plan *p, int *monitor_fd);

/* The init of a shim-only action: the handle set up in round 2 is what the
 * caller receives (lifecycle.c stores it). */
ncclResult_t action_hand_over(const struct plan *p, const char *fn, ncclComm_t *newcomm);

#endif
