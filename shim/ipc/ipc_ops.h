/*
 * What shim/ipc/ipc_ops.c offers (to shim/comm/, through ipc.h): the
 * operations of an ipc communicator, as the application calls them.
 */
#ifndef NCCLSHIM_IPC_OPS_H
#define NCCLSHIM_IPC_OPS_H

#include "ipc_types.h"

#include <stddef.h>

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
