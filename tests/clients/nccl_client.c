/*
 * A C client of NCCL, used by the tests in two ways:
 *   nccl_client linked <scenario>          calls the NCCL symbols it is linked
 *                                          against (like torch.distributed)
 *   nccl_client dlopen <lib> <scenario>    dlopen(RTLD_LOCAL) + dlsym(handle),
 *                                          like vLLM's ctypes pynccl
 * It prints "CHECK ok|fail <what>" lines that the .t scripts turn into TAP.
 * Scenarios: basic, threads, reenter.
 */
#define _GNU_SOURCE
/* NCCL 2.28's functions: the linked build links against the fake 2.28.9
 * (tests/clients/newer_client.c calls the later ones). */
#define NCCL_API_SINCE(version) ((version) <= 22809)
#include "nccl_abi.h"
#include "nccl_decls.h"
#include "check.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct api {
#define NCCL_PLAIN(ret, name, params, args) ret(*name) params;
#define NCCL_COMM(ret, name, params, args) ret(*name) params;
#define NCCL_DATA(name, op, params, args, count, dtype) ncclResult_t(*name) params;
#define NCCL_LIFE(ret, name, params, args) ret(*name) params;
#include "nccl_api.def"
};

static struct api A;

#ifndef NO_LINK
static void load_linked(void)
{
#define NCCL_PLAIN(ret, name, params, args) A.name = name;
#define NCCL_COMM(ret, name, params, args) A.name = name;
#define NCCL_DATA(name, op, params, args, count, dtype) A.name = name;
#define NCCL_LIFE(ret, name, params, args) A.name = name;
#include "nccl_api.def"
}
#else
static void load_linked(void)
{
    fprintf(stderr, "this build is not linked against libnccl\n");
    exit(2);
}
#endif

static void *load_dlopen(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("CHECK fail dlopen %s: %s\n", path, dlerror());
        exit(1);
    }
#define LOOK(name) A.name = (__typeof__(A.name))dlsym(h, #name);
#define NCCL_PLAIN(ret, name, params, args) LOOK(name)
#define NCCL_COMM(ret, name, params, args) LOOK(name)
#define NCCL_DATA(name, op, params, args, count, dtype) LOOK(name)
#define NCCL_LIFE(ret, name, params, args) LOOK(name)
#include "nccl_api.def"
    return h;
}

/* Which object does a function pointer live in? */
static const char *object_of(const void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "(none)";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

static void scenario_basic(void)
{
    int version = 0;
    CHECK(A.ncclGetVersion && A.ncclGetVersion(&version) == ncclSuccess && version > 0,
          "ncclGetVersion works (%d)", version);
    printf("# ncclGetVersion is in %s\n", object_of((void *)A.ncclGetVersion));
    printf("VERSION %d\n", version);
    printf("FNOBJ %s\n", object_of((void *)A.ncclAllReduce));

    ncclUniqueId id;
    memset(&id, 0x55, sizeof(id));
    CHECK(A.ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    int tail_zero = 1;
    for (int i = 64; i < 128; i++)
        tail_zero &= id.internal[i] == 0;
    /* Under the shim (NCCLSHIM_TAG other than none) the tail carries its mark. */
    int marked = memcmp(id.internal + 64, "ncclshmk", 8) == 0;
    printf("IDTAIL %s\n", tail_zero ? "zero" : marked ? "marked" : "other");
    CHECK(tail_zero || marked, "unique ID bytes 64..127 are zero, or the shim's mark");

    ncclComm_t comm = NULL;
    CHECK(A.ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess && comm, "ncclCommInitRank");
    printf("HANDLE %p\n", (void *)comm);
    int n = -1, r = -1, d = -1;
    CHECK(A.ncclCommCount(comm, &n) == ncclSuccess && n == 1, "ncclCommCount through the handle");
    CHECK(A.ncclCommUserRank(comm, &r) == ncclSuccess && r == 0, "ncclCommUserRank through the handle");
    CHECK(A.ncclCommCuDevice(comm, &d) == ncclSuccess && d >= 0, "ncclCommCuDevice through the handle");

    float src[4] = { 1, 2, 3, 4 }, dst[4] = { 0 };
    CHECK(A.ncclAllReduce(src, dst, 4, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess && dst[3] == 4,
          "ncclAllReduce forwards and moves the data");
    for (int i = 0; i < 3; i++)
        A.ncclBroadcast(src, dst, 4, ncclFloat32, 0, comm, NULL);
    double big[8] = { 0 };
    A.ncclGroupStart();
    A.ncclSend(big, 8, ncclFloat64, 0, comm, NULL);
    A.ncclRecv(big, 8, ncclFloat64, 0, comm, NULL);
    A.ncclGroupEnd();

    /* A 2.28 caller's config: its size ends at nvlinkCentricSched. */
    ncclConfig_t cfg = { offsetof(ncclConfig_t, graphUsageMode), NCCL_CONFIG_MAGIC, 22809, NCCL_CONFIG_UNDEF_INT,
                         NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, "Socket",
                         NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, "my-comm", NCCL_CONFIG_UNDEF_INT,
                         NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
                         NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
                         NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
                         NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
                         NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT };
    ncclComm_t child = NULL;
    CHECK(A.ncclCommSplit(comm, 0, 0, &child, &cfg) == ncclSuccess && child, "ncclCommSplit of a handle");
    ncclComm_t nochild = (ncclComm_t)(uintptr_t)1;
    CHECK(A.ncclCommSplit(comm, -1, 0, &nochild, NULL) == ncclSuccess && nochild == NULL,
          "ncclCommSplit with NCCL_SPLIT_NOCOLOR gives no communicator");
    CHECK(A.ncclAllReduce(src, dst, 4, ncclFloat32, ncclSum, child, NULL) == ncclSuccess, "AllReduce on the child");
    CHECK(A.ncclCommDestroy(child) == ncclSuccess, "ncclCommDestroy of the child");

    ncclComm_t c2 = NULL;
    ncclUniqueId id2;
    A.ncclGetUniqueId(&id2);
    CHECK(A.ncclCommInitRankConfig(&c2, 1, id2, 0, &cfg) == ncclSuccess, "ncclCommInitRankConfig with a config");
    const char *s = A.ncclGetErrorString(ncclInvalidUsage);
    CHECK(s && *s, "ncclGetErrorString: %s", s ? s : "(null)");
    ncclResult_t async = ncclInternalError;
    CHECK(A.ncclCommGetAsyncError(c2, &async) == ncclSuccess && async == ncclSuccess, "ncclCommGetAsyncError");
    CHECK(A.ncclCommAbort(c2) == ncclSuccess, "ncclCommAbort");
    /* `comm` stays alive: its traffic must be recorded at exit. */
    printf("ALIVE %p\n", (void *)comm);
}

struct thread_arg { int index, iterations; };

static void *thread_main(void *p)
{
    struct thread_arg *t = p;
    for (int it = 0; it < t->iterations; it++) {
        ncclUniqueId id;
        ncclComm_t comm = NULL;
        if (A.ncclGetUniqueId(&id) != ncclSuccess || A.ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
            continue;
        }
        float x[16] = { 0 }, y[16];
        for (int k = 0; k < 100; k++)
            if (A.ncclAllReduce(x, y, 16, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess)
                __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        if (A.ncclCommDestroy(comm) != ncclSuccess)
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void scenario_threads(int nthreads, int iterations)
{
    pthread_t th[64];
    struct thread_arg args[64];
    if (nthreads > 64)
        nthreads = 64;
    int before = failures;
    for (int i = 0; i < nthreads; i++) {
        args[i] = (struct thread_arg){ i, iterations };
        pthread_create(&th[i], NULL, thread_main, &args[i]);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    CHECK(failures == before, "%d threads x %d communicators x 100 all-reduces, no call failed", nthreads,
          iterations);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: %s linked <scenario> | dlopen <lib> <scenario>\n", argv[0]);
        return 2;
    }
    const char *scenario;
    int sarg; /* index of the scenario in argv; its parameters follow it */
    if (strcmp(argv[1], "linked") == 0) {
        load_linked();
        sarg = 2;
    } else if (strcmp(argv[1], "dlopen") == 0 && argc >= 4) {
        load_dlopen(argv[2]);
        sarg = 3;
    } else {
        fprintf(stderr, "bad mode %s\n", argv[1]);
        return 2;
    }
    scenario = argv[sarg];
    if (strcmp(scenario, "basic") == 0)
        scenario_basic();
    else if (strcmp(scenario, "threads") == 0)
        scenario_threads(argc > sarg + 1 ? atoi(argv[sarg + 1]) : 16, argc > sarg + 2 ? atoi(argv[sarg + 2]) : 20);
    else if (strcmp(scenario, "reenter") == 0) {
        ncclUniqueId id;
        ncclComm_t comm = NULL;
        A.ncclGetUniqueId(&id);
        CHECK(A.ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "init with a re-entrant NCCL returns");
        CHECK(A.ncclCommDestroy(comm) == ncclSuccess, "destroy after re-entrant init");
    } else if (strcmp(scenario, "initall") == 0) {
        /* One process holding every rank (ncclCommInitAll): one record per rank. */
        ncclComm_t comms[3] = { NULL, NULL, NULL };
        CHECK(A.ncclCommInitAll(comms, 3, NULL) == ncclSuccess && comms[0] && comms[2], "ncclCommInitAll");
        int r = -1;
        CHECK(A.ncclCommUserRank(comms[2], &r) == ncclSuccess && r == 2, "rank of the third handle");
        for (int i = 0; i < 3; i++)
            A.ncclCommDestroy(comms[i]);
    } else if (strcmp(scenario, "shrink") == 0) {
        /* Built against 2.28, run against an NCCL that may lack ncclCommShrink. */
        ncclUniqueId id;
        ncclComm_t comm = NULL, small = NULL;
        A.ncclGetUniqueId(&id);
        A.ncclCommInitRank(&comm, 1, id, 0);
        int r = A.ncclCommShrink ? (int)A.ncclCommShrink(comm, NULL, 0, &small, NULL, 0) : -1;
        printf("SHRINK %d\n", (int)r);
        A.ncclCommDestroy(comm);
    } else {
        fprintf(stderr, "unknown scenario %s\n", scenario);
        return 2;
    }
    return failures ? 1 : 0;
}
