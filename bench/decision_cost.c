/*
 * Cost of a decision (issue 3): the time from the first rank's
 * ncclCommInitRank call to the last rank's return, for one communicator of N
 * ranks on loopback with the fake NCCL (whose init returns at once), so that
 * what is measured is the shim's decision alone.
 *
 *   decision_cost WORKDIR SHIMLIB [ITERS_2 [ITERS_16 [ROUNDS [WARMUP]]]]
 *
 * Configurations, all in one run, interleaved in ROUNDS blocks (a block = one
 * fresh set of N rank processes running ITERS/ROUNDS communicators after
 * WARMUP unmeasured ones), so that a drift of the machine hits all alike:
 *   a  no shim
 *   b  shim, NCCLSHIM_TAG=none: unmarked ID, decided locally
 *   c  shim, default settings: marked ID, purpose unknown -> passthrough (1 round)
 *   d  shim, NCCLSHIM_WEIGHT_UPDATE=socket, rank 0 NCCLSHIM_ROLE=training, the
 *      others inference: weight-update -> socket (1 round: every rank said in its
 *      HELLO that it can carry socket out; netName=Socket)
 *   e  as d with NCCLSHIM_WEIGHT_UPDATE=drop (2 rounds, no NCCL init at all)
 *
 * The parent (no shim) forks the ranks; each re-executes this program with
 * the configuration's environment (LD_PRELOAD=SHIMLIB or none).  The ranks
 * share a memfd mapping: rank 0 makes the ID (ncclGetUniqueId) and puts it
 * there; all meet at a futex barrier, take CLOCK_MONOTONIC just before
 * ncclCommInitRank and just after it returns, store both, destroy the
 * communicator.  Per communicator the metric is max(end) - min(start).  The
 * shim's records (written to WORKDIR: part of the real cost) are checked
 * afterwards: every communicator must have had the expected action, rounds
 * and the root's verdict, and their decision.wait_us are reported.
 *
 * With DECISION_COST_CUDA=<path of a libcuda.so.1> in the environment, every
 * rank loads it first (bench/decision_cost.sh: the fake one), as a CUDA
 * application has the driver loaded when it creates communicators.
 *
 * Every wait is bounded: the barrier by a timeout, each rank by alarm(), the
 * parent's wait for its children by a deadline (then they are killed).
 */
#define _GNU_SOURCE
#include "nccl_abi.h"
#include "nccl_decls.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 16
#define MAX_ITERS 4096          /* per block, warm-up included */
/* The bounds (-D to try them out): */
#ifndef BARRIER_TIMEOUT_S
#define BARRIER_TIMEOUT_S 60    /* one barrier wait (the shim's own rendezvous timeout is 30 s) */
#endif
#ifndef RANK_ALARM_S
#define RANK_ALARM_S 300        /* a rank process lives at most this long */
#endif
#ifndef BLOCK_DEADLINE_S
#define BLOCK_DEADLINE_S 330    /* the parent kills a block's ranks after this */
#endif

extern char **environ;

struct shared {
    _Atomic uint32_t abort;     /* set by a failing rank: the others leave their barrier */
    _Atomic uint32_t bar_count;
    _Atomic uint32_t bar_gen;   /* the futex word */
    uint32_t nranks;
    ncclUniqueId id;            /* this iteration's ID, written by rank 0 */
    char error[256];            /* the first failure, for the parent to print */
    _Atomic uint32_t error_set;
    int64_t getid_ns[MAX_ITERS];
    int64_t t0[MAX_ITERS][MAX_RANKS];
    int64_t t1[MAX_ITERS][MAX_RANKS];
    int64_t cpu[MAX_ITERS][MAX_RANKS]; /* CPU time of the rank's process (all threads) over the window */
};

static int64_t clock_ns(clockid_t clk)
{
    struct timespec ts;
    if (clock_gettime(clk, &ts) != 0) {
        perror("clock_gettime");
        _exit(3);
    }
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

/* ---------------------------------------------------------------- ranks */

__attribute__((format(printf, 2, 3))) static void rank_fail(struct shared *s, const char *fmt, ...)
{
    if (atomic_exchange(&s->error_set, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->error, sizeof(s->error), fmt, ap);
        va_end(ap);
    }
    atomic_store(&s->abort, 1);
}

/* A reusable barrier of s->nranks processes: 0, or -1 on timeout or abort. */
static int barrier_wait(struct shared *s)
{
    uint32_t gen = atomic_load(&s->bar_gen);
    if (atomic_fetch_add(&s->bar_count, 1) + 1 == s->nranks) {
        atomic_store(&s->bar_count, 0);
        atomic_fetch_add(&s->bar_gen, 1);
        if (syscall(SYS_futex, &s->bar_gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0) < 0)
            return -1;
        return 0;
    }
    int64_t deadline = now_ns() + (int64_t)BARRIER_TIMEOUT_S * 1000000000;
    while (atomic_load(&s->bar_gen) == gen) {
        if (atomic_load(&s->abort))
            return -1;
        int64_t left = deadline - now_ns();
        if (left <= 0)
            return -1;
        if (left > 100000000) /* look at the abort flag at least every 100 ms */
            left = 100000000;
        struct timespec rel = { 0, (long)left };
        if (syscall(SYS_futex, &s->bar_gen, FUTEX_WAIT, gen, &rel, NULL, 0) != 0 && errno != EAGAIN &&
            errno != EINTR && errno != ETIMEDOUT)
            return -1;
    }
    return 0;
}

static int rank_main(int rank, int nranks, int iters, int fd)
{
    alarm(RANK_ALARM_S); /* the bound on everything below, the shim's rendezvous included */
    /* The (fake) CUDA driver, loaded as an application's CUDA runtime loads
     * it: the shim asks it for the current device. */
    const char *cuda = getenv("DECISION_COST_CUDA");
    if (cuda && *cuda && !dlopen(cuda, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "decision_cost: rank %d: %s\n", rank, dlerror());
        return 3;
    }
    struct shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) {
        perror("mmap");
        return 3;
    }
    if (close(fd) != 0)
        return 3;
    for (int it = 0; it < iters; it++) {
        ncclUniqueId id;
        if (rank == 0) {
            int64_t g0 = now_ns();
            ncclResult_t r = ncclGetUniqueId(&s->id);
            s->getid_ns[it] = now_ns() - g0;
            if (r != ncclSuccess) {
                rank_fail(s, "rank %d, communicator %d: ncclGetUniqueId returned %d", rank, it, (int)r);
                return 1;
            }
        }
        if (barrier_wait(s) != 0)
            goto barrier_failed;
        memcpy(&id, &s->id, sizeof(id));
        int64_t c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        if (barrier_wait(s) != 0) /* the start: nobody reads s->id any more, all are ready */
            goto barrier_failed;
        ncclComm_t comm = NULL;
        int64_t t0 = now_ns();
        ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
        int64_t t1 = now_ns();
        s->cpu[it][rank] = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
        s->t0[it][rank] = t0;
        s->t1[it][rank] = t1;
        if (r != ncclSuccess) {
            rank_fail(s, "rank %d, communicator %d: ncclCommInitRank returned %d", rank, it, (int)r);
            return 1;
        }
        r = ncclCommDestroy(comm);
        if (r != ncclSuccess) {
            rank_fail(s, "rank %d, communicator %d: ncclCommDestroy returned %d", rank, it, (int)r);
            return 1;
        }
        continue;
    barrier_failed:
        rank_fail(s, "rank %d, communicator %d: a barrier timed out or was aborted", rank, it);
        return 1;
    }
    return 0;
}

/* --------------------------------------------------------------- parent */

enum { CFG_A, CFG_B, CFG_C, CFG_D, CFG_E, NCFG };

static const struct config {
    const char *name;
    int shim;
    const char *tag;            /* NCCLSHIM_TAG, or NULL */
    const char *weight_update;  /* NCCLSHIM_WEIGHT_UPDATE, or NULL */
    int roles;                  /* rank 0 training, the others inference */
    /* What every comm record must say: */
    const char *action;         /* NULL: no records (no shim) */
    int rounds;                 /* 0: no "decision" object (unmarked) */
} configs[NCFG] = {
    { "(a) no shim", 0, NULL, NULL, 0, NULL, 0 },
    { "(b) shim, unmarked (TAG=none)", 1, "none", NULL, 0, "passthrough", 0 },
    { "(c) shim, marked, passthrough", 1, NULL, NULL, 0, "passthrough", 1 },
    { "(d) shim, marked, socket", 1, NULL, "socket", 1, "socket", 1 },
    { "(e) shim, marked, drop", 1, NULL, "drop", 1, "drop", 2 },
};

struct samples {
    double *v;
    int n, cap;
};

static void push(struct samples *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->v = realloc(s->v, (size_t)s->cap * sizeof(double));
        if (!s->v) {
            fprintf(stderr, "decision_cost: out of memory\n");
            exit(3);
        }
    }
    s->v[s->n++] = x;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile (p in 0..1) of s (sorted in place). */
static double pct(struct samples *s, double p)
{
    if (s->n == 0)
        return 0;
    qsort(s->v, (size_t)s->n, sizeof(double), cmp_double);
    int k = (int)(p * s->n + 0.999999999);
    if (k < 1)
        k = 1;
    if (k > s->n)
        k = s->n;
    return s->v[k - 1];
}

struct result {
    struct samples ms;          /* per communicator: max(end) - min(start), ms */
    struct samples call_us;     /* every rank's own ncclCommInitRank call (end - start) */
    struct samples cpu_ms;      /* per communicator: CPU time of all its ranks' processes over the window */
    struct samples getid_us;    /* rank 0's ncclGetUniqueId */
    struct samples wait_us;     /* every rank's decision.wait_us from its comm record */
    struct samples block_med;   /* the median of each block, ms */
};

/* The environment of a rank: ours without the shim's, the fake's or the loader's settings, plus the config's. */
static char **rank_env(const struct config *c, int rank, const char *shim, const char *logdir, size_t *ours)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 8, sizeof(char *));
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "NCCLSHIM_", 9) != 0 && strncmp(environ[i], "FAKE_", 5) != 0 &&
            strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            env[k++] = environ[i];
    char buf[6][PATH_MAX + 64];
    int nb = 0;
    if (c->shim) {
        if (snprintf(buf[nb++], sizeof(buf[0]), "LD_PRELOAD=%s", shim) >= (int)sizeof(buf[0]) ||
            snprintf(buf[nb++], sizeof(buf[0]), "NCCLSHIM_LOG_DIR=%s", logdir) >= (int)sizeof(buf[0])) {
            free(env);
            return NULL;
        }
        if (c->tag)
            snprintf(buf[nb++], sizeof(buf[0]), "NCCLSHIM_TAG=%s", c->tag);
        if (c->weight_update)
            snprintf(buf[nb++], sizeof(buf[0]), "NCCLSHIM_WEIGHT_UPDATE=%s", c->weight_update);
        if (c->roles)
            snprintf(buf[nb++], sizeof(buf[0]), "NCCLSHIM_ROLE=%s", rank == 0 ? "training" : "inference");
    }
    *ours = k; /* env[*ours..] are our copies, freed by the caller */
    for (int i = 0; i < nb; i++) {
        env[k] = strdup(buf[i]);
        if (!env[k])
            return NULL;
        k++;
    }
    env[k] = NULL;
    return env;
}

/* A JSON field's value in a record line: the text after "key": up to the next , or }. */
static int field(const char *from, const char *key, char *out, size_t outlen)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(from, pat);
    if (!p)
        return -1;
    p += strlen(pat);
    if (*p == '"')
        p++;
    size_t i = 0;
    while (p[i] && p[i] != '"' && p[i] != ',' && p[i] != '}' && i + 1 < outlen) {
        out[i] = p[i];
        i++;
    }
    out[i] = '\0';
    return 0;
}

/* Checks the comm records of one block and collects their wait_us; 0, or -1 with a message. */
static int read_records(const char *logdir, const struct config *c, int nranks, int warm, int iters,
                        struct samples *wait_us)
{
    DIR *d = opendir(logdir);
    if (!d) {
        fprintf(stderr, "decision_cost: %s: no records (%s)\n", logdir, strerror(errno));
        return -1;
    }
    int files = 0, bad = 0, total = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s/%s", logdir, e->d_name) >= (int)sizeof(path))
            continue;
        FILE *f = fopen(path, "r");
        if (!f) {
            fprintf(stderr, "decision_cost: %s: %s\n", path, strerror(errno));
            bad++;
            continue;
        }
        files++;
        char *line = NULL;
        size_t cap = 0;
        int seen = 0;
        while (getline(&line, &cap, f) > 0) {
            if (strncmp(line, "{\"type\":\"comm\",", 15) != 0)
                continue;
            if (seen++ < warm)
                continue;
            total++;
            char action[32] = "", by[40] = "", rounds[16] = "", wait[32] = "";
            const char *dec = strstr(line, "\"decision\":{");
            field(line, "action", action, sizeof(action));
            if (dec) {
                field(dec, "by", by, sizeof(by));
                field(dec, "rounds", rounds, sizeof(rounds));
                field(dec, "wait_us", wait, sizeof(wait));
            }
            int ok = strcmp(action, c->action) == 0 &&
                     (c->rounds == 0 ? dec == NULL
                                     : dec && strcmp(by, "root") == 0 && atoi(rounds) == c->rounds && wait[0]);
            if (!ok) {
                if (bad++ < 3)
                    fprintf(stderr, "decision_cost: %s: unexpected comm record (want %s, %d rounds): %.600s",
                            c->name, c->action, c->rounds, line);
            } else if (dec) {
                push(wait_us, strtod(wait, NULL));
            }
        }
        free(line);
        if (fclose(f) != 0)
            bad++;
    }
    if (closedir(d) != 0)
        bad++;
    if (files != nranks || total != nranks * iters) {
        fprintf(stderr, "decision_cost: %s, %d ranks: %d record files and %d comm records, expected %d and %d\n",
                c->name, nranks, files, total, nranks, nranks * iters);
        bad++;
    }
    return bad ? -1 : 0;
}

/* Runs one block: nranks fresh processes, warm + iters communicators.  0, or -1. */
static int run_block(const char *self, const char *workdir, const char *shim, int ci, int nranks, int round,
                     int warm, int iters, struct result *res)
{
    const struct config *c = &configs[ci];
    int total = warm + iters;
    char logdir[PATH_MAX];
    if (snprintf(logdir, sizeof(logdir), "%s/rec-%c-%d-%d", workdir, "abcde"[ci], nranks, round) >=
        (int)sizeof(logdir)) {
        fprintf(stderr, "decision_cost: work directory path too long\n");
        return -1;
    }
    int fd = memfd_create("decision_cost", 0); /* inherited across exec: no MFD_CLOEXEC */
    if (fd < 0 || ftruncate(fd, sizeof(struct shared)) != 0) {
        perror("memfd");
        return -1;
    }
    struct shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) {
        perror("mmap");
        return -1;
    }
    s->nranks = (uint32_t)nranks;
    if (fflush(NULL) != 0)
        return -1;

    pid_t pids[MAX_RANKS];
    int started = 0, failed = 0;
    for (int r = 0; r < nranks; r++) {
        size_t ours = 0;
        char **env = rank_env(c, r, shim, logdir, &ours);
        if (!env) {
            fprintf(stderr, "decision_cost: out of memory\n");
            failed = 1;
            break;
        }
        char a_rank[16], a_n[16], a_it[16], a_fd[16];
        snprintf(a_rank, sizeof(a_rank), "%d", r);
        snprintf(a_n, sizeof(a_n), "%d", nranks);
        snprintf(a_it, sizeof(a_it), "%d", total);
        snprintf(a_fd, sizeof(a_fd), "%d", fd);
        pid_t pid = fork();
        if (pid == 0) {
            /* The rank dies with the parent; the parent's own bound covers its waits. */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
                _exit(3);
            char *argv[] = { (char *)self, "rank", a_rank, a_n, a_it, a_fd, NULL };
            execve("/proc/self/exe", argv, env);
            perror("execve");
            _exit(3);
        }
        for (char **e = env + ours; *e; e++)
            free(*e);
        free(env);
        if (pid < 0) {
            perror("fork");
            failed = 1;
            break;
        }
        pids[started++] = pid;
    }
    if (close(fd) != 0)
        failed = 1;
    if (failed)
        atomic_store(&s->abort, 1);

    /* Bounded wait for every rank. */
    int64_t deadline = now_ns() + (int64_t)BLOCK_DEADLINE_S * 1000000000;
    int alive = started;
    int status_bad = 0;
    while (alive > 0) {
        for (int i = 0; i < started; i++) {
            if (pids[i] <= 0)
                continue;
            int st;
            pid_t w = waitpid(pids[i], &st, WNOHANG);
            if (w < 0) {
                perror("waitpid");
                pids[i] = -1;
                alive--;
                status_bad = 1;
            } else if (w == pids[i]) {
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    status_bad = 1;
                    if (WIFSIGNALED(st))
                        fprintf(stderr, "decision_cost: %s, %d ranks: rank %d killed by signal %d%s\n", c->name,
                                nranks, i, WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (its alarm: a hang)" : "");
                }
                pids[i] = -1;
                alive--;
            }
        }
        if (alive == 0)
            break;
        if (now_ns() > deadline) {
            fprintf(stderr, "decision_cost: %s, %d ranks: still running after %d s, killed\n", c->name, nranks,
                    BLOCK_DEADLINE_S);
            for (int i = 0; i < started; i++)
                if (pids[i] > 0 && kill(pids[i], SIGKILL) != 0)
                    perror("kill");
            deadline = now_ns() + 5000000000LL; /* reaping the killed is bounded too */
            status_bad = 1;
            atomic_store(&s->abort, 1);
        }
        struct timespec ts = { 0, 1000000 };
        if (nanosleep(&ts, NULL) != 0 && errno != EINTR) {
            perror("nanosleep");
            deadline = 0; /* kill and reap at once */
        }
    }
    if (status_bad || failed || atomic_load(&s->abort)) {
        fprintf(stderr, "decision_cost: %s, %d ranks, round %d failed%s%s\n", c->name, nranks, round,
                atomic_load(&s->error_set) ? ": " : "", atomic_load(&s->error_set) ? s->error : "");
        if (munmap(s, sizeof(*s)) != 0)
            perror("munmap");
        return -1;
    }

    struct samples blk = { 0 };
    for (int it = warm; it < total; it++) {
        int64_t lo = INT64_MAX, hi = INT64_MIN, cpu = 0;
        for (int r = 0; r < nranks; r++) {
            cpu += s->cpu[it][r];
            push(&res->call_us, (double)(s->t1[it][r] - s->t0[it][r]) / 1e3);
            if (s->t0[it][r] < lo)
                lo = s->t0[it][r];
            if (s->t1[it][r] > hi)
                hi = s->t1[it][r];
        }
        double ms = (double)(hi - lo) / 1e6;
        push(&res->ms, ms);
        push(&blk, ms);
        push(&res->getid_us, (double)s->getid_ns[it] / 1e3);
        push(&res->cpu_ms, (double)cpu / 1e6);
    }
    push(&res->block_med, pct(&blk, 0.5));
    free(blk.v);
    if (munmap(s, sizeof(*s)) != 0)
        return -1;
    if (c->action && read_records(logdir, c, nranks, warm, iters, &res->wait_us) != 0)
        return -1;
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: decision_cost WORKDIR SHIMLIB [ITERS_2 [ITERS_16 [ROUNDS [WARMUP]]]]\n");
    exit(2);
}

static int number(const char *s, int lo, int hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        usage();
    return (int)v;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "rank") == 0)
        return rank_main(number(argv[2], 0, MAX_RANKS - 1), number(argv[3], 1, MAX_RANKS),
                         number(argv[4], 1, MAX_ITERS), number(argv[5], 0, INT_MAX));
    if (argc < 3 || argc > 7)
        usage();
    const char *workdir = argv[1], *shim = argv[2];
    int iters2 = argc > 3 ? number(argv[3], 1, 100000) : 200;
    int iters16 = argc > 4 ? number(argv[4], 1, 100000) : 100;
    int rounds = argc > 5 ? number(argv[5], 1, 1000) : 4;
    int warm = argc > 6 ? number(argv[6], 0, 100) : 3;
    struct stat st;
    if (stat(workdir, &st) != 0 || !S_ISDIR(st.st_mode) || stat(shim, &st) != 0) {
        fprintf(stderr, "decision_cost: %s must be a directory and %s the shim library\n", workdir, shim);
        return 2;
    }
    if (setvbuf(stdout, NULL, _IOLBF, 0) != 0)
        return 3;
    /* DECISION_COST_CONFIGS=cd runs only (c) and (d), e.g. under a profiler; the verdicts then mean nothing. */
    const char *only = getenv("DECISION_COST_CONFIGS");
    if (!only || !*only)
        only = "abcde";
    const int sizes[2] = { 2, 16 };
    const int iters[2] = { iters2, iters16 };
    static struct result res[2][NCFG];

    printf("ranks 2: %d communicators, ranks 16: %d, in %d interleaved rounds, %d warm-up communicators per "
           "block not counted\n", iters2, iters16, rounds, warm);
    for (int round = 0; round < rounds; round++)
        for (int si = 0; si < 2; si++) {
            /* Spread ITERS over the rounds (the first ones take the remainder). */
            int n = iters[si] / rounds + (round < iters[si] % rounds);
            if (n == 0)
                continue;
            if (warm + n > MAX_ITERS) {
                fprintf(stderr, "decision_cost: at most %d communicators per block\n", MAX_ITERS);
                return 2;
            }
            for (int ci = 0; ci < NCFG; ci++)
                if (strchr(only, "abcde"[ci]) && run_block(argv[0], workdir, shim, ci, sizes[si], round, warm, n, &res[si][ci]) != 0)
                    return 1;
        }

    printf("\nper communicator: first rank's call to last rank's return; call_us: one rank's init call, median; "
           "getid_us: rank 0's ncclGetUniqueId, median; cpu_ms: CPU time of all the ranks' processes from the start "
           "barrier to their return, summed, median; wait_us: decision.wait_us of the comm records\n");
    printf("%-31s %5s %5s %9s %9s %9s %7s %9s | %7s %8s %6s | %s\n", "config", "ranks", "comms", "median_ms",
           "p90_ms", "max_ms", "ratio_a", "added_ms", "call_us", "getid_us", "cpu_ms", "wait_us median/p90/max");
    for (int si = 0; si < 2; si++) {
        double base = pct(&res[si][CFG_A].ms, 0.5);
        for (int ci = 0; ci < NCFG; ci++) {
            struct result *r = &res[si][ci];
            double med = pct(&r->ms, 0.5);
            char wait[64] = "-";
            if (r->wait_us.n)
                snprintf(wait, sizeof(wait), "%.0f/%.0f/%.0f", pct(&r->wait_us, 0.5), pct(&r->wait_us, 0.9),
                         pct(&r->wait_us, 1.0));
            printf("%-31s %5d %5d %9.3f %9.3f %9.3f %7.2f %+9.3f | %7.1f %8.1f %6.3f | %s\n", configs[ci].name,
                   sizes[si], r->ms.n, med, pct(&r->ms, 0.9), pct(&r->ms, 1.0), base > 0 ? med / base : 0,
                   med - base, pct(&r->call_us, 0.5), pct(&r->getid_us, 0.5), pct(&r->cpu_ms, 0.5), wait);
        }
        printf("\n");
    }
    printf("block medians, ms (one per round; their spread is the run-to-run noise):\n");
    for (int si = 0; si < 2; si++)
        for (int ci = 0; ci < NCFG; ci++) {
            printf("  %-31s %2d ranks:", configs[ci].name, sizes[si]);
            for (int b = 0; b < res[si][ci].block_med.n; b++) /* in round order: not sorted yet */
                printf(" %.3f", res[si][ci].block_med.v[b]);
            printf("\n");
        }
    printf("\nverdicts (the targets: a marked communicator of 16 ranks decided in under 5 ms; nothing measurable "
           "added to an unmarked one):\n");
    double worst = 0;
    for (int ci = CFG_C; ci <= CFG_E; ci++) {
        double med = pct(&res[1][ci].ms, 0.5);
        worst = med > worst ? med : worst;
        printf("  marked, 16 ranks, %-31s median %.3f ms, p90 %.3f ms\n", configs[ci].name, med,
               pct(&res[1][ci].ms, 0.9));
    }
    printf("  marked, 16 ranks: worst median %.3f ms: under 5 ms %s\n", worst, worst < 5.0 ? "met" : "NOT met");
    for (int si = 0; si < 2; si++) {
        struct samples *ba = &res[si][CFG_A].block_med, *bb = &res[si][CFG_B].block_med;
        double amin = pct(ba, 0.0), amax = pct(ba, 1.0), bmin = pct(bb, 0.0), bmax = pct(bb, 1.0);
        printf("  unmarked, %2d ranks: (b) - (a) = %+.1f us in the median; block medians (a) %.3f..%.3f ms, "
               "(b) %.3f..%.3f ms: %s\n", sizes[si],
               1000 * (pct(&res[si][CFG_B].ms, 0.5) - pct(&res[si][CFG_A].ms, 0.5)), amin, amax, bmin, bmax,
               bmin > amax ? "measurable (the ranges do not overlap)" : "within the noise (the ranges overlap)");
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        perror("decision_cost: stdout");
        return 3;
    }
    return 0;
}
