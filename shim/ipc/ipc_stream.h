/*
 * What shim/ipc/ipc_stream.c offers: the copy call, and the counters' stream
 * waits and writes queued together.
 */
#ifndef NCCLSHIM_IPC_STREAM_H
#define NCCLSHIM_IPC_STREAM_H

#include "ipc_comm.h"

#include <stddef.h>
#include <stdint.h>

/* A copy on `stream` (copy engines where the driver lets us ask). */
CUresult ipc_copy(const struct ipc_comm *c, CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream stream);

/*
 * Stream waits and writes queued and enqueued together: one
 * cuStreamBatchMemOp where the driver has it (in the array's order, as
 * the single calls would be), each alone where it has not or refuses it
 * (CUDA_ERROR_NOT_SUPPORTED: c->memops.single, for good).  Every driver
 * call costs the application's thread a microsecond or more, and a
 * broadcast's counter operations come in runs (a receiver's TAKEN write and
 * AVAIL wait; a root's fence and TAKEN waits): docs/benchmarks.md, "Host
 * time per broadcast".  A queue is flushed before anything else goes on
 * its stream (a copy, a launch) and before the operation returns.
 * memops_wait, memops_write: 0, or -1 with the reason (a full queue is
 * flushed); memops_flush: the same.
 */
#define MEMOPS_MAX 8
struct memops {
    struct ipc_comm *c;
    CUstream s;
    int n;
    CUstreamBatchMemOpParams op[MEMOPS_MAX];
};
static inline void memops_init(struct memops *m, struct ipc_comm *c, CUstream s)
{
    m->c = c;
    m->s = s;
    m->n = 0;
}
int memops_wait(struct memops *m, CUdeviceptr at, uint64_t v, char *why, size_t whylen);
int memops_write(struct memops *m, CUdeviceptr at, uint64_t v, char *why, size_t whylen);
int memops_flush(struct memops *m, char *why, size_t whylen);

#endif
