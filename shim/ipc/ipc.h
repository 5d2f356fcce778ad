/*
 * The CUDA IPC transport (DESIGN D7): a communicator of ranks on one host that
 * exists only in the shim.  Each rank owns two device allocations, exported
 * with cuIpcGetMemHandle: a page of sequence counters, and a ring of staging
 * slots that ncclCommSuspend gives back.  Operations only enqueue work on the caller's stream (copies
 * on copy engines, waits and writes of counters with cuStreamWaitValue64 /
 * cuStreamWriteValue64), except small all-reduces, which synchronise the host.
 */
#ifndef NCCLSHIM_IPC_H
#define NCCLSHIM_IPC_H

#include "cuda.h"
#include "nccl_abi.h"
#include "rv_wire.h"

#include <stddef.h>
#include <stdint.h>

struct ipc_comm;

/* Round 2 of the rendezvous: allocate and export.  The export goes into
 * `blob` (*bloblen bytes).  0, or -1 with the reason (nothing left allocated). */
int ipc_prepare(struct ipc_comm **out, int rank, int nranks, uint8_t *blob, int *bloblen, char *why, size_t whylen);

/* The communicator's name in the records (messages name it). */
void ipc_set_group(struct ipc_comm *c, const char *group);

/* Round 3: open every other rank's export.  0, or -1 with the reason. */
int ipc_connect(struct ipc_comm *c, const struct rv_peers *peers, char *why, size_t whylen);

/* From creation on: `fd` (the root's connection, owned from now on) closing
 * means a rank is gone.  -1 if it cannot be watched (then nothing is). */
int ipc_watch(struct ipc_comm *c, int fd);

/* After fork, in the child: the lost-peer monitor starts from nothing. */
void ipc_monitor_after_fork_child(void);
void ipc_monitor_lock_for_fork(void);
void ipc_monitor_unlock_after_fork(void);

/* ncclRemoteError once a peer is gone (or after ncclCommAbort), else ncclSuccess. */
ncclResult_t ipc_async_error(struct ipc_comm *c);

/* ncclCommAbort: release every wait, so that destroy does not wait for peers. */
void ipc_abort(struct ipc_comm *c);

/* Waits (bounded) until this rank's operations are done and every peer has
 * stopped reading this rank's memory, then frees everything. */
void ipc_free(struct ipc_comm *c);

int ipc_device(const struct ipc_comm *c);

/* shim/ipc/ipc_suspend.c.  ncclCommSuspend: this rank's operations done, the
 * mappings of its peers' buffers given back and, with `release`
 * (NCCL_SUSPEND_MEM), its staging too, at once or, where a peer still holds
 * it, as soon as it lets go (0, or -1 with the reason).  ncclCommResume:
 * the staging back (0, or -1 with the reason: the rank stays suspended).
 * ncclCommMemStats: out[ncclCommMemStat_t] for this rank's memory. */
int ipc_suspend(struct ipc_comm *c, int release, char *why, size_t whylen);
int ipc_resume(struct ipc_comm *c, char *why, size_t whylen);
void ipc_mem_stats(const struct ipc_comm *c, int suspended, uint64_t out[4]);

/* How this rank's broadcasts went, for its comm_end record: on how many
 * hops it came first (and took the passive half); how the data came in and
 * went out (indexed by IPC_HOP_*; ipc_hop_names). */
enum { IPC_HOP_NONE, IPC_HOP_PUSH, IPC_HOP_PULL, IPC_HOP_STAGED, IPC_HOPS };
extern const char *const ipc_hop_names[IPC_HOPS];
struct ipc_stats {
    unsigned long long first;
    unsigned long long in[IPC_HOPS], out[IPC_HOPS];
    unsigned long long sm, ce;          /* hops copied by the SMs (same GPU), by copy engines */
    const char *copy_note;              /* why no hop may use the SMs ("" if none shares the GPU); owned by c */
    /* Pieces of cuMemCreate memory (PyTorch's expandable segments) sent to
     * the neighbours, and theirs mapped here (shim/ipc/ipc_vmm.c); and why
     * such memory was staged, if it was ("" if not); owned by c. */
    unsigned long long vmm_sent, vmm_mapped;
    const char *vmm_note;
};
void ipc_get_stats(struct ipc_comm *c, struct ipc_stats *st);
size_t ipc_host_reduce_max(const struct ipc_comm *c);

/* The operations.  ncclSuccess, or an NCCL error with the reason in `why`. */
ncclResult_t ipc_broadcast(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t bytes, int root,
                           cudaStream_t stream, char *why, size_t whylen);
/* A Send or Recv, as queued until the end of its group. */
struct ipc_p2p {
    int send;                           /* 1: ncclSend, 0: ncclRecv */
    void *buf;
    size_t bytes;
    int peer;
    CUstream stream;
};

/* The Send/Recv of one group (or a lone one), chunk by chunk in turn. */
ncclResult_t ipc_p2p(struct ipc_comm *c, const struct ipc_p2p *ops, int nops, char *why, size_t whylen);

/* `bytes` per rank: recvbuff holds nranks blocks. */
ncclResult_t ipc_allgather(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t bytes,
                           cudaStream_t stream, char *why, size_t whylen);
ncclResult_t ipc_allreduce(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t dtype, ncclRedOp_t op, cudaStream_t stream, char *why, size_t whylen);

#endif
