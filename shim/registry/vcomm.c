/*
 * What a shim-only communicator (actions drop and ipc) answers, but for its
 * data operations (shim/registry/vcomm_ops.c).  It has a rank, a size
 * and a device, no errors, and data operations that complete at once without
 * touching memory; each is counted, so that records show the data that did
 * not arrive (docs/policy.md, "drop").  Functions not here are refused by
 * shim/registry/vcomm_default.c.
 */
#include "vcomm.h"

#include "nccl_api.h"
#include "ipc.h"
#include "record.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

/* One warning per function and process: an application that retries an
 * unsupported call in a loop must not flood its log.  Bit i%64 of word i/64
 * = fn_index i; [0] stale handles, [1] refusals, [2] suspended communicators,
 * [3] the device API's answers. */
#define WARN_WORDS ((FN_COUNT + 63) / 64)
static atomic_uint_fast64_t g_warned[4][WARN_WORDS];

/* 1 the first time `fn` is reported in `kind`; unknown names always are. */
static int first_warning(int kind, const char *fn)
{
    int i = shim_fn_lookup(fn);
    if (i < 0)
        return 1;
    uint_fast64_t bit = (uint_fast64_t)1 << (i % 64);
    return !(atomic_fetch_or(&g_warned[kind][i / 64], bit) & bit);
}

ncclResult_t vcomm_stale(const char *fn)
{
    if (first_warning(0, fn))
        shim_warn("stale-comm", "%s on a communicator this shim dropped or ran over CUDA IPC and the application "
                  "has already destroyed: the call returns ncclInvalidArgument (as NCCL does for a destroyed "
                  "communicator); the application uses a communicator after ncclCommDestroy", fn);
    return ncclInvalidArgument;
}

ncclResult_t vcomm_unsupported(struct shim_comm *h, const char *fn)
{
    if (first_warning(1, fn)) {
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

ncclResult_t vcomm_refuse_suspended(struct shim_comm *h, const char *fn)
{
    if (first_warning(2, fn))
        shim_warn("suspended-comm", "%s on communicator %s (rank %d of %d), suspended by ncclCommSuspend: the call "
                  "returns ncclInvalidUsage; call ncclCommResume first", fn, h->group, h->rank, h->nranks);
    return ncclInvalidUsage;
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

/*
 * NCCL 2.29's suspend, resume and memory statistics.  A dropped communicator
 * has nothing to give back; an ipc one gives back its staging with
 * NCCL_SUSPEND_MEM, on its rank alone (shim/ipc/ipc_suspend.c).  Operations
 * on a suspended communicator are refused, as NCCL refuses them ("the
 * communicator cannot be used while suspended").
 */
ncclResult_t vcomm_ncclCommSuspend(ncclComm_t comm, int flags)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    /* Suspended already: NCCL answers ncclInvalidUsage, and so does the shim
     * (the staging stays as the first suspend left it). */
    if (atomic_load(&h->suspended))
        return vcomm_refuse_suspended(h, "ncclCommSuspend");
    if (h->ipc) {
        char why[256] = "";
        if (ipc_suspend(h->ipc, (flags & NCCL_SUSPEND_MEM) != 0, why, sizeof(why)) != 0) {
            shim_warn("ipc", "ncclCommSuspend on ipc communicator %s (rank %d of %d) returns %d: %s", h->group,
                      h->rank, h->nranks, (int)ncclInternalError, why);
            return ncclInternalError;
        }
    }
    atomic_store(&h->suspended, 1);
    return ncclSuccess;
}

ncclResult_t vcomm_ncclCommResume(ncclComm_t comm)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (h->ipc) {
        char why[384] = "";
        if (ipc_resume(h->ipc, why, sizeof(why)) != 0) {
            /* Still suspended: its operations stay refused, a retry may succeed. */
            shim_warn("ipc", "ncclCommResume on ipc communicator %s (rank %d of %d) returns %d: %s; it stays "
                      "suspended", h->group, h->rank, h->nranks, (int)ncclUnhandledCudaError, why);
            return ncclUnhandledCudaError;
        }
    }
    atomic_store(&h->suspended, 0);
    return ncclSuccess;
}

ncclResult_t vcomm_ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!value || (unsigned)stat > ncclStatGpuMemTotal)
        return ncclInvalidArgument;
    uint64_t v[4] = { 0, (uint64_t)atomic_load(&h->suspended), 0, 0 };
    if (h->ipc)
        ipc_mem_stats(h->ipc, v[ncclStatGpuMemSuspended] != 0, v);
    *value = v[stat];
    return ncclSuccess;
}

/*
 * NCCL's device API (2.28+).  A shim-only communicator has no NCCL device
 * runtime: its device communicators, windows and barriers are refused
 * (vcomm_default.c), and the host functions that return a value answer as
 * NCCL does: the world team is the communicator itself; the LSA and rail
 * teams, which need the runtime, are what NCCL returns when it cannot make
 * one (an empty team, rank -1), said once per function.
 */
static void no_device_runtime(struct shim_comm *h, const char *fn, const char *answer)
{
    if (first_warning(3, fn))
        shim_warn(h->ipc ? "ipc-comm-call" : "dropped-comm-call",
                  "%s on communicator %s (rank %d of %d), which this shim %s: it has no NCCL device runtime, so "
                  "the call returns %s, as NCCL does when it cannot build one; pass this communicator through "
                  "(NCCLSHIM_WEIGHT_UPDATE=passthrough) if the application uses NCCL's device API",
                  fn, h->group, h->rank, h->nranks, h->ipc ? "runs over CUDA IPC" : "dropped", answer);
}

ncclTeam_t vcomm_ncclTeamWorld(ncclComm_t comm)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    return (ncclTeam_t){ h->nranks, h->rank, 1 };
}

ncclTeam_t vcomm_ncclTeamLsa(ncclComm_t comm)
{
    no_device_runtime((struct shim_comm *)comm, "ncclTeamLsa", "an empty team");
    return NCCL_TEAM_NONE;
}

ncclTeam_t vcomm_ncclTeamRail(ncclComm_t comm)
{
    no_device_runtime((struct shim_comm *)comm, "ncclTeamRail", "an empty team");
    return NCCL_TEAM_NONE;
}

/* NCCL's own arithmetic (src/nccl_device/core.cc): no runtime needed. */
int vcomm_ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank)
{
    return ((struct shim_comm *)comm)->rank + (rank - team.rank) * team.stride;
}

int vcomm_ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank)
{
    (void)team;
    (void)rank;
    no_device_runtime((struct shim_comm *)comm, "ncclTeamRankToLsa", "-1");
    return -1;
}

/*
 * NCCL 2.29's properties: rank, size and device as the communicator has
 * them, and no device API (so that a caller that asks before it builds a
 * device communicator takes its other path).  NCCL's rules: an uninitialised
 * struct is refused, the fields after multimemSupport are filled only for a
 * version above 2.29.3, and only what the caller's struct holds is written.
 * nvmlDev is -1: the shim has no NVML to map the CUDA device.
 */
ncclResult_t vcomm_ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t *props)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    if (!props)
        return ncclInvalidArgument;
    if (props->magic != NCCL_API_MAGIC || props->size < offsetof(ncclCommProperties_t, rank))
        return ncclInvalidUsage;
    ncclCommProperties_t p = { .rank = h->rank, .nRanks = h->nranks, .cudaDev = h->cuda_device, .nvmlDev = -1,
                               .ginType = ncclGinTypeNone, .railedGinType = ncclGinTypeNone };
    size_t end = props->version >= NCCL_COMM_PROPERTIES_V2 ? sizeof(p) : offsetof(ncclCommProperties_t, ginType);
    if (end > props->size)
        end = props->size;
    size_t from = offsetof(ncclCommProperties_t, rank);
    if (end > from)
        memcpy((char *)props + from, (const char *)&p + from, end - from);
    return ncclSuccess;
}
