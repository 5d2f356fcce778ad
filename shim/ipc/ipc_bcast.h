/*
 * What shim/ipc/ipc_bcast.c offers: one broadcast along the ring, enqueued
 * whole on the caller's stream (the protocol: ipc_proto.h), and the cache of
 * this rank's exported allocations its descriptors name.
 */
#ifndef NCCLSHIM_IPC_BCAST_H
#define NCCLSHIM_IPC_BCAST_H

#include "ipc_comm.h"

#include <stddef.h>
#include <stdint.h>

/* One broadcast, as the application's thread issues it. */
struct ipc_bcast_args {
    uint64_t b;                         /* broadcast number, from 1 */
    uint64_t op;                        /* DONE before it */
    uint64_t base;                      /* bytes broadcast before it */
    size_t bytes;
    int root;
    CUdeviceptr send, recv;
    /* The operation before, if it ran on another stream (fence_val 0: on
     * this one, or none): this one waits for it (or see "Receivers run ahead"). */
    int fence_rank, fence_off;
    uint64_t fence_val;
};

/* Broadcast j on the caller's stream `s` (qlock held): 0 and the fence in
 * *rank, *off and *val (*off < 0: it moved nothing), or -1 with the reason. */
int ipc_chain_bcast(struct ipc_comm *c, const struct ipc_bcast_args *j, CUstream s, int *rank, int *off, uint64_t *val,
                    char *why, size_t whylen);

/* An operation other than a broadcast was enqueued: the next broadcast
 * waits for it ("Senders overlap" does not apply). */
static inline void ipc_bcast_after_other(struct ipc_comm *c)
{
    c->bc.last_push_only = 0;
}

/* Forgets this rank's exported allocations (destroy). */
void ipc_forget_exports(struct ipc_comm *c);

/* How many allocations of this rank's are in the export cache (qlock held). */
int ipc_exports_count(const struct ipc_comm *c);
/* The reaper's turn (qlock held): asks whether exported allocations still
 * live and tells the neighbours of the freed ones ("Mappings kept",
 * ipc_proto.h); the ms until it wants to run again, or -1 (none exported). */
long ipc_exports_reap(struct ipc_comm *c);

#endif
