/*
 * The root's decision for one session (rv_session.h), round by round: every
 * rank's HELLO, the policy's verdict as this build can carry it out, the
 * DECISION and the votes on setting it up (ipc: the exports, then PEERS and
 * a vote on connecting), the COMMIT; and every way it falls back to
 * passthrough for all, with the reason, before anything is committed.
 */
#define _GNU_SOURCE
#include "rv_decide.h"

#include "clock.h"
#include "rv_fault.h"
#include "config.h"
#include "rv_io.h"
#include "rv_limits.h"
#include "rv_server_record.h"
#include "record.h"
#include "rv_states.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sends `m` to every rank that is connected; returns the number of sends that failed. */
static int send_all(struct rv_session *s, const struct rv_msg *m)
{
    int failed = 0;
    uint64_t deadline = shim_mono_us() + RV_SEND_US;
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
            int own = pid == me && (c->rank < 0 || !s->facts || strcmp(s->facts[c->rank].host_id, shim_host_identity()->id) == 0);
            if (own != pass)
                continue;
            if (!len || rv_send_bytes(c->fd, frame, len, deadline) != 0) {
                failed++;
                s->askers = 1;
                rv_reject(s, c, REJ_OTHER, !len ? "out of memory for a message" : errno == ETIMEDOUT ? "send: timed out" : strerror(errno));
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

/* A final verdict (COMMIT, or a DECISION marked final): recorded before it
 * is sent, so that the ranks' records follow the root's; the fault point
 * "root-commit" just before.  Returns send_verdict's count. */
static int send_final(struct rv_session *s, enum rv_type type)
{
    rv_record_decision(s, type == RV_COMMIT ? "commit" : "decision");
    rv_fault("root-commit");
    return send_verdict(s, type);
}

void rv_fall_back(struct rv_session *s, enum rv_type type, const char *why)
{
    s->verdict.action = ACTION_PASSTHROUGH;
    s->verdict.final = 1;
    s->verdict.fallback = 1;
    snprintf(s->verdict.action_reason, sizeof(s->verdict.action_reason), "%s", why);
    send_final(s, type);
    rv_settle(s);
}

_Static_assert(POLICY_IPC_MAX_RANKS == RV_MAX_PEERS, "auto's ipc limit is the chain's");

/* The action the policy chose, as this build and mode can carry it out. */
static void adjust_action(struct rv_verdict *v, int nranks, int leaders)
{
    const struct shim_config *cfg = shim_config();
    char why[RV_REASON_LEN];
    if (action_has((enum action)v->action, ACT_PEERS) && (v->nhosts != 1 || nranks > RV_MAX_PEERS)) {
        const struct action_info *a = action_info((enum action)v->action);
        snprintf(why, sizeof(why), "%s chosen (%.400s), but %s needs every rank on one host and at most %d ranks "
                 "(here %d hosts, %d ranks): passthrough", a->name, v->action_reason, a->means, RV_MAX_PEERS,
                 v->nhosts, nranks);
        v->action = ACTION_PASSTHROUGH;
        memcpy(v->action_reason, why, sizeof(why));
    }
    if (action_has((enum action)v->action, ACT_PEERS) && leaders) {
        /* Its monitor is each rank's own connection to the root. */
        snprintf(why, sizeof(why), "%s chosen (%.400s), but ranks met at their host's leader (more than "
                 "NCCLSHIM_RENDEZVOUS_FANIN=%d ranks) and %s needs each rank connected to the root: passthrough",
                 action_name((enum action)v->action), v->action_reason, cfg->rendezvous_fanin,
                 action_name((enum action)v->action));
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
                 action_name((enum action)s->verdict.action), s->facts[not_ready].text->socket_why);
        rv_fall_back(s, RV_COMMIT, why);
        return 1;
    }
    s->verdict.final = 1;
    /* A send that fails closes that connection: its rank (or host's leader's
     * ranks) asks the listener, which answers this same verdict (rv_settle). */
    send_final(s, RV_COMMIT);
    rv_settle(s);
    return 1;
}

static void decide_all(struct rv_session *s)
{
    const struct shim_config *cfg = shim_config();
    rv_fault("root-decide");
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
    if (s->d.unrecognized[0]) /* never silent: one line at the root, which alone saw every rank (issue 43) */
        shim_warn("unrecognized", "a communicator of %d ranks (decision %016llx) looks like a weight-update bridge "
                  "but passes through: %s", s->nranks, (unsigned long long)v->decision_id, s->d.unrecognized);
    adjust_action(v, s->nranks, s->leaders);
    v->final = !action_has((enum action)v->action, ACT_SET_UP);
    s->decided_us = shim_mono_us();
    /* Decided: nobody else may join, but the listener stays open: a rank
     * whose path breaks from here on asks it (an ABORT on a new connection),
     * which ends the vote in passthrough, or, once the verdict is final, is
     * answered with it (ST_ANSWER).  ipc closes it at its COMMIT. */
    rv_reject_strangers(s);
    if (!v->final && action_has((enum action)v->action, ACT_READY_IN_HELLO) && one_round(s))
        return;
    int failed = v->final ? send_final(s, RV_DECISION) : send_verdict(s, RV_DECISION);
    if (v->final) {
        rv_settle(s);
    } else if (failed) {
        char why[RV_REASON_LEN];
        snprintf(why, sizeof(why), "%d rank(s) could not be sent the decision %s: passthrough for all", failed,
                 action_name((enum action)v->action));
        rv_fall_back(s, RV_COMMIT, why);
    } else {
        s->state = ST_WAIT_VOTES;
        s->round = 2;
    }
}

/*
 * A new host's leader when the root holds RV_ROOT_LEADERS of them: sent to
 * one of those that take leaders (round robin), before any of its HELLOs
 * counts; it joins that one and says its HELLOs again there.  1 if sent; 0
 * (none takes leaders, or the send failed): it is taken here, over the cap.
 */
static int redirect_leader(struct rv_session *s, struct rv_conn *c)
{
    if (s->leaders < rv_test_fanout(RV_ROOT_LEADERS))
        return 0;
    for (int k = 0; k < s->nconns; k++) {
        int i = (s->next_parent + k) % s->nconns;
        struct rv_conn *p = &s->conns[i];
        /* Round robin, whatever each holds already: one that is full sends
         * the newcomer on to one of its own (rv_leader.c redirect_kid). */
        if (p->fd < 0 || !p->leader_pid || !p->leader_addr[0])
            continue;
        struct rv_msg *m = calloc(1, sizeof(*m));
        char err[200];
        if (!m)
            return 0;
        rv_make_redirect(m, s->token, p->leader_addr);
        int sent = rv_send_msg(c->fd, m, shim_mono_us() + RV_SEND_US, err, sizeof(err)) == 0;
        free(m);
        if (!sent)
            return 0; /* then it is taken here, over the cap, rather than lost */
        s->redirected++;
        s->next_parent = (i + 1) % s->nconns;
        rv_drop_quietly(s, c);
        return 1;
    }
    return 0;
}

/* The first HELLO: the arrays by rank, for `nranks` ranks.  0, or -1 when
 * out of memory (every rank then passes through, told why). */
static int new_ranks(struct rv_session *s, struct rv_conn *c, int nranks)
{
    s->facts = calloc((size_t)nranks, sizeof(*s->facts));
    s->conn_of_rank = malloc((size_t)nranks * sizeof(*s->conn_of_rank));
    s->voted = calloc((size_t)nranks, 1);
    if (!s->facts || !s->conn_of_rank || !s->voted) {
        rv_session_free_ranks(s);
        char who[64], what[96], why[RV_REASON_LEN];
        snprintf(who, sizeof(who), "the root's process (pid %u)", (unsigned)getpid());
        snprintf(what, sizeof(what), "for %d ranks' facts (%zu bytes)", nranks, (size_t)nranks * sizeof(*s->facts));
        rv_limit_reason(ENOMEM, who, what, why, sizeof(why));
        rv_anon_remove(s, c);
        c->told = 1;
        rv_limit_fall_back(s, why);
        return -1;
    }
    for (int r = 0; r < nranks; r++) {
        s->conn_of_rank[r] = -1;
        s->facts[r].text = &facts_no_text; /* until its HELLO: read as "said nothing" */
    }
    s->nranks = nranks;
    s->first_us = shim_mono_us();
    return 0;
}

static void on_hello(struct rv_session *s, struct rv_conn *c, const struct rank_facts *f, uint32_t leader_pid,
                     const char *leader_addr)
{
    if (leader_pid && c->rank < 0 && !c->leader_pid && redirect_leader(s, c))
        return;
    char why[RV_REASON_LEN];
    if (s->nranks == 0 && new_ranks(s, c, f->nranks) != 0)
        return;
    int bad = 0;
    if (f->nranks != s->nranks) {
        snprintf(why, sizeof(why), "rank %d says nranks=%d, the first rank said %d", f->rank, f->nranks, s->nranks);
        bad = 1;
    } else if (s->conn_of_rank[f->rank] >= 0) {
        snprintf(why, sizeof(why), "rank %d arrived twice (first from pid %u on %s)", f->rank,
                 s->facts[f->rank].pid, s->facts[f->rank].host);
        bad = 1;
    }
    /* Kept once per distinct text (rv_texts.h): ranks of a job say the same things. */
    const struct rank_text *text = bad ? NULL : rv_texts_intern(&s->texts, f->text);
    if (!bad && !text) {
        snprintf(why, sizeof(why), "the root's process (pid %u) is out of memory for rank %d's facts",
                 (unsigned)getpid(), f->rank);
        bad = 2;
    }
    if (bad && (c->leader_pid || leader_pid)) {
        /* A host's leader speaks for other ranks too: dropping its connection
         * would leave them all missing until the timeout.  The job is
         * misconfigured (or the root out of memory): every rank passes
         * through now, told why. */
        char all[RV_REASON_LEN];
        snprintf(all, sizeof(all), "%.300s (through the leader of a host, pid %u): passthrough for all", why,
                 (unsigned)(c->leader_pid ? c->leader_pid : leader_pid));
        rv_anon_remove(s, c);
        c->told = 1;
        rv_limit_fall_back(s, all);
        return;
    }
    if (bad) {
        rv_reject(s, c, bad == 2 ? REJ_OTHER : REJ_PROTOCOL, why);
        return;
    }
    rv_anon_remove(s, c);
    if (c->rank < 0) {
        c->rank = f->rank;
        if (leader_pid) {
            c->leader_pid = leader_pid;
            snprintf(c->leader_addr, sizeof(c->leader_addr), "%s", leader_addr);
            s->leaders++;
            s->askers = 1;
        }
    }
    s->facts[f->rank] = *f;
    s->facts[f->rank].text = text;
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
        rv_reject(s, c, REJ_PROTOCOL, "a vote for a rank it does not speak for, or a second vote");
        rv_fall_back(s, RV_COMMIT, why);
        return;
    }
    s->voted[rank] = 1;
    if (!v->ok) {
        char why[RV_REASON_LEN];
        snprintf(why, sizeof(why), "rank %d could not set up %s (%.300s): passthrough for all", rank,
                 action_name((enum action)s->verdict.action), v->reason);
        rv_fall_back(s, RV_COMMIT, why);
        return;
    }
    int peers = action_has((enum action)s->verdict.action, ACT_PEERS);
    if (peers && s->round == 2) {
        if (!s->peers && !(s->peers = calloc(1, sizeof(*s->peers)))) {
            rv_fall_back(s, RV_COMMIT, "out of memory for the ranks' exports: passthrough for all");
            return;
        }
        struct rv_peer *p = &s->peers->peer[s->peers->npeers++];
        p->rank = rank;
        p->bloblen = v->bloblen;
        memcpy(p->blob, v->blob, (size_t)v->bloblen);
    }
    if (++s->votes == s->nranks && peers && s->round == 2) {
        /* Everyone exported: give everyone every export, and vote again on connecting. */
        struct rv_msg *m = calloc(1, sizeof(*m));
        if (!m) {
            rv_fall_back(s, RV_COMMIT, "out of memory for the PEERS message: passthrough for all");
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
            rv_fall_back(s, RV_COMMIT, "a rank could not be sent the peers' exports: passthrough for all");
        return;
    }
    if (s->votes == s->nranks) {
        s->verdict.final = 1;
        int failed = send_final(s, RV_COMMIT);
        if (peers && !failed) {
            /* Its ranks are each connected to the root (never through a
             * leader): the monitor needs no listener. */
            if (s->lfd >= 0)
                close(s->lfd);
            s->lfd = -1;
            s->state = ST_MONITOR;
        } else {
            rv_settle(s);
        }
    }
}

void rv_give_up_now(struct rv_session *s, const char *why)
{
    s->verdict.purpose = PURPOSE_UNKNOWN;
    snprintf(s->verdict.purpose_reason, sizeof(s->verdict.purpose_reason), "not decided: %s",
             "the rendezvous gave up before every rank arrived");
    s->decided_us = shim_mono_us();
    rv_fall_back(s, RV_DECISION, why);
}

/*
 * A limit (descriptors, memory) here or at a leader, or a leader that lost a
 * rank: every rank falls back now, and the listener stays open until the
 * timeout to give the same answer, naming the cause, to ranks still arriving
 * (rv_answer_waiting): a rank turned away by a leader at its limit comes
 * back through another one.
 */
static void answer_final(struct rv_session *s, const int *fds, int nfds);

void rv_limit_fall_back(struct rv_session *s, const char *cause)
{
    char why[RV_REASON_LEN];
    snprintf(why, sizeof(why), "%.700s%s", cause, strstr(cause, "passthrough") ? "" : ": passthrough for all");
    shim_warn("rendezvous", "%s", why);
    if (s->state == ST_WAIT_HELLO)
        rv_give_up_now(s, why);
    else
        rv_fall_back(s, RV_COMMIT, why);
    /* What was held for the ranks is released now: the descriptors are what
     * ran out.  A connection that has not sent a byte yet (a leader or rank
     * still arriving) is answered once it says HELLO, its token checked,
     * rather than closed, which its ranks would take for the root's loss;
     * one whose HELLO had begun and shown the token stays, and is answered
     * once it is whole (rv_on_message, ST_ANSWER): a few descriptors, until the
     * timeout.  One that had begun without the token yet (fewer than its
     * first 32 bytes, which come in one segment) is not told from a stranger:
     * closed. */
    int *arriving = malloc((size_t)s->nconns * sizeof(*arriving)), n = 0;
    for (int i = 0; i < s->nconns; i++) {
        struct rv_conn *c = &s->conns[i];
        int unheard = c->fd >= 0 && c->rank < 0 && !c->told;
        if (unheard && c->rd.have && c->anon_slot < 0 && s->lfd >= 0)
            continue;
        if (arriving && unheard && !c->rd.have) {
            arriving[n++] = c->fd;
            c->fd = -1; /* answer_final closes it */
        }
        rv_close_conn(c);
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
    rv_close_conn(c);
}

void rv_answer_late(struct rv_session *s)
{
    answer_final(s, NULL, 0);
}

/* A message of this ID's token, as the root's table says (rv_states.c). */
static void dispatch(struct rv_session *s, struct rv_conn *c, struct rv_msg *m)
{
    char why[RV_REASON_LEN];
    enum rv_who who = c->rank < 0 ? WHO_NEW : c->leader_pid ? WHO_LEADER : WHO_RANK;
    switch (rv_root_step(s->state, m->type, who)) {
    case ROOT_HELLO:
        on_hello(s, c, &m->u.hello, m->leader_pid, m->leader_addr);
        return;
    case ROOT_ABORT:
        /* A leader lost a rank or hit a limit, or a rank hit one: nobody waits for the timeout. */
        rv_anon_remove(s, c);
        c->told = 1;
        rv_limit_fall_back(s, m->u.reason[0] ? m->u.reason : "a rank gave up (no reason given)");
        return;
    case ROOT_ANSWER:
        answer_begun(s, c);
        return;
    case ROOT_HELLO_IN_VOTE:
        /* Every rank had arrived: a rank connecting again lost its path (or
         * a stranger holds the token).  Nobody can tell which, so nobody goes on. */
        rv_anon_remove(s, c);
        c->told = 1;
        snprintf(why, sizeof(why), "rank %d connected again during the vote (its path to the root broke): "
                 "passthrough for all", m->u.hello.rank);
        rv_limit_fall_back(s, why);
        return;
    case ROOT_VOTE:
        on_vote(s, c, &m->u.vote);
        return;
    case ROOT_REJECT:
        break;
    }
    snprintf(why, sizeof(why), "unexpected message type %d%s", (int)m->type,
             c->rank >= 0 ? " from a rank that had arrived" : " before HELLO");
    int was_rank = c->rank >= 0 && s->state == ST_WAIT_VOTES;
    rv_reject(s, c, REJ_PROTOCOL, why);
    if (was_rank)
        rv_fall_back(s, RV_COMMIT, "a rank broke the protocol during the vote: passthrough for all");
}

void rv_on_message(struct rv_session *s, struct rv_conn *c, const uint8_t *buf, size_t len)
{
    struct rv_msg *m = malloc(sizeof(*m));
    char err[256];
    if (!m) {
        rv_reject(s, c, REJ_OTHER, "out of memory for a message");
        return;
    }
    if (rv_decode(buf, len, m, err, sizeof(err)) != 0)
        rv_reject(s, c, REJ_MALFORMED, err);
    else if (!rv_token_equal(m->token, s->token))
        rv_reject(s, c, REJ_WRONG_TOKEN, WRONG_TOKEN);
    else
        dispatch(s, c, m);
    free(m);
}

