/*
 * The futex words of the shared pages (ipc_futex.h): plain system calls on
 * shared memory (not FUTEX_PRIVATE: the sleeper and the waker are two
 * processes), and the wake marks that spare a waker the call when its
 * sleepers wait for more.
 */
#define _GNU_SOURCE
#include "ipc_futex.h"

#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void ipc_wait_word(_Atomic uint32_t *word, uint32_t seen, long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, ms < 0 ? NULL : &ts, NULL, 0);
}

void ipc_wake_word(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void ipc_futex_sleep(struct ipc_futex *f, int side, uint64_t at, uint32_t seen, long ms, int (*ready)(const void *),
                     const void *arg)
{
    atomic_store(&f->wake_at[side], at ? at : 1);
    if (!ready(arg))
        ipc_wait_word(&f->word, seen, ms);
    atomic_store(&f->wake_at[side], 0);
}

void ipc_futex_progress(struct ipc_futex *f, uint64_t now)
{
    atomic_fetch_add(&f->word, 1);
    uint64_t a = atomic_load(&f->wake_at[0]), b = atomic_load(&f->wake_at[1]);
    if ((a && a <= now) || (b && b <= now))
        ipc_wake_word(&f->word);
}
