/* Bounded socket I/O for the rendezvous: every call has a deadline, none blocks past it. */
#ifndef NCCLSHIM_RV_IO_H
#define NCCLSHIM_RV_IO_H

#include "rv_wire.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* "1.2.3.4:5678" or "[::1]:5678". */
void rv_addr_str(const struct sockaddr *sa, char *buf, size_t len);
/* The inverse: its length, or 0 if `str` is not such an address. */
socklen_t rv_addr_parse(const char *str, struct sockaddr_storage *ss);

/* A connected TCP socket (close-on-exec, non-blocking) to `sa`, or -1 with
 * the reason (errno: ETIMEDOUT, ECONNREFUSED, ...).  A SYN unanswered for
 * 250 ms is sent again on a new socket (then 500 ms, 1 s, ...). */
int rv_connect(const struct sockaddr *sa, socklen_t salen, uint64_t deadline_us, char *err, size_t errlen);

/* The longest a send to one peer may take, root or leader: the peer is
 * waiting on a connected socket, and one that does not take a few KiB at
 * once is not a rank to rely on. */
#define RV_SEND_US 200000ull

/* Sends `m` whole before the deadline: 0, or -1 with the reason (errno
 * EPIPE or ECONNRESET: the peer closed the connection). */
int rv_send_msg(int fd, const struct rv_msg *m, uint64_t deadline_us, char *err, size_t errlen);
/* Sends a whole encoded frame before the deadline: 0, or -1 (errno set;
 * ETIMEDOUT at the deadline). */
int rv_send_bytes(int fd, const uint8_t *buf, size_t len, uint64_t deadline_us);

/* Receives one whole message before the deadline: 0, or -1 with the reason
 * and errno: ETIMEDOUT, ECONNRESET (closed or reset by the peer before any
 * byte of the message), EPROTO (closed in the middle of a message, or a
 * malformed one), or what recv() said. */
int rv_recv_msg(int fd, struct rv_msg *m, uint64_t deadline_us, char *err, size_t errlen);

/*
 * Makes `fd` blocking for receives, each bounded by the time left before the
 * deadline (SO_RCVTIMEO), for a rank's wait for the root's answer: the thread
 * sleeps in recv() and wakes with the bytes, not in poll() and then recv().
 * rv_recv_msg still ends by the deadline (after a signal or the timeout it
 * waits in poll() under it); sends never block (MSG_DONTWAIT).  Called again
 * with each new deadline.  0, or -1 (errno set; the socket may then be left
 * non-blocking, which the calls above handle as before).
 */
int rv_block_until(int fd, uint64_t deadline_us);
/* Back to non-blocking (a descriptor kept past the rendezvous): 0 or -1. */
int rv_nonblocking(int fd);

#endif
