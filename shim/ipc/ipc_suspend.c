/*
 * ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29) on an ipc
 * communicator, and the peers' side of it: mapping a peer's staging when an
 * operation needs it, letting go of it when the peer gives it back.  It owns
 * the staging (struct ipc_staging): this rank's is allocated here at set-up
 * too (ipc_staging_create), so that one file allocates, gives back and
 * frees it.
 * Colocated RL puts the inference engine to sleep between refits and gives
 * its GPU memory back; these are the calls it makes.
 *
 * A suspend gives back, on this rank alone (no peer need call anything, and
 * peers may be busy or suspended too), the mappings of its peers' buffers
 * and, with NCCL_SUSPEND_MEM, its staging (staging and Send/Recv slots: all
 * of its GPU memory; its counters, which its peers' streams may still wait
 * on and write, are host memory).  Every peer maps that staging through legacy
 * CUDA IPC, and freeing memory another process maps is undefined behaviour
 * (the driver keeps it allocated until the last mapping goes), so the free
 * waits until every peer has closed its mapping and said so (the protocol:
 * "Suspend" in ipc_proto.h).  Peers' reapers answer within milliseconds
 * when their own last operation is over; a peer whose stream still has an
 * operation queued (it may be waiting for this very rank) holds it, and the
 * release finishes in the background once it lets go.  A resume allocates
 * the staging anew and publishes its handle; peers open it when they next
 * need it.
 *
 * ncclCommMemStats answers as NCCL's memory manager does: the staging is
 * "suspendable" (ncclStatGpuMemSuspend) and the whole of it (nothing of GPU
 * memory is persistent: the counters are host memory); a suspend changes
 * none of them, only ncclStatGpuMemSuspended.
 */
#define _GNU_SOURCE
#include "ipc_suspend.h"
#include "ipc_core.h"
#include "ipc_maps.h"
#include "clock.h"

#include "record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long a suspend waits for its peers to let go of its staging before it
 * returns and leaves the rest to its reaper: they answer in milliseconds
 * unless an operation of theirs is still queued. */
#define RELEASE_WAIT_US (2ull * 1000 * 1000)
/* While a release or a peer's letting go waits for a queued operation, the
 * reaper looks again this often (nothing wakes it when a stream moves). */
#define RETRY_MS 10

/* Every peer looks again at this rank's state (their reapers, their waits). */
static void wake_peers(const struct ipc_comm *c)
{
    for (int r = 0; r < c->nranks; r++)
        if (r != c->rank)
            ipc_wake(c, r);
}

static void set_state(struct ipc_comm *c, uint64_t epoch, int st)
{
    atomic_store_explicit(&c->shared[c->rank]->data_state, DATA_STATE(epoch, st), memory_order_release);
    wake_peers(c);
}

static void close_data(struct ipc_comm *c, int r)
{
    c->cu->cuIpcCloseMemHandle(c->staging.at[r]);
    c->staging.at[r] = 0;
    ipc_trace(c, "closed rank %d's staging", r);
}

int ipc_staging_init(struct ipc_comm *c, int nranks)
{
    c->staging.at = calloc((size_t)nranks, sizeof(*c->staging.at));
    return c->staging.at ? 0 : -1;
}

int ipc_staging_create(struct ipc_comm *c, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    if (cu_check(cu->cuMemAlloc(&c->staging.at[c->rank], c->data_bytes), "cuMemAlloc", why, whylen) != 0)
        return -1;
    if (cu_check(cu->cuIpcGetMemHandle(&c->shared[c->rank]->data_handle, c->staging.at[c->rank]),
                 "cuIpcGetMemHandle", why, whylen) != 0)
        return -1;
    atomic_store(&c->shared[c->rank]->data_state, DATA_STATE(0, DATA_ACTIVE));
    return 0;
}

void ipc_staging_destroy(struct ipc_comm *c)
{
    if (c->staging.at && c->staging.at[c->rank])
        c->cu->cuMemFree(c->staging.at[c->rank]);
}

void ipc_staging_free(struct ipc_comm *c)
{
    free(c->staging.at);
    c->staging.at = NULL;
}

int ipc_data_get(struct ipc_comm *c, int r, char *why, size_t whylen)
{
    if (r == c->rank)
        return c->staging.at[r] ? 0 : 1;
    uint64_t v = ipc_data_state(c, r);
    /* A mapping this rank holds was not acknowledged: its owner keeps the
     * memory (RELEASING) until the reaper closes it under qlock. */
    if (c->staging.at[r])
        return 0;
    if (DATA_ST(v) != DATA_ACTIVE)
        return 1;
    /* ACTIVE: the handle is the allocation's until the owner has released
     * it, which needs this rank's acknowledgement, which needs qlock (held
     * here).  Read it between two reads of the state all the same: a
     * release that finished with an older acknowledgement, and a resume,
     * rewrite it. */
    CUipcMemHandle h;
    memcpy(&h, &c->shared[r]->data_handle, sizeof(h));
    if (ipc_data_state(c, r) != v)
        return 1;
    CUdeviceptr p = 0;
    CUresult res = c->cu->cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (res != CUDA_SUCCESS) {
        char err[160];
        snprintf(why, whylen, "opening rank %d's staging (%zu bytes, device %d) from device %d: %s", r, c->data_bytes,
                 c->peer_dev[r], c->device, shim_cuda_error("cuIpcOpenMemHandle", res, err, sizeof(err)));
        return -1;
    }
    c->staging.at[r] = p;
    ipc_trace(c, "opened rank %d's staging (epoch %llu)", r, (unsigned long long)DATA_EPOCH(v));
    return 0;
}

int ipc_data_wait(struct ipc_comm *c, int r, char *why, size_t whylen)
{
    uint64_t t0 = shim_mono_us(), deadline = t0 + (uint64_t)c->resume_wait_ms * 1000ull;
    _Atomic uint32_t *word = &c->shared[c->rank]->word;
    for (;;) {
        uint32_t seen = atomic_load(word);
        if (DATA_ST(ipc_data_state(c, r)) == DATA_ACTIVE)
            return 0;
        if (ipc_failed(c, why, whylen))
            return -1;
        uint64_t now = shim_mono_us();
        if (now >= deadline) {
            snprintf(why, whylen, "rank %d is suspended (ncclCommSuspend gave its staging back) and was not resumed "
                     "within %d ms (NCCLSHIM_IPC_RESUME_WAIT_MS): this operation needs its staging; call "
                     "ncclCommResume on rank %d before operations that involve it", r, c->resume_wait_ms, r);
            return -1;
        }
        /* In slices: a peer that died does not wake anyone. */
        uint64_t left_ms = (deadline - now + 999) / 1000;
        ipc_wait_word(word, seen, left_ms < 50 ? (long)left_ms : 50);
    }
}

/* Whether every Send chunk in this rank's slots was taken by its receiver
 * (a sender's operation ends before its receiver reads the slot). */
static int sends_taken(const struct ipc_comm *c)
{
    int any = 0;
    for (int q = 0; q < c->nranks; q++)
        any |= c->is.sent[q] != 0;
    if (!any || atomic_load(&c->fail.failed))
        return 1;
    for (int q = 0; q < c->nranks; q++)
        if (ipc_read_flag(c, c->rank, F_RECVD + 8 * q) < c->is.sent[q])
            return 0;
    return 1;
}

int ipc_release_step(struct ipc_comm *c)
{
    struct ipc_shared *own = c->shared[c->rank];
    uint64_t v = ipc_data_state(c, c->rank);
    if (DATA_ST(v) != DATA_RELEASING)
        return 0;
    for (int q = 0; q < c->nranks; q++)
        if (q != c->rank && atomic_load(&own->acked[q]) != DATA_EPOCH(v) && atomic_load(&own->acked[q]) != ACK_GONE)
            return 1;
    if (!sends_taken(c))
        return 1;
    CUresult r = c->cu->cuMemFree(c->staging.at[c->rank]);
    if (r != CUDA_SUCCESS) {
        char err[160];
        shim_warn("ipc", "ipc communicator %s (rank %d of %d): giving its staging back: %s; it stays allocated",
                  c->group, c->rank, c->nranks, shim_cuda_error("cuMemFree", r, err, sizeof(err)));
        set_state(c, DATA_EPOCH(v), DATA_ACTIVE);
        return 0;
    }
    c->staging.at[c->rank] = 0;
    ipc_trace(c, "staging released (epoch %llu)", (unsigned long long)DATA_EPOCH(v));
    atomic_store_explicit(&own->data_state, DATA_STATE(DATA_EPOCH(v), DATA_RELEASED), memory_order_release);
    ipc_wake(c, c->rank);
    return 0;
}

int ipc_data_reap(struct ipc_comm *c)
{
    int pending = 0, passed = -1;
    for (int r = 0; r < c->nranks; r++) {
        if (r == c->rank)
            continue;
        uint64_t v = ipc_data_state(c, r);
        if (DATA_ST(v) == DATA_ACTIVE)
            continue;
        int has_maps = ipc_maps_hold_rank(c, r);
        int acked = DATA_ST(v) != DATA_RELEASING || atomic_load(&c->shared[r]->acked[c->rank]) == DATA_EPOCH(v);
        if (!c->staging.at[r] && !has_maps && acked)
            continue;
        /* A copy through these mappings may still be queued: only once this
         * rank's last operation is over. */
        if ((c->staging.at[r] || has_maps) && passed < 0)
            passed = ipc_fence_passed(c);
        if ((c->staging.at[r] || has_maps) && !passed) {
            pending = 1;
            continue;
        }
        if (c->staging.at[r])
            close_data(c, r);
        /* Its buffers too: a suspended rank's application frees them next. */
        ipc_maps_drop_rank(c, r);
        if (DATA_ST(v) == DATA_RELEASING) {
            atomic_store(&c->shared[r]->acked[c->rank], DATA_EPOCH(v));
            ipc_wake(c, r);
        }
    }
    return pending;
}

void ipc_data_close(struct ipc_comm *c)
{
    for (int r = 0; c->staging.at && r < c->nranks; r++) {
        if (r == c->rank)
            continue;
        if (c->staging.at[r])
            close_data(c, r);
        /* Nothing of this rank touches r's staging any more: r's releases,
         * now or later, need not wait for this rank. */
        if (c->shared && c->shared[r]) {
            atomic_store(&c->shared[r]->acked[c->rank], ACK_GONE);
            ipc_wake(c, r);
        }
    }
}

/* A suspend returns before its staging could be given back: who holds it. */
static void warn_held(const struct ipc_comm *c)
{
    char who[128] = "";
    size_t n = 0;
    uint64_t e = DATA_EPOCH(ipc_data_state(c, c->rank));
    for (int q = 0; q < c->nranks && n + 8 < sizeof(who); q++)
        if (q != c->rank && atomic_load(&c->shared[c->rank]->acked[q]) != e &&
            atomic_load(&c->shared[c->rank]->acked[q]) != ACK_GONE)
            n += (size_t)snprintf(who + n, sizeof(who) - n, "%s%d", n ? "," : "", q);
    if (n)
        shim_warn("ipc-suspend", "ncclCommSuspend on ipc communicator %s (rank %d of %d): rank(s) %s still map this "
                  "rank's staging (%zu bytes): an operation of theirs is still queued, perhaps one waiting for this "
                  "rank; the staging is given back as soon as they finish it (a resume before that keeps it)",
                  c->group, c->rank, c->nranks, who, c->data_bytes);
    else
        shim_warn("ipc-suspend", "ncclCommSuspend on ipc communicator %s (rank %d of %d): data it sent with ncclSend "
                  "is not all received yet, so its staging (%zu bytes) is given back only once the peers have "
                  "called the matching ncclRecv (a resume before that keeps it)", c->group, c->rank, c->nranks,
                  c->data_bytes);
}

int ipc_suspend(struct ipc_comm *c, int release, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    CUcontext cur = NULL;
    if (cu->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != c->ctx)
        cu->cuCtxSetCurrent(c->ctx);
    /* This rank's last operation is over (its fence), so that no copy
     * through a mapping is still queued when the mapping goes. */
    int rc = ipc_wait_fence(c, shim_mono_us() + HOST_WAIT_US, why, whylen) != 0 ? -1 : 0;
    if (rc == 0) {
        pthread_mutex_lock(&c->qlock);
        ipc_trim_maps(c, 0);
        uint64_t v = ipc_data_state(c, c->rank);
        if (release && DATA_ST(v) == DATA_ACTIVE) {
            set_state(c, DATA_EPOCH(v) + 1, DATA_RELEASING);
            ipc_trace(c, "releasing the staging (epoch %llu)", (unsigned long long)DATA_EPOCH(v) + 1);
        }
        pthread_mutex_unlock(&c->qlock);
    }
    /* The peers' reapers let go within milliseconds unless an operation of
     * theirs is queued; then this rank's reaper finishes the release. */
    uint64_t deadline = shim_mono_us() + RELEASE_WAIT_US;
    _Atomic uint32_t *word = &c->shared[c->rank]->word;
    while (rc == 0 && release) {
        uint32_t seen = atomic_load(word);
        pthread_mutex_lock(&c->qlock);
        int left = ipc_release_step(c);
        pthread_mutex_unlock(&c->qlock);
        if (!left)
            break;
        if (shim_mono_us() >= deadline) {
            warn_held(c);
            break;
        }
        ipc_wait_word(word, seen, RETRY_MS);
    }
    if (cur != c->ctx)
        cu->cuCtxSetCurrent(cur);
    return rc;
}

int ipc_resume(struct ipc_comm *c, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    CUcontext cur = NULL;
    if (cu->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != c->ctx)
        cu->cuCtxSetCurrent(c->ctx);
    int rc = 0;
    pthread_mutex_lock(&c->qlock);
    uint64_t v = ipc_data_state(c, c->rank);
    if (DATA_ST(v) == DATA_RELEASING) {
        /* Not given back yet: it stays.  Peers that let go open it again. */
        set_state(c, DATA_EPOCH(v), DATA_ACTIVE);
    } else if (DATA_ST(v) == DATA_RELEASED) {
        CUdeviceptr p = 0;
        CUipcMemHandle h;
        CUresult r = cu->cuMemAlloc(&p, c->data_bytes);
        const char *fn = "cuMemAlloc";
        if (r == CUDA_SUCCESS) {
            fn = "cuIpcGetMemHandle";
            r = cu->cuIpcGetMemHandle(&h, p);
            if (r != CUDA_SUCCESS)
                cu->cuMemFree(p);
        }
        if (r != CUDA_SUCCESS) {
            char err[160];
            snprintf(why, whylen, "allocating the staging again (%zu bytes on device %d): %s; free GPU memory "
                     "before ncclCommResume, or lower NCCLSHIM_IPC_CHUNK_BYTES / NCCLSHIM_IPC_SLOTS on every rank",
                     c->data_bytes, c->device, shim_cuda_error(fn, r, err, sizeof(err)));
            rc = -1;
        } else {
            c->staging.at[c->rank] = p;
            memcpy(&c->shared[c->rank]->data_handle, &h, sizeof(h));
            set_state(c, DATA_EPOCH(v), DATA_ACTIVE);
            ipc_trace(c, "staging allocated again (epoch %llu)", (unsigned long long)DATA_EPOCH(v));
        }
    }
    pthread_mutex_unlock(&c->qlock);
    if (cur != c->ctx)
        cu->cuCtxSetCurrent(cur);
    return rc;
}

void ipc_mem_stats(const struct ipc_comm *c, int suspended, uint64_t out[4])
{
    out[ncclStatGpuMemSuspend] = c->data_bytes;
    out[ncclStatGpuMemSuspended] = (uint64_t)(suspended != 0);
    out[ncclStatGpuMemPersist] = 0;
    out[ncclStatGpuMemTotal] = c->data_bytes;
}
