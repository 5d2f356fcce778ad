/*
 * frugal: NCCL makes the communicator on the fabric, held to one channel:
 * the fewest network connections NCCL makes for a communicator
 * (docs/policy.md, "frugal"); where NCCL has it (2.28+), also one channel
 * per network peer for point-to-point.
 */
#include "action_shared.h"

#include <stdio.h>
#include <stdlib.h>

static const struct nccl_config_change frugal_set[] = { { CFG_minCTAs, 1, NULL }, { CFG_maxCTAs, 1, NULL },
                                                        { CFG_nChannelsPerNetPeer, 1, NULL } };
#define FRUGAL_NSET ((int)(sizeof(frugal_set) / sizeof(frugal_set[0])))

static ncclConfig_t *frugal_config(const struct plan_input *in, struct nccl_config_told *told, char *why,
                                   size_t whylen)
{
    int n = nccl_config_known(CFG_nChannelsPerNetPeer, in->slot->version) ? FRUGAL_NSET : FRUGAL_NSET - 1;
    return nccl_config_redirect(in->config, frugal_set, n, in->slot->version, told, why, whylen);
}

/* NCCL lets NCCL_MIN_CTAS and NCCL_MAX_CTAS replace the config's bounds, and
 * NCCL_MIN_NCHANNELS raise the channels past maxCTAs (graph/connect.cc);
 * it reads them once per process, so unlike NCCL_NET they cannot be hidden
 * from one init.  Set to more than 1, frugal would not be frugal. */
static int frugal_env_ok(char *why, size_t whylen)
{
    static const char *const names[] = { "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = getenv(names[i]);
        if (!v || !*v)
            continue;
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n != 1) {
            snprintf(why, whylen, "%s=%.40s in the environment would give NCCL more than the one channel frugal "
                     "asks for (NCCL reads it for every communicator of the process): unset it, or use socket",
                     names[i], v);
            return -1;
        }
    }
    return 0;
}

static int frugal_possible(const struct plan_input *in, char *why, size_t whylen)
{
    struct nccl_config_told told;
    ncclConfig_t *c = frugal_config(in, &told, why, whylen);
    if (!c)
        return -1;
    free(c);
    if (frugal_env_ok(why, whylen) != 0)
        return -1;
    return action_config_init_found(in, why, whylen);
}

static int frugal_prepare(const struct plan_input *in, struct plan *p, uint8_t *blob, int *bloblen, char *why,
                          size_t whylen)
{
    (void)blob;
    (void)bloblen;
    free(p->net_config); /* socket's, made for the HELLO */
    p->net_config = NULL;
    if (frugal_possible(in, why, whylen) != 0)
        return -1;
    p->net_config = frugal_config(in, &p->told, why, whylen);
    return p->net_config ? 0 : -1;
}

const struct action_ops action_frugal = {
    .action = ACTION_FRUGAL,
    .config = frugal_set,
    .nconfig = FRUGAL_NSET,
    .record_key = "frugal",
    .possible = frugal_possible,
    .prepare = frugal_prepare,
    .hold = action_holds_config,
};
