/*
 * The primitives every other file of the transport uses, below all of them:
 * the counters read, written and waited for from the host (bounded: a peer
 * that stopped answering must not hang the application), a rank's own
 * futex word woken, and the trace.  Nothing here calls another ipc file but
 * ipc_futex.c, the futex words themselves.
 */
#define _GNU_SOURCE
#include "ipc_core.h"

#include "clock.h"
#include "record.h"

#include <limits.h>
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
        if (ipc_failed(c, why, whylen))
            return -1;
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
    return atomic_load(&c->fail.failed) || !c->is.fence_val ||
           ipc_read_flag(c, c->is.fence_rank, c->is.fence_off) >= c->is.fence_val;
}
