/*
 * The operations of an ipc communicator as the application calls them
 * (through shim/comm/): their arguments checked, their order across streams
 * (each waits for the one before unless on the same stream), qlock taken with
 * the staging they copy out of mapped, and the broadcast (ipc_bcast.c),
 * all-gather, all-reduce and Send/Recv enqueued; the protocol: ipc_proto.h.
 */
#define _GNU_SOURCE
#include "ipc_ops.h"
#include "ipc_bcast.h"
#include "ipc_core.h"
#include "ipc_maps.h"
#include "ipc_monitor.h"
#include "ipc_suspend.h"
#include "ipc_stream.h"

#include "dtype.h"
#include "reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t ipc_host_reduce_max(const struct ipc_comm *c)
{
    return c->chunk * (size_t)c->nslots;
}

/* Runs with the communicator's context current; restores the caller's. */
struct ctx_guard {
    CUcontext saved;
    int switched;
};

static void ctx_enter(const struct ipc_comm *c, struct ctx_guard *g)
{
    g->saved = NULL;
    g->switched = 0;
    if (c->cu->cuCtxGetCurrent(&g->saved) == CUDA_SUCCESS && g->saved != c->ctx)
        g->switched = c->cu->cuCtxSetCurrent(c->ctx) == CUDA_SUCCESS;
}

static void ctx_leave(const struct ipc_comm *c, struct ctx_guard *g)
{
    if (g->switched)
        c->cu->cuCtxSetCurrent(g->saved);
}

static int capturing(const struct ipc_comm *c, CUstream s)
{
    int status = 0;
    return c->cu->cuStreamIsCapturing(s, &status) == CUDA_SUCCESS && status != 0;
}

/*
 * Whether an operation on stream s must wait for the one before: not on the
 * same stream (the stream orders them), nor when nothing came before.
 * Returns s's id (and whether it is known) for set_fence.
 */
static int needs_fence(struct ipc_comm *c, CUstream s, unsigned long long *sid, int *known)
{
    const struct shim_cuda *cu = c->cu;
    *sid = 0;
    *known = cu->cuStreamGetId && cu->cuStreamGetId(s, sid) == CUDA_SUCCESS;
    ipc_trace(c, "op %llu stream %llu (known %d) last %llu (known %d) fence rank %d %d>=%llu",
              (unsigned long long)c->is.ops, *sid, *known, c->is.last_sid, c->is.last_sid_known, c->is.fence_rank,
              c->is.fence_off, (unsigned long long)c->is.fence_val);
    if (*known && c->is.last_sid_known && *sid == c->is.last_sid)
        return 0;
    return c->is.fence_val != 0; /* read without qlock: only this thread writes it */
}

/*
 * Takes qlock with the staging of every rank in `need` (a bit per rank)
 * mapped here, for an operation that copies out of it: ncclSuccess with
 * qlock held; else, without it, ncclInvalidUsage (a rank is suspended and
 * was not resumed in time: ipc_data_wait), ncclRemoteError (the
 * communicator failed meanwhile) or ncclUnhandledCudaError (the staging
 * could not be mapped), with the reason.
 */
static ncclResult_t lock_with_data(struct ipc_comm *c, uint64_t need, char *why, size_t whylen)
{
    for (;;) {
        pthread_mutex_lock(&c->qlock);
        int r, rc = 0;
        for (r = 0; r < c->nranks; r++)
            if ((need >> r & 1) && (rc = ipc_data_get(c, r, why, whylen)) != 0)
                break;
        if (rc == 0)
            return ncclSuccess;
        pthread_mutex_unlock(&c->qlock);
        if (rc < 0)
            return ncclUnhandledCudaError;
        if (ipc_data_wait(c, r, why, whylen) != 0)
            return atomic_load(&c->fail.failed) ? ncclRemoteError : ncclInvalidUsage;
    }
}

/* Orders an operation on stream s after the one before (needs_fence). */
static CUresult order_after(struct ipc_comm *c, CUstream s, unsigned long long *sid, int *known)
{
    if (!needs_fence(c, s, sid, known))
        return CUDA_SUCCESS;
    return c->cu->cuStreamWaitValue64(s, flag(c, c->is.fence_rank, c->is.fence_off), c->is.fence_val,
                                      CU_STREAM_WAIT_VALUE_GEQ);
}

/* The operation just enqueued on stream `sid` is over once this rank's
 * counter at `off` reaches `val` (off < 0: it moved nothing, the fence
 * before it stands). */
static void set_fence(struct ipc_comm *c, unsigned long long sid, int known, int off, uint64_t val)
{
    c->is.last_sid = sid;
    c->is.last_sid_known = known;
    if (off < 0)
        return;
    pthread_mutex_lock(&c->qlock); /* the reaper reads it (ipc_trim_maps) */
    c->is.fence_rank = c->rank;
    c->is.fence_off = off;
    c->is.fence_val = val;
    pthread_mutex_unlock(&c->qlock);
}

/* A broadcast's arguments, and whether it may be enqueued at all:
 * ncclSuccess, or the error with the reason. */
static ncclResult_t bcast_check(struct ipc_comm *c, const void *sendbuff, const void *recvbuff, size_t bytes, int root,
                                CUstream s, char *why, size_t whylen)
{
    if (ipc_failed(c, why, whylen))
        return ncclRemoteError;
    if (root < 0 || root >= c->nranks) {
        snprintf(why, whylen, "root %d outside 0..%d", root, c->nranks - 1);
        return ncclInvalidArgument;
    }
    if (bytes && ((!sendbuff && c->rank == root) || !recvbuff)) {
        snprintf(why, whylen, "NULL buffer");
        return ncclInvalidArgument;
    }
    if (capturing(c, s)) {
        snprintf(why, whylen, "the stream is being captured into a CUDA graph: ipc operations cannot be captured "
                 "(their sequence numbers are fixed when enqueued); pass this communicator through "
                 "(NCCLSHIM_WEIGHT_UPDATE=passthrough) to capture it");
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

/* A broadcast of a communicator of one rank: the copy, if any, after the
 * fence (`fence`: the operation before ran on another stream), and its DONE
 * (the new fence in *off and *val).  0, or -1 with the reason. */
static int bcast_alone(struct ipc_comm *c, CUstream s, CUdeviceptr recv, CUdeviceptr send, size_t bytes, int fence,
                       uint64_t op, int *off, uint64_t *val, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    if (fence && cu_check(cu->cuStreamWaitValue64(s, flag(c, c->is.fence_rank, c->is.fence_off), c->is.fence_val,
                                                  CU_STREAM_WAIT_VALUE_GEQ),
                          "cuStreamWaitValue64", why, whylen) != 0)
        return -1;
    if (recv == send || !bytes)
        return 0;
    if (cu_check(ipc_copy(c, recv, send, bytes, s), "cuMemcpyDtoDAsync", why, whylen) != 0)
        return -1;
    if (cu_check(cu->cuStreamWriteValue64(s, flag(c, c->rank, F_DONE), op + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
                 "cuStreamWriteValue64", why, whylen) != 0)
        return -1;
    *off = F_DONE;
    *val = op + 1;
    return 0;
}

/* A broadcast between ranks: the chain enqueued under qlock, with the
 * staging it may copy out of mapped (a receiver's, from its predecessor: a
 * staged hop), and its fence set under the same lock (the reaper must not
 * judge the mappings idle by the fence before this one).  0; 1 if nothing
 * was enqueued, with lock_with_data's error in *res; -1 with the reason if
 * part of it may be. */
static int bcast_chain(struct ipc_comm *c, CUstream s, const struct ipc_bcast_args *j, ncclResult_t *res, char *why,
                       size_t whylen)
{
    int me = c->rank, frank = me, off = -1;
    uint64_t val = 0;
    uint64_t t0 = ipc_trace_clock();
    *res = lock_with_data(c, me != j->root && j->bytes ? 1ull << pred_of(c) : 0, why, whylen);
    ipc_trace(c, "b %llu: locked in %llu us", (unsigned long long)j->b, (unsigned long long)(ipc_trace_clock() - t0));
    if (*res != ncclSuccess)
        return 1;
    int had = ipc_maps_count(c) || ipc_exports_count(c);
    if (ipc_chain_bcast(c, j, s, &frank, &off, &val, why, whylen) != 0) {
        pthread_mutex_unlock(&c->qlock);
        return -1;
    }
    if (off >= 0) {
        c->is.fence_rank = frank;
        c->is.fence_off = off;
        c->is.fence_val = val;
    }
    int first = !had && (ipc_maps_count(c) || ipc_exports_count(c));
    pthread_mutex_unlock(&c->qlock);
    if (first) /* the reaper sleeps without a bound while nothing is mapped or exported */
        ipc_wake(c, me);
    return 0;
}

ncclResult_t ipc_broadcast(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t bytes, int root,
                           cudaStream_t stream, char *why, size_t whylen)
{
    CUstream s = (CUstream)stream;
    ncclResult_t res = bcast_check(c, sendbuff, recvbuff, bytes, root, s, why, whylen);
    if (res != ncclSuccess)
        return res;
    struct ctx_guard g;
    ctx_enter(c, &g);
    uint64_t op = c->is.ops;
    int off = -1;
    uint64_t val = 0;
    unsigned long long sid;
    int known;
    CUdeviceptr send = (CUdeviceptr)(uintptr_t)sendbuff, recv = (CUdeviceptr)(uintptr_t)recvbuff;
    /* A broadcast between ranks orders itself (ipc_chain_bcast: it may wait for
     * less than the fence). */
    int fence = needs_fence(c, s, &sid, &known);
    if (c->nranks == 1) {
        if (bcast_alone(c, s, recv, send, bytes, fence, op, &off, &val, why, whylen) != 0)
            goto fail;
    } else {
        struct ipc_bcast_args j = { c->is.bcasts + 1, op, c->is.bbytes, bytes, root, send, recv,
                                    fence ? c->is.fence_rank : c->rank, fence ? c->is.fence_off : 0,
                                    fence ? c->is.fence_val : 0 };
        int rc = bcast_chain(c, s, &j, &res, why, whylen);
        if (rc > 0) {
            /* Nothing enqueued: the communicator stays as it was. */
            ctx_leave(c, &g);
            return res;
        }
        if (rc < 0)
            goto fail;
        c->is.bcasts++;
        c->is.bbytes += bytes;
    }
    set_fence(c, sid, known, off, val);
    c->is.ops = op + 1;
    ctx_leave(c, &g);
    return ncclSuccess;
fail:
    /* Part of the operation may be enqueued: the counters no longer agree
     * with the peers', who must not wait for this rank. */
    if (c->nranks > 1)
        ipc_fail_everywhere(c, why);
    ctx_leave(c, &g);
    return ncclUnhandledCudaError;
}

/* AllGather as one broadcast per rank into its block of recvbuff: the same
 * chain and counters, so it needs nothing of its own. */
ncclResult_t ipc_allgather(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t bytes,
                           cudaStream_t stream, char *why, size_t whylen)
{
    if (bytes && (!sendbuff || !recvbuff)) {
        snprintf(why, whylen, "NULL buffer");
        return ncclInvalidArgument;
    }
    for (int r = 0; r < c->nranks; r++) {
        char *block = (char *)recvbuff + (size_t)r * bytes;
        ncclResult_t res = ipc_broadcast(c, r == c->rank ? sendbuff : block, block, bytes, r, stream, why, whylen);
        if (res != ncclSuccess)
            return res;
    }
    return ncclSuccess;
}

/* Every rank's slot 0 reduced into acc (tmp: room for one), in rank order
 * on every rank: every rank computes the same bits.  Every rank is in the
 * all-reduce, so none is suspended; their staging is mapped under qlock,
 * which keeps the reaper from closing it. */
static ncclResult_t gather(struct ipc_comm *c, uint8_t *acc, uint8_t *tmp, size_t count, ncclDataType_t dtype,
                           ncclRedOp_t op, char *why, size_t whylen)
{
    size_t bytes = count * shim_dtype_size_checked(dtype);
    ncclResult_t res = lock_with_data(c, c->nranks >= 64 ? ~0ull : (1ull << c->nranks) - 1, why, whylen);
    if (res != ncclSuccess)
        return res;
    for (int r = 0; r < c->nranks && res == ncclSuccess; r++) {
        CUresult cr = c->cu->cuMemcpyDtoH(r == 0 ? acc : tmp, slot(c, r, 0), bytes);
        if (cr != CUDA_SUCCESS) {
            shim_cuda_error("cuMemcpyDtoH", cr, why, whylen);
            res = ncclUnhandledCudaError;
        } else if (r > 0) {
            host_reduce(acc, tmp, count, dtype, op == ncclAvg ? ncclSum : op);
        }
    }
    pthread_mutex_unlock(&c->qlock);
    return res;
}

/* Whether an all-reduce of these arguments can run here: ncclSuccess with
 * its size in *bytes, or the error with the reason. */
static ncclResult_t allreduce_args(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t dtype, ncclRedOp_t op, CUstream s, size_t *bytes_out, char *why,
                                   size_t whylen)
{
    size_t esize = shim_dtype_size_checked(dtype);
    if (!esize || host_reduce_supported(dtype, op, why, whylen) != 0) {
        if (!esize)
            snprintf(why, whylen, "datatype %d is not an NCCL datatype", (int)dtype);
        return ncclInvalidArgument;
    }
    size_t bytes = count * esize;
    if (count && bytes / count != esize) {
        snprintf(why, whylen, "count %zu overflows", count);
        return ncclInvalidArgument;
    }
    if (bytes > ipc_host_reduce_max(c)) {
        snprintf(why, whylen, "an ipc communicator reduces on the host, up to its staging size (%zu bytes: "
                 "NCCLSHIM_IPC_CHUNK_BYTES x NCCLSHIM_IPC_SLOTS); this all-reduce is %zu bytes. Weight-update "
                 "communicators all-reduce one value to warm up; pass this one through "
                 "(NCCLSHIM_WEIGHT_UPDATE=passthrough) if it needs large all-reduces", ipc_host_reduce_max(c), bytes);
        return ncclInvalidUsage;
    }
    if (count && (!sendbuff || !recvbuff)) {
        snprintf(why, whylen, "NULL buffer");
        return ncclInvalidArgument;
    }
    if (capturing(c, s)) {
        snprintf(why, whylen, "the stream is being captured into a CUDA graph: an ipc all-reduce synchronises the "
                 "host and cannot be captured");
        return ncclInvalidUsage;
    }
    *bytes_out = bytes;
    return ncclSuccess;
}

/* All-reduce number arn, this rank's data in its slot 0 (its stream
 * synchronised): everyone arrives, everyone reduces every slot on the host
 * into recvbuff, everyone leaves before a slot is refilled. */
static ncclResult_t allreduce_on_host(struct ipc_comm *c, void *recvbuff, size_t count, ncclDataType_t dtype,
                                      ncclRedOp_t op, size_t bytes, uint64_t arn, char *why, size_t whylen)
{
    ipc_write_flag(c, F_AR, arn);
    if (ipc_wait_all(c, F_AR, arn, why, whylen) != 0)
        return ncclRemoteError;
    uint8_t *acc = malloc(bytes ? bytes : 1), *tmp = malloc(bytes ? bytes : 1);
    ncclResult_t res = ncclSuccess;
    if (!acc || !tmp) {
        snprintf(why, whylen, "out of host memory for %zu bytes", bytes);
        res = ncclSystemError;
    }
    if (res == ncclSuccess && bytes)
        res = gather(c, acc, tmp, count, dtype, op, why, whylen);
    if (res == ncclSuccess && op == ncclAvg && bytes)
        host_reduce_finish_avg(acc, count, dtype, c->nranks);
    if (res == ncclSuccess && bytes &&
        cu_check(c->cu->cuMemcpyHtoD((CUdeviceptr)(uintptr_t)recvbuff, acc, bytes), "cuMemcpyHtoD", why, whylen) != 0)
        res = ncclUnhandledCudaError;
    free(acc);
    free(tmp);
    if (res != ncclSuccess)
        return res;
    /* Nobody refills its slot before every rank has read it. */
    ipc_write_flag(c, F_AR2, arn);
    if (ipc_wait_all(c, F_AR2, arn, why, whylen) != 0)
        return ncclRemoteError;
    return ncclSuccess;
}

ncclResult_t ipc_allreduce(struct ipc_comm *c, const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t dtype, ncclRedOp_t op, cudaStream_t stream, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    CUstream s = (CUstream)stream;
    if (ipc_failed(c, why, whylen))
        return ncclRemoteError;
    size_t bytes = 0;
    ncclResult_t bad = allreduce_args(c, sendbuff, recvbuff, count, dtype, op, s, &bytes, why, whylen);
    if (bad != ncclSuccess)
        return bad;
    struct ctx_guard g;
    ctx_enter(c, &g);
    /* Every rank takes part: one that is suspended is waited for here
     * (NCCLSHIM_IPC_RESUME_WAIT_MS), before anything is written, rather than
     * at the arrival below (HOST_WAIT_US), after which a failure leaves this
     * rank's counters ahead of the others'. */
    uint64_t all = c->nranks >= 64 ? ~0ull : (1ull << c->nranks) - 1;
    ncclResult_t ready = lock_with_data(c, all, why, whylen);
    if (ready != ncclSuccess) {
        ctx_leave(c, &g);
        return ready;
    }
    pthread_mutex_unlock(&c->qlock);
    uint64_t opn = c->is.ops;
    ncclResult_t res = ncclUnhandledCudaError;
    unsigned long long sid;
    int known;
    /* After the operations before it (any stream: its broadcasts are then
     * over, so its successor reads nothing more from its slots before this
     * all-reduce is over everywhere), with this rank's data in its slot 0. */
    if (cu_check(order_after(c, s, &sid, &known), "cuStreamWaitValue64", why, whylen) != 0)
        goto fail;
    ipc_bcast_after_other(c);
    if (bytes) {
        if (cu_check(ipc_copy(c, slot(c, c->rank, 0), (CUdeviceptr)(uintptr_t)sendbuff, bytes, s),
                     "cuMemcpyDtoDAsync", why, whylen) != 0)
            goto fail;
    }
    if (cu_check(cu->cuStreamSynchronize(s), "cuStreamSynchronize", why, whylen) != 0)
        goto fail;
    uint64_t arn = c->is.allreduces + 1;
    if ((res = allreduce_on_host(c, recvbuff, count, dtype, op, bytes, arn, why, whylen)) != ncclSuccess)
        goto fail;
    ipc_write_flag(c, F_DONE, opn + 1);
    set_fence(c, sid, known, F_DONE, opn + 1);
    c->is.ops = opn + 1;
    c->is.allreduces = arn;
    ctx_leave(c, &g);
    return ncclSuccess;
fail:
    ctx_leave(c, &g);
    return res;
}

/* Whether a group's Send/Recv can run here (nops > 0): ncclSuccess, or the
 * error with the reason. */
static ncclResult_t p2p_args(struct ipc_comm *c, const struct ipc_p2p *ops, int nops, char *why, size_t whylen)
{
    CUstream s = ops[0].stream;
    for (int i = 0; i < nops; i++) {
        if (ops[i].peer < 0 || ops[i].peer >= c->nranks) {
            snprintf(why, whylen, "peer %d outside 0..%d", ops[i].peer, c->nranks - 1);
            return ncclInvalidArgument;
        }
        if (ops[i].bytes && !ops[i].buf) {
            snprintf(why, whylen, "NULL buffer");
            return ncclInvalidArgument;
        }
        if (ops[i].stream != s) {
            snprintf(why, whylen, "the Send/Recv of one group on an ipc communicator must use one stream");
            return ncclInvalidUsage;
        }
    }
    if (capturing(c, s)) {
        snprintf(why, whylen, "the stream is being captured into a CUDA graph: ipc operations cannot be captured");
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

/* The next chunk of a Send (`len` bytes at `user`) to rank q, through this
 * rank's slots for q once q has taken the chunk P2P_SLOTS before: 0, or -1
 * with the reason. */
static int p2p_send_chunk(struct ipc_comm *c, int q, CUdeviceptr user, size_t len, CUstream s, char *why,
                          size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    int me = c->rank;
    uint64_t pc = c->is.sent[q]++;
    if (pc + 1 > P2P_SLOTS && cu_check(cu->cuStreamWaitValue64(s, flag(c, me, F_RECVD + 8 * q), pc + 1 - P2P_SLOTS,
                                                               CU_STREAM_WAIT_VALUE_GEQ),
                                       "cuStreamWaitValue64", why, whylen) != 0)
        return -1;
    if (cu_check(ipc_copy(c, p2p_slot(c, me, q, pc), user, len, s), "cuMemcpyDtoDAsync", why, whylen) != 0)
        return -1;
    return cu_check(cu->cuStreamWriteValue64(s, flag(c, q, F_SENT + 8 * me), pc + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
                    "cuStreamWriteValue64", why, whylen);
}

/* The next chunk of a Recv from rank q, out of q's slots for this rank once
 * q has put it there: 0, or -1 with the reason. */
static int p2p_recv_chunk(struct ipc_comm *c, int q, CUdeviceptr user, size_t len, CUstream s, char *why,
                          size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    int me = c->rank;
    uint64_t pc = c->is.recvd[q]++;
    if (cu_check(cu->cuStreamWaitValue64(s, flag(c, me, F_SENT + 8 * q), pc + 1, CU_STREAM_WAIT_VALUE_GEQ),
                 "cuStreamWaitValue64", why, whylen) != 0)
        return -1;
    if (cu_check(ipc_copy(c, user, p2p_slot(c, q, me, pc), len, s), "cuMemcpyDtoDAsync", why, whylen) != 0)
        return -1;
    return cu_check(cu->cuStreamWriteValue64(s, flag(c, q, F_RECVD + 8 * me), pc + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
                    "cuStreamWriteValue64", why, whylen);
}

/* One chunk of each operation in turn, `done` counting each one's: a
 * group's sends and receives between two ranks progress together, so
 * neither waits on the other's full slots for ever.  0, or -1 with the
 * reason. */
static int p2p_chunks(struct ipc_comm *c, const struct ipc_p2p *ops, int nops, uint64_t *done, CUstream s, char *why,
                      size_t whylen)
{
    for (int more = 1; more;) {
        more = 0;
        for (int i = 0; i < nops; i++) {
            const struct ipc_p2p *o = &ops[i];
            uint64_t nch = o->bytes ? (o->bytes + c->p2p_chunk - 1) / c->p2p_chunk : 0;
            if (done[i] >= nch)
                continue;
            size_t off = (size_t)(done[i] * c->p2p_chunk);
            size_t len = o->bytes - off < c->p2p_chunk ? o->bytes - off : c->p2p_chunk;
            CUdeviceptr user = (CUdeviceptr)(uintptr_t)o->buf + off;
            if ((o->send ? p2p_send_chunk : p2p_recv_chunk)(c, o->peer, user, len, s, why, whylen) != 0)
                return -1;
            done[i]++;
            more |= done[i] < nch;
        }
    }
    return 0;
}

ncclResult_t ipc_p2p(struct ipc_comm *c, const struct ipc_p2p *ops, int nops, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    if (ipc_failed(c, why, whylen))
        return ncclRemoteError;
    if (nops <= 0)
        return ncclSuccess;
    ncclResult_t bad = p2p_args(c, ops, nops, why, whylen);
    if (bad != ncclSuccess)
        return bad;
    CUstream s = ops[0].stream;
    uint64_t *done = calloc((size_t)nops, sizeof(*done));
    if (!done) {
        snprintf(why, whylen, "out of memory");
        return ncclSystemError;
    }
    struct ctx_guard g;
    ctx_enter(c, &g);
    uint64_t op = c->is.ops;
    int me = c->rank, locked = 0;
    unsigned long long sid;
    int known;
    /* A Recv copies out of its sender's slots. */
    uint64_t need = 0;
    for (int i = 0; i < nops; i++)
        if (!ops[i].send && ops[i].bytes)
            need |= 1ull << ops[i].peer;
    ncclResult_t res = lock_with_data(c, need, why, whylen);
    if (res != ncclSuccess) {
        free(done);
        ctx_leave(c, &g);
        return res;
    }
    locked = 1;
    if (cu_check(order_after(c, s, &sid, &known), "cuStreamWaitValue64", why, whylen) != 0)
        goto fail;
    ipc_bcast_after_other(c);
    if (p2p_chunks(c, ops, nops, done, s, why, whylen) != 0)
        goto fail;
    if (cu_check(cu->cuStreamWriteValue64(s, flag(c, me, F_DONE), op + 1, CU_STREAM_WRITE_VALUE_DEFAULT),
                 "cuStreamWriteValue64", why, whylen) != 0)
        goto fail;
    /* Under the lock that covered the enqueue (the reaper judges the
     * mappings by the fence). */
    c->is.fence_rank = me;
    c->is.fence_off = F_DONE;
    c->is.fence_val = op + 1;
    pthread_mutex_unlock(&c->qlock);
    set_fence(c, sid, known, -1, 0);
    c->is.ops = op + 1;
    free(done);
    ctx_leave(c, &g);
    return ncclSuccess;
fail:
    if (locked)
        pthread_mutex_unlock(&c->qlock);
    free(done);
    ctx_leave(c, &g);
    return ncclUnhandledCudaError;
}

