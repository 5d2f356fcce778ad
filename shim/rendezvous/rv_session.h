/*
 * A session of the root's rendezvous server (rv_server.c): one marked unique
 * ID, its listener, its connections and where its decision stands.  Shared by
 * the files that serve it, each one job: rv_session.c (its connections),
 * rv_server_record.c (its records), rv_decide.c (the rounds of the decision),
 * rv_admit.c (reading connections), rv_deadlines.c (time running out),
 * rv_server.c (the serving thread).  All of it belongs to the serving thread.
 */
#ifndef NCCLSHIM_RV_SESSION_H
#define NCCLSHIM_RV_SESSION_H

#include "policy/decide.h"
#include "rv_reader.h"
#include "rv_texts.h"
#include "rv_wire.h"

#include <stdint.h>
#include <sys/socket.h>

/* ST_MONITOR: an ipc communicator is running; every rank keeps its
 * connection open, and the first one to close (a rank died, or the
 * communicator is being destroyed everywhere) closes them all: the other
 * ranks' shims take that as "a peer is gone" (shim/ipc/ipc_monitor.c). */
/* ST_ANSWER: the final verdict is out (or the root fell back at a limit);
 * the listener answers whoever shows the token with that verdict, until the
 * timeout and at least T + RV_LINGER_US after the verdict: a rank that lost its
 * host's leader, or whose connection broke before the verdict reached it,
 * asks here (rv_ask_root), and hears what every other rank heard. */
enum { ST_WAIT_HELLO, ST_WAIT_VOTES, ST_MONITOR, ST_ANSWER, ST_DONE };

/*
 * Admission (docs/operations.md, "Strangers on the rendezvous port").  Anyone who can reach
 * the port can connect; only a holder of the ID's token is a rank.  A rank
 * sends its HELLO, token first, the moment it is connected, so:
 *  - a connection is anonymous until the token has come (rv_frame_token:
 *    the first 32 bytes), and closed if it has not come HELLO_DEADLINE_US
 *    after its accept (idle or slow-drip connections cannot pile up);
 *  - past MAX_ANONYMOUS of them (descriptors of the application's
 *    process), a new connection evicts the oldest anonymous one, after
 *    reading what that one sent, and is never refused: a rank is the newest
 *    for the round trip its HELLO takes, then leaves the count, so strangers
 *    cannot keep it out.  One younger than EVICT_GRACE_US is spared (the new
 *    one is taken beyond the cap) up to MAX_ANONYMOUS_HARD: a rank whose
 *    process is not scheduled at once still shows its token in time, and
 *    strangers that reconnect as soon as they are closed cannot make this
 *    thread spin on them;
 *  - each connection is read as soon as it is accepted (what a rank or a
 *    flood sent is usually there already), at most ACCEPT_BURST per wake-up,
 *    and the ranks' connections are handled before the listener's.
 */
#define MAX_ANONYMOUS 64
#define MAX_ANONYMOUS_HARD 128
#define EVICT_GRACE_US 100000ull
_Static_assert(MAX_ANONYMOUS <= MAX_ANONYMOUS_HARD, "the hard cap is above the cap");
/* Not a setting: a rank's first bytes follow its connect by one round trip,
 * and a rank that loses this race connects again (rv_client.c), so a longer
 * deadline would only let strangers hold descriptors longer. */
#define HELLO_DEADLINE_US 1000000ull
/* How long the root answers askers after its final verdict (ST_ANSWER): the
 * rendezvous timeout T plus RV_LINGER_US.  A rank whose HELLO went up before
 * the verdict hears it, or asks, within T + 2 s of its HELLO (rv_client.c:
 * its own deadline; a rank behind a frozen leader asks then) or T + 4 s (a
 * leader's deadline and its grace, then its ranks ask); an ask takes at most
 * RV_ASK_US (5 s) to connect and be answered.  So T + 15 s outlasts every
 * ask of a rank that can still be waiting, with a few seconds to spare for a
 * host that is slow to schedule it. */
#define RV_LINGER_US 15000000ull
#define ACCEPT_BURST 64
/*
 * The tree (docs/design.md, "Rendezvous at scale"): the root holds at most
 * RV_ROOT_LEADERS hosts' leaders; the next ones are sent (REDIRECT) to one of
 * them, round robin, each of which holds at most RV_LEADER_KIDS other
 * leaders and sends the next ones on in turn (rv_leader.c).  So the root's
 * descriptors stay under 256 (its leaders, MAX_ANONYMOUS_HARD strangers, the
 * listener) whatever the job, and 120 + 120 * 128 hosts fit in two levels.
 */
#define RV_ROOT_LEADERS 120
#define RV_LEADER_KIDS 128
/* accept() failing for another reason than "nothing pending" (out of
 * descriptors with nobody to evict): the listener is left alone this long,
 * instead of being found readable again at once. */
#define ACCEPT_PAUSE_US 100000ull
/* Rejections recorded one by one per session; the rest are counted. */
#define MAX_REJECT_RECORDS 8

/* Why a connection was dropped: counted per cause in the decision record
 * ("rejected_by", docs/records.md). */
enum rej {
    REJ_NO_HELLO,       /* no token within HELLO_DEADLINE_US */
    REJ_EVICTED,        /* the oldest anonymous one when the cap was reached */
    REJ_MALFORMED,      /* bytes that are not a frame of this protocol */
    REJ_WRONG_TOKEN,    /* a frame with another token */
    REJ_CLOSED,         /* closed or reset by the peer */
    REJ_PROTOCOL,       /* a valid frame out of place: duplicate rank, nranks mismatch, unexpected type */
    REJ_LATE,           /* still anonymous when every rank had arrived */
    REJ_OTHER,          /* out of memory, a send that failed */
    REJ_COUNT
};

struct rv_conn {
    int fd;
    int rank;                           /* -1 until its HELLO; a leader's: its first rank */
    uint32_t leader_pid;                /* a host's leader (rv_leader.c): it speaks for several ranks */
    int told;                           /* sent ABORT: owed the final verdict although it named no rank */
    struct rv_reader rd;                /* the frame coming in */
    char peer[80];
    uint64_t accepted_us;
    int anon_slot;                      /* index in the session's anon[] while anonymous, else -1 */
    int next_free;                      /* a free slot: the next one in the free list */
    char leader_addr[RV_ADDR_LEN];      /* a leader's: where it takes other leaders ("": it does not) */
};

struct rv_session {
    struct rv_session *next;
    int lfd;                            /* listener; -1 once closed */
    uint8_t token[RV_TOKEN_LEN];
    char addr[80];
    uint64_t created_us, first_us, decided_us;
    uint64_t last_us;                   /* the last rank's arrival */
    uint64_t answer_until;              /* ST_ANSWER: the listener answers until then (at least) */
    int state;
    int nranks;                         /* 0 until the first HELLO */
    int arrived, votes;
    int round;                          /* 0: deciding; 1: committed on the HELLOs (socket); 2: setting up; 3: ipc connecting (after PEERS) */
    struct rv_peers *peers;             /* ipc: every rank's export, sent with PEERS */
    struct rank_facts *facts;           /* nranks, by rank; their texts are in `texts` */
    struct rv_texts texts;              /* the distinct texts the ranks sent */
    int *conn_of_rank;                  /* index into conns, -1 if absent (a leader's: many ranks) */
    unsigned char *voted;               /* nranks, by rank: voted in this round */
    int leaders;                        /* connections of hosts' leaders */
    int next_parent;                    /* where the search for a leader to send a new one to starts */
    int redirected;                     /* leaders sent to another */
    /* Someone may ask after the verdict (ST_ANSWER): hosts' leaders took part
     * (their ranks ask if a leader dies), or a send of a verdict failed. */
    int askers;
    struct rv_conn *conns;
    int nconns, capconns;
    int free_head;                      /* slots closed and referred to by no rank, linked by next_free; -1: none */
    int anon[MAX_ANONYMOUS_HARD];       /* slots of the anonymous connections */
    int nanon;
    uint64_t accept_paused_until;
    int accept_warned;                  /* accept() failures so far (warned about once) */
    int rejected;
    int rejected_by[REJ_COUNT];
    struct decision d;
    struct rv_verdict verdict;
};

#define WRONG_TOKEN "wrong token (not a rank of this unique ID, or an ID from an earlier run)"

/* The session is over: the serving thread frees it at its next turn. */
static inline void rv_finish(struct rv_session *s)
{
    s->state = ST_DONE;
}

/* The final verdict has gone to every rank connected: their connections are
 * closed, and where someone may ask (askers) the listener answers for
 * T + RV_LINGER_US (ST_ANSWER); else the session is over. */
void rv_settle(struct rv_session *s);

/* `c` is no longer anonymous (it showed the token, or it is closed). */
void rv_anon_remove(struct rv_session *s, struct rv_conn *c);
/* Closes `c` for `cause` (counted, the first few recorded); a rank that had
 * arrived is missing again. */
void rv_reject(struct rv_session *s, struct rv_conn *c, enum rej cause, const char *why);
/* Closes every connection that has not arrived as a rank: at the decision,
 * nobody else may join. */
void rv_reject_strangers(struct rv_session *s);
void rv_close_conn(struct rv_conn *c);
/* Closes `c`, which never spoke for a rank, without counting it as rejected
 * (a leader sent to another): its slot is free again. */
void rv_drop_quietly(struct rv_session *s, struct rv_conn *c);
void rv_session_free(struct rv_session *s);
/* The arrays by rank (facts, conn_of_rank, voted), NULL again, and the texts. */
void rv_session_free_ranks(struct rv_session *s);
/* A slot for a new connection, anonymous: NULL when out of memory.  (The
 * array may move: conns' addresses change.) */
struct rv_conn *rv_new_conn(struct rv_session *s, int fd, const struct sockaddr *sa);
/* The anonymous connection accepted first (there is one). */
struct rv_conn *rv_oldest_anonymous(struct rv_session *s);

#endif
