/* The root's rendezvous records (rv_server_record.h). */
#define _GNU_SOURCE
#include "rv_server_record.h"

#include "policy/classify.h"
#include "clock.h"

#include <stdio.h>
#include <unistd.h>

static const char *const rej_name[REJ_COUNT] = { "no_hello", "evicted",  "malformed", "wrong_token",
                                                 "closed",   "protocol", "late",      "other" };

void rv_rank_list(const struct rv_session *s, int want_present, char *buf, size_t len)
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

void rv_record_decision(struct rv_session *s, const char *stage)
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
    rv_rank_list(s, 0, ranks, sizeof(ranks));
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
    jw_int(&w, "engine", s->d.nengine);
    if (s->d.unrecognized[0])
        jw_str(&w, "unrecognized", s->d.unrecognized);
    jw_int(&w, "rejected_connections", s->rejected);
    record_rejected_by(&w, s);
    jw_int(&w, "leaders", s->leaders);
    /* Hosts' leaders sent on to another leader (the tree below the root). */
    jw_int(&w, "redirected", s->redirected);
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
        jw_str(&w, "host_id", f->host_id); /* what "hosts" counted: NCCL's host identity */
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

void rv_record_expired(const struct rv_session *s, int idle_ms)
{
    struct jw w;
    jw_begin(&w, "rendezvous_expired");
    jw_str(&w, "listen", s->addr);
    jw_int(&w, "idle_ms", idle_ms);
    jw_int(&w, "rejected_connections", s->rejected);
    record_rejected_by(&w, s);
    jw_emit(&w);
}

void rv_record_peer_left(const struct rv_session *s, int rank)
{
    struct jw w;
    jw_begin(&w, "ipc_peer_left");
    jw_str(&w, "listen", s->addr);
    jw_hex64(&w, "decision_id", s->verdict.decision_id);
    jw_int(&w, "rank", rank);
    jw_emit(&w);
}
