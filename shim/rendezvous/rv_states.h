/*
 * The rendezvous protocol as states per role and, for each, what a message
 * does in each state: one table per role, all in rv_states.c, which is the
 * protocol's one statement (docs/design.md, "All or nothing", argues its
 * safety against these states).  The code that carries an entry out lives
 * with its role: rv_decide.c (the root), rv_leader.c (a host's leader),
 * rv_client.c (a rank).
 */
#ifndef NCCLSHIM_RV_STATES_H
#define NCCLSHIM_RV_STATES_H

#include "rv_wire.h"

/* Message types are 1..RV_TYPES-1 (rv_wire.h); anything else is unexpected everywhere. */
#define RV_TYPES (RV_REDIRECT + 1)

/* ---- The root (rv_session.h's ST_*: WAIT_HELLO, WAIT_VOTES, MONITOR, ANSWER, DONE). */
#define RV_ROOT_STATES 5

/* Who sent it, as the root knows the connection. */
enum rv_who {
    WHO_NEW,                            /* no HELLO counted on it yet (a rank, a leader, a stranger) */
    WHO_RANK,                           /* a rank that arrived on it, talking to the root itself */
    WHO_LEADER,                         /* a host's leader: it speaks for several ranks */
    WHO_COUNT
};

/* What the root does with it. */
enum rv_root_do {
    ROOT_REJECT = 0,                    /* out of place: dropped (during the vote, a rank's: passthrough for all) */
    ROOT_HELLO,                         /* a rank (or a leader's ranks) arrive; the decision once all have */
    ROOT_ABORT,                         /* someone gave up before the verdict: passthrough for all, now */
    ROOT_HELLO_IN_VOTE,                 /* a rank connected again during the vote (its path broke): */
                                        /* passthrough for all */
    ROOT_VOTE,                          /* a vote counted; COMMIT once all are in */
    ROOT_ANSWER,                        /* after the verdict: an asker (HELLO or ABORT) gets the verdict */
};

enum rv_root_do rv_root_step(int state, enum rv_type type, enum rv_who who);

/* ---- A host's leader (rv_leader.c). */
enum rv_leader_state {
    LEADER_GATHER,                      /* nothing sent up: not connected above (a stranger there otherwise) */
    LEADER_UP,                          /* HELLOs forwarded, connected above: waiting for the verdict */
    LEADER_ASKED,                       /* its deadline passed: ABORT sent above, waiting LEADER_GRACE_US more */
    LEADER_OVER,                        /* the final verdict relayed, or given up: its ranks have an answer or ask */
    LEADER_STATES
};

/* What a frame from above (the root, or the leader it was sent to) does. */
enum rv_leader_do {
    LEADER_BAD = 0,                     /* not a frame from above: give up (its ranks ask the root) */
    LEADER_RELAY,                       /* a DECISION that is not final, or PEERS: hand it to every rank */
    LEADER_FINAL,                       /* COMMIT or a final DECISION: hand it on, then over */
    LEADER_FOLLOW,                      /* REDIRECT: join the leader named, say every HELLO again */
};

enum rv_leader_do rv_leader_step(enum rv_leader_state state, enum rv_type type, int final);

/* What a member's frame (a rank of this host, or another host's leader sent here) does. */
enum rv_member_do {
    MEMBER_DROP = 0,                    /* out of place: dropped (a rank's: ABORT to the root) */
    MEMBER_HELLO,                       /* forward it (connecting above first, in LEADER_GATHER) */
    MEMBER_VOTE,                        /* forward it, naming the voter */
    MEMBER_ABORT,                       /* forward it: the root falls back for all */
};

/* `known`: the member has said HELLO; `kid`: it is another host's leader. */
enum rv_member_do rv_member_step(enum rv_leader_state state, enum rv_type type, int known, int kid);

/* ---- A rank (rv_client.c), from its HELLO on. */
enum rv_rank_state {
    RANK_HELLO,                         /* HELLO sent: waiting for DECISION (or COMMIT: one round) */
    RANK_VOTED,                         /* its vote sent: waiting for COMMIT */
    RANK_VOTED_IPC,                     /* its ipc export voted: waiting for PEERS (or COMMIT: a veto) */
    RANK_STATES
};

/* What an answer does for a rank. */
enum rv_rank_do {
    RANK_ASK = 0,                       /* its path broke (or a leader's ABORT): ask the root directly */
    RANK_TAKE,                          /* the root's word: take it */
};

enum rv_rank_do rv_rank_step(enum rv_rank_state state, enum rv_type type);

#endif
