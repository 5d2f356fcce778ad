/*
 * The CUDA IPC transport's set-up and teardown (the protocol: ipc_proto.h):
 * the communicator allocated and exported (prepare), the peers' pages and
 * counters opened (connect), and destroy.  Host waits are ipc_core.c's,
 * failure ipc_fail.c's, the operations ipc_ops.c's.
 */
#define _GNU_SOURCE
#include "ipc.h"
#include "ipc_core.h"
#include "ipc_kernel.h"
#include "ipc_reaper.h"
#include "ipc_suspend.h"
#include "ipc_vmm.h"
#include "ipc_fail.h"

#include "clock.h"
#include "config.h"
#include "random.h"
#include "record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void ipc_set_group(struct ipc_comm *c, const char *group)
{
    snprintf(c->group, sizeof(c->group), "%s", group ? group : "");
}

int ipc_device(const struct ipc_comm *c)
{
    return c->device;
}

/* This rank's shared page: created here, found by the neighbours through
 * the export, unlinked once they have it (at commit) or at free. */
static int create_shared(struct ipc_comm *c, char *why, size_t whylen)
{
    static atomic_uint serial; /* names made by this process */
    unsigned char rnd[4] = { 0 };
    if (shim_random(rnd, sizeof(rnd)) != 0) /* the pid and serial keep it unique; this only makes it unguessable */
        memset(rnd, 0, sizeof(rnd));
    snprintf(c->shm_name, sizeof(c->shm_name), "/ncclshim.ipc.%d.%u.%02x%02x%02x%02x", (int)getpid(),
             atomic_fetch_add(&serial, 1), rnd[0], rnd[1], rnd[2], rnd[3]);
    int fd = shm_open(c->shm_name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, whylen, "shm_open(%s): %s (is /dev/shm mounted and writable?)", c->shm_name, strerror(errno));
        c->shm_name[0] = '\0';
        return -1;
    }
    void *p = MAP_FAILED;
    int err = 0;
    if (ftruncate(fd, sizeof(struct ipc_shared)) == 0)
        p = mmap(NULL, sizeof(struct ipc_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    else
        err = errno;
    if (p == MAP_FAILED && !err)
        err = errno;
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(why, whylen, "sizing or mapping shared memory %s: %s (is /dev/shm full?)", c->shm_name,
                 strerror(err));
        shm_unlink(c->shm_name);
        c->shm_name[0] = '\0';
        return -1;
    }
    c->shared[c->rank] = p;
    c->shared[c->rank]->magic = SHARED_MAGIC;
    return 0;
}

static int open_shared(struct ipc_comm *c, int r, const char *name, char *why, size_t whylen)
{
    if (c->shared[r])
        return 0;
    if (memchr(name, '\0', 48) == NULL || strncmp(name, "/ncclshim.ipc.", 14) != 0) {
        snprintf(why, whylen, "rank %d's shared page name is malformed", r);
        return -1;
    }
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, whylen, "shm_open(%s) of rank %d: %s (do the ranks share /dev/shm? containers of one "
                 "host need the same IPC namespace, e.g. docker --ipc=host)", name, r, strerror(errno));
        return -1;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct ipc_shared))
        p = mmap(NULL, sizeof(struct ipc_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED || ((struct ipc_shared *)p)->magic != SHARED_MAGIC) {
        if (p != MAP_FAILED)
            munmap(p, sizeof(struct ipc_shared));
        snprintf(why, whylen, "rank %d's shared page %s is not one of ours", r, name);
        return -1;
    }
    c->shared[r] = p;
    return 0;
}

/* Rank r's counters (the head of its shared page, mapped here) pinned and
 * mapped into this context, where the streams address them as c->peer[r]
 * (ipc_proto.h, "Counters in host memory").  PORTABLE: the reaper and
 * the application's threads may have other contexts current. */
static int register_counters(struct ipc_comm *c, int r, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    void *at = c->shared[r]->counters;
    char err[160];
    CUresult res = cu->cuMemHostRegister(at, FLAGS_BYTES, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (res != CUDA_SUCCESS) {
        snprintf(why, whylen, "pinning rank %d's counters (shared memory) for device %d: %s", r, c->device,
                 shim_cuda_error("cuMemHostRegister", res, err, sizeof(err)));
        return -1;
    }
    res = cu->cuMemHostGetDevicePointer(&c->peer[r], at, 0);
    if (res != CUDA_SUCCESS) {
        cu->cuMemHostUnregister(at);
        c->peer[r] = 0;
        snprintf(why, whylen, "mapping rank %d's counters into device %d: %s", r, c->device,
                 shim_cuda_error("cuMemHostGetDevicePointer", res, err, sizeof(err)));
        return -1;
    }
    return 0;
}

static void free_resources(struct ipc_comm *c)
{
    if (c->stream)
        c->cu->cuStreamDestroy(c->stream);
    ipc_unlink_shared(c);
    /* A failed communicator's streams were released, not waited for: one may
     * still write a counter.  Its pages stay pinned and mapped until the
     * process ends (4 KiB of counters and a shared page per rank), rather
     * than a late write fault on memory given back. */
    int keep = atomic_load(&c->fail.failed);
    for (int r = 0; c->shared && r < c->nranks && !keep; r++) {
        if (c->peer[r])
            c->cu->cuMemHostUnregister(c->shared[r]->counters);
        if (c->shared[r])
            munmap(c->shared[r], sizeof(struct ipc_shared));
    }
    free(c->shared);
    pthread_mutex_destroy(&c->qlock);
}

/* The host memory of a communicator, once its device memory is given back. */
static void free_host(struct ipc_comm *c)
{
    free(c->peer);
    free(c->peer_dev);
    ipc_staging_free(c);
    free(c);
}

/* What the context's device must offer, and the communicator's own stream:
 * 0, or -1 with the reason. */
static int open_device(struct ipc_comm *c, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    int memops = 0;
    if (cu_check(cu->cuCtxGetCurrent(&c->ctx), "cuCtxGetCurrent", why, whylen) != 0)
        return -1;
    if (!c->ctx) {
        snprintf(why, whylen, "no current CUDA context on the thread that creates the communicator");
        return -1;
    }
    if (cu_check(cu->cuCtxGetDevice(&c->device), "cuCtxGetDevice", why, whylen) != 0)
        return -1;
    if (cu_check(cu->cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, c->device),
                 "cuDeviceGetAttribute", why, whylen) != 0)
        return -1;
    if (!memops) {
        snprintf(why, whylen, "device %d cannot use 64-bit stream memory operations", c->device);
        return -1;
    }
    /* The highest priority the device has: a transfer's short steps (counter
     * waits and writes, copies) go ahead of the application's queued kernels. */
    int least = 0, greatest = 0;
    int prio = cu->cuCtxGetStreamPriorityRange && cu->cuStreamCreateWithPriority &&
               cu->cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS;
    CUresult made = prio ? cu->cuStreamCreateWithPriority(&c->stream, CU_STREAM_NON_BLOCKING, greatest)
                         : cu->cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING);
    return cu_check(made, prio ? "cuStreamCreateWithPriority" : "cuStreamCreate", why, whylen);
}

/* What a rank exports to its peers (the rendezvous blob of round 2). */
static void write_export(const struct ipc_comm *c, uint8_t *blob, int *bloblen)
{
    struct ipc_export e;
    memset(&e, 0, sizeof(e));
    e.magic = EXPORT_MAGIC;
    e.version = EXPORT_VERSION;
    e.rank = c->rank;
    e.nranks = c->nranks;
    e.device = c->device;
    e.nslots = c->nslots;
    e.pid = (uint32_t)getpid();
    e.chunk = c->chunk;
    snprintf(e.shm, sizeof(e.shm), "%s", c->shm_name);
    memcpy(blob, &e, sizeof(e));
    *bloblen = (int)sizeof(e);
}

int ipc_prepare(struct ipc_comm **out, int rank, int nranks, uint8_t *blob, int *bloblen, char *why, size_t whylen)
{
    *out = NULL;
    /* The rendezvous decides ipc for at most IPC_MAX_RANKS ranks (= MAX_PEERS):
     * the counters and the Send/Recv counts have that many. */
    if (nranks < 1 || nranks > MAX_PEERS || rank < 0 || rank >= nranks) {
        snprintf(why, whylen, "rank %d of %d: the ipc transport takes 1 to %d ranks", rank, nranks, MAX_PEERS);
        return -1;
    }
    const struct shim_cuda *cu = shim_cuda(why, whylen);
    if (!cu)
        return -1;
    struct ipc_comm *c = calloc(1, sizeof(*c));
    if (!c || !(c->peer = calloc((size_t)nranks, sizeof(*c->peer))) ||
        !(c->shared = calloc((size_t)nranks, sizeof(*c->shared))) ||
        !(c->peer_dev = calloc((size_t)nranks, sizeof(*c->peer_dev))) ||
        ipc_staging_init(c, nranks) != 0) {
        if (c) {
            free(c->shared);
            free_host(c);
        }
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&c->qlock, NULL);
    const struct shim_config *cfg = shim_config();
    c->cu = cu;
    ipc_watch_none(c);
    c->rank = rank;
    c->nranks = nranks;
    c->chunk = cfg->ipc_chunk_bytes;
    c->nslots = cfg->ipc_slots;
    c->step_fixed = cfg->ipc_step_bytes;
    c->push_wait_us = cfg->ipc_push_wait_us;
    c->resume_wait_ms = cfg->ipc_resume_wait_ms;
    if (c->nslots > MAX_SLOTS) {
        snprintf(why, whylen, "NCCLSHIM_IPC_SLOTS=%d is over %d", c->nslots, MAX_SLOTS);
        goto fail;
    }
    if (open_device(c, why, whylen) != 0)
        goto fail;
    if (create_shared(c, why, whylen) != 0)
        goto fail;
    c->p2p_chunk = (P2P_AREA / (size_t)nranks / P2P_SLOTS) & ~(size_t)4095;
    if (c->p2p_chunk > c->chunk)
        c->p2p_chunk = c->chunk;
    if (c->p2p_chunk < 4096)
        c->p2p_chunk = 4096;
    c->data_bytes = p2p_offset(c) + (size_t)nranks * P2P_SLOTS * c->p2p_chunk;
    if (register_counters(c, c->rank, why, whylen) != 0)
        goto fail;
    if (ipc_staging_create(c, why, whylen) != 0)
        goto fail;
    write_export(c, blob, bloblen);
    ipc_vmm_listen(c);
    c->peer_dev[rank] = c->device;
    *out = c;
    return 0;
fail:
    ipc_vmm_close(c);
    free_resources(c);
    ipc_staging_destroy(c);
    free_host(c);
    return -1;
}

/* With a peer on this rank's own GPU and NCCLSHIM_IPC_COPY=sm, the copy
 * kernel for the hops to it (shim/ipc/ipc_kernel.c); failing to load it only
 * means copy engines, so it is noted, warned about, and not an error. */
static void load_kernel(struct ipc_comm *c)
{
    int shared = 0;
    for (int r = 0; r < c->nranks; r++)
        shared |= r != c->rank && c->peer_dev[r] == c->device;
    if (!shared || !shim_config()->ipc_copy_sm)
        return;
    char why[160];
    if (ipc_kernel_load(c, why, sizeof(why)) != 0) {
        shim_warn("ipc-copy", "ipc communicator (rank %d of %d): ranks share GPU %d but the shim's copy kernel "
                  "did not load (%s): those hops use copy engines (NCCLSHIM_IPC_COPY=sm asked for it)", c->rank, c->nranks,
                  c->device, why);
    }
}

int ipc_connect(struct ipc_comm *c, const struct ipc_peer_export *peers, int npeers, char *why, size_t whylen)
{
    int seen = 0;
    int succ = (c->rank + 1) % c->nranks;
    char succ_shm[48] = "";
    for (int i = 0; i < npeers; i++) {
        const struct ipc_peer_export *p = &peers[i];
        struct ipc_export e;
        if (p->len != (int)sizeof(e) || p->rank < 0 || p->rank >= c->nranks) {
            snprintf(why, whylen, "rank %d's export is malformed (%d bytes)", p->rank, p->len);
            return -1;
        }
        memcpy(&e, p->bytes, sizeof(e));
        if (e.magic != EXPORT_MAGIC || e.version != EXPORT_VERSION || e.rank != p->rank || e.nranks != c->nranks ||
            e.chunk != c->chunk || e.nslots != c->nslots) {
            snprintf(why, whylen, "rank %d's export does not match this rank's (chunk %llu/%zu, slots %d/%d): set the "
                     "same NCCLSHIM_IPC_CHUNK_BYTES and NCCLSHIM_IPC_SLOTS everywhere", p->rank,
                     (unsigned long long)e.chunk, c->chunk, e.nslots, c->nslots);
            return -1;
        }
        if (p->rank == c->rank)
            continue;
        c->peer_dev[p->rank] = e.device;
        if (e.pid == (uint32_t)getpid()) {
            snprintf(why, whylen, "ranks %d and %d are in one process: CUDA IPC cannot map memory of its own process",
                     c->rank, p->rank);
            return -1;
        }
        /* Every peer's shared page: its counters, which this rank's streams
         * write and wait on; broadcasts read the predecessor's descriptors
         * and tell the successor what was read; every page says where its
         * rank's staging is (Suspend). */
        if (open_shared(c, p->rank, e.shm, why, whylen) != 0 || register_counters(c, p->rank, why, whylen) != 0)
            return -1;
        if (p->rank == succ)
            memcpy(succ_shm, e.shm, sizeof(succ_shm));
        seen++;
    }
    if (seen != c->nranks - 1) {
        snprintf(why, whylen, "%d of %d peers' exports received", seen, c->nranks - 1);
        return -1;
    }
    load_kernel(c);
    if (c->nranks > 1)
        ipc_vmm_connect(c, succ_shm);
    /* From now on a peer may suspend, and the reaper lets go of its staging. */
    return c->nranks > 1 ? ipc_reaper_start(c, why, whylen) : 0;
}

ncclResult_t ipc_async_error(struct ipc_comm *c)
{
    return atomic_load(&c->fail.failed) ? ncclRemoteError : ncclSuccess;
}

void ipc_abort(struct ipc_comm *c)
{
    ipc_fail(c, "the communicator was aborted (ncclCommAbort)", 0);
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
    /* This rank's work is done (the last operation's fence), then everyone
     * says so (EXIT): nobody frees memory a peer still reads or writes. */
    int ok = 1;
    /* A rank without a single operation has had nothing of its memory read
     * (and a setup undone in the vote round had none): it only says EXIT for
     * the others; nor is there a barrier once a peer is gone (or the
     * application aborts): nobody would answer. */
    ipc_watch_closing(c);
    if (c->nranks > 1 && c->peer && !atomic_load(&c->fail.failed)) {
        int connected = 1;
        for (int r = 0; r < c->nranks; r++)
            connected &= c->peer[r] != 0;
        if (connected) {
            uint64_t deadline = shim_mono_us() + HOST_WAIT_US;
            ok = ipc_wait_fence(c, deadline, why, sizeof(why)) == 0;
            if (ok)
                ipc_write_flag(c, F_EXIT, 1);
            ok = ok && (c->is.ops == 0 || ipc_wait_all(c, F_EXIT, 1, why, sizeof(why)) == 0);
            if (!ok)
                shim_warn("ipc", "destroying an ipc communicator (rank %d of %d): %s; freeing its memory anyway",
                          c->rank, c->nranks, why);
        }
    }
    ipc_reaper_stop(c);
    ipc_unwatch(c);
    ipc_kernel_unload(c);
    ipc_data_close(c);
    ipc_vmm_close(c);
    free_resources(c);
    ipc_staging_destroy(c);
    if (cur != c->ctx)
        cu->cuCtxSetCurrent(cur);
    free_host(c);
}

