/*
 * NCCL 2.31's nccl*Config collectives for tests/gpu/collconfig.py, as an
 * application built against NCCL 2.31 makes them: linked, not looked up.  On
 * an NCCL that lacks them (the GPU machine's 2.28.9) a lookup finds nothing
 * (dlsym answers as it would without the shim), but a linked call binds to the
 * preloaded shim's export, which answers a shim-only (ipc) communicator itself
 * and never calls NCCL.  Built by collconfig.py with `cc -shared -fPIC`; the
 * symbols stay undefined until it is loaded.  The config is passed through as
 * the caller made it (collconfig.py lays it out).
 */
#include <stddef.h>

typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;
extern int ncclBroadcastConfig(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root,
                               ncclComm_t comm, cudaStream_t stream, const void *config);
extern int ncclAllGatherConfig(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype, ncclComm_t comm,
                               cudaStream_t stream, const void *config);
extern int ncclAllReduceConfig(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
                               ncclComm_t comm, cudaStream_t stream, const void *config);
extern int ncclReduceConfig(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, int root,
                            ncclComm_t comm, cudaStream_t stream, const void *config);

int call_broadcast(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, cudaStream_t st, const void *cfg)
{
    return ncclBroadcastConfig(s, r, n, dt, root, c, st, cfg);
}

int call_allgather(const void *s, void *r, size_t n, int dt, ncclComm_t c, cudaStream_t st, const void *cfg)
{
    return ncclAllGatherConfig(s, r, n, dt, c, st, cfg);
}

int call_allreduce(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c, cudaStream_t st, const void *cfg)
{
    return ncclAllReduceConfig(s, r, n, dt, op, c, st, cfg);
}

int call_reduce(const void *s, void *r, size_t n, int dt, int op, int root, ncclComm_t c, cudaStream_t st,
                const void *cfg)
{
    return ncclReduceConfig(s, r, n, dt, op, root, c, st, cfg);
}
