/*
 * The replays' stand-in for libnccl_m2n.so (NVIDIA/nccl-extensions nccl_m2n,
 * what nccl.m2n.reshard runs in), copied to
 * <site-packages>/nccl/m2n/libnccl_m2n.so and linked to libnccl.  Its
 * presence in a process is evidence (NCCLSHIM_FULL_API); replay_m2n_reshard
 * makes the calls stacks_A.md §1.4 lists on the communicator it is given:
 * ncclMemAlloc, ncclCommWindowRegister, ncclDevCommCreate and ncclCommSplit
 * (reshard_split_comm.cu), then lets go of them.  Each call's result goes to
 * stdout as "M2N <function> <result>".
 */
#include "nccl_decls.h"
#include "store.h"

int replay_m2n_reshard(ncclComm_t comm, int key);

static int note(const char *fn, int r)
{
    char line[128];
    int n = snprintf(line, sizeof(line), "M2N %s %d\n", fn, r);
    store_write(line, (size_t)n);
    return r;
}

int replay_m2n_reshard(ncclComm_t comm, int key)
{
    void *buf = NULL;
    ncclWindow_t win = NULL;
    ncclComm_t child = NULL;
    /* Opaque to the shim and the fake: room for NCCL's structures. */
    static _Alignas(64) unsigned char reqs[4096], dev[4096];
    int bad = 0;
    app_note("ncclMemAlloc");
    bad |= note("ncclMemAlloc", ncclMemAlloc(&buf, 1 << 16)) != ncclSuccess;
    app_note("ncclCommWindowRegister");
    bad |= note("ncclCommWindowRegister", ncclCommWindowRegister(comm, buf, 1 << 16, &win, 0)) != ncclSuccess;
    app_note("ncclDevCommCreate");
    bad |= note("ncclDevCommCreate", ncclDevCommCreate(comm, (const ncclDevCommRequirements_t *)reqs,
                                                       (ncclDevComm_t *)dev)) != ncclSuccess;
    app_note("ncclCommSplit");
    bad |= note("ncclCommSplit", ncclCommSplit(comm, 0, key, &child, NULL)) != ncclSuccess;
    if (child) {
        app_note("ncclCommDestroy");
        bad |= note("ncclCommDestroy(split)", ncclCommDestroy(child)) != ncclSuccess;
    }
    app_note("ncclDevCommDestroy");
    bad |= note("ncclDevCommDestroy", ncclDevCommDestroy(comm, (const ncclDevComm_t *)dev)) != ncclSuccess;
    if (win) {
        app_note("ncclCommWindowDeregister");
        bad |= note("ncclCommWindowDeregister", ncclCommWindowDeregister(comm, win)) != ncclSuccess;
    }
    if (buf) {
        app_note("ncclMemFree");
        bad |= note("ncclMemFree", ncclMemFree(buf)) != ncclSuccess;
    }
    return bad;
}
