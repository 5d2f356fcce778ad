/*
 * socket: NCCL makes the communicator on its Socket network: the caller's
 * config with netName "Socket", and NCCL_NET hidden from this one init
 * (shim/nccl/net_env.c), so that it takes none of the fabric's queue pairs.
 * Its checks are all local: a rank says in its HELLO whether it can.
 */
#define _GNU_SOURCE
#include "action_shared.h"

#include "net_env.h"

#include <stdlib.h>
#include <strings.h>

static const struct nccl_config_change socket_set[] = { { CFG_netName, 0, "Socket" } };

/* The caller's config with netName "Socket", if this rank can carry socket
 * out; NULL otherwise (so that a commit it did not vote for is refused). */
static int socket_prepare(const struct plan_input *in, struct plan *p, uint8_t *blob, int *bloblen, char *why,
                          size_t whylen)
{
    (void)blob;
    (void)bloblen;
    free(p->net_config);
    p->net_config = NULL;
    if (action_config_init_found(in, why, whylen) != 0)
        return -1;
    /* NCCL_NET would override the config's netName: the init hides it
     * where that is sure to work; otherwise every rank passes through,
     * rather than one silently leaving Socket. */
    const char *env = net_env_value();
    if (env && strcasecmp(env, "Socket") != 0 && !net_env_can_hide(in->slot->version, why, whylen))
        return -1;
    p->net_config = nccl_config_redirect(in->config, socket_set, 1, in->slot->version, &p->told, why, whylen);
    return p->net_config ? 0 : -1;
}

const struct action_ops action_socket = {
    .action = ACTION_SOCKET,
    .config = socket_set,
    .nconfig = 1,
    .prepare = socket_prepare,
    .hold = action_holds_config,
};
