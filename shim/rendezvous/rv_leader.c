/*
 * A host's leader in the two-level rendezvous (rv_leader.h).
 *
 * Joining: a rank connects to the abstract Unix socket of slot 0 of its
 * (ID, host); nobody there (ECONNREFUSED) means it binds the name itself and
 * starts the leader thread, then connects like any other rank.  The leader
 * writes one byte to each connection it accepts: 'A' (admitted: speak the
 * rendezvous protocol now) or 'F' (full: try the next slot).  Binding is the
 * election: exactly one process holds a name, and a leader whose process is
 * gone frees it with its descriptors.
 *
 * The leader thread owns every descriptor it opens; nothing else touches its
 * state, except the child of a fork, which closes what the leaders of its
 * parent held (g_leaders: the thread takes g_leaders_lock around opening and
 * closing the descriptors it keeps, so that the child sees each one either
 * open and listed, or closed).  Every wait is a poll() bounded by the
 * rendezvous timeout; whatever goes wrong, it tells the root (ABORT) and its
 * ranks (ABORT), and everyone passes through.
 */
#define _GNU_SOURCE
#include "rv_leader.h"
#include "rv_leader_name.h"

#include "clock.h"
#include "config.h"
#include "policy/decide.h"
#include "record.h"
#include "rv_fault.h"
#include "rv_io.h"
#include "rv_limits.h"
#include "rv_reader.h"
#include "rv_states.h"
#include "rv_watch.h"
#include "rv_session.h"
#include "worker.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A leader waits this long past the rendezvous timeout for the root's verdict
 * (as a rank does); then it asks the root to give up (ABORT) and waits this
 * long again for its word, which may be the commit: only the root decides. */
#define LEADER_GRACE_US 2000000ull

/* Connections a leader makes again when the one above closes before saying
 * anything (as a rank does, rv_client.c HELLO_TRIES): the root may have
 * taken it for a stranger before its first frame came in, and forgot what had
 * come on it. */
#define LEADER_REJOINS 3

int rv_fanin(int nranks)
{
    return nranks > shim_config()->rendezvous_fanin;
}

/* 1: a whole frame in *frame (the caller frees it); 0: nothing whole yet; -1: closed or bad (err). */
static int read_frame(int fd, struct rv_reader *r, uint8_t **frame, size_t *len, char *err, size_t errlen)
{
    for (;;) {
        switch (rv_read_step(fd, r, frame, len, err, errlen)) {
        case RV_READ_FRAME:
            return 1;
        case RV_READ_MORE:
            continue;
        case RV_READ_WAIT:
            return 0;
        default:
            return -1;
        }
    }
}

struct member {
    int fd;
    int rank;                           /* -1 until its HELLO; another host's leader: its first rank */
    uint32_t pid;
    struct rv_reader rd;
    int tcp;                            /* came to the TCP listener: another host's leader, or nobody */
    int is_leader;                      /* another host's leader (its HELLOs carry leader_pid) */
    char addr[RV_ADDR_LEN];             /* such a leader's: where it takes leaders */
};

struct leader {
    struct leader *next;                /* in g_leaders */
    int lfd, rfd;
    int tfd;                            /* TCP: other hosts' leaders the root sends here; -1: none */
    char myaddr[RV_ADDR_LEN];           /* tfd's address, said in every HELLO forwarded ("": none) */
    int kids, next_kid;                 /* other hosts' leaders taken; where the next search starts */
    int redirects;                      /* REDIRECTs followed (bounded: no loops) */
    int above;                          /* who rfd reaches: 0 the root, 1 a leader the root sent it to */
    int heard;                          /* a frame has come from above on rfd */
    int rejoins;                        /* connections made again after one closed before any word */
    uint8_t *sent;                      /* every HELLO forwarded, as sent: said again after a REDIRECT */
    size_t sentlen, sentcap;
    int paused;                         /* a limit was hit: accept no more */
    int cap, nm;
    struct member *m;
    uint8_t token[RV_TOKEN_LEN];
    struct sockaddr_storage root;       /* where rfd reaches (above: the root, or a leader it sent this one to) */
    socklen_t rootlen;
    char rootstr[80];
    int timeout_ms;
    uint64_t start_us;
    uint32_t pid;
    enum rv_leader_state state;         /* rv_states.h: GATHER until it connects above */
    int slot;                           /* of its name */
    int turned_away;                    /* ranks answered FULL */
    struct rv_reader rrd;
    struct rv_msg *msg;                 /* scratch */
    uint8_t *frame;                     /* scratch, RV_MAX_FRAME */
};

/* The leaders running in this process: what a fork's child must close. */
static pthread_mutex_t g_leaders_lock = PTHREAD_MUTEX_INITIALIZER;
static struct leader *g_leaders;

/* Who rfd reaches, for messages: a parent leader is not the root. */
static const char *above(const struct leader *L)
{
    return L->above ? "its parent leader (another host's, where the root sent it)" : "the root";
}

static int connect_root(struct leader *L);

static void close_member(struct member *mb)
{
    pthread_mutex_lock(&g_leaders_lock);
    if (mb->fd >= 0)
        close(mb->fd);
    mb->fd = -1;
    pthread_mutex_unlock(&g_leaders_lock);
    rv_reader_reset(&mb->rd);
}

/* Encodes `m` into the leader's scratch frame: its length, 0 if it does not encode. */
static size_t encode(struct leader *L, const struct rv_msg *m)
{
    return rv_encode(m, L->frame, RV_MAX_FRAME);
}

/* Tells the root (once) that this host's ranks cannot go on: it falls back for all. */
static void abort_root(struct leader *L, const char *why)
{
    if (L->state != LEADER_UP)
        return; /* nothing went up (GATHER), or an ABORT already did (ASKED), or over */
    L->state = LEADER_ASKED;
    rv_make_abort(L->msg, L->token, why);
    size_t n = encode(L, L->msg);
    if (n)
        (void)rv_send_bytes(L->rfd, L->frame, n, shim_mono_us() + RV_SEND_US);
}

/* Sends the encoded frame to every member that has said HELLO: those of
 * other processes (own = 0), or this process's own ranks (own = 1), which go
 * last: once its own rank has the answer, this process may exit, and this
 * thread with it.  Returns the number of members it could not reach (they
 * are dropped). */
static int relay_to(struct leader *L, size_t n, int own)
{
    int failed = 0;
    uint64_t deadline = shim_mono_us() + RV_SEND_US;
    for (int i = 0; i < L->nm; i++) {
        struct member *mb = &L->m[i];
        if (mb->fd < 0 || mb->rank < 0 || (mb->pid == L->pid) != own)
            continue;
        if (rv_send_bytes(mb->fd, L->frame, n, deadline) != 0) {
            failed++;
            close_member(mb);
        }
    }
    return failed;
}

static int relay(struct leader *L, size_t n)
{
    int failed = relay_to(L, n, 0);
    return failed + relay_to(L, n, 1);
}

/*
 * After the final answer has gone to every rank that said HELLO: the ranks
 * admitted that have not said it yet, and those still at the door, get it
 * too.  The descriptors of the others are given back first: a leader at its
 * limit could not accept the ones at the door.
 */
static void answer_the_rest(struct leader *L, const struct rv_msg *m)
{
    int *fds = malloc(sizeof(int) * (size_t)(L->nm ? L->nm : 1)), k = 0;
    for (int i = 0; i < L->nm; i++) {
        struct member *mb = &L->m[i];
        if (mb->rank >= 0 && mb->pid == L->pid)
            continue; /* this process's own ranks: answered last, by the caller */
        if (fds && mb->fd >= 0 && mb->rank < 0 && mb->rd.have == 0) {
            pthread_mutex_lock(&g_leaders_lock);
            fds[k++] = mb->fd; /* rv_answer_waiting closes it */
            mb->fd = -1;
            pthread_mutex_unlock(&g_leaders_lock);
        }
        close_member(mb);
    }
    (void)rv_answer_waiting(L->lfd, fds, k, L->token, m, RV_LEADER_MAX_RANKS, 1000);
    free(fds);
}

/* Gives up: the root and every rank of this leader hear why, then pass through. */
static void give_up(struct leader *L, const char *why)
{
    shim_warn("rendezvous", "%s", why);
    abort_root(L, why);
    struct rv_msg *m = L->msg;
    rv_make_abort(m, L->token, why);
    size_t n = encode(L, m);
    if (n) {
        relay_to(L, n, 0);
        answer_the_rest(L, m);
        relay_to(L, n, 1);
    }
    L->state = LEADER_OVER;
}

/* Keeps the HELLO just encoded (n bytes of L->frame), to say it again after a REDIRECT: 0, or -1 (no memory). */
static int keep_sent(struct leader *L, size_t n)
{
    if (L->sentlen + n > L->sentcap) {
        size_t cap = L->sentcap ? L->sentcap * 2 : 65536;
        while (cap < L->sentlen + n)
            cap *= 2;
        uint8_t *p = realloc(L->sent, cap);
        if (!p)
            return -1;
        L->sent = p;
        L->sentcap = cap;
    }
    memcpy(L->sent + L->sentlen, L->frame, n);
    L->sentlen += n;
    return 0;
}

/*
 * Another host's leader when this one holds RV_LEADER_KIDS of them: sent on to
 * one of those (round robin), as the root does (rv_decide.c): the tree grows
 * a level where it must.  1 if sent (the member is closed).
 */
static int redirect_kid(struct leader *L, struct member *mb)
{
    if (L->kids < rv_test_fanout(RV_LEADER_KIDS))
        return 0;
    for (int k = 0; k < L->nm; k++) {
        int i = (L->next_kid + k) % L->nm;
        struct member *p = &L->m[i];
        if (p == mb || p->fd < 0 || !p->is_leader || !p->addr[0])
            continue;
        struct rv_msg *m = calloc(1, sizeof(*m));
        if (!m)
            return 0;
        rv_make_redirect(m, L->token, p->addr);
        size_t n = rv_encode(m, L->frame, RV_MAX_FRAME);
        free(m);
        if (!n || rv_send_bytes(mb->fd, L->frame, n, shim_mono_us() + RV_SEND_US) != 0)
            return 0;
        L->next_kid = (i + 1) % L->nm;
        close_member(mb);
        return 1;
    }
    return 0;
}

/* A member's message: 1 once the rendezvous is over for this leader (it gave up). */
static int on_member_frame(struct leader *L, struct member *mb, const uint8_t *frame, size_t len)
{
    char err[256] = "wrong token", why[RV_REASON_LEN];
    struct rv_msg *m = L->msg;
    if (rv_decode(frame, len, m, err, sizeof(err)) != 0 || !rv_token_equal(m->token, L->token)) {
        /* Not a rank of this ID: it never spoke for a rank, so it is dropped silently. */
        if (mb->rank < 0) {
            close_member(mb);
            return 0;
        }
        snprintf(why, sizeof(why), "rank %d sent its host's leader a bad message (%s): passthrough for all",
                 mb->rank, err);
        close_member(mb);
        abort_root(L, why);
        return 0;
    }
    if (m->type == RV_HELLO && mb->rank < 0 && mb->tcp && !m->leader_pid) {
        close_member(mb); /* the TCP listener takes only other hosts' leaders */
        return 0;
    }
    if (m->type == RV_HELLO && mb->rank < 0 && m->leader_pid && redirect_kid(L, mb))
        return 0;
    enum rv_member_do what = rv_member_step(L->state, m->type, mb->rank >= 0, mb->is_leader);
    if (what == MEMBER_HELLO) {
        rv_fault("leader-hello");
        if (mb->rank < 0) {
            mb->rank = m->u.hello.rank;
            mb->pid = m->u.hello.pid;
            mb->is_leader = m->leader_pid != 0;
            L->kids += mb->is_leader;
            snprintf(mb->addr, sizeof(mb->addr), "%s", m->leader_addr);
        }
        /* Something to forward: now the root is reached, and its first frame
         * follows the connect at once. */
        if (connect_root(L) != 0)
            return 1;
        m->leader_pid = L->pid;
        snprintf(m->leader_addr, sizeof(m->leader_addr), "%s", L->myaddr);
    } else if (what == MEMBER_VOTE) {
        if (!mb->is_leader)
            m->u.vote.rank = mb->rank; /* another leader's votes name their ranks */
    } else if (what == MEMBER_DROP) {
        /* One that never said HELLO counts for no rank: dropped silently. */
        int rank = mb->rank;
        close_member(mb);
        if (rank >= 0) {
            snprintf(why, sizeof(why), "rank %d sent its host's leader an unexpected message (type %d): "
                     "passthrough for all", rank, (int)m->type);
            abort_root(L, why);
        }
        return 0;
    }
    size_t n = encode(L, m);
    if (n && m->type == RV_HELLO && keep_sent(L, n) != 0)
        n = 0;
    if (L->rfd >= 0 && (!n || rv_send_bytes(L->rfd, L->frame, n, shim_mono_us() + RV_SEND_US) != 0)) {
        snprintf(why, sizeof(why), "the host's leader (pid %u) could not forward rank %d's message to %s at "
                 "%s: %s", (unsigned)L->pid, mb->rank, above(L), L->rootstr,
                 n ? strerror(errno) : "it does not encode");
        abort_root(L, why);
    }
    return 0;
}

/*
 * Connects to `to` in place of rfd and says every HELLO forwarded so far
 * again: 0, or -1 with the reason in err (rfd unchanged).
 */
static int reconnect(struct leader *L, const struct sockaddr_storage *to, socklen_t tolen, char *err, size_t errlen)
{
    int fd = rv_connect((const struct sockaddr *)to, tolen, shim_mono_us() + 5000000, err, errlen);
    if (fd < 0)
        return -1;
    if (L->sentlen && rv_send_bytes(fd, L->sent, L->sentlen, shim_mono_us() + 5000000) != 0) {
        snprintf(err, errlen, "saying its HELLOs again: %s", strerror(errno));
        close(fd);
        return -1;
    }
    pthread_mutex_lock(&g_leaders_lock);
    if (L->rfd >= 0)
        close(L->rfd);
    L->rfd = fd;
    pthread_mutex_unlock(&g_leaders_lock);
    rv_reader_reset(&L->rrd);
    L->heard = 0;
    if (to != &L->root) {
        memcpy(&L->root, to, tolen);
        L->rootlen = tolen;
    }
    return 0;
}

/*
 * The root (or the leader it was sent to) holds as many leaders as it takes
 * and names another to join: this leader connects there and says every HELLO
 * it forwarded again; nothing had counted yet.  0, or 1 having given up.
 */
static int follow_redirect(struct leader *L, const char *to)
{
    char err[300], why[RV_REASON_LEN];
    struct sockaddr_storage ss;
    socklen_t sl = rv_addr_parse(to, &ss);
    if (sl && ++L->redirects <= 8 && reconnect(L, &ss, sl, err, sizeof(err)) == 0) {
        snprintf(L->rootstr, sizeof(L->rootstr), "%s", to);
        L->above = 1;
        return 0;
    }
    if (!sl || L->redirects > 8)
        snprintf(err, sizeof(err), "%s", sl ? "sent on more than 8 times" : "not an address");
    snprintf(why, sizeof(why), "the host's leader (pid %u) was sent to another host's leader at %s and could not "
             "join it (%s): passthrough", (unsigned)L->pid, to, err);
    give_up(L, why);
    return 1;
}

/*
 * The connection above closed (`how`): if no word had come on it, connect
 * again, up to LEADER_REJOINS times.  0 having done so, or 1 having given up
 * (its ranks ask the root: rv_client.c).
 */
static int rejoin(struct leader *L, const char *how)
{
    char err[300], why[RV_REASON_LEN];
    if (!L->heard && L->rejoins < LEADER_REJOINS) {
        L->rejoins++;
        shim_warn("rendezvous", "the host's leader (pid %u): %s at %s closed its connection before any answer "
                  "(%.200s); connecting again (attempt %d of %d)", (unsigned)L->pid, above(L), L->rootstr, how,
                  L->rejoins + 1, LEADER_REJOINS + 1);
        if (reconnect(L, &L->root, L->rootlen, err, sizeof(err)) == 0)
            return 0;
        snprintf(why, sizeof(why), "the host's leader (pid %u) lost %s at %s (%.200s) and could not connect again "
                 "(%.200s): passthrough", (unsigned)L->pid, above(L), L->rootstr, how, err);
    } else {
        snprintf(why, sizeof(why), "the host's leader (pid %u) lost %s at %s (%.200s) before its final answer%s: "
                 "passthrough", (unsigned)L->pid, above(L), L->rootstr, how,
                 L->heard ? "" : " (it had dropped this leader's connection every time)");
    }
    give_up(L, why);
    return 1;
}

/* The root's message: 1 once the rendezvous is over for this leader. */
static int on_root_frame(struct leader *L, const uint8_t *frame, size_t len)
{
    char err[256], why[RV_REASON_LEN];
    struct rv_msg *m = L->msg;
    const char *bad = rv_decode(frame, len, m, err, sizeof(err)) != 0 ? err
                      : !rv_token_equal(m->token, L->token)          ? "wrong token"
                                                                     : NULL;
    int final = !bad && m->type == RV_DECISION && m->u.verdict.final;
    enum rv_leader_do what = bad ? LEADER_BAD : rv_leader_step(L->state, m->type, final);
    if (!bad && what == LEADER_BAD)
        bad = "an unexpected message type";
    if (what == LEADER_FOLLOW)
        return follow_redirect(L, m->u.to);
    if (bad) {
        snprintf(why, sizeof(why), "the host's leader (pid %u) got a bad answer from %s at %s (%s): "
                 "passthrough", (unsigned)L->pid, above(L), L->rootstr, bad);
        give_up(L, why);
        return 1;
    }
    L->heard = 1;
    final = what == LEADER_FINAL;
    /* The root's bytes as they came: every member checks the same token. */
    memcpy(L->frame, frame, len);
    if (final) {
        L->state = LEADER_OVER;
        rv_fault("leader-commit");
        /* This process's own ranks last, after the ranks still at the door:
         * once they have it, this process may exit. */
        int nranks = 0;
        for (int i = 0; i < L->nm; i++)
            nranks += L->m[i].fd >= 0 && L->m[i].rank >= 0;
        relay_to(L, len, 0);
        answer_the_rest(L, m);
        double done = shim_now();
        /* Written before this process's own ranks have it (then it may exit). */
        struct jw w;
        jw_begin(&w, "rendezvous_leader");
        jw_str(&w, "root", L->rootstr);
        jw_hex64(&w, "decision_id", m->u.verdict.decision_id);
        jw_str(&w, "action", action_name((enum action)m->u.verdict.action));
        jw_int(&w, "slot", L->slot);
        jw_int(&w, "ranks", nranks);
        jw_int(&w, "turned_away", L->turned_away);
        jw_u64(&w, "lifetime_us", shim_mono_us() - L->start_us);
        /* When its ranks of other processes had the final verdict in their sockets. */
        jw_double(&w, "relayed_ts", done, 6);
        jw_emit(&w);
        relay_to(L, len, 1);
        return 1;
    }
    int failed = relay(L, len);
    if (failed) {
        snprintf(why, sizeof(why), "the host's leader (pid %u) could not hand the root's %s to %d of its ranks: "
                 "passthrough for all", (unsigned)L->pid, m->type == RV_PEERS ? "PEERS" : "DECISION", failed);
        abort_root(L, why);
    }
    return 0;
}

/* The ranks waiting to join: admitted while there is room. */
static void accept_members(struct leader *L)
{
    while (!L->paused) {
        pthread_mutex_lock(&g_leaders_lock);
        int fd = accept4(L->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), admitted = 0;
        if (fd >= 0 && L->nm < L->cap) {
            L->m[L->nm].fd = fd; /* listed before a fork can see it */
            L->m[L->nm].rd = (struct rv_reader){ 0, 0, { 0 }, NULL };
            L->m[L->nm].rank = -1;
            L->m[L->nm].pid = 0;
            L->nm++;
            admitted = 1;
        }
        pthread_mutex_unlock(&g_leaders_lock);
        if (fd < 0) {
            int e = errno;
            if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED)
                return;
            char why[RV_REASON_LEN], who[64];
            snprintf(who, sizeof(who), "a host's leader (pid %u)", (unsigned)L->pid);
            if (rv_is_limit(e))
                rv_limit_reason(e, who, "accepting its host's ranks", why, sizeof(why));
            else
                snprintf(why, sizeof(why), "%s cannot accept its host's ranks: accept: %s", who, strerror(e));
            /* The ranks left waiting are answered once the root has fallen back. */
            L->paused = 1;
            shim_warn("rendezvous", "%s: passthrough for all", why);
            abort_root(L, why);
            return;
        }
        struct ucred cr;
        socklen_t sl = sizeof(cr);
        char b = admitted ? RV_LEADER_ADMIT : RV_LEADER_FULL;
        L->turned_away += !admitted;
        /* The abstract namespace has no permissions: only this user's processes may join. */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &sl) != 0 || cr.uid != geteuid() ||
            send(fd, &b, 1, MSG_NOSIGNAL) != 1 || b == RV_LEADER_FULL) {
            if (admitted)
                close_member(&L->m[L->nm - 1]);
            else
                close(fd);
        }
    }
}

/* Other hosts' leaders the root (or a leader) sends here: admitted while there
 * is room; each one's first frame must carry the token (on_member_frame). */
static void accept_kids(struct leader *L)
{
    while (!L->paused) {
        pthread_mutex_lock(&g_leaders_lock);
        int fd = accept4(L->tfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), admitted = 0;
        if (fd >= 0 && L->nm < L->cap) {
            L->m[L->nm] = (struct member){ .fd = fd, .rank = -1, .tcp = 1 };
            L->nm++;
            admitted = 1;
        }
        pthread_mutex_unlock(&g_leaders_lock);
        if (fd < 0)
            return; /* nothing pending, or a limit: the ones waiting time out and their ranks ask the root */
        if (!admitted)
            close(fd);
    }
}

/* The TCP listener other hosts' leaders may be sent to, on the address this
 * leader reaches the root from.  Best effort: without it (L->myaddr empty)
 * nobody sends a leader here. */
static void open_tcp(struct leader *L)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(L->rfd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    else
        return;
    pthread_mutex_lock(&g_leaders_lock);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 4096) != 0 ||
                    getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)) {
        close(fd);
        fd = -1;
    }
    L->tfd = fd;
    pthread_mutex_unlock(&g_leaders_lock);
    if (fd >= 0)
        rv_addr_str((struct sockaddr *)&ss, L->myaddr, sizeof(L->myaddr));
}

/* Connects to the root: 0, or -1 having given up (its ranks told why). */
static int connect_root(struct leader *L)
{
    if (L->rfd >= 0)
        return 0;
    char err[400], why[RV_REASON_LEN];
    /* From the first HELLO to forward (the leader admits its ranks before
     * it connects, so they do not wait on this), and well before that rank's
     * own deadline (its HELLO + the timeout + 2 s): it then hears why. */
    uint64_t connect_deadline =
        shim_mono_us() + (uint64_t)(L->timeout_ms < 10000 ? L->timeout_ms : 10000) * 750;
    int rfd = rv_connect((struct sockaddr *)&L->root, L->rootlen, connect_deadline, err, sizeof(err));
    pthread_mutex_lock(&g_leaders_lock);
    L->rfd = rfd;
    pthread_mutex_unlock(&g_leaders_lock);
    if (L->rfd >= 0) {
        L->state = LEADER_UP;
        open_tcp(L);
        return 0;
    }
    int e = errno;
    if (rv_is_limit(e))
        rv_limit_reason(e, "a host's leader", "connecting to the root", why, sizeof(why));
    else
        snprintf(why, sizeof(why), "the host's leader (pid %u): %s", (unsigned)L->pid, err);
    give_up(L, why);
    return -1;
}

/* What to wait on, tagged: the connection above (ABOVE: none in GATHER),
 * the listeners while they admit (RANKS, KIDS), each member still connected
 * (its index); until `deadline`. */
enum { ABOVE = -2, RANKS = -1, KIDS = -3 };
static void watch_set(const struct leader *L, struct rv_watch *w, uint64_t deadline)
{
    rv_watch_begin(w, (size_t)L->cap + 3);
    rv_watch_until(w, deadline);
    rv_watch_add(w, L->rfd, NULL, ABOVE);
    if (!L->paused)
        rv_watch_add(w, L->lfd, NULL, RANKS);
    if (!L->paused && L->tfd >= 0)
        rv_watch_add(w, L->tfd, NULL, KIDS);
    for (int i = 0; i < L->nm; i++)
        if (L->m[i].fd >= 0)
            rv_watch_add(w, L->m[i].fd, NULL, i);
}

/* The frames that have come in from the root (who ABOVE) or member `who` (a
 * bounded number, so that the others get their turn), or its leaving: the
 * root's ends the leader's work (returns 1); a member's, once it has a rank,
 * makes the root fall back for all. */
static int read_ready(struct leader *L, int who)
{
    char err[400], why[RV_REASON_LEN];
    struct rv_reader *rd = who == ABOVE ? &L->rrd : &L->m[who].rd;
    int fd = who == ABOVE ? L->rfd : L->m[who].fd;
    for (int loops = 0; fd >= 0 && loops < 64; loops++) {
        uint8_t *frame = NULL;
        size_t len = 0;
        int r = read_frame(fd, rd, &frame, &len, err, sizeof(err));
        if (r == 0)
            break;
        if (who == ABOVE) {
            if (r < 0) {
                if (rejoin(L, err))
                    return 1;
                fd = L->rfd;
                rd = &L->rrd;
                continue;
            }
            int done = on_root_frame(L, frame, len);
            free(frame);
            if (done)
                return 1;
            fd = L->rfd; /* a REDIRECT replaced it */
            continue;
        }
        struct member *mb = &L->m[who];
        if (r < 0) {
            int rank = mb->rank;
            uint32_t pid = mb->pid;
            close_member(mb);
            if (rank >= 0) {
                snprintf(why, sizeof(why), "rank %d (pid %u) left its host's leader before the final "
                         "answer (%s: its process exited or gave up waiting): passthrough for all", rank,
                         (unsigned)pid, err);
                abort_root(L, why);
            }
            break;
        }
        int over = on_member_frame(L, mb, frame, len);
        free(frame);
        if (over)
            return 1;
        fd = mb->fd;
    }
    return 0;
}

/* The leader's own descriptors (lfd, rfd, tfd; its members' are theirs). */
static void close_own(struct leader *L)
{
    if (L->lfd >= 0)
        close(L->lfd);
    if (L->rfd >= 0)
        close(L->rfd);
    if (L->tfd >= 0)
        close(L->tfd);
    L->lfd = L->rfd = L->tfd = -1;
}

/* The leader's end: its descriptors closed, off the list a fork's child
 * reads, its memory given back. */
static void leader_free(struct leader *L)
{
    for (int i = 0; i < L->nm; i++)
        close_member(&L->m[i]);
    pthread_mutex_lock(&g_leaders_lock);
    close_own(L);
    for (struct leader **pp = &g_leaders; *pp; pp = &(*pp)->next)
        if (*pp == L) {
            *pp = L->next;
            break;
        }
    pthread_mutex_unlock(&g_leaders_lock);
    rv_reader_reset(&L->rrd);
    free(L->sent);
    free(L->m);
    free(L->msg);
    free(L->frame);
    free(L);
}

static void *lead(void *arg)
{
    struct leader *L = arg;
    char why[RV_REASON_LEN];
    uint64_t deadline = L->start_us + (uint64_t)L->timeout_ms * 1000 + LEADER_GRACE_US;
    struct rv_watch w = { NULL, NULL, 0, 0, UINT64_MAX };
    rv_watch_begin(&w, (size_t)L->cap + 3);
    if (w.cap < (size_t)L->cap + 3) {
        rv_limit_reason(ENOMEM, "a host's leader", "starting", why, sizeof(why));
        give_up(L, why);
        goto out;
    }
    /* The root is reached only when there is something to forward
     * (connect_root, from on_member_frame): a connection that shows nothing
     * would be a stranger to it (rv_session.h, "Admission"). */
    for (;;) {
        uint64_t now = shim_mono_us();
        if (now >= deadline && L->state == LEADER_GATHER) {
            /* Nothing went up: nobody's HELLO depends on the root's word. */
            snprintf(why, sizeof(why), "the host's leader (pid %u) had no HELLO to forward within %d ms "
                     "(NCCLSHIM_RENDEZVOUS_TIMEOUT_MS) + 2 s", (unsigned)L->pid, L->timeout_ms);
            give_up(L, why);
            goto out;
        } else if (now >= deadline && L->state == LEADER_UP) {
            /* A request, not a decision: the root's COMMIT may be on its way. */
            snprintf(why, sizeof(why), "the host's leader (pid %u) had no final answer from %s at %s within "
                     "%d ms (NCCLSHIM_RENDEZVOUS_TIMEOUT_MS) + 2 s: passthrough for all", (unsigned)L->pid,
                     above(L), L->rootstr, L->timeout_ms);
            abort_root(L, why);
            deadline = now + LEADER_GRACE_US;
        } else if (now >= deadline) {
            /* No answer: its ranks ask the root themselves (rv_ask.c). */
            snprintf(why, sizeof(why), "the host's leader (pid %u) had no answer from %s at %s to its ABORT "
                     "within 2 s (that process is stopped or starved of CPU)", (unsigned)L->pid, above(L),
                     L->rootstr);
            give_up(L, why);
            goto out;
        }
        watch_set(L, &w, deadline);
        int n = rv_watch_wait(&w, 60000);
        if (n < 0 && errno != EINTR) {
            snprintf(why, sizeof(why), "the host's leader (pid %u): poll: %s", (unsigned)L->pid, strerror(errno));
            give_up(L, why);
            goto out;
        }
        for (size_t j = 0; j < w.n && n > 0; j++) {
            if (!w.pfd[j].revents)
                continue;
            if (w.tag[j].what == RANKS)
                accept_members(L);
            else if (w.tag[j].what == KIDS)
                accept_kids(L);
            else if (read_ready(L, w.tag[j].what))
                goto out;
        }
    }
out:
    leader_free(L);
    rv_watch_free(&w);
    return NULL;
}

/* Starts a leader on listener `lfd`: 0, or -1 with errno (nothing left open but lfd). */
static int start_leader(int lfd, const struct sockaddr *root, socklen_t rootlen, const struct uid_mark *mark,
                        int timeout_ms, int slot)
{
    struct leader *L = calloc(1, sizeof(*L));
    int rc = ENOMEM;
    if (!L || !(L->msg = malloc(sizeof(*L->msg))) || !(L->frame = malloc(RV_MAX_FRAME)))
        goto fail;
    L->cap = rv_leader_cap();
    if (!(L->m = calloc((size_t)L->cap, sizeof(*L->m))))
        goto fail;
    L->lfd = lfd;
    L->rfd = -1;
    L->tfd = -1;
    L->slot = slot;
    memcpy(L->token, mark->token, RV_TOKEN_LEN);
    memcpy(&L->root, root, rootlen);
    L->rootlen = rootlen;
    rv_addr_str(root, L->rootstr, sizeof(L->rootstr));
    L->timeout_ms = timeout_ms;
    L->start_us = shim_mono_us();
    L->pid = (uint32_t)getpid();

    pthread_mutex_lock(&g_leaders_lock);
    L->next = g_leaders;
    g_leaders = L;
    pthread_mutex_unlock(&g_leaders_lock);
    rc = shim_thread_start(lead, L);
    if (rc == 0)
        return 0;
    pthread_mutex_lock(&g_leaders_lock);
    g_leaders = L->next; /* still first: only its thread would have unlisted it */
    pthread_mutex_unlock(&g_leaders_lock);
fail:
    if (L) {
        free(L->m);
        free(L->msg);
        free(L->frame);
    }
    free(L);
    errno = rc;
    return -1;
}

/* Waits for the leader's admit byte: RV_LEADER_ADMIT, RV_LEADER_FULL, 0 (it closed), or -1 (timeout or error). */
static int admit_byte(int fd, uint64_t deadline_us)
{
    for (;;) {
        char b;
        ssize_t n = recv(fd, &b, 1, 0);
        if (n == 1)
            return b;
        if (n == 0)
            return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return errno == ECONNRESET ? 0 : -1;
        uint64_t now = shim_mono_us();
        if (now >= deadline_us)
            return -1;
        struct pollfd p = { fd, POLLIN, 0 };
        (void)poll(&p, 1, (int)((deadline_us - now + 999) / 1000));
    }
}

/*
 * Binds the name of `slot` and starts its leader in this process: 0 (started,
 * or another rank bound it first: either way the caller joins it now), or -1
 * with the reason in err (*limit: rv_limit_or_error).
 */
static int lead_slot(const struct sockaddr_un *sun, socklen_t sl, const struct sockaddr *root, socklen_t rootlen,
                     const struct uid_mark *mark, int timeout_ms, int slot, char *err, size_t errlen, int *limit)
{
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0) {
        *limit = rv_limit_or_error(errno, "becoming its host's leader", "socket(AF_UNIX)", err, errlen);
        return -1;
    }
    if (bind(lfd, (const struct sockaddr *)sun, sl) != 0) {
        int e = errno;
        close(lfd);
        if (e == EADDRINUSE)
            return 0; /* another rank won: join it */
        snprintf(err, errlen, "bind the leader's socket: %s", strerror(e));
        return -1;
    }
    if (listen(lfd, SOMAXCONN) != 0 || start_leader(lfd, root, rootlen, mark, timeout_ms, slot) != 0) {
        int e = errno;
        close(lfd);
        *limit = rv_limit_or_error(e, "starting its host's leader", "start the host's leader", err, errlen);
        return -1;
    }
    return 0;
}

int rv_leader_join(const struct sockaddr *root, socklen_t rootlen, const struct uid_mark *mark,
                   const char *host_id, int facts_rank, int timeout_ms, uint64_t deadline_us, char *err,
                   size_t errlen, int *limit)
{
    *limit = 0;
    int slot = 0, rank = facts_rank;
    for (int attempt = 0;; attempt++) {
        if (slot >= RV_LEADER_SLOTS || (attempt > 0 && shim_mono_us() >= deadline_us)) {
            /* Not a setup where leaders cannot work (those fail at once), but a
             * host too busy to admit its ranks: every rank had better know now.
             * A first try is always made: joining a leader that is there costs
             * one connect, and a rank that comes late has lost no time to it. */
            *limit = 1;
            snprintf(err, errlen, "no leader of this host admitted this rank in time (%d tries, last slot %d): the "
                     "host is overloaded, or raise NCCLSHIM_RENDEZVOUS_TIMEOUT_MS", attempt, slot);
            return -1;
        }
        if (attempt > 0 && attempt % 8 == 0)
            usleep(1000); /* a leader between bind() and listen(), or a full backlog: let it run */
        struct sockaddr_un sun;
        socklen_t sl = rv_leader_name(&sun, mark->token, host_id, slot);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            *limit = rv_limit_or_error(errno, "reaching its host's leader", "socket(AF_UNIX)", err, errlen);
            return -1;
        }
        if (connect(fd, (struct sockaddr *)&sun, sl) == 0) {
            struct ucred cr;
            socklen_t cl = sizeof(cr);
            if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || cr.uid != geteuid()) {
                close(fd);
                snprintf(err, errlen, "the leader's socket of this host is held by another user (uid %u)",
                         (unsigned)cr.uid);
                return -1;
            }
            int b = admit_byte(fd, deadline_us);
            if (b == RV_LEADER_ADMIT)
                return fd;
            close(fd);
            if (b == RV_LEADER_FULL)
                slot = rv_leader_next_slot(slot, rank);
            else if (b < 0) {
                *limit = 1;
                snprintf(err, errlen, "no word from this host's leader (slot %d) in time: the host is overloaded, or "
                         "raise NCCLSHIM_RENDEZVOUS_TIMEOUT_MS", slot);
                return -1;
            }
            continue; /* 0: that leader has just finished: the name is free again */
        }
        int e = errno;
        close(fd);
        if (e == EAGAIN || e == EINTR)
            continue; /* its backlog is full: it is accepting */
        if (e != ECONNREFUSED && e != ENOENT) {
            *limit = rv_limit_or_error(e, "reaching its host's leader", "connect to this host's leader", err, errlen);
            return -1;
        }
        /* Nobody leads this slot: lead it, then join it like any other rank. */
        if (lead_slot(&sun, sl, root, rootlen, mark, timeout_ms, slot, err, errlen, limit) != 0)
            return -1;
    }
}

void rv_leader_lock_for_fork(void)
{
    pthread_mutex_lock(&g_leaders_lock);
}

void rv_leader_unlock_after_fork(void)
{
    pthread_mutex_unlock(&g_leaders_lock);
}

void rv_leader_after_fork_child(void)
{
    /* The leaders' threads are not in the child: what they held would keep
     * their names bound and their ranks' connections open. */
    while (g_leaders) {
        struct leader *L = g_leaders;
        g_leaders = L->next;
        for (int i = 0; i < L->nm; i++)
            if (L->m[i].fd >= 0)
                close(L->m[i].fd);
        close_own(L);
        /* The rest (buffers) is left: the thread may have been using it. */
    }
    pthread_mutex_init(&g_leaders_lock, NULL);
}
