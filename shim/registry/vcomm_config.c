/*
 * NCCL 2.31's nccl*Config collectives on a shim-only communicator (actions
 * drop and ipc).  Each is its plain collective plus a per-collective config
 * whose settings (CTAs, algorithm, profiler tag) tune NCCL's kernels; there
 * are none to tune here, so the call is answered by the plain form
 * (shim/registry/vcomm_ops.c: ipc moves the data, drop counts it), and counted,
 * recorded and refused under the plain collective's name.  Two parts of the
 * config still matter:
 *   - a config the shim cannot read (not made with NCCL_COLLCONFIG_INITIALIZER,
 *     or smaller than 2.31's struct) gets ncclInvalidArgument, as from NCCL,
 *     so that an application's bug shows the same with and without the shim;
 *   - 2.32's launchCompletionEvent is recorded on the stream once the
 *     operation is enqueued, as NCCL records it once the kernel is launched:
 *     a caller that waits on it (cudaStreamWaitEvent, cudaEventSynchronize)
 *     then waits for the shim's copies, not for an event nobody records.
 */
#include "vcomm.h"

#include "ipc.h"
#include "record.h"

#include <stdatomic.h>
#include <stddef.h>

/* One warning per process for unreadable configs, and one for events that
 * cannot be recorded: an application that passes a bad one does so on every
 * call.  Each call still returns its error. */
static atomic_int g_bad_config_warned, g_bad_event_warned;

static ncclResult_t check_config(const struct shim_comm *h, const ncclCollConfig_t *c, const char *fn)
{
    if (!c || (c->magic == NCCL_COLLCONFIG_MAGIC && c->size >= NCCL_COLLCONFIG_SIZE_2_31))
        return ncclSuccess;
    if (!atomic_exchange(&g_bad_config_warned, 1))
        shim_warn("coll-config", "%s on communicator %s (rank %d of %d): its ncclCollConfig_t (size %zu, magic 0x%x) "
                  "was not made with NCCL_COLLCONFIG_INITIALIZER of NCCL 2.31 or later: the call returns "
                  "ncclInvalidArgument, as NCCL does",
                  fn, h->group, h->rank, h->nranks, c->size, c->magic);
    return ncclInvalidArgument;
}

/* The caller's launchCompletionEvent, NULL where its config has none (a
 * 2.31 config, or one of a version before the field). */
static cudaEvent_t completion_event(const ncclCollConfig_t *c)
{
    if (!c || c->size < offsetof(ncclCollConfig_t, launchCompletionEvent) + sizeof(c->launchCompletionEvent) ||
        c->version < NCCL_COLLCONFIG_EVENT_VERSION)
        return NULL;
    return c->launchCompletionEvent;
}

/* After the plain form: the completion event recorded on `stream`, if the
 * operation was enqueued and the caller asked for one. */
static ncclResult_t finish(const struct shim_comm *h, ncclResult_t r, const ncclCollConfig_t *c, cudaStream_t stream,
                           const char *fn)
{
    cudaEvent_t e = completion_event(c);
    if (r != ncclSuccess || !e)
        return r;
    char why[256] = "";
    const struct shim_cuda *cu = shim_cuda(why, sizeof(why));
    CUresult cr = cu ? cu->cuEventRecord((CUevent)e, (CUstream)stream) : CUDA_SUCCESS;
    if (cu && cr == CUDA_SUCCESS)
        return ncclSuccess;
    if (atomic_exchange(&g_bad_event_warned, 1))
        return ncclUnhandledCudaError;
    if (cu)
        shim_cuda_error("cuEventRecord", cr, why, sizeof(why));
    shim_warn("coll-config", "%s on communicator %s (rank %d of %d): its launchCompletionEvent could not be recorded "
              "(%s): the call returns ncclUnhandledCudaError",
              fn, h->group, h->rank, h->nranks, why);
    return ncclUnhandledCudaError;
}

#define H(comm) ((const struct shim_comm *)(comm))

/*
 * The eight forms, generated from nccl_api.def's 2.31 block: each is its plain
 * collective (the same op kind; its arguments less the trailing config),
 * after its config is checked, with the config's completion event recorded
 * after it (check_config, finish).  A form added to the table gets its
 * answer here without a line written for it.
 */
#define PLAIN_OP_ALLREDUCE vcomm_ncclAllReduce
#define PLAIN_OP_BROADCAST vcomm_ncclBroadcast
#define PLAIN_OP_REDUCE vcomm_ncclReduce
#define PLAIN_OP_ALLGATHER vcomm_ncclAllGather
#define PLAIN_OP_REDUCESCATTER vcomm_ncclReduceScatter
#define PLAIN_OP_ALLTOALL vcomm_ncclAlltoAll
#define PLAIN_OP_GATHER vcomm_ncclGather
#define PLAIN_OP_SCATTER vcomm_ncclScatter
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
/* (a, ..., config) -> (a, ...): the forms take 7 to 9 arguments. */
#define NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, n, ...) n
#define NARGS(...) NARGS_(__VA_ARGS__, 9, 8, 7, 6, 5, 4, 3, 2, 1)
#define BUT_LAST_7(a, b, c, d, e, f, g) (a, b, c, d, e, f)
#define BUT_LAST_8(a, b, c, d, e, f, g, h) (a, b, c, d, e, f, g)
#define BUT_LAST_9(a, b, c, d, e, f, g, h, i) (a, b, c, d, e, f, g, h)
#define BUT_LAST(...) CAT(BUT_LAST_, NARGS(__VA_ARGS__))(__VA_ARGS__)

#define NCCL_API_SINCE(version) ((version) == 23100)
#define NCCL_DATA(name, op, params, args, count, dtype)                                                        \
    ncclResult_t vcomm_##name params                                                                           \
    {                                                                                                          \
        ncclResult_t r = check_config(H(comm), config, #name);                                                 \
        if (r == ncclSuccess)                                                                                  \
            r = CAT(PLAIN_, op) BUT_LAST args;                                                                 \
        return finish(H(comm), r, config, stream, #name);                                                      \
    }
#include "nccl_api.def"
