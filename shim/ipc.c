/*
 * The CUDA IPC transport (shim/ipc.h).
 *
 * Layout of each rank's allocation:
 *   [0, 4096)            sequence counters (u64 each)
 *   [4096, +S * chunk)   S staging slots of `chunk` bytes
 *
 * The host counts what each counter will say: `ops` (this rank's operations,
 * DONE: Send/Recv involve only some ranks, so it differs between ranks),
 * `chunks` (broadcast chunks) and `allreduces` (the same on every rank).
 * Counters only grow.  Each counter has one writer, and every stream wait is
 * on this rank's own page (a wait polls; polling local memory is cheap, a
 * write across NVLink is posted), so a rank's neighbours write into its page:
 *   PUSHED[s]    (written by the predecessor) id + 1 of the chunk it has
 *                pushed into this rank's slot s
 *   CONSUMED[s]  (written by the successor) id + 1 of the chunk it is done
 *                with in its own slot s: this rank may push into it again
 *   SENT[q]      (written by q) Send/Recv chunks q has put in its slots for this rank
 *   RECVD[q]     (written by q) chunks q has taken from this rank's slots for q
 *   DONE         (this rank) operations completed: orders operations issued
 *                on different streams, each waits for the one before
 *   AR, AR2      (this rank, from the host) all-reduce arrival and departure
 *   EXIT         (this rank) set at destroy
 *
 * Broadcast is a chain along the ring root, root+1, ..., root-1, chunk by
 * chunk, and data is pushed: chunk g travels through slot g % S of every rank
 * but the root.  The root writes it from its buffer into its successor's slot
 * (a peer copy over NVLink on its copy engine); each next rank copies it from
 * its own slot into its buffer (a local copy, several times faster) and pushes
 * it on into its successor's slot.  The sender waits until the receiver is
 * done with what the slot held (CONSUMED[s] >= g + 1 - S): the slow link is
 * kept busy while the fast local copies drain the slots.  Both counters of
 * every ring edge reach every chunk, whatever the root (the edge into the
 * root catches up at the end of the operation), so that they mean the same
 * whichever rank was the root.
 *
 * Each chunk is a short sequence of stream work (a wait, a copy, two counter
 * writes) that the stream runs one after the other; on one stream the fixed
 * cost of each step (~10 us on H200) adds to every chunk.  So the chunks
 * alternate between two streams of the communicator's own, forked from and
 * joined back to the caller's stream with events: one chunk's copy overlaps
 * the other's waits and writes.  Per-slot counters keep this correct when a
 * later chunk finishes first.
 */
#define _GNU_SOURCE
#include "ipc.h"

#include "comm.h"
#include "config.h"
#include "record.h"
#include "reduce.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FLAGS_BYTES 4096
#define MAX_SLOTS 64
#define F_PUSHED 0                      /* + 8 * slot, written by the predecessor */
#define F_CONSUMED (8 * MAX_SLOTS)      /* + 8 * slot, written by the successor */
#define F_DONE (16 * MAX_SLOTS)
#define F_AR (F_DONE + 64)
#define F_AR2 (F_DONE + 128)
#define F_EXIT (F_DONE + 192)
#define F_SENT (24 * MAX_SLOTS)         /* + 8 * peer, written by that peer: chunks it sent here */
#define F_RECVD (32 * MAX_SLOTS)        /* + 8 * peer, written by that peer: chunks it took from here */
#define MAX_PEERS 64
_Static_assert(F_EXIT + 8 <= F_SENT && F_RECVD + 8 * MAX_PEERS <= FLAGS_BYTES, "the counters fit their page");
_Static_assert(MAX_PEERS >= RV_MAX_PEERS, "a counter per peer");
/* Send/Recv: each rank has, for each peer, P2P_SLOTS slots of p2p_chunk
 * bytes that it sends through; the whole area is P2P_AREA bytes or less. */
#define P2P_SLOTS 2
#define P2P_AREA (16u << 20)
/* At most this many streams of the communicator's own, over which chunks
 * alternate (NCCLSHIM_IPC_STREAMS: 1 or 2). */
#define NSTREAMS 2

#define EXPORT_MAGIC 0x6370696du /* "mipc" */
#define EXPORT_VERSION 1
/* Host waits (all-reduce, destroy) give up after this long: a peer that
 * stopped answering must not hang the application for ever. */
#define HOST_WAIT_US (120ull * 1000 * 1000)

/* What a rank exports (the rendezvous blob).  Same host, same build: plain bytes. */
struct ipc_export {
    uint32_t magic, version;
    int32_t rank, nranks, device, nslots;
    uint32_t pid, pad;
    uint64_t chunk;
    CUipcMemHandle handle;
};
_Static_assert(sizeof(struct ipc_export) <= RV_BLOB_LEN, "the export fits a vote");

struct ipc_comm {
    const struct shim_cuda *cu;
    int rank, nranks, device;
    CUcontext ctx;
    size_t chunk;
    int nslots;
    CUdeviceptr base;                   /* this rank's allocation */
    int nstreams;                       /* 1..NSTREAMS */
    CUstream stream[NSTREAMS];          /* forked from the caller's stream for each broadcast */
    CUevent fork, join[NSTREAMS];
    CUdeviceptr *peer;                  /* every rank's allocation as mapped here; peer[rank] = base */
    /* Host counters, the same on every rank (ops are issued in the same order
     * everywhere).  NCCL allows one thread per communicator at a time. */
    uint64_t ops, chunks;
    uint64_t allreduces;                /* all-reduces issued: the AR/AR2 values (every rank takes part) */
    size_t p2p_chunk;                   /* Send/Recv slot size */
    uint64_t *sent, *recvd;             /* Send/Recv chunks per peer, as the counters will say */
    /* Set once a peer is gone (shim/ipc.c's monitor): every later operation
     * fails at once, waits are released, destroy skips its barrier. */
    atomic_int failed;
    char failure[256];                  /* written before `failed` is set */
    int monitor_fd;                     /* the root's connection, watched; -1 if none */
};

/* --- The monitor: one thread per process watches the root connection of
 * every running ipc communicator; the root closes them all when any rank
 * leaves.  g_mon_lock guards the list and the thread's existence; the
 * thread takes it to handle an event, so a communicator removed under the
 * lock is never touched again. */
struct mon_entry {
    struct ipc_comm *c;
    struct mon_entry *next;
};
static pthread_mutex_t g_mon_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mon_entry *g_mon;
static int g_mon_running;
static int g_mon_wake[2] = { -1, -1 };

static CUdeviceptr flag(const struct ipc_comm *c, int r, int off)
{
    return c->peer[r] + (CUdeviceptr)off;
}

static CUdeviceptr slot(const struct ipc_comm *c, int r, uint64_t g)
{
    return c->peer[r] + FLAGS_BYTES + (CUdeviceptr)((g % (uint64_t)c->nslots) * c->chunk);
}

#define CU(call, name)                                                                                 \
    do {                                                                                               \
        CUresult r_ = (call);                                                                          \
        if (r_ != CUDA_SUCCESS) {                                                                      \
            shim_cuda_error(name, r_, why, whylen);                                                    \
            goto fail;                                                                                 \
        }                                                                                              \
    } while (0)

int ipc_device(const struct ipc_comm *c)
{
    return c->device;
}

size_t ipc_host_reduce_max(const struct ipc_comm *c)
{
    return c->chunk * (size_t)c->nslots;
}

static size_t p2p_offset(const struct ipc_comm *c)
{
    return FLAGS_BYTES + c->chunk * (size_t)c->nslots;
}

/* Where `from` sends its k-th chunk to `to`, in `from`'s allocation as mapped here. */
static CUdeviceptr p2p_slot(const struct ipc_comm *c, int from, int to, uint64_t k)
{
    return c->peer[from] + p2p_offset(c) + ((size_t)to * P2P_SLOTS + (size_t)(k % P2P_SLOTS)) * c->p2p_chunk;
}

static void free_streams(struct ipc_comm *c)
{
    for (int i = 0; i < NSTREAMS; i++) {
        if (c->stream[i])
            c->cu->cuStreamDestroy(c->stream[i]);
        if (c->join[i])
            c->cu->cuEventDestroy(c->join[i]);
    }
    if (c->fork)
        c->cu->cuEventDestroy(c->fork);
}

int ipc_prepare(struct ipc_comm **out, int rank, int nranks, uint8_t *blob, int *bloblen, char *why, size_t whylen)
{
    *out = NULL;
    const struct shim_cuda *cu = shim_cuda(why, whylen);
    if (!cu)
        return -1;
    struct ipc_comm *c = calloc(1, sizeof(*c));
    if (!c || !(c->peer = calloc((size_t)nranks, sizeof(*c->peer)))) {
        free(c);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    const struct shim_config *cfg = shim_config();
    c->cu = cu;
    c->monitor_fd = -1;
    c->rank = rank;
    c->nranks = nranks;
    c->chunk = cfg->ipc_chunk_bytes;
    c->nslots = cfg->ipc_slots;
    int memops = 0;
    CU(cu->cuCtxGetCurrent(&c->ctx), "cuCtxGetCurrent");
    if (!c->ctx) {
        snprintf(why, whylen, "no current CUDA context on the thread that creates the communicator");
        goto fail;
    }
    CU(cu->cuCtxGetDevice(&c->device), "cuCtxGetDevice");
    CU(cu->cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, c->device),
       "cuDeviceGetAttribute");
    if (!memops) {
        snprintf(why, whylen, "device %d cannot use 64-bit stream memory operations", c->device);
        goto fail;
    }
    if (c->nslots > MAX_SLOTS) {
        snprintf(why, whylen, "NCCLSHIM_IPC_SLOTS=%d is over %d", c->nslots, MAX_SLOTS);
        goto fail;
    }
    c->nstreams = cfg->ipc_streams < 1 ? 1 : cfg->ipc_streams > NSTREAMS ? NSTREAMS : cfg->ipc_streams;
    /* The highest priority the device has: a transfer's short steps (counter
     * waits and writes, copies) go ahead of the application's queued kernels. */
    int least = 0, greatest = 0;
    int prio = cu->cuCtxGetStreamPriorityRange && cu->cuStreamCreateWithPriority &&
               cu->cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS;
    for (int i = 0; i < c->nstreams; i++) {
        if (prio)
            CU(cu->cuStreamCreateWithPriority(&c->stream[i], CU_STREAM_NON_BLOCKING, greatest),
               "cuStreamCreateWithPriority");
        else
            CU(cu->cuStreamCreate(&c->stream[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
        CU(cu->cuEventCreate(&c->join[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    }
    CU(cu->cuEventCreate(&c->fork, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    c->p2p_chunk = (P2P_AREA / (size_t)nranks / P2P_SLOTS) & ~(size_t)4095;
    if (c->p2p_chunk > c->chunk)
        c->p2p_chunk = c->chunk;
    if (c->p2p_chunk < 4096)
        c->p2p_chunk = 4096;
    c->sent = calloc((size_t)nranks, sizeof(*c->sent));
    c->recvd = calloc((size_t)nranks, sizeof(*c->recvd));
    if (!c->sent || !c->recvd) {
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    CU(cu->cuMemAlloc(&c->base, p2p_offset(c) + (size_t)nranks * P2P_SLOTS * c->p2p_chunk), "cuMemAlloc");
    CU(cu->cuMemsetD8(c->base, 0, FLAGS_BYTES), "cuMemsetD8");
    struct ipc_export e;
    memset(&e, 0, sizeof(e));
    e.magic = EXPORT_MAGIC;
    e.version = EXPORT_VERSION;
    e.rank = rank;
    e.nranks = nranks;
    e.device = c->device;
    e.nslots = c->nslots;
    e.pid = (uint32_t)getpid();
    e.chunk = c->chunk;
    CU(cu->cuIpcGetMemHandle(&e.handle, c->base), "cuIpcGetMemHandle");
    memcpy(blob, &e, sizeof(e));
    *bloblen = (int)sizeof(e);
    c->peer[rank] = c->base;
    *out = c;
    return 0;
fail:
    free_streams(c);
    if (c->base)
        cu->cuMemFree(c->base);
    free(c->sent);
    free(c->recvd);
    free(c->peer);
    free(c);
    return -1;
}

int ipc_connect(struct ipc_comm *c, const struct rv_peers *peers, char *why, size_t whylen)
{
    int seen = 0;
    for (int i = 0; i < peers->npeers; i++) {
        const struct rv_peer *p = &peers->peer[i];
        struct ipc_export e;
        if (p->bloblen != (int)sizeof(e) || p->rank < 0 || p->rank >= c->nranks) {
            snprintf(why, whylen, "rank %d's export is malformed (%d bytes)", p->rank, p->bloblen);
            return -1;
        }
        memcpy(&e, p->blob, sizeof(e));
        if (e.magic != EXPORT_MAGIC || e.version != EXPORT_VERSION || e.rank != p->rank || e.nranks != c->nranks ||
            e.chunk != c->chunk || e.nslots != c->nslots) {
            snprintf(why, whylen, "rank %d's export does not match this rank's (chunk %llu/%zu, slots %d/%d): set the "
                     "same NCCLSHIM_IPC_CHUNK_BYTES and NCCLSHIM_IPC_SLOTS everywhere", p->rank,
                     (unsigned long long)e.chunk, c->chunk, e.nslots, c->nslots);
            return -1;
        }
        if (p->rank == c->rank)
            continue;
        if (e.pid == (uint32_t)getpid()) {
            snprintf(why, whylen, "ranks %d and %d are in one process: CUDA IPC cannot map memory of its own process",
                     c->rank, p->rank);
            return -1;
        }
        CUresult r = c->cu->cuIpcOpenMemHandle(&c->peer[p->rank], e.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r != CUDA_SUCCESS) {
            char err[160];
            snprintf(why, whylen, "opening rank %d's memory (device %d) from device %d: %s", p->rank, e.device,
                     c->device, shim_cuda_error("cuIpcOpenMemHandle", r, err, sizeof(err)));
            c->peer[p->rank] = 0;
            return -1;
        }
        seen++;
    }
    if (seen != c->nranks - 1) {
        snprintf(why, whylen, "%d of %d peers' exports received", seen, c->nranks - 1);
        return -1;
    }
    return 0;
}

/* Reads a peer's (or this rank's) counter from the host. */
static int read_flag(const struct ipc_comm *c, int r, int off, uint64_t *v)
{
    return c->cu->cuMemcpyDtoH(v, flag(c, r, off), sizeof(*v)) == CUDA_SUCCESS ? 0 : -1;
}

static int write_flag(const struct ipc_comm *c, int off, uint64_t v)
{
    return c->cu->cuMemcpyHtoD(flag(c, c->rank, off), &v, sizeof(v)) == CUDA_SUCCESS ? 0 : -1;
}

/* The host waits until rank r's counter `off` reaches `want`; bounded. */
static int wait_one(const struct ipc_comm *c, int r, int off, uint64_t want, uint64_t deadline, char *why,
                    size_t whylen)
{
    for (unsigned spins = 0;; spins++) {
        uint64_t v = 0;
        if (read_flag(c, r, off, &v) != 0) {
            snprintf(why, whylen, "reading rank %d's counter failed", r);
            return -1;
        }
        if ((int64_t)(v - want) >= 0)
            return 0;
        if (atomic_load(&c->failed)) {
            snprintf(why, whylen, "%s", c->failure);
            return -1;
        }
        if (shim_mono_us() > deadline) {
            snprintf(why, whylen, "rank %d did not arrive within %llu s (it died, or stopped calling NCCL)", r,
                     (unsigned long long)(HOST_WAIT_US / 1000000));
            return -1;
        }
        /* Device memory has no host wake-up: poll, yielding the core. */
        struct timespec ts = { 0, spins < 100 ? 0 : 20000 };
        nanosleep(&ts, NULL);
    }
}

static int wait_all(const struct ipc_comm *c, int off, uint64_t want, char *why, size_t whylen)
{
    uint64_t deadline = shim_mono_us() + HOST_WAIT_US;
    for (int r = 0; r < c->nranks; r++)
        if (wait_one(c, r, off, want, deadline, why, whylen) != 0)
            return -1;
    return 0;
}

/* A value every wait of a failed communicator is satisfied by. */
#define RELEASE (1ull << 62)

/* A peer is gone: no operation may wait for it any more.  Writes, from the
 * host, a value that satisfies every wait into every counter this rank's
 * streams may be waiting on (all on its own page), so that the streams drain.
 * The data moved after this point is garbage; the error says so. */
static void fail_comm(struct ipc_comm *c, const char *why, int lost)
{
    int expected = 0;
    snprintf(c->failure, sizeof(c->failure), "%s", why);
    if (!atomic_compare_exchange_strong(&c->failed, &expected, 1))
        return;
    if (lost)
        shim_warn("ipc-peer-lost", "ipc communicator (rank %d of %d): %s; its operations now fail with ncclRemoteError, "
              "the streams waiting on the peer are released (what they moved is not valid), and destroy/abort return",
              c->rank, c->nranks, why);
    CUcontext cur = NULL;
    c->cu->cuCtxGetCurrent(&cur);
    if (cur != c->ctx)
        c->cu->cuCtxSetCurrent(c->ctx);
    uint64_t v = RELEASE;
    /* Every stream wait is on this rank's own page. */
    CUdeviceptr page = c->peer[c->rank];
    for (int sl = 0; sl < c->nslots; sl++) {
        c->cu->cuMemcpyHtoD(page + F_PUSHED + 8 * sl, &v, sizeof(v));
        c->cu->cuMemcpyHtoD(page + F_CONSUMED + 8 * sl, &v, sizeof(v));
    }
    for (int q = 0; q < c->nranks; q++) {
        c->cu->cuMemcpyHtoD(page + F_SENT + 8 * q, &v, sizeof(v));
        c->cu->cuMemcpyHtoD(page + F_RECVD + 8 * q, &v, sizeof(v));
    }
    c->cu->cuMemcpyHtoD(page + F_DONE, &v, sizeof(v));
    if (cur != c->ctx)
        c->cu->cuCtxSetCurrent(cur);
}

static void *monitor(void *arg)
{
    (void)arg;
    struct pollfd *pfd = NULL;
    struct ipc_comm **who = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_mutex_lock(&g_mon_lock);
        size_t n = 1;
        for (struct mon_entry *e = g_mon; e; e = e->next)
            n++;
        if (n == 1) {
            g_mon_running = 0;
            close(g_mon_wake[0]);
            close(g_mon_wake[1]);
            g_mon_wake[0] = g_mon_wake[1] = -1;
            pthread_mutex_unlock(&g_mon_lock);
            free(pfd);
            free(who);
            return NULL;
        }
        if (n > cap) {
            struct pollfd *p = realloc(pfd, n * sizeof(*p));
            if (p)
                pfd = p;
            struct ipc_comm **w = realloc(who, n * sizeof(*w));
            if (w)
                who = w;
            if (p && w)
                cap = n;
        }
        size_t k = 0;
        if (cap) {
            pfd[k] = (struct pollfd){ g_mon_wake[0], POLLIN, 0 };
            who[k++] = NULL;
            for (struct mon_entry *e = g_mon; e && k < cap; e = e->next) {
                pfd[k] = (struct pollfd){ e->c->monitor_fd, POLLIN, 0 };
                who[k++] = e->c;
            }
        }
        pthread_mutex_unlock(&g_mon_lock);
        if (poll(pfd, k, cap ? -1 : 10) < 0)
            continue;
        pthread_mutex_lock(&g_mon_lock);
        for (size_t j = 0; j < k; j++) {
            if (!pfd[j].revents)
                continue;
            if (!who[j]) {
                char drain[64];
                while (read(g_mon_wake[0], drain, sizeof(drain)) > 0)
                    ;
                continue;
            }
            /* Still registered?  (Removed entries are not touched.) */
            struct mon_entry **pp = &g_mon;
            while (*pp && (*pp)->c != who[j])
                pp = &(*pp)->next;
            if (!*pp)
                continue;
            struct mon_entry *e = *pp;
            *pp = e->next;
            free(e);
            fail_comm(who[j], "a rank of this communicator is gone (the root's shim closed the connection: a process "
                              "exited or was killed)", 1);
            close(who[j]->monitor_fd);
            who[j]->monitor_fd = -1;
        }
        pthread_mutex_unlock(&g_mon_lock);
    }
}

int ipc_watch(struct ipc_comm *c, int fd)
{
    c->monitor_fd = fd;
    if (fd < 0)
        return -1;
    struct mon_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    e->c = c;
    pthread_mutex_lock(&g_mon_lock);
    if (!g_mon_running) {
        if (pipe2(g_mon_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
            pthread_mutex_unlock(&g_mon_lock);
            free(e);
            return -1;
        }
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        int rc = pthread_create(&t, &attr, monitor, NULL);
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            close(g_mon_wake[0]);
            close(g_mon_wake[1]);
            g_mon_wake[0] = g_mon_wake[1] = -1;
            pthread_mutex_unlock(&g_mon_lock);
            free(e);
            return -1;
        }
        g_mon_running = 1;
    }
    e->next = g_mon;
    g_mon = e;
    (void)!write(g_mon_wake[1], "", 1);
    pthread_mutex_unlock(&g_mon_lock);
    return 0;
}

/* Stops watching `c` (before it is freed) and closes its connection. */
static void unwatch(struct ipc_comm *c)
{
    pthread_mutex_lock(&g_mon_lock);
    for (struct mon_entry **pp = &g_mon; *pp; pp = &(*pp)->next) {
        if ((*pp)->c == c) {
            struct mon_entry *e = *pp;
            *pp = e->next;
            free(e);
            if (g_mon_wake[1] >= 0)
                (void)!write(g_mon_wake[1], "", 1);
            break;
        }
    }
    pthread_mutex_unlock(&g_mon_lock);
    if (c->monitor_fd >= 0)
        close(c->monitor_fd);
    c->monitor_fd = -1;
}

ncclResult_t ipc_async_error(struct ipc_comm *c)
{
    return atomic_load(&c->failed) ? ncclRemoteError : ncclSuccess;
}

void ipc_abort(struct ipc_comm *c)
{
    fail_comm(c, "the communicator was aborted (ncclCommAbort)", 0);
}

void ipc_free(struct ipc_comm *c)
{
    if (!c)
        return;
    char why[256];
    const struct shim_cuda *cu = c->cu;
    CUcontext cur = NULL;
    /* The barrier below ends with every rank closing its connection to the
     * root, which the root takes for a rank leaving: stop watching first. */
    cu->cuCtxGetCurrent(&cur);
    if (cur != c->ctx)
        cu->cuCtxSetCurrent(c->ctx);
    /* This rank's work is done (DONE reaches every operation issued), then
     * everyone says so (EXIT): nobody frees memory a peer still reads. */
    int ok = 1;
    /* A rank without a single operation has had nothing of its memory read
     * (and a setup undone in the vote round had none): it only says EXIT for
     * the others; nor is there a barrier once a peer is gone (or the
     * application aborts): nobody would answer. */
    if (c->nranks > 1 && c->peer && !atomic_load(&c->failed)) {
        int connected = 1;
        for (int r = 0; r < c->nranks; r++)
            connected &= c->peer[r] != 0;
        if (connected) {
            uint64_t deadline = shim_mono_us() + HOST_WAIT_US;
            ok = (c->ops == 0 || wait_one(c, c->rank, F_DONE, c->ops, deadline, why, sizeof(why)) == 0) &&
                 write_flag(c, F_EXIT, 1) == 0 &&
                 (c->ops == 0 || wait_all(c, F_EXIT, 1, why, sizeof(why)) == 0);
            if (!ok)
                shim_warn("ipc", "destroying an ipc communicator (rank %d of %d): %s; freeing its memory anyway",
                          c->rank, c->nranks, why);
        }
    }
    unwatch(c);
    for (int r = 0; c->peer && r < c->nranks; r++)
        if (r != c->rank && c->peer[r])
            cu->cuIpcCloseMemHandle(c->peer[r]);
    free_streams(c);
    if (c->base)
        cu->cuMemFree(c->base);
    if (cur != c->ctx)
        cu->cuCtxSetCurrent(cur);
    free(c->sent);
    free(c->recvd);
    free(c->peer);
    free(c);
}

/* Runs with the communicator's context current; restores the caller's. */
struct ctx_guard {
    CUcontext saved;
    int switched;
};

static void ctx_enter(const struct ipc_comm *c, struct ctx_guard *g)
{
    g->saved = NULL;
    g->switched = 0;
    if (c->cu->cuCtxGetCurrent(&g->saved) == CUDA_SUCCESS && g->saved != c->ctx)
        g->switched = c->cu->cuCtxSetCurrent(c->ctx) == CUDA_SUCCESS;
}

static void ctx_leave(const struct ipc_comm *c, struct ctx_guard *g)
{
    if (g->switched)
        c->cu->cuCtxSetCurrent(g->saved);
}

static int capturing(const struct ipc_comm *c, CUstream s)
{
    int status = 0;
    return c->cu->cuStreamIsCapturing(s, &status) == CUDA_SUCCESS && status != 0;
}

/*
 * A copy on `stream`.  Where the driver has cuMemcpyBatchAsync (CUDA 12.8+),
 * with the hint to overlap with compute: a copy within one device is
 * otherwise free to run as a kernel on the SMs, which under a busy matmul
 * loop starves it (measured: 42 GB/s instead of 320, docs/benchmarks.md).
 */
static CUresult copy(const struct ipc_comm *c, CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream stream)
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

ncclResult_t ipc_broadcast(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t bytes, int root,
                           cudaStream_t stream, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    CUstream s = (CUstream)stream;
    if (atomic_load(&c->failed)) {
        snprintf(why, whylen, "%s", c->failure);
        return ncclRemoteError;
    }
    if (root < 0 || root >= c->nranks) {
        snprintf(why, whylen, "root %d outside 0..%d", root, c->nranks - 1);
        return ncclInvalidArgument;
    }
    if (bytes && ((!sendbuff && c->rank == root) || !recvbuff)) {
        snprintf(why, whylen, "NULL buffer");
        return ncclInvalidArgument;
    }
    if (capturing(c, s)) {
        snprintf(why, whylen, "the stream is being captured into a CUDA graph: ipc operations cannot be captured "
                 "(their sequence numbers are fixed when enqueued); pass this communicator through "
                 "(NCCLSHIM_WEIGHT_UPDATE=passthrough) to capture it");
        return ncclInvalidUsage;
    }
    struct ctx_guard g;
    ctx_enter(c, &g);
    uint64_t op = c->ops;
    int n = c->nranks, me = c->rank;
    int pos = (me - root + n) % n, pred = (me - 1 + n) % n, succ = (me + 1) % n;
    CUdeviceptr send = (CUdeviceptr)(uintptr_t)sendbuff, recv = (CUdeviceptr)(uintptr_t)recvbuff;
    uint64_t nchunks = bytes ? (bytes + c->chunk - 1) / c->chunk : 0;
    uint64_t S = (uint64_t)c->nslots;
    /* Operations of this communicator run one after the other, whatever the
     * stream; then the work forks onto the communicator's streams. */
    CU(cu->cuStreamWaitValue64(s, flag(c, me, F_DONE), op, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue64");
    CU(cu->cuEventRecord(c->fork, s), "cuEventRecord");
    for (int i = 0; i < c->nstreams; i++)
        CU(cu->cuStreamWaitEvent(c->stream[i], c->fork, 0), "cuStreamWaitEvent");
    for (uint64_t k = 0; k < nchunks; k++) {
        uint64_t gch = c->chunks + k;
        int sl = (int)(gch % S);
        CUstream cs = c->stream[gch % (uint64_t)c->nstreams];
        size_t off = (size_t)(k * c->chunk), len = bytes - off < c->chunk ? bytes - off : c->chunk;
        if (n == 1) {
            if (recv != send)
                CU(copy(c, recv + off, send + off, len, cs), "cuMemcpyDtoDAsync");
            continue;
        }
        /* What this rank holds of chunk g: the root's buffer, or its own slot
         * once its predecessor has pushed the chunk there. */
        CUdeviceptr from = send + off;
        if (pos > 0) {
            from = slot(c, me, gch);
            CU(cu->cuStreamWaitValue64(cs, flag(c, me, F_PUSHED + 8 * sl), gch + 1, CU_STREAM_WAIT_VALUE_GEQ),
               "cuStreamWaitValue64");
            CU(copy(c, recv + off, from, len, cs), "cuMemcpyDtoDAsync");
        } else if (recv != send) {
            CU(copy(c, recv + off, send + off, len, cs), "cuMemcpyDtoDAsync");
        }
        if (pos < n - 1) {
            /* Push into the successor's slot once it is done with chunk g - S there. */
            if (gch + 1 > S)
                CU(cu->cuStreamWaitValue64(cs, flag(c, me, F_CONSUMED + 8 * sl), gch + 1 - S,
                                           CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue64");
            CU(copy(c, slot(c, succ, gch), from, len, cs), "cuMemcpyDtoDAsync");
            CU(cu->cuStreamWriteValue64(cs, flag(c, succ, F_PUSHED + 8 * sl), gch + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
               "cuStreamWriteValue64");
        }
        /* Done with this slot (copied out and pushed on): the predecessor may refill it. */
        if (pos > 0)
            CU(cu->cuStreamWriteValue64(cs, flag(c, pred, F_CONSUMED + 8 * sl), gch + 1,
                                        CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue64");
    }
    /* The counters no one waits on in this operation, at the last chunk each
     * slot carried: the root did not tell its predecessor (the last rank)
     * what it consumed, the last rank did not push to the root. */
    for (uint64_t k = nchunks > S ? nchunks - S : 0; n > 1 && k < nchunks; k++) {
        uint64_t gch = c->chunks + k;
        int sl = (int)(gch % S);
        CUstream cs = c->stream[gch % (uint64_t)c->nstreams];
        if (pos == 0)
            CU(cu->cuStreamWriteValue64(cs, flag(c, pred, F_CONSUMED + 8 * sl), gch + 1,
                                        CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue64");
        if (pos == n - 1)
            CU(cu->cuStreamWriteValue64(cs, flag(c, succ, F_PUSHED + 8 * sl), gch + 1,
                                        CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue64");
    }
    /* Join: the caller's stream goes on once both of ours are through. */
    for (int i = 0; i < c->nstreams; i++) {
        CU(cu->cuEventRecord(c->join[i], c->stream[i]), "cuEventRecord");
        CU(cu->cuStreamWaitEvent(s, c->join[i], 0), "cuStreamWaitEvent");
    }
    CU(cu->cuStreamWriteValue64(s, flag(c, me, F_DONE), op + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
       "cuStreamWriteValue64");
    c->chunks += nchunks;
    c->ops = op + 1;
    ctx_leave(c, &g);
    return ncclSuccess;
fail:
    /* Part of the operation may be enqueued: the counters no longer agree with
     * the peers', and the communicator cannot be used again. */
    ctx_leave(c, &g);
    return ncclUnhandledCudaError;
}

/* AllGather as one broadcast per rank into its block of recvbuff: the same
 * chain and counters, so it needs nothing of its own. */
ncclResult_t ipc_allgather(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t bytes,
                           cudaStream_t stream, char *why, size_t whylen)
{
    if (bytes && (!sendbuff || !recvbuff)) {
        snprintf(why, whylen, "NULL buffer");
        return ncclInvalidArgument;
    }
    for (int r = 0; r < c->nranks; r++) {
        char *block = (char *)recvbuff + (size_t)r * bytes;
        ncclResult_t res = ipc_broadcast(c, r == c->rank ? sendbuff : block, block, bytes, r, stream, why, whylen);
        if (res != ncclSuccess)
            return res;
    }
    return ncclSuccess;
}

ncclResult_t ipc_allreduce(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t dtype, ncclRedOp_t op, cudaStream_t stream, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    CUstream s = (CUstream)stream;
    if (atomic_load(&c->failed)) {
        snprintf(why, whylen, "%s", c->failure);
        return ncclRemoteError;
    }
    size_t esize = (unsigned)dtype < ncclNumTypes ? shim_dtype_size(dtype) : 0;
    if (!esize || host_reduce_supported(dtype, op, why, whylen) != 0) {
        if (!esize)
            snprintf(why, whylen, "datatype %d is not an NCCL datatype", (int)dtype);
        return ncclInvalidArgument;
    }
    size_t bytes = count * esize;
    if (count && bytes / count != esize) {
        snprintf(why, whylen, "count %zu overflows", count);
        return ncclInvalidArgument;
    }
    if (bytes > ipc_host_reduce_max(c)) {
        snprintf(why, whylen, "an ipc communicator reduces on the host, up to its staging size (%zu bytes: "
                 "NCCLSHIM_IPC_CHUNK_BYTES x NCCLSHIM_IPC_SLOTS); this all-reduce is %zu bytes. Weight-update "
                 "communicators all-reduce one value to warm up; pass this one through "
                 "(NCCLSHIM_WEIGHT_UPDATE=passthrough) if it needs large all-reduces", ipc_host_reduce_max(c), bytes);
        return ncclInvalidUsage;
    }
    if (count && (!sendbuff || !recvbuff)) {
        snprintf(why, whylen, "NULL buffer");
        return ncclInvalidArgument;
    }
    if (capturing(c, s)) {
        snprintf(why, whylen, "the stream is being captured into a CUDA graph: an ipc all-reduce synchronises the "
                 "host and cannot be captured");
        return ncclInvalidUsage;
    }
    struct ctx_guard g;
    ctx_enter(c, &g);
    uint64_t opn = c->ops;
    int me = c->rank;
    uint8_t *acc = NULL, *tmp = NULL;
    ncclResult_t res = ncclUnhandledCudaError;
    /* After the operations before it (any stream: this rank's slots are then
     * drained, and its predecessor pushes nothing more into them before this
     * all-reduce is over everywhere), with this rank's data in its slot 0. */
    CU(cu->cuStreamWaitValue64(s, flag(c, me, F_DONE), opn, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue64");
    if (bytes)
        CU(copy(c, c->base + FLAGS_BYTES, (CUdeviceptr)(uintptr_t)sendbuff, bytes, s),
           "cuMemcpyDtoDAsync");
    CU(cu->cuStreamSynchronize(s), "cuStreamSynchronize");
    uint64_t arn = c->allreduces + 1;
    if (write_flag(c, F_AR, arn) != 0 || wait_all(c, F_AR, arn, why, whylen) != 0) {
        res = ncclRemoteError;
        goto fail;
    }
    acc = malloc(bytes ? bytes : 1);
    tmp = malloc(bytes ? bytes : 1);
    if (!acc || !tmp) {
        snprintf(why, whylen, "out of host memory for %zu bytes", bytes);
        res = ncclSystemError;
        goto fail;
    }
    /* In rank order on every rank: every rank computes the same bits. */
    for (int r = 0; r < c->nranks && bytes; r++) {
        CU(cu->cuMemcpyDtoH(r == 0 ? acc : tmp, c->peer[r] + FLAGS_BYTES, bytes), "cuMemcpyDtoH");
        if (r > 0)
            host_reduce(acc, tmp, count, dtype, op == ncclAvg ? ncclSum : op);
    }
    if (op == ncclAvg && bytes)
        host_reduce_finish_avg(acc, count, dtype, c->nranks);
    if (bytes)
        CU(cu->cuMemcpyHtoD((CUdeviceptr)(uintptr_t)recvbuff, acc, bytes), "cuMemcpyHtoD");
    /* Nobody refills its slot before every rank has read it. */
    if (write_flag(c, F_AR2, arn) != 0 || wait_all(c, F_AR2, arn, why, whylen) != 0 ||
        write_flag(c, F_DONE, opn + 1) != 0) {
        res = ncclRemoteError;
        goto fail;
    }
    c->ops = opn + 1;
    c->allreduces = arn;
    free(acc);
    free(tmp);
    ctx_leave(c, &g);
    return ncclSuccess;
fail:
    free(acc);
    free(tmp);
    ctx_leave(c, &g);
    return res;
}

ncclResult_t ipc_p2p(struct ipc_comm *c, const struct ipc_p2p *ops, int nops, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    if (atomic_load(&c->failed)) {
        snprintf(why, whylen, "%s", c->failure);
        return ncclRemoteError;
    }
    if (nops <= 0)
        return ncclSuccess;
    CUstream s = ops[0].stream;
    for (int i = 0; i < nops; i++) {
        if (ops[i].peer < 0 || ops[i].peer >= c->nranks) {
            snprintf(why, whylen, "peer %d outside 0..%d", ops[i].peer, c->nranks - 1);
            return ncclInvalidArgument;
        }
        if (ops[i].bytes && !ops[i].buf) {
            snprintf(why, whylen, "NULL buffer");
            return ncclInvalidArgument;
        }
        if (ops[i].stream != s) {
            snprintf(why, whylen, "the Send/Recv of one group on an ipc communicator must use one stream");
            return ncclInvalidUsage;
        }
    }
    if (capturing(c, s)) {
        snprintf(why, whylen, "the stream is being captured into a CUDA graph: ipc operations cannot be captured");
        return ncclInvalidUsage;
    }
    uint64_t *done = calloc((size_t)nops, sizeof(*done));
    if (!done) {
        snprintf(why, whylen, "out of memory");
        return ncclSystemError;
    }
    struct ctx_guard g;
    ctx_enter(c, &g);
    uint64_t op = c->ops;
    int me = c->rank;
    const uint64_t P = P2P_SLOTS;
    CU(cu->cuStreamWaitValue64(s, flag(c, me, F_DONE), op, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue64");
    /* One chunk of each operation in turn: a group's sends and receives
     * between two ranks progress together, so neither waits on the other's
     * full slots for ever. */
    for (int more = 1; more;) {
        more = 0;
        for (int i = 0; i < nops; i++) {
            const struct ipc_p2p *o = &ops[i];
            uint64_t nch = o->bytes ? (o->bytes + c->p2p_chunk - 1) / c->p2p_chunk : 0;
            if (done[i] >= nch)
                continue;
            size_t off = (size_t)(done[i] * c->p2p_chunk);
            size_t len = o->bytes - off < c->p2p_chunk ? o->bytes - off : c->p2p_chunk;
            CUdeviceptr user = (CUdeviceptr)(uintptr_t)o->buf + off;
            int q = o->peer;
            if (o->send) {
                uint64_t pc = c->sent[q]++;
                if (pc + 1 > P)
                    CU(cu->cuStreamWaitValue64(s, flag(c, me, F_RECVD + 8 * q), pc + 1 - P, CU_STREAM_WAIT_VALUE_GEQ),
                       "cuStreamWaitValue64");
                CU(copy(c, p2p_slot(c, me, q, pc), user, len, s), "cuMemcpyDtoDAsync");
                CU(cu->cuStreamWriteValue64(s, flag(c, q, F_SENT + 8 * me), pc + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
                   "cuStreamWriteValue64");
            } else {
                uint64_t pc = c->recvd[q]++;
                CU(cu->cuStreamWaitValue64(s, flag(c, me, F_SENT + 8 * q), pc + 1, CU_STREAM_WAIT_VALUE_GEQ),
                   "cuStreamWaitValue64");
                CU(copy(c, user, p2p_slot(c, q, me, pc), len, s), "cuMemcpyDtoDAsync");
                CU(cu->cuStreamWriteValue64(s, flag(c, q, F_RECVD + 8 * me), pc + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
                   "cuStreamWriteValue64");
            }
            done[i]++;
            more |= done[i] < nch;
        }
    }
    CU(cu->cuStreamWriteValue64(s, flag(c, me, F_DONE), op + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
       "cuStreamWriteValue64");
    c->ops = op + 1;
    free(done);
    ctx_leave(c, &g);
    return ncclSuccess;
fail:
    free(done);
    ctx_leave(c, &g);
    return ncclUnhandledCudaError;
}
