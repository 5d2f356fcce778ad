/*
 * The primitives every other file of the transport uses, below all of them:
 * the counters read, written and waited for from the host, failure (ipc_fail
 * releases every stream that waits on a lost peer), the one copy call, the
 * futex words of the shared pages (suspend), and the trace.  Nothing here calls another ipc file but the driver table.
 */
#define _GNU_SOURCE
#include "ipc_core.h"

#include "clock.h"
#include "record.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

void ipc_wait_word_counted(_Atomic uint32_t *word, _Atomic uint32_t *sleepers, uint32_t seen, long ms,
                           int (*ready)(const void *), const void *arg)
{
    atomic_fetch_add(sleepers, 1);
    if (!ready(arg))
        ipc_wait_word(word, seen, ms);
    atomic_fetch_sub(sleepers, 1);
}

void ipc_wake_counted(_Atomic uint32_t *word, _Atomic uint32_t *sleepers)
{
    atomic_fetch_add(word, 1);
    if (atomic_load(sleepers))
        ipc_wake_word(word);
}

void ipc_wake(const struct ipc_comm *c, int r)
{
    _Atomic uint32_t *w = &c->shared[r]->word;
    atomic_fetch_add(w, 1);
    ipc_wake_word(w);
}

/* Counters are host memory (ipc_proto.h, "Counters in host memory"):
 * the host reads and writes them without the driver. */
uint64_t ipc_read_flag(const struct ipc_comm *c, int r, int off)
{
    return atomic_load_explicit(host_flag(c, r, off), memory_order_acquire);
}

void ipc_write_flag(const struct ipc_comm *c, int off, uint64_t v)
{
    atomic_store_explicit(host_flag(c, c->rank, off), v, memory_order_release);
}

/* The host waits until rank r's counter `off` reaches `want`; bounded. */
int ipc_wait_one(const struct ipc_comm *c, int r, int off, uint64_t want, uint64_t deadline, char *why,
                    size_t whylen)
{
    for (unsigned spins = 0;; spins++) {
        uint64_t v = ipc_read_flag(c, r, off);
        if ((int64_t)(v - want) >= 0)
            return 0;
        if (atomic_load(&c->watch.peer_closed) && shim_mono_us() + HOST_WAIT_US - 1000000 > deadline) {
            /* A peer closed during destroy and a second has passed: it will not come. */
            snprintf(why, whylen, "rank %d left during destroy", r);
            return -1;
        }
        if (atomic_load(&c->fail.failed)) {
            snprintf(why, whylen, "%s", c->fail.why);
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
    int r = c->is.fence_rank, off = c->is.fence_off;
    uint64_t val = c->is.fence_val;
    pthread_mutex_unlock(&c->qlock);
    return val ? ipc_wait_one(c, r, off, val, deadline, why, whylen) : 0;
}

int ipc_same_gpu(const struct ipc_comm *c, int r)
{
    return r != c->rank && c->peer_dev && c->peer_dev[r] == c->device && c->peer && c->peer[r];
}

/* Stores RELEASE into every counter this rank's streams may be waiting on:
 * on its own page, and on one GPU two of its neighbours' (ipc_proto.h,
 * "One GPU": the successor's AVAIL, the predecessor's TAKEN; their own waits
 * are released by their failure).  Plain stores into host memory, which the
 * waiting streams poll: no stream is needed, so none can be in the way. */
void ipc_release_waits(struct ipc_comm *c)
{
    if (!c->shared || !c->shared[c->rank])
        return;
    static const int own[] = { F_AVAIL, F_TAKEN, F_DONE, F_TAKEN_MINE };
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        ipc_write_flag(c, own[i], RELEASE);
    for (int q = 0; q < c->nranks && q < MAX_PEERS; q++) {
        ipc_write_flag(c, F_SENT + 8 * q, RELEASE);
        ipc_write_flag(c, F_RECVD + 8 * q, RELEASE);
    }
    if (c->nranks > 1) {
        int succ = (c->rank + 1) % c->nranks, pred = (c->rank - 1 + c->nranks) % c->nranks;
        if (ipc_same_gpu(c, succ))
            atomic_store(host_flag(c, succ, F_AVAIL), RELEASE);
        if (ipc_same_gpu(c, pred))
            atomic_store(host_flag(c, pred, F_TAKEN), RELEASE);
    }
}

/* A peer is gone: no operation may wait for it any more.  The waits are
 * released at once (ipc_release_waits), and again by the reaper for a while
 * (ipc_reaper.c): a neighbour's stream, released a moment later, may still
 * write its own lower value over a RELEASE of this rank's page.
 * The data moved after this point is garbage; the error says so. */
void ipc_fail(struct ipc_comm *c, const char *why, int lost)
{
    int expected = 0;
    /* One failure wins and writes its reason, then says `failed` (a release):
     * whoever sees it reads the whole reason, never one that a second failure
     * (the monitor's, beside the application's abort) is writing over. */
    if (!atomic_compare_exchange_strong(&c->fail.failing, &expected, 1))
        return;
    snprintf(c->fail.why, sizeof(c->fail.why), "%s", why);
    atomic_store_explicit(&c->fail.failed, 1, memory_order_release);
    ipc_release_waits(c);
    atomic_store(&c->fail.since_us, shim_mono_us());
    if (lost)
        shim_warn("ipc-peer-lost", "ipc communicator %s (rank %d of %d): %s; its operations now fail with "
                  "ncclRemoteError, and the streams waiting on the peer are released (a stream synchronisation "
                  "returns); what they moved since is not valid. Destroy or abort it, and create a new one with a "
                  "new unique ID once the lost rank is replaced", c->group, c->rank, c->nranks, why);
    /* The reaper repeats the release; a host wait looks at `failed` as it polls. */
    if (c->shared && c->shared[c->rank])
        ipc_wake(c, c->rank);
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

/* shim_mono_us() while tracing, else 0: the traces' timings cost a
 * broadcast nothing otherwise. */
uint64_t ipc_trace_clock(void)
{
    return tracing() ? shim_mono_us() : 0;
}

/* Whether the last operation is over (the fence reached), or the
 * communicator failed (its waits released).  qlock held. */
int ipc_fence_passed(const struct ipc_comm *c)
{
    return atomic_load(&c->fail.failed) || !c->is.fence_val || ipc_read_flag(c, c->is.fence_rank, c->is.fence_off) >= c->is.fence_val;
}
