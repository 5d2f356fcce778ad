/*
 * The floor under bench/rv_scale.py's decide_ms on this machine: how long it
 * takes only to wake N threads, each once, with no shim and no NCCL
 * (docs/benchmarks.md, "Rendezvous at scale").  rv_scale.py runs a rank as a
 * thread, and after the root's COMMIT every rank thread must be woken and
 * scheduled once; on 2 cores they take turns.
 *
 *   wake_floor futex N
 *       N threads wait on one futex word; one FUTEX_WAKE wakes all; each, once
 *       awake, notes the time and sleeps at a barrier: the least any design
 *       can cost in which each rank is a thread that must wake up.
 *   wake_floor socket LEADERS MEMBERS FRAME
 *       LEADERS threads each send FRAME bytes to each of MEMBERS threads, one
 *       Unix stream socket each (the COMMIT's relay by host leaders); each
 *       member, woken in recv(), reads a 12-byte header and the rest (as
 *       rv_recv_msg does), closes its socket, notes the time and sleeps at a
 *       barrier: the same delivery without anything of the shim.
 *
 * Prints the time from the wake (the first send) to the last thread's note,
 * and that time per thread on the machine's cores.  Build:
 *   cc -O2 -o /tmp/wake_floor bench/wake_floor.c -lpthread
 * It needs MEMBERS x LEADERS x 2 descriptors: `ulimit -n 10000` for 4096.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HEADER 12

static int g_members, g_frame;
static int (*g_fds)[2];
static pthread_barrier_t g_done;
/* futex: the waiters' word; socket: the leaders' start. */
static atomic_int g_word, g_waiting;
static atomic_ullong g_last;

static unsigned long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static void note(void)
{
    unsigned long long t = now_ns(), o = atomic_load(&g_last);
    while (t > o && !atomic_compare_exchange_weak(&g_last, &o, t))
        ;
}

static void *futex_waiter(void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_waiting, 1);
    while (!atomic_load(&g_word))
        syscall(SYS_futex, &g_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    note();
    pthread_barrier_wait(&g_done);
    return NULL;
}

static int recv_all(int fd, char *buf, int len)
{
    for (int off = 0; off < len;) {
        ssize_t n = recv(fd, buf + off, (size_t)(len - off), 0);
        if (n <= 0 && !(n < 0 && errno == EINTR))
            return -1;
        off += n > 0 ? (int)n : 0;
    }
    return 0;
}

static void *member(void *arg)
{
    int fd = g_fds[(long)arg][1];
    char buf[4096];
    atomic_fetch_add(&g_waiting, 1); /* then asleep in recv() before the leaders start */
    if (recv_all(fd, buf, HEADER) != 0 || recv_all(fd, buf, g_frame - HEADER) != 0)
        fprintf(stderr, "member %ld: recv failed\n", (long)arg);
    close(fd);
    note();
    pthread_barrier_wait(&g_done);
    return NULL;
}

static void *leader(void *arg)
{
    long l = (long)arg;
    char buf[4096];
    memset(buf, 1, sizeof(buf));
    while (!atomic_load(&g_word))
        syscall(SYS_futex, &g_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    for (int j = 0; j < g_members; j++)
        if (send(g_fds[l * g_members + j][0], buf, (size_t)g_frame, MSG_NOSIGNAL) != g_frame)
            fprintf(stderr, "leader %ld: send to member %d failed\n", l, j);
    for (int j = 0; j < g_members; j++)
        close(g_fds[l * g_members + j][0]);
    pthread_barrier_wait(&g_done);
    return NULL;
}

static int start(void *(*fn)(void *), long arg)
{
    pthread_attr_t at;
    pthread_t th;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 128 << 10);
    int rc = pthread_create(&th, &at, fn, (void *)arg);
    pthread_attr_destroy(&at);
    if (rc != 0)
        fprintf(stderr, "pthread_create: %s\n", strerror(rc));
    return rc;
}

int main(int argc, char **argv)
{
    int futex = argc == 3 && strcmp(argv[1], "futex") == 0;
    int sock = argc == 5 && strcmp(argv[1], "socket") == 0;
    if (!futex && !sock) {
        fprintf(stderr, "usage: wake_floor futex N | wake_floor socket LEADERS MEMBERS FRAME\n");
        return 2;
    }
    int leaders = futex ? 0 : atoi(argv[2]);
    g_members = futex ? atoi(argv[2]) : atoi(argv[3]);
    g_frame = futex ? 0 : atoi(argv[4]);
    int n = futex ? g_members : leaders * g_members;
    if (n < 1 || (sock && (leaders < 1 || g_frame <= HEADER || g_frame > 4096))) {
        fprintf(stderr, "wake_floor: out of range (FRAME: %d..4096 bytes)\n", HEADER + 1);
        return 2;
    }
    unsigned long long t0;
    if (futex) {
        pthread_barrier_init(&g_done, NULL, (unsigned)n + 1);
        for (long i = 0; i < n; i++)
            if (start(futex_waiter, i) != 0)
                _exit(1);
        while (atomic_load(&g_waiting) < n)
            usleep(1000);
        usleep(200000); /* every waiter inside FUTEX_WAIT */
        t0 = now_ns();
        atomic_store(&g_word, 1);
        syscall(SYS_futex, &g_word, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
    } else {
        if (!(g_fds = calloc((size_t)n, sizeof(*g_fds))))
            return 1;
        for (int i = 0; i < n; i++)
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, g_fds[i]) != 0) {
                perror("socketpair (raise ulimit -n)");
                return 1;
            }
        pthread_barrier_init(&g_done, NULL, (unsigned)(n + leaders) + 1);
        for (long i = 0; i < n; i++)
            if (start(member, i) != 0)
                _exit(1);
        for (long l = 0; l < leaders; l++)
            if (start(leader, l) != 0)
                _exit(1);
        while (atomic_load(&g_waiting) < n)
            usleep(1000);
        usleep(200000); /* every member asleep in recv() */
        t0 = now_ns();
        atomic_store(&g_word, 1); /* the leaders start sending */
        syscall(SYS_futex, &g_word, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
    }
    pthread_barrier_wait(&g_done);
    double ms = (double)(atomic_load(&g_last) - t0) / 1e6;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("%s %d threads%s: last awake %.1f ms after the wake (%.1f us of a core per thread, %ld cores)\n",
           futex ? "futex" : "socket", n, futex ? "" : " (leaders' sends, recv, close)", ms,
           ms * 1e3 * (double)cores / n, cores);
    return 0;
}
