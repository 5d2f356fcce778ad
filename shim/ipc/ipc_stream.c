/*
 * What the transport puts on a stream besides kernels: the copy call, and
 * the counters' waits and writes queued and enqueued together (one
 * cuStreamBatchMemOp where the driver takes it).  It owns struct
 * ipc_memops_mode.
 */
#define _GNU_SOURCE
#include "ipc_stream.h"
#include "ipc_core.h"

#include <string.h>

/*
 * A copy on `stream`.  Where the driver has cuMemcpyBatchAsync (CUDA 12.8+),
 * with the hint to overlap with compute: a copy within one device is
 * otherwise free to run as a kernel on the SMs, which under a busy matmul
 * loop starves it (measured: 42 GB/s instead of 320, docs/benchmarks.md).
 */
CUresult ipc_copy(const struct ipc_comm *c, CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream stream)
{
    if (c->cu->cuMemcpyBatchAsync) {
        CUmemcpyAttributes attr = { 1, { 1, c->device }, { 1, c->device }, 1 };
        size_t idx = 0, fail = 0;
        CUresult r = c->cu->cuMemcpyBatchAsync(&dst, &src, &len, 1, &attr, &idx, 1, &fail, stream);
        if (r == CUDA_SUCCESS)
            return r;
    }
    return c->cu->cuMemcpyDtoDAsync(dst, src, len, stream);
}

#define CUDA_ERROR_NOT_SUPPORTED 801

static int memops_add(struct memops *m, int kind, CUdeviceptr at, uint64_t v, char *why, size_t whylen)
{
    if (m->n == MEMOPS_MAX && memops_flush(m, why, whylen) != 0)
        return -1;
    CUstreamBatchMemOpParams *o = &m->op[m->n++];
    memset(o, 0, sizeof(*o));
    o->value.operation = kind;
    o->value.address = at;
    o->value.value64 = v;
    o->value.flags = kind == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? CU_STREAM_WAIT_VALUE_GEQ : CU_STREAM_WRITE_VALUE_DEFAULT;
    return 0;
}

int memops_wait(struct memops *m, CUdeviceptr at, uint64_t v, char *why, size_t whylen)
{
    return memops_add(m, CU_STREAM_MEM_OP_WAIT_VALUE_64, at, v, why, whylen);
}

int memops_write(struct memops *m, CUdeviceptr at, uint64_t v, char *why, size_t whylen)
{
    return memops_add(m, CU_STREAM_MEM_OP_WRITE_VALUE_64, at, v, why, whylen);
}

/* The queue's operations one by one, from the i-th. */
static int memops_singly(struct memops *m, int i, char *why, size_t whylen)
{
    const struct shim_cuda *cu = m->c->cu;
    for (; i < m->n; i++) {
        const CUstreamBatchMemOpParams *o = &m->op[i];
        int wait = o->value.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
        CUresult r = wait ? cu->cuStreamWaitValue64(m->s, o->value.address, o->value.value64, o->value.flags)
                          : cu->cuStreamWriteValue64(m->s, o->value.address, o->value.value64, o->value.flags);
        if (cu_check(r, wait ? "cuStreamWaitValue64" : "cuStreamWriteValue64", why, whylen) != 0)
            return -1;
    }
    return 0;
}

int memops_flush(struct memops *m, char *why, size_t whylen)
{
    struct ipc_comm *c = m->c;
    int n = m->n, rc;
    if (!n)
        return 0;
    if (n > 1 && c->cu->cuStreamBatchMemOp && !atomic_load_explicit(&c->memops.single, memory_order_relaxed)) {
        CUresult r = c->cu->cuStreamBatchMemOp(m->s, (unsigned)n, m->op, 0);
        if (r == CUDA_SUCCESS) {
            m->n = 0;
            return 0;
        }
        if (r != CUDA_ERROR_NOT_SUPPORTED) {
            m->n = 0;
            return cu_check(r, "cuStreamBatchMemOp", why, whylen);
        }
        /* Refused as a whole, nothing enqueued: one by one from now on. */
        atomic_store_explicit(&c->memops.single, 1, memory_order_relaxed);
        ipc_trace(c, "cuStreamBatchMemOp not supported: stream memory operations one by one");
    }
    rc = memops_singly(m, 0, why, whylen);
    m->n = 0;
    return rc;
}
