/*
 * A fake libnccl.so.2 for the CPU test suite.
 *
 * It exports every function of shim/nccl/nccl_api.def the way real NCCL does:
 * `pnccl<X>` is the definition (T) and `nccl<X>` a weak alias of it (W).
 * It needs no GPU and no network: communicators are host structs, and data
 * operations on a one-rank communicator do the host-memory copy that NCCL
 * would do on the device.  Built three ways (tests/fake/fake.mk):
 *
 *   a/libnccl.so.2    NCCL 2.28.9 (ncclGetVersion: 22809), log name "a"
 *   b/libnccl.so.2    the same, built with -DFAKE_NCCL_NAME='"b"'
 *   old/libnccl.so.2  -DFAKE_NCCL_OLD: NCCL 2.18.5 (21805), without the
 *                     functions 2.18 lacked (see VERSION FACTS below)
 *   new/libnccl.so.2  -DFAKE_NCCL_NEW: NCCL 2.30.7 (23007)
 *   newest/libnccl.so.2  -DFAKE_NCCL_NEWEST: NCCL 2.32.3 (23203), with
 *                     2.31's nccl*Config collectives
 *
 * CALL LOG
 * --------
 * If FAKE_NCCL_LOG names a file, every call appends exactly one line to it
 * (opened once, O_APPEND; each line is one write(2), so threads and
 * processes never interleave):
 *
 *   <name> <pid> <function> <key>=<value> ... [<TAG> ...] -> <result>
 *
 *   <name>      FAKE_NCCL_NAME: "a" (default), "b", "old" (fake.mk's old/)
 *   <pid>       getpid() of the caller, decimal
 *   <function>  the nccl* name (also when called as pnccl*)
 *   arguments   every parameter, in declaration order, keyed by its name
 *               in nccl_api.def, generated from that table:
 *                 pointer          0x<lowercase hex>, NULL is 0x0
 *                 int, enum        decimal (enums as signed int)
 *                 size_t           decimal
 *                 ncclUniqueId     (by value, commId) id=<16 hex digits: the
 *                                  first 8 bytes> idtail=<1 if bytes 64..127
 *                                  are all zero, 0 if any is not>
 *                 ncclConfig_t *   config=<ptr> netName=<string or (null)>
 *                                  blocking=<int or (null)> as NCCL reads
 *                                  them (parse_config: a field the config's
 *                                  size does not hold, or its version is too
 *                                  old for, is NCCL's default); (null) when
 *                                  config is NULL or has a wrong magic; then
 *                                  ver=<version> and, where NCCL reads them,
 *                                  ctas=<minCTAs>,<maxCTAs> and
 *                                  perpeer=<nChannelsPerNetPeer>
 *                 ncclTeam_t       team=<nRanks>,<rank>,<stride>
 *   outputs     after the arguments, on success, as *<param>=<value>:
 *                 *newcomm=0x..  *comms=0x..,0x..  *count=1  *rank=0
 *                 *device=0  *asyncError=0  *version=22809  *ptr=0x..
 *                 *handle=0x..  *win=0x..  *op=5
 *               ncclGetUniqueId adds id=.. idtail=.. of the ID it made;
 *               ncclCommInitRankScalable adds id=.. idtail=.. of commIds[0].
 *   tags        INVALID-COMM: the ncclComm_t argument (or the destroyed or
 *               parent comm) is not a live communicator of this library;
 *               the result is then ncclInvalidArgument (4), or for
 *               ncclGetLastError the string "invalid communicator" (NULL is
 *               valid there, as in NCCL).
 *   <result>    ncclResult_t in decimal; for the two functions returning
 *               const char * the string in double quotes: -> "no error"
 *
 *   a 1234 ncclAllReduce sendbuff=0x7ffd1000 recvbuff=0x7ffd2000 count=4
 *     datatype=7 op=0 comm=0x55d0c0de0 stream=0x0 -> 0        (one line)
 *   a 1234 ncclCommCount comm=0x7ffd3000 count=0x7ffd3100 INVALID-COMM -> 4
 *
 * DATA OPERATIONS check comm, datatype (0..11; 0..9 for old), op (0..4 or
 * a live PreMulSum op of that comm), root/peer (0..nranks-1), and that a
 * buffer is not NULL when count > 0.  With nranks == 1 they copy sendbuff
 * to recvbuff (memmove; in place allowed; any op, PreMulSum unscaled);
 * with nranks > 1 no buffer is touched.  Send/Recv never copy.
 *
 * With FAKE_NCCL_REENTER=1, ncclCommInitRank and ncclCommInitRankConfig
 * also write, before their own line, one of
 *   <name> <pid> reenter ok version=<v>
 *   <name> <pid> reenter fail <what>
 *
 * ENVIRONMENT (read at each call, except FAKE_NCCL_LOG: at the first line)
 * ------------
 *   FAKE_NCCL_LOG            the call-log file (created 0644, appended to)
 *   FAKE_NCCL_DEVICE         CUDA device of new comms (default 0); InitAll
 *                            uses devlist or 0..ndev-1 instead
 *   FAKE_NCCL_VERSION        the version ncclGetVersion reports (to
 *                            present an NCCL older than netName, 2.14)
 *   FAKE_NCCL_INIT_DELAY_MS  each init (InitRank, InitRankConfig,
 *                            InitRankScalable, InitAll) sleeps that long
 *   FAKE_NCCL_FAIL_INIT      a non-zero ncclResult_t that each init returns
 *                            (after the delay) without making a comm;
 *                            *newcomm is set to NULL
 *   FAKE_NCCL_INPROGRESS_POLLS  with config->blocking == 0 the new comm's
 *                            async error is ncclInProgress: this many
 *                            ncclCommGetAsyncError calls report it before
 *                            one reports ncclSuccess (default 0: the first
 *                            call already reports ncclSuccess)
 *   FAKE_NCCL_SPLIT_NRANKS   nranks of comms made by ncclCommSplit (default:
 *                            the parent's); rank = parent rank % nranks
 *   FAKE_NCCL_REENTER=1      the re-entrancy hook described above: dlsym
 *                            (RTLD_DEFAULT) ncclGetVersion and
 *                            ncclGetErrorString and call them, dlopen
 *                            libm.so.6 and dlsym "cos" and call it
 *   FAKE_NCCL_REUSE_FIFO=1   freed communicators are kept (up to 8) and
 *                            handed out again oldest first, not as malloc
 *                            does (last freed first): addresses come back
 *                            in another order than the shim recycles its
 *                            own state (tests/t/19-identity.t)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "nccl_abi.h"

#ifndef FAKE_NCCL_NAME
#define FAKE_NCCL_NAME "a"
#endif

/*
 * VERSION FACTS.  Which functions a release exports comes from the version
 * groups of nccl_api.def (NCCL_API_SINCE): a fake of release V exports the
 * groups of releases up to V.  Data types: ncclFloat8e4m3 and ncclFloat8e5m2
 * (10, 11) exist since 2.24, so 2.18 accepts datatypes 0..9 only.
 *
 *   old/  2.18.5        a/, b/  2.28.9        new/  2.30.7, and one function
 *                                             of a release the shim has never
 *                                             seen (ncclCommFutureQuery)
 *   newest/  2.32.3: 2.31's nccl*Config collectives, and the 2.31/2.32
 *            ncclConfig_t fields (../shared/nccl-headers/newer-releases.md)
 */
#if defined(FAKE_NCCL_NEWEST)
#define FAKE_VERSION 23203
#define FAKE_NUM_TYPES 12
#elif defined(FAKE_NCCL_OLD)
#define FAKE_VERSION 21805
#define FAKE_NUM_TYPES 10
#elif defined(FAKE_NCCL_NEW)
#define FAKE_VERSION 23007
#define FAKE_NUM_TYPES 12
#else
#define FAKE_VERSION 22809
#define FAKE_NUM_TYPES 12
#endif
/* nccl_api.def's version groups are release codes (22900: 2.29.0). */
#define FAKE_HAS(since) ((since) <= FAKE_VERSION)

#define IMPL static __attribute__((unused))
#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------
 * The call log
 */
#define LINE_CAP 4096

struct line {
    size_t len;
    char buf[LINE_CAP];
};

static int log_fd = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_open(void)
{
    const char *path = getenv("FAKE_NCCL_LOG");
    if (path && *path)
        log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

static void line_add(struct line *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line_add(struct line *L, const char *fmt, ...)
{
    /* keep 2 bytes for the final "\n" and NUL */
    if (L->len >= LINE_CAP - 2)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(L->buf + L->len, LINE_CAP - 1 - L->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    L->len += (size_t)n;
    if (L->len > LINE_CAP - 2)
        L->len = LINE_CAP - 2;
}

static void line_start(struct line *L, const char *fn)
{
    L->len = 0;
    line_add(L, "%s %d %s", FAKE_NCCL_NAME, (int)getpid(), fn);
}

static void line_write(struct line *L)
{
    pthread_once(&log_once, log_open);
    L->buf[L->len++] = '\n';
    if (log_fd < 0)
        return;
    ssize_t r;
    do
        r = write(log_fd, L->buf, L->len);
    while (r < 0 && errno == EINTR);
}

static void line_end_result(struct line *L, ncclResult_t r)
{
    line_add(L, " -> %d", (int)r);
    line_write(L);
}

static void line_end_string(struct line *L, const char *s)
{
    line_add(L, " -> \"%s\"", s ? s : "(null)");
    line_write(L);
}

static void line_end_team(struct line *L, ncclTeam_t t)
{
    line_add(L, " -> %d,%d,%d", t.nRanks, t.rank, t.stride);
    line_write(L);
}

#define line_end(L, r) \
    _Generic((r), const char *: line_end_string, ncclTeam_t: line_end_team, default: line_end_result)(L, r)

/* One argument each; the key is the parameter's name in nccl_api.def. */
static void log_int(struct line *L, const char *key, int v) { line_add(L, " %s=%d", key, v); }
static void log_enum(struct line *L, const char *key, unsigned v) { line_add(L, " %s=%d", key, (int)v); }
static void log_size(struct line *L, const char *key, size_t v) { line_add(L, " %s=%zu", key, v); }
static void log_ptr(struct line *L, const char *key, const volatile void *p)
{
    line_add(L, " %s=0x%" PRIxPTR, key, (uintptr_t)p);
}

static int id_tail_zero(const ncclUniqueId *id)
{
    for (int i = 64; i < NCCL_UNIQUE_ID_BYTES; i++)
        if (id->internal[i])
            return 0;
    return 1;
}

static void log_id_bytes(struct line *L, const ncclUniqueId *id)
{
    line_add(L, " id=");
    for (int i = 0; i < 8; i++)
        line_add(L, "%02x", (unsigned char)id->internal[i]);
    line_add(L, " idtail=%d", id_tail_zero(id));
}

static void log_id(struct line *L, const char *key, ncclUniqueId id)
{
    (void)key; /* always logged as id=, idtail= */
    log_id_bytes(L, &id);
}

#define CFG_HAS(c, field) \
    ((c)->size >= offsetof(ncclConfig_t, field) + sizeof(((ncclConfig_t *)0)->field))

static int config_ok(const ncclConfig_t *c) { return c->magic == NCCL_CONFIG_MAGIC; }

/* This release's ncclConfig_t: the fields its nccl.h declares, the rest of
 * ours beyond its sizeof. */
#if FAKE_VERSION >= 23200
#define FAKE_CONFIG_END (offsetof(ncclConfig_t, nvlsHostMode) + sizeof(int))
#elif FAKE_VERSION >= 23100
#define FAKE_CONFIG_END (offsetof(ncclConfig_t, hostCftMode) + sizeof(int))
#elif FAKE_VERSION >= 23005
#define FAKE_CONFIG_END (offsetof(ncclConfig_t, graphStreamOrdering) + sizeof(int))
#elif FAKE_VERSION >= 22800
#define FAKE_CONFIG_END (offsetof(ncclConfig_t, nvlinkCentricSched) + sizeof(int))
#else
#define FAKE_CONFIG_END (offsetof(ncclConfig_t, splitShare) + sizeof(int))
#endif

/*
 * What NCCL makes of a caller's config, as parseCommConfig (init.cc) does:
 * it copies min(size, its own sizeof) bytes over NCCL_CONFIG_INITIALIZER,
 * then sets every field back to its default where the config's `version` is
 * older than the release that introduced the field; `size` decides nothing
 * more.  Written out by hand from NCCL's source (v2.18.6 to v2.30.7), not
 * from the shim's table (shim/nccl/nccl_config.def), so that the tests hold
 * the table to what NCCL does.
 */
static void parse_config(const ncclConfig_t *in, ncclConfig_t *out)
{
    ncclConfig_t d;
    memset(&d, 0, sizeof d);
    d.cgaClusterSize = d.minCTAs = d.maxCTAs = d.blocking = d.splitShare = d.trafficClass = NCCL_CONFIG_UNDEF_INT;
    d.collnetEnable = d.CTAPolicy = d.shrinkShare = d.nvlsCTAs = NCCL_CONFIG_UNDEF_INT;
    d.nChannelsPerNetPeer = d.nvlinkCentricSched = d.graphUsageMode = d.numRmaCtx = NCCL_CONFIG_UNDEF_INT;
    d.maxP2pPeers = d.graphStreamOrdering = NCCL_CONFIG_UNDEF_INT;
    d.launchOrderImplicit = d.numRmaSig = d.rmaEagerInit = d.hostCftMode = d.nvlsHostMode = NCCL_CONFIG_UNDEF_INT;
    *out = d;
    size_t n = in->size < FAKE_CONFIG_END ? in->size : FAKE_CONFIG_END;
    memcpy(out, in, n);
    unsigned v = out->version;
    if (v < 21400)
        out->blocking = d.blocking;
    if (v < 21700) {
        out->cgaClusterSize = d.cgaClusterSize;
        out->minCTAs = d.minCTAs;
        out->maxCTAs = d.maxCTAs;
        out->netName = d.netName;
    }
    if (v < 22500)
        out->trafficClass = d.trafficClass;
    if (v < 22700) {
        out->collnetEnable = d.collnetEnable;
        out->CTAPolicy = d.CTAPolicy;
        out->shrinkShare = d.shrinkShare;
        out->nvlsCTAs = d.nvlsCTAs;
    }
    if (v < 22800) {
        out->nChannelsPerNetPeer = d.nChannelsPerNetPeer;
        out->nvlinkCentricSched = d.nvlinkCentricSched;
    }
    if (v < 22900) {
        out->graphUsageMode = d.graphUsageMode;
        out->numRmaCtx = d.numRmaCtx;
    }
    if (v < 23000)
        out->maxP2pPeers = d.maxP2pPeers;
    if (v < 23005)
        out->graphStreamOrdering = d.graphStreamOrdering;
    /* 2.31/2.32: no init.cc of theirs was at hand; gated by the release
     * that added each (as the shim's table assumes). */
    if (v < 23100) {
        out->launchOrderImplicit = d.launchOrderImplicit;
        out->numRmaSig = d.numRmaSig;
        out->rmaEagerInit = d.rmaEagerInit;
        out->hostCftMode = d.hostCftMode;
    }
    if (v < 23200)
        out->nvlsHostMode = d.nvlsHostMode;
}

/* netName, blocking, the channel bounds and nChannelsPerNetPeer as NCCL
 * reads them (parse_config), so that a field the caller set but NCCL
 * ignores for its version shows as unset; `cfg=` then every field as the
 * caller passed it, for a 2.29+ config. */
static void log_config(struct line *L, const char *key, ncclConfig_t *c)
{
    log_ptr(L, key, c);
    if (!c || !config_ok(c)) {
        line_add(L, " netName=(null) blocking=(null)");
        return;
    }
    ncclConfig_t p;
    parse_config(c, &p);
    line_add(L, " netName=%s", p.netName ? p.netName : "(null)");
    if (p.blocking != NCCL_CONFIG_UNDEF_INT)
        line_add(L, " blocking=%d", p.blocking);
    else
        line_add(L, " blocking=(null)");
    line_add(L, " ver=%u", c->version);
    /* The channel bounds (frugal's), where NCCL reads them. */
    if (p.minCTAs != NCCL_CONFIG_UNDEF_INT || p.maxCTAs != NCCL_CONFIG_UNDEF_INT)
        line_add(L, " ctas=%d,%d", p.minCTAs, p.maxCTAs);
    if (p.nChannelsPerNetPeer != NCCL_CONFIG_UNDEF_INT)
        line_add(L, " perpeer=%d", p.nChannelsPerNetPeer);
    if (c->version >= 22900 && CFG_HAS(c, graphStreamOrdering))
        line_add(L, " cfg=%zu,%u,%d,%d,%d,%d,%d,%d,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", c->size, c->version,
                 c->cgaClusterSize, c->minCTAs, c->maxCTAs, c->splitShare, c->trafficClass,
                 c->collnetEnable, c->commName ? c->commName : "(null)", c->CTAPolicy, c->shrinkShare,
                 c->nvlsCTAs, c->nChannelsPerNetPeer, c->nvlinkCentricSched, c->graphUsageMode, c->numRmaCtx,
                 c->maxP2pPeers, c->graphStreamOrdering, c->blocking);
    if (p.launchOrderImplicit != NCCL_CONFIG_UNDEF_INT || p.nvlsHostMode != NCCL_CONFIG_UNDEF_INT)
        line_add(L, " cfg231=%d,%d,%d,%d,%d", p.launchOrderImplicit, p.numRmaSig, p.rmaEagerInit, p.hostCftMode,
                 p.nvlsHostMode);
}

/* A per-collective config (2.31): `cc=` size,magic-ok,version,event. */
static void log_coll_config(struct line *L, const char *key, const ncclCollConfig_t *c)
{
    log_ptr(L, key, c);
    if (c)
        line_add(L, " cc=%zu,%d,%u,0x%" PRIxPTR, c->size, c->magic == NCCL_COLLCONFIG_MAGIC, c->version,
                 c->size >= sizeof(*c) ? (uintptr_t)c->launchCompletionEvent : (uintptr_t)0);
}

static void log_team(struct line *L, const char *key, ncclTeam_t t)
{
    line_add(L, " %s=%d,%d,%d", key, t.nRanks, t.rank, t.stride);
}

#define LOG_ARG(a)                                                            \
    _Generic((a), int: log_int, unsigned int: log_enum, size_t: log_size,     \
             ncclUniqueId: log_id, ncclConfig_t *: log_config,               \
             const ncclCollConfig_t *: log_coll_config,                       \
             ncclTeam_t: log_team, default: log_ptr)(&L, #a, a);

/* FOR_EACH over 0..8 arguments */
#define FE_0(m)
#define FE_1(m, a) m(a)
#define FE_2(m, a, ...) m(a) FE_1(m, __VA_ARGS__)
#define FE_3(m, a, ...) m(a) FE_2(m, __VA_ARGS__)
#define FE_4(m, a, ...) m(a) FE_3(m, __VA_ARGS__)
#define FE_5(m, a, ...) m(a) FE_4(m, __VA_ARGS__)
#define FE_6(m, a, ...) m(a) FE_5(m, __VA_ARGS__)
#define FE_7(m, a, ...) m(a) FE_6(m, __VA_ARGS__)
#define FE_8(m, a, ...) m(a) FE_7(m, __VA_ARGS__)
#define FE_9(m, a, ...) m(a) FE_8(m, __VA_ARGS__)
#define FE_10(m, a, ...) m(a) FE_9(m, __VA_ARGS__)
#define FE_11(m, a, ...) m(a) FE_10(m, __VA_ARGS__)
#define FE_12(m, a, ...) m(a) FE_11(m, __VA_ARGS__)
#define FE_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, N, ...) N
#define FOR_EACH(m, ...)                                                      \
    FE_PICK(__VA_ARGS__ __VA_OPT__(, ) FE_12, FE_11, FE_10, FE_9, FE_8, FE_7, \
            FE_6, FE_5, FE_4, FE_3, FE_2, FE_1, FE_0)(m __VA_OPT__(, ) __VA_ARGS__)
#define LOG_ARGS(...) FOR_EACH(LOG_ARG, __VA_ARGS__)
#define COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__

/* ------------------------------------------------------------------------
 * Environment
 */
static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return *end ? dflt : v;
}

static void sleep_ms(long ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ------------------------------------------------------------------------
 * Communicators and their registry
 */
#define COMM_MAGIC 0x6d6d6f63656b6166ULL /* "fakecomm" */
#define COMM_DEAD 0xdeaddeaddeaddeadULL
#define MAX_USER_OPS 64

struct ncclComm {
    uint64_t magic;
    int rank, nranks, device;
    int destroyed, finalized, revoked;
    int suspended;               /* 1: suspended with NCCL_SUSPEND_MEM, 2: without */
    ncclResult_t asyncError;
    long inProgressPolls;        /* GetAsyncError calls left reporting InProgress */
    uint64_t userOps;            /* live ncclRedOpCreatePreMulSum ops: bit i = op 5+i */
    unsigned char id[NCCL_UNIQUE_ID_BYTES];
    struct ncclComm *next;
};

static pthread_mutex_t reg_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static struct ncclComm *reg_head;

static void comm_insert(struct ncclComm *c)
{
    pthread_mutex_lock(&reg_lock);
    c->next = reg_head;
    reg_head = c;
    pthread_mutex_unlock(&reg_lock);
}

/* Never dereferences `comm` unless it is in the registry. */
static int comm_live_locked(ncclComm_t comm)
{
    for (struct ncclComm *c = reg_head; c; c = c->next)
        if (c == comm)
            return c->magic == COMM_MAGIC && !c->destroyed;
    return 0;
}

/* On success the registry lock is held: release with comm_release(). */
static struct ncclComm *comm_acquire(struct line *L, ncclComm_t comm)
{
    pthread_mutex_lock(&reg_lock);
    if (comm_live_locked(comm))
        return comm;
    pthread_mutex_unlock(&reg_lock);
    line_add(L, " INVALID-COMM");
    return NULL;
}

static void comm_release(void) { pthread_mutex_unlock(&reg_lock); }

/* A copy of a live comm's fields. */
static int comm_snapshot(struct line *L, ncclComm_t comm, struct ncclComm *out)
{
    struct ncclComm *c = comm_acquire(L, comm);
    if (!c)
        return 0;
    *out = *c;
    comm_release();
    return 1;
}

/* FAKE_NCCL_REUSE_FIFO's freed communicators, oldest at fifo_head; under reg_lock. */
#define FIFO_MAX 8
static struct ncclComm *fifo[FIFO_MAX];
static int fifo_head, fifo_n;

/* Removes and frees a live comm. */
static ncclResult_t comm_free(struct line *L, ncclComm_t comm)
{
    pthread_mutex_lock(&reg_lock);
    struct ncclComm **pp = &reg_head;
    while (*pp && *pp != comm)
        pp = &(*pp)->next;
    if (!*pp || !comm_live_locked(comm)) {
        pthread_mutex_unlock(&reg_lock);
        line_add(L, " INVALID-COMM");
        return ncclInvalidArgument;
    }
    *pp = comm->next;
    comm->destroyed = 1;
    comm->magic = COMM_DEAD;
    if (env_long("FAKE_NCCL_REUSE_FIFO", 0) && fifo_n < FIFO_MAX) {
        fifo[(fifo_head + fifo_n++) % FIFO_MAX] = comm;
        comm = NULL;
    }
    pthread_mutex_unlock(&reg_lock);
    free(comm);
    return ncclSuccess;
}

static struct ncclComm *comm_new(int rank, int nranks, int device, const void *id)
{
    struct ncclComm *c = NULL;
    pthread_mutex_lock(&reg_lock);
    if (fifo_n) { /* FAKE_NCCL_REUSE_FIFO: the oldest freed one */
        c = fifo[fifo_head];
        fifo_head = (fifo_head + 1) % FIFO_MAX;
        fifo_n--;
        memset(c, 0, sizeof *c);
    }
    pthread_mutex_unlock(&reg_lock);
    if (!c)
        c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->device = device;
    c->asyncError = ncclSuccess;
    if (id)
        memcpy(c->id, id, sizeof c->id);
    return c;
}

/* blocking as the config gives it: 1 unless a valid config says 0 */
static int config_blocking(const ncclConfig_t *config)
{
    if (!config || !config_ok(config))
        return 1;
    ncclConfig_t p;
    parse_config(config, &p);
    return p.blocking == NCCL_CONFIG_UNDEF_INT || p.blocking != 0;
}

/* A comm made under a non-blocking config starts "in progress". */
static ncclResult_t comm_publish(struct ncclComm *c, const ncclConfig_t *config)
{
    ncclResult_t r = ncclSuccess;
    if (!config_blocking(config)) {
        c->asyncError = ncclInProgress;
        c->inProgressPolls = env_long("FAKE_NCCL_INPROGRESS_POLLS", 0);
        r = ncclInProgress;
    }
    comm_insert(c);
    return r;
}

/* The network the comm uses, as NCCL picks it at init (init.cc,
 * envConfigOverride): NCCL_NET from the environment, read with getenv on the
 * calling thread, else the config's netName, else "default".  Logged as
 * net=<name>, after *newcomm. */
static void log_net(struct line *L, const ncclConfig_t *config)
{
    const char *env = getenv("NCCL_NET");
    ncclConfig_t p = { 0 };
    if (config && config_ok(config))
        parse_config(config, &p);
    const char *net = env ? env : p.netName ? p.netName : "default";
    line_add(L, " net=%s", net);
}

static ncclResult_t check_config(const ncclConfig_t *config)
{
    if (config && !config_ok(config))
        return ncclInvalidArgument;
    return ncclSuccess;
}

/* ------------------------------------------------------------------------
 * Unique IDs
 */
static void fill_random(void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom((char *)buf + got, n - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got < n) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t r;
            while (got < n && (r = read(fd, (char *)buf + got, n - got)) > 0)
                got += (size_t)r;
            close(fd);
        }
    }
    if (got < n) { /* last resort */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)getpid();
        for (; got < n; got++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            ((unsigned char *)buf)[got] = (unsigned char)(x >> 56);
        }
    }
}

/* Like NCCL: 40 bytes of content (here random, with the pid mixed into
 * bytes 32..35), bytes 40..127 zero. */
/* Laid out like NCCL 2.x's bootstrap handle: a random magic, then the
 * root's socket address (127.0.0.1 and a made-up port: the fake has no
 * bootstrap), then zeros; the shim's rendezvous listens on that address. */
static void make_unique_id(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    fill_random(id->internal, 8);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint16_t port;
    fill_random((char *)&port, sizeof port);
    sin.sin_port = htons((uint16_t)(port | 0x8000));
    memcpy(id->internal + 8, &sin, sizeof sin);
    uint32_t pid = (uint32_t)getpid();
    memcpy(id->internal + 28, &pid, sizeof pid);
}

/* ------------------------------------------------------------------------
 * Implementations: impl_<name>(line, the function's own parameters).
 * Each wrapper (generated below from nccl_api.def) logs the arguments,
 * calls its impl, and logs the result.
 */
static __thread const char *last_error = "";

static ncclResult_t fail(ncclResult_t r, const char *why)
{
    last_error = why;
    return r;
}

IMPL ncclResult_t impl_ncclGetVersion(struct line *L, int *version)
{
    if (!version)
        return fail(ncclInvalidArgument, "version is NULL");
    *version = (int)env_long("FAKE_NCCL_VERSION", FAKE_VERSION);
    line_add(L, " *version=%d", *version);
    return ncclSuccess;
}

IMPL const char *impl_ncclGetErrorString(struct line *L, ncclResult_t result)
{
    (void)L;
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

IMPL ncclResult_t impl_ncclMemAlloc(struct line *L, void **ptr, size_t size)
{
    if (!ptr)
        return fail(ncclInvalidArgument, "ptr is NULL");
    void *p = malloc(size ? size : 1);
    if (!p)
        return fail(ncclSystemError, "out of memory");
    *ptr = p;
    log_ptr(L, "*ptr", p);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclMemFree(struct line *L, void *ptr)
{
    (void)L;
    free(ptr);
    return ncclSuccess;
}

static __thread int group_depth;

IMPL ncclResult_t impl_ncclGroupStart(struct line *L)
{
    (void)L;
    group_depth++;
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclGroupEnd(struct line *L)
{
    (void)L;
    if (group_depth <= 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    group_depth--;
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclGroupSimulateEnd(struct line *L, ncclSimInfo_t *simInfo)
{
    (void)L;
    if (group_depth <= 0)
        return fail(ncclInvalidUsage, "ncclGroupSimulateEnd without ncclGroupStart");
    if (simInfo && simInfo->size >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
        simInfo->estimatedTime = 0.0f;
    group_depth--;
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclGetUniqueId(struct line *L, ncclUniqueId *uniqueId)
{
    if (!uniqueId)
        return fail(ncclInvalidArgument, "uniqueId is NULL");
    make_unique_id(uniqueId);
    log_id_bytes(L, uniqueId);
    return ncclSuccess;
}

/* FAKE_NCCL_REENTER=1: what a plugin loader inside NCCL init does. */
static void reenter_hook(void)
{
    if (env_long("FAKE_NCCL_REENTER", 0) != 1)
        return;
    struct line R;
    line_start(&R, "reenter");
    const char *what = NULL;
    int v = -1;
    ncclResult_t (*getVersion)(int *);
    const char *(*getErrorString)(ncclResult_t);
    double (*cosine)(double);

    *(void **)&getVersion = dlsym(RTLD_DEFAULT, "ncclGetVersion");
    *(void **)&getErrorString = dlsym(RTLD_DEFAULT, "ncclGetErrorString");
    if (!getVersion)
        what = "dlsym-ncclGetVersion";
    else if (getVersion(&v) != ncclSuccess)
        what = "ncclGetVersion";
    else if (!getErrorString)
        what = "dlsym-ncclGetErrorString";
    else if (!getErrorString(ncclSuccess))
        what = "ncclGetErrorString";
    if (!what) {
        void *h = dlopen("libm.so.6", RTLD_NOW);
        if (!h) {
            what = "dlopen-libm";
        } else {
            *(void **)&cosine = dlsym(h, "cos");
            if (!cosine || cosine(0.0) != 1.0)
                what = "dlsym-cos";
            dlclose(h);
        }
    }
    if (what)
        line_add(&R, " fail %s", what);
    else
        line_add(&R, " ok version=%d", v);
    line_write(&R);
}

/* The common part of the init functions. */
static ncclResult_t init_one(struct line *L, ncclComm_t *newcomm, int nranks, int rank,
                             const ncclUniqueId *id, ncclConfig_t *config)
{
    sleep_ms(env_long("FAKE_NCCL_INIT_DELAY_MS", 0));
    long forced = env_long("FAKE_NCCL_FAIL_INIT", 0);
    if (forced) {
        if (newcomm)
            *newcomm = NULL;
        return fail((ncclResult_t)forced, "FAKE_NCCL_FAIL_INIT");
    }
    if (!newcomm)
        return fail(ncclInvalidArgument, "newcomm is NULL");
    *newcomm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks || check_config(config) != ncclSuccess)
        return fail(ncclInvalidArgument, "invalid rank, nranks or config");
    struct ncclComm *c = comm_new(rank, nranks, (int)env_long("FAKE_NCCL_DEVICE", 0), id);
    if (!c)
        return fail(ncclSystemError, "out of memory");
    ncclResult_t r = comm_publish(c, config);
    *newcomm = c;
    log_ptr(L, "*newcomm", c);
    log_net(L, config);
    return r;
}

IMPL ncclResult_t impl_ncclCommInitRank(struct line *L, ncclComm_t *newcomm, int nranks,
                                        ncclUniqueId commId, int rank)
{
    reenter_hook();
    return init_one(L, newcomm, nranks, rank, &commId, NULL);
}

IMPL ncclResult_t impl_ncclCommInitRankConfig(struct line *L, ncclComm_t *newcomm, int nranks,
                                              ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    reenter_hook();
    return init_one(L, newcomm, nranks, rank, &commId, config);
}

IMPL ncclResult_t impl_ncclCommInitRankScalable(struct line *L, ncclComm_t *newcomm, int nranks,
                                                int myrank, int nId, ncclUniqueId *commIds,
                                                ncclConfig_t *config)
{
    if (commIds && nId >= 1)
        log_id_bytes(L, &commIds[0]);
    if (nId < 1 || !commIds) {
        sleep_ms(env_long("FAKE_NCCL_INIT_DELAY_MS", 0));
        return fail(ncclInvalidArgument, "no commIds");
    }
    return init_one(L, newcomm, nranks, myrank, &commIds[0], config);
}

IMPL ncclResult_t impl_ncclCommInitAll(struct line *L, ncclComm_t *comms, int ndev,
                                       const int *devlist)
{
    sleep_ms(env_long("FAKE_NCCL_INIT_DELAY_MS", 0));
    long forced = env_long("FAKE_NCCL_FAIL_INIT", 0);
    if (forced)
        return fail((ncclResult_t)forced, "FAKE_NCCL_FAIL_INIT");
    if (!comms || ndev < 1)
        return fail(ncclInvalidArgument, "invalid comms or ndev");
    ncclUniqueId id;
    make_unique_id(&id);
    for (int i = 0; i < ndev; i++) {
        struct ncclComm *c = comm_new(i, ndev, devlist ? devlist[i] : i, &id);
        if (!c) {
            while (i-- > 0)
                comm_free(L, comms[i]);
            return fail(ncclSystemError, "out of memory");
        }
        comm_insert(c);
        comms[i] = c;
    }
    line_add(L, " *comms=");
    for (int i = 0; i < ndev; i++)
        line_add(L, "%s0x%" PRIxPTR, i ? "," : "", (uintptr_t)comms[i]);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclCommSplit(struct line *L, ncclComm_t comm, int color, int key,
                                     ncclComm_t *newcomm, ncclConfig_t *config)
{
    (void)key;
    struct ncclComm p;
    if (!comm_snapshot(L, comm, &p))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!newcomm || check_config(config) != ncclSuccess)
        return fail(ncclInvalidArgument, "invalid newcomm or config");
    if (color == -1 /* NCCL_SPLIT_NOCOLOR */) {
        *newcomm = NULL;
        log_ptr(L, "*newcomm", NULL);
        return ncclSuccess;
    }
    if (color < 0)
        return fail(ncclInvalidArgument, "invalid color");
    int nranks = (int)env_long("FAKE_NCCL_SPLIT_NRANKS", p.nranks);
    if (nranks < 1)
        nranks = p.nranks;
    struct ncclComm *c = comm_new(p.rank % nranks, nranks, p.device, p.id);
    if (!c)
        return fail(ncclSystemError, "out of memory");
    ncclResult_t r = comm_publish(c, config);
    *newcomm = c;
    log_ptr(L, "*newcomm", c);
    log_net(L, config); /* (NCCL reads NCCL_NET for a split too: envConfigOverride) */
    return r;
}

IMPL ncclResult_t impl_ncclCommShrink(struct line *L, ncclComm_t comm, int *excludeRanksList,
                                      int excludeRanksCount, ncclComm_t *newcomm,
                                      ncclConfig_t *config, int shrinkFlags)
{
    (void)shrinkFlags;
    struct ncclComm p;
    if (!comm_snapshot(L, comm, &p))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!newcomm || check_config(config) != ncclSuccess || excludeRanksCount < 0 ||
        excludeRanksCount >= p.nranks || (excludeRanksCount > 0 && !excludeRanksList))
        return fail(ncclInvalidArgument, "invalid shrink arguments");
    int below = 0;
    for (int i = 0; i < excludeRanksCount; i++) {
        int x = excludeRanksList[i];
        if (x < 0 || x >= p.nranks || x == p.rank)
            return fail(ncclInvalidArgument, "invalid excluded rank");
        below += x < p.rank;
    }
    struct ncclComm *c = comm_new(p.rank - below, p.nranks - excludeRanksCount, p.device, p.id);
    if (!c)
        return fail(ncclSystemError, "out of memory");
    ncclResult_t r = comm_publish(c, config);
    *newcomm = c;
    log_ptr(L, "*newcomm", c);
    log_net(L, config);
    return r;
}

IMPL ncclResult_t impl_ncclCommFinalize(struct line *L, ncclComm_t comm)
{
    struct ncclComm *c = comm_acquire(L, comm);
    if (!c)
        return fail(ncclInvalidArgument, "invalid communicator");
    c->finalized = 1;
    comm_release();
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclCommDestroy(struct line *L, ncclComm_t comm)
{
    return comm_free(L, comm) == ncclSuccess ? ncclSuccess
                                             : fail(ncclInvalidArgument, "invalid communicator");
}

IMPL ncclResult_t impl_ncclCommAbort(struct line *L, ncclComm_t comm)
{
    return impl_ncclCommDestroy(L, comm);
}

IMPL ncclResult_t impl_ncclCommRevoke(struct line *L, ncclComm_t comm, int revokeFlags)
{
    (void)revokeFlags;
    struct ncclComm *c = comm_acquire(L, comm);
    if (!c)
        return fail(ncclInvalidArgument, "invalid communicator");
    c->revoked = 1;
    comm_release();
    return ncclSuccess;
}

IMPL const char *impl_ncclGetLastError(struct line *L, ncclComm_t comm)
{
    /* NULL is valid here: the last error of any communicator */
    if (comm) {
        struct ncclComm *c = comm_acquire(L, comm);
        if (!c)
            return "invalid communicator";
        comm_release();
    }
    return last_error;
}

IMPL ncclResult_t impl_ncclCommGetAsyncError(struct line *L, ncclComm_t comm,
                                             ncclResult_t *asyncError)
{
    struct ncclComm *c = comm_acquire(L, comm);
    if (!c)
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!asyncError) {
        comm_release();
        return fail(ncclInvalidArgument, "asyncError is NULL");
    }
    if (c->asyncError == ncclInProgress) {
        if (c->inProgressPolls > 0)
            c->inProgressPolls--;
        else
            c->asyncError = ncclSuccess;
    }
    *asyncError = c->asyncError;
    comm_release();
    line_add(L, " *asyncError=%d", (int)*asyncError);
    return ncclSuccess;
}

/* Count, CuDevice, UserRank */
static ncclResult_t comm_int(struct line *L, ncclComm_t comm, int *out, const char *key,
                             int which)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!out)
        return fail(ncclInvalidArgument, "output is NULL");
    *out = which == 0 ? c.nranks : which == 1 ? c.device : c.rank;
    line_add(L, " %s=%d", key, *out);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclCommCount(struct line *L, ncclComm_t comm, int *count)
{
    return comm_int(L, comm, count, "*count", 0);
}

IMPL ncclResult_t impl_ncclCommCuDevice(struct line *L, ncclComm_t comm, int *device)
{
    return comm_int(L, comm, device, "*device", 1);
}

IMPL ncclResult_t impl_ncclCommUserRank(struct line *L, ncclComm_t comm, int *rank)
{
    return comm_int(L, comm, rank, "*rank", 2);
}

/* Registration handles are opaque tokens, never dereferenced. */
static uintptr_t token_next(void)
{
    static uintptr_t n;
    return 0xf0000000u + 0x10u * __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED);
}

IMPL ncclResult_t impl_ncclCommRegister(struct line *L, ncclComm_t comm, void *buff, size_t size,
                                        void **handle)
{
    (void)buff;
    (void)size;
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!handle)
        return fail(ncclInvalidArgument, "handle is NULL");
    *handle = (void *)token_next();
    log_ptr(L, "*handle", *handle);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclCommDeregister(struct line *L, ncclComm_t comm, void *handle)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!handle)
        return fail(ncclInvalidArgument, "handle is NULL");
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclCommWindowRegister(struct line *L, ncclComm_t comm, void *buff,
                                              size_t size, ncclWindow_t *win, int winFlags)
{
    (void)buff;
    (void)size;
    (void)winFlags;
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!win)
        return fail(ncclInvalidArgument, "win is NULL");
    *win = (ncclWindow_t)token_next();
    log_ptr(L, "*win", *win);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclCommWindowDeregister(struct line *L, ncclComm_t comm, ncclWindow_t win)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!win)
        return fail(ncclInvalidArgument, "win is NULL");
    return ncclSuccess;
}

static int datatype_ok(ncclDataType_t t) { return (unsigned)t < FAKE_NUM_TYPES; }

IMPL ncclResult_t impl_ncclRedOpCreatePreMulSum(struct line *L, ncclRedOp_t *op, void *scalar,
                                                ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t comm)
{
    struct ncclComm *c = comm_acquire(L, comm);
    if (!c)
        return fail(ncclInvalidArgument, "invalid communicator");
    ncclResult_t r = ncclSuccess;
    if (!op || !scalar || !datatype_ok(datatype) ||
        (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)) {
        r = fail(ncclInvalidArgument, "invalid PreMulSum arguments");
    } else if (c->userOps == ~0ULL) {
        r = fail(ncclInvalidUsage, "too many user ops");
    } else {
        int i = __builtin_ctzll(~c->userOps);
        c->userOps |= 1ULL << i;
        *op = (ncclRedOp_t)(ncclNumOps + i);
        line_add(L, " *op=%d", (int)*op);
    }
    comm_release();
    return r;
}

IMPL ncclResult_t impl_ncclRedOpDestroy(struct line *L, ncclRedOp_t op, ncclComm_t comm)
{
    struct ncclComm *c = comm_acquire(L, comm);
    if (!c)
        return fail(ncclInvalidArgument, "invalid communicator");
    unsigned i = (unsigned)op - ncclNumOps;
    ncclResult_t r = ncclSuccess;
    if ((unsigned)op < ncclNumOps || i >= MAX_USER_OPS || !(c->userOps & (1ULL << i)))
        r = fail(ncclInvalidArgument, "not a user op of this communicator");
    else
        c->userOps &= ~(1ULL << i);
    comm_release();
    return r;
}

IMPL ncclResult_t impl_ncclDevCommCreate(struct line *L, ncclComm_t comm,
                                         const ncclDevCommRequirements_t *reqs,
                                         ncclDevComm_t *outDevComm)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    /* the structures are opaque here: nothing is written */
    if (!reqs || !outDevComm)
        return fail(ncclInvalidArgument, "reqs or outDevComm is NULL");
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclDevCommDestroy(struct line *L, ncclComm_t comm,
                                          const ncclDevComm_t *devComm)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!devComm)
        return fail(ncclInvalidArgument, "devComm is NULL");
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclGinBarrierCreateRequirement(struct line *L, ncclComm_t comm,
                                                       ncclTeam_t team, int nBarriers,
                                                       ncclGinBarrierHandle_t *outHandle,
                                                       ncclDevResourceRequirements_t *outReq)
{
    (void)team;
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (nBarriers < 0 || !outHandle || !outReq)
        return fail(ncclInvalidArgument, "invalid barrier arguments");
    return ncclSuccess;
}

/*
 * The team API's host side (2.28).  A communicator this library did not make
 * gets NCCL's answer for a failure (an empty team, rank -1) and INVALID-COMM
 * in the log: where real NCCL reads (and for Lsa and Rail writes) whatever
 * the pointer points at.  All ranks of a fake communicator are one LSA team
 * (one NVLink domain): Rail is then the team of one rank per LSA team.
 */
IMPL ncclTeam_t impl_ncclTeamWorld(struct line *L, ncclComm_t comm)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return NCCL_TEAM_NONE;
    return (ncclTeam_t){ c.nranks, c.rank, 1 };
}

IMPL ncclTeam_t impl_ncclTeamLsa(struct line *L, ncclComm_t comm)
{
    return impl_ncclTeamWorld(L, comm);
}

IMPL ncclTeam_t impl_ncclTeamRail(struct line *L, ncclComm_t comm)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return NCCL_TEAM_NONE;
    return (ncclTeam_t){ 1, 0, c.nranks };
}

IMPL int impl_ncclTeamRankToWorld(struct line *L, ncclComm_t comm, ncclTeam_t team, int rank)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return -1;
    return c.rank + (rank - team.rank) * team.stride;
}

IMPL int impl_ncclTeamRankToLsa(struct line *L, ncclComm_t comm, ncclTeam_t team, int rank)
{
    return impl_ncclTeamRankToWorld(L, comm, team, rank); /* lsaSelf == rank: one LSA team */
}

/* ------------------------------------------------------------------------
 * NCCL 2.29: grow, suspend/resume, memory statistics, windows' user
 * pointers and signals.  Each checks that the communicator is one this
 * library made (INVALID-COMM otherwise), as real NCCL would crash instead.
 */
#define FAKE_SUSPENDABLE_BYTES (64u << 20) /* what a suspend would give back */
static ncclResult_t data_check(struct line *L, ncclComm_t comm, ncclDataType_t datatype, int checkOp, ncclRedOp_t op,
                               int checkRoot, int root, struct ncclComm *c);
#define FAKE_PERSIST_BYTES (8u << 20)

/* 2.29's properties, filled as NCCL fills them (src/dev_runtime.cc): an
 * uninitialised struct refused, ginType and after only for a version above
 * 2.29.3; no device API here, so deviceApiSupport is 0. */
IMPL ncclResult_t impl_ncclCommQueryProperties(struct line *L, ncclComm_t comm, ncclCommProperties_t *props)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!props)
        return fail(ncclInvalidArgument, "props is NULL");
    if (props->magic != NCCL_API_MAGIC)
        return fail(ncclInvalidUsage, "props not made with NCCL_COMM_PROPERTIES_INITIALIZER");
    props->rank = c.rank;
    props->nRanks = c.nranks;
    props->cudaDev = c.device;
    props->nvmlDev = c.device;
    props->deviceApiSupport = 0;
    props->multimemSupport = 0;
    if (props->version >= NCCL_COMM_PROPERTIES_V2) {
        props->ginType = (ncclGinType_t)env_long("FAKE_NCCL_GIN_TYPE", ncclGinTypeNone);
        props->railedGinType = props->ginType;
        props->nLsaTeams = 1;
        props->hostRmaSupport = 0;
    }
    line_add(L, " *props=%d,%d,%d,%d", props->rank, props->nRanks, props->cudaDev,
             props->version >= NCCL_COMM_PROPERTIES_V2 ? (int)props->ginType : -1);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclCommGetUniqueId(struct line *L, ncclComm_t comm, ncclUniqueId *uniqueId)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!uniqueId)
        return fail(ncclInvalidArgument, "uniqueId is NULL");
    make_unique_id(uniqueId);
    log_id_bytes(L, uniqueId);
    return ncclSuccess;
}

/* Existing ranks: comm, rank -1; new ranks: comm NULL, rank >= old size. */
IMPL ncclResult_t impl_ncclCommGrow(struct line *L, ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId,
                                    int rank, ncclComm_t *newcomm, ncclConfig_t *config)
{
    if (!newcomm || !uniqueId || check_config(config) != ncclSuccess || nRanks < 1)
        return fail(ncclInvalidArgument, "invalid grow arguments");
    struct ncclComm p;
    int myrank = rank, device = (int)env_long("FAKE_NCCL_DEVICE", 0);
    if (comm) {
        if (!comm_snapshot(L, comm, &p))
            return fail(ncclInvalidArgument, "invalid communicator");
        if (rank != -1 || nRanks <= p.nranks)
            return fail(ncclInvalidArgument, "an existing rank grows with rank -1 to a larger size");
        myrank = p.rank;
        device = p.device;
    } else if (rank < 0 || rank >= nRanks) {
        return fail(ncclInvalidArgument, "invalid rank for a new rank");
    }
    struct ncclComm *c = comm_new(myrank, nRanks, device, uniqueId);
    if (!c)
        return fail(ncclSystemError, "out of memory");
    ncclResult_t r = comm_publish(c, config);
    *newcomm = c;
    log_ptr(L, "*newcomm", c);
    log_net(L, config);
    line_add(L, " idtail=%d", id_tail_zero(uniqueId));
    return r;
}

IMPL ncclResult_t impl_ncclCommSuspend(struct line *L, ncclComm_t comm, int flags)
{
    struct ncclComm *c = comm_acquire(L, comm);
    if (!c)
        return fail(ncclInvalidArgument, "invalid communicator");
    ncclResult_t r = ncclSuccess;
    if (c->suspended)
        r = fail(ncclInvalidUsage, "already suspended");
    else
        c->suspended = (flags & NCCL_SUSPEND_MEM) ? 1 : 2;
    comm_release();
    return r;
}

IMPL ncclResult_t impl_ncclCommResume(struct line *L, ncclComm_t comm)
{
    struct ncclComm *c = comm_acquire(L, comm);
    if (!c)
        return fail(ncclInvalidArgument, "invalid communicator");
    ncclResult_t r = c->suspended ? ncclSuccess : fail(ncclInvalidUsage, "not suspended");
    c->suspended = 0;
    comm_release();
    return r;
}

IMPL ncclResult_t impl_ncclCommMemStats(struct line *L, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!value)
        return fail(ncclInvalidArgument, "value is NULL");
    int mem_out = c.suspended == 1;
    switch (stat) {
    case ncclStatGpuMemSuspend: *value = mem_out ? 0 : FAKE_SUSPENDABLE_BYTES; break;
    case ncclStatGpuMemSuspended: *value = mem_out; break;
    case ncclStatGpuMemPersist: *value = FAKE_PERSIST_BYTES; break;
    case ncclStatGpuMemTotal: *value = FAKE_PERSIST_BYTES + (mem_out ? 0 : FAKE_SUSPENDABLE_BYTES); break;
    default: return fail(ncclInvalidArgument, "invalid stat");
    }
    line_add(L, " *value=%" PRIu64, *value);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclWinGetUserPtr(struct line *L, ncclComm_t comm, ncclWindow_t win, void **outUserPtr)
{
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!win || !outUserPtr)
        return fail(ncclInvalidArgument, "win or outUserPtr is NULL");
    *outUserPtr = NULL; /* windows are tokens here: no user buffer is kept */
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclPutSignal(struct line *L, const void *localbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                                     unsigned int flags, ncclComm_t comm, cudaStream_t stream)
{
    (void)peerWinOffset, (void)sigIdx, (void)ctx, (void)flags, (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 1, peer, &c);
    if (r)
        return r;
    return (count && !localbuff) || !peerWin ? fail(ncclInvalidArgument, "NULL buffer or window") : ncclSuccess;
}

IMPL ncclResult_t impl_ncclSignal(struct line *L, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                                  cudaStream_t stream)
{
    (void)sigIdx, (void)ctx, (void)flags, (void)stream;
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    return peer < 0 || peer >= c.nranks ? fail(ncclInvalidArgument, "invalid peer") : ncclSuccess;
}

IMPL ncclResult_t impl_ncclWaitSignal(struct line *L, int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                                      cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    if (!comm_snapshot(L, comm, &c))
        return fail(ncclInvalidArgument, "invalid communicator");
    return nDesc < 0 || (nDesc > 0 && !signalDescs) ? fail(ncclInvalidArgument, "invalid descriptors") : ncclSuccess;
}

/* ------------------------------------------------------------------------
 * NCCL 2.30: the parameter API, over the environment (no nccl.conf here).
 */
static const char *const param_keys[] = { "NCCL_NET", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME" };
#define NPARAM_KEYS ((int)(sizeof(param_keys) / sizeof(param_keys[0])))

IMPL ncclResult_t impl_ncclParamBind(struct line *L, ncclParamHandle_t *out, const char *key)
{
    (void)L;
    if (!out || !key)
        return fail(ncclInvalidArgument, "out or key is NULL");
    for (int i = 0; i < NPARAM_KEYS; i++)
        if (strcmp(key, param_keys[i]) == 0) {
            *out = (ncclParamHandle_t)&param_keys[i];
            return ncclSuccess;
        }
    return fail(ncclInvalidArgument, "unknown parameter");
}

static const char *param_value(ncclParamHandle_t h)
{
    for (int i = 0; i < NPARAM_KEYS; i++)
        if (h == (ncclParamHandle_t)&param_keys[i])
            return getenv(param_keys[i]);
    return NULL;
}

static int param_ok(ncclParamHandle_t h)
{
    for (int i = 0; i < NPARAM_KEYS; i++)
        if (h == (ncclParamHandle_t)&param_keys[i])
            return 1;
    return 0;
}

#define PARAM_INT(suffix, type)                                                           \
    IMPL ncclResult_t impl_ncclParamGet##suffix(struct line *L, ncclParamHandle_t h, type *out) \
    {                                                                                     \
        (void)L;                                                                          \
        if (!param_ok(h) || !out)                                                         \
            return fail(ncclInvalidArgument, "invalid handle or out");                   \
        const char *v = param_value(h);                                                   \
        *out = (type)(v ? strtoll(v, NULL, 0) : 0);                                       \
        return ncclSuccess;                                                               \
    }
PARAM_INT(I8, int8_t)
PARAM_INT(I16, int16_t)
PARAM_INT(I32, int32_t)
PARAM_INT(I64, int64_t)
PARAM_INT(U8, uint8_t)
PARAM_INT(U16, uint16_t)
PARAM_INT(U32, uint32_t)
PARAM_INT(U64, uint64_t)

IMPL ncclResult_t impl_ncclParamGetStr(struct line *L, ncclParamHandle_t h, const char **out)
{
    (void)L;
    if (!param_ok(h) || !out)
        return fail(ncclInvalidArgument, "invalid handle or out");
    const char *v = param_value(h);
    *out = v ? v : "";
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclParamGet(struct line *L, ncclParamHandle_t h, void *out, int maxLen, int *len)
{
    (void)L;
    if (!param_ok(h) || !out || maxLen < 0 || !len)
        return fail(ncclInvalidArgument, "invalid arguments");
    const char *v = param_value(h);
    int n = v ? (int)strlen(v) + 1 : 1;
    if (n > maxLen)
        return fail(ncclInvalidArgument, "buffer too small");
    memcpy(out, v ? v : "", (size_t)n);
    *len = n;
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclParamGetParameter(struct line *L, const char *key, const char **value, int *valueLen)
{
    ncclParamHandle_t h;
    if (!value || !valueLen || impl_ncclParamBind(L, &h, key) != ncclSuccess)
        return fail(ncclInvalidArgument, "invalid arguments");
    const char *v = param_value(h);
    *value = v ? v : "";
    *valueLen = (int)strlen(*value);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclParamGetAllParameterKeys(struct line *L, const char ***table, int *tableLen)
{
    (void)L;
    if (!table || !tableLen)
        return fail(ncclInvalidArgument, "invalid arguments");
    *table = (const char **)param_keys;
    *tableLen = NPARAM_KEYS;
    return ncclSuccess;
}

IMPL void impl_ncclParamDumpAll(struct line *L)
{
    for (int i = 0; i < NPARAM_KEYS; i++)
        line_add(L, " %s=%s", param_keys[i], getenv(param_keys[i]) ? getenv(param_keys[i]) : "(unset)");
}

/* NCCL 2.32: accepted and logged (the fake has no sockets to encrypt). */
IMPL ncclResult_t impl_ncclSetEncryption(struct line *L, const ncclEncryptionConfig_t *config)
{
    (void)L;
    return config ? ncclSuccess : fail(ncclInvalidArgument, "NULL encryption config");
}

#if defined(FAKE_NCCL_NEW) || defined(FAKE_NCCL_NEWEST)
/* A function of an NCCL release the shim has never seen: it must receive
 * NCCL's own communicator, whoever looks it up (linked or dlsym). */
EXPORT ncclResult_t pncclCommFutureQuery(ncclComm_t comm, int *out);
EXPORT ncclResult_t pncclCommFutureQuery(ncclComm_t comm, int *out)
{
    struct line L;
    line_start(&L, "ncclCommFutureQuery");
    log_ptr(&L, "comm", comm);
    log_ptr(&L, "out", out);
    struct ncclComm c;
    ncclResult_t r = !comm_snapshot(&L, comm, &c) ? fail(ncclInvalidArgument, "invalid communicator")
                     : !out ? fail(ncclInvalidArgument, "out is NULL") : ncclSuccess;
    if (r == ncclSuccess) {
        *out = c.nranks;
        line_add(&L, " *out=%d", *out);
    }
    line_end(&L, r);
    return r;
}
EXPORT extern __typeof__(pncclCommFutureQuery) ncclCommFutureQuery __attribute__((weak, alias("pncclCommFutureQuery")));
#endif

/* ------------------------------------------------------------------------
 * Data operations
 */
static size_t type_size(ncclDataType_t t)
{
    static const unsigned char sizes[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return sizes[t];
}

enum { NO_OP = -1, NO_ROOT = -1 };

/* Validates a data operation; *c gets a copy of the comm. */
static ncclResult_t data_check(struct line *L, ncclComm_t comm, ncclDataType_t datatype,
                               int checkOp, ncclRedOp_t op, int checkRoot, int root,
                               struct ncclComm *c)
{
    if (!comm_snapshot(L, comm, c))
        return fail(ncclInvalidArgument, "invalid communicator");
    if (!datatype_ok(datatype))
        return fail(ncclInvalidArgument, "invalid datatype");
    if (checkOp && (unsigned)op >= ncclNumOps) {
        unsigned i = (unsigned)op - ncclNumOps;
        if (i >= MAX_USER_OPS || !(c->userOps & (1ULL << i)))
            return fail(ncclInvalidArgument, "invalid reduction op");
    }
    if (checkRoot && (root < 0 || root >= c->nranks))
        return fail(ncclInvalidArgument, "invalid root or peer");
    return ncclSuccess;
}

/* One rank: the result is the input (Sum, Avg, Min, Max, Prod of one value;
 * a PreMulSum is copied without scaling). More ranks: no buffer is touched. */
static ncclResult_t data_copy(const struct ncclComm *c, const void *sendbuff, void *recvbuff,
                              size_t count, ncclDataType_t datatype)
{
    size_t bytes;
    if (__builtin_mul_overflow(count, type_size(datatype), &bytes))
        return fail(ncclInvalidArgument, "count too large");
    if (bytes && (!sendbuff || !recvbuff))
        return fail(ncclInvalidArgument, "NULL buffer");
    if (c->nranks == 1 && bytes && sendbuff != recvbuff)
        memmove(recvbuff, sendbuff, bytes);
    return ncclSuccess;
}

IMPL ncclResult_t impl_ncclAllReduce(struct line *L, const void *sendbuff, void *recvbuff,
                                     size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                     ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 1, op, 0, 0, &c);
    return r ? r : data_copy(&c, sendbuff, recvbuff, count, datatype);
}

IMPL ncclResult_t impl_ncclBroadcast(struct line *L, const void *sendbuff, void *recvbuff,
                                     size_t count, ncclDataType_t datatype, int root,
                                     ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 1, root, &c);
    return r ? r : data_copy(&c, sendbuff, recvbuff, count, datatype);
}

IMPL ncclResult_t impl_ncclBcast(struct line *L, void *buff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 1, root, &c);
    return r ? r : data_copy(&c, buff, buff, count, datatype);
}

IMPL ncclResult_t impl_ncclReduce(struct line *L, const void *sendbuff, void *recvbuff,
                                  size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
                                  ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 1, op, 1, root, &c);
    return r ? r : data_copy(&c, sendbuff, recvbuff, count, datatype);
}

IMPL ncclResult_t impl_ncclReduceScatter(struct line *L, const void *sendbuff, void *recvbuff,
                                         size_t recvcount, ncclDataType_t datatype,
                                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 1, op, 0, 0, &c);
    return r ? r : data_copy(&c, sendbuff, recvbuff, recvcount, datatype);
}

IMPL ncclResult_t impl_ncclAllGather(struct line *L, const void *sendbuff, void *recvbuff,
                                     size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                                     cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 0, 0, &c);
    return r ? r : data_copy(&c, sendbuff, recvbuff, sendcount, datatype);
}

IMPL ncclResult_t impl_ncclAlltoAll(struct line *L, const void *sendbuff, void *recvbuff,
                                    size_t count, ncclDataType_t datatype, ncclComm_t comm,
                                    cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 0, 0, &c);
    return r ? r : data_copy(&c, sendbuff, recvbuff, count, datatype);
}

IMPL ncclResult_t impl_ncclGather(struct line *L, const void *sendbuff, void *recvbuff,
                                  size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 1, root, &c);
    return r ? r : data_copy(&c, sendbuff, recvbuff, count, datatype);
}

IMPL ncclResult_t impl_ncclScatter(struct line *L, const void *sendbuff, void *recvbuff,
                                   size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 1, root, &c);
    return r ? r : data_copy(&c, sendbuff, recvbuff, count, datatype);
}

/* NCCL 2.31's collectives with a per-collective config: the config checked
 * (NULL is the plain call; one not made with NCCL_COLLCONFIG_INITIALIZER, or
 * smaller than 2.31's, is refused as an invalid argument), then the plain
 * collective.  A 2.32 launchCompletionEvent is logged, not recorded: the
 * fake has no CUDA of its own. */
static ncclResult_t coll_config_check(const ncclCollConfig_t *c)
{
    if (c && (c->magic != NCCL_COLLCONFIG_MAGIC || c->size < NCCL_COLLCONFIG_SIZE_2_31))
        return fail(ncclInvalidArgument, "invalid ncclCollConfig_t");
    return ncclSuccess;
}

#define CONFIG_VARIANT(name, params, args)                                    \
    IMPL ncclResult_t impl_##name##Config(struct line *L, FAKE_UNPACK params, \
                                          const ncclCollConfig_t *config)     \
    {                                                                         \
        ncclResult_t r = coll_config_check(config);                           \
        return r ? r : impl_##name(L, FAKE_UNPACK args);                      \
    }
#define FAKE_UNPACK(...) __VA_ARGS__
CONFIG_VARIANT(ncclAllReduce,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                ncclComm_t comm, cudaStream_t stream),
               (sendbuff, recvbuff, count, datatype, op, comm, stream))
CONFIG_VARIANT(ncclBroadcast,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                ncclComm_t comm, cudaStream_t stream),
               (sendbuff, recvbuff, count, datatype, root, comm, stream))
CONFIG_VARIANT(ncclReduce,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                int root, ncclComm_t comm, cudaStream_t stream),
               (sendbuff, recvbuff, count, datatype, op, root, comm, stream))
CONFIG_VARIANT(ncclAllGather,
               (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                cudaStream_t stream),
               (sendbuff, recvbuff, sendcount, datatype, comm, stream))
CONFIG_VARIANT(ncclReduceScatter,
               (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
                ncclComm_t comm, cudaStream_t stream),
               (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))
CONFIG_VARIANT(ncclAlltoAll,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                cudaStream_t stream),
               (sendbuff, recvbuff, count, datatype, comm, stream))
CONFIG_VARIANT(ncclGather,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                ncclComm_t comm, cudaStream_t stream),
               (sendbuff, recvbuff, count, datatype, root, comm, stream))
CONFIG_VARIANT(ncclScatter,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                ncclComm_t comm, cudaStream_t stream),
               (sendbuff, recvbuff, count, datatype, root, comm, stream))
#undef CONFIG_VARIANT

/* Point-to-point: validated and logged only (no self-copy is emulated). */
IMPL ncclResult_t impl_ncclSend(struct line *L, const void *sendbuff, size_t count,
                                ncclDataType_t datatype, int peer, ncclComm_t comm,
                                cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 1, peer, &c);
    if (r)
        return r;
    return count && !sendbuff ? fail(ncclInvalidArgument, "NULL buffer") : ncclSuccess;
}

IMPL ncclResult_t impl_ncclRecv(struct line *L, void *recvbuff, size_t count,
                                ncclDataType_t datatype, int peer, ncclComm_t comm,
                                cudaStream_t stream)
{
    (void)stream;
    struct ncclComm c;
    ncclResult_t r = data_check(L, comm, datatype, 0, 0, 1, peer, &c);
    if (r)
        return r;
    return count && !recvbuff ? fail(ncclInvalidArgument, "NULL buffer") : ncclSuccess;
}

/* ------------------------------------------------------------------------
 * The exports, generated from nccl_api.def: pnccl<X> logs and calls
 * impl_nccl<X>; nccl<X> is a weak alias of it, as in real NCCL.
 */
#define FAKE_EXPORT(ret, name, params, args)                                  \
    EXPORT ret p##name params;                                                \
    EXPORT ret p##name params                                                 \
    {                                                                         \
        struct line L;                                                        \
        line_start(&L, #name);                                                \
        LOG_ARGS args                                                         \
        ret r = impl_##name(&L COMMA_ARGS args);                              \
        line_end(&L, r);                                                      \
        return r;                                                             \
    }                                                                         \
    EXPORT extern __typeof__(p##name) name __attribute__((weak, alias("p" #name)));

#define NCCL_API_SINCE(since) FAKE_HAS(since)
#define NCCL_PLAIN(ret, name, params, args) FAKE_EXPORT(ret, name, params, args)
#define NCCL_COMM(ret, name, params, args) FAKE_EXPORT(ret, name, params, args)
#define NCCL_LIFE(ret, name, params, args) FAKE_EXPORT(ret, name, params, args)
#define NCCL_DATA(name, op, params, args, count, dtype)                       \
    FAKE_EXPORT(ncclResult_t, name, params, args)
#define NCCL_VOID(name, params, args)                                         \
    EXPORT void p##name params;                                               \
    EXPORT void p##name params                                                \
    {                                                                         \
        struct line L;                                                        \
        line_start(&L, #name);                                                \
        impl_##name(&L COMMA_ARGS args);                                      \
        line_add(&L, " ->");                                                  \
        line_write(&L);                                                       \
    }                                                                         \
    EXPORT extern __typeof__(p##name) name __attribute__((weak, alias("p" #name)));
#include "nccl_api.def"
#undef NCCL_API_SINCE
