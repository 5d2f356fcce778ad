/*
 * A client of NCCL 2.29/2.30's functions (tests/t/19-identity.t), run against
 * the fake NCCL 2.30.7 (tests/fake/new), which exports one function of a
 * release the shim has never seen (ncclCommFutureQuery) and rejects every
 * communicator it did not make.
 *
 *   newer_client linked <scenario> [args]        calls the symbols it is linked against
 *   newer_client dlopen <lib> <scenario> [args]  dlopen + dlsym(handle), like nccl4py
 *
 * Scenarios:
 *   nccl   a 1-rank communicator that NCCL makes (passthrough or socket):
 *          every 2.29/2.30 function on it, and the unknown one
 *   shim   a 1-rank communicator the shim drops (NCCLSHIM_RULES ...:drop)
 *   reuse N     N communicators made and destroyed in turn, each carrying
 *               i % 5 all-reduces ("REUSE i <comm> <n>")
 *   reuse2 N    N times two communicators made and destroyed by one
 *               thread and used by another, which keeps calling (the
 *               shim's last-seen communicator of that thread must not
 *               outlive a destroy)
 *   netrace N   two threads at once: N socket inits (marked IDs) and N
 *               passthrough ones (unmarked IDs) while NCCL_NET is set
 * Prints "CHECK ok|fail <what>" lines for the test, and "HANDLE <ptr>".
 */
#define _GNU_SOURCE
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
#define NCCL_VOID(name, params, args) void(*name) params;
#define NCCL_COMM(ret, name, params, args) ret(*name) params;
#define NCCL_DATA(name, op, params, args, count, dtype) ncclResult_t(*name) params;
#define NCCL_LIFE(ret, name, params, args) ret(*name) params;
#include "nccl_api.def"
    ncclResult_t (*ncclCommFutureQuery)(ncclComm_t comm, int *out);
};

static struct api A;

#ifndef NO_LINK
ncclResult_t ncclCommFutureQuery(ncclComm_t comm, int *out);
static void load_linked(void)
{
/* linked against the fake 2.30.7: its functions only (config_client.c has 2.31's) */
#define NCCL_API_SINCE(v) ((v) <= 23007)
#define LINK(name) A.name = name;
#define NCCL_PLAIN(ret, name, params, args) LINK(name)
#define NCCL_VOID(name, params, args) LINK(name)
#define NCCL_COMM(ret, name, params, args) LINK(name)
#define NCCL_DATA(name, op, params, args, count, dtype) LINK(name)
#define NCCL_LIFE(ret, name, params, args) LINK(name)
#include "nccl_api.def"
#undef NCCL_API_SINCE
    LINK(ncclCommFutureQuery)
}
#else
static void load_linked(void)
{
    fprintf(stderr, "this build is not linked against libnccl\n");
    exit(2);
}
#endif

static void load_dlopen(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("CHECK fail dlopen %s: %s\n", path, dlerror());
        exit(1);
    }
#define LOOK(name) *(void **)&A.name = dlsym(h, #name);
#define NCCL_PLAIN(ret, name, params, args) LOOK(name)
#define NCCL_VOID(name, params, args) LOOK(name)
#define NCCL_COMM(ret, name, params, args) LOOK(name)
#define NCCL_DATA(name, op, params, args, count, dtype) LOOK(name)
#define NCCL_LIFE(ret, name, params, args) LOOK(name)
#include "nccl_api.def"
    LOOK(ncclCommFutureQuery)
}

/* A caller's 2.30 config: every field set to a value that is not the default. */
static void config_2_30(ncclConfig_t *c)
{
    memset(c, 0, sizeof(*c));
    c->size = offsetof(ncclConfig_t, launchOrderImplicit); /* 2.30's sizeof */
    c->magic = NCCL_CONFIG_MAGIC;
    c->version = 23007;
    c->blocking = 1;
    c->cgaClusterSize = 2;
    c->minCTAs = 3;
    c->maxCTAs = 5;
    c->netName = NULL;
    c->splitShare = 1;
    c->trafficClass = 6;
    c->commName = "newer";
    c->collnetEnable = 0;
    c->CTAPolicy = 1;
    c->shrinkShare = 1;
    c->nvlsCTAs = 7;
    c->nChannelsPerNetPeer = 8;
    c->nvlinkCentricSched = 1;
    c->graphUsageMode = 1;
    c->numRmaCtx = 9;
    c->maxP2pPeers = 10;
    c->graphStreamOrdering = 0;
}

static ncclComm_t make_comm(int config)
{
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    ncclConfig_t cfg;
    config_2_30(&cfg);
    ncclResult_t r = A.ncclGetUniqueId(&id);
    if (r == ncclSuccess)
        r = config ? A.ncclCommInitRankConfig(&comm, 1, id, 0, &cfg) : A.ncclCommInitRank(&comm, 1, id, 0);
    CHECK(r == ncclSuccess && comm, "a 1-rank communicator (%s)", config ? "InitRankConfig, a 2.30 config" : "InitRank");
    printf("HANDLE %p\n", (void *)comm);
    return comm;
}

/* Every 2.29/2.30 function on a communicator NCCL made. */
static void scenario_nccl(void)
{
    ncclComm_t comm = make_comm(1);
    int n = -1;
    CHECK(A.ncclCommFutureQuery && A.ncclCommFutureQuery(comm, &n) == ncclSuccess && n == 1,
          "a function of an NCCL newer than the shim gets NCCL's own communicator (n=%d)", n);
    uint64_t v = 99;
    CHECK(A.ncclCommMemStats(comm, ncclStatGpuMemTotal, &v) == ncclSuccess && v > 0, "ncclCommMemStats (total %llu)",
          (unsigned long long)v);
    CHECK(A.ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess, "ncclCommSuspend");
    CHECK(A.ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v) == ncclSuccess && v == 1, "suspended: stat 1");
    CHECK(A.ncclCommResume(comm) == ncclSuccess, "ncclCommResume");
    ncclUniqueId gid;
    ncclComm_t big = NULL;
    CHECK(A.ncclCommGetUniqueId(comm, &gid) == ncclSuccess, "ncclCommGetUniqueId");
    CHECK(A.ncclCommGrow(comm, 2, &gid, -1, &big, NULL) == ncclSuccess && big, "ncclCommGrow to 2 ranks");
    int count = -1;
    CHECK(big && A.ncclCommCount(big, &count) == ncclSuccess && count == 2, "the grown communicator has 2 ranks");
    /* The rank the grow adds (here in the same process: the fake NCCL has no bootstrap). */
    ncclComm_t added = NULL;
    CHECK(A.ncclCommGrow(NULL, 2, &gid, 1, &added, NULL) == ncclSuccess && added, "ncclCommGrow as the added rank");
    CHECK(!added || A.ncclCommDestroy(added) == ncclSuccess, "destroy the added rank's communicator");
    float x[4] = { 1, 2, 3, 4 };
    CHECK(big && A.ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, big, NULL) == ncclSuccess, "AllReduce on it");
    ncclWindow_t win = NULL;
    void *user = (void *)1;
    CHECK(A.ncclCommWindowRegister(comm, x, sizeof(x), &win, 0) == ncclSuccess && win, "ncclCommWindowRegister");
    CHECK(A.ncclWinGetUserPtr(comm, win, &user) == ncclSuccess, "ncclWinGetUserPtr");
    CHECK(A.ncclPutSignal(x, 4, ncclFloat32, 0, win, 0, 0, 0, 0, comm, NULL) == ncclSuccess, "ncclPutSignal");
    CHECK(A.ncclSignal(0, 0, 0, 0, comm, NULL) == ncclSuccess, "ncclSignal");
    ncclWaitSignalDesc_t desc = { 1, 0, 0, 0 };
    CHECK(A.ncclWaitSignal(1, &desc, comm, NULL) == ncclSuccess, "ncclWaitSignal");
    CHECK(A.ncclCommWindowDeregister(comm, win) == ncclSuccess, "ncclCommWindowDeregister");
    ncclTeam_t w = A.ncclTeamWorld(comm), l = A.ncclTeamLsa(comm), rl = A.ncclTeamRail(comm);
    CHECK(w.nRanks == 1 && w.rank == 0 && w.stride == 1 && l.nRanks == 1 && rl.nRanks == 1,
          "NCCL's teams of its own communicator: world %d,%d,%d, lsa %d,%d,%d, rail %d,%d,%d", w.nRanks, w.rank,
          w.stride, l.nRanks, l.rank, l.stride, rl.nRanks, rl.rank, rl.stride);
    CHECK(A.ncclTeamRankToWorld(comm, w, 0) == 0 && A.ncclTeamRankToLsa(comm, l, 0) == 0,
          "ncclTeamRankToWorld and ncclTeamRankToLsa reach NCCL");
    ncclCommProperties_t props = { sizeof(props), NCCL_API_MAGIC, 23007, -9, -9, -9, -9, 1, 1, 9, 9, 1, 9 };
    CHECK(A.ncclCommQueryProperties(comm, &props) == ncclSuccess && props.rank == 0 && props.nRanks == 1,
          "ncclCommQueryProperties reaches NCCL (rank %d of %d)", props.rank, props.nRanks);
    /* The device API's structures are opaque to the shim: the fake only checks they are there. */
    long long reqs[32] = { 0 }, devcomm[64];
    CHECK(A.ncclDevCommCreate(comm, (const ncclDevCommRequirements_t *)reqs, (ncclDevComm_t *)devcomm) == ncclSuccess &&
              A.ncclDevCommDestroy(comm, (const ncclDevComm_t *)devcomm) == ncclSuccess,
          "ncclDevCommCreate and ncclDevCommDestroy reach NCCL");
    ncclParamHandle_t ph = NULL;
    const char *str = NULL;
    CHECK(A.ncclParamBind(&ph, "NCCL_NET") == ncclSuccess && A.ncclParamGetStr(ph, &str) == ncclSuccess && str,
          "ncclParamBind and ncclParamGetStr (NCCL_NET '%s')", str ? str : "(null)");
    A.ncclParamDumpAll();
    CHECK(!big || A.ncclCommDestroy(big) == ncclSuccess, "destroy the grown communicator");
    CHECK(A.ncclCommDestroy(comm) == ncclSuccess, "destroy");
}

/* The same calls on a communicator the shim dropped: answered by the shim. */
static void scenario_shim(void)
{
    ncclComm_t comm = make_comm(0);
    uint64_t v = 99;
    CHECK(A.ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess, "dropped: ncclCommSuspend succeeds");
    CHECK(A.ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclInvalidUsage,
          "dropped: a second ncclCommSuspend is refused with ncclInvalidUsage, as NCCL refuses it");
    CHECK(A.ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v) == ncclSuccess && v == 1,
          "dropped: ncclCommMemStats says suspended");
    float x[4] = { 1, 2, 3, 4 };
    CHECK(A.ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, NULL) == ncclInvalidUsage,
          "dropped and suspended: an operation is refused");
    CHECK(A.ncclCommResume(comm) == ncclSuccess, "dropped: ncclCommResume");
    CHECK(A.ncclCommMemStats(comm, ncclStatGpuMemTotal, &v) == ncclSuccess && v == 0,
          "dropped: the shim's own memory for it is 0 (%llu)", (unsigned long long)v);
    CHECK(A.ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "dropped: resumed, counted");
    ncclUniqueId gid;
    ncclComm_t big = (ncclComm_t)(uintptr_t)1;
    CHECK(A.ncclCommGetUniqueId(comm, &gid) == ncclInvalidUsage, "dropped: ncclCommGetUniqueId refused");
    CHECK(A.ncclCommGrow(comm, 2, &gid, -1, &big, NULL) == ncclInvalidUsage && big == NULL,
          "dropped: ncclCommGrow refused, *newcomm NULL");
    void *user = NULL;
    ncclWaitSignalDesc_t desc = { 1, 0, 0, 0 };
    CHECK(A.ncclWinGetUserPtr(comm, (ncclWindow_t)x, &user) == ncclInvalidUsage &&
              A.ncclPutSignal(x, 4, ncclFloat32, 0, (ncclWindow_t)x, 0, 0, 0, 0, comm, NULL) == ncclInvalidUsage &&
              A.ncclSignal(0, 0, 0, 0, comm, NULL) == ncclInvalidUsage &&
              A.ncclWaitSignal(1, &desc, comm, NULL) == ncclInvalidUsage,
          "dropped: window and signal calls refused with ncclInvalidUsage");
    /* The device API's host functions: answered, never forwarded (NCCL would
     * read the handle at its own offsets, and Lsa and Rail write into it). */
    ncclTeam_t w = A.ncclTeamWorld(comm), l = A.ncclTeamLsa(comm), rl = A.ncclTeamRail(comm);
    CHECK(w.nRanks == 1 && w.rank == 0 && w.stride == 1, "dropped: ncclTeamWorld is the world team (%d,%d,%d)",
          w.nRanks, w.rank, w.stride);
    CHECK(!l.nRanks && !l.rank && !l.stride && !rl.nRanks && !rl.rank && !rl.stride,
          "dropped: ncclTeamLsa and ncclTeamRail give NCCL's empty team (no device runtime)");
    CHECK(A.ncclTeamRankToWorld(comm, w, 0) == 0 && A.ncclTeamRankToLsa(comm, w, 0) == -1,
          "dropped: ncclTeamRankToWorld computed, ncclTeamRankToLsa -1");
    ncclCommProperties_t props = { sizeof(props), NCCL_API_MAGIC, 23007, -9, -9, -9, -9, 1, 1, 9, 9, 1, 9 };
    CHECK(A.ncclCommQueryProperties(comm, &props) == ncclSuccess && props.rank == 0 && props.nRanks == 1 &&
              props.nvmlDev == -1 && !props.deviceApiSupport && !props.multimemSupport &&
              props.ginType == ncclGinTypeNone && props.railedGinType == ncclGinTypeNone && !props.hostRmaSupport,
          "dropped: ncclCommQueryProperties answered: rank 0 of 1, no device API, no GIN");
    ncclCommProperties_t old = { sizeof(props), NCCL_API_MAGIC, 22902, -9, -9, -9, -9, 1, 1, 9, 9, 1, 9 };
    CHECK(A.ncclCommQueryProperties(comm, &old) == ncclSuccess && old.rank == 0 && old.ginType == 9 &&
              old.nLsaTeams == 9 && old.railedGinType == 9,
          "dropped: a 2.29.2 properties struct gets only the fields NCCL fills for that version");
    ncclCommProperties_t raw = { sizeof(props), 0, 23007, -9, -9, -9, -9, 1, 1, 9, 9, 1, 9 };
    CHECK(A.ncclCommQueryProperties(comm, &raw) == ncclInvalidUsage && raw.rank == -9,
          "dropped: an uninitialised properties struct is refused, as NCCL refuses it");
    int n = -1;
    /* Not in the shim's table: the documented limit of shim-only handles
     * (docs/design.md).  The fake NCCL rejects the pointer; a real one would not. */
    CHECK(A.ncclCommFutureQuery(comm, &n) == ncclInvalidArgument,
          "dropped: a function the shim does not know reaches NCCL with the shim's handle (the documented limit)");
    CHECK(A.ncclCommDestroy(comm) == ncclSuccess, "dropped: destroy");
    int count = -1;
    CHECK(A.ncclCommCount(comm, &count) == ncclInvalidArgument, "dropped: after destroy the handle is refused");
    CHECK(A.ncclCommDestroy(comm) == ncclInvalidArgument, "dropped: a second destroy is refused, never forwarded");
}

static void scenario_reuse(int n)
{
    float x[4] = { 0 };
    int ok = 1;
    for (int i = 0; i < n; i++) {
        ncclUniqueId id;
        ncclComm_t comm = NULL;
        if (A.ncclGetUniqueId(&id) != ncclSuccess || A.ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
            ok = 0;
            break;
        }
        for (int k = 0; k < i % 5; k++)
            ok &= A.ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess;
        printf("REUSE %d %p %d\n", i, (void *)comm, i % 5);
        ok &= A.ncclCommDestroy(comm) == ncclSuccess;
    }
    CHECK(ok, "%d communicators made, used and destroyed in turn", n);
}

/* reuse2: the main thread makes and destroys, a user thread calls on each
 * communicator in turn, handed over under a mutex. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ncclComm_t comm;                    /* to use; NULL once used */
    int calls, done, bad;
} g_hand = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0 };

static void *reuse_user(void *arg)
{
    (void)arg;
    float x[4] = { 0 };
    pthread_mutex_lock(&g_hand.mu);
    for (;;) {
        while (!g_hand.comm && !g_hand.done)
            pthread_cond_wait(&g_hand.cv, &g_hand.mu);
        if (!g_hand.comm)
            break;
        for (int k = 0; k < g_hand.calls; k++)
            g_hand.bad |= A.ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, g_hand.comm, NULL) != ncclSuccess;
        g_hand.comm = NULL;
        pthread_cond_broadcast(&g_hand.cv);
    }
    pthread_mutex_unlock(&g_hand.mu);
    return NULL;
}

/* Has the user thread make `calls` calls on `comm`, and waits until it has. */
static void hand_over(ncclComm_t comm, int calls)
{
    pthread_mutex_lock(&g_hand.mu);
    g_hand.calls = calls;
    g_hand.comm = comm;
    pthread_cond_broadcast(&g_hand.cv);
    while (g_hand.comm)
        pthread_cond_wait(&g_hand.cv, &g_hand.mu);
    pthread_mutex_unlock(&g_hand.mu);
}

static void scenario_reuse2(int n)
{
    int ok = 1;
    pthread_t t;
    pthread_create(&t, NULL, reuse_user, NULL);
    /* Two at a time, destroyed in the other order than made: with
     * FAKE_NCCL_REUSE_FIFO an address comes back with another of the shim's
     * structs than it had. */
    for (int i = 0; i < n; i++) {
        ncclComm_t comm[2] = { NULL, NULL };
        for (int j = 0; j < 2; j++) {
            ncclUniqueId id;
            if (A.ncclGetUniqueId(&id) != ncclSuccess || A.ncclCommInitRank(&comm[j], 1, id, 0) != ncclSuccess)
                ok = 0;
        }
        if (!ok)
            break;
        for (int j = 0; j < 2; j++)
            hand_over(comm[j], 1 + (2 * i + j) % 5);
        for (int j = 1; j >= 0; j--) {
            printf("REUSE %d %p %d\n", i, (void *)comm[j], 1 + (2 * i + j) % 5);
            ok &= A.ncclCommDestroy(comm[j]) == ncclSuccess;
        }
    }
    pthread_mutex_lock(&g_hand.mu);
    g_hand.done = 1;
    pthread_cond_broadcast(&g_hand.cv);
    pthread_mutex_unlock(&g_hand.mu);
    pthread_join(t, NULL);
    CHECK(ok && !g_hand.bad, "%d communicators made and destroyed by one thread, used by another", n);
}

/* Two threads released at once: socket inits and passthrough inits side by side. */
static int g_race_n;
static pthread_barrier_t g_barrier;

static void *race(void *arg)
{
    int socket = (int)(intptr_t)arg, bad = 0;
    pthread_barrier_wait(&g_barrier);
    for (int i = 0; i < g_race_n; i++) {
        ncclUniqueId id;
        ncclComm_t comm = NULL;
        if (A.ncclGetUniqueId(&id) != ncclSuccess) {
            bad++;
            continue;
        }
        if (!socket)
            memset(id.internal + 64, 0, 64); /* unmarked: no rendezvous, passthrough */
        if (A.ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess || A.ncclCommDestroy(comm) != ncclSuccess)
            bad++;
    }
    return (void *)(intptr_t)bad;
}

static void scenario_netrace(int n)
{
    g_race_n = n;
    pthread_barrier_init(&g_barrier, NULL, 2);
    pthread_t a, b;
    void *ra = NULL, *rb = NULL;
    pthread_create(&a, NULL, race, (void *)(intptr_t)1);
    pthread_create(&b, NULL, race, (void *)(intptr_t)0);
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    CHECK(!ra && !rb, "%d socket and %d passthrough inits at once, all made and destroyed", n, n);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: %s linked <scenario> [n] | dlopen <lib> <scenario> [n]\n", argv[0]);
        return 2;
    }
    int sarg = 2;
    if (strcmp(argv[1], "linked") == 0) {
        load_linked();
    } else if (strcmp(argv[1], "dlopen") == 0 && argc >= 4) {
        load_dlopen(argv[2]);
        sarg = 3;
    } else {
        return 2;
    }
    const char *s = argv[sarg];
    int n = argc > sarg + 1 ? atoi(argv[sarg + 1]) : 10;
    if (strcmp(s, "nccl") == 0)
        scenario_nccl();
    else if (strcmp(s, "shim") == 0)
        scenario_shim();
    else if (strcmp(s, "reuse") == 0)
        scenario_reuse(n);
    else if (strcmp(s, "reuse2") == 0)
        scenario_reuse2(n);
    else if (strcmp(s, "netrace") == 0)
        scenario_netrace(n);
    else
        return 2;
    return failures ? 1 : 0;
}
