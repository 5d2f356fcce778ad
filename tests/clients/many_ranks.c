/*
 * Many ranks of one communicator in one process, one thread each, for the
 * rendezvous at scale (tests/t/30-rv-scale.t, bench/rv_scale.py).
 * Linked against the fake NCCL; the shim comes in LD_PRELOAD.
 *
 *   many_ranks id
 *       ncclGetUniqueId, printed as "ID <hex>"; then serves it (the shim's
 *       root) until stdin closes, sampling its own descriptors every
 *       millisecond: "ROOT maxfds=<n> hwm_kb=<peak RSS> threads=<max>".
 *   many_ranks ranks HEX NRANKS FIRST COUNT
 *       ranks FIRST..FIRST+COUNT-1, one thread each, call ncclCommInitRank
 *       and ncclCommDestroy; then "RANKS first=F count=C ok=<inits that
 *       succeeded> t0max=<last call, ns> t1max=<last return, ns> t0min=..."
 *       MANY_RANKS_FDS=n: first open n descriptors, as an application's own.
 *       MANY_RANKS_WARM_STACK_KIB=n: each rank's thread first touches n KiB of
 *       its stack, as a process's main thread has (at most 256).
 *       MANY_RANKS_SIGNAL_US=n: each rank's thread gets SIGALRM every n us
 *       during its init (a handler without SA_RESTART: its waits see EINTR).
 *       MANY_RANKS_HOLD=1: once every rank of this process has its
 *       communicator, print "CREATED" and destroy them only when stdin
 *       closes: bench/rv_scale.py holds every process's teardown until all
 *       processes have created theirs.
 *       MANY_RANKS_START_AT=ns: every rank's thread calls init at that
 *       CLOCK_REALTIME instant (tests/rv/chaos.py: a herd released at once).
 *       (CLOCK_REALTIME, as the records' ts: comparable between processes of one machine).
 */
#define _GNU_SOURCE
#include "client_util.h"
#include "nccl_abi.h"
#include "nccl_decls.h"

#include <alloca.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static ncclUniqueId g_id;
static int g_nranks;
static struct timespec g_start_at; /* MANY_RANKS_START_AT; zero: at once */
/* Destroys wait until every rank of this process has its communicator (and
 * with MANY_RANKS_HOLD, of every process): a destroy, a thread's exit and a
 * process's exit are no part of creating one, and would take the cores from
 * ranks still deciding.  The last rank to have its communicator posts
 * g_created for the main thread; every rank sleeps once, at g_go, which the
 * main thread joins when the teardown may start. */
static atomic_int g_ncreated;
static int g_count;
static sem_t g_created;
static pthread_barrier_t g_go;

struct rank_run {
    int rank;
    int ok;
    uint64_t t0, t1;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long hwm_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* Touches the first `kib` KiB of this thread's stack.  A rank's init runs,
 * in a job, on a process's main thread (Python's), whose stack pages were
 * touched long before; a fresh thread's first touch of each page is a page
 * fault, and the deepest ones (the record's buffer) come after the decision. */
static __attribute__((noinline)) void warm_stack(size_t kib)
{
    char *p = alloca(kib << 10);
    memset(p, 0, kib << 10);
    __asm__ volatile("" : : "r"(p) : "memory");
}

static size_t g_warm_kib;
/* MANY_RANKS_SIGNAL_US: the period of a signal to each rank's thread while it inits, 0: none. */
static long g_signal_us;

static void on_alarm(int sig)
{
    (void)sig; /* only interrupts: a wait must stay bounded all the same */
}

/* A timer that signals this thread every g_signal_us (no SA_RESTART: blocking calls see EINTR). */
static int signal_storm(timer_t *t)
{
    struct sigevent ev;
    memset(&ev, 0, sizeof(ev));
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGALRM;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    struct itimerspec its = { { g_signal_us / 1000000, g_signal_us % 1000000 * 1000 },
                              { g_signal_us / 1000000, g_signal_us % 1000000 * 1000 } };
    if (timer_create(CLOCK_MONOTONIC, &ev, t) != 0) {
        perror("timer_create");
        return -1;
    }
    if (timer_settime(*t, 0, &its, NULL) != 0) {
        perror("timer_settime");
        timer_delete(*t);
        return -1;
    }
    return 0;
}

static void *run_rank(void *arg)
{
    struct rank_run *r = arg;
    ncclComm_t comm = NULL;
    if (g_warm_kib)
        warm_stack(g_warm_kib);
    timer_t storm;
    int storming = g_signal_us > 0 && signal_storm(&storm) == 0;
    while (g_start_at.tv_sec && clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &g_start_at, NULL) == EINTR)
        ;
    r->t0 = now_ns();
    ncclResult_t rc = ncclCommInitRank(&comm, g_nranks, g_id, r->rank);
    r->t1 = now_ns();
    if (storming)
        timer_delete(storm);
    int count = -1;
    r->ok = rc == ncclSuccess && ncclCommCount(comm, &count) == ncclSuccess && count == g_nranks;
    if (atomic_fetch_add(&g_ncreated, 1) + 1 == g_count)
        sem_post(&g_created);
    pthread_barrier_wait(&g_go);
    if (rc == ncclSuccess)
        ncclCommDestroy(comm);
    return NULL;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "id") == 0) {
        if (ncclGetUniqueId(&g_id) != ncclSuccess) {
            fprintf(stderr, "ncclGetUniqueId failed\n");
            return 1;
        }
        id_print(&g_id);
        int maxfds = 0, maxthreads = 0;
        for (;;) {
            int fds = count_dir("/proc/self/fd"), th = count_dir("/proc/self/task");
            maxfds = fds > maxfds ? fds : maxfds;
            maxthreads = th > maxthreads ? th : maxthreads;
            struct pollfd p = { 0, POLLIN, 0 };
            if (poll(&p, 1, 1) > 0) {
                char b[64];
                if (read(0, b, sizeof(b)) <= 0)
                    break;
            }
        }
        printf("ROOT maxfds=%d hwm_kb=%ld threads=%d\n", maxfds, hwm_kb(), maxthreads);
        return 0;
    }
    if (argc != 6 || strcmp(argv[1], "ranks") != 0 || id_from_hex(argv[2], &g_id) != 0) {
        fprintf(stderr, "usage: many_ranks id | many_ranks ranks HEX NRANKS FIRST COUNT\n");
        return 2;
    }
    g_nranks = atoi(argv[3]);
    if (getenv("MANY_RANKS_START_AT")) {
        unsigned long long at = strtoull(getenv("MANY_RANKS_START_AT"), NULL, 10);
        g_start_at.tv_sec = (time_t)(at / 1000000000ull);
        g_start_at.tv_nsec = (long)(at % 1000000000ull);
    }
    /* MANY_RANKS_WARM_STACK_KIB=n: each rank's thread touches n KiB of its stack first (warm_stack). */
    g_warm_kib = getenv("MANY_RANKS_WARM_STACK_KIB") ? (size_t)atoi(getenv("MANY_RANKS_WARM_STACK_KIB")) : 0;
    if (g_warm_kib > 256)
        g_warm_kib = 256; /* within the 512 KiB stacks below */
    g_signal_us = getenv("MANY_RANKS_SIGNAL_US") ? atol(getenv("MANY_RANKS_SIGNAL_US")) : 0;
    if (g_signal_us > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_alarm; /* no SA_RESTART */
        if (sigaction(SIGALRM, &sa, NULL) != 0) {
            perror("sigaction");
            return 1;
        }
    }
    /* MANY_RANKS_FDS=n: descriptors the "application" holds, to bring a limit near. */
    for (int i = 0, n = getenv("MANY_RANKS_FDS") ? atoi(getenv("MANY_RANKS_FDS")) : 0; i < n; i++)
        if (open("/dev/null", O_RDONLY) < 0) {
            perror("open /dev/null");
            return 1;
        }
    int first = atoi(argv[4]), count = atoi(argv[5]);
    struct rank_run *runs = calloc((size_t)count, sizeof(*runs));
    pthread_t *th = calloc((size_t)count, sizeof(*th));
    if (!runs || !th)
        return 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 512 << 10);
    g_count = count;
    sem_init(&g_created, 0, 0);
    pthread_barrier_init(&g_go, NULL, (unsigned)count + 1);
    int started = 0;
    for (int i = 0; i < count; i++) {
        runs[i].rank = first + i;
        if (pthread_create(&th[i], &attr, run_rank, &runs[i]) != 0) {
            fprintf(stderr, "pthread_create failed at rank %d: exiting\n", first + i);
            _exit(1); /* the started ones would wait at the barrier for ever */
        }
        started++;
    }
    while (sem_wait(&g_created) != 0)
        ; /* EINTR */
    const char *hold = getenv("MANY_RANKS_HOLD");
    if (hold && strcmp(hold, "1") == 0) {
        printf("CREATED\n");
        char b[64];
        while (read(0, b, sizeof(b)) > 0)
            ;
    }
    pthread_barrier_wait(&g_go);
    int ok = 0;
    uint64_t t0max = 0, t1max = 0, t0min = UINT64_MAX;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        ok += runs[i].ok;
        t0max = runs[i].t0 > t0max ? runs[i].t0 : t0max;
        t1max = runs[i].t1 > t1max ? runs[i].t1 : t1max;
        t0min = runs[i].t0 < t0min ? runs[i].t0 : t0min;
    }
    printf("RANKS first=%d count=%d ok=%d t0max=%llu t1max=%llu t0min=%llu\n", first, count, ok,
           (unsigned long long)t0max, (unsigned long long)t1max, (unsigned long long)t0min);
    return ok == count ? 0 : 1;
}
