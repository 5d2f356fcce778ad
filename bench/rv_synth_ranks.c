/*
 * Synthetic ranks for the rendezvous at scale (bench/rv_scale.py --synthetic-grid).
 *
 * A machine whose pid_max is 32768 cannot hold 32,768 rank threads and their
 * processes.  So each simulated host keeps one real rank (a many_ranks
 * process with the shim preloaded, which becomes the host's real leader) and
 * this one single-threaded process speaks for the host's other ranks: for each
 * it joins the host's leader exactly as a rank's shim does (the leader's
 * socket name, admit byte and next slot from shim/rendezvous/rv_leader_name.c),
 * says a HELLO as big as a real rank's (the same texts a many_ranks rank
 * says, encoded by the shim's own rv_wire.c) and reads the answer as a rank
 * does: COMMIT, or DECISION and then its vote.  The root and the leaders are
 * then the real code, holding what a real job would make them hold.
 *
 *   rv_synth_ranks HEXID NRANKS PER_HOST HOST_FIRST HOST_COUNT
 *
 * Hosts HOST_FIRST.. (HOST_COUNT of them) have ranks h*PER_HOST..h*PER_HOST+
 * PER_HOST-1; the first of each is the real one, this process speaks for the
 * others.  Host 0 is the trainer's (role training), the others inference, as
 * in rv_scale.py --grid.  Environment:
 *   RV_SYNTH_EXE      the real ranks' program (many_ranks): its path is the
 *                     caller library a rank says and starts the title
 *   RV_SYNTH_WAIT_MS  how long to wait for every verdict (default 120000)
 * Prints one line:
 *   SYNTH ranks=N answered=A socket=.. passthrough=.. other=.. abort=..
 *         lost=.. rounds2=.. refused=.. full=.. connect0_ns=.. verdict1_ns=..
 *         span_ms=.. nofile=..
 * (connect0_ns: its first connect, verdict1_ns: its last verdict, both
 * CLOCK_REALTIME as the shim's records' ts.)  Exit 0 if every rank had a verdict.
 */
#define _GNU_SOURCE
#include "rv_leader_name.h"
#include "rv_reader.h"
#include "rv_wire.h"
#include "uid_mark.h"
#include "tests/clients/unhex.h"
#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/host_id.h"
#include "shim/base/version.h"
#include "shim/evidence/fabric_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Where a synthetic rank is in its rendezvous. */
enum st { S_CONNECT, S_ADMIT, S_ANSWER, S_DONE };

struct srank {
    int fd;
    int rank;
    int host;                           /* index into g_hosts */
    int slot;
    enum st st;
    int voted;
    struct rv_reader rd;                /* the answer so far: the shim's own frame reader */
    uint8_t *out;                       /* what a send left unsent */
    size_t outlen, outoff;
};

struct host {
    char host_id[FACTS_HOST_LEN];
    char name[FACTS_HOST_LEN];
    /* Its leader was not there yet (its real rank has not started): its
     * ranks try again at retry_ms, backing off, so that hammering a host
     * that is still starting leaves the cores to the processes starting. */
    uint64_t retry_ms;
    int backoff_ms;
};

static struct uid_mark g_mark;
static int g_nranks;
static struct host *g_hosts;
static int g_host_first;
static struct rank_text g_text[2];      /* [0] host 0's (training), [1] the others' (inference) */
static struct fabric_facts g_fabric;
static int g_epfd;
static uint8_t g_frame[RV_MAX_FRAME];
static struct rv_msg g_msg;
static struct srank *g_ranks;
/* What the ranks were answered. */
static long g_socket, g_pass, g_other, g_abort, g_lost, g_rounds2, g_refused, g_full, g_done;
static uint64_t g_connect0, g_verdict1;
/* The ranks to connect (again): not yet connected, refused, or turned away. */
static long *g_pend, g_npend;

/* fabric_probe.c's lazy probe reads NCCLSHIM_FABRIC_BUDGET from the shim's
 * settings; this program calls fabric_probe_read itself, with the budget
 * unset as in rv_scale.py, so the settings are never read. */
const struct shim_config *shim_config(void)
{
    static struct shim_config c;
    return &c;
}

/* The records' clock (CLOCK_REALTIME), in ns, as the verdict times are compared with them. */
static uint64_t now_ns(void)
{
    return (uint64_t)(shim_now() * 1e9);
}

static uint64_t mono_ms(void)
{
    return shim_mono_us() / 1000;
}

/* Descriptors for every synthetic rank and some: the soft limit up to the
 * hard one, and the hard one up too where this process may (root); the
 * caller (rv_scale.py) splits the ranks between processes when it cannot. */
static long raise_nofile(long want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        perror("rv_synth_ranks: getrlimit(RLIMIT_NOFILE)");
        return -1;
    }
    if (rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max < want) {
        struct rlimit up = { (rlim_t)want, (rlim_t)want };
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            return want;
        /* Not privileged: the hard limit is what there is. */
    }
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        perror("rv_synth_ranks: setrlimit(RLIMIT_NOFILE)");
        return -1;
    }
    return rl.rlim_max == RLIM_INFINITY ? want : (long)rl.rlim_max;
}

/*
 * The texts a many_ranks rank says (shim/comm/decision.c, fill_facts): its
 * program as the caller, its command line as the title (cut where the shim
 * cuts it), the role from NCCLSHIM_ROLE and the local purpose that follows.
 * The same bytes a real rank of the role sends make the root intern them as
 * one text, as it does for a real job's ranks.
 */
static void make_texts(const char *exe, const char *hexid)
{
    for (int i = 0; i < 2; i++) {
        struct rank_text *t = &g_text[i];
        memset(t, 0, sizeof(*t));
        snprintf(t->caller_lib, sizeof(t->caller_lib), "%s", exe);
        /* The real rank's command line: "<exe> ranks <hex> NRANKS FIRST 1"; past the 256 hex digits
         * of the ID the title is cut, so every rank's title is the same. */
        snprintf(t->title, sizeof(t->title), "%s ranks %s %d", exe, hexid, g_nranks);
        snprintf(t->role_reason, sizeof(t->role_reason), "NCCLSHIM_ROLE=%s", i == 0 ? "training" : "inference");
        snprintf(t->local_purpose_reason, sizeof(t->local_purpose_reason), "%s",
                 i == 0 ? "created through other (not torch) in a training process"
                        : "created through other in an inference process, no weight-update call site");
    }
}

static void fill_hello(struct rv_msg *m, const struct srank *r)
{
    memset(m, 0, sizeof(*m));
    m->type = RV_HELLO;
    memcpy(m->token, g_mark.token, RV_TOKEN_LEN);
    struct rank_facts *f = &m->u.hello;
    int train = g_host_first + r->host == 0;
    f->rank = r->rank;
    f->nranks = g_nranks;
    f->pid = (uint32_t)getpid();
    snprintf(f->host, sizeof(f->host), "%s", g_hosts[r->host].name);
    snprintf(f->host_id, sizeof(f->host_id), "%s", g_hosts[r->host].host_id);
    f->cuda_device = 0; /* as the fake CUDA says for every many_ranks thread */
    snprintf(f->fn, sizeof(f->fn), "ncclCommInitRank");
    f->nccl_version = 22809; /* the fake NCCL's (tests/fake) */
    snprintf(f->shim_version, sizeof(f->shim_version), "%s", NCCLSHIM_VERSION);
    f->api = API_OTHER;
    f->text = &g_text[train ? 0 : 1];
    f->role = train ? ROLE_TRAINING : ROLE_INFERENCE;
    f->local_purpose = train ? PURPOSE_WEIGHT_UPDATE : PURPOSE_INFERENCE;
    /* Socket's set-up is local and made before the HELLO: a rank under
     * NCCLSHIM_WEIGHT_UPDATE=socket says it is ready, so the root commits in
     * one round (docs/design.md, "Deciding: the rendezvous"). */
    f->socket_ready = 1;
    f->frugal_ready = 1;
    f->fabric = g_fabric;
    f->engine_frame = -1;
}

static void finish(struct srank *r)
{
    if (r->fd >= 0 && close(r->fd) != 0)
        perror("rv_synth_ranks: close");
    r->fd = -1;
    rv_reader_reset(&r->rd);
    free(r->out);
    r->out = NULL;
    r->outlen = r->outoff = 0;
    if (r->st != S_DONE) {
        r->st = S_DONE;
        g_done++;
    }
}

static void lost(struct srank *r, const char *why)
{
    fprintf(stderr, "rv_synth_ranks: rank %d: %s\n", r->rank, why);
    g_lost++;
    finish(r);
}

/* Sends what `r` has left to send: 0 (all sent or waiting for room), -1 lost. */
static int flush(struct srank *r)
{
    while (r->outoff < r->outlen) {
        ssize_t n = send(r->fd, r->out + r->outoff, r->outlen - r->outoff, MSG_NOSIGNAL);
        if (n > 0) {
            r->outoff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct epoll_event ev = { EPOLLIN | EPOLLOUT, { .ptr = r } };
            if (epoll_ctl(g_epfd, EPOLL_CTL_MOD, r->fd, &ev) != 0) {
                perror("rv_synth_ranks: epoll_ctl(MOD)");
                return -1;
            }
            return 0;
        }
        char why[128];
        snprintf(why, sizeof(why), "send to its leader: %s", n < 0 ? strerror(errno) : "nothing sent");
        lost(r, why);
        return -1;
    }
    free(r->out);
    r->out = NULL;
    r->outlen = r->outoff = 0;
    return 0;
}

/* Sends message `m` to r's leader (what is left waits for EPOLLOUT): 0, or -1 lost. */
static int say(struct srank *r, const struct rv_msg *m)
{
    size_t n = rv_encode(m, g_frame, sizeof(g_frame));
    if (!n) {
        lost(r, "its message does not encode");
        return -1;
    }
    if (!(r->out = malloc(n))) {
        lost(r, "out of memory");
        return -1;
    }
    memcpy(r->out, g_frame, n);
    r->outlen = n;
    r->outoff = 0;
    return flush(r);
}

/* One connect to r's leader at its slot.  1 connected (waiting for the admit
 * byte), 0 to try again later (no leader bound there yet: the host's real
 * rank has not started; or its backlog is full), -1 lost. */
static int try_connect(struct srank *r)
{
    struct sockaddr_un sun;
    socklen_t sl = rv_leader_name(&sun, g_mark.token, g_hosts[r->host].host_id, r->slot);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        char why[128];
        snprintf(why, sizeof(why), "socket(AF_UNIX): %s", strerror(errno));
        lost(r, why);
        return -1;
    }
    if (!g_connect0)
        g_connect0 = now_ns();
    if (connect(fd, (struct sockaddr *)&sun, sl) != 0) {
        int e = errno;
        if (close(fd) != 0)
            perror("rv_synth_ranks: close");
        if (e == ECONNREFUSED || e == ENOENT || e == EAGAIN || e == EINTR) {
            g_refused++;
            return 0;
        }
        char why[128];
        snprintf(why, sizeof(why), "connect to its host's leader (slot %d): %s", r->slot, strerror(e));
        lost(r, why);
        return -1;
    }
    r->fd = fd;
    r->st = S_ADMIT;
    struct epoll_event ev = { EPOLLIN, { .ptr = r } };
    if (epoll_ctl(g_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        char why[128];
        snprintf(why, sizeof(why), "epoll_ctl(ADD): %s", strerror(errno));
        lost(r, why);
        return -1;
    }
    return 1;
}

/* The leader's admit byte: ADMIT, and the HELLO goes; FULL, and the next slot. */
static void on_admit(struct srank *r)
{
    char b;
    ssize_t n = recv(r->fd, &b, 1, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n == 1 && b == RV_LEADER_ADMIT) {
        r->st = S_ANSWER;
        fill_hello(&g_msg, r);
        (void)say(r, &g_msg);
        return;
    }
    if (n == 1 && b == RV_LEADER_FULL) {
        g_full++;
        if (close(r->fd) != 0)
            perror("rv_synth_ranks: close");
        r->fd = -1;
        r->slot = rv_leader_next_slot(r->slot, r->rank);
        r->st = S_CONNECT;
        if (r->slot >= RV_LEADER_SLOTS)
            lost(r, "no slot left");
        else
            g_pend[g_npend++] = r - g_ranks;
        return;
    }
    lost(r, n == 0 ? "the leader closed before its admit byte" : n < 0 ? strerror(errno) : "a wrong admit byte");
}

/* A whole frame from the leader: the verdict, or the DECISION this rank votes on. */
static void on_frame(struct srank *r, const uint8_t *frame, size_t len)
{
    char err[256];
    struct rv_msg *m = &g_msg;
    if (rv_decode(frame, len, m, err, sizeof(err)) != 0) {
        lost(r, err);
        return;
    }
    if (!rv_token_equal(m->token, g_mark.token)) {
        lost(r, "an answer with a wrong token");
        return;
    }
    if (m->type == RV_ABORT) {
        fprintf(stderr, "rv_synth_ranks: rank %d: ABORT: %.300s\n", r->rank, m->u.reason);
        g_abort++;
        finish(r);
        return;
    }
    if (m->type == RV_DECISION && !m->u.verdict.final && !r->voted) {
        /* The second round a root runs when some rank did not say socket_ready,
         * or for drop: this rank could set it up (socket's is local). */
        g_rounds2++;
        r->voted = 1;
        int action = m->u.verdict.action;
        memset(m, 0, sizeof(*m));
        m->type = RV_VOTE;
        memcpy(m->token, g_mark.token, RV_TOKEN_LEN);
        m->u.vote.ok = action == ACTION_SOCKET || action == ACTION_PASSTHROUGH;
        if (!m->u.vote.ok)
            snprintf(m->u.vote.reason, sizeof(m->u.vote.reason), "a synthetic rank sets up socket only");
        (void)say(r, m);
        return;
    }
    if (m->type != RV_COMMIT && m->type != RV_DECISION) {
        char why[64];
        snprintf(why, sizeof(why), "an unexpected message (type %d)", (int)m->type);
        lost(r, why);
        return;
    }
    if (m->u.verdict.action == ACTION_SOCKET)
        g_socket++;
    else if (m->u.verdict.action == ACTION_PASSTHROUGH)
        g_pass++;
    else
        g_other++;
    g_verdict1 = now_ns();
    finish(r);
}

static void on_readable(struct srank *r)
{
    for (;;) {
        char err[256];
        uint8_t *frame;
        size_t len;
        switch (rv_read_step(r->fd, &r->rd, &frame, &len, err, sizeof(err))) {
        case RV_READ_FRAME:
            on_frame(r, frame, len);
            free(frame);
            if (r->st == S_DONE)
                return;
            break;
        case RV_READ_MORE:
            break;
        case RV_READ_WAIT:
            return;
        case RV_READ_CLOSED: {
            char why[300];
            snprintf(why, sizeof(why), "its leader's connection before the verdict: %s", err);
            lost(r, why);
            return;
        }
        case RV_READ_BAD:
        case RV_READ_NOMEM:
            lost(r, err);
            return;
        }
    }
}

/* Host identities, and the ranks this process speaks for (all waiting to
 * connect): 0, or -1 out of memory. */
static int make_ranks(int nhosts, int per, long nsynth)
{
    g_hosts = calloc((size_t)nhosts, sizeof(*g_hosts));
    g_ranks = calloc((size_t)nsynth, sizeof(*g_ranks));
    g_pend = calloc((size_t)nsynth, sizeof(*g_pend));
    if (!g_hosts || !g_ranks || !g_pend) {
        fprintf(stderr, "rv_synth_ranks: out of memory\n");
        return -1;
    }
    for (int h = 0; h < nhosts; h++) {
        /* The identity a real rank of host h computes (shim/base/host_id.c):
         * NCCLSHIM_HOSTNAME=h<N> and this machine's boot id (or NCCL_HOSTID,
         * which then makes every host one, as it would for real ranks). */
        struct host_identity hi;
        snprintf(g_hosts[h].name, sizeof(g_hosts[h].name), "h%d", g_host_first + h);
        host_identity_read(&hi, g_hosts[h].name, "/proc/sys/kernel/random/boot_id");
        snprintf(g_hosts[h].host_id, sizeof(g_hosts[h].host_id), "%s", hi.id);
    }
    for (long i = 0; i < nsynth; i++) {
        int h = (int)(i / (per - 1));
        g_ranks[i] = (struct srank){ .fd = -1, .rank = (g_host_first + h) * per + 1 + (int)(i % (per - 1)), .host = h };
        g_pend[i] = i;
    }
    g_npend = nsynth;
    return 0;
}

/* Connects the ranks waiting to: a host whose leader is not there yet is
 * tried again after a backoff.  Returns the soonest retry, or `deadline`. */
static uint64_t connect_pending(uint64_t now, uint64_t deadline)
{
    uint64_t soonest = deadline;
    long keep = 0;
    for (long j = 0; j < g_npend; j++) {
        struct srank *r = &g_ranks[g_pend[j]];
        struct host *h = &g_hosts[r->host];
        if (r->st != S_CONNECT)
            continue;
        if (h->retry_ms > now || try_connect(r) == 0) {
            /* Refused: nobody leads that slot yet. */
            if (h->retry_ms <= now) {
                h->backoff_ms = h->backoff_ms ? (h->backoff_ms < 32 ? 2 * h->backoff_ms : 64) : 1;
                h->retry_ms = now + (uint64_t)h->backoff_ms;
            }
            soonest = h->retry_ms < soonest ? h->retry_ms : soonest;
            g_pend[keep++] = g_pend[j];
        }
    }
    g_npend = keep;
    return soonest;
}

/* One epoll event of rank r: the rest of its message out, its leader's bytes in. */
static void on_event(struct srank *r, uint32_t events)
{
    if (r->st == S_DONE || r->fd < 0)
        return;
    if ((events & EPOLLOUT) && r->outlen) {
        if (flush(r) != 0)
            return;
        if (!r->outlen) {
            struct epoll_event ev = { EPOLLIN, { .ptr = r } };
            if (epoll_ctl(g_epfd, EPOLL_CTL_MOD, r->fd, &ev) != 0) {
                lost(r, "epoll_ctl(MOD)");
                return;
            }
        }
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (r->st == S_ADMIT)
            on_admit(r);
        else if (r->st == S_ANSWER)
            on_readable(r);
    }
}

/* Every rank to its verdict, or until wait_ms: 0, or -1 (epoll failed). */
static int run(long nsynth, long wait_ms)
{
    if ((g_epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        perror("rv_synth_ranks: epoll_create1");
        return -1;
    }
    struct epoll_event evs[1024];
    uint64_t deadline = mono_ms() + (uint64_t)wait_ms;
    while (g_done < nsynth && mono_ms() < deadline) {
        uint64_t now = mono_ms();
        uint64_t soonest = connect_pending(now, deadline);
        int timeout = g_npend ? (int)(soonest > now ? soonest - now : 1) : 100;
        int n = epoll_wait(g_epfd, evs, 1024, timeout);
        if (n < 0 && errno != EINTR) {
            perror("rv_synth_ranks: epoll_wait");
            return -1;
        }
        for (int k = 0; k < n; k++)
            on_event(evs[k].data.ptr, evs[k].events);
    }
    return 0;
}

/* The SYNTH line (the ranks still without a verdict counted lost): 1 if every rank had one. */
static int report(long nsynth, long wait_ms, long nofile)
{
    long answered = g_socket + g_pass + g_other;
    for (long i = 0; i < nsynth; i++)
        if (g_ranks[i].st != S_DONE) {
            if (g_lost < 8)
                fprintf(stderr, "rv_synth_ranks: rank %d: no verdict within %ld ms\n", g_ranks[i].rank, wait_ms);
            g_lost++;
            finish(&g_ranks[i]);
        }
    printf("SYNTH ranks=%ld answered=%ld socket=%ld passthrough=%ld other=%ld abort=%ld lost=%ld rounds2=%ld "
           "refused=%ld full=%ld connect0_ns=%llu verdict1_ns=%llu span_ms=%.1f nofile=%ld\n",
           nsynth, answered, g_socket, g_pass, g_other, g_abort, g_lost, g_rounds2, g_refused, g_full,
           (unsigned long long)g_connect0, (unsigned long long)g_verdict1,
           g_verdict1 > g_connect0 && g_connect0 ? (double)(g_verdict1 - g_connect0) / 1e6 : 0.0, nofile);
    return answered == nsynth;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    ncclUniqueId id;
    if (argc != 6 || unhex(argv[1], (uint8_t *)id.internal, sizeof(id.internal)) != 0) {
        fprintf(stderr, "usage: rv_synth_ranks HEXID NRANKS PER_HOST HOST_FIRST HOST_COUNT\n");
        return 2;
    }
    if (!uid_mark_read(&id, &g_mark)) {
        fprintf(stderr, "rv_synth_ranks: the ID carries no rendezvous mark (was the root's shim preloaded?)\n");
        return 2;
    }
    g_nranks = atoi(argv[2]);
    int per = atoi(argv[3]);
    g_host_first = atoi(argv[4]);
    int nhosts = atoi(argv[5]);
    if (g_nranks < 1 || per < 2 || g_host_first < 0 || nhosts < 1 || (long)(g_host_first + nhosts) * per > g_nranks) {
        fprintf(stderr, "rv_synth_ranks: hosts %d..%d of %d ranks per host do not fit %d ranks\n", g_host_first,
                g_host_first + nhosts - 1, per, g_nranks);
        return 2;
    }
    const char *exe = getenv("RV_SYNTH_EXE") ? getenv("RV_SYNTH_EXE") : "many_ranks";
    long wait_ms = getenv("RV_SYNTH_WAIT_MS") ? atol(getenv("RV_SYNTH_WAIT_MS")) : 120000;
    long nsynth = (long)nhosts * (per - 1);
    long nofile = raise_nofile(nsynth + 64);
    if (nofile < 0)
        return 1;
    if (nofile < nsynth + 16) {
        fprintf(stderr, "rv_synth_ranks: %ld ranks need %ld descriptors, and RLIMIT_NOFILE's hard limit is %ld: "
                "run fewer hosts a process\n", nsynth, nsynth + 16, nofile);
        return 1;
    }
    make_texts(exe, argv[1]);
    /* The host's fabric as a rank's shim reads it (sysfs), once: every rank of a host says the same. */
    fabric_probe_read("/sys", 0, &g_fabric);
    if (make_ranks(nhosts, per, nsynth) != 0 || run(nsynth, wait_ms) != 0)
        return 1;
    int all = report(nsynth, wait_ms, nofile);
    free(g_ranks);
    free(g_pend);
    free(g_hosts);
    return all ? 0 : 1;
}
