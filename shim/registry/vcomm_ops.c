/*
 * The data operations of a shim-only communicator, through one dispatch: a
 * dropped one counts them and moves nothing; an ipc one routes each to the
 * CUDA IPC transport (shim/ipc/ipc.h), or refuses what the transport has not.
 * The operations this file does not name take the generated default
 * (shim/registry/vcomm_default.c: vcomm_data).
 */
#include "vcomm.h"

#include "group.h"
#include "ipc.h"
#include "record.h"

#include <stdatomic.h>

/* One data operation, as the application called it. */
struct vcomm_op {
    enum op_kind op;
    const char *fn;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t redop;                  /* AllReduce */
    int root;                           /* Broadcast, Bcast: the root; Send, Recv: the peer */
    cudaStream_t stream;
};

ncclResult_t vcomm_data(struct shim_comm *h, enum op_kind op, size_t count, ncclDataType_t dtype, const char *fn)
{
    if (atomic_load_explicit(&h->suspended, memory_order_relaxed))
        return vcomm_refuse_suspended(h, fn);
    if (h->ipc)
        return vcomm_unsupported(h, fn);
    shim_count(h, op, count, dtype);
    return ncclSuccess;
}

/* An ipc operation's failure: recorded with its reason (every time: each is a
 * lost or refused transfer), the result returned. */
static ncclResult_t ipc_result(struct shim_comm *h, const char *fn, ncclResult_t r, const char *why)
{
    if (r != ncclSuccess)
        shim_warn("ipc", "%s on ipc communicator %s (rank %d of %d) returns %d: %s", fn, h->group, h->rank, h->nranks,
                  (int)r, why);
    return r;
}

static ncclResult_t run(ncclComm_t comm, const struct vcomm_op *o)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!h->ipc)
        return vcomm_data(h, o->op, o->count, o->dtype, o->fn);
    if (atomic_load_explicit(&h->suspended, memory_order_relaxed))
        return vcomm_refuse_suspended(h, o->fn);
    /* The transport has no NCCL to reject a bad datatype: checked here. */
    size_t es = shim_dtype_size_checked(o->dtype);
    if (!es)
        return ipc_result(h, o->fn, ncclInvalidArgument, "not an NCCL datatype");
    shim_count(h, o->op, o->count, o->dtype);
    size_t bytes = o->count * es;
    char why[512] = "";
    ncclResult_t r;
    switch (o->op) {
    case OP_BROADCAST:
    case OP_BCAST:
        r = ipc_broadcast(h->ipc, o->send, o->recv, bytes, o->root, o->stream, why, sizeof(why));
        break;
    case OP_ALLGATHER:
        r = ipc_allgather(h->ipc, o->send, o->recv, bytes, o->stream, why, sizeof(why));
        break;
    case OP_ALLREDUCE:
        r = ipc_allreduce(h->ipc, o->send, o->recv, o->count, o->dtype, o->redop, o->stream, why, sizeof(why));
        break;
    case OP_SEND:
    case OP_RECV: {
        /* Queued until the end of their group (shim/registry/group.c). */
        struct ipc_p2p p = { o->op == OP_SEND, o->op == OP_SEND ? (void *)o->send : o->recv, bytes, o->root,
                             (CUstream)o->stream };
        return group_ipc_p2p(h, &p, o->fn);
    }
    default:
        return vcomm_unsupported(h, o->fn);
    }
    return ipc_result(h, o->fn, r, why);
}

ncclResult_t vcomm_ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 int root, ncclComm_t comm, cudaStream_t stream)
{
    return run(comm, &(struct vcomm_op){ OP_BROADCAST, "ncclBroadcast", sendbuff, recvbuff, count, datatype, ncclSum,
                                         root, stream });
}

ncclResult_t vcomm_ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                             cudaStream_t stream)
{
    return run(comm, &(struct vcomm_op){ OP_BCAST, "ncclBcast", buff, buff, count, datatype, ncclSum, root, stream });
}

ncclResult_t vcomm_ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream)
{
    return run(comm, &(struct vcomm_op){ OP_ALLGATHER, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype,
                                         ncclSum, 0, stream });
}

ncclResult_t vcomm_ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return run(comm, &(struct vcomm_op){ OP_ALLREDUCE, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, 0,
                                         stream });
}

ncclResult_t vcomm_ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream)
{
    return run(comm, &(struct vcomm_op){ OP_SEND, "ncclSend", sendbuff, NULL, count, datatype, ncclSum, peer, stream });
}

ncclResult_t vcomm_ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream)
{
    return run(comm, &(struct vcomm_op){ OP_RECV, "ncclRecv", NULL, recvbuff, count, datatype, ncclSum, peer, stream });
}

/* One-sided puts move data into a window the peer registered with NCCL;
 * neither action has one (window registration is refused too). */
ncclResult_t vcomm_ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
                                 ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                                 ncclComm_t comm, cudaStream_t stream)
{
    (void)localbuff, (void)count, (void)datatype, (void)peer, (void)peerWin, (void)peerWinOffset;
    (void)sigIdx, (void)ctx, (void)flags, (void)stream;
    return vcomm_unsupported((struct shim_comm *)comm, "ncclPutSignal");
}
