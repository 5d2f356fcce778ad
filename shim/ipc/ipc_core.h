/*
 * What shim/ipc/ipc_core.c offers the other files of the transport: the
 * counters as the host reads, writes and waits on them, a rank's futex word
 * woken (the words themselves: ipc_futex.h, included), and the trace.
 */
#ifndef NCCLSHIM_IPC_CORE_H
#define NCCLSHIM_IPC_CORE_H

#include "ipc_comm.h"
#include "ipc_futex.h"

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

/* At commit every neighbour has mapped this rank's shared page: its name goes. */
void ipc_unlink_shared(struct ipc_comm *c);

/* Whether rank r shares this rank's GPU ("One GPU"; r's page is mapped). */
int ipc_same_gpu(const struct ipc_comm *c, int r);
/* The host waits until the last operation is over (its fence), bounded by
 * `deadline`: 0, or -1 with the reason. */
int ipc_wait_fence(struct ipc_comm *c, uint64_t deadline, char *why, size_t whylen);

/* Bumps rank r's word and wakes its waiters. */
void ipc_wake(const struct ipc_comm *c, int r);
/* Whether the last operation is over (qlock held). */
int ipc_fence_passed(const struct ipc_comm *c);

/* NCCLSHIM_IPC_TRACE=1: protocol steps on stderr (debugging); the clock of
 * their timings (0 when not tracing). */
void ipc_trace(const struct ipc_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t ipc_trace_clock(void);

#endif
