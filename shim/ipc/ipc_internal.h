/*
 * The CUDA IPC transport's internals, shared by shim/ipc*.c (the interface is
 * shim/ipc/ipc.h).
 *
 * Each rank owns one device allocation:
 *   staging   S staging slots of `chunk` bytes, then the Send/Recv slots;
 *             opened by a peer when it first needs them, and given back by
 *             ncclCommSuspend ("Suspend" below)
 * and host shared memory (struct ipc_shared, POSIX shm, mapped by every
 * peer) through which it tells its ring neighbours where the data of each
 * broadcast is, or is to go, and everyone where its staging is.  Its first
 * 4096 bytes are the rank's counters (u64 each): pinned and mapped into every
 * peer's context (cuMemHostRegister), where the streams write and wait on
 * them ("Counters in host memory", below).
 *
 * The host counts what each counter will say: `ops` (this rank's operations,
 * DONE: Send/Recv involve only some ranks, so it differs between ranks),
 * `bbytes` (bytes broadcast so far) and `allreduces` (the same on every rank).
 * Counters only grow.  Each counter has one writer, and every stream wait is
 * on this rank's own page (a wait polls; a write is posted), so a rank's
 * neighbours write into its page, and a rank that loses a peer releases
 * its own waits by storing into its own page (but between two ranks on one
 * GPU: "One GPU", below):
 *   AVAIL        (written by the predecessor) bytes of the broadcasts so far
 *                that are in this rank's buffer (PUSH) or that it holds where
 *                this rank may read them (PULL, STAGED)
 *   TAKEN        (written by the successor) bytes it has read from this rank
 *                (PULL, STAGED), or whose broadcast it has reached (PUSH:
 *                its buffer may be written)
 *   SENT[q]      (written by q) Send/Recv chunks q has put in its slots for this rank
 *   RECVD[q]     (written by q) chunks q has taken from this rank's slots for q
 *   DONE         (this rank) operations completed, where no other counter
 *                of this page says so (the fence, below)
 *   AR, AR2      (this rank, from the host) all-reduce arrival and departure
 *   EXIT         (this rank) set at destroy
 *   TAKEN_MINE   (this rank) the TAKEN it last wrote as the last receiver
 *                of a pushed broadcast: see "Receivers run ahead" below
 *
 * Broadcast is a chain along the ring root, root+1, ..., root-1.  Each rank
 * but the root receives its data from its predecessor, and each hop moves
 * it in one of three ways, the same on both sides: the two ranks learn the
 * other's buffer from the descriptors in their shared pages.
 *   PUSH    the successor's buffer can be exported (cuIpcGetMemHandle:
 *           memory of cuMemAlloc, PyTorch's caching allocator by default;
 *           of cuMemCreate with a file descriptor handle: ipc_vmm.c):
 *           the predecessor's stream copies into it over NVLink, once the
 *           successor's stream has reached the broadcast (it says so with
 *           TAKEN at the start).  A copy engine writing to a peer is faster
 *           than one reading from it (bench/copy_probe.py, measured on H200:
 *           390 GB/s against 373 at 64 MiB), and the successor then needs
 *           nothing from its predecessor's host.
 *   PULL    only the predecessor's buffer can be exported: the successor's
 *           stream copies from it, and the predecessor's operation ends once
 *           TAKEN says everything was read (so the caller may reuse it).
 *   STAGED  neither (cuMemCreate memory without a shareable handle type,
 *           as vLLM's sleep-mode allocator makes; PyTorch's expandable
 *           segments are exported as file descriptors: ipc_vmm.c): the
 *           predecessor copies its buffer through its own staging slots
 *           (chunk by chunk, S in flight) and the successor reads those.
 * Between two ranks a hop is one copy; along longer chains it goes in steps
 * of chunk x S bytes (PUSH, PULL) or chunks (STAGED), pipelined so that
 * every hop is busy at once.  Every step and every stream memory operation
 * costs microseconds on the critical path (docs/benchmarks.md): the fewest
 * of them is what makes the transfer fast.
 *
 * Which of the three a hop takes is settled by which of its two ranks calls
 * first: each rank publishes its descriptor, then counts itself in on the
 * hop's claim word (in the receiver's ring slot).  The first enqueues the
 * passive half, which needs nothing of its peer: a receiver says its buffer
 * is ready and waits for the data (PUSH), a sender says its data is ready and
 * waits until it was read (PULL); either one, when its own buffer cannot be
 * exported, commits the hop to STAGED instead.  The second reads the first's
 * descriptor (published before the claim) and enqueues the active half: the
 * copy.  A rank whose neighbours have counted in on each of its hops already
 * will be second on all of them, and nobody reads its descriptor: it
 * publishes an empty one, sparing the description (for expandable segments,
 * its pieces' export and the neighbour's import of them).  So every
 * broadcast is enqueued whole by the application's thread,
 * on its stream, and no thread waits for a peer (but when a rank runs DRING
 * broadcasts ahead of a neighbour: its descriptor then waits for room).
 * Nothing is left for another thread to enqueue later: a helper thread's
 * driver calls can be held up by the application's own synchronous ones (a
 * pageable cudaMemcpy on the legacy stream), while the application's stream
 * waits for the helper's work: measured on H200, an earlier design whose
 * proxy thread enqueued the copies hung that way in 1 run of 5.
 *
 * Counters in host memory.  Every stream wait of the transport can be
 * released by a plain store from the host, with no driver call: a peer that
 * dies leaves waits no stream operation of its own will ever satisfy, and
 * the survivor must release them itself (ipc_fail).  Device memory needs a
 * stream to be written (cuMemcpyHtoD, cuStreamWriteValue64), and a stream
 * can be stuck behind the very wait it would release: a synchronous copy
 * runs on the legacy default stream, which waits for the application's
 * blocking streams; and every stream shares the device's work queues
 * (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default; Megatron sets 1), where a
 * wait holds up whatever was queued behind it on another stream (the CUDA
 * programming guide's false dependencies).  Both hung survivors on H100
 * (docs/benchmarks.md, "A rank lost").  Host memory also outlives a dead
 * peer: a survivor's stream writing into the lost rank's counters writes
 * into shared memory it still maps, never into freed device memory.
 *
 * Operations of a communicator run in the order they were issued, whatever
 * the stream: each one leaves a fence (a counter, of this rank's own page but
 * for "One GPU", and the value that says it is over), and an operation on
 * another stream than the one before waits for it.  On one stream, the
 * order is the stream's.
 *
 * Receivers run ahead.  A pushed broadcast's last receiver does nothing but
 * say its buffer may be written (TAKEN) and wait for AVAIL, and AVAIL only
 * grows in the order of the broadcasts, so reaching it says every earlier
 * one arrived too.  Such a broadcast that follows another such on another
 * stream waits, instead of the fence (the earlier one's data), only for the
 * earlier one's TAKEN write (TAKEN_MINE, on its own page: TAKEN stays in
 * order).  A refit on 2 streams in turn then has the next broadcast's TAKEN
 * on the sender's page while the sender still copies the one before; with
 * the fence, every broadcast waited for a round trip between the two
 * processes (on one GPU, ~20 us each, two contexts time-sharing it).
 *
 * Senders overlap.  Between two ranks, a root whose broadcast follows one
 * that only pushed out of its own buffer (it wrote nothing of its own) into
 * a disjoint part of its successor's memory, on another stream, copies at
 * once and waits for the fence only before it says AVAIL: AVAIL and DONE stay
 * in order, the copies overlap each other's counter waits and writes.
 *
 * Suspend.  A rank gives its staging back on its own (ncclCommSuspend;
 * its peers may be busy, or suspended too), but not before no peer can
 * touch it: legacy CUDA IPC memory freed while another process maps it is
 * undefined behaviour, and stays allocated until that process closes it.
 * The rank's shared page says where its staging is and in what state
 * (data_state: an epoch, counting its suspends, and ACTIVE, RELEASING or
 * RELEASED).  Suspending, the rank waits for its last operation, says
 * RELEASING and wakes its peers' reapers; each closes its mapping of that
 * staging once its own last operation is over (a copy through it may be
 * queued) and acknowledges the epoch in the rank's page.  When every peer
 * has, and every Send chunk in its slots was taken, the rank frees the
 * staging (RELEASED).  A peer that cannot let go in time (its stream still
 * has an operation that waits for this rank) leaves the release to the
 * rank's reaper, which finishes it when the peer does; a resume before
 * that keeps the staging (ACTIVE again, same allocation).  Resume after a
 * release allocates anew and publishes the new handle.  An operation that
 * copies from a peer's staging (a staged hop in, a Recv, an all-reduce)
 * maps it under qlock (the reaper closes under qlock too), and waits,
 * bounded (NCCLSHIM_IPC_RESUME_WAIT_MS), for a peer that is not ACTIVE:
 * that peer has to resume to take part anyway.
 *
 * One GPU.  Where a hop's two ranks share a device (colocated trainer and
 * inference engine), their pages are the same device memory, and the two
 * contexts time-share the GPU: a stream blocked on a wait lets the other
 * process's stream run, so every counter write a stream makes before it
 * blocks delays the other process (2-3 us each on H100: docs/benchmarks.md,
 * "Colocated").  There a rank waits on its neighbour's page instead of
 * writing a counter of its own: a root pushing to a successor on its GPU
 * writes no DONE (its fence is the AVAIL it wrote, on the successor's page),
 * and a last receiver of a push from a predecessor on its GPU writes no
 * TAKEN_MINE (the next broadcast on another stream waits for its TAKEN, on
 * the predecessor's page).  A failed rank releases those two words too
 * (ipc_fail).  Between GPUs nothing changes.
 *
 * Files: ipc.h (what shim/comm/ calls; with ipc_types.h, what every file
 * and caller shares, ipc_monitor.h and ipc_suspend.h), ipc.c (set-up, host
 * waits, failure, destroy), ipc_ops.c (the operations as the application
 * calls them), ipc_bcast.c (the broadcast), ipc_maps.c (peers' allocations
 * mapped here, the map cache), ipc_vmm.c (cuMemCreate memory shared as file
 * descriptors: the protocol, set-up, the reaper's turn, close), ipc_vmm_link.c
 * (its Unix sockets), ipc_vmm_export.c (a buffer's pieces sent to the
 * neighbours), ipc_vmm_import.c (a neighbour's pieces mapped here), with
 * ipc_vmm_internal.h what those four share and ipc_vmm_wire.c their messages'
 * check, ipc_reaper.c (gives back idle mappings and peers' released
 * staging), ipc_suspend.c (suspend, resume, peers' staging), ipc_monitor.c
 * (watching for a lost peer), ipc_core.c (what the others share: counters,
 * host waits, failure, the copy call, the trace), ipc_kernel.c (the copy
 * kernel, hops within one GPU), cuda.c (the driver API, loaded at run time),
 * reduce.c (host reductions).
 */
#ifndef NCCLSHIM_IPC_INTERNAL_H
#define NCCLSHIM_IPC_INTERNAL_H

#include "ipc_types.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uthash.h>

#define FLAGS_BYTES 4096
#define MAX_SLOTS 64
/* One writer per 64-byte line. */
#define F_AVAIL 0                       /* written by the predecessor */
#define F_TAKEN 64                      /* written by the successor */
#define F_DONE 128
#define F_AR 192
#define F_AR2 256
#define F_EXIT 320
#define F_TAKEN_MINE 384                /* this rank: the last TAKEN it wrote as a broadcast's last receiver */
#define F_SENT 1024                     /* + 8 * peer, written by that peer: chunks it sent here */
#define F_RECVD 2048                    /* + 8 * peer, written by that peer: chunks it took from here */
#define MAX_PEERS 64
_Static_assert(F_TAKEN_MINE + 8 <= F_SENT && F_SENT + 8 * MAX_PEERS <= F_RECVD && F_RECVD + 8 * MAX_PEERS <= FLAGS_BYTES,
               "the counters fit their page");
_Static_assert(MAX_PEERS >= RV_MAX_PEERS, "a counter per peer");
/* Send/Recv: each rank has, for each peer, P2P_SLOTS slots of p2p_chunk
 * bytes that it sends through; the whole area is P2P_AREA bytes or less. */
#define P2P_SLOTS 2
/* With the default staging (2 x 23 MiB) the allocation is 60 MiB and 4 KiB:
 * 62 MiB in the driver's 2 MiB pages, under 64 MiB with what the driver adds
 * for the stream (torch.cuda.mem_get_info measured 64-66 MiB with 16 MiB here). */
#define P2P_AREA (14u << 20)
/* Descriptors a rank may publish ahead of its neighbours. */
#define DRING 64
/* Peer allocations kept mapped between broadcasts (the ones used last); more
 * stay mapped while broadcasts are in flight.  A refit's worth: a model sent
 * a tensor a broadcast has hundreds (a 7B dense model 291) to tens of
 * thousands (an MoE model's experts) of them, and a mapping closed between
 * two refits is opened again in the next (~8 us each, H100: docs/benchmarks.md,
 * "Host time per broadcast").  Idle ones still go after MAP_IDLE_MS. */
#define MAP_CACHE 32768
/* Allocations of this rank whose IPC handle is remembered (then forgotten all
 * at once: an id is never reused, a forgotten one costs its driver calls again). */
#define EXPORT_CACHE 32768
/* Mappings unused this long are given back: a peer's freed memory is
 * not kept alive by them for longer. */
#define MAP_IDLE_MS 1000

#define EXPORT_MAGIC 0x6370696du /* "mipc" */
#define EXPORT_VERSION 7 /* 7: the shared page's sleepers */
/* Host waits (all-reduce, destroy) give up after this long: a peer that
 * stopped answering must not hang the application for ever. */
#define HOST_WAIT_US (120ull * 1000 * 1000)

/* What a rank exports (the rendezvous blob).  Same host, same build: plain bytes. */
struct ipc_export {
    uint32_t magic, version;
    int32_t rank, nranks, device, nslots;
    uint32_t pid, pad;
    uint64_t chunk;
    char shm[48];                       /* its struct ipc_shared (shm_open name), counters first */
};
_Static_assert(sizeof(struct ipc_export) <= RV_BLOB_LEN, "the export fits a vote");

/* Where a rank's data for a broadcast is, for its neighbours: what it
 * publishes, copied whole into and out of its ring slot. */
struct ipc_desc {
    uint32_t direct;                    /* 1: read the buffer itself; 0: read the staging slots */
    uint32_t pad;
    uint64_t buffer_id;                 /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation */
    uint64_t offset;                    /* of the data in the allocation */
    uint64_t alloc_size;
    CUipcMemHandle handle;              /* of the allocation */
    /* vmm: the memory is cuMemCreate's (shim/ipc/ipc_vmm.c), offset and
     * alloc_size are in the address range the rank reserved, starting at
     * `range` (its address), and the pieces were sent over the Unix
     * sockets: to the predecessor up to its message vmm_seq[0], to the
     * successor up to vmm_seq[1]. */
    uint32_t vmm, pad2;
    uint64_t range;
    uint64_t vmm_seq[2];
};

/* Broadcast b's place in a rank's ring. */
struct ipc_ring_slot {
    _Atomic uint64_t seq;               /* stored last (release): b, once `desc` is b's */
    struct ipc_desc desc;
    /* The hop from the predecessor, for broadcast b: b * 4 + ranks counted
     * in (1: the first, 2: the second).  Written by both, never by publish. */
    _Atomic uint64_t claim_in;
};

/* A rank's page of host shared memory.  Written by the thread that enqueues
 * its broadcasts (ring, pub, the read marks, readc), read by its
 * neighbours'.  The futex words wake a neighbour waiting for room. */
#define SHARED_MAGIC 0x6873706du /* "mpsh" */
struct ipc_shared {
    /* The rank's counters (F_*), first and page-aligned (the mapping is):
     * registered with the driver in every process (ipc.c). */
    _Alignas(4096) _Atomic uint64_t counters[FLAGS_BYTES / 8];
    uint32_t magic;
    _Atomic uint32_t pub;               /* futex: bumped after each descriptor */
    _Atomic uint32_t readc;             /* futex: bumped after the read marks move */
    /* Threads of the neighbours asleep on pub or readc (ipc_wait_word_counted):
     * a rank wakes them only when one sleeps, sparing its broadcast two
     * futex system calls (docs/benchmarks.md, "Host time per broadcast"). */
    _Atomic uint32_t sleepers;
    /* Broadcasts this rank is done with its predecessor's (successor's)
     * descriptors of: their places in those rings may be reused. */
    _Atomic uint64_t read_pred_upto, read_succ_upto;
    struct ipc_ring_slot ring[DRING];   /* broadcast b in ring[b % DRING] */
    /* Suspend (see above).  `word` is a futex this rank's threads (its
     * reaper, an operation waiting for a peer's resume) wait on: whoever
     * changes what they wait for bumps it and wakes them. */
    _Atomic uint32_t word;
    uint32_t pad2;
    _Atomic uint64_t data_state;        /* DATA_STATE(epoch, DATA_*): written by this rank */
    CUipcMemHandle data_handle;         /* its staging; rewritten only while RELEASED */
    _Atomic uint64_t acked[MAX_PEERS];  /* by peer q: the last epoch for which it let go of the staging;
                                         * ACK_GONE: q destroyed the communicator, it never maps it again */
    /* The Unix sockets of shim/ipc/ipc_vmm.c: VMM_ON once this rank listens
     * (set before its export: its neighbours see it at connect), VMM_TO_SUCC
     * once it is connected to its successor, VMM_FROM_PRED once it accepted
     * its predecessor's connection. */
    _Atomic uint32_t vmm_links;
    /* Said in its HELLO by this rank when it connects to its successor:
     * random, written before the export (ipc_vmm.c). */
    _Atomic uint64_t vmm_token;
};
#define VMM_TO_SUCC 1u
#define VMM_FROM_PRED 2u
#define VMM_ON 4u
enum { DATA_ACTIVE = 0, DATA_RELEASING = 1, DATA_RELEASED = 2 };
#define DATA_STATE(epoch, st) ((uint64_t)(epoch) << 2 | (uint64_t)(st))
#define DATA_EPOCH(v) ((v) >> 2)
#define DATA_ST(v) ((int)((v) & 3))
#define ACK_GONE UINT64_MAX

/* One broadcast, as the application's thread issues it. */
struct ipc_bcast_args {
    uint64_t b;                         /* broadcast number, from 1 */
    uint64_t op;                        /* DONE before it */
    uint64_t base;                      /* bytes broadcast before it */
    size_t bytes;
    int root;
    CUdeviceptr send, recv;
    /* The operation before, if it ran on another stream (fence_val 0: on
     * this one, or none): this one waits for it (or see "Receivers run ahead"). */
    int fence_rank, fence_off;
    uint64_t fence_val;
};

/* A neighbour's allocation as mapped here (under qlock). */
struct ipc_map_key {
    int32_t rank, pad;                  /* pad 0: the key is its bytes */
    uint64_t buffer_id;
};
struct ipc_map {
    struct ipc_map_key key;
    UT_hash_handle hh;
    CUipcMemHandle handle;
    CUdeviceptr base;
    uint64_t last_b;                    /* the last broadcast that used it */
};

/* A piece of cuMemCreate memory (a mapping: ipc_vmm.c). */
struct ipc_vmm_piece {
    uint64_t block, base, size;
};

/* An allocation of this rank and its IPC handle (as `struct ipc_map`). */
struct ipc_exported {
    uint64_t buffer_id;                 /* the key (c->exported) */
    UT_hash_handle hh;
    CUdeviceptr start;
    size_t size;                        /* the range of start (cuMemCreate memory: the whole reservation) */
    CUipcMemHandle handle;
    uint64_t last_b;
    int not_ipc;                        /* cuIpcGetMemHandle refused it (cuMemCreate memory): see ipc_vmm.c */
    int not_vmm;                        /* nor can it be shared as file descriptors */
    /* cuMemCreate memory: the mapping buffer_id names (ids are per mapping
     * and never reused, so it stays what it was), or size 0 */
    struct ipc_vmm_piece piece;
};

struct ipc_comm {
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
    /* Every rank's staging as mapped here (0: not now); data[rank]: this
     * rank's (0 while given back).  Under qlock, but data[rank], which the
     * application's thread also reads in its operations (never while
     * suspended, when alone it changes). */
    CUdeviceptr *data;
    size_t data_bytes;                  /* the size of a staging allocation */
    /* Host shared pages of every rank (this rank's at shared[rank]). */
    struct ipc_shared **shared;
    char shm_name[48];                  /* this rank's, until unlinked at commit */
    /* Host counters, the same on every rank (ops are issued in the same order
     * everywhere) but ops.  NCCL allows one thread per communicator at a
     * time: only that thread touches them. */
    uint64_t ops;
    uint64_t bcasts, bbytes;            /* broadcasts issued, and their bytes */
    uint64_t allreduces;                /* all-reduces issued: the AR/AR2 values (every rank takes part) */
    size_t p2p_chunk;                   /* Send/Recv slot size */
    uint64_t *sent, *recvd;             /* Send/Recv chunks per peer, as the counters will say */
    /* Set once a peer is gone (shim/ipc/ipc.c's monitor): every later operation
     * fails at once, waits are released, destroy skips its barrier. */
    atomic_int failed;
    atomic_int failing;                 /* claimed by the one ipc_fail that writes `failure` */
    char failure[256];                  /* written before `failed` is set, never after */
    _Atomic uint64_t failed_us;         /* shim_mono_us() of the failure, once its waits were first released */
    int monitor_fd;                     /* the root's connection, watched; -1 if none */
    /* Set by ipc_free before its barrier: a connection closing from then on
     * is the others' teardown, not a loss (peer_closed records it, quietly). */
    atomic_int closing, peer_closed;
    char group[160];                    /* the communicator's name in the records, for messages */
    /* The stream of the operation before (cuStreamGetId: ids are never
     * reused, unlike handles), if known: an operation on the same stream
     * needs no fence.  The application's thread's. */
    unsigned long long last_sid;
    int last_sid_known;
    /* The operation before was a broadcast that this rank's stream only
     * pushed out of its own buffer into its successor's, there at
     * [push_to, push_to + push_len): "Senders overlap".  The application's thread's. */
    int last_push_only;
    CUdeviceptr push_to;
    size_t push_len;
    /* The reaper thread, started at connect: it gives back mappings nobody
     * used for MAP_IDLE_MS, and peers' staging they release; it finishes
     * this rank's releases.  `stop` and the fence are under qlock;
     * `reaper_started` is the application's thread's.  It waits on this
     * rank's shared word (ipc_wake). */
    pthread_t reaper;
    int reaper_started;
    pthread_mutex_t qlock;
    int stop;
    /* The last operation is over once rank fence_rank's counter at
     * fence_off reaches fence_val (0: nothing to wait for); fence_rank is
     * this rank, or a neighbour on its GPU ("One GPU"). */
    int fence_rank, fence_off;
    uint64_t fence_val;
    /* Under qlock: the application's thread enqueues broadcasts, and the
     * reaper gives mappings back, holding it (and ipc_free once the reaper
     * has stopped). */
    struct ipc_map *map;                /* by (rank, buffer id): uthash */
    int nmap;
    uint64_t map_used_us;               /* shim_mono_us() when a mapping was last used */
    /* How the broadcasts went (ipc_get_stats), counted as they are enqueued. */
    atomic_ullong stat_first, stat_in[IPC_HOPS], stat_out[IPC_HOPS];
    /* Hops (in and out) whose copies ran on the SMs (the copy kernel) or on
     * copy engines. */
    atomic_ullong stat_sm, stat_ce;
    /* Every rank's device, from its export (NULL until connected). */
    int *peer_dev;
    /* The copy kernel (shim/ipc/ipc_kernel.c), loaded at connect when a peer
     * shares this rank's device and NCCLSHIM_IPC_COPY=sm; else NULL, and
     * copy_note says why if it was asked for and did not load. */
    CUmodule kmod;
    CUfunction kfn;
    int sms;
    char copy_note[200];
    struct ipc_exported *exported;      /* by buffer id: uthash; the application's thread's */
    int nexported;
    /* shim/ipc/ipc_vmm.c's state (NULL: no VMM sharing), under qlock;
     * vmm_note says why VMM memory is staged, if it is (written under
     * qlock, read by the records once the communicator is done). */
    struct ipc_vmm *vmm;
    char vmm_note[200];
    atomic_ullong stat_vmm_sent, stat_vmm_mapped;   /* pieces sent to neighbours, and mapped from them */
    /* The driver refused cuStreamBatchMemOp (or lacks it): memops go one by
     * one.  Atomic: every thread of the communicator's operations reads it. */
    atomic_int memops_single;
};

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
    return c->data[r] + (CUdeviceptr)((k % (uint64_t)c->nslots) * c->chunk);
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
    return c->data[from] + p2p_offset(c) + ((size_t)to * P2P_SLOTS + (size_t)(k % P2P_SLOTS)) * c->p2p_chunk;
}

/* A value every wait of a failed communicator is satisfied by. */
#define RELEASE (1ull << 62)

/* Host-side counter access (plain loads and stores; bounded waits: HOST_WAIT_US at most). */
uint64_t ipc_read_flag(const struct ipc_comm *c, int r, int off);
void ipc_write_flag(const struct ipc_comm *c, int off, uint64_t v);
int ipc_wait_one(const struct ipc_comm *c, int r, int off, uint64_t want, uint64_t deadline, char *why,
                 size_t whylen);
int ipc_wait_all(const struct ipc_comm *c, int off, uint64_t want, char *why, size_t whylen);

/* Stores RELEASE into every counter this rank's streams may wait on. */
void ipc_release_waits(struct ipc_comm *c);
/* After a failure, the reaper releases the waits again for this long. */
#define RELEASE_REPEAT_US (5ull * 1000 * 1000)

/* Marks `c` failed (once) and releases every wait of its streams; `lost`:
 * a peer is gone (warned), else an abort. */
void ipc_fail(struct ipc_comm *c, const char *why, int lost);

/* ipc_fail, and the peers are told: this rank's connection to the root is
 * shut, the root closes every other, and their monitors fail them too (a
 * rank that cannot go on must not leave its peers waiting on it). */
void ipc_fail_everywhere(struct ipc_comm *c, const char *why);

/* At commit every neighbour has mapped this rank's shared page: its name goes. */
void ipc_unlink_shared(struct ipc_comm *c);

/* Stops watching `c` (shim/ipc/ipc_monitor.c) and closes its connection. */
void ipc_unwatch(struct ipc_comm *c);

/* A copy on `stream` (copy engines where the driver lets us ask). */
CUresult ipc_copy(const struct ipc_comm *c, CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream stream);

/*
 * Stream waits and writes queued and enqueued together: one
 * cuStreamBatchMemOp where the driver has it (in the array's order, as
 * the single calls would be), each alone where it has not or refuses it
 * (CUDA_ERROR_NOT_SUPPORTED: c->memops_single, for good).  Every driver
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

/* shim/ipc/ipc_kernel.c: the copy kernel for hops between processes on one
 * GPU.  ipc_kernel_load: 0, or -1 with the reason (copies then stay on copy
 * engines); ipc_kernel_usable: whether a copy between this rank and rank r
 * at dst and src goes to the kernel (same device, kernel loaded, both
 * 16-byte aligned); ipc_kernel_copy enqueues it on s. */
int ipc_kernel_load(struct ipc_comm *c, char *why, size_t whylen);
void ipc_kernel_unload(struct ipc_comm *c);
int ipc_kernel_usable(const struct ipc_comm *c, int r, CUdeviceptr dst, CUdeviceptr src);
CUresult ipc_kernel_copy(const struct ipc_comm *c, CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream s);

/* shim/ipc/ipc_bcast.c: one broadcast, enqueued whole on the caller's stream
 * `s` (qlock held): 0 and the fence in *rank, *off and *val (*off < 0: it
 * moved nothing), or -1 with the reason. */
int ipc_chain_bcast(struct ipc_comm *c, const struct ipc_bcast_args *j, CUstream s, int *rank, int *off, uint64_t *val,
                    char *why, size_t whylen);
/* Whether rank r shares this rank's GPU ("One GPU"; r's page is mapped). */
int ipc_same_gpu(const struct ipc_comm *c, int r);
/* The host waits until the last operation is over (its fence), bounded by
 * `deadline`: 0, or -1 with the reason. */
int ipc_wait_fence(struct ipc_comm *c, uint64_t deadline, char *why, size_t whylen);
/* shim/ipc/ipc_maps.c, the map cache (qlock held).  ipc_trim_maps gives back
 * the mappings beyond the `keep` most recently used, if the last operation is
 * over; else none.  ipc_map_peer: rank r's allocation of `d` mapped here, at
 * *at (the data's address): 0, or -1 with the reason. */
void ipc_trim_maps(struct ipc_comm *c, int keep);
/* Closes rank r's mapping m and forgets it (qlock held, the last operation over). */
void ipc_close_map(struct ipc_comm *c, struct ipc_map *m);
/* Forgets this rank's exported allocations (destroy). */
void ipc_forget_exports(struct ipc_comm *c);
int ipc_map_peer(struct ipc_comm *c, int r, uint64_t b, const struct ipc_desc *d, size_t bytes, CUdeviceptr *at,
                 char *why, size_t whylen);

/* shim/ipc/ipc_reaper.c: starts the reaper if it is not (0, or -1 with the
 * reason); ipc_reaper_stop: after the last operation, stops it and gives
 * back what was mapped. */
int ipc_reaper_start(struct ipc_comm *c, char *why, size_t whylen);
void ipc_reaper_stop(struct ipc_comm *c);

/* shim/ipc_suspend.c: peers' staging.  ipc_data_get (qlock held): rank r's
 * staging mapped here in c->data[r]: 0; 1 if r has given it back (or is
 * giving it back) and this rank holds no mapping (wait: ipc_data_wait,
 * without qlock); -1 with the reason.  ipc_data_wait: 0 once r's staging
 * is there again, -1 past NCCLSHIM_IPC_RESUME_WAIT_MS with a reason that
 * says r is suspended.  ipc_data_reap (reaper, qlock held): lets go of the
 * staging of peers that release it; ipc_release_step (qlock held) frees
 * this rank's once nobody holds it; both return 1 while something is left
 * to do later.  ipc_data_close (destroy): closes every peer's staging. */
int ipc_data_get(struct ipc_comm *c, int r, char *why, size_t whylen);
int ipc_data_wait(struct ipc_comm *c, int r, char *why, size_t whylen);
int ipc_data_reap(struct ipc_comm *c);
int ipc_release_step(struct ipc_comm *c);
void ipc_data_close(struct ipc_comm *c);

/*
 * shim/ipc/ipc_vmm.c: memory of cuMemCreate (PyTorch's expandable segments),
 * which cuIpcGetMemHandle refuses, shared as file descriptors over Unix
 * sockets between ring neighbours.  ipc_vmm_listen (prepare): the socket the
 * predecessor will connect to (failing only turns VMM sharing off, noted);
 * ipc_vmm_connect (connect, the pages opened): to the successor.  Under qlock:
 * ipc_vmm_describe fills d (vmm, range, offset, sizes, sequence numbers; `first`,
 * the piece that holds buf if known (size 0: not), saves the driver's word for it) and
 * sends the neighbours the pieces they lack: 1, or 0 if the memory cannot be
 * shared so (staged then); ipc_vmm_map maps rank r's described memory here:
 * 0, or -1 with the reason; ipc_vmm_reap (the reaper) accepts, tells the
 * neighbours of pieces this process no longer maps, reads what they said and
 * unmaps what they no longer map: the ms until it wants to run again, or -1.
 * ipc_vmm_close (destroy) gives everything back.
 */
void ipc_vmm_listen(struct ipc_comm *c);
void ipc_vmm_connect(struct ipc_comm *c, const char *succ_shm);
int ipc_vmm_describe(struct ipc_comm *c, CUdeviceptr buf, size_t bytes, CUdeviceptr start, size_t size,
                     struct ipc_vmm_piece *first, struct ipc_desc *d);
int ipc_vmm_map(struct ipc_comm *c, int r, const struct ipc_desc *d, size_t bytes, CUdeviceptr *at, char *why,
                size_t whylen);
long ipc_vmm_reap(struct ipc_comm *c);
void ipc_vmm_close(struct ipc_comm *c);

/* shim/ipc/ipc_core.c: futex waits and wakes on a shared page's word (shared, not private: the
 * word is in shared memory); ipc_wait_word: up to `ms` (< 0: no bound). */
void ipc_wait_word(_Atomic uint32_t *word, uint32_t seen, long ms);
/* Wakes every waiter on `word` (the caller has changed it). */
void ipc_wake_word(_Atomic uint32_t *word);
/* The same where the waiters count themselves in `sleepers`, a word of the
 * same page: ipc_wait_word_counted sleeps on `word` (if `ready` still says
 * no once counted: `ready(arg)`), ipc_wake_counted wakes only if somebody
 * sleeps.  Sequentially consistent on both sides (the waker changes `word`,
 * then reads `sleepers`; the waiter counts itself, then reads `word` in the
 * futex call): a waiter the waker missed sees the new value and does not
 * sleep. */
void ipc_wait_word_counted(_Atomic uint32_t *word, _Atomic uint32_t *sleepers, uint32_t seen, long ms,
                           int (*ready)(const void *), const void *arg);
void ipc_wake_counted(_Atomic uint32_t *word, _Atomic uint32_t *sleepers);
/* Bumps rank r's word and wakes its waiters. */
void ipc_wake(const struct ipc_comm *c, int r);
/* Whether the last operation is over (qlock held). */
int ipc_fence_passed(const struct ipc_comm *c);

/* NCCLSHIM_IPC_TRACE=1: protocol steps on stderr (debugging); the clock of
 * their timings (0 when not tracing). */
void ipc_trace(const struct ipc_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t ipc_trace_clock(void);

#endif
