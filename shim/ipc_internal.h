/*
 * The CUDA IPC transport's internals, shared by shim/ipc*.c (the interface is
 * shim/ipc.h).
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
 * The chunks run on the communicator's own streams (NCCLSHIM_IPC_STREAMS,
 * default 1, at the device's highest priority), forked from and joined back
 * to the caller's stream with events; with two, chunks alternate between
 * them, and per-slot counters keep that correct when a later chunk finishes
 * first.  Each chunk has a fixed cost besides its copy (~10 us on an idle
 * H200, far more under load: docs/benchmarks.md).
 *
 * Files: ipc.c (set-up, host waits, failure, destroy), ipc_ops.c (the
 * operations), ipc_monitor.c (watching for a lost peer).
 */
#ifndef NCCLSHIM_IPC_INTERNAL_H
#define NCCLSHIM_IPC_INTERNAL_H

#include "ipc.h"

#include <stdatomic.h>
#include <stdint.h>

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
    /* Set by ipc_free before its barrier: a connection closing from then on
     * is the others' teardown, not a loss (peer_closed records it, quietly). */
    atomic_int closing, peer_closed;
    char group[160];                    /* the communicator's name in the records, for messages */
};

static inline CUdeviceptr flag(const struct ipc_comm *c, int r, int off)
{
    return c->peer[r] + (CUdeviceptr)off;
}

static inline CUdeviceptr slot(const struct ipc_comm *c, int r, uint64_t g)
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

static inline size_t p2p_offset(const struct ipc_comm *c)
{
    return FLAGS_BYTES + c->chunk * (size_t)c->nslots;
}

/* Where `from` sends its k-th chunk to `to`, in `from`'s allocation as mapped here. */
static inline CUdeviceptr p2p_slot(const struct ipc_comm *c, int from, int to, uint64_t k)
{
    return c->peer[from] + p2p_offset(c) + ((size_t)to * P2P_SLOTS + (size_t)(k % P2P_SLOTS)) * c->p2p_chunk;
}

/* A value every wait of a failed communicator is satisfied by. */
#define RELEASE (1ull << 62)

/* Host-side counter access (bounded waits: HOST_WAIT_US at most). */
int ipc_read_flag(const struct ipc_comm *c, int r, int off, uint64_t *v);
int ipc_write_flag(const struct ipc_comm *c, int off, uint64_t v);
int ipc_wait_one(const struct ipc_comm *c, int r, int off, uint64_t want, uint64_t deadline, char *why,
                 size_t whylen);
int ipc_wait_all(const struct ipc_comm *c, int off, uint64_t want, char *why, size_t whylen);

/* Marks `c` failed (once) and releases every wait of its streams; `lost`:
 * a peer is gone (warned), else an abort. */
void ipc_fail(struct ipc_comm *c, const char *why, int lost);

/* Stops watching `c` (shim/ipc_monitor.c) and closes its connection. */
void ipc_unwatch(struct ipc_comm *c);

#endif
