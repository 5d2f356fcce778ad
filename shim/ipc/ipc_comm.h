/*
 * What one process keeps of an ipc communicator (struct ipc_comm), and the
 * small reads of it that every file of shim/ipc/ makes on the broadcast's
 * path (inline: no call).  No code of its own: the protocol it keeps state
 * for is ipc_proto.h; what each file offers is that file's header.
 *
 * Files, each with a header of its own for what it offers: ipc.h (what
 * shim/comm/ calls, with ipc_ops.h, ipc_types.h, ipc_monitor.h and
 * ipc_suspend.h), ipc.c (set-up, destroy), ipc_ops.c (the operations as
 * the application calls them), ipc_bcast.c (the broadcast, this rank's exported
 * allocations), ipc_maps.c (peers' allocations mapped here, the map cache),
 * ipc_suspend.c (suspend, resume; this rank's staging and peers'),
 * ipc_reaper.c (the thread that gives back idle mappings and released
 * staging), ipc_monitor.c (watching for a lost peer), ipc_fail.c (failure),
 * ipc_stream.c (the copy call, the batched counter operations), ipc_core.c
 * (host access and waits on the counters, the futex words, the trace),
 * ipc_kernel.c (the copy kernel, hops within one GPU), ipc_vmm.c with
 * ipc_vmm_link.c, ipc_vmm_export.c and ipc_vmm_import.c (cuMemCreate memory
 * shared as file descriptors; their state in ipc_vmm_state.h, their
 * messages checked in ipc_vmm_wire.c), cuda.c (the driver API, loaded at
 * run time), reduce.c (host reductions).  No two of them call each other
 * in a loop (docs/design.md, "Layers"; tests/t/23-layers.t).
 */
#ifndef NCCLSHIM_IPC_COMM_H
#define NCCLSHIM_IPC_COMM_H

#include "ipc_proto.h"
#include "ipc_types.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct ipc_map;
struct ipc_exported;
struct ipc_vmm;

/*
 * Each part of the communicator's state below has one owner, the file that
 * writes it: the others read it, and change it only through the owner's
 * functions (its header).  The set-up fields are ipc.c's, written at
 * prepare and connect and only read after (but shm_name, which
 * ipc_unlink_shared clears once the name is gone).
 */

/* ipc_ops.c: the operations as the application's thread issues them.  The
 * counts are the same on every rank (operations are issued in the same order
 * everywhere) but `ops`; NCCL allows one thread per communicator at a time,
 * and only that thread touches them. */
struct ipc_issued {
    uint64_t ops;
    uint64_t bcasts, bbytes;            /* broadcasts issued, and their bytes */
    uint64_t allreduces;                /* all-reduces issued: the AR/AR2 values (every rank takes part) */
    uint64_t sent[MAX_PEERS], recvd[MAX_PEERS]; /* Send/Recv chunks per peer, as the counters will say */
    /* The stream of the operation before (cuStreamGetId: ids are never
     * reused, unlike handles), if known: an operation on the same stream
     * needs no fence. */
    unsigned long long last_sid;
    int last_sid_known;
    /* The last operation is over once rank fence_rank's counter at
     * fence_off reaches fence_val (0: nothing to wait for); fence_rank is
     * this rank, or a neighbour on its GPU ("One GPU").  Written under
     * qlock (the reaper reads it). */
    int fence_rank, fence_off;
    uint64_t fence_val;
};

/* ipc_fail.c: failure.  Set once a peer is gone (ipc_monitor.c) or the
 * communicator was aborted: every later operation fails at once, waits are
 * released, destroy skips its barrier. */
struct ipc_failure {
    atomic_int failed;
    atomic_int failing;                 /* claimed by the one ipc_fail that writes `why` */
    char why[256];                      /* written before `failed` is set, never after */
    _Atomic uint64_t since_us;          /* shim_mono_us() of the failure, once its waits were first released */
};

/* ipc_stream.c: how stream memory operations go.  `single`: the driver
 * refused cuStreamBatchMemOp (or lacks it), they go one by one.  Atomic:
 * every thread of the communicator's operations reads it. */
struct ipc_memops_mode {
    atomic_int single;
};

/* ipc_monitor.c: the watch for a lost peer. */
struct ipc_watch {
    int fd;                             /* the root's connection, watched; -1 if none */
    /* Set by ipc_free before its barrier: a connection closing from then on
     * is the others' teardown, not a loss (peer_closed records it, quietly). */
    atomic_int closing, peer_closed;
};

/* ipc_reaper.c: the reaper thread, started at connect.  `stop` is under
 * qlock; `started` is the application's thread's.  It waits on this rank's
 * shared word (ipc_wake). */
struct ipc_reaper {
    pthread_t thread;
    int started;
    int stop;
};

/* ipc_maps.c: the map cache (under qlock: the application's thread
 * enqueues broadcasts, and the reaper gives mappings back, holding it). */
struct ipc_map_cache {
    struct ipc_map *map;                /* by (rank, buffer id): uthash (HASH_COUNT: how many) */
    uint64_t used_us;                   /* shim_mono_us() when a mapping was last used */
    uint64_t gone_seen[2];              /* of the successor's (0) and predecessor's (1) gone ring */
};

/* ipc_suspend.c: every rank's staging as mapped here (0: not now);
 * at[rank]: this rank's (0 while given back).  Under qlock, but at[rank],
 * which the application's thread also reads in its operations (never while
 * suspended, when alone it changes). */
struct ipc_staging {
    CUdeviceptr *at;
};

/* ipc_bcast.c: the broadcasts' own state, the application's thread's; the
 * export cache and its check under qlock (the reaper checks it too). */
struct ipc_bcasts {
    /* The operation before was a broadcast that this rank's stream only
     * pushed out of its own buffer into its successor's, there at
     * [push_to, push_to + push_len): "Senders overlap". */
    int last_push_only;
    CUdeviceptr push_to;
    size_t push_len;
    /* How the broadcasts went (ipc_get_stats), counted as they are
     * enqueued; hops (in and out) whose copies ran on the SMs (the copy
     * kernel) or on copy engines. */
    atomic_ullong stat_first, stat_in[IPC_HOPS], stat_out[IPC_HOPS];
    atomic_ullong stat_sm, stat_ce;
    struct ipc_exported *exported;      /* by buffer id: uthash (HASH_COUNT: how many) */
    /* The reaper's check of them ("Mappings kept"): when next, and the id
     * it goes on from (0: the first). */
    uint64_t check_us, check_from;
};

/* ipc_kernel.c: the copy kernel, loaded at connect when a peer shares this
 * rank's device and NCCLSHIM_IPC_COPY=sm; else NULL, and `note` says why if
 * it was asked for and did not load. */
struct ipc_copy_kernel {
    CUmodule mod;
    CUfunction fn;
    int sms;
    char note[200];
};

/* The VMM files' (ipc_vmm*.c, sharing ipc_vmm_state.h): their state (NULL:
 * no VMM sharing), under qlock; `note` says why VMM memory is staged, if it
 * is (written under qlock, read by the records once the communicator is
 * done). */
struct ipc_vmm_share {
    struct ipc_vmm *st;
    char note[200];
    atomic_ullong sent, mapped;         /* pieces sent to neighbours, and mapped from them */
};

struct ipc_comm {
    /* Set up (ipc.c) and only read after. */
    const struct shim_cuda *cu;
    int rank, nranks, device;
    CUcontext ctx;
    size_t chunk;
    int nslots;
    size_t step_fixed;                  /* NCCLSHIM_IPC_STEP_BYTES: a chain's step (0: step_of chooses) */
    int push_wait_us;                   /* NCCLSHIM_IPC_PUSH_WAIT_US: see await_receiver */
    int resume_wait_ms;                 /* NCCLSHIM_IPC_RESUME_WAIT_MS: see ipc_data_wait */
    CUstream stream;                    /* the communicator's own (non-blocking, highest priority) */
    /* Every rank's counters as this context's streams address them (its
     * shared page's, registered here: 0 until then); the host reads and
     * writes them through shared[r]->counters. */
    CUdeviceptr *peer;
    size_t data_bytes;                  /* the size of a staging allocation */
    size_t p2p_chunk;                   /* Send/Recv slot size */
    /* Host shared pages of every rank (this rank's at shared[rank]). */
    struct ipc_shared **shared;
    char shm_name[48];                  /* this rank's, until unlinked at commit (ipc_core.c) */
    int *peer_dev;                      /* every rank's device, from its export (NULL until connected) */
    char group[160];                    /* the communicator's name in the records, for messages */
    /* Held by the application's thread while it enqueues, and by the
     * reaper while it gives back (ipc_free takes it once the reaper stopped). */
    pthread_mutex_t qlock;

    struct ipc_issued is;
    struct ipc_failure fail;
    struct ipc_memops_mode memops;
    struct ipc_watch watch;
    struct ipc_reaper reaper;
    struct ipc_map_cache maps;
    struct ipc_staging staging;
    struct ipc_bcasts bc;
    struct ipc_copy_kernel kern;
    struct ipc_vmm_share vmm;
};

/* This rank's neighbours on the ring. */
static inline int pred_of(const struct ipc_comm *c)
{
    return (c->rank - 1 + c->nranks) % c->nranks;
}

static inline int succ_of(const struct ipc_comm *c)
{
    return (c->rank + 1) % c->nranks;
}

/* Whether the communicator failed (ipc_fail.c): a communicator that lost a
 * peer (or was aborted) fails every operation at once, and every host wait;
 * 1 with the failure's reason in `why` (written before `failed` was set,
 * never after), else 0. */
static inline int ipc_failed(const struct ipc_comm *c, char *why, size_t whylen)
{
    if (!atomic_load(&c->fail.failed))
        return 0;
    snprintf(why, whylen, "%s", c->fail.why);
    return 1;
}

/* Rank r's data_state, from its shared page ("Suspend"). */
static inline uint64_t ipc_data_state(const struct ipc_comm *c, int r)
{
    return atomic_load_explicit(&c->shared[r]->data_state, memory_order_acquire);
}

static inline CUdeviceptr flag(const struct ipc_comm *c, int r, int off)
{
    return c->peer[r] + (CUdeviceptr)off;
}

/* The same counter, as the host reads and writes it. */
static inline _Atomic uint64_t *host_flag(const struct ipc_comm *c, int r, int off)
{
    return &c->shared[r]->counters[off / 8];
}

/* Staging slot of rank r that carries its chunk k of a broadcast (r's
 * staging mapped here: ipc_data_get). */
static inline CUdeviceptr slot(const struct ipc_comm *c, int r, uint64_t k)
{
    return c->staging.at[r] + (CUdeviceptr)((k % (uint64_t)c->nslots) * c->chunk);
}

/* 0 if `r` is CUDA_SUCCESS; else -1 with the reason (`fn` failed: the
 * driver's error) in `why`.  Callers say where it goes next:
 *     if (cu_check(cu->cuMemAlloc(&p, n), "cuMemAlloc", why, whylen) != 0)
 *         goto fail; */
static inline int cu_check(CUresult r, const char *fn, char *why, size_t whylen)
{
    if (r == CUDA_SUCCESS)
        return 0;
    shim_cuda_error(fn, r, why, whylen);
    return -1;
}

static inline size_t p2p_offset(const struct ipc_comm *c)
{
    return c->chunk * (size_t)c->nslots;
}

/* Where `from` sends its k-th chunk to `to`, in `from`'s staging as mapped here. */
static inline CUdeviceptr p2p_slot(const struct ipc_comm *c, int from, int to, uint64_t k)
{
    return c->staging.at[from] + p2p_offset(c) + ((size_t)to * P2P_SLOTS + (size_t)(k % P2P_SLOTS)) * c->p2p_chunk;
}


#endif
