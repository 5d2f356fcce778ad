/*
 * ncclGroupStart/End as the shim sees them (group.h): a thread's group depth,
 * and the ipc Send/Recv held until the group ends, because NCCL runs a
 * group's point-to-point operations together and the transport must too.
 */
#define _GNU_SOURCE
#include "group.h"

#include "comm.h"
#include "record.h"

#include <stdlib.h>
#include <string.h>

/* Per thread, as NCCL's groups are: the depth, and the queued Send/Recv. */
struct pending {
    struct shim_comm *h;
    struct ipc_p2p op;
};
static __thread int t_depth;
static __thread struct pending *t_queue;
static __thread int t_queued, t_cap;

static ncclResult_t run(struct shim_comm *h, const struct ipc_p2p *ops, int n, const char *fn)
{
    char why[512] = "";
    ncclResult_t r = ipc_p2p(h->ipc, ops, n, why, sizeof(why));
    if (r != ncclSuccess)
        shim_warn("ipc", "%s on ipc communicator %s (rank %d of %d) returns %d: %s", fn, h->group, h->rank,
                  h->nranks, (int)r, why);
    return r;
}

/* Runs the queue, communicator by communicator, in the order of first use. */
static ncclResult_t flush(void)
{
    ncclResult_t first = ncclSuccess;
    struct ipc_p2p *ops = malloc((size_t)t_queued * sizeof(*ops));
    for (int i = 0; i < t_queued; i++) {
        struct shim_comm *h = t_queue[i].h;
        if (!h)
            continue;
        int n = 0;
        for (int j = i; j < t_queued; j++) {
            if (t_queue[j].h != h)
                continue;
            if (ops)
                ops[n++] = t_queue[j].op;
            t_queue[j].h = NULL;
        }
        ncclResult_t r = ops ? run(h, ops, n, "ncclGroupEnd (Send/Recv)") : ncclSystemError;
        if (first == ncclSuccess)
            first = r;
    }
    free(ops);
    /* Freed, not kept: a thread that ends leaves nothing behind. */
    free(t_queue);
    t_queue = NULL;
    t_queued = t_cap = 0;
    return first;
}

ncclResult_t group_ncclGroupStart(struct shim_slot *slot, const void *caller)
{
    ncclResult_t (*f)(void) = (ncclResult_t(*)(void))shim_real(slot, FN_ncclGroupStart, caller);
    if (!f)
        return ncclInternalError;
    ncclResult_t r = f();
    if (r == ncclSuccess)
        t_depth++;
    return r;
}

ncclResult_t group_ncclGroupEnd(struct shim_slot *slot, const void *caller)
{
    ncclResult_t (*f)(void) = (ncclResult_t(*)(void))shim_real(slot, FN_ncclGroupEnd, caller);
    if (!f)
        return ncclInternalError;
    ncclResult_t r = f();
    if (t_depth > 0 && --t_depth == 0 && t_queued) {
        ncclResult_t q = flush();
        if (r == ncclSuccess)
            r = q;
    }
    return r;
}

ncclResult_t group_ipc_p2p(struct shim_comm *h, const struct ipc_p2p *op, const char *fn)
{
    if (t_depth == 0)
        return run(h, op, 1, fn);
    if (t_queued == t_cap) {
        int cap = t_cap ? t_cap * 2 : 16;
        struct pending *q = realloc(t_queue, (size_t)cap * sizeof(*q));
        if (!q)
            return ncclSystemError;
        t_queue = q;
        t_cap = cap;
    }
    t_queue[t_queued++] = (struct pending){ h, *op };
    return ncclSuccess;
}
