/*
 * The futex words of the shared pages, below everything else of the
 * transport (no other ipc file, no driver): a rank's threads sleep on them
 * while they wait for a neighbour, bounded, and are woken by whoever changes
 * what they wait for.
 */
#ifndef NCCLSHIM_IPC_FUTEX_H
#define NCCLSHIM_IPC_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>

/*
 * A futex word of a shared page, and what its sleepers wait for: the page's
 * owner bumps `word` whenever it makes progress (a number that only grows),
 * and makes the wake system call only when a sleeper's mark is reached.  A
 * neighbour sleeping on it stores its mark in wake_at[0] if it is the
 * owner's predecessor, [1] if its successor (0: not asleep; one thread of a
 * rank enqueues its broadcasts at a time, under qlock, so each has one
 * writer).  A rank waiting for room in its ring sets its mark some broadcasts
 * beyond the room it needs, and its neighbour then wakes it once for many
 * broadcasts: a wake is a system call (1-1.6 us of the waker's host time a
 * broadcast, docs/history/benchmarks-history.md, "Phase by phase").
 */
struct ipc_futex {
    _Atomic uint32_t word;
    uint32_t pad;
    _Atomic uint64_t wake_at[2];
};

/* Futex waits and wakes on a shared page's word (shared, not private: the
 * word is in shared memory); ipc_wait_word: while it still reads `seen`, up
 * to `ms` (< 0: no bound). */
void ipc_wait_word(_Atomic uint32_t *word, uint32_t seen, long ms);
/* Wakes every waiter on `word` (the caller has changed it). */
void ipc_wake_word(_Atomic uint32_t *word);

/* The same on struct ipc_futex, whose owner wakes only sleepers whose mark
 * it reached.  ipc_futex_sleep: a neighbour on `side` (0: the owner's
 * predecessor, 1: its successor) stores its mark `at` (0 counts as 1), then
 * sleeps on the word (`seen`: its value read before `ready` said no last) if
 * `ready(arg)` still says no, at most `ms`.  ipc_futex_progress: the owner's
 * progress is now `now` (the word is bumped).  Sequentially consistent on
 * both sides (the owner moves what `ready` reads, bumps the word, then reads
 * the marks; the sleeper stores its mark, then calls `ready`, then the futex
 * compares the word): a sleeper the owner missed sees the progress in
 * `ready`, or the bumped word in the futex call, and does not sleep past it;
 * one whose mark is not reached sleeps until a later progress reaches it (or
 * `ms`).  The caller loops: the sleep may end early. */
void ipc_futex_sleep(struct ipc_futex *f, int side, uint64_t at, uint32_t seen, long ms, int (*ready)(const void *),
                     const void *arg);
void ipc_futex_progress(struct ipc_futex *f, uint64_t now);

#endif
