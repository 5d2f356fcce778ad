/*
 * Two-level rendezvous (docs/design.md, "Rendezvous at scale"): the ranks of
 * a communicator larger than NCCLSHIM_RENDEZVOUS_FANIN meet, per host, at a
 * leader, and only the leaders hold a connection to the root.  The root then
 * holds a descriptor per leader, not per rank.
 *
 * A leader is a thread of the first rank's process on a host to claim the
 * name: a Unix socket in the abstract namespace named from the ID's token and
 * the host identity (host_id), so that only ranks of this ID on this host meet
 * there.  A leader takes at most a bounded number of ranks (its process's
 * descriptors); a rank it turns away claims the next name, and leads or joins
 * a second group.  The leader multiplexes: it forwards each rank's HELLO and
 * VOTE to the root and hands the root's DECISION, PEERS and COMMIT to each of
 * its ranks, which speak the same protocol to it as to the root.  A leader
 * that loses a rank, hits a limit or cannot reach the root sends ABORT, and
 * the root falls back for every rank at once.
 */
#ifndef NCCLSHIM_RV_LEADER_H
#define NCCLSHIM_RV_LEADER_H

#include "rv_wire.h"
#include "uid_mark.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* 1 if a rank of an `nranks` communicator meets its host's leader, 0 if it talks to the root itself. */
int rv_fanin(int nranks);

/*
 * Connects this rank to its host's leader for the ID (`mark`, whose root is
 * `root`), starting the leader in this process if no other is there.
 * Returns a connected, non-blocking socket on which the rank speaks the
 * rendezvous protocol as to the root, or -1 with the reason; *limit is then
 * 1 if a process limit (descriptors, memory, threads) or an overloaded host
 * was the cause (every rank should pass through now), 0 if leaders cannot
 * work here at all (the rank then talks to the root itself).
 */
int rv_leader_join(const struct sockaddr *root, socklen_t rootlen, const struct uid_mark *mark,
                   const char *host_id, int rank, int timeout_ms, uint64_t deadline_us, char *err,
                   size_t errlen, int *limit);

/* Around fork(): the child closes the descriptors of its parent's leaders. */
void rv_leader_lock_for_fork(void);
void rv_leader_unlock_after_fork(void);
void rv_leader_after_fork_child(void);

#endif
