/* The problem rules. Each rule looks at one communicator and appends short,
 * operator-facing strings to c->problems. To add a rule: write a function
 * and add a row to `rules`; docs/inspect.md lists what each one means. */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>

typedef void (*rule_fn)(inspect_state *st, communicator *c);

/* One rule can fire once per rank; on a 4096-rank job that would bury the
 * other problems, so each rule keeps its first few and counts the rest. */
#define MAX_PER_RULE 5
static size_t rule_added, rule_suppressed;

static void add(communicator *c, char *owned)
{
    if (rule_added++ < MAX_PER_RULE) {
        strlist_add(&c->problems, owned);
    } else {
        rule_suppressed++;
        free(owned);
    }
}

/* Appends "a,b,c" to a growing buffer, capped so that a 4096-rank job with
 * half its ranks gone still yields one readable line. */
typedef struct list_buf {
    char s[160];
    size_t n, items;
    int full;
} list_buf;

static void lb_add(list_buf *b, const char *item)
{
    size_t len = strlen(item);
    b->items++;
    if (b->full)
        return;
    if (b->n + len + 6 >= sizeof b->s) {
        b->n += (size_t)snprintf(b->s + b->n, sizeof b->s - b->n, "%s...", b->n ? "," : "");
        b->full = 1;
        return;
    }
    b->n += (size_t)snprintf(b->s + b->n, sizeof b->s - b->n, "%s%s", b->n ? "," : "", item);
}

static void rule_rank_missing(inspect_state *st, communicator *c)
{
    (void)st;
    if (c->nranks <= 0)
        return;
    long long present = 0;
    for (size_t i = 0; i < c->nranks_rec; i++)
        if (c->ranks[i]->rank < c->nranks && (i == 0 || c->ranks[i]->rank != c->ranks[i - 1]->rank))
            present++;
    long long missing = c->nranks - present;
    if (missing <= 0)
        return;
    list_buf b = {0};
    size_t k = 0;
    /* stops once the list is full: nranks comes from the input and may be huge */
    for (long long r = 0; r < c->nranks && !b.full; r++) {
        while (k < c->nranks_rec && c->ranks[k]->rank < r)
            k++;
        if (k < c->nranks_rec && c->ranks[k]->rank == r)
            continue;
        char item[24];
        snprintf(item, sizeof item, "%lld", r);
        lb_add(&b, item);
    }
    if (missing)
        add(c, b.full ? xasprintf("ranks missing: %s of %lld (%lld missing)", b.s, c->nranks, missing)
                      : xasprintf("rank%s missing: %s of %lld", missing > 1 ? "s" : "", b.s, c->nranks));
}

static void rule_rank_out_of_range(inspect_state *st, communicator *c)
{
    (void)st;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (r->rank >= r->nranks)
            add(c, xasprintf("rank %lld out of range for nranks %lld (%s pid %lld)", r->rank,
                             r->nranks, r->host, r->pid));
    }
}

static void rule_duplicate_rank(inspect_state *st, communicator *c)
{
    (void)st;
    /* ranks are sorted by (rank, ts): a duplicate is a later record of the
     * same rank whose predecessor had not ended before it was created */
    for (size_t i = 1; i < c->nranks_rec; i++) {
        rank_rec *a = c->ranks[i - 1], *b = c->ranks[i];
        if (a->rank != b->rank)
            continue;
        if (a->end && (a->end->ts <= b->ts || !a->end->ts))
            continue;
        add(c, xasprintf("duplicate rank %lld: %s pid %lld and %s pid %lld", b->rank, a->host,
                         a->pid, b->host, b->pid));
    }
}

static void rule_init_failed(inspect_state *st, communicator *c)
{
    (void)st;
    /* 7 is ncclInProgress: a non-blocking init still completing, not a failure */
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (r->result != 0 && r->result != 7)
            add(c, xasprintf("init failed on rank %lld (%s pid %lld): result %lld (%s)", r->rank,
                             r->host, r->pid, r->result, r->result_str ? r->result_str : "?"));
    }
}

static void rule_nranks_disagree(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf b = {0};
    strlist seen = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        char item[24];
        snprintf(item, sizeof item, "%lld", c->ranks[i]->nranks);
        size_t before = seen.n;
        strlist_add_unique(&seen, item);
        if (seen.n != before)
            lb_add(&b, item);
    }
    if (seen.n > 1)
        add(c, xasprintf("nranks disagree: %s", b.s));
    strlist_free(&seen);
}

static void disagree(communicator *c, const char *what, const char *(*get)(const rank_rec *))
{
    list_buf b = {0};
    strlist seen = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        size_t before = seen.n;
        strlist_add_unique(&seen, get(c->ranks[i]));
        if (seen.n != before)
            lb_add(&b, seen.v[seen.n - 1]);
    }
    if (seen.n > 1)
        add(c, xasprintf("%s disagree: %s", what, b.s));
    strlist_free(&seen);
}

static const char *purpose_of(const rank_rec *r) { return r->purpose ? r->purpose : "unknown"; }
static const char *action_of(const rank_rec *r) { return r->action ? r->action : "unknown"; }

static void rule_purposes_disagree(inspect_state *st, communicator *c)
{
    (void)st;
    disagree(c, "purposes", purpose_of);
}

static void rule_actions_disagree(inspect_state *st, communicator *c)
{
    (void)st;
    disagree(c, "actions", action_of);
}

static void rule_dropped_carried_data(inspect_state *st, communicator *c)
{
    (void)st;
    unsigned long long ops = 0;
    list_buf b = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (!r->action || strcmp(r->action, "drop") != 0 || !r->end)
            continue;
        unsigned long long n = 0;
        op_stat *o, *tmp;
        HASH_ITER(hh, r->end->ops, o, tmp)
            n += o->count;
        if (n) {
            char item[24];
            snprintf(item, sizeof item, "%lld", r->rank);
            lb_add(&b, item);
            ops += n;
        }
    }
    if (ops)
        add(c, xasprintf("dropped communicator carried data: %llu calls on rank%s %s never reached NCCL",
                         ops, b.items > 1 ? "s" : "", b.s));
}

/*
 * NCCL names a network for every communicator, even one whose ranks all talk
 * over NVLink or shared memory; Socket only hurts when data crosses it: the
 * ranks span hosts, or NCCL logged channels "via NET/Socket".
 */
static void rule_training_on_socket(inspect_state *st, communicator *c)
{
    (void)st;
    list_buf b = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (r->purpose && strcmp(r->purpose, "training") == 0 && r->network &&
            strcmp(r->network, "Socket") == 0 && (c->hosts.n > 1 || r->net_channels > 0)) {
            char item[24];
            snprintf(item, sizeof item, "%lld", r->rank);
            lb_add(&b, item);
        }
    }
    if (b.items)
        add(c, xasprintf("training communicator on Socket (NCCL log, rank%s %s)",
                         b.items > 1 ? "s" : "", b.s));
}

static void rule_not_ended(inspect_state *st, communicator *c)
{
    (void)st;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        /* a failed init has nothing to end; the exit record means the shim
         * wrote ends for every live comm, so a missing one was destroyed
         * in a file we were not given */
        if (r->end || (r->result != 0 && r->result != 7) || (r->proc && r->proc->has_exit))
            continue;
        add(c, xasprintf("rank %lld (pid %lld) has no end record: process may have crashed", r->rank,
                         r->pid));
    }
}

static void rule_nccl_warn(inspect_state *st, communicator *c)
{
    strlist done = {0};
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        char *h = short_host(r->host);
        char *key = xasprintf("%s:%lld", h, r->pid);
        free(h);
        size_t before = done.n;
        strlist_add_unique(&done, key);
        nccl_proc *np = NULL;
        if (done.n != before)
            HASH_FIND_STR(st->nccl_procs, key, np);
        free(key);
        if (!np)
            continue;
        for (int w = 0; w < np->nwarns && w < INSPECT_MAX_NCCL_WARNS; w++)
            add(c, xasprintf("NCCL WARN (%s pid %lld): %s", r->host, r->pid, np->warns[w]));
        if (np->nwarns > INSPECT_MAX_NCCL_WARNS)
            add(c, xasprintf("NCCL WARN (%s pid %lld): ... %d more", r->host, r->pid,
                             np->nwarns - INSPECT_MAX_NCCL_WARNS));
    }
    strlist_free(&done);
}

static const struct {
    const char *name;
    rule_fn fn;
} rules[] = {
    {"rank missing", rule_rank_missing},
    {"rank out of range", rule_rank_out_of_range},
    {"duplicate rank", rule_duplicate_rank},
    {"init failed", rule_init_failed},
    {"nranks disagree", rule_nranks_disagree},
    {"purposes disagree", rule_purposes_disagree},
    {"actions disagree", rule_actions_disagree},
    {"dropped communicator carried data", rule_dropped_carried_data},
    {"training communicator on Socket", rule_training_on_socket},
    {"not ended", rule_not_ended},
    {"NCCL warning", rule_nccl_warn},
};

/* Returns the number of communicators with at least one problem. */
size_t inspect_check(inspect_state *st)
{
    size_t bad = 0;
    for (size_t i = 0; i < st->ncomms; i++) {
        communicator *c = st->sorted[i];
        for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
            rule_added = rule_suppressed = 0;
            rules[k].fn(st, c);
            if (rule_suppressed)
                strlist_add(&c->problems, xasprintf("... and %zu more '%s' problems", rule_suppressed,
                                                    rules[k].name));
        }
        bad += c->problems.n > 0;
    }
    return bad;
}
