/*
 * Cost of a forwarded call: N ncclAllReduce calls on a 1-rank communicator of
 * the fake NCCL, made through the symbol the program is linked against.  Run
 * under callgrind with and without LD_PRELOAD=libncclshim.so; collect only
 * bench_loop, so the difference divided by N is the shim's instructions per call.
 */
#include "nccl_abi.h"
#include "nccl_decls.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *nothing(void *arg)
{
    return arg;
}

__attribute__((noinline)) static int bench_loop(ncclComm_t comm, long n)
{
    static float x, y;
    int bad = 0;
    for (long i = 0; i < n; i++)
        bad |= ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL);
    return bad;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    /* Every configuration runs multi-threaded, as every NCCL application does:
     * glibc takes faster paths (in the fake's mutexes, for one) while a process
     * has never had a second thread, and the shim's rendezvous thread would
     * otherwise count against the shim. */
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) || pthread_join(t, NULL))
        return 1;
    ncclUniqueId id;
    ncclComm_t comm;
    if (ncclGetUniqueId(&id) || ncclCommInitRank(&comm, 1, id, 0))
        return 1;
    bench_loop(comm, 10); /* resolve lazily bound functions before counting */
    int bad = bench_loop(comm, n);
    ncclCommDestroy(comm);
    printf("calls %ld\n", n);
    return bad;
}
