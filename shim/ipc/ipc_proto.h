/*
 * The CUDA IPC transport's protocol: what the ranks of a communicator share
 * in host shared memory and say to each other through it, with no code (the
 * layout is the protocol: EXPORT_VERSION names it, and a change to anything
 * here is a change of version).  What one process keeps of it is
 * ipc_comm.h; the interface shim/comm/ calls is ipc.h.
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
 * Mappings kept.  A peer's buffer is opened (cuIpcOpenMemHandle) the first
 * time a broadcast needs it and kept: opening it again costs ~60 us, and a
 * refit loop broadcasts into the same buffers every time, a training step
 * (seconds) apart.  But legacy IPC memory freed by its owner stays allocated
 * while another process maps it, so the owner's reaper asks the driver,
 * every LIVE_CHECK_MS, whether each allocation it exported still lives
 * (its buffer id at its address), and writes the ids of the freed ones into
 * its page's gone ring and wakes its neighbours' reapers, which close their
 * mappings of them (once their last operation is over).  The reaper sleeps
 * without a bound while its rank maps and exports nothing, so the broadcast
 * that gives it its first mapping or export wakes it: a receiver only pushed
 * into maps nothing, and its freed buffers stayed allocated (H100).  A mapping also goes
 * after MAP_IDLE_MS unused, and beyond MAP_CACHE.  Before, every mapping went
 * after 1 s unused, and a refit after a pause paid its first refit's opens
 * again (per-param: 16.6-24 ms against 14.0-14.6, docs/benchmarks.md).
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
 */
#ifndef NCCLSHIM_IPC_PROTO_H
#define NCCLSHIM_IPC_PROTO_H

#include "cuda.h"
#include "ipc_futex.h"
#include "ipc_types.h"

#include <stdatomic.h>
#include <stdint.h>

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
#define MAX_PEERS IPC_MAX_RANKS
_Static_assert(F_TAKEN_MINE + 8 <= F_SENT && F_SENT + 8 * MAX_PEERS <= F_RECVD && F_RECVD + 8 * MAX_PEERS <= FLAGS_BYTES,
               "the counters fit their page");
/* Send/Recv: each rank has, for each peer, P2P_SLOTS slots of p2p_chunk
 * bytes that it sends through; the whole area is P2P_AREA bytes or less. */
#define P2P_SLOTS 2
/* With the default staging (2 x 23 MiB) the allocation is 60 MiB and 4 KiB:
 * 62 MiB in the driver's 2 MiB pages, under 64 MiB with what the driver adds
 * for the stream (torch.cuda.mem_get_info measured 64-66 MiB with 16 MiB here). */
#define P2P_AREA (14u << 20)
/* Descriptors a rank may publish ahead of its neighbours. */
#define DRING 64

#define EXPORT_MAGIC 0x6370696du /* "mipc" */
#define EXPORT_VERSION 8 /* 8: the futex words' wake marks (struct ipc_futex), the gone ring */
/* Freed allocations a rank's page remembers for its neighbours' reapers
 * ("Mappings kept"); one that falls this far behind closes all of the rank's. */
#define GONE_RING 256

/* What a rank exports (the rendezvous blob).  Same host, same build: plain bytes. */
struct ipc_export {
    uint32_t magic, version;
    int32_t rank, nranks, device, nslots;
    uint32_t pid, pad;
    uint64_t chunk;
    char shm[48];                       /* its struct ipc_shared (shm_open name), counters first */
};
_Static_assert(sizeof(struct ipc_export) <= IPC_EXPORT_MAX, "the export fits what ipc_prepare promises");

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
    uint32_t magic, pad1;
    struct ipc_futex pub;               /* bumped after each descriptor; progress: the broadcast published */
    struct ipc_futex readc;             /* bumped after the read marks move; progress: the new mark */
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
    /* "Mappings kept": ids of this rank's allocations freed since its
     * neighbours may have mapped them, gone_ids[i % GONE_RING] for i below
     * gone_n (stored last, release); written by its reaper. */
    _Atomic uint64_t gone_n;
    _Atomic uint64_t gone_ids[GONE_RING];
};
#define VMM_TO_SUCC 1u
#define VMM_FROM_PRED 2u
#define VMM_ON 4u
enum { DATA_ACTIVE = 0, DATA_RELEASING = 1, DATA_RELEASED = 2 };
#define DATA_STATE(epoch, st) ((uint64_t)(epoch) << 2 | (uint64_t)(st))
#define DATA_EPOCH(v) ((v) >> 2)
#define DATA_ST(v) ((int)((v) & 3))
#define ACK_GONE UINT64_MAX

/* A value every wait of a failed communicator is satisfied by (ipc_fail). */
#define RELEASE (1ull << 62)

#endif
