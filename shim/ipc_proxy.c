/*
 * The broadcast's proxy thread (the protocol: ipc_internal.h).  One per ipc
 * communicator, started at its first broadcast: it takes the broadcasts its
 * application thread enqueued, in order, learns where its predecessor's data
 * is (the descriptor in the predecessor's shared page), maps that buffer, and
 * enqueues the copies and counter operations on the communicator's stream.
 * It is the only thread that waits on the host for a peer; the application's
 * thread never does.
 */
#define _GNU_SOURCE
#include "ipc_internal.h"

#include "record.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Shared (not private) futexes: the words live in shared memory. */
static void futex_wait(_Atomic uint32_t *word, uint32_t seen, long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int stopping(struct ipc_comm *c)
{
    pthread_mutex_lock(&c->qlock);
    int stop = c->stop;
    pthread_mutex_unlock(&c->qlock);
    return stop;
}

/* Whether a host wait for rank r must end: the communicator failed, or r
 * has not moved for HOST_WAIT_US (it died without its connection closing,
 * or stopped calling NCCL). */
static int give_up(struct ipc_comm *c, uint64_t deadline, int r, const char *what, char *why, size_t whylen)
{
    if (atomic_load(&c->failed)) {
        snprintf(why, whylen, "%s", c->failure);
        return 1;
    }
    if (stopping(c)) {
        snprintf(why, whylen, "the communicator is being destroyed");
        return 1;
    }
    if (shim_mono_us() > deadline) {
        snprintf(why, whylen, "rank %d did not %s within %llu s (it died, or stopped calling NCCL)", r, what,
                 (unsigned long long)(HOST_WAIT_US / 1000000));
        return 1;
    }
    return 0;
}

/* Publishes this rank's descriptor of broadcast b, once the successor has
 * read the one DRING before it (whose place it takes). */
static int publish(struct ipc_comm *c, uint64_t b, const struct ipc_desc *d, char *why, size_t whylen)
{
    int succ = (c->rank + 1) % c->nranks;
    struct ipc_shared *own = c->shared[c->rank], *next = c->shared[succ];
    uint64_t deadline = shim_mono_us() + HOST_WAIT_US;
    for (;;) {
        uint32_t seen = atomic_load(&next->readc);
        if (atomic_load(&next->read_upto) + DRING >= b)
            break;
        if (give_up(c, deadline, succ, "read this rank's earlier broadcasts", why, whylen))
            return -1;
        futex_wait(&next->readc, seen, 50);
    }
    struct ipc_desc *slot = &own->ring[b % DRING];
    slot->direct = d->direct;
    slot->buffer_id = d->buffer_id;
    slot->offset = d->offset;
    slot->alloc_size = d->alloc_size;
    slot->handle = d->handle;
    atomic_store_explicit(&slot->seq, b, memory_order_release);
    atomic_fetch_add(&own->pub, 1);
    futex_wake(&own->pub);
    return 0;
}

/* Reads the predecessor's descriptor of broadcast b, waiting for it. */
static int fetch(struct ipc_comm *c, uint64_t b, struct ipc_desc *d, char *why, size_t whylen)
{
    int pred = (c->rank - 1 + c->nranks) % c->nranks;
    struct ipc_shared *prev = c->shared[pred];
    const struct ipc_desc *slot = &prev->ring[b % DRING];
    uint64_t deadline = shim_mono_us() + HOST_WAIT_US;
    for (;;) {
        uint32_t seen = atomic_load(&prev->pub);
        if (atomic_load_explicit(&slot->seq, memory_order_acquire) == b)
            break;
        if (give_up(c, deadline, pred, "enqueue the same broadcast", why, whylen))
            return -1;
        futex_wait(&prev->pub, seen, 50);
    }
    /* Stays put until this rank says it read it (mark_read). */
    d->direct = slot->direct;
    d->buffer_id = slot->buffer_id;
    d->offset = slot->offset;
    d->alloc_size = slot->alloc_size;
    d->handle = slot->handle;
    return 0;
}

static void mark_read(struct ipc_comm *c, uint64_t b)
{
    struct ipc_shared *own = c->shared[c->rank];
    atomic_store(&own->read_upto, b);
    atomic_fetch_add(&own->readc, 1);
    futex_wake(&own->readc);
}

/* Whether `bytes` at `buf` can be read by the successor where they are: an
 * allocation cuIpcGetMemHandle exports.  Else d->direct stays 0 (staged). */
static void describe(struct ipc_comm *c, uint64_t b, CUdeviceptr buf, size_t bytes, struct ipc_desc *d)
{
    const struct shim_cuda *cu = c->cu;
    memset(d, 0, sizeof(*d));
    CUdeviceptr start = 0;
    size_t size = 0;
    unsigned long long id = 0;
    if (!bytes || cu->cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, buf) != CUDA_SUCCESS ||
        cu->cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, buf) != CUDA_SUCCESS ||
        cu->cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, buf) != CUDA_SUCCESS || !id ||
        buf < start || buf - start > size || bytes > size - (buf - start))
        return;
    struct ipc_exported *e = NULL, *lru = &c->exported[0];
    for (int i = 0; i < EXPORT_CACHE && !e; i++) {
        if (c->exported[i].buffer_id == id && c->exported[i].start == start)
            e = &c->exported[i];
        else if (c->exported[i].last_b < lru->last_b)
            lru = &c->exported[i];
    }
    if (!e) {
        CUipcMemHandle h;
        /* Fails for memory of cuMemCreate (expandable segments): staged. */
        if (cu->cuIpcGetMemHandle(&h, start) != CUDA_SUCCESS)
            return;
        e = lru;
        e->buffer_id = id;
        e->start = start;
        e->handle = h;
    }
    e->last_b = b;
    d->direct = 1;
    d->buffer_id = id;
    d->offset = buf - start;
    d->alloc_size = size;
    d->handle = e->handle;
}

/*
 * Gives back the mappings beyond the `keep` most recently used.  Only ever
 * called with qlock held and no broadcast queued or being enqueued: closing
 * a mapping waits (inside the driver) for the work issued before it, and
 * that work must not include a caller's stream waiting for this proxy (a
 * broadcast queued but not yet enqueued), nor may one be issued meanwhile
 * (the caller queues under qlock).  Measured on H200: a close issued while a
 * broadcast was half enqueued never returned.  The copies that read the
 * mappings are waited for first.
 */
static void trim_maps(struct ipc_comm *c, int keep)
{
    if (c->nmap <= keep)
        return;
    c->cu->cuStreamSynchronize(c->stream);
    while (c->nmap > keep) {
        int lru = 0;
        for (int i = 1; i < c->nmap; i++)
            if (c->map[i].last_b < c->map[lru].last_b)
                lru = i;
        c->cu->cuIpcCloseMemHandle(c->map[lru].base);
        c->map[lru] = c->map[--c->nmap];
    }
}

/* The predecessor's allocation of `d`, mapped here (cached; never closed
 * here: see trim_maps). */
static int map_pred(struct ipc_comm *c, uint64_t b, const struct ipc_desc *d, CUdeviceptr *base, char *why,
                    size_t whylen)
{
    struct ipc_map *m = NULL;
    for (int i = 0; i < c->nmap && !m; i++)
        if (c->map[i].buffer_id == d->buffer_id && memcmp(&c->map[i].handle, &d->handle, sizeof(d->handle)) == 0)
            m = &c->map[i];
    if (!m) {
        if (c->nmap == c->capmap) {
            int cap = c->capmap ? 2 * c->capmap : MAP_CACHE;
            struct ipc_map *grown = realloc(c->map, (size_t)cap * sizeof(*grown));
            if (!grown) {
                snprintf(why, whylen, "out of memory");
                return -1;
            }
            c->map = grown;
            c->capmap = cap;
        }
        CUdeviceptr p = 0;
        CUresult r = c->cu->cuIpcOpenMemHandle(&p, d->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r != CUDA_SUCCESS) {
            char err[160];
            snprintf(why, whylen, "opening the predecessor's buffer (%llu bytes) for broadcast %llu: %s",
                     (unsigned long long)d->alloc_size, (unsigned long long)b,
                     shim_cuda_error("cuIpcOpenMemHandle", r, err, sizeof(err)));
            return -1;
        }
        m = &c->map[c->nmap++];
        m->buffer_id = d->buffer_id;
        m->handle = d->handle;
        m->base = p;
    }
    m->last_b = b;
    *base = m->base;
    return 0;
}

/* A rank's copies of its own data into its staging slots, for a successor
 * that cannot read its buffer: chunk k once the data is here, into slot
 * k % S once the successor has taken chunk k - S out of it. */
struct staging {
    struct ipc_comm *c;
    CUdeviceptr data;
    size_t bytes;
    uint64_t base;                      /* bytes broadcast before this one */
    uint64_t next, nchunks;             /* chunks staged, and to stage */
};

static int stage_upto(struct staging *st, size_t limit, char *why, size_t whylen)
{
    struct ipc_comm *c = st->c;
    const struct shim_cuda *cu = c->cu;
    const uint64_t S = (uint64_t)c->nslots;
    const size_t sch = c->chunk;
    int succ = (c->rank + 1) % c->nranks;
    for (; st->next < st->nchunks; st->next++) {
        size_t off = (size_t)(st->next * sch), len = st->bytes - off < sch ? st->bytes - off : sch;
        if (off + len > limit)
            break;
        if (st->next >= S)
            CU(cu->cuStreamWaitValue64(c->stream, flag(c, c->rank, F_TAKEN), st->base + (st->next - S + 1) * sch,
                                       CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue64");
        CU(ipc_copy(c, slot(c, c->rank, st->next), st->data + off, len, c->stream), "cuMemcpyDtoDAsync");
        CU(cu->cuStreamWriteValue64(c->stream, flag(c, succ, F_AVAIL), st->base + off + len,
                                    CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue64");
    }
    return 0;
fail:
    return -1;
}

/* One broadcast, enqueued on the communicator's stream. */
static int run_broadcast(struct ipc_comm *c, const struct ipc_job *j, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    CUstream ps = c->stream;
    int n = c->nranks, me = c->rank;
    int pos = (me - j->root + n) % n, pred = (me - 1 + n) % n, succ = (me + 1) % n;
    int producer = pos < n - 1, consumer = pos > 0;
    const uint64_t base = j->base;
    const size_t bytes = j->bytes, sch = c->chunk;
    CUdeviceptr mine = pos == 0 ? j->send : j->recv;
    struct ipc_desc dm, dp;
    memset(&dm, 0, sizeof(dm));
    memset(&dp, 0, sizeof(dp));

    CU(cu->cuStreamWaitEvent(ps, j->ready, 0), "cuStreamWaitEvent");
    if (producer) {
        describe(c, j->b, mine, bytes, &dm);
        if (publish(c, j->b, &dm, why, whylen) != 0)
            return -1;
    }
    if (consumer && fetch(c, j->b, &dp, why, whylen) != 0)
        return -1;
    mark_read(c, j->b);
    CUdeviceptr from = 0;
    if (consumer && dp.direct && bytes) {
        if (dp.offset > dp.alloc_size || bytes > dp.alloc_size - dp.offset) {
            snprintf(why, whylen, "the predecessor's buffer (%llu bytes at %llu) is smaller than the broadcast "
                     "(%zu bytes): the ranks disagree on its count or datatype", (unsigned long long)dp.alloc_size,
                     (unsigned long long)dp.offset, bytes);
            return -1;
        }
        if (map_pred(c, j->b, &dp, &from, why, whylen) != 0)
            return -1;
        from += dp.offset;
    }
    if (pos == 0 && j->recv != j->send && bytes)
        CU(ipc_copy(c, j->recv, j->send, bytes, ps), "cuMemcpyDtoDAsync");

    struct staging st = { c, mine, bytes, base, 0, producer && !dm.direct ? (bytes + sch - 1) / sch : 0 };
    if (consumer) {
        /* In the predecessor's steps: its staging chunks, or direct steps. */
        size_t step = !dp.direct ? sch : n == 2 ? bytes : sch * (size_t)c->nslots;
        for (size_t off = 0; off < bytes; off += step) {
            size_t len = bytes - off < step ? bytes - off : step;
            CU(cu->cuStreamWaitValue64(ps, flag(c, me, F_AVAIL), base + off + len, CU_STREAM_WAIT_VALUE_GEQ),
               "cuStreamWaitValue64");
            CUdeviceptr src = dp.direct ? from + off : slot(c, pred, off / sch);
            CU(ipc_copy(c, j->recv + off, src, len, ps), "cuMemcpyDtoDAsync");
            CU(cu->cuStreamWriteValue64(ps, flag(c, pred, F_TAKEN), base + off + len, CU_STREAM_WRITE_VALUE_DEFAULT),
               "cuStreamWriteValue64");
            if (producer && dm.direct)
                CU(cu->cuStreamWriteValue64(ps, flag(c, succ, F_AVAIL), base + off + len,
                                            CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue64");
            if (stage_upto(&st, off + len, why, whylen) != 0)
                return -1;
        }
    } else if (producer && dm.direct && bytes) {
        /* The root's buffer is ready: all of it, at once. */
        CU(cu->cuStreamWriteValue64(ps, flag(c, succ, F_AVAIL), base + bytes, CU_STREAM_WRITE_VALUE_DEFAULT),
           "cuStreamWriteValue64");
    }
    if (stage_upto(&st, bytes, why, whylen) != 0)
        return -1;
    /* The caller may reuse its buffer once the successor has everything. */
    if (producer && bytes)
        CU(cu->cuStreamWaitValue64(ps, flag(c, me, F_TAKEN), base + bytes, CU_STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue64");
    CU(cu->cuStreamWriteValue64(ps, flag(c, me, F_DONE), j->op + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
       "cuStreamWriteValue64");
    return 0;
fail:
    return -1;
}

static void *proxy_main(void *arg)
{
    struct ipc_comm *c = arg;
    c->cu->cuCtxSetCurrent(c->ctx);
    pthread_mutex_lock(&c->qlock);
    for (;;) {
        while (!c->qhead && !c->stop) {
            /* Idle: nothing queued, nothing half enqueued (trim_maps). */
            if (c->nmap > MAP_CACHE) {
                trim_maps(c, MAP_CACHE);
                continue;
            }
            if (!c->nmap) {
                pthread_cond_wait(&c->qcond, &c->qlock);
                continue;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += MAP_IDLE_MS / 1000;
            ts.tv_nsec += (MAP_IDLE_MS % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            if (pthread_cond_timedwait(&c->qcond, &c->qlock, &ts) == ETIMEDOUT && !c->qhead)
                trim_maps(c, 0);
        }
        struct ipc_job *j = c->qhead;
        if (!j)
            break; /* stopping, and nothing left */
        c->qhead = j->next;
        if (!c->qhead)
            c->qtail = NULL;
        pthread_mutex_unlock(&c->qlock);
        char why[512] = "";
        /* A failed communicator's streams are released already (DONE). */
        if (!atomic_load(&c->failed) && run_broadcast(c, j, why, sizeof(why)) != 0 && !atomic_load(&c->failed)) {
            char what[640];
            snprintf(what, sizeof(what), "broadcast %llu: %s", (unsigned long long)j->b, why);
            if (stopping(c))
                ipc_fail(c, what, 0); /* destroy gave up waiting: it says so */
            else
                ipc_fail_everywhere(c, what);
        }
        c->cu->cuEventDestroy(j->ready);
        free(j);
        pthread_mutex_lock(&c->qlock);
    }
    pthread_mutex_unlock(&c->qlock);
    return NULL;
}

int ipc_proxy_submit(struct ipc_comm *c, struct ipc_job *job, char *why, size_t whylen)
{
    if (!c->proxy_started) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes none of the application's signals */
        int rc = pthread_create(&c->proxy, NULL, proxy_main, c);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            snprintf(why, whylen, "starting the ipc proxy thread: %s", strerror(rc));
            return -1;
        }
        c->proxy_started = 1;
    }
    job->next = NULL;
    pthread_mutex_lock(&c->qlock);
    if (c->qtail)
        c->qtail->next = job;
    else
        c->qhead = job;
    c->qtail = job;
    pthread_cond_signal(&c->qcond);
    pthread_mutex_unlock(&c->qlock);
    return 0;
}

void ipc_proxy_stop(struct ipc_comm *c)
{
    if (!c->proxy_started)
        return;
    pthread_mutex_lock(&c->qlock);
    c->stop = 1;
    pthread_cond_broadcast(&c->qcond);
    pthread_mutex_unlock(&c->qlock);
    pthread_join(c->proxy, NULL);
    c->proxy_started = 0;
    /* Every operation is over (ipc_free waited) or released (failed). */
    trim_maps(c, 0);
    free(c->map);
    c->map = NULL;
    c->capmap = 0;
}
