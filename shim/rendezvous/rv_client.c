/*
 * A rank's side of the rendezvous (shim/rendezvous/rendezvous.h), run inside the
 * application's init call.  Every wait is bounded.  Before its HELLO is handed
 * on, a rank may pass through on its own (the root cannot commit anything
 * without it); after, only the root's word counts: at its own deadline a rank
 * asks the root to give up (ABORT) and waits for the answer, and a rank whose
 * path breaks asks the root directly (rv_ask.c).  docs/design.md, "All or
 * nothing", gives the argument.
 */
#define _GNU_SOURCE
#include "rendezvous.h"

#include "policy/decide.h"
#include "clock.h"
#include "record.h"
#include "rv_ask.h"
#include "rv_fault.h"
#include "rv_io.h"
#include "rv_leader.h"
#include "rv_limits.h"
#include "rv_states.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Beyond the root's own timeout: the root answers within the timeout of the
 * first rank's arrival (at or before ours), and needs a moment to send. */
#define GRACE_US 2000000ull
/* The longest a rank tries to reach the root. */
#define CONNECT_MAX_MS 10000
/* Connections a rank makes when the root closes one without a word before
 * its decision: a root under a flood of strangers may have dropped it as one
 * of them (rv_admit.c, admission) before its HELLO came in. */
#define HELLO_TRIES 3

/* How a wait for the root's word ended. */
enum { WORD = 0, ALONE = -1, ASK = -2 };

static void fall_back(struct rv_result *out, const char *fmt, const char *a, const char *b)
{
    out->via_root = 0;
    out->v.action = ACTION_PASSTHROUGH;
    out->v.final = 1;
    snprintf(out->fallback, sizeof(out->fallback), fmt, a, b);
    snprintf(out->v.action_reason, sizeof(out->v.action_reason), "%s", out->fallback);
    if (!out->fallback_kind[0])
        snprintf(out->fallback_kind, sizeof(out->fallback_kind), "unreachable");
}

/* What a fallback's kind asks of the user (the stderr line's fix). */
static const char *fix_of(const char *kind)
{
    return strcmp(kind, "limit") == 0
               ? "raise the limit the reason names"
           : strcmp(kind, "frozen") == 0
               ? "the root's process (the caller of ncclGetUniqueId) stopped answering: check that it is not "
                 "stopped or starved of CPU"
           : strcmp(kind, "root") == 0
               ? "fix what the reason names; inspect --check on the records says more"
           : strcmp(kind, "lost") == 0
               ? "the reason names which process stopped, died or could not be reached; the root's process (the "
                 "caller of ncclGetUniqueId) must stay alive and answering until every rank has created the "
                 "communicator"
               : "check that this host can reach the root and that the process that called ncclGetUniqueId is "
                 "alive until every rank has created the communicator";
}

/* Every passthrough that is not the policy's choice says so, on one line. */
static void say_fallback(const struct rank_facts *facts, struct rv_result *out)
{
    if (out->via_root && out->v.fallback && !out->fallback_kind[0])
        snprintf(out->fallback_kind, sizeof(out->fallback_kind), "root");
    if (!out->fallback_kind[0])
        return;
    const char *why = out->via_root ? out->v.action_reason : out->fallback;
    /* On stderr only: the comm record carries it (decision.fallback_kind, and
     * inspect --check reports it once per communicator); a warning record per
     * rank would list thousands of lines for one cause. */
    fprintf(stderr, "ncclshim: warning: rank %d of %d: the weight-update rendezvous fell back to passthrough (%s): "
            "%.600s; fix: %s\n", facts->rank, facts->nranks, out->fallback_kind, why, fix_of(out->fallback_kind));
}

/* What a failed ask says of the root: only a refused connection means that
 * nothing listens there any more, and even that is not proof that its process
 * is gone (it answers askers for a bounded time after its verdict: rv_session.h). */
static const char *ask_failure(int e)
{
    return e == ECONNREFUSED
               ? ": nothing listens on the root's port any more (the root's process exited, or stopped answering "
                 "askers: it answers for NCCLSHIM_RENDEZVOUS_TIMEOUT_MS + 15 s after its verdict)"
           : e == ETIMEDOUT
               ? ": no answer within 5 s (the root's process is stopped or starved of CPU, or its host cannot be "
                 "reached from here)"
           : e == EHOSTUNREACH || e == ENETUNREACH
               ? ": the root's address cannot be reached from this host (routing, NCCL_SOCKET_IFNAME)"
               : "";
}

/* Asks the root the verdict after this rank's path broke (`why`): 0 with it, else fallen back alone. */
static int ask(const struct sockaddr *root, socklen_t rootlen, const struct uid_mark *mark, int rank,
               const char *why, struct rv_result *out)
{
    char reason[RV_REASON_LEN], err[300];
    snprintf(reason, sizeof(reason), "rank %d lost its path to the root (%.500s)", rank, why);
    if (rv_ask_root(root, rootlen, mark->token, reason, &out->v, err, sizeof(err)) == 0) {
        out->via_root = 1;
        out->asked = 1;
        return 0;
    }
    char failed[600];
    snprintf(failed, sizeof(failed), "%.300s)%s", err, ask_failure(errno));
    snprintf(out->fallback_kind, sizeof(out->fallback_kind), "lost");
    fall_back(out, "rendezvous: %.250s, and asking the root directly failed (%.400s: passthrough", why, failed);
    return -1;
}

/*
 * The root's answer to a rank in `state` (rv_states.c): WORD; ALONE with the
 * reason (nothing was handed on, or the root itself is frozen); ASK (this
 * rank's HELLO was handed on and its path broke: ask the root).  Once
 * `handed`, the deadline only makes this rank ask the root to give up:
 * through a host's leader (`leader`), on a connection of its own (the leader
 * may be the one that froze), else on the same connection, waiting RV_ASK_US
 * more for its word, which is the commit if it came first.
 */
static int await(int fd, const struct uid_mark *mark, enum rv_rank_state state, uint64_t deadline, int handed,
                 int leader, struct rv_msg *m, char *err, size_t errlen, struct rv_result *out)
{
    int rc = rv_recv_msg(fd, m, deadline, err, errlen);
    if (rc != 0 && handed && leader && errno == ETIMEDOUT) {
        snprintf(err, errlen, "no word from this host's leader within NCCLSHIM_RENDEZVOUS_TIMEOUT_MS + 2 s of "
                 "this rank's HELLO (the leader's process is stopped or starved of CPU)");
        return ASK;
    }
    if (rc != 0 && handed && leader) {
        char e[300];
        snprintf(e, sizeof(e), "%s", err);
        snprintf(err, errlen, "the connection to this host's leader broke (%.250s: its process died or gave up)", e);
        return ASK;
    }
    if (rc != 0 && errno == ETIMEDOUT && handed) {
        struct rv_msg *a = calloc(1, sizeof(*a));
        char e2[200], why[RV_REASON_LEN];
        if (a) {
            snprintf(why, sizeof(why), "a rank waited past its deadline (%s) for the root's answer: "
                     "NCCLSHIM_RENDEZVOUS_TIMEOUT_MS", err);
            rv_make_abort(a, mark->token, why);
            (void)rv_block_until(fd, shim_mono_us() + RV_ASK_US);
            if (rv_send_msg(fd, a, shim_mono_us() + RV_ASK_US, e2, sizeof(e2)) == 0)
                rc = rv_recv_msg(fd, m, shim_mono_us() + RV_ASK_US, err, errlen);
            free(a);
        }
        if (rc != 0 && errno == ETIMEDOUT) {
            /* This rank talks to the root itself: it is the root's process that froze. */
            snprintf(out->fallback_kind, sizeof(out->fallback_kind), "frozen");
            return ALONE;
        }
    }
    if (rc != 0)
        return handed && errno != ETIMEDOUT ? ASK : ALONE;
    if (!rv_token_equal(m->token, mark->token)) {
        snprintf(err, errlen, "the answer carries a wrong token (not the root's shim)");
        errno = EPROTO;
        return handed ? ASK : ALONE;
    }
    if (m->type == RV_ABORT) {
        /* This host's leader gave up: the root may have committed all the same. */
        snprintf(err, errlen, "this host's leader gave up: %.350s", m->u.reason);
        return handed ? ASK : ALONE;
    }
    /* A veto ends the ipc setup early: COMMIT may come instead of PEERS; and
     * a root that had every rank's word on socket commits without a DECISION
     * (rv_states.c, the rank's table). */
    if (rv_rank_step(state, m->type) != RANK_TAKE) {
        snprintf(err, errlen, "an unexpected message (type %d) %s", (int)m->type,
                 state == RANK_HELLO ? "after its HELLO" : "after its vote");
        errno = EPROTO;
        return handed ? ASK : ALONE;
    }
    return WORD;
}

/*
 * Above NCCLSHIM_RENDEZVOUS_FANIN ranks: the connection to this host's leader
 * (rv_leader.c); -1 if none could be joined (*use_leader is then 0: this
 * rank talks to the root directly); -2 at a limit (the root told, this rank
 * fallen back).
 */
static int join_leader(const struct sockaddr *root, socklen_t rootlen, const struct uid_mark *mark,
                       const struct rank_facts *facts, int timeout_ms, uint64_t connect_deadline,
                       struct rv_result *out, int *use_leader)
{
    char err[400];
    int limit = 0;
    int fd = rv_leader_join(root, rootlen, mark, facts->host_id, facts->rank, timeout_ms, connect_deadline, err,
                            sizeof(err), &limit);
    if (fd < 0 && limit) {
        /* Tell the root, so that every rank falls back now rather than at the timeout. */
        char why[RV_REASON_LEN];
        snprintf(why, sizeof(why), "rank %d: %s", facts->rank, err);
        rv_abort_root(root, rootlen, mark->token, why, shim_mono_us() + 1000000);
        snprintf(out->fallback_kind, sizeof(out->fallback_kind), "limit");
        fall_back(out, "rendezvous: %s: passthrough%s", err, "");
        return -2;
    }
    if (fd < 0) {
        shim_warn("rendezvous", "rank %d: %s; talking to the root at %s directly", facts->rank, err, out->root);
        *use_leader = 0;
    }
    return fd;
}

/* What a failed connect to the root says of the cause (docs/troubleshooting.md). */
static const char *connect_failure(int e)
{
    return e == ECONNREFUSED
               ? " (nothing listens there: the root's process exited, or its listener expired: "
                 "NCCLSHIM_RENDEZVOUS_IDLE_MS)"
           : e == ETIMEDOUT ? " (no answer: a firewall drops the root's port, or the root's host is down)"
           : e == EHOSTUNREACH || e == ENETUNREACH
               ? " (the address NCCL put in the unique ID is not reachable from this host: "
                 "NCCL_SOCKET_IFNAME)"
           : e == EMFILE ? " (this process is out of file descriptors: raise `ulimit -n`)"
               : "";
}

/* The root could not be reached (`err`, errno `e`): passthrough, with the
 * cause, and why an earlier connection had ended (`closed`) if it had. */
static void unreached(struct rv_result *out, const char *closed, const char *err, int e)
{
    const char *why = connect_failure(e);
    if (closed[0]) {
        char both[600];
        snprintf(both, sizeof(both), "rendezvous with %s: %.150s before answering; connecting again: %.300s",
                 out->root, closed, err);
        fall_back(out, "%s%s: passthrough", both, why);
    } else {
        fall_back(out, "rendezvous: %s%s: passthrough", err, why);
    }
}

/* Where this rank's rendezvous stands: what asking the root needs. */
struct rv_ctx {
    const struct sockaddr *root;
    socklen_t rootlen;
    const struct uid_mark *mark;
    const struct rank_facts *facts;
    const char *where;                  /* the root, and how this rank reaches it */
    int leader;                         /* through this host's leader */
};

/*
 * Round 2 (and 3): set the action up, vote, and carry out only what the root
 * commits; ipc first exchanges the exports (PEERS) and votes again.  Returns
 * the connection if the caller is to close it, -1 if it is kept (ipc's
 * monitor) or closed.
 */
static int vote_rounds(int fd, const struct rv_ctx *x, int timeout_ms, const struct rv_setup *setup,
                       struct rv_msg *m, struct rv_result *out)
{
    char err[400];
    struct rv_verdict decided = out->v;
    for (out->rounds = 2; out->rounds <= 3; out->rounds++) {
        char why[RV_REASON_LEN] = "";
        int ok;
        if (out->rounds == 2) {
            memset(&m->u, 0, sizeof(m->u));
            ok = setup->prepare(setup->ctx, decided.action, m->u.vote.blob, &m->u.vote.bloblen, why,
                                sizeof(why)) == 0;
        } else {
            ok = setup->connect(setup->ctx, &m->u.peers, why, sizeof(why)) == 0;
            memset(&m->u, 0, sizeof(m->u));
        }
        if (!ok)
            m->u.vote.bloblen = 0;
        m->type = RV_VOTE;
        memcpy(m->token, x->mark->token, RV_TOKEN_LEN);
        m->u.vote.ok = ok;
        snprintf(m->u.vote.reason, sizeof(m->u.vote.reason), "%s", why);
        uint64_t deadline = shim_mono_us() + (uint64_t)timeout_ms * 1000 + GRACE_US;
        enum rv_rank_state next =
            out->rounds == 2 && action_has((enum action)decided.action, ACT_PEERS) && ok ? RANK_VOTED_IPC : RANK_VOTED;
        rv_fault("vote");
        (void)rv_block_until(fd, deadline);
        /* A vote that is not sent whole leaves the root short of it: it
         * cannot commit, so asking it is safe (and it answers passthrough). */
        int r = rv_send_msg(fd, m, deadline, err, sizeof(err)) == 0
                    ? await(fd, x->mark, next, deadline, 1, x->leader, m, err, sizeof(err), out)
                    /* The root may have closed after its verdict (it gave up on this
                     * vote): the verdict is then waiting in the socket. */
                    : await(fd, x->mark, RANK_VOTED, shim_mono_us() + 100000, 0, 0, m, err, sizeof(err), out) == WORD
                        ? WORD
                        : ASK;
        if (r == ASK) {
            char how[600];
            snprintf(how, sizeof(how), "rendezvous with %s, after voting: %s", x->where, err);
            (void)ask(x->root, x->rootlen, x->mark, x->facts->rank, how, out);
            return fd;
        }
        if (r == ALONE) {
            fall_back(out, "rendezvous with %s, after voting: %s: passthrough", x->where, err);
            return fd;
        }
        if (m->type == RV_COMMIT) {
            out->v = m->u.verdict;
            out->v.final = 1;
            if (action_has((enum action)out->v.action, ACT_PEERS)) {
                /* Kept open for the communicator's life: the root closes it
                 * when any rank leaves (shim/ipc/ipc_monitor.c watches it). */
                (void)rv_nonblocking(fd);
                out->monitor_fd = fd;
                return -1;
            }
            return fd;
        }
    }
    fall_back(out, "rendezvous with %s: no commit after the last round%s: passthrough", out->root, "");
    return fd;
}

/*
 * Says this rank's HELLO on `fd` and waits for the root's first answer in *m
 * (await): WORD, ALONE or ASK, with the reason in err and errno.  *deadline
 * moves to the rank's own deadline counted from the HELLO.
 */
static int say_hello(int fd, const struct rv_ctx *x, int timeout_ms, uint64_t *deadline, struct rv_msg *m, char *err,
                     size_t errlen, struct rv_result *out)
{
    /* The answer is read by a thread asleep in recv(): woken with its
     * bytes, not by poll() and then read (on a host's thousands of ranks,
     * a cost that each rank pays after the decision).  If the socket
     * cannot be made so, the same calls wait in poll(). */
    (void)rv_block_until(fd, *deadline);
    m->type = RV_HELLO;
    memcpy(m->token, x->mark->token, RV_TOKEN_LEN);
    m->u.hello = *x->facts;
    rv_fault("hello");
    int sent = rv_send_msg(fd, m, *deadline, err, errlen) == 0;
    /* From the HELLO, not from this rank's init: a rank whose connect took
     * long (up to CONNECT_MAX_MS) may be the first, whose HELLO starts the
     * root's clock; asking it to give up before its own deadline would end
     * a rendezvous that was on time. */
    uint64_t heard_by = shim_mono_us() + (uint64_t)timeout_ms * 1000 + GRACE_US;
    if (heard_by > *deadline)
        *deadline = heard_by;
    /* Handed on: only the root's word counts now (await).  A rank
     * talking to the root itself whose connection closes connects again
     * (hello_round): its HELLO on a new connection is asking. */
    return sent ? await(fd, x->mark, RANK_HELLO, *deadline, 1, x->leader, m, err, errlen, out) : ALONE;
}

/*
 * The deadline of this rank's tries to reach the root, counted from its first
 * try, not from its init: a rank held up before it connects (descheduled on a
 * busy host, a collector's pause) is only late, and lateness is safe: the
 * root, still waiting, takes it; having decided, it answers with the verdict
 * (passthrough for all, when this rank was missing).  What needs a bound is a
 * root that never answers: a firewall that drops packets would hold every rank
 * for the whole timeout, and giving up earlier is safe, as the root, missing
 * this rank, decides passthrough for all.  *deadline (the wait for the root's
 * word) moves by as much, so that the HELLO still has its time to go up.
 */
static uint64_t connect_budget(int timeout_ms, uint64_t *deadline)
{
    uint64_t now = shim_mono_us();
    uint64_t word_by = now + (uint64_t)timeout_ms * 1000 + GRACE_US;
    if (word_by > *deadline)
        *deadline = word_by;
    return now + (uint64_t)(timeout_ms < CONNECT_MAX_MS ? timeout_ms : CONNECT_MAX_MS) * 1000;
}

/*
 * Round 1: connect (through this host's leader above NCCLSHIM_RENDEZVOUS_FANIN
 * ranks), HELLO, and the root's first answer in *m.  Returns the connection,
 * or -1 with *out fallen back (or answered by asking the root).
 */
static int hello_round(struct rv_ctx *x, char *where, size_t wherelen, int timeout_ms, uint64_t deadline,
                       struct rv_msg *m, struct rv_result *out)
{
    const struct uid_mark *mark = x->mark;
    const struct rank_facts *facts = x->facts;
    char err[400]; /* leaves room in a reason for the words around it */
    uint64_t connect_deadline = 0;
    char closed[400] = ""; /* why the first connection ended, when it is tried again */
    const char *via = "";
    int fd = -1;
    int use_leader = rv_fanin(facts->nranks);
    for (int attempt = 1;; attempt++) {
        rv_fault("connect");
        if (attempt == 1)
            connect_deadline = connect_budget(timeout_ms, &deadline);
        fd = use_leader ? join_leader(x->root, x->rootlen, mark, facts, timeout_ms, connect_deadline, out,
                                      &use_leader)
                        : -1;
        if (fd == -2)
            return -1;
        x->leader = fd >= 0;
        if (fd >= 0) {
            via = " (through this host's leader)";
            snprintf(where, wherelen, "%s%s", out->root, via);
        }
        if (fd < 0)
            fd = rv_connect(x->root, x->rootlen, connect_deadline, err, sizeof(err));
        if (fd < 0) {
            if (rv_is_limit(errno))
                snprintf(out->fallback_kind, sizeof(out->fallback_kind), "limit");
            unreached(out, closed, err, errno);
            return -1;
        }
        int r = say_hello(fd, x, timeout_ms, &deadline, m, err, sizeof(err), out);
        if (r == WORD)
            return fd;
        int e = errno;
        close(fd);
        fd = -1;
        /* Closed before any answer: the root may have taken this rank for a
         * stranger (it does not wait for one long).  If the root did hear it,
         * it forgot it with the connection, so a new one is a clean start;
         * if the root has decided, the new HELLO is answered with the verdict
         * (or, during a vote, ends it in passthrough for all). */
        if (!*via && (e == ECONNRESET || e == EPIPE) && attempt < HELLO_TRIES && shim_mono_us() < connect_deadline) {
            char msg[600];
            snprintf(msg, sizeof(msg), "rendezvous with %s: %s before answering; connecting again (attempt %d of %d)",
                     out->root, err, attempt + 1, HELLO_TRIES);
            shim_record_warning("rendezvous-retry", msg);
            if (!closed[0])
                snprintf(closed, sizeof(closed), "%s", err);
            continue;
        }
        if (r == ASK) {
            char how[600];
            snprintf(how, sizeof(how), "rendezvous with %s: %s", where, err);
            (void)ask(x->root, x->rootlen, mark, facts->rank, how, out);
            return -1;
        }
        fall_back(out, "rendezvous with %s: %s: passthrough", where, err);
        return -1;
    }
}

void rv_client_run(const ncclUniqueId *id, const struct uid_mark *mark, const struct rank_facts *facts,
                   int timeout_ms, const struct rv_setup *setup, struct rv_result *out)
{
    memset(out, 0, sizeof(*out));
    out->monitor_fd = -1;
    uint64_t t0 = shim_mono_us();
    uint64_t deadline = t0 + (uint64_t)timeout_ms * 1000 + GRACE_US;
    struct rv_msg *m = calloc(1, sizeof(*m));
    int fd = -1;
    if (!m) {
        snprintf(out->fallback_kind, sizeof(out->fallback_kind), "limit");
        fall_back(out, "out of memory for the rendezvous%s%s: passthrough", "", "");
        goto done;
    }
    out->rounds = 1;

    struct sockaddr_storage ss;
    socklen_t sl = uid_nccl_addr(id, &ss);
    if (!sl) {
        fall_back(out, "the marked unique ID holds no IPv4/IPv6 root address%s%s: passthrough", "", "");
        goto done;
    }
    ((struct sockaddr_in *)&ss)->sin_port = htons(mark->port); /* same offset in sockaddr_in6 */
    rv_addr_str((struct sockaddr *)&ss, out->root, sizeof(out->root));
    char where[sizeof(out->root) + 40]; /* the root, and how this rank reaches it */
    snprintf(where, sizeof(where), "%s", out->root);
    struct rv_ctx x = { (struct sockaddr *)&ss, sl, mark, facts, where, 0 };
    fd = hello_round(&x, where, sizeof(where), timeout_ms, deadline, m, out);
    if (fd < 0)
        goto done;
    out->v = m->u.verdict;
    out->via_root = 1;
    if (m->type == RV_COMMIT)
        out->v.final = 1; /* decided in one round: COMMIT does not carry `final` */
    if (out->v.final)
        goto done;

    fd = vote_rounds(fd, &x, timeout_ms, setup, m, out);

done:
    if (fd >= 0)
        close(fd);
    free(m);
    out->wait_us = shim_mono_us() - t0;
    out->decided_ts = shim_now();
    say_fallback(facts, out);
}
