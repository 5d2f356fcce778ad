/*
 * The CUDA IPC transport (DESIGN D7): a communicator of ranks on one host that
 * exists only in the shim.  Each rank owns one device allocation, its staging
 * (exported with cuIpcGetMemHandle, given back by ncclCommSuspend), and a page
 * of host shared memory whose first 4 KiB are its counters, pinned and mapped
 * into every peer's context.  Operations only enqueue work on the caller's
 * stream (copies on copy engines, waits and writes of counters with
 * cuStreamWaitValue64 / cuStreamWriteValue64), except small all-reduces,
 * which synchronise the host.  The protocol: ipc_proto.h.
 *
 * This header is what shim/comm/ and shim/interpose/ call: set-up and
 * teardown (ipc.c), the operations (ipc_ops.c), and through the headers it
 * includes, the lost-peer monitor (ipc_monitor.h), suspend and resume
 * (ipc_suspend.h) and the records' counts (ipc_types.h).
 */
#ifndef NCCLSHIM_IPC_H
#define NCCLSHIM_IPC_H

#include "ipc_monitor.h"
#include "ipc_suspend.h"
#include "ipc_types.h"

#include <stddef.h>
#include <stdint.h>

/* Round 2 of the rendezvous: allocate and export.  The export goes into
 * `blob` (*bloblen bytes).  0, or -1 with the reason (nothing left allocated). */
int ipc_prepare(struct ipc_comm **out, int rank, int nranks, uint8_t *blob, int *bloblen, char *why, size_t whylen);

/* The communicator's name in the records (messages name it). */
void ipc_set_group(struct ipc_comm *c, const char *group);

/* Round 3: open every other rank's export.  0, or -1 with the reason. */
int ipc_connect(struct ipc_comm *c, const struct rv_peers *peers, char *why, size_t whylen);

/* ncclRemoteError once a peer is gone (or after ncclCommAbort), else ncclSuccess. */
ncclResult_t ipc_async_error(struct ipc_comm *c);

/* ncclCommAbort: release every wait, so that destroy does not wait for peers. */
void ipc_abort(struct ipc_comm *c);

/* Waits (bounded) until this rank's operations are done and every peer has
 * stopped reading this rank's memory, then frees everything. */
void ipc_free(struct ipc_comm *c);

int ipc_device(const struct ipc_comm *c);

/* The largest all-reduce the communicator takes (its staging, chunk x slots). */
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
