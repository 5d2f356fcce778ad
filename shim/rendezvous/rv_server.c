/*
 * The root's side of the rendezvous (shim/rendezvous/rendezvous.h): one listener per
 * marked unique ID, all served by one background thread per process that
 * exists only while some ID is being served.
 *
 * The thread owns every session's descriptors and state; other threads only
 * add sessions (under g_rv_lock) and wake it through a pipe.  Nothing here
 * blocks: sockets are non-blocking, and every wait is a poll() with the
 * nearest deadline.  Whatever goes wrong, the answer is passthrough, which
 * is always safe because no rank has touched NCCL yet.
 */
#define _GNU_SOURCE
#include "rendezvous.h"

#include "policy/decide.h"
#include "config.h"
#include "record.h"
#include "rv_io.h"
#include "rv_leader.h"
#include "version.h"
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ST_MONITOR: an ipc communicator is running; every rank keeps its
 * connection open, and the first one to close (a rank died, or the
 * communicator is being destroyed everywhere) closes them all: the other
 * ranks' shims take that as "a peer is gone" (shim/ipc/ipc_monitor.c). */
/* ST_ANSWER: fell back at a limit; the listener answers latecomers with
 * that verdict until the timeout. */
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
#define ACCEPT_BURST 64
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
static const char *const rej_name[REJ_COUNT] = { "no_hello", "evicted",  "malformed", "wrong_token",
                                                 "closed",   "protocol", "late",      "other" };

struct rv_conn {
    int fd;
    int rank;                           /* -1 until its HELLO; a leader's: its first rank */
    uint32_t leader_pid;                /* a host's leader (rv_leader.c): it speaks for several ranks */
    int told;                           /* sent ABORT: owed the final verdict although it named no rank */
    size_t have;                        /* bytes of the current frame received */
    long need;                          /* its length once the header is in, else 0 */
    uint8_t head[RV_HEADER_LEN];
    uint8_t *buf;                       /* the frame, once its length is known */
    char peer[80];
    uint64_t accepted_us;
    int anon_slot;                      /* index in the session's anon[] while anonymous, else -1 */
    int next_free;                      /* a free slot: the next one in the free list */
};

struct rv_session {
    struct rv_session *next;
    int lfd;                            /* listener; -1 once closed */
    uint8_t token[RV_TOKEN_LEN];
    char addr[80];
    uint64_t created_us, first_us, decided_us;
    uint64_t last_us;                   /* the last rank's arrival */
    int state;
    int nranks;                         /* 0 until the first HELLO */
    int arrived, votes;
    int round;                          /* 0: deciding; 1: committed on the HELLOs (socket); 2: setting up; 3: ipc connecting (after PEERS) */
    struct rv_peers *peers;             /* ipc: every rank's export, sent with PEERS */
    struct rank_facts *facts;           /* nranks, by rank */
    int *conn_of_rank;                  /* index into conns, -1 if absent (a leader's: many ranks) */
    unsigned char *voted;               /* nranks, by rank: voted in this round */
    int leaders;                        /* connections of hosts' leaders */
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

/* Sessions being served, and the thread serving them.  g_rv_lock guards the
 * list head, g_thread_running and the wake pipe; the sessions' contents
 * belong to the thread. */
static pthread_mutex_t g_rv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rv_session *g_sessions;
static int g_nsessions;
static int g_thread_running;
static int g_wake[2] = { -1, -1 };

static void anon_remove(struct rv_session *s, struct rv_conn *c)
{
    if (c->anon_slot < 0)
        return;
    int last = s->anon[--s->nanon];
    s->anon[c->anon_slot] = last;
    s->conns[last].anon_slot = c->anon_slot;
    c->anon_slot = -1; /* after: c may be the last */
}

static void reject(struct rv_session *s, struct rv_conn *c, enum rej cause, const char *why)
{
    anon_remove(s, c);
    s->rejected_by[cause]++;
    if (s->rejected++ < MAX_REJECT_RECORDS) {
        char msg[512];
        snprintf(msg, sizeof(msg), "rendezvous %s: dropped a connection from %s%s: %s", s->addr, c->peer,
                 c->rank >= 0 ? " (a rank that had arrived)" : "", why);
        shim_record_warning("rendezvous-rejected", msg);
    }
    close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    if (c->rank >= 0 && s->state == ST_WAIT_HELLO) {
        /* A rank that leaves before the decision is missing again (a leader's ranks too). */
        int idx = (int)(c - s->conns);
        for (int r = c->leader_pid ? 0 : c->rank; r < (c->leader_pid ? s->nranks : c->rank + 1); r++)
            if (s->conn_of_rank[r] == idx) {
                s->conn_of_rank[r] = -1;
                s->arrived--;
            }
        c->rank = -1;
    }
    if (c->leader_pid)
        s->leaders--;
    c->leader_pid = 0;
    c->told = 0;
    if (c->rank < 0) {
        /* No rank refers to it: a slot for the next connection. */
        c->next_free = s->free_head;
        s->free_head = (int)(c - s->conns);
    }
}

/* Closes every connection that has not arrived as a rank: at the decision,
 * nobody else may join. */
static void reject_strangers(struct rv_session *s)
{
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].rank < 0)
            reject(s, &s->conns[i], REJ_LATE, "not a rank (no HELLO) when every rank had arrived");
}

static void close_conn(struct rv_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
}

static void session_free(struct rv_session *s)
{
    if (s->lfd >= 0)
        close(s->lfd);
    for (int i = 0; i < s->nconns; i++)
        close_conn(&s->conns[i]);
    free(s->conns);
    free(s->peers);
    free(s->facts);
    free(s->conn_of_rank);
    free(s->voted);
    free(s);
}

/* "0-3,5,7-9", cut to fit. */
static void rank_list(const struct rv_session *s, int want_present, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int r = 0; r < s->nranks && off + 24 < len; r++) {
        if ((s->conn_of_rank[r] >= 0) != want_present)
            continue;
        int e = r;
        while (e + 1 < s->nranks && (s->conn_of_rank[e + 1] >= 0) == want_present)
            e++;
        off += (size_t)snprintf(buf + off, len - off, off ? ",%d" : "%d", r);
        if (e > r)
            off += (size_t)snprintf(buf + off, len - off, "-%d", e);
        r = e;
    }
}

/* "rejected_by": {cause: count}, the causes that occurred. */
static void record_rejected_by(struct jw *w, const struct rv_session *s)
{
    jw_open(w, "rejected_by", '{');
    for (int k = 0; k < REJ_COUNT; k++)
        if (s->rejected_by[k])
            jw_int(w, rej_name[k], s->rejected_by[k]);
    jw_close(w, '}');
}

static void record_decision(struct rv_session *s, const char *stage)
{
    struct jw w;
    jw_begin(&w, "decision");
    jw_str(&w, "stage", stage);
    /* 1: decided without a vote (final, or socket committed on the HELLOs' word); 2, 3: the vote rounds. */
    jw_int(&w, "rounds", s->round ? s->round : 1);
    jw_str(&w, "listen", s->addr);
    jw_hex64(&w, "decision_id", s->verdict.decision_id);
    jw_int(&w, "nranks", s->nranks);
    jw_int(&w, "arrived", s->arrived);
    char ranks[256];
    rank_list(s, 0, ranks, sizeof(ranks));
    jw_str(&w, "missing", ranks);
    jw_str(&w, "purpose", purpose_name((enum purpose)s->verdict.purpose));
    jw_str(&w, "purpose_reason", s->verdict.purpose_reason);
    jw_str(&w, "action", action_name((enum action)s->verdict.action));
    jw_str(&w, "action_reason", s->verdict.action_reason);
    jw_int(&w, "rule", s->d.rule);
    jw_int(&w, "hosts", s->verdict.nhosts);
    jw_int(&w, "training", s->verdict.ntraining);
    jw_int(&w, "inference", s->verdict.ninference);
    jw_int(&w, "unknown", s->verdict.nunknown);
    jw_int(&w, "rejected_connections", s->rejected);
    record_rejected_by(&w, s);
    jw_int(&w, "leaders", s->leaders);
    jw_u64(&w, "wait_us", s->first_us ? shim_mono_us() - s->first_us : 0);
    /* What the decision itself costs, the ranks' arrival aside. */
    jw_u64(&w, "after_last_arrival_us", s->last_us ? shim_mono_us() - s->last_us : 0);
    jw_open(&w, "ranks", '[');
    /* The record stays under RECORD_MAX: the first ranks tell the story. */
    for (int r = 0; r < s->nranks && r < 32; r++) {
        if (s->conn_of_rank[r] < 0)
            continue;
        const struct rank_facts *f = &s->facts[r];
        jw_open(&w, NULL, '{');
        jw_int(&w, "rank", r);
        jw_str(&w, "host", f->host);
        jw_int(&w, "pid", f->pid);
        jw_int(&w, "cuda_device", f->cuda_device);
        jw_str(&w, "role", role_name(f->role));
        jw_str(&w, "api", api_family_name(f->api));
        jw_str(&w, "local_purpose", purpose_name(f->local_purpose));
        jw_close(&w, '}');
    }
    jw_close(&w, ']');
    jw_emit(&w);
}

/* Sends `m` to every rank that is connected; returns the number of sends that failed. */
static int send_all(struct rv_session *s, const struct rv_msg *m)
{
    int failed = 0;
    uint64_t deadline = shim_mono_us() + RV_SEND_US;
    const struct shim_config *cfg = shim_config();
    uint32_t me = (uint32_t)getpid();
    /* Other processes first, this process's own ranks last: once its own
     * rank has the answer, this process may exit (and this thread with it),
     * so every other rank's answer must already be in the kernel by then. */
    /* Encoded once, sent once per connection: a host's leader hands it to each of its ranks. */
    uint8_t *frame = malloc(RV_MAX_FRAME);
    size_t len = frame ? rv_encode(m, frame, RV_MAX_FRAME) : 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->nconns; i++) {
            struct rv_conn *c = &s->conns[i];
            if (c->fd < 0 || (c->rank < 0 && !c->told))
                continue;
            uint32_t pid = c->leader_pid ? c->leader_pid : c->rank >= 0 && s->facts ? s->facts[c->rank].pid : 0;
            int own = pid == me && (c->rank < 0 || !s->facts || strcmp(s->facts[c->rank].host_id, cfg->host_id) == 0);
            if (own != pass)
                continue;
            if (!len || rv_send_bytes(c->fd, frame, len, deadline) != 0) {
                failed++;
                reject(s, c, REJ_OTHER, !len ? "out of memory for a message" : errno == ETIMEDOUT ? "send: timed out" : strerror(errno));
            }
        }
    }
    free(frame);
    return failed;
}

/* Sends `type` with the session's verdict to every rank that is connected. */
static int send_verdict(struct rv_session *s, enum rv_type type)
{
    struct rv_msg *m = calloc(1, sizeof(*m));
    if (!m)
        return s->arrived;
    m->type = type;
    memcpy(m->token, s->token, RV_TOKEN_LEN);
    m->u.verdict = s->verdict;
    int failed = send_all(s, m);
    free(m);
    return failed;
}

static void finish(struct rv_session *s)
{
    s->state = ST_DONE;
}

/* Ends the session with a final passthrough for every connected rank. */
static void fall_back(struct rv_session *s, enum rv_type type, const char *why)
{
    s->verdict.action = ACTION_PASSTHROUGH;
    s->verdict.final = 1;
    snprintf(s->verdict.action_reason, sizeof(s->verdict.action_reason), "%s", why);
    /* Recorded before it is sent: the ranks' records then follow the root's. */
    record_decision(s, type == RV_COMMIT ? "commit" : "decision");
    send_verdict(s, type);
    finish(s);
}

_Static_assert(POLICY_IPC_MAX_RANKS == RV_MAX_PEERS, "auto's ipc limit is the chain's");

/* The action the policy chose, as this build and mode can carry it out. */
static void adjust_action(struct rv_verdict *v, int nranks, int leaders)
{
    const struct shim_config *cfg = shim_config();
    char why[RV_REASON_LEN];
    if (v->action == ACTION_IPC && (v->nhosts != 1 || nranks > RV_MAX_PEERS)) {
        snprintf(why, sizeof(why), "ipc chosen (%.400s), but CUDA IPC needs every rank on one host and at most %d "
                 "ranks (here %d hosts, %d ranks): passthrough", v->action_reason, RV_MAX_PEERS, v->nhosts, nranks);
        v->action = ACTION_PASSTHROUGH;
        memcpy(v->action_reason, why, sizeof(why));
    }
    if (v->action == ACTION_IPC && leaders) {
        /* ipc's monitor is each rank's own connection to the root. */
        snprintf(why, sizeof(why), "ipc chosen (%.400s), but ranks met at their host's leader (more than "
                 "NCCLSHIM_RENDEZVOUS_FANIN=%d ranks) and ipc needs each rank connected to the root: passthrough",
                 v->action_reason, cfg->rendezvous_fanin);
        v->action = ACTION_PASSTHROUGH;
        memcpy(v->action_reason, why, sizeof(why));
    }
    if (cfg->mode == MODE_OBSERVE && v->action != ACTION_PASSTHROUGH) {
        snprintf(why, sizeof(why), "NCCLSHIM_MODE=observe on the root: would be %s (%.400s); passthrough",
                 action_name((enum action)v->action), v->action_reason);
        v->action = ACTION_PASSTHROUGH;
        memcpy(v->action_reason, why, sizeof(why));
    }
}

/*
 * socket's set-up is local to each rank, which says in its HELLO whether it
 * can carry it out (socket_ready): when every rank said so, the root commits
 * now, without the DECISION and the vote round; one that said it cannot
 * makes it commit passthrough now, with the reason its veto would have given
 * (the lowest such rank's).  1 if committed; 0 if a rank said nothing (a
 * shim before this): the vote round decides, as it always did.
 */
static int one_round(struct rv_session *s)
{
    int not_ready = -1;
    for (int r = 0; r < s->nranks; r++) {
        if (s->facts[r].socket_ready == 0)
            return 0;
        if (s->facts[r].socket_ready == 2 && not_ready < 0)
            not_ready = r;
    }
    s->round = 1;
    if (not_ready >= 0) {
        char why[RV_REASON_LEN];
        snprintf(why, sizeof(why), "rank %d could not set up %s (%.300s): passthrough for all", not_ready,
                 action_name(ACTION_SOCKET), s->facts[not_ready].socket_why);
        fall_back(s, RV_COMMIT, why);
        return 1;
    }
    s->verdict.final = 1;
    record_decision(s, "commit");
    send_verdict(s, RV_COMMIT);
    finish(s);
    return 1;
}

static void decide_all(struct rv_session *s)
{
    const struct shim_config *cfg = shim_config();
    decide(&cfg->policy, &cfg->patterns, s->facts, s->nranks, &s->d);
    struct rv_verdict *v = &s->verdict;
    v->action = s->d.action;
    v->purpose = s->d.purpose;
    v->nhosts = s->d.nhosts;
    v->ntraining = s->d.ntraining;
    v->ninference = s->d.ninference;
    v->nunknown = s->d.nunknown;
    snprintf(v->purpose_reason, sizeof(v->purpose_reason), "%s", s->d.purpose_reason);
    snprintf(v->action_reason, sizeof(v->action_reason), "%s", s->d.action_reason);
    adjust_action(v, s->nranks, s->leaders);
    v->final = v->action == ACTION_PASSTHROUGH || v->action == ACTION_FAIL;
    s->decided_us = shim_mono_us();
    if (s->lfd >= 0) {
        /* Decided: nobody else may join (late connections are refused, and a
         * refused rank passes through, which only happens on a final passthrough). */
        close(s->lfd);
        s->lfd = -1;
    }
    reject_strangers(s);
    if (!v->final && v->action == ACTION_SOCKET && one_round(s))
        return;
    if (v->final)
        record_decision(s, "decision");
    int failed = send_verdict(s, RV_DECISION);
    if (v->final) {
        finish(s);
    } else if (failed) {
        char why[RV_REASON_LEN];
        snprintf(why, sizeof(why), "%d rank(s) could not be sent the decision %s: passthrough for all", failed,
                 action_name((enum action)v->action));
        fall_back(s, RV_COMMIT, why);
    } else {
        s->state = ST_WAIT_VOTES;
        s->round = 2;
    }
}

static void limit_fall_back(struct rv_session *s, const char *limit);

static void on_hello(struct rv_session *s, struct rv_conn *c, const struct rank_facts *f, uint32_t leader_pid)
{
    char why[RV_REASON_LEN];
    if (s->nranks == 0) {
        s->facts = calloc((size_t)f->nranks, sizeof(*s->facts));
        s->conn_of_rank = malloc((size_t)f->nranks * sizeof(*s->conn_of_rank));
        s->voted = calloc((size_t)f->nranks, 1);
        if (!s->facts || !s->conn_of_rank || !s->voted) {
            free(s->facts);
            free(s->conn_of_rank);
            free(s->voted);
            s->facts = NULL;
            s->conn_of_rank = NULL;
            s->voted = NULL;
            char who[64], what[96];
            snprintf(who, sizeof(who), "the root's process (pid %u)", (unsigned)getpid());
            snprintf(what, sizeof(what), "for %d ranks' facts (%zu bytes)", f->nranks,
                     (size_t)f->nranks * sizeof(*s->facts));
            rv_limit_reason(ENOMEM, who, what, why, sizeof(why));
            anon_remove(s, c);
            c->told = 1;
            limit_fall_back(s, why);
            return;
        }
        for (int r = 0; r < f->nranks; r++)
            s->conn_of_rank[r] = -1;
        s->nranks = f->nranks;
        s->first_us = shim_mono_us();
    }
    int bad = 0;
    if (f->nranks != s->nranks) {
        snprintf(why, sizeof(why), "rank %d says nranks=%d, the first rank said %d", f->rank, f->nranks, s->nranks);
        bad = 1;
    } else if (s->conn_of_rank[f->rank] >= 0) {
        snprintf(why, sizeof(why), "rank %d arrived twice (first from pid %u on %s)", f->rank,
                 s->facts[f->rank].pid, s->facts[f->rank].host);
        bad = 1;
    }
    if (bad && (c->leader_pid || leader_pid)) {
        /* A host's leader speaks for other ranks too: dropping its connection
         * would leave them all missing until the timeout.  The job is
         * misconfigured: every rank passes through now, told why. */
        char all[RV_REASON_LEN];
        snprintf(all, sizeof(all), "%.300s (through the leader of a host, pid %u): passthrough for all", why,
                 (unsigned)(c->leader_pid ? c->leader_pid : leader_pid));
        anon_remove(s, c);
        c->told = 1;
        limit_fall_back(s, all);
        return;
    }
    if (bad) {
        reject(s, c, REJ_PROTOCOL, why);
        return;
    }
    anon_remove(s, c);
    if (c->rank < 0) {
        c->rank = f->rank;
        if (leader_pid) {
            c->leader_pid = leader_pid;
            s->leaders++;
        }
    }
    s->facts[f->rank] = *f;
    s->conn_of_rank[f->rank] = (int)(c - s->conns);
    s->arrived++;
    if (s->arrived == s->nranks) {
        s->last_us = shim_mono_us();
        decide_all(s);
    }
}

static void on_vote(struct rv_session *s, struct rv_conn *c, const struct rv_vote *v)
{
    /* A leader's connection names the voter; every rank votes once a round. */
    int rank = c->leader_pid ? v->rank : c->rank;
    if (rank < 0 || rank >= s->nranks || s->conn_of_rank[rank] != (int)(c - s->conns) || s->voted[rank]) {
        char why[RV_REASON_LEN];
        snprintf(why, sizeof(why), "a vote for rank %d from %s, which does not speak for it or already voted: "
                 "passthrough for all", rank, c->peer);
        reject(s, c, REJ_PROTOCOL, "a vote for a rank it does not speak for, or a second vote");
        fall_back(s, RV_COMMIT, why);
        return;
    }
    s->voted[rank] = 1;
    if (!v->ok) {
        char why[RV_REASON_LEN];
        snprintf(why, sizeof(why), "rank %d could not set up %s (%.300s): passthrough for all", rank,
                 action_name((enum action)s->verdict.action), v->reason);
        fall_back(s, RV_COMMIT, why);
        return;
    }
    if (s->verdict.action == ACTION_IPC && s->round == 2) {
        if (!s->peers && !(s->peers = calloc(1, sizeof(*s->peers)))) {
            fall_back(s, RV_COMMIT, "out of memory for the ranks' exports: passthrough for all");
            return;
        }
        struct rv_peer *p = &s->peers->peer[s->peers->npeers++];
        p->rank = rank;
        p->bloblen = v->bloblen;
        memcpy(p->blob, v->blob, (size_t)v->bloblen);
    }
    if (++s->votes == s->nranks && s->verdict.action == ACTION_IPC && s->round == 2) {
        /* Everyone exported: give everyone every export, and vote again on connecting. */
        struct rv_msg *m = calloc(1, sizeof(*m));
        if (!m) {
            fall_back(s, RV_COMMIT, "out of memory for the PEERS message: passthrough for all");
            return;
        }
        m->type = RV_PEERS;
        memcpy(m->token, s->token, RV_TOKEN_LEN);
        m->u.peers = *s->peers;
        int failed = send_all(s, m);
        free(m);
        s->round = 3;
        s->votes = 0;
        memset(s->voted, 0, (size_t)s->nranks);
        s->decided_us = shim_mono_us();
        if (failed)
            fall_back(s, RV_COMMIT, "a rank could not be sent the peers' exports: passthrough for all");
        return;
    }
    if (s->votes == s->nranks) {
        s->verdict.final = 1;
        record_decision(s, "commit");
        int failed = send_verdict(s, RV_COMMIT);
        if (s->verdict.action == ACTION_IPC && !failed)
            s->state = ST_MONITOR;
        else
            finish(s);
    }
}

/* Ends a session that is waiting for ranks with a final passthrough, now. */
static void give_up_now(struct rv_session *s, const char *why)
{
    s->verdict.purpose = PURPOSE_UNKNOWN;
    snprintf(s->verdict.purpose_reason, sizeof(s->verdict.purpose_reason), "not decided: %s",
             "the rendezvous gave up before every rank arrived");
    s->decided_us = shim_mono_us();
    fall_back(s, RV_DECISION, why);
}

/*
 * A limit (descriptors, memory) here or at a leader, or a leader that lost a
 * rank: every rank falls back now, and the listener stays open until the
 * timeout to give the same answer, naming the cause, to ranks still arriving
 * (rv_answer_waiting): a rank turned away by a leader at its limit comes
 * back through another one.
 */
static void answer_final(struct rv_session *s, const int *fds, int nfds);

static void limit_fall_back(struct rv_session *s, const char *cause)
{
    char why[RV_REASON_LEN];
    snprintf(why, sizeof(why), "%.700s%s", cause, strstr(cause, "passthrough") ? "" : ": passthrough for all");
    shim_warn("rendezvous", "%s", why);
    if (s->state == ST_WAIT_HELLO)
        give_up_now(s, why);
    else
        fall_back(s, RV_COMMIT, why);
    /* What was held for the ranks is released now: the descriptors are what
     * ran out.  A connection that has not sent a byte yet (a leader or rank
     * still arriving) is answered once it says HELLO, its token checked,
     * rather than closed, which its ranks would take for the root's loss;
     * one whose HELLO had begun and shown the token stays, and is answered
     * once it is whole (on_message, ST_ANSWER): a few descriptors, until the
     * timeout.  One that had begun without the token yet (fewer than its
     * first 32 bytes, which come in one segment) is not told from a stranger:
     * closed. */
    int *arriving = malloc((size_t)s->nconns * sizeof(*arriving)), n = 0;
    for (int i = 0; i < s->nconns; i++) {
        struct rv_conn *c = &s->conns[i];
        int unheard = c->fd >= 0 && c->rank < 0 && !c->told;
        if (unheard && (c->have || c->need) && c->anon_slot < 0 && s->lfd >= 0)
            continue;
        if (arriving && unheard && !c->have && !c->need) {
            arriving[n++] = c->fd;
            c->fd = -1; /* answer_final closes it */
        }
        close_conn(c);
    }
    if (n)
        answer_final(s, arriving, n);
    free(arriving);
    if (s->lfd >= 0)
        s->state = ST_ANSWER;
}

/* The final verdict after a fall-back at a limit, as sent to a rank that
 * arrives then: NULL when out of memory. */
static struct rv_msg *final_verdict(const struct rv_session *s)
{
    struct rv_msg *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->type = RV_DECISION;
    memcpy(m->token, s->token, RV_TOKEN_LEN);
    m->u.verdict = s->verdict;
    m->u.verdict.final = 1;
    return m;
}

/* The final verdict to the connections `fds` (closed) and, while the
 * listener is open, to ranks arriving now: each once its HELLO shows the
 * token. */
static void answer_final(struct rv_session *s, const int *fds, int nfds)
{
    struct rv_msg *m = final_verdict(s);
    if (!m) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return;
    }
    /* Short: this thread serves every ID of the process; a rank sends its
     * HELLO with its connect, a stranger that does not is not waited for. */
    (void)rv_answer_waiting(s->lfd, fds, nfds, s->token, m, MAX_ANONYMOUS, 100);
    free(m);
}

/* A HELLO that had begun when the root fell back at a limit, now whole (its
 * token checked): the final verdict, and the connection closed. */
static void answer_begun(struct rv_session *s, struct rv_conn *c)
{
    struct rv_msg *m = final_verdict(s);
    char err[256] = "out of memory for a message";
    if (!m || rv_send_msg(c->fd, m, shim_mono_us() + RV_SEND_US, err, sizeof(err)) != 0)
        shim_warn("rendezvous", "a rank whose HELLO came in as the root fell back at a limit (%s) could not be told "
                  "so: %s; it passes through all the same, as a rank that lost the root", c->peer, err);
    free(m);
    close_conn(c);
}

/* ST_ANSWER: ranks arriving after a fall-back at a limit get its verdict. */
static void answer_late(struct rv_session *s)
{
    answer_final(s, NULL, 0);
}

#define WRONG_TOKEN "wrong token (not a rank of this unique ID, or an ID from an earlier run)"

static void on_message(struct rv_session *s, struct rv_conn *c, const uint8_t *buf, size_t len)
{
    struct rv_msg *m = malloc(sizeof(*m));
    char err[256];
    if (!m) {
        reject(s, c, REJ_OTHER, "out of memory for a message");
        return;
    }
    if (rv_decode(buf, len, m, err, sizeof(err)) != 0)
        reject(s, c, REJ_MALFORMED, err);
    else if (!rv_token_equal(m->token, s->token))
        reject(s, c, REJ_WRONG_TOKEN, WRONG_TOKEN);
    else if (m->type == RV_HELLO && (c->rank < 0 || c->leader_pid) && s->state == ST_WAIT_HELLO)
        on_hello(s, c, &m->u.hello, m->leader_pid);
    else if (m->type == RV_ABORT && (s->state == ST_WAIT_HELLO || s->state == ST_WAIT_VOTES)) {
        /* A leader lost a rank or hit a limit, or a rank hit one: nobody waits for the timeout. */
        anon_remove(s, c);
        c->told = 1;
        limit_fall_back(s, m->u.reason[0] ? m->u.reason : "a rank gave up (no reason given)");
    }
    else if (m->type == RV_HELLO && c->rank < 0 && s->state == ST_ANSWER)
        answer_begun(s, c);
    else if (m->type == RV_VOTE && c->rank >= 0 && s->state == ST_WAIT_VOTES)
        on_vote(s, c, &m->u.vote);
    else {
        snprintf(err, sizeof(err), "unexpected message type %d%s", (int)m->type,
                 c->rank >= 0 ? " from a rank that had arrived" : " before HELLO");
        int was_rank = c->rank >= 0 && s->state == ST_WAIT_VOTES;
        reject(s, c, REJ_PROTOCOL, err);
        if (was_rank)
            fall_back(s, RV_COMMIT, "a rank broke the protocol during the vote: passthrough for all");
    }
    free(m);
}

/* Reads what `c` has sent; handles each whole frame. */
static void on_readable(struct rv_session *s, struct rv_conn *c)
{
    if (s->state == ST_MONITOR) {
        /* Nothing is sent on a running ipc communicator's connections: this is
         * a rank leaving.  Closing every connection tells the others. */
        struct jw w;
        jw_begin(&w, "ipc_peer_left");
        jw_str(&w, "listen", s->addr);
        jw_hex64(&w, "decision_id", s->verdict.decision_id);
        jw_int(&w, "rank", c->rank);
        jw_emit(&w);
        finish(s);
        return;
    }
    char err[256];
    for (int loops = 0; c->fd >= 0 && s->state != ST_DONE && loops < 64; loops++) {
        uint8_t *dst = c->need ? c->buf + c->have : c->head + c->have;
        size_t want = c->need ? (size_t)c->need - c->have : RV_HEADER_LEN - c->have;
        ssize_t n = recv(c->fd, dst, want, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0) {
            int was_voter = c->rank >= 0 && s->state == ST_WAIT_VOTES;
            int rank = c->rank;
            uint32_t leader = s->state == ST_WAIT_HELLO ? c->leader_pid : 0;
            char peer[sizeof(c->peer)];
            memcpy(peer, c->peer, sizeof(peer));
            reject(s, c, REJ_CLOSED, n == 0 ? "connection closed" : strerror(errno));
            if (leader) {
                /* Its ranks cannot be reached any more: no point waiting for the timeout. */
                char why[RV_REASON_LEN];
                snprintf(why, sizeof(why), "the leader of rank %d's host (pid %u, %s) closed its connection before "
                         "the decision: passthrough for all", rank, (unsigned)leader, peer);
                give_up_now(s, why);
            } else if (was_voter) {
                char why[RV_REASON_LEN];
                snprintf(why, sizeof(why), "rank %d left before voting: passthrough for all", rank);
                fall_back(s, RV_COMMIT, why);
            }
            return;
        }
        c->have += (size_t)n;
        if (!c->need) {
            if (c->have < RV_HEADER_LEN)
                continue;
            long total = rv_frame_length(c->head, c->have, err, sizeof(err));
            if (total <= 0 || !(c->buf = malloc((size_t)total))) {
                reject(s, c, total <= 0 ? REJ_MALFORMED : REJ_OTHER, total <= 0 ? err : "out of memory for a message");
                return;
            }
            memcpy(c->buf, c->head, RV_HEADER_LEN);
            c->need = total;
        }
        if (c->anon_slot >= 0) {
            /* The token, as soon as it is in: a rank then leaves the
             * anonymous count (and its deadline) before its HELLO is whole. */
            uint8_t tok[RV_TOKEN_LEN];
            int t = rv_frame_token(c->buf, c->have, tok);
            if (t == 1 && !rv_token_equal(tok, s->token)) {
                reject(s, c, REJ_WRONG_TOKEN, WRONG_TOKEN);
                return;
            }
            if (t == 1)
                anon_remove(s, c);
        }
        if (c->have == (size_t)c->need) {
            uint8_t *frame = c->buf;
            size_t len = c->have;
            c->buf = NULL;
            c->need = 0;
            c->have = 0;
            on_message(s, c, frame, len);
            free(frame);
            if (s->state == ST_MONITOR)
                return; /* its close, once it comes, is a rank leaving: handled above, at the next poll */
        }
    }
}

/* A slot for a new connection: a free one, or a new one at the end.  NULL
 * when out of memory.  (The array may move: conns' addresses change.) */
static struct rv_conn *new_conn(struct rv_session *s, int fd, const struct sockaddr *sa)
{
    struct rv_conn *c;
    if (s->free_head >= 0) {
        c = &s->conns[s->free_head];
        s->free_head = c->next_free;
    } else {
        if (s->nconns == s->capconns) {
            int cap = s->capconns ? s->capconns * 2 : 16;
            struct rv_conn *n = realloc(s->conns, (size_t)cap * sizeof(*n));
            if (!n)
                return NULL;
            s->conns = n;
            s->capconns = cap;
        }
        c = &s->conns[s->nconns++];
    }
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->rank = -1;
    c->next_free = -1;
    c->accepted_us = shim_mono_us();
    c->anon_slot = s->nanon;
    s->anon[s->nanon++] = (int)(c - s->conns);
    rv_addr_str(sa, c->peer, sizeof(c->peer));
    return c;
}

static struct rv_conn *oldest_anonymous(struct rv_session *s)
{
    int oldest = s->anon[0];
    for (int i = 1; i < s->nanon; i++)
        if (s->conns[s->anon[i]].accepted_us < s->conns[oldest].accepted_us)
            oldest = s->anon[i];
    return &s->conns[oldest];
}

/* Makes room for one anonymous connection: the oldest one goes, unless what
 * it has sent by now (read first) makes it a rank or gets it dropped anyway. */
static void evict_oldest(struct rv_session *s)
{
    struct rv_conn *c = oldest_anonymous(s);
    on_readable(s, c);
    if (c->fd >= 0 && c->anon_slot >= 0 && s->state == ST_WAIT_HELLO)
        reject(s, c, REJ_EVICTED, "no token yet, the oldest of too many connections without one");
}

static void on_acceptable(struct rv_session *s)
{
    for (int n = 0; n < ACCEPT_BURST && s->lfd >= 0 && s->state == ST_WAIT_HELLO; n++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR || e == ECONNABORTED)
                continue;
            if ((e == EMFILE || e == ENFILE) && s->nanon > 0) {
                /* Out of descriptors: a stranger's is given back for this one. */
                evict_oldest(s);
                continue;
            }
            if (e == EMFILE || e == ENFILE || e == ENOMEM || e == ENOBUFS) {
                /* Nothing to give back: the ranks waiting cannot all be held (rv_leader.h). */
                char who[64], why[RV_REASON_LEN];
                snprintf(who, sizeof(who), "the root's process (pid %u)", (unsigned)getpid());
                rv_limit_reason(e, who, "accepting the ranks' connections", why, sizeof(why));
                limit_fall_back(s, why);
                return;
            }
            if (e != EAGAIN && e != EWOULDBLOCK) {
                /* The connection waits in the backlog; the listener stays
                 * readable, so poll() would return at once, forever. */
                s->accept_paused_until = shim_mono_us() + ACCEPT_PAUSE_US;
                if (!s->accept_warned++) /* once per ID: it may last, 10 times a second */
                    shim_warn("rendezvous", "%s: accept: %s: connections wait in the backlog for %llu ms at a time%s",
                              s->addr, strerror(e), ACCEPT_PAUSE_US / 1000,
                              e == EMFILE || e == ENFILE ? " (the process is out of descriptors: raise ulimit -n)"
                                                         : "");
            }
            return;
        }
        while (s->nanon >= MAX_ANONYMOUS && s->state == ST_WAIT_HELLO) {
            if (s->nanon < MAX_ANONYMOUS_HARD && shim_mono_us() - oldest_anonymous(s)->accepted_us < EVICT_GRACE_US)
                break;
            evict_oldest(s);
        }
        struct rv_conn *c = s->state == ST_WAIT_HELLO ? new_conn(s, fd, (struct sockaddr *)&ss) : NULL;
        if (!c) {
            /* Decided meanwhile (the evicted one was the last rank), or out of memory. */
            close(fd);
            s->rejected++;
            s->rejected_by[s->state == ST_WAIT_HELLO ? REJ_OTHER : REJ_LATE]++;
            continue;
        }
        /* What it sent is often there already: a rank's HELLO, or a flood's garbage. */
        on_readable(s, c);
    }
}

/* Deadlines: returns the poll timeout (ms) until the nearest one. */
static int check_deadlines(struct rv_session *s, uint64_t now)
{
    const struct shim_config *cfg = shim_config();
    uint64_t deadline;
    char why[RV_REASON_LEN];
    if (s->state == ST_MONITOR)
        return 60000; /* no deadline: it lasts as long as the communicator */
    if (s->state == ST_ANSWER) {
        deadline = (s->first_us ? s->first_us : s->created_us) + (uint64_t)cfg->rendezvous_timeout_ms * 1000;
        if (now >= deadline) {
            finish(s);
            return 0;
        }
        uint64_t ms = (deadline - now + 999) / 1000;
        return ms > 60000 ? 60000 : (int)ms;
    }
    uint64_t next = UINT64_MAX; /* the nearest admission deadline */
    if (s->state == ST_WAIT_HELLO) {
        /* Backwards: a removal moves the last entry into the one removed. */
        for (int i = s->nanon - 1; i >= 0; i--) {
            struct rv_conn *c = &s->conns[s->anon[i]];
            uint64_t d = c->accepted_us + HELLO_DEADLINE_US;
            if (now >= d)
                reject(s, c, REJ_NO_HELLO, "no token within 1 s of connecting");
            else if (d < next)
                next = d;
        }
        if (s->accept_paused_until > now && s->accept_paused_until < next)
            next = s->accept_paused_until;
    }
    if (s->state == ST_WAIT_HELLO && s->nranks == 0) {
        deadline = s->created_us + (uint64_t)cfg->rendezvous_idle_ms * 1000;
        if (now >= deadline) {
            struct jw w;
            jw_begin(&w, "rendezvous_expired");
            jw_str(&w, "listen", s->addr);
            jw_int(&w, "idle_ms", cfg->rendezvous_idle_ms);
            jw_int(&w, "rejected_connections", s->rejected);
            record_rejected_by(&w, s);
            jw_emit(&w);
            finish(s);
            return 0;
        }
    } else if (s->state == ST_WAIT_HELLO) {
        deadline = s->first_us + (uint64_t)cfg->rendezvous_timeout_ms * 1000;
        if (now >= deadline) {
            char missing[200];
            rank_list(s, 0, missing, sizeof(missing));
            snprintf(why, sizeof(why),
                     "rendezvous timed out after %d ms (NCCLSHIM_RENDEZVOUS_TIMEOUT_MS) with %d of %d ranks; "
                     "missing: %s (a rank without the shim, one that has not called init yet, or one that cannot "
                     "reach %s): passthrough for all",
                     cfg->rendezvous_timeout_ms, s->arrived, s->nranks, missing, s->addr);
            s->verdict.purpose = PURPOSE_UNKNOWN;
            snprintf(s->verdict.purpose_reason, sizeof(s->verdict.purpose_reason),
                     "not decided: not every rank arrived");
            if (s->verdict.decision_id == 0)
                (void)rv_random(&s->verdict.decision_id, sizeof(s->verdict.decision_id));
            fall_back(s, RV_DECISION, why);
            return 0;
        }
    } else if (s->state == ST_WAIT_VOTES) {
        deadline = s->decided_us + (uint64_t)cfg->rendezvous_timeout_ms * 1000;
        if (now >= deadline) {
            snprintf(why, sizeof(why), "%d of %d votes within %d ms: passthrough for all", s->votes, s->nranks,
                     cfg->rendezvous_timeout_ms);
            fall_back(s, RV_COMMIT, why);
            return 0;
        }
    } else {
        return 0;
    }
    if (next < deadline)
        deadline = next;
    uint64_t ms = (deadline - now + 999) / 1000;
    return ms > 60000 ? 60000 : (int)ms;
}

/* What each poll entry stands for: a session's listener (conn -1) or one of
 * its connections (an index: the array may grow while entries are handled). */
struct poll_ref {
    struct rv_session *s;
    int conn;
};

/* The serving thread's poll arrays.  File-scope, not on its stack, so that a
 * process that exits while the thread runs leaves them reachable (the thread
 * alone uses them). */
static struct pollfd *g_pfd;
static struct poll_ref *g_ref;
static size_t g_cap;

static void *serve(void *arg)
{
    (void)arg;
    struct pollfd *pfd = g_pfd;
    struct poll_ref *ref = g_ref;
    size_t cap = g_cap;
    for (;;) {
        pthread_mutex_lock(&g_rv_lock);
        /* Close finished sessions; stop when none is left.  Only this thread
         * removes sessions, so the pointers in `ref` stay valid below. */
        for (struct rv_session **pp = &g_sessions; *pp;) {
            struct rv_session *s = *pp;
            if (s->state == ST_DONE) {
                *pp = s->next;
                g_nsessions--;
                session_free(s);
            } else {
                pp = &s->next;
            }
        }
        if (!g_sessions) {
            g_thread_running = 0;
            shim_worker_close(g_wake);
            g_pfd = NULL;
            g_ref = NULL;
            g_cap = 0;
            pthread_mutex_unlock(&g_rv_lock);
            free(pfd);
            free(ref);
            return NULL;
        }
        size_t n = 1;
        for (struct rv_session *s = g_sessions; s; s = s->next)
            n += 1 + (size_t)s->nconns;
        if (n > cap) {
            struct pollfd *p = realloc(pfd, n * sizeof(*p));
            if (p)
                pfd = p;
            struct poll_ref *r = realloc(ref, n * sizeof(*r));
            if (r)
                ref = r;
            if (p && r)
                cap = n;
            g_pfd = pfd;
            g_ref = ref;
            g_cap = cap;
        }
        int timeout = 60000;
        uint64_t now = shim_mono_us();
        size_t k = 0;
        if (cap) {
            pfd[k] = (struct pollfd){ g_wake[0], POLLIN, 0 };
            ref[k++] = (struct poll_ref){ NULL, -1 };
            for (struct rv_session *s = g_sessions; s; s = s->next) {
                int t = check_deadlines(s, now);
                if (s->state == ST_DONE)
                    timeout = 0;
                else if (t < timeout)
                    timeout = t;
            }
            /* Handled in this order: the ranks' connections (and those that
             * showed the token), the listeners, the strangers. */
            for (int pass = 0; pass < 3; pass++) {
                for (struct rv_session *s = g_sessions; s; s = s->next) {
                    if (s->state == ST_DONE)
                        continue;
                    if (pass == 1) {
                        if (s->lfd >= 0 && s->accept_paused_until <= now && k < cap) {
                            pfd[k] = (struct pollfd){ s->lfd, POLLIN, 0 };
                            ref[k++] = (struct poll_ref){ s, -1 };
                        }
                        continue;
                    }
                    for (int i = 0; i < s->nconns && k < cap; i++) {
                        if (s->conns[i].fd < 0 || (s->conns[i].anon_slot >= 0) != (pass == 2))
                            continue;
                        pfd[k] = (struct pollfd){ s->conns[i].fd, POLLIN, 0 };
                        ref[k++] = (struct poll_ref){ s, i };
                    }
                }
            }
        }
        pthread_mutex_unlock(&g_rv_lock);

        if (poll(pfd, k, cap ? timeout : 10) < 0) {
            if (errno != EINTR)
                shim_warn("rendezvous", "poll: %s", strerror(errno));
            continue;
        }

        pthread_mutex_lock(&g_rv_lock);
        for (size_t j = 0; j < k; j++) {
            if (!pfd[j].revents)
                continue;
            struct rv_session *s = ref[j].s;
            if (!s) {
                shim_worker_drain(g_wake);
                continue;
            }
            if (s->state == ST_DONE)
                continue;
            if (ref[j].conn < 0) {
                if (s->lfd == pfd[j].fd && s->state == ST_WAIT_HELLO)
                    on_acceptable(s);
                else if (s->lfd == pfd[j].fd && s->state == ST_ANSWER)
                    answer_late(s);
            } else if (s->conns[ref[j].conn].fd == pfd[j].fd) {
                /* Not closed (and its slot not reused) since the poll. */
                on_readable(s, &s->conns[ref[j].conn]);
            }
        }
        pthread_mutex_unlock(&g_rv_lock);
    }
}

/* Starts the serving thread if it is not running.  Under g_rv_lock. */
static int ensure_thread(char *err, size_t errlen)
{
    if (g_thread_running)
        return 0;
    if (shim_worker_start(serve, g_wake, err, errlen) != 0)
        return -1;
    g_thread_running = 1;
    return 0;
}

int rv_server_open(ncclUniqueId *id, char *where, size_t wherelen, char *err, size_t errlen)
{
    if (!uid_mark_space_free(id)) {
        snprintf(err, errlen, "bytes 64..127 of the unique ID are in use (an NCCL that fills them)");
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = uid_nccl_addr(id, &ss);
    if (!sl) {
        snprintf(err, errlen, "the unique ID holds no IPv4/IPv6 address where NCCL 2.x puts one");
        return -1;
    }
    struct rv_session *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->lfd = -1;
    s->free_head = -1;
    ((struct sockaddr_in *)&ss)->sin_port = 0; /* same offset in sockaddr_in6: any free port */
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        char a[80];
        rv_addr_str((struct sockaddr *)&ss, a, sizeof(a));
        snprintf(err, errlen, "cannot listen on NCCL's bootstrap address %s: %s", a, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(s);
        return -1;
    }
    s->lfd = fd;
    rv_addr_str((struct sockaddr *)&ss, s->addr, sizeof(s->addr));
    struct uid_mark mark = { UID_MARK_VERSION, ntohs(((struct sockaddr_in *)&ss)->sin_port), { 0 } };
    if (rv_random(mark.token, sizeof(mark.token)) != 0 ||
        rv_random(&s->verdict.decision_id, sizeof(s->verdict.decision_id)) != 0) {
        snprintf(err, errlen, "getrandom: %s", strerror(errno));
        session_free(s);
        return -1;
    }
    memcpy(s->token, mark.token, sizeof(s->token));
    s->created_us = shim_mono_us();
    s->state = ST_WAIT_HELLO;

    pthread_mutex_lock(&g_rv_lock);
    if (ensure_thread(err, errlen) != 0) {
        pthread_mutex_unlock(&g_rv_lock);
        session_free(s);
        return -1;
    }
    s->next = g_sessions;
    g_sessions = s;
    g_nsessions++;
    shim_worker_wake(g_wake);
    pthread_mutex_unlock(&g_rv_lock);

    /* Marked only once someone serves it. */
    uid_mark_write(id, &mark);
    snprintf(where, wherelen, "%s", s->addr);
    return 0;
}

int rv_server_sessions(void)
{
    pthread_mutex_lock(&g_rv_lock);
    int n = g_nsessions;
    pthread_mutex_unlock(&g_rv_lock);
    return n;
}

void rv_server_lock_for_fork(void)
{
    pthread_mutex_lock(&g_rv_lock);
}

void rv_server_unlock_after_fork(void)
{
    pthread_mutex_unlock(&g_rv_lock);
}

void rv_server_after_fork_child(void)
{
    /* The serving thread is not in the child; the parent serves its IDs. */
    while (g_sessions) {
        struct rv_session *s = g_sessions;
        g_sessions = s->next;
        session_free(s);
    }
    g_nsessions = 0;
    shim_worker_close(g_wake);
    g_thread_running = 0;
    pthread_mutex_init(&g_rv_lock, NULL);
}
