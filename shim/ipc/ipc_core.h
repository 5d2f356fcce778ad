/*
 * What shim/ipc/ipc_core.c offers the other files of the transport: the
 * counters as the host reads, writes and waits on them, failure (marking a
 * communicator failed and releasing its streams' waits), the copy call, the
 * stream memory operations queued together, futex waits on shared words,
 * and the trace.
 */
#ifndef NCCLSHIM_IPC_CORE_H
#define NCCLSHIM_IPC_CORE_H

#include "ipc_comm.h"

#include <stddef.h>
#include <stdint.h>

/* Host waits (all-reduce, destroy) give up after this long: a peer that
 * stopped answering must not hang the application for ever. */
#define HOST_WAIT_US (120ull * 1000 * 1000)

/* Host-side counter access (plain loads and stores; bounded waits: HOST_WAIT_US at most). */
uint64_t ipc_read_flag(const struct ipc_comm *c, int r, int off);
void ipc_write_flag(const struct ipc_comm *c, int off, uint64_t v);
int ipc_wait_one(const struct ipc_comm *c, int r, int off, uint64_t want, uint64_t deadline, char *why,
                 size_t whylen);
int ipc_wait_all(const struct ipc_comm *c, int off, uint64_t want, char *why, size_t whylen);

/* Stores RELEASE into every counter this rank's streams may wait on. */
void ipc_release_waits(struct ipc_comm *c);
/* After a failure, the reaper releases the waits again for this long. */
#define RELEASE_REPEAT_US (5ull * 1000 * 1000)

/* Marks `c` failed (once) and releases every wait of its streams; `lost`:
 * a peer is gone (warned), else an abort. */
void ipc_fail(struct ipc_comm *c, const char *why, int lost);

/* At commit every neighbour has mapped this rank's shared page: its name goes. */
void ipc_unlink_shared(struct ipc_comm *c);

/* A copy on `stream` (copy engines where the driver lets us ask). */
CUresult ipc_copy(const struct ipc_comm *c, CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream stream);

/*
 * Stream waits and writes queued and enqueued together: one
 * cuStreamBatchMemOp where the driver has it (in the array's order, as
 * the single calls would be), each alone where it has not or refuses it
 * (CUDA_ERROR_NOT_SUPPORTED: c->memops.single, for good).  Every driver
 * call costs the application's thread a microsecond or more, and a
 * broadcast's counter operations come in runs (a receiver's TAKEN write and
 * AVAIL wait; a root's fence and TAKEN waits): docs/benchmarks.md, "Host
 * time per broadcast".  A queue is flushed before anything else goes on
 * its stream (a copy, a launch) and before the operation returns.
 * memops_wait, memops_write: 0, or -1 with the reason (a full queue is
 * flushed); memops_flush: the same.
 */
#define MEMOPS_MAX 8
struct memops {
    struct ipc_comm *c;
    CUstream s;
    int n;
    CUstreamBatchMemOpParams op[MEMOPS_MAX];
};
static inline void memops_init(struct memops *m, struct ipc_comm *c, CUstream s)
{
    m->c = c;
    m->s = s;
    m->n = 0;
}
int memops_wait(struct memops *m, CUdeviceptr at, uint64_t v, char *why, size_t whylen);
int memops_write(struct memops *m, CUdeviceptr at, uint64_t v, char *why, size_t whylen);
int memops_flush(struct memops *m, char *why, size_t whylen);

/* Whether rank r shares this rank's GPU ("One GPU"; r's page is mapped). */
int ipc_same_gpu(const struct ipc_comm *c, int r);
/* The host waits until the last operation is over (its fence), bounded by
 * `deadline`: 0, or -1 with the reason. */
int ipc_wait_fence(struct ipc_comm *c, uint64_t deadline, char *why, size_t whylen);

/* Futex waits and wakes on a shared page's word (shared, not private: the
 * word is in shared memory); ipc_wait_word: up to `ms` (< 0: no bound). */
void ipc_wait_word(_Atomic uint32_t *word, uint32_t seen, long ms);
/* Wakes every waiter on `word` (the caller has changed it). */
void ipc_wake_word(_Atomic uint32_t *word);
/* The same where the waiters count themselves in `sleepers`, a word of the
 * same page: ipc_wait_word_counted sleeps on `word` (if `ready` still says
 * no once counted: `ready(arg)`), ipc_wake_counted wakes only if somebody
 * sleeps.  Sequentially consistent on both sides (the waker changes `word`,
 * then reads `sleepers`; the waiter counts itself, then reads `word` in the
 * futex call): a waiter the waker missed sees the new value and does not
 * sleep. */
void ipc_wait_word_counted(_Atomic uint32_t *word, _Atomic uint32_t *sleepers, uint32_t seen, long ms,
                           int (*ready)(const void *), const void *arg);
void ipc_wake_counted(_Atomic uint32_t *word, _Atomic uint32_t *sleepers);
/* Bumps rank r's word and wakes its waiters. */
void ipc_wake(const struct ipc_comm *c, int r);
/* Whether the last operation is over (qlock held). */
int ipc_fence_passed(const struct ipc_comm *c);

/* NCCLSHIM_IPC_TRACE=1: protocol steps on stderr (debugging); the clock of
 * their timings (0 when not tracing). */
void ipc_trace(const struct ipc_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t ipc_trace_clock(void);

#endif
