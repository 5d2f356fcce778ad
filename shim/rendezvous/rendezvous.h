/*
 * The rendezvous of a marked unique ID (docs/design.md, "Decide once, at the
 * root"): every rank's shim sends its facts to the root's shim, which decides
 * once for all and answers all.
 *
 *   root (rv_server.c)                    each rank (rv_client.c)
 *   ncclGetUniqueId: listen, mark the ID
 *                                         init: connect, HELLO(facts, and
 *                                         whether socket can be carried out)
 *   all nranks arrived: decide; socket
 *   and every rank said ready: COMMIT at
 *   once (one said not: COMMIT(passthrough)
 *   with its reason; one said nothing: as
 *   below); else DECISION
 *                                         set the action up; VOTE ok/veto
 *   all ok: COMMIT(action); any veto, a
 *   closed connection or the timeout:
 *   COMMIT(passthrough)
 *   (ipc: all ok: PEERS(every export)     connect to the peers; VOTE ok/veto
 *    then COMMIT as above)
 *                                         carry out the COMMIT
 *
 * A DECISION of passthrough (or fail) is final: no vote round.
 *
 * All or nothing (docs/design.md): only the root decides, once.  A rank that
 * cannot hand its HELLO on passes through alone (the root, missing it, can
 * only decide passthrough).  Once handed on, the rank's own deadline only
 * makes it send ABORT and wait for the root's word (the commit, if that came
 * first); a rank whose leader dies or whose connection breaks asks the root
 * on a new connection (rv_ask.c): ABORT before the verdict makes the root
 * fall back for all, after it the listener (kept T + RV_LINGER_US) answers the
 * verdict.  Deadlines that end anything are the root's (the first HELLO +
 * the timeout).  Only a root that is gone or frozen leaves a rank alone.
 *
 * Above NCCLSHIM_RENDEZVOUS_FANIN ranks a host's ranks meet at a leader
 * (rv_leader.h), and leaders form a tree: the root holds RV_ROOT_LEADERS of
 * them and answers the next ones' first HELLO with REDIRECT (one of its
 * leaders' TCP address); a leader holds RV_LEADER_KIDS and sends further
 * ones on.  A leader forwards HELLOs and VOTEs up, answers down, unchanged.
 */
#ifndef NCCLSHIM_RENDEZVOUS_H
#define NCCLSHIM_RENDEZVOUS_H

#include "nccl_abi.h"
#include "rv_wire.h"
#include "uid_mark.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Root side, at ncclGetUniqueId: listens on NCCL's bootstrap address (a port
 * of our own), marks the ID, and serves it from a background thread until
 * the communicator is decided or NCCLSHIM_RENDEZVOUS_IDLE_MS pass unused.
 * 0 on success (`where` = the listening address); -1 with the reason, the ID
 * then left unmarked.
 */
int rv_server_open(ncclUniqueId *id, char *where, size_t wherelen, char *err, size_t errlen);

/* Number of IDs being served (for tests and the exit record). */
int rv_server_sessions(void);

void rv_server_lock_for_fork(void);
void rv_server_unlock_after_fork(void);
/* The child of a fork serves nothing: it closes the parent's listeners. */
void rv_server_after_fork_child(void);

/* Rank side. */
struct rv_result {
    int via_root;                       /* 1: the root's verdict; 0: this rank fell back on its own */
    struct rv_verdict v;                /* the final verdict (v.action: what to carry out) */
    char root[80];                      /* the root's address */
    char fallback[RV_REASON_LEN];       /* why this rank fell back, or why the vote round undid the decision */
    uint64_t wait_us;                   /* time spent in the rendezvous */
    double decided_ts;                  /* when it ended (shim_now(): the records' clock) */
    int rounds;                         /* 1, 2, or 3 (ipc) */
    int monitor_fd;                     /* ipc committed: the root's connection, kept open; else -1 */
    int asked;                          /* 1: its path broke, and it asked the root for the verdict */
    /* Why a passthrough that is not the policy's choice (empty: none):
     * "root" (the root fell back for all), "unreachable", "limit", "lost"
     * (the path broke and the root could not be asked), "frozen" (the root
     * took no notice of this rank's ABORT). */
    char fallback_kind[16];
};

/* How a rank sets an action up, between the DECISION and the COMMIT. */
struct rv_setup {
    /* Round 2: 0 if this rank can carry `action` out (it may export something
     * into blob/bloblen: ipc's memory handle), else -1 with the reason. */
    int (*prepare)(void *ctx, int action, uint8_t *blob, int *bloblen, char *why, size_t whylen);
    /* Round 3, ipc only: connect to every rank's export. */
    int (*connect)(void *ctx, const struct rv_peers *peers, char *why, size_t whylen);
    void *ctx;
};

void rv_client_run(const ncclUniqueId *id, const struct uid_mark *mark, const struct rank_facts *facts,
                   int timeout_ms, const struct rv_setup *setup, struct rv_result *out);

#endif
