/*
 * A rendezvous session's connections (rv_session.h): slots, reused once no
 * rank refers to them; the anonymous ones (no token yet), which admission
 * counts; dropping one, and what that undoes.
 */
#define _GNU_SOURCE
#include "rv_session.h"

#include "clock.h"
#include "config.h"
#include "record.h"
#include "rv_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void rv_anon_remove(struct rv_session *s, struct rv_conn *c)
{
    if (c->anon_slot < 0)
        return;
    int last = s->anon[--s->nanon];
    s->anon[c->anon_slot] = last;
    s->conns[last].anon_slot = c->anon_slot;
    c->anon_slot = -1; /* after: c may be the last */
}

void rv_reject(struct rv_session *s, struct rv_conn *c, enum rej cause, const char *why)
{
    rv_anon_remove(s, c);
    s->rejected_by[cause]++;
    if (s->rejected++ < MAX_REJECT_RECORDS) {
        char msg[512];
        snprintf(msg, sizeof(msg), "rendezvous %s: dropped a connection from %s%s: %s", s->addr, c->peer,
                 c->rank >= 0 ? " (a rank that had arrived)" : "", why);
        shim_record_warning("rendezvous-rejected", msg);
    }
    close(c->fd);
    c->fd = -1;
    rv_reader_reset(&c->rd);
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

void rv_reject_strangers(struct rv_session *s)
{
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd >= 0 && s->conns[i].rank < 0)
            rv_reject(s, &s->conns[i], REJ_LATE, "not a rank (no HELLO) when every rank had arrived");
}

void rv_settle(struct rv_session *s)
{
    if (s->lfd < 0 || !s->askers) {
        rv_finish(s);
        return;
    }
    for (int i = 0; i < s->nconns; i++) {
        struct rv_conn *c = &s->conns[i];
        if (c->fd >= 0 && (c->rank >= 0 || c->told))
            rv_close_conn(c);
    }
    s->state = ST_ANSWER;
    s->answer_until = shim_mono_us() + (uint64_t)shim_config()->rendezvous_timeout_ms * 1000 + RV_LINGER_US;
}

void rv_drop_quietly(struct rv_session *s, struct rv_conn *c)
{
    rv_anon_remove(s, c);
    rv_close_conn(c);
    c->rank = -1;
    c->leader_pid = 0;
    c->told = 0;
    c->next_free = s->free_head;
    s->free_head = (int)(c - s->conns);
}

void rv_close_conn(struct rv_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    rv_reader_reset(&c->rd);
}

void rv_session_free(struct rv_session *s)
{
    if (s->lfd >= 0)
        close(s->lfd);
    for (int i = 0; i < s->nconns; i++)
        rv_close_conn(&s->conns[i]);
    free(s->conns);
    free(s->peers);
    rv_session_free_ranks(s);
    free(s);
}

void rv_session_free_ranks(struct rv_session *s)
{
    free(s->facts);
    free(s->conn_of_rank);
    free(s->voted);
    rv_texts_free(&s->texts);
    s->facts = NULL;
    s->conn_of_rank = NULL;
    s->voted = NULL;
}

/* A free slot, or a new one at the end. */
struct rv_conn *rv_new_conn(struct rv_session *s, int fd, const struct sockaddr *sa)
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

struct rv_conn *rv_oldest_anonymous(struct rv_session *s)
{
    int oldest = s->anon[0];
    for (int i = 1; i < s->nanon; i++)
        if (s->conns[s->anon[i]].accepted_us < s->conns[oldest].accepted_us)
            oldest = s->anon[i];
    return &s->conns[oldest];
}
