/*
 * TAP test of the fake libnccl itself (tests/fake/fake_nccl.c).
 *
 *   tests/fake/test_fake [DIR]
 *
 * DIR holds a/, b/ and old/libnccl.so.2: argv[1], else $FAKE_NCCL_DIR, else
 * the directory of this executable.  It sets FAKE_NCCL_LOG to a temporary
 * file before loading the libraries and checks the lines they write.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_abi.h"

static int test_no, failures;

static void ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%sok %d - ", cond ? "" : "not ", ++test_no);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!cond)
        failures++;
}

static char log_path[PATH_MAX];

/* The whole log, NUL-terminated (caller frees). */
static char *read_log(void)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return strdup("");
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - 1 - len, f)) > 0) {
        len += n;
        if (len == cap - 1)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    fclose(f);
    return buf;
}

/* The last log line that starts with `prefix`, copied into out. */
static int last_line(const char *prefix, char *out, size_t outsz)
{
    char *log = read_log();
    int found = 0;
    for (char *p = log; *p;) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (strncmp(p, prefix, strlen(prefix)) == 0) {
            snprintf(out, outsz, "%.*s", (int)len, p);
            found = 1;
        }
        p += len + (nl != NULL);
    }
    free(log);
    return found;
}

typedef ncclResult_t (*getVersion_t)(int *);
typedef const char *(*getErrorString_t)(ncclResult_t);
typedef ncclResult_t (*getUniqueId_t)(ncclUniqueId *);
typedef ncclResult_t (*initRank_t)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*initRankConfig_t)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
typedef ncclResult_t (*initAll_t)(ncclComm_t *, int, const int *);
typedef ncclResult_t (*commFn_t)(ncclComm_t);
typedef ncclResult_t (*commInt_t)(ncclComm_t, int *);
typedef ncclResult_t (*asyncErr_t)(ncclComm_t, ncclResult_t *);
typedef ncclResult_t (*allReduce_t)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                    ncclComm_t, cudaStream_t);
typedef ncclResult_t (*group_t)(void);
typedef ncclResult_t (*split_t)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
typedef ncclResult_t (*shrink_t)(ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int);
typedef ncclResult_t (*preMul_t)(ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t,
                                 ncclComm_t);
typedef ncclResult_t (*opDestroy_t)(ncclRedOp_t, ncclComm_t);

#define SYM(h, type, name) ((type)dlsym(h, name))

/* threads hammering one comm: every call must give one whole log line */
#define N_THREADS 8
#define N_CALLS 200
static allReduce_t stress_allReduce;
static ncclComm_t stress_comm;

static void *stress(void *arg)
{
    (void)arg;
    float x[8] = {1}, y[8];
    for (int i = 0; i < N_CALLS; i++)
        if (stress_allReduce(x, y, 8, ncclFloat32, ncclMax, stress_comm, NULL) != ncclSuccess)
            return (void *)1;
    return NULL;
}

/* The table's functions, and those of each release the fakes stand for
 * (nccl_api.def's version groups: the fakes export exactly these). */
#define NAME(name) #name,
static const char *const api_names[] = {
#define NCCL_PLAIN(ret, name, params, args) NAME(name)
#define NCCL_COMM(ret, name, params, args) NAME(name)
#define NCCL_LIFE(ret, name, params, args) NAME(name)
#define NCCL_DATA(name, op, params, args, count, dtype) NAME(name)
#define NCCL_VOID(name, params, args) NAME(name)
#include "nccl_api.def"
};
#define NCCL_API_SINCE(v) ((v) <= 21805)
static const char *const api_2_18[] = {
#define NCCL_PLAIN(ret, name, params, args) NAME(name)
#define NCCL_COMM(ret, name, params, args) NAME(name)
#define NCCL_LIFE(ret, name, params, args) NAME(name)
#define NCCL_DATA(name, op, params, args, count, dtype) NAME(name)
#define NCCL_VOID(name, params, args) NAME(name)
#include "nccl_api.def"
};
#undef NCCL_API_SINCE
#define NCCL_API_SINCE(v) ((v) <= 22809)
static const char *const api_2_28[] = {
#define NCCL_PLAIN(ret, name, params, args) NAME(name)
#define NCCL_COMM(ret, name, params, args) NAME(name)
#define NCCL_LIFE(ret, name, params, args) NAME(name)
#define NCCL_DATA(name, op, params, args, count, dtype) NAME(name)
#define NCCL_VOID(name, params, args) NAME(name)
#include "nccl_api.def"
};
#undef NCCL_API_SINCE
#define NCCL_API_SINCE(v) ((v) <= 23007)
static const char *const api_2_30[] = {
#define NCCL_PLAIN(ret, name, params, args) NAME(name)
#define NCCL_COMM(ret, name, params, args) NAME(name)
#define NCCL_LIFE(ret, name, params, args) NAME(name)
#define NCCL_DATA(name, op, params, args, count, dtype) NAME(name)
#define NCCL_VOID(name, params, args) NAME(name)
#include "nccl_api.def"
};
#undef NCCL_API_SINCE
#undef NAME
#define N_API (sizeof api_names / sizeof api_names[0])
struct release { const char *const *names; size_t n; };
static const struct release rel_2_18 = { api_2_18, sizeof api_2_18 / sizeof api_2_18[0] };
static const struct release rel_2_28 = { api_2_28, sizeof api_2_28 / sizeof api_2_28[0] };
static const struct release rel_2_30 = { api_2_30, sizeof api_2_30 / sizeof api_2_30[0] };
static const struct release rel_2_32 = { api_names, N_API };

static int in_release(const struct release *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(name, r->names[i]))
            return 1;
    return 0;
}

static void *open_lib(const char *dir, const char *variant, int flags)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/libnccl.so.2", dir, variant);
    void *h = dlopen(path, flags);
    if (!h)
        fprintf(stderr, "# dlopen %s: %s\n", path, dlerror());
    return h;
}

static void check_exports(void *h, const char *variant, const struct release *rel)
{
    int good = 1;
    for (size_t i = 0; i < N_API; i++) {
        char pname[128];
        snprintf(pname, sizeof pname, "p%s", api_names[i]);
        void *n = dlsym(h, api_names[i]), *p = dlsym(h, pname);
        int want = in_release(rel, api_names[i]);
        if (want ? !(n && p && n == p) : (n || p)) {
            fprintf(stderr, "# %s: %s %s\n", variant, api_names[i],
                    want ? "missing or not an alias of pnccl*" : "exported but too new");
            good = 0;
        }
    }
    ok(good, "%s: the %zu functions of its release in nccl_api.def (of %zu), each nccl* an alias of pnccl*",
       variant, rel->n, N_API);
}

int main(int argc, char **argv)
{
    char dir[PATH_MAX];
    const char *env = getenv("FAKE_NCCL_DIR");
    if (argc > 1)
        snprintf(dir, sizeof dir, "%s", argv[1]);
    else if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            printf("1..0 # SKIP cannot find the fake libraries\n");
            return 0;
        }
        exe[n] = 0;
        snprintf(dir, sizeof dir, "%s", dirname(exe));
    }

    const char *tmp = getenv("TMPDIR");
    snprintf(log_path, sizeof log_path, "%s/fake_nccl_log.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(log_path);
    if (fd < 0) {
        printf("1..0 # SKIP mkstemp failed\n");
        return 0;
    }
    close(fd);
    setenv("FAKE_NCCL_LOG", log_path, 1);
    unsetenv("FAKE_NCCL_FAIL_INIT");
    unsetenv("FAKE_NCCL_INIT_DELAY_MS");
    unsetenv("FAKE_NCCL_DEVICE");
    unsetenv("FAKE_NCCL_REENTER");
    unsetenv("FAKE_NCCL_SPLIT_NRANKS");
    unsetenv("FAKE_NCCL_INPROGRESS_POLLS");

    printf("1..36\n");
    char line[4096], prefix[64];
    int pid = (int)getpid();

    /* RTLD_GLOBAL so that the re-entrancy hook's dlsym(RTLD_DEFAULT) finds it */
    void *a = open_lib(dir, "a", RTLD_NOW | RTLD_GLOBAL);
    ok(a != NULL, "dlopen a/libnccl.so.2 from %s", dir);
    if (!a) {
        unlink(log_path);
        return 1;
    }
    check_exports(a, "a", &rel_2_28);

    int v = 0;
    ncclResult_t r = SYM(a, getVersion_t, "ncclGetVersion")(&v);
    ok(r == ncclSuccess && v == 22809, "a: ncclGetVersion gives 22809 (got %d)", v);
    snprintf(prefix, sizeof prefix, "a %d ncclGetVersion ", pid);
    ok(last_line(prefix, line, sizeof line) && strstr(line, " *version=22809 -> 0"),
       "a: the call is logged: %s", line);

    getErrorString_t errstr = SYM(a, getErrorString_t, "ncclGetErrorString");
    ok(!strcmp(errstr(ncclSuccess), "no error") &&
           strstr(errstr(ncclInvalidArgument), "invalid argument"),
       "a: ncclGetErrorString(0) is \"no error\"");

    /* unique ID layout */
    ncclUniqueId id1, id2;
    memset(&id1, 0xff, sizeof id1);
    getUniqueId_t getId = SYM(a, getUniqueId_t, "ncclGetUniqueId");
    r = getId(&id1);
    getId(&id2);
    int tail_zero = 1, head_nonzero = 0;
    for (int i = 0; i < 40; i++)
        head_nonzero |= id1.internal[i] != 0;
    for (int i = 40; i < NCCL_UNIQUE_ID_BYTES; i++)
        tail_zero &= id1.internal[i] == 0;
    ok(r == ncclSuccess && head_nonzero && tail_zero && memcmp(&id1, &id2, 40) != 0,
       "a: unique ID: 40 random bytes, bytes 40..127 zero, two IDs differ");
    char hex[17];
    for (int i = 0; i < 8; i++)
        sprintf(hex + 2 * i, "%02x", (unsigned char)id2.internal[i]);
    snprintf(prefix, sizeof prefix, "a %d ncclGetUniqueId ", pid);
    char want[256];
    snprintf(want, sizeof want, " id=%s idtail=1 -> 0", hex);
    ok(last_line(prefix, line, sizeof line) && strstr(line, want), "a: logged as %s", line);

    /* init */
    initRank_t initRank = SYM(a, initRank_t, "ncclCommInitRank");
    commInt_t count = SYM(a, commInt_t, "ncclCommCount");
    commInt_t userRank = SYM(a, commInt_t, "ncclCommUserRank");
    commInt_t cuDevice = SYM(a, commInt_t, "ncclCommCuDevice");
    commFn_t destroy = SYM(a, commFn_t, "ncclCommDestroy");
    ncclComm_t comm = NULL;
    setenv("FAKE_NCCL_DEVICE", "3", 1);
    r = initRank(&comm, 1, id1, 0);
    unsetenv("FAKE_NCCL_DEVICE");
    int n = -1, rk = -1, dev = -1;
    ok(r == ncclSuccess && comm && count(comm, &n) == 0 && n == 1 && userRank(comm, &rk) == 0 &&
           rk == 0 && cuDevice(comm, &dev) == 0 && dev == 3,
       "a: ncclCommInitRank(nranks 1): count 1, rank 0, device 3 (FAKE_NCCL_DEVICE)");
    snprintf(prefix, sizeof prefix, "a %d ncclCommInitRank ", pid);
    snprintf(want, sizeof want, " nranks=1 id=");
    for (int i = 0; i < 8; i++)
        sprintf(want + strlen(want), "%02x", (unsigned char)id1.internal[i]);
    snprintf(want + strlen(want), sizeof want - strlen(want),
             " idtail=1 rank=0 *newcomm=0x%" PRIxPTR " net=default -> 0", (uintptr_t)comm);
    ok(last_line(prefix, line, sizeof line) && strstr(line, want), "a: logged as %s", line);

    ncclComm_t bad = NULL;
    ok(initRank(&bad, 2, id1, 2) == ncclInvalidArgument && bad == NULL &&
           initRank(&bad, 0, id1, 0) == ncclInvalidArgument &&
           initRank(NULL, 1, id1, 0) == ncclInvalidArgument,
       "a: ncclCommInitRank rejects rank >= nranks, nranks 0, NULL newcomm");

    /* one-rank allreduce copies */
    allReduce_t allReduce = SYM(a, allReduce_t, "ncclAllReduce");
    float src[4] = {1, 2, 3, 4}, dst[4] = {0};
    r = allReduce(src, dst, 4, ncclFloat32, ncclSum, comm, NULL);
    ok(r == ncclSuccess && !memcmp(src, dst, sizeof src), "a: 1-rank ncclAllReduce copies");
    snprintf(prefix, sizeof prefix, "a %d ncclAllReduce ", pid);
    snprintf(want, sizeof want,
             "a %d ncclAllReduce sendbuff=0x%" PRIxPTR " recvbuff=0x%" PRIxPTR
             " count=4 datatype=7 op=0 comm=0x%" PRIxPTR " stream=0x0 -> 0",
             pid, (uintptr_t)src, (uintptr_t)dst, (uintptr_t)comm);
    ok(last_line(prefix, line, sizeof line) && !strcmp(line, want), "a: logged exactly: %s",
       line);
    r = allReduce(dst, dst, 4, ncclFloat32, ncclAvg, comm, NULL);
    ok(r == ncclSuccess && allReduce(src, dst, 4, (ncclDataType_t)12, ncclSum, comm, NULL) ==
                               ncclInvalidArgument &&
           allReduce(src, dst, 4, ncclFloat32, (ncclRedOp_t)5, comm, NULL) == ncclInvalidArgument,
       "a: in-place Avg works; datatype 12 and an uncreated op 5 are rejected");
    preMul_t preMul = SYM(a, preMul_t, "ncclRedOpCreatePreMulSum");
    opDestroy_t opDestroy = SYM(a, opDestroy_t, "ncclRedOpDestroy");
    ncclRedOp_t op = ncclSum;
    float scalar = 2;
    ok(preMul(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm) == 0 && op == 5 &&
           allReduce(src, dst, 4, ncclFloat32, op, comm, NULL) == 0 && opDestroy(op, comm) == 0 &&
           allReduce(src, dst, 4, ncclFloat32, op, comm, NULL) == ncclInvalidArgument,
       "a: a PreMulSum op is accepted until destroyed");

    /* a pointer that is not a fake comm */
    struct { char junk[256]; } notacomm = {{0}};
    ncclComm_t alien = (ncclComm_t)(void *)&notacomm;
    r = count(alien, &n);
    snprintf(prefix, sizeof prefix, "a %d ncclCommCount ", pid);
    ok(r == ncclInvalidArgument && last_line(prefix, line, sizeof line) &&
           strstr(line, " INVALID-COMM -> 4"),
       "a: a foreign comm is rejected and logged: %s", line);
    ok(allReduce(src, dst, 4, ncclFloat32, ncclSum, alien, NULL) == ncclInvalidArgument,
       "a: ncclAllReduce rejects a foreign comm");

    /* group */
    group_t gStart = SYM(a, group_t, "ncclGroupStart"), gEnd = SYM(a, group_t, "ncclGroupEnd");
    ok(gEnd() == ncclInvalidUsage && gStart() == 0 && gStart() == 0 && gEnd() == 0 &&
           gEnd() == 0 && gEnd() == ncclInvalidUsage,
       "a: group depth: ncclGroupEnd without ncclGroupStart is ncclInvalidUsage");

    /* split and shrink */
    split_t split = SYM(a, split_t, "ncclCommSplit");
    ncclComm_t sub = (ncclComm_t)1;
    ok(split(comm, -1, 0, &sub, NULL) == 0 && sub == NULL && split(comm, 0, 0, &sub, NULL) == 0 &&
           sub && sub != comm && destroy(sub) == 0,
       "a: ncclCommSplit: NOCOLOR gives NULL, a color a new comm");
    ncclComm_t four[4], small = NULL;
    initAll_t initAll = SYM(a, initAll_t, "ncclCommInitAll");
    shrink_t shrink = SYM(a, shrink_t, "ncclCommShrink");
    int excl[] = {0, 3};
    r = initAll(four, 4, NULL);
    ok(r == 0 && shrink(four[2], excl, 2, &small, NULL, 0) == 0 && count(small, &n) == 0 &&
           n == 2 && userRank(small, &rk) == 0 && rk == 1 && cuDevice(four[3], &dev) == 0 &&
           dev == 3,
       "a: ncclCommInitAll(4) and ncclCommShrink of rank 2 excluding 0,3: rank 1 of 2");
    destroy(small);
    for (int i = 0; i < 4; i++)
        destroy(four[i]);

    /* config */
    initRankConfig_t initCfg = SYM(a, initRankConfig_t, "ncclCommInitRankConfig");
    asyncErr_t asyncErr = SYM(a, asyncErr_t, "ncclCommGetAsyncError");
    ncclConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.magic = 0x12345678;
    ncclComm_t c2 = NULL;
    ok(initCfg(&c2, 1, id1, 0, &cfg) == ncclInvalidArgument && c2 == NULL,
       "a: a config with a wrong magic is rejected");
    cfg.magic = NCCL_CONFIG_MAGIC;
    cfg.version = 22809;
    cfg.blocking = 0;
    cfg.netName = "Socket";
    ncclResult_t ae = ncclInternalError;
    r = initCfg(&c2, 1, id1, 0, &cfg);
    snprintf(prefix, sizeof prefix, "a %d ncclCommInitRankConfig ", pid);
    int logged = last_line(prefix, line, sizeof line) &&
                 strstr(line, " netName=Socket blocking=0 ver=22809 ctas=0,0 perpeer=0 *newcomm=") && strstr(line, " -> 7");
    ok(r == ncclInProgress && c2 && asyncErr(c2, &ae) == 0 && ae == ncclSuccess && logged,
       "a: non-blocking init: ncclInProgress, then async error ncclSuccess: %s", line);
    ok(destroy(c2) == 0, "a: destroy the non-blocking comm");
    /* NCCL reads a field by the config's version, not its size (parseCommConfig):
     * a 2.27 config's nChannelsPerNetPeer and a 2.16 config's netName and
     * channel bounds are NCCL's defaults, whatever they hold. */
    cfg.blocking = 1;
    cfg.minCTAs = cfg.maxCTAs = 2;
    cfg.nChannelsPerNetPeer = 4;
    cfg.version = 22703;
    r = initCfg(&c2, 1, id1, 0, &cfg);
    logged = last_line(prefix, line, sizeof line) && strstr(line, " netName=Socket blocking=1 ver=22703 ctas=2,2 *newcomm=")
             && strstr(line, " net=Socket ");
    ok(r == ncclSuccess && logged, "a: a 2.27 config: nChannelsPerNetPeer ignored, the rest read: %s", line);
    destroy(c2);
    cfg.version = 21605;
    r = initCfg(&c2, 1, id1, 0, &cfg);
    logged = last_line(prefix, line, sizeof line) && strstr(line, " netName=(null) blocking=1 ver=21605 *newcomm=") &&
             strstr(line, " net=default ");
    ok(r == ncclSuccess && logged, "a: a 2.16 config: netName and the channel bounds ignored: %s", line);
    destroy(c2);

    /* failure injection and delay */
    setenv("FAKE_NCCL_FAIL_INIT", "6", 1);
    ncclComm_t c3 = (ncclComm_t)1;
    ok(initRank(&c3, 1, id1, 0) == ncclRemoteError && c3 == NULL,
       "a: FAKE_NCCL_FAIL_INIT=6 makes init return 6");
    unsetenv("FAKE_NCCL_FAIL_INIT");
    setenv("FAKE_NCCL_INIT_DELAY_MS", "50", 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = initRank(&c3, 1, id1, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    unsetenv("FAKE_NCCL_INIT_DELAY_MS");
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    ok(r == 0 && ms >= 50, "a: FAKE_NCCL_INIT_DELAY_MS=50 delays init (%.1f ms)", ms);
    destroy(c3);

    /* re-entrancy hook */
    setenv("FAKE_NCCL_REENTER", "1", 1);
    r = initRank(&c3, 1, id1, 0);
    unsetenv("FAKE_NCCL_REENTER");
    snprintf(prefix, sizeof prefix, "a %d reenter ", pid);
    ok(r == 0 && last_line(prefix, line, sizeof line) && strstr(line, " ok version=22809"),
       "a: FAKE_NCCL_REENTER=1: %s", line);
    destroy(c3);

    /* threads */
    stress_allReduce = allReduce;
    stress_comm = comm;
    pthread_t th[N_THREADS];
    int bad_calls = 0, lines = 0, whole = 1;
    for (int i = 0; i < N_THREADS; i++)
        pthread_create(&th[i], NULL, stress, NULL);
    for (int i = 0; i < N_THREADS; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        bad_calls += ret != NULL;
    }
    snprintf(want, sizeof want, "a %d ncclAllReduce ", pid);
    char *log = read_log();
    for (char *p = log; (p = strstr(p, want)); p++) {
        char *nl = strchr(p, '\n');
        if (!nl) {
            whole = 0;
            break;
        }
        *nl = 0;
        if (strstr(p, " count=8 datatype=7 op=2 ")) {
            lines++;
            whole &= !strcmp(nl - 5, " -> 0") && (p == log || p[-1] == '\n' || p[-1] == 0);
        }
        *nl = '\n';
    }
    free(log);
    ok(!bad_calls && lines == N_THREADS * N_CALLS && whole,
       "a: %d threads x %d calls give %d whole log lines", N_THREADS, N_CALLS, lines);

    /* destroy twice */
    ok(destroy(comm) == 0 && destroy(comm) == ncclInvalidArgument,
       "a: a second ncclCommDestroy of the same comm is rejected");

    /* the old variant */
    void *old = open_lib(dir, "old", RTLD_NOW | RTLD_LOCAL);
    v = 0;
    ok(old && SYM(old, getVersion_t, "ncclGetVersion")(&v) == 0 && v == 21805 &&
           !dlsym(old, "ncclCommShrink") && !dlsym(old, "pncclCommShrink"),
       "old: version 21805, no ncclCommShrink");
    if (old)
        check_exports(old, "old", &rel_2_18);
    else
        ok(0, "old: exports");

    /* the new variant: NCCL 2.30.7, and a function of a later release */
    void *nw = open_lib(dir, "new", RTLD_NOW | RTLD_LOCAL);
    v = 0;
    ok(nw && SYM(nw, getVersion_t, "ncclGetVersion")(&v) == 0 && v == 23007 && dlsym(nw, "ncclCommFutureQuery"),
       "new: version 23007, and ncclCommFutureQuery");
    if (nw)
        check_exports(nw, "new", &rel_2_30);
    else
        ok(0, "new: exports");

    /* the newest variant: NCCL 2.32.3, with 2.31's nccl*Config collectives */
    void *nst = open_lib(dir, "newest", RTLD_NOW | RTLD_LOCAL);
    v = 0;
    ok(nst && SYM(nst, getVersion_t, "ncclGetVersion")(&v) == 0 && v == 23203 &&
           dlsym(nst, "ncclBroadcastConfig") && !dlsym(nw, "ncclBroadcastConfig"),
       "newest: version 23203 and ncclBroadcastConfig, which new (2.30.7) lacks");
    if (nst)
        check_exports(nst, "newest", &rel_2_32);
    else
        ok(0, "newest: exports");

    /* the b variant: same process, its own log name */
    void *b = open_lib(dir, "b", RTLD_NOW | RTLD_LOCAL);
    v = 0;
    r = b ? SYM(b, getVersion_t, "ncclGetVersion")(&v) : ncclSystemError;
    snprintf(prefix, sizeof prefix, "b %d ncclGetVersion ", pid);
    ok(r == 0 && v == 22809 && last_line(prefix, line, sizeof line),
       "b: its calls are logged as b: %s", line);

    if (b)
        dlclose(b);
    if (old)
        dlclose(old);
    dlclose(a);
    if (failures)
        fprintf(stderr, "# log kept: %s\n", log_path);
    else
        unlink(log_path);
    return failures ? 1 : 0;
}
