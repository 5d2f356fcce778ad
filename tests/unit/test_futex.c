/*
 * The shared pages' futex words with wake marks (shim/ipc/ipc_futex.c): a
 * sleeper is woken once its mark is reached and not before, a waker with no
 * sleeper (or none whose mark it reached) makes no system call, and no wake
 * is lost to the race between a sleeper's last check and its sleep.
 *
 * The wakes are counted exactly: this program's own syscall() stands in for
 * libc's (ipc_futex.c is linked in, so its calls resolve here) and counts
 * FUTEX_WAKE before passing the call on.  A sleeping thread is known to be
 * in its futex wait by /proc/self/task/<tid>/syscall (in_futex), not by a
 * sleep.
 */
#define _GNU_SOURCE
#include "ipc_futex.h"
#include "tap.h"

#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int wakes;

long syscall(long nr, ...)
{
    static long (*real)(long, ...);
    va_list ap;
    long a[6];
    va_start(ap, nr);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (!real)
        real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    if (nr == SYS_futex && (a[1] & 0x7f) == FUTEX_WAKE)
        atomic_fetch_add(&wakes, 1);
    return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static struct ipc_futex fx;
static _Atomic uint64_t progress; /* what the sleeper's `ready` reads */
static _Atomic uint64_t needed;
static atomic_int returned;
static _Atomic pid_t sleeper_tid;

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static int ready(const void *arg)
{
    (void)arg;
    return atomic_load(&progress) >= atomic_load(&needed);
}

/* The owner's step: what `ready` reads moves first, then the word. */
static void step(uint64_t to)
{
    atomic_store(&progress, to);
    ipc_futex_progress(&fx, to);
}

/* Sleeps on side 1 with mark `at` (arg), as publish and fetch do: in a loop,
 * since a sleep may end early, until ready() or 10 s. */
static void *sleeper(void *arg)
{
    uint64_t at = (uint64_t)(uintptr_t)arg, until = now_ms() + 10000;
    atomic_store(&sleeper_tid, (pid_t)syscall(SYS_gettid));
    for (;;) {
        uint32_t seen = atomic_load(&fx.word);
        if (ready(NULL) || now_ms() > until)
            break;
        ipc_futex_sleep(&fx, 1, at, seen, 5000, ready, NULL);
    }
    atomic_store(&returned, 1);
    return NULL;
}

/* Whether thread tid is blocked in a system call: the first field of
 * /proc/self/task/<tid>/syscall is then the call's number ("running"
 * otherwise).  Any number: under qemu-user (make test-aarch64) it is the
 * host's.  Once the sleeper has stored its mark, the only call it makes is
 * the futex wait. */
static int in_futex(pid_t tid)
{
    char path[64], buf[64] = "";
    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    return n && buf[0] >= '0' && buf[0] <= '9';
}

/* Waits (bounded, 5 s) until the sleeper is asleep with its mark stored. */
static int asleep(void)
{
    uint64_t until = now_ms() + 5000;
    while (now_ms() < until) {
        pid_t t = atomic_load(&sleeper_tid);
        if (t && atomic_load(&fx.wake_at[1]) && in_futex(t))
            return 1;
        sched_yield();
    }
    return 0;
}

static int joined(pthread_t th)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    return pthread_timedjoin_np(th, NULL, &ts) == 0;
}

static void reset(uint64_t need)
{
    memset(&fx, 0, sizeof(fx));
    atomic_store(&progress, 0);
    atomic_store(&needed, need);
    atomic_store(&returned, 0);
    atomic_store(&sleeper_tid, 0);
    atomic_store(&wakes, 0);
}

int main(void)
{
    /* Nobody asleep: progress is a bump, no system call. */
    reset(1);
    for (uint64_t i = 1; i <= 100; i++)
        step(i);
    ok(atomic_load(&wakes) == 0 && atomic_load(&fx.word) == 100,
       "no sleeper: 100 steps bump the word, no wake call (%d calls)", atomic_load(&wakes));

    /* A sleeper that needs 1 but asks to be woken at 16 (a ring's room, and
     * ROOM_AHEAD beyond): steps 1..15 leave it asleep, 16 wakes it, once. */
    reset(1);
    pthread_t th;
    pthread_create(&th, NULL, sleeper, (void *)(uintptr_t)16);
    int slept = asleep();
    ok(slept, "the sleeper is in its futex wait with its mark stored");
    atomic_store(&needed, 100); /* `ready` must not end its loop before the mark */
    for (uint64_t i = 1; i <= 15; i++)
        step(i);
    int early = atomic_load(&wakes);
    ok(early == 0 && in_futex(atomic_load(&sleeper_tid)) && !atomic_load(&returned),
       "steps short of the mark make no wake call and leave it asleep (%d calls)", early);
    atomic_store(&needed, 16);
    step(16);
    ok(joined(th) && atomic_load(&returned) == 1, "the step that reaches the mark wakes it (within 5 s)");
    ok(atomic_load(&wakes) == 1, "one wake call for 16 steps (%d)", atomic_load(&wakes));
    ok(atomic_load(&fx.wake_at[1]) == 0, "the sleeper's mark is gone once it is awake");

    /* The sleeper read the word, then the owner stepped past its mark before
     * it slept: the futex call sees the word moved and returns at once. */
    reset(5);
    uint32_t seen = atomic_load(&fx.word);
    step(5); /* no mark stored yet: no wake call */
    uint64_t t0 = now_ms();
    atomic_store(&needed, 6); /* `ready` still says no: only the futex's compare saves it */
    ipc_futex_sleep(&fx, 0, 5, seen, 3000, ready, NULL);
    uint64_t took = now_ms() - t0;
    ok(took < 1500 && atomic_load(&wakes) == 0,
       "a step between the sleeper's read and its sleep is not lost (returned after %llu of 3000 ms, %d wake calls)",
       (unsigned long long)took, atomic_load(&wakes));

    /* `ready` already true once the mark is stored: no sleep at all. */
    reset(0);
    t0 = now_ms();
    ipc_futex_sleep(&fx, 0, 1, atomic_load(&fx.word), 3000, ready, NULL);
    ok(now_ms() - t0 < 1500 && atomic_load(&fx.wake_at[0]) == 0, "ready after the mark is stored: no sleep");

    /* Marks on both sides: the step that reaches the lower one wakes both
     * (one call); the other goes back to sleep until its own. */
    reset(1);
    atomic_store(&fx.wake_at[0], 3); /* a predecessor asleep at 3 (as it would have stored) */
    step(2);
    ok(atomic_load(&wakes) == 0, "the other side's mark (3) not reached at 2: no call");
    step(3);
    ok(atomic_load(&wakes) == 1, "reached at 3: one call");
    return tap_done();
}
