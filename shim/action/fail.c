/*
 * fail (NCCLSHIM_STRICT=1 with a malformed policy): the init fails with
 * ncclInvalidUsage until the setting is fixed; NCCL is not called.
 */
#include "action_ops.h"

#include "record.h"

static ncclResult_t fail_init(const struct plan *p, const char *fn, ncclComm_t *newcomm)
{
    shim_warn("strict", "%s fails: %s", fn, p->action_reason);
    if (newcomm)
        *newcomm = NULL;
    return ncclInvalidUsage;
}

const struct action_ops action_fail = { .action = ACTION_FAIL, .instead_of_init = fail_init };
