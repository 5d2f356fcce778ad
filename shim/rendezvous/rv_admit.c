/*
 * Reading the rendezvous' connections (rv_session.h, "Admission"): accepting
 * them, each frame as it comes in, a stranger told from a rank by its token,
 * the oldest stranger evicted to make room; each whole frame goes to the
 * decision's rounds (rv_decide.c).
 */
#define _GNU_SOURCE
#include "rv_admit.h"
#include "config.h"

#include "clock.h"
#include "record.h"
#include "rv_decide.h"
#include "rv_fault.h"
#include "rv_io.h"
#include "rv_limits.h"
#include "rv_server_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void rv_on_readable(struct rv_session *s, struct rv_conn *c)
{
    if (s->state == ST_MONITOR) {
        /* Nothing is sent on a running ipc communicator's connections: this is
         * a rank leaving.  Closing every connection tells the others. */
        rv_record_peer_left(s, c->rank);
        rv_finish(s);
        return;
    }
    char err[256];
    for (int loops = 0; c->fd >= 0 && s->state != ST_DONE && loops < 64; loops++) {
        uint8_t *frame = NULL;
        size_t len = 0;
        enum rv_read r = rv_read_step(c->fd, &c->rd, &frame, &len, err, sizeof(err));
        if (r == RV_READ_WAIT)
            return;
        if (r == RV_READ_CLOSED) {
            int was_voter = c->rank >= 0 && s->state == ST_WAIT_VOTES;
            int rank = c->rank;
            uint32_t leader = s->state == ST_WAIT_HELLO ? c->leader_pid : 0;
            char peer[sizeof(c->peer)];
            memcpy(peer, c->peer, sizeof(peer));
            rv_reject(s, c, REJ_CLOSED, err);
            if (leader) {
                /* Its ranks cannot be reached any more: no point waiting for the timeout. */
                char why[RV_REASON_LEN];
                snprintf(why, sizeof(why), "the leader of rank %d's host (pid %u, %s) closed its connection before "
                         "the decision: passthrough for all", rank, (unsigned)leader, peer);
                rv_give_up_now(s, why);
            } else if (was_voter) {
                char why[RV_REASON_LEN];
                snprintf(why, sizeof(why), "rank %d left before voting: passthrough for all", rank);
                rv_fall_back(s, RV_COMMIT, why);
            }
            return;
        }
        if (r == RV_READ_BAD || r == RV_READ_NOMEM) {
            rv_reject(s, c, r == RV_READ_BAD ? REJ_MALFORMED : REJ_OTHER, err);
            return;
        }
        size_t have = len;
        const uint8_t *got = r == RV_READ_FRAME ? frame : rv_reader_partial(&c->rd, &have);
        if (c->anon_slot >= 0 && got) {
            /* The token, as soon as it is in: a rank then leaves the
             * anonymous count (and its deadline) before its HELLO is whole. */
            uint8_t tok[RV_TOKEN_LEN];
            int t = rv_frame_token(got, have, tok);
            if (t == 1 && !rv_token_equal(tok, s->token)) {
                free(frame);
                rv_reject(s, c, REJ_WRONG_TOKEN, WRONG_TOKEN);
                return;
            }
            if (t == 1)
                rv_anon_remove(s, c);
        }
        if (r == RV_READ_FRAME) {
            rv_on_message(s, c, frame, len);
            free(frame);
            if (s->state == ST_MONITOR)
                return; /* its close, once it comes, is a rank leaving: handled above, at the next poll */
        }
    }
}

/* Makes room for one anonymous connection: the oldest one goes, unless what
 * it has sent by now (read first) makes it a rank or gets it dropped anyway. */
static void evict_oldest(struct rv_session *s)
{
    struct rv_conn *c = rv_oldest_anonymous(s);
    rv_on_readable(s, c);
    if (c->fd >= 0 && c->anon_slot >= 0 && s->state == ST_WAIT_HELLO)
        rv_reject(s, c, REJ_EVICTED, "no token yet, the oldest of too many connections without one");
}

void rv_on_acceptable(struct rv_session *s)
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
                /* Nothing to give back: the ranks waiting cannot all be held (rv_limits.h). */
                char who[64], why[RV_REASON_LEN];
                snprintf(who, sizeof(who), "the root's process (pid %u)", (unsigned)getpid());
                rv_limit_reason(e, who, "accepting the ranks' connections", why, sizeof(why));
                size_t n = strlen(why);
                if (s->leaders == 0 && n + 200 < sizeof(why))
                    /* Ranks talking to the root each hold one: leaders would hold one per host. */
                    snprintf(why + n, sizeof(why) - n, "; or set NCCLSHIM_RENDEZVOUS_FANIN (now %d) below the "
                             "communicator's size, so that its ranks meet at their hosts' leaders",
                             shim_config()->rendezvous_fanin);
                rv_limit_fall_back(s, why);
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
            if (s->nanon < MAX_ANONYMOUS_HARD && shim_mono_us() - rv_oldest_anonymous(s)->accepted_us < EVICT_GRACE_US)
                break;
            evict_oldest(s);
        }
        struct rv_conn *c = s->state == ST_WAIT_HELLO ? rv_new_conn(s, fd, (struct sockaddr *)&ss) : NULL;
        if (!c) {
            /* Decided meanwhile (the evicted one was the last rank), or out of memory. */
            close(fd);
            s->rejected++;
            s->rejected_by[s->state == ST_WAIT_HELLO ? REJ_OTHER : REJ_LATE]++;
            continue;
        }
        /* What it sent is often there already: a rank's HELLO, or a flood's garbage. */
        rv_on_readable(s, c);
        if (n == 0)
            rv_fault_once("root-stall");
    }
}
