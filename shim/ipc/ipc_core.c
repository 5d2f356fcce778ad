/*
 * The primitives every other file of the transport uses, below all of them:
 * the counters read, written and waited for from the host, failure (ipc_fail
 * releases every stream that waits on a lost peer), the one copy call, the
 * futex words of the shared pages (suspend), and the trace.  Nothing here calls another ipc file but the driver table.
 */
#define _GNU_SOURCE
#include "ipc_internal.h"

#include "record.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void ipc_unlink_shared(struct ipc_comm *c)
{
    if (c->shm_name[0]) {
        shm_unlink(c->shm_name);
        c->shm_name[0] = '\0';
    }
}

/* Reads a peer's (or this rank's) counter from the host. */
void ipc_wait_word(_Atomic uint32_t *word, uint32_t seen, long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, ms < 0 ? NULL : &ts, NULL, 0);
}

void ipc_wake_word(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void ipc_wake(const struct ipc_comm *c, int r)
{
    _Atomic uint32_t *w = &c->shared[r]->word;
    atomic_fetch_add(w, 1);
    ipc_wake_word(w);
}

int ipc_read_flag(const struct ipc_comm *c, int r, int off, uint64_t *v)
{
    return c->cu->cuMemcpyDtoH(v, flag(c, r, off), sizeof(*v)) == CUDA_SUCCESS ? 0 : -1;
}

int ipc_write_flag(const struct ipc_comm *c, int off, uint64_t v)
{
    return c->cu->cuMemcpyHtoD(flag(c, c->rank, off), &v, sizeof(v)) == CUDA_SUCCESS ? 0 : -1;
}

/* The host waits until rank r's counter `off` reaches `want`; bounded. */
int ipc_wait_one(const struct ipc_comm *c, int r, int off, uint64_t want, uint64_t deadline, char *why,
                    size_t whylen)
{
    for (unsigned spins = 0;; spins++) {
        uint64_t v = 0;
        if (ipc_read_flag(c, r, off, &v) != 0) {
            snprintf(why, whylen, "reading rank %d's counter failed", r);
            return -1;
        }
        if ((int64_t)(v - want) >= 0)
            return 0;
        if (atomic_load(&c->peer_closed) && shim_mono_us() + HOST_WAIT_US - 1000000 > deadline) {
            /* A peer closed during destroy and a second has passed: it will not come. */
            snprintf(why, whylen, "rank %d left during destroy", r);
            return -1;
        }
        if (atomic_load(&c->failed)) {
            snprintf(why, whylen, "%s", c->failure);
            return -1;
        }
        if (shim_mono_us() > deadline) {
            if (r != c->rank && DATA_ST(ipc_data_state(c, r)) != DATA_ACTIVE)
                snprintf(why, whylen, "rank %d did not arrive within %llu s: it is suspended (ncclCommSuspend); "
                         "call ncclCommResume on it first", r, (unsigned long long)(HOST_WAIT_US / 1000000));
            else
                snprintf(why, whylen, "rank %d did not arrive within %llu s (it died, or stopped calling NCCL)", r,
                         (unsigned long long)(HOST_WAIT_US / 1000000));
            return -1;
        }
        /* Device memory has no host wake-up: poll, yielding the core. */
        struct timespec ts = { 0, spins < 100 ? 0 : 20000 };
        nanosleep(&ts, NULL);
    }
}

int ipc_wait_all(const struct ipc_comm *c, int off, uint64_t want, char *why, size_t whylen)
{
    uint64_t deadline = shim_mono_us() + HOST_WAIT_US;
    for (int r = 0; r < c->nranks; r++)
        if (ipc_wait_one(c, r, off, want, deadline, why, whylen) != 0)
            return -1;
    return 0;
}

int ipc_wait_fence(struct ipc_comm *c, uint64_t deadline, char *why, size_t whylen)
{
    pthread_mutex_lock(&c->qlock);
    int r = c->fence_rank, off = c->fence_off;
    uint64_t val = c->fence_val;
    pthread_mutex_unlock(&c->qlock);
    return val ? ipc_wait_one(c, r, off, val, deadline, why, whylen) : 0;
}

int ipc_same_gpu(const struct ipc_comm *c, int r)
{
    return r != c->rank && c->peer_dev && c->peer_dev[r] == c->device && c->peer && c->peer[r];
}

/* A peer is gone: no operation may wait for it any more.  Writes, from the
 * host, a value that satisfies every wait into every counter this rank's
 * streams may be waiting on (on its own page, and on one GPU two of its
 * neighbours': ipc_internal.h), so that the streams drain.
 * The data moved after this point is garbage; the error says so. */
void ipc_fail(struct ipc_comm *c, const char *why, int lost)
{
    int expected = 0;
    snprintf(c->failure, sizeof(c->failure), "%s", why);
    if (!atomic_compare_exchange_strong(&c->failed, &expected, 1))
        return;
    if (lost)
        shim_warn("ipc-peer-lost", "ipc communicator %s (rank %d of %d): %s; its operations now fail with "
                  "ncclRemoteError, the streams waiting on the peer are released (what they moved is not valid), "
                  "and destroy/abort return", c->group, c->rank, c->nranks, why);
    CUcontext cur = NULL;
    c->cu->cuCtxGetCurrent(&cur);
    if (cur != c->ctx)
        c->cu->cuCtxSetCurrent(c->ctx);
    uint64_t v = RELEASE;
    /* Every stream wait is on this rank's own page (but "One GPU", below). */
    CUdeviceptr page = c->peer[c->rank];
    c->cu->cuMemcpyHtoD(page + F_AVAIL, &v, sizeof(v));
    c->cu->cuMemcpyHtoD(page + F_TAKEN, &v, sizeof(v));
    for (int q = 0; q < c->nranks; q++) {
        c->cu->cuMemcpyHtoD(page + F_SENT + 8 * q, &v, sizeof(v));
        c->cu->cuMemcpyHtoD(page + F_RECVD + 8 * q, &v, sizeof(v));
    }
    c->cu->cuMemcpyHtoD(page + F_DONE, &v, sizeof(v));
    c->cu->cuMemcpyHtoD(page + F_TAKEN_MINE, &v, sizeof(v));
    /* And the neighbours' words it may wait on where they share its GPU
     * (ipc_internal.h, "One GPU"): the successor's AVAIL, the predecessor's
     * TAKEN.  Their own waits are released by their failure. */
    if (c->nranks > 1) {
        int succ = (c->rank + 1) % c->nranks, pred = (c->rank - 1 + c->nranks) % c->nranks;
        if (ipc_same_gpu(c, succ))
            c->cu->cuMemcpyHtoD(flag(c, succ, F_AVAIL), &v, sizeof(v));
        if (ipc_same_gpu(c, pred))
            c->cu->cuMemcpyHtoD(flag(c, pred, F_TAKEN), &v, sizeof(v));
    }
    if (cur != c->ctx)
        c->cu->cuCtxSetCurrent(cur);
    /* A host wait for a neighbour's descriptor looks at `failed` as it polls. */
}

void ipc_fail_everywhere(struct ipc_comm *c, const char *why)
{
    shim_warn("ipc", "ipc communicator %s (rank %d of %d): %s; it fails here and at every peer (ncclRemoteError)",
              c->group, c->rank, c->nranks, why);
    ipc_fail(c, why, 0);
    if (c->monitor_fd >= 0)
        shutdown(c->monitor_fd, SHUT_RDWR);
}

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

static int tracing(void)
{
    /* Atomic: broadcasts of several communicators may ask at once; every
     * first reader computes the same value. */
    static atomic_int on = -1;
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        v = getenv("NCCLSHIM_IPC_TRACE") && strcmp(getenv("NCCLSHIM_IPC_TRACE"), "1") == 0;
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

void ipc_trace(const struct ipc_comm *c, const char *fmt, ...)
{
    if (!tracing())
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ncclshim-trace: %.6f rank %d tid %d: %s\n", shim_now(), c->rank, shim_gettid(), line);
}

/* Whether the last operation is over (the fence reached), or the
 * communicator failed (its waits released).  qlock held.  Read on the
 * communicator's own stream (nothing else runs on it): a plain cuMemcpyDtoH
 * would wait for the application's legacy default stream. */
int ipc_fence_passed(const struct ipc_comm *c)
{
    uint64_t v = 0;
    if (atomic_load(&c->failed) || !c->fence_val)
        return 1;
    return c->cu->cuMemcpyDtoHAsync(&v, flag(c, c->fence_rank, c->fence_off), sizeof(v), c->stream) == CUDA_SUCCESS &&
           c->cu->cuStreamSynchronize(c->stream) == CUDA_SUCCESS && v >= c->fence_val;
}
