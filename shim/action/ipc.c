/*
 * ipc: no NCCL communicator; the shim moves the data itself over CUDA IPC
 * between the GPUs of one host (shim/ipc/).  Each rank exports its staging
 * in round 2, opens its peers' in round 3, and keeps its connection to the
 * root as the watch on its peers (shim/ipc/ipc_monitor.c).
 */
#include "action_shared.h"

#include "comm.h"
#include "ipc.h"

#include <stdio.h>
#include <unistd.h>

static int ipc_action_prepare(const struct plan_input *in, struct plan *p, uint8_t *blob, int *bloblen, char *why,
                              size_t whylen)
{
    p->vcomm = shim_comm_new(NULL, in->slot);
    if (!p->vcomm) {
        snprintf(why, whylen, "out of memory for a communicator handle");
        return -1;
    }
    if (ipc_prepare(&p->ipc, in->rank, in->nranks, blob, bloblen, why, whylen) != 0)
        return -1;
    ipc_set_group(p->ipc, in->group);
    return 0;
}

_Static_assert(IPC_EXPORT_MAX <= RV_BLOB_LEN, "an ipc export fits a vote");
_Static_assert(RV_MAX_PEERS <= IPC_MAX_RANKS, "the ipc transport takes every rank the rendezvous gives it");

/* The rendezvous's PEERS message as the transport's own list of exports
 * (ipc does not read the rendezvous's types). */
static int ipc_action_connect(struct plan *p, const struct rv_peers *peers, char *why, size_t whylen)
{
    if (!p->ipc) {
        snprintf(why, whylen, "nothing was set up in round 2");
        return -1;
    }
    struct ipc_peer_export ex[RV_MAX_PEERS];
    int n = peers->npeers < RV_MAX_PEERS ? peers->npeers : RV_MAX_PEERS;
    for (int i = 0; i < n; i++)
        ex[i] = (struct ipc_peer_export){ peers->peer[i].rank, peers->peer[i].bloblen, peers->peer[i].blob };
    return ipc_connect(p->ipc, ex, n, why, whylen);
}

/* ipc_watch takes the connection even when it cannot watch it. */
static int ipc_action_hold(struct plan *p, int *monitor_fd)
{
    if (p->ipc) {
        ipc_watch(p->ipc, *monitor_fd);
        *monitor_fd = -1;
    }
    return p->vcomm && p->ipc ? 0 : -1;
}

const struct action_ops action_ipc = {
    .action = ACTION_IPC,
    .prepare = ipc_action_prepare,
    .connect = ipc_action_connect,
    .hold = ipc_action_hold,
    .instead_of_init = action_hand_over,
};
