/*
 * What a shim-only communicator (action drop) answers.  It has a rank, a size
 * and a device, no errors, and data operations that complete at once without
 * touching memory; each is counted, so that records show the data that did
 * not arrive (docs/policy.md, "drop").  Functions not here are refused by
 * shim/vcomm_default.c.
 */
#include "vcomm.h"

#include "forward.h"
#include "group.h"
#include "ipc.h"
#include "record.h"

#include <stdatomic.h>

/* One warning per function and process: an application that retries an
 * unsupported call in a loop must not flood its log.  Bit i = fn_index i. */
static atomic_uint_fast64_t g_warned;

ncclResult_t vcomm_unsupported(struct shim_comm *h, const char *fn)
{
    int i = shim_fn_lookup(fn);
    uint_fast64_t bit = (i >= 0 && i < 64) ? (uint_fast64_t)1 << i : 0;
    if (!bit || !(atomic_fetch_or(&g_warned, bit) & bit)) {
        if (h->ipc)
            shim_warn("ipc-comm-call",
                      "%s on communicator %s (rank %d of %d), which this shim runs over CUDA IPC "
                      "(NCCLSHIM_WEIGHT_UPDATE or NCCLSHIM_RULES): the ipc transport does Broadcast, Bcast, AllGather, "
                      "Send, Recv and small AllReduce only, so the call returns ncclInvalidUsage; pass this communicator through "
                      "(NCCLSHIM_WEIGHT_UPDATE=passthrough) if the application needs %s",
                      fn, h->group, h->rank, h->nranks, fn);
        else
            shim_warn("dropped-comm-call",
                      "%s on communicator %s (rank %d of %d), which this shim dropped (NCCLSHIM_WEIGHT_UPDATE or "
                      "NCCLSHIM_RULES): it has no NCCL behind it, so the call returns ncclInvalidUsage; pass this "
                      "communicator through if the application needs %s",
                      fn, h->group, h->rank, h->nranks, fn);
    }
    return ncclInvalidUsage;
}

ncclResult_t vcomm_data(struct shim_comm *h, enum op_kind op, size_t count, ncclDataType_t dtype, const char *fn)
{
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

/* The start of every data operation on an ipc communicator: its size in
 * bytes, and its traffic counted; an error (recorded) for a datatype that is
 * not NCCL's. */
static ncclResult_t ipc_begin(struct shim_comm *h, enum op_kind op, size_t count, ncclDataType_t dtype,
                              const char *fn, size_t *bytes)
{
    size_t es = shim_dtype_size_checked(dtype);
    if (!es)
        return ipc_result(h, fn, ncclInvalidArgument, "not an NCCL datatype");
    shim_count(h, op, count, dtype);
    *bytes = count * es;
    return ncclSuccess;
}

ncclResult_t vcomm_ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 int root, ncclComm_t comm, cudaStream_t stream)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!h->ipc)
        return vcomm_data(h, OP_BROADCAST, count, datatype, "ncclBroadcast");
    char why[512] = "";
    size_t bytes;
    ncclResult_t r = ipc_begin(h, OP_BROADCAST, count, datatype, "ncclBroadcast", &bytes);
    if (r == ncclSuccess)
        r = ipc_result(h, "ncclBroadcast",
                       ipc_broadcast(h->ipc, sendbuff, recvbuff, bytes, root, stream, why, sizeof(why)), why);
    return r;
}

ncclResult_t vcomm_ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                             cudaStream_t stream)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!h->ipc)
        return vcomm_data(h, OP_BCAST, count, datatype, "ncclBcast");
    char why[512] = "";
    size_t bytes;
    ncclResult_t r = ipc_begin(h, OP_BCAST, count, datatype, "ncclBcast", &bytes);
    if (r == ncclSuccess)
        r = ipc_result(h, "ncclBcast", ipc_broadcast(h->ipc, buff, buff, bytes, root, stream, why, sizeof(why)), why);
    return r;
}

ncclResult_t vcomm_ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!h->ipc)
        return vcomm_data(h, OP_ALLGATHER, sendcount, datatype, "ncclAllGather");
    char why[512] = "";
    size_t bytes;
    ncclResult_t r = ipc_begin(h, OP_ALLGATHER, sendcount, datatype, "ncclAllGather", &bytes);
    if (r == ncclSuccess)
        r = ipc_result(h, "ncclAllGather", ipc_allgather(h->ipc, sendbuff, recvbuff, bytes, stream, why, sizeof(why)),
                       why);
    return r;
}

/* Send and Recv: queued until the end of their group (shim/group.c). */
static ncclResult_t ipc_p2p_one(struct shim_comm *h, int send, void *buf, size_t count, ncclDataType_t datatype,
                                int peer, cudaStream_t stream, const char *fn)
{
    size_t bytes;
    ncclResult_t r = ipc_begin(h, send ? OP_SEND : OP_RECV, count, datatype, fn, &bytes);
    if (r != ncclSuccess)
        return r;
    struct ipc_p2p op = { send, buf, bytes, peer, (CUstream)stream };
    return group_ipc_p2p(h, &op, fn);
}

ncclResult_t vcomm_ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!h->ipc)
        return vcomm_data(h, OP_SEND, count, datatype, "ncclSend");
    return ipc_p2p_one(h, 1, (void *)sendbuff, count, datatype, peer, stream, "ncclSend");
}

ncclResult_t vcomm_ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                            cudaStream_t stream)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!h->ipc)
        return vcomm_data(h, OP_RECV, count, datatype, "ncclRecv");
    return ipc_p2p_one(h, 0, recvbuff, count, datatype, peer, stream, "ncclRecv");
}

ncclResult_t vcomm_ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!h->ipc)
        return vcomm_data(h, OP_ALLREDUCE, count, datatype, "ncclAllReduce");
    char why[512] = "";
    size_t bytes;
    ncclResult_t r = ipc_begin(h, OP_ALLREDUCE, count, datatype, "ncclAllReduce", &bytes);
    if (r == ncclSuccess)
        r = ipc_result(h, "ncclAllReduce",
                       ipc_allreduce(h->ipc, sendbuff, recvbuff, count, datatype, op, stream, why, sizeof(why)), why);
    return r;
}

ncclResult_t vcomm_ncclCommCount(ncclComm_t comm, int *count)
{
    if (!count)
        return ncclInvalidArgument;
    *count = ((struct shim_comm *)comm)->nranks;
    return ncclSuccess;
}

ncclResult_t vcomm_ncclCommUserRank(ncclComm_t comm, int *rank)
{
    if (!rank)
        return ncclInvalidArgument;
    *rank = ((struct shim_comm *)comm)->rank;
    return ncclSuccess;
}

ncclResult_t vcomm_ncclCommCuDevice(ncclComm_t comm, int *device)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!device)
        return ncclInvalidArgument;
    /* The device current when the application created it, as NCCL would say;
     * unknown only in a process where CUDA was not loaded at that time. */
    if (h->cuda_device < 0)
        return vcomm_unsupported(h, "ncclCommCuDevice");
    *device = h->cuda_device;
    return ncclSuccess;
}

ncclResult_t vcomm_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!asyncError)
        return ncclInvalidArgument;
    *asyncError = h->ipc ? ipc_async_error(h->ipc) : ncclSuccess;
    return ncclSuccess;
}

const char *vcomm_ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "";
}

ncclResult_t vcomm_ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    (void)comm;
    (void)revokeFlags;
    return ncclSuccess;
}

/* Buffers registered with a dropped communicator are never used by NCCL: any
 * non-NULL handle will do, and deregistration has nothing to undo. */
ncclResult_t vcomm_ncclCommRegister(ncclComm_t comm, void *buff, size_t size, void **handle)
{
    (void)buff;
    (void)size;
    if (!handle)
        return ncclInvalidArgument;
    *handle = comm;
    return ncclSuccess;
}

ncclResult_t vcomm_ncclCommDeregister(ncclComm_t comm, void *handle)
{
    (void)comm;
    (void)handle;
    return ncclSuccess;
}

/* A custom op only names a reduction; on a dropped communicator it reduces nothing. */
ncclResult_t vcomm_ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                            ncclScalarResidence_t residence, ncclComm_t comm)
{
    (void)scalar;
    (void)datatype;
    (void)residence;
    (void)comm;
    if (!op)
        return ncclInvalidArgument;
    *op = ncclNumOps;
    return ncclSuccess;
}

ncclResult_t vcomm_ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    (void)op;
    (void)comm;
    return ncclSuccess;
}
