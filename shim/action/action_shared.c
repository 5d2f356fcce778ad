/*
 * What several actions share (action_shared.h).
 */
#include "action_shared.h"

#include <stdio.h>
#include <string.h>

int action_config_init_found(const struct plan_input *in, char *why, size_t whylen)
{
    enum fn_index fn = strcmp(in->fn, "ncclCommInitRankScalable") == 0 ? FN_ncclCommInitRankScalable
                                                                       : FN_ncclCommInitRankConfig;
    if (!shim_resolve(in->slot, fn, NULL)) {
        snprintf(why, whylen, "the NCCL library (%s) lacks %s", in->slot->path, shim_fn_names[fn]);
        return -1;
    }
    return 0;
}

ncclResult_t action_hand_over(const struct plan *p, const char *fn, ncclComm_t *newcomm)
{
    (void)p;
    (void)fn;
    return newcomm ? ncclSuccess : ncclInvalidArgument;
}

int action_holds_config(struct plan *p, int *monitor_fd)
{
    (void)monitor_fd;
    return p->net_config ? 0 : -1;
}
