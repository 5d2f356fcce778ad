/*
 * What an action does, step by step: the hooks each action's file fills in
 * (passthrough.c, socket.c, ...).  A hook left NULL means the action needs
 * nothing at that step.  Types alone, so that the table (action.c) and the
 * actions' files share them without calling each other back.
 */
#ifndef NCCLSHIM_ACTION_OPS_H
#define NCCLSHIM_ACTION_OPS_H

#include "plan.h"

#include <stddef.h>
#include <stdint.h>

struct action_ops {
    enum action action;                 /* its row in policy/action.c */
    /* What it sets in the caller's config (ACT_CONFIGURES), and the key of
     * the comm record that shows those fields (NULL: only `told`). */
    const struct nccl_config_change *config;
    int nconfig;
    const char *record_key;
    /* Whether this rank could carry it out, from checks local to it: said in
     * its HELLO, so that the root never picks one a rank would veto. */
    int (*possible)(const struct plan_input *in, char *why, size_t whylen);
    /* Sets up on this rank what it needs, into *p (round 2 of the rendezvous,
     * or a child taking its parent's action); `blob` (may be NULL): what its
     * peers need of this rank (ACT_PEERS).  0, or -1 with the reason. */
    int (*prepare)(const struct plan_input *in, struct plan *p, uint8_t *blob, int *bloblen, char *why,
                   size_t whylen);
    /* Round 3 (ACT_PEERS): opens every peer's export. */
    int (*connect)(struct plan *p, const struct rv_peers *peers, char *why, size_t whylen);
    /* After the commit: 0 if this rank holds what the action needs; it may
     * take the root's connection (*monitor_fd, then set to -1). */
    int (*hold)(struct plan *p, int *monitor_fd);
    /* Carried out instead of NCCL's init (shim-only actions, fail): the
     * init's result.  NULL: NCCL's init is called. */
    ncclResult_t (*instead_of_init)(const struct plan *p, const char *fn, ncclComm_t *newcomm);
};

#endif
