/*
 * The replays' stand-in for libtorch's ProcessGroupNCCL, copied to
 * <site-packages>/torch/lib/libtorch_replay.so, so that the shim sees its
 * NCCL calls come from torch's library (API family torch), and linked to
 * libnccl as libtorch_cuda.so is (found through its rpath, under
 * nvidia/nccl/lib).  As ProcessGroupNCCL does for a group made without a
 * bound device (slime's and SGLang's weight groups, torch's lazy training
 * groups): making the group calls no NCCL; the first collective makes the
 * communicator (getNCCLComm -> initNCCLComm): rank 0 calls ncclGetUniqueId
 * inside the library, under the Python frames of that collective, and hands
 * the ID to the others through the store (broadcastUniqueNCCLID); every rank
 * then calls ncclCommInitRankConfig with the config torch builds
 * (NCCL_CONFIG_INITIALIZER, blocking).
 */
#include "nccl_decls.h"
#include "store.h"

#include <stdlib.h>

struct replay_pg {
    ncclComm_t comm;
    int rank, nranks;
    char key[64];
};

void *replay_pg_new(int rank, int nranks, const char *key);
int replay_pg_broadcast(void *pg, void *buf, size_t count, int dtype, int root, void *stream);
int replay_pg_allreduce(void *pg, void *buf, size_t count, int dtype, void *stream);
int replay_pg_destroy(void *pg);

void *replay_pg_new(int rank, int nranks, const char *key)
{
    struct replay_pg *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->rank = rank;
    g->nranks = nranks;
    snprintf(g->key, sizeof(g->key), "%s", key);
    return g;
}

/* The communicator, made at the group's first collective. */
static int comm_of(struct replay_pg *g)
{
    if (g->comm)
        return ncclSuccess;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (g->rank == 0) {
        app_note("ncclGetUniqueId");
        int r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            return r;
        if (store_publish(g->key, &id) != 0)
            return ncclSystemError;
    } else if (store_fetch(g->key, &id) != 0) {
        return ncclSystemError;
    }
    ncclConfig_t cfg;
    client_config(&cfg, 1);
    app_note("ncclCommInitRankConfig");
    return ncclCommInitRankConfig(&g->comm, g->nranks, id, g->rank, &cfg);
}

int replay_pg_broadcast(void *pg, void *buf, size_t count, int dtype, int root, void *stream)
{
    struct replay_pg *g = pg;
    int r = comm_of(g);
    if (r != ncclSuccess)
        return r;
    app_note("ncclBroadcast");
    return ncclBroadcast(buf, buf, count, (ncclDataType_t)dtype, root, g->comm, stream);
}

int replay_pg_allreduce(void *pg, void *buf, size_t count, int dtype, void *stream)
{
    struct replay_pg *g = pg;
    int r = comm_of(g);
    if (r != ncclSuccess)
        return r;
    app_note("ncclAllReduce");
    return ncclAllReduce(buf, buf, count, (ncclDataType_t)dtype, ncclSum, g->comm, stream);
}

int replay_pg_destroy(void *pg)
{
    struct replay_pg *g = pg;
    int r = ncclSuccess;
    if (g->comm) {
        app_note("ncclCommDestroy");
        r = ncclCommDestroy(g->comm);
    }
    free(g);
    return r;
}
