/*
 * The replays' stand-in for CuPy's NCCL module (cupy.cuda.nccl, a Cython
 * extension linked to libnccl), copied to
 * <site-packages>/cupy_backends/cuda/libs/nccl.so: the shim sees its calls
 * come from CuPy's library (API family cupy).  Ray's collective group
 * (ray.util.collective, NCCL backend) calls it from Python: get_unique_id on
 * group rank 0 (_generate_nccl_uid), then groupStart(), NcclCommunicator(world,
 * uid, rank) (ncclCommInitRank) and groupEnd() (create_nccl_communicator),
 * then allReduce / broadcast.  Each function is one NCCL call, as each of
 * CuPy's is; the Python side (tests/replay/rank.py) makes the calls in
 * Ray's order.
 */
#include "nccl_decls.h"
#include "store.h"

int replay_cupy_get_unique_id(ncclUniqueId *id);
int replay_cupy_group_start(void);
int replay_cupy_group_end(void);
int replay_cupy_comm_init_rank(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank);
int replay_cupy_all_reduce(ncclComm_t comm, void *buf, size_t count, int dtype, void *stream);
int replay_cupy_broadcast(ncclComm_t comm, void *buf, size_t count, int dtype, int root, void *stream);
int replay_cupy_destroy(ncclComm_t comm);

int replay_cupy_get_unique_id(ncclUniqueId *id)
{
    app_note("ncclGetUniqueId");
    return ncclGetUniqueId(id);
}

int replay_cupy_group_start(void)
{
    app_note("ncclGroupStart");
    return ncclGroupStart();
}

int replay_cupy_group_end(void)
{
    app_note("ncclGroupEnd");
    return ncclGroupEnd();
}

int replay_cupy_comm_init_rank(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank)
{
    app_note("ncclCommInitRank");
    return ncclCommInitRank(comm, nranks, *id, rank);
}

int replay_cupy_all_reduce(ncclComm_t comm, void *buf, size_t count, int dtype, void *stream)
{
    app_note("ncclAllReduce");
    return ncclAllReduce(buf, buf, count, (ncclDataType_t)dtype, ncclSum, comm, stream);
}

int replay_cupy_broadcast(ncclComm_t comm, void *buf, size_t count, int dtype, int root, void *stream)
{
    app_note("ncclBroadcast");
    return ncclBroadcast(buf, buf, count, (ncclDataType_t)dtype, root, comm, stream);
}

int replay_cupy_destroy(ncclComm_t comm)
{
    app_note("ncclCommDestroy");
    return ncclCommDestroy(comm);
}
