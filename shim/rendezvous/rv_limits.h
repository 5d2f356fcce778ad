/*
 * The rendezvous's limits: how many descriptors a leader may hold, which
 * errno values are a process's or the system's limits, the messages that say
 * which one was hit and what setting fixes it, and what a process at a limit
 * does (tells the root, answers the ranks still waiting).  The root and the
 * hosts' leaders both call it; it calls neither.
 */
#ifndef NCCLSHIM_RV_LIMITS_H
#define NCCLSHIM_RV_LIMITS_H

#include "rv_wire.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Ranks one leader takes: its process holds a descriptor for each. */
#define RV_LEADER_MAX_RANKS 256

/* Ranks a new leader takes: RV_LEADER_MAX_RANKS, or a quarter of the
 * process's descriptors if that is fewer (at least 4): the application has
 * its own. */
int rv_leader_cap(void);

/* 1 if errno value `e` is a process or system limit (EMFILE, ENFILE, ENOMEM, ENOBUFS, EAGAIN). */
int rv_is_limit(int e);

/*
 * "<who> ran out of file descriptors <doing> (EMFILE: RLIMIT_NOFILE is N; ...)":
 * the limit that errno `e` means and the setting that fixes it.
 */
void rv_limit_reason(int e, const char *who, const char *doing, char *buf, size_t len);

/*
 * This rank's process failed at `call` (while `doing`) with errno `e`: writes
 * the limit's message (rv_limit_reason) if `e` is one, else "<call>: <error>".
 * Returns 1 if it is a limit (every rank should pass through now), else 0.
 */
int rv_limit_or_error(int e, const char *doing, const char *call, char *err, size_t errlen);

/*
 * Best effort, bounded: tells the root (a direct connection) that this rank
 * hit a limit, so that the root falls back for every rank at once.
 */
void rv_abort_root(const struct sockaddr *root, socklen_t rootlen, const uint8_t token[RV_TOKEN_LEN],
                   const char *reason, uint64_t deadline_us);

/*
 * Answers the connections waiting on listener `lfd` (-1: none), up to `max`,
 * and `fds` (already accepted and admitted; closed here), once a rendezvous
 * is over: reads each one's first message and, if it carries `token`, sends
 * it `m` (the final verdict).  Waits at most `wait_ms` in all for their
 * messages; returns how many were answered.
 */
int rv_answer_waiting(int lfd, const int *fds, int nfds, const uint8_t token[RV_TOKEN_LEN], const struct rv_msg *m,
                      int max, int wait_ms);

#endif
