/*
 * drop: no communicator at all; the application holds a shim handle whose
 * operations complete as no-ops and are counted (shim/registry/vcomm_ops.c).
 */
#include "action_shared.h"

#include "comm.h"

#include <stdio.h>

static int drop_prepare(const struct plan_input *in, struct plan *p, uint8_t *blob, int *bloblen, char *why,
                        size_t whylen)
{
    (void)blob;
    (void)bloblen;
    p->vcomm = shim_comm_new(NULL, in->slot);
    if (!p->vcomm) {
        snprintf(why, whylen, "out of memory for a communicator handle");
        return -1;
    }
    return 0;
}

static int drop_hold(struct plan *p, int *monitor_fd)
{
    (void)monitor_fd;
    return p->vcomm ? 0 : -1;
}

const struct action_ops action_drop = {
    .action = ACTION_DROP,
    .prepare = drop_prepare,
    .hold = drop_hold,
    .instead_of_init = action_hand_over,
};
