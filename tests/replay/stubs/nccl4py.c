/*
 * The replays' stand-in for nccl4py's internal binding
 * (nccl/bindings/_internal/nccl_linux.pyx, a Cython extension), copied to
 * <site-packages>/nccl/bindings/_internal/nccl_linux.so: the shim sees its
 * calls come from nccl4py's library (API family nccl4py).  It links no NCCL:
 * as nccl4py does, it looks each function up with dlsym(RTLD_DEFAULT) first,
 * and where that finds nothing (no libnccl in the global scope), in the
 * library cuda.pathfinder loads (load_nvidia_dynamic_lib("nccl"):
 * <site-packages>/nvidia/nccl/lib/libnccl.so.2, the path the Python side
 * passes).  NeMo-RL's StatelessProcessGroup makes its communicator through
 * nccl.core's Communicator.init: ncclCommInitRankScalable with one ID.
 */
#define _GNU_SOURCE
#include "nccl_decls.h"
#include "store.h"

#include <dlfcn.h>

static void *g_lib;

static void *find(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p && g_lib)
        p = dlsym(g_lib, name);
    return p;
}

/* One NCCL call through the function looked up (nccl_decls.h gives its type). */
#define CALL(name, ...)                                                                            \
    do {                                                                                           \
        __typeof__(&name) f_ = (__typeof__(&name))find(#name);                                     \
        app_note(#name);                                                                           \
        return f_ ? f_(__VA_ARGS__) : ncclInternalError;                                           \
    } while (0)

int replay_n4py_load(const char *libnccl);
int replay_n4py_get_unique_id(ncclUniqueId *id);
int replay_n4py_init_scalable(ncclComm_t *comm, int nranks, int rank, ncclUniqueId *id);
int replay_n4py_all_reduce(ncclComm_t comm, void *buf, size_t count, int dtype, void *stream);
int replay_n4py_broadcast(ncclComm_t comm, void *buf, size_t count, int dtype, int root, void *stream);
int replay_n4py_split(ncclComm_t comm, int color, int key, ncclComm_t *child);
int replay_n4py_destroy(ncclComm_t comm);

int replay_n4py_load(const char *libnccl)
{
    g_lib = dlopen(libnccl, RTLD_NOW | RTLD_LOCAL);
    return g_lib ? 0 : -1;
}

int replay_n4py_get_unique_id(ncclUniqueId *id)
{
    CALL(ncclGetUniqueId, id);
}

int replay_n4py_init_scalable(ncclComm_t *comm, int nranks, int rank, ncclUniqueId *id)
{
    CALL(ncclCommInitRankScalable, comm, nranks, rank, 1, id, NULL);
}

int replay_n4py_all_reduce(ncclComm_t comm, void *buf, size_t count, int dtype, void *stream)
{
    CALL(ncclAllReduce, buf, buf, count, (ncclDataType_t)dtype, ncclSum, comm, stream);
}

int replay_n4py_broadcast(ncclComm_t comm, void *buf, size_t count, int dtype, int root, void *stream)
{
    CALL(ncclBroadcast, buf, buf, count, (ncclDataType_t)dtype, root, comm, stream);
}

int replay_n4py_split(ncclComm_t comm, int color, int key, ncclComm_t *child)
{
    CALL(ncclCommSplit, comm, color, key, child, NULL);
}

int replay_n4py_destroy(ncclComm_t comm)
{
    CALL(ncclCommDestroy, comm);
}
