/*
 * ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29) on an ipc
 * communicator.  Colocated RL puts the inference engine to sleep between
 * refits and gives its GPU memory back; these are the calls it makes.
 *
 * What a suspend can give back on one rank alone: the mappings of the peers'
 * buffers (each keeps a peer's freed memory alive) and nothing else.  The
 * rank's own allocation (counters, staging, Send/Recv slots) is mapped by
 * every peer through legacy CUDA IPC, and the driver keeps memory alive while
 * any process maps it: freeing it here would release nothing until every peer
 * closed it, and a peer only learns of it at its next operation.  So that
 * allocation is reported as persistent (ncclStatGpuMemPersist), as NCCL
 * reports the memory its suspend keeps.
 */
#include "ipc_internal.h"

#include "record.h"

#include <stdio.h>

static size_t own_bytes(const struct ipc_comm *c)
{
    return p2p_offset(c) + (size_t)c->nranks * P2P_SLOTS * c->p2p_chunk;
}

int ipc_suspend(struct ipc_comm *c, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    CUcontext cur = NULL;
    if (cu->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != c->ctx)
        cu->cuCtxSetCurrent(c->ctx);
    /* This rank's last operation is over (its fence), so that no copy
     * through a mapping is still queued when the mapping goes. */
    int rc = ipc_wait_fence(c, shim_mono_us() + HOST_WAIT_US, why, whylen) != 0 ? -1 : 0;
    if (rc == 0) {
        pthread_mutex_lock(&c->qlock);
        ipc_trim_maps(c, 0);
        pthread_mutex_unlock(&c->qlock);
    }
    if (cur != c->ctx)
        cu->cuCtxSetCurrent(cur);
    return rc;
}

void ipc_mem_stats(const struct ipc_comm *c, int suspended, uint64_t out[4])
{
    out[ncclStatGpuMemSuspend] = 0;
    out[ncclStatGpuMemSuspended] = (uint64_t)(suspended != 0);
    out[ncclStatGpuMemPersist] = own_bytes(c);
    out[ncclStatGpuMemTotal] = own_bytes(c);
}
