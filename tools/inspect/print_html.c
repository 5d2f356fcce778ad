/* --html: one self-contained page (tools/inspect/report.html, compiled in) with
 * the facts as a JSON document inside it.  The page draws the timeline itself,
 * so the tool only writes data; positional arrays rather than objects keep
 * 100,000 records to a few megabytes.  The document is written as it is walked
 * (no tree in memory): the table and JSON printers already hold one copy of
 * everything, a second one would double the peak for big jobs. */
#include "inspect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_html.gen.h"

/* A JSON string safe inside <script>: '<' never appears raw, so neither does
 * "</script>" nor "<!--"; control bytes are escaped; other bytes pass (the page
 * is UTF-8, and a browser shows an invalid sequence as U+FFFD). */
static void js(FILE *out, const char *s)
{
    if (!s) {
        fputs("null", out);
        return;
    }
    putc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20 || *p == '<' || *p == 0x7f)
            fprintf(out, "\\u%04x", *p);
        else
            putc(*p, out);
    }
    putc('"', out);
}

/* The next element of an array: ",<string>". */
static void jsc(FILE *out, const char *s)
{
    putc(',', out);
    js(out, s);
}

/* [<string>,...] */
static void js_list(FILE *out, const strlist *l)
{
    putc('[', out);
    for (size_t k = 0; k < l->n; k++) {
        if (k)
            putc(',', out);
        js(out, l->v[k]);
    }
    putc(']', out);
}

/* Seconds since the first timestamp, in ms with 3 decimals (1 us); null when the
 * fact has no time (NCCL-log-only ranks without a shim record). */
static void jt(FILE *out, double ts, double t0)
{
    if (ts <= 0 || !isfinite(ts))
        fputs("null", out);
    else
        fprintf(out, "%.3f", (ts - t0) * 1000.0);
}

static void ops_sum(op_stat *ops, unsigned long long *calls, unsigned long long *bytes)
{
    op_stat *o, *tmp;
    *calls = *bytes = 0;
    HASH_ITER(hh, ops, o, tmp) {
        *calls += o->count;
        *bytes += o->bytes;
    }
}

static int proc_cmp(const void *a, const void *b)
{
    const process *x = *(process *const *)a, *y = *(process *const *)b;
    int c = strcmp(x->host, y->host);
    return c ? c : (x->pid > y->pid) - (x->pid < y->pid);
}

/* The process row of (host, pid), or -1: processes' `mark` holds row + 1 while
 * the page is written (check.c's scratch, 0 between uses). */
static long proc_row(inspect_state *st, const char *host, long long pid)
{
    if (!host)
        return -1;
    char *key = xasprintf("%s:%lld", host, pid);
    process *p;
    HASH_FIND_STR(st->procs, key, p);
    free(key);
    return p ? (long)p->mark - 1 : -1;
}

static double earliest(inspect_state *st)
{
    double t0 = 0;
#define SEE(t)                                                                                                         \
    do {                                                                                                               \
        double t_ = (t);                                                                                               \
        if (t_ > 0 && isfinite(t_) && (t0 == 0 || t_ < t0))                                                           \
            t0 = t_;                                                                                                   \
    } while (0)
    for (rank_rec *r = st->ranks; r; r = r->next)
        SEE(r->ts - (double)r->duration_us / 1e6);
    for (decision_rec *d = st->decisions; d; d = d->next)
        SEE(d->ts - (double)d->wait_us / 1e6);
    for (size_t i = 0; i < st->warnings.n; i++)
        SEE(st->warnings.v[i].ts);
    for (size_t i = 0; i < st->peer_left.n; i++)
        SEE(st->peer_left.v[i].ts);
#undef SEE
    return t0;
}

static void write_procs(FILE *out, process **procs, size_t np)
{
    fputs("\"procs\":[", out);
    for (size_t i = 0; i < np; i++) {
        process *p = procs[i];
        fputs(i ? ",[" : "[", out);
        js(out, p->host);
        fprintf(out, ",%lld,", p->pid);
        js(out, p->title);
        fprintf(out, ",%d]", p->has_exit);
    }
    fputs("]", out);
}

/* comms: [group, purpose, action, network, ranks seen, nranks, hosts, apis, init ms,
 *         traffic, calls, bytes, decision summary, [problems], full group] */
static void write_comms(inspect_state *st, FILE *out)
{
    fputs(",\"comms\":[", out);
    for (size_t i = 0; i < st->ncomms; i++) {
        communicator *c = st->sorted[i];
        unsigned long long calls, bytes;
        ops_sum(c->ops, &calls, &bytes);
        char *traffic = inspect_traffic_string(c->ops);
        fputs(i ? ",[" : "[", out);
        js(out, c->short_group);
        jsc(out, c->purpose);
        jsc(out, c->action);
        jsc(out, c->network);
        fprintf(out, ",%zu,%lld,", c->ranks_seen, c->nranks);
        js_list(out, &c->hosts);
        putc(',', out);
        js_list(out, &c->apis);
        fprintf(out, ",%.3f,", (double)c->init_us / 1000.0);
        js(out, traffic);
        fprintf(out, ",%llu,%llu,", calls, bytes);
        js(out, c->decision_summary);
        putc(',', out);
        js_list(out, &c->problems);
        jsc(out, c->group);
        putc(']', out);
        free(traffic);
    }
    fputs("]", out);
}

/* ranks: [proc row, comm index, rank, start ms (init began), created ms, end ms,
 *         end how, calls, bytes, action, network, decision wait us, python call site] */
static void write_ranks(inspect_state *st, FILE *out, double t0)
{
    fputs(",\"ranks\":[", out);
    int first = 1;
    for (size_t i = 0; i < st->ncomms; i++) {
        communicator *c = st->sorted[i];
        for (size_t k = 0; k < c->nranks_rec; k++) {
            rank_rec *r = c->ranks[k];
            unsigned long long calls = 0, bytes = 0;
            if (r->end)
                ops_sum(r->end->ops, &calls, &bytes);
            fprintf(out, "%s[%ld,%zu,%lld,", first ? "" : ",", r->proc ? (long)r->proc->mark - 1 :
                    proc_row(st, r->host, r->pid), i, r->rank);
            first = 0;
            jt(out, r->ts > 0 ? r->ts - (double)r->duration_us / 1e6 : 0, t0);
            putc(',', out);
            jt(out, r->ts, t0);
            putc(',', out);
            jt(out, r->end ? r->end->ts : 0, t0);
            jsc(out, r->end ? (r->end->how ? r->end->how : "?") : NULL);
            fprintf(out, ",%llu,%llu,", calls, bytes);
            js(out, r->action);
            jsc(out, r->network);
            fprintf(out, ",%lld,", r->has_decision ? r->dec_wait_us : -1);
            js(out, r->python0);
            putc(']', out);
        }
    }
    fputs("]", out);
}

/* A communicator's index in sorted[] (the page's id for it), found by pointer. */
typedef struct comm_idx {
    const communicator *c;
    long i;
    UT_hash_handle hh;
} comm_idx;

/* *store: the entries, one block, for the caller to free after HASH_CLEAR. */
static comm_idx *index_comms(inspect_state *st, comm_idx **store)
{
    comm_idx *h = NULL;
    comm_idx *v = *store = xmalloc((st->ncomms ? st->ncomms : 1) * sizeof *v);
    for (size_t i = 0; i < st->ncomms; i++) {
        v[i].c = st->sorted[i];
        v[i].i = (long)i;
        HASH_ADD_PTR(h, c, &v[i]);
    }
    return h;
}

static long comm_index(inspect_state *st, comm_idx *h, const char *group)
{
    if (!group)
        return -1;
    communicator *c;
    HASH_FIND_STR(st->comms, group, c);
    if (!c)
        return -1;
    comm_idx *e;
    HASH_FIND_PTR(h, &c, e);
    return e ? e->i : -1;
}

/* decisions: [proc row (the root), comm index, ts ms, wait us, stage, purpose,
 *             action, arrived, nranks, missing, action reason] */
static void write_decisions(inspect_state *st, FILE *out, double t0, comm_idx *h)
{
    fputs(",\"decisions\":[", out);
    int first = 1;
    for (decision_rec *d = st->decisions; d; d = d->next) {
        fprintf(out, "%s[%ld,%ld,", first ? "" : ",", proc_row(st, d->host, d->pid), comm_index(st, h, d->group));
        first = 0;
        jt(out, d->ts, t0);
        fprintf(out, ",%lld,", d->wait_us);
        js(out, d->stage);
        jsc(out, d->purpose);
        jsc(out, d->action);
        fprintf(out, ",%lld,%lld,", d->arrived, d->nranks);
        js(out, d->missing);
        jsc(out, d->action_reason);
        putc(']', out);
    }
    fputs("]", out);
}

/* events: [proc row, comm index, ts ms, kind, text]: what happened at a moment
 * beside creation and end (warnings, ipc peers leaving, expired rendezvous). */
static void write_events(inspect_state *st, FILE *out, double t0, comm_idx *h)
{
    fputs(",\"events\":[", out);
    int first = 1;
    for (size_t i = 0; i < st->warnings.n; i++) {
        warning_rec *w = &st->warnings.v[i];
        fprintf(out, "%s[%ld,%ld,", first ? "" : ",", proc_row(st, w->host, w->pid),
                w->rank ? comm_index(st, h, w->rank->group) : -1L);
        first = 0;
        jt(out, w->ts, t0);
        fputs(",", out);
        js(out, w->what);
        jsc(out, w->message);
        putc(']', out);
    }
    for (size_t i = 0; i < st->peer_left.n; i++) {
        peer_left_rec *p = &st->peer_left.v[i];
        char *msg = xasprintf("rank %lld left the running ipc communicator%s", p->rank,
                              p->at_destroy ? " (after its own destroy)" : "");
        fprintf(out, "%s[%ld,%ld,", first ? "" : ",", proc_row(st, p->host, p->pid), comm_index(st, h, p->group));
        first = 0;
        jt(out, p->ts, t0);
        fputs(p->at_destroy ? ",\"ipc_peer_left\"," : ",\"peer-lost\",", out);
        js(out, msg);
        putc(']', out);
        free(msg);
    }
    fputs("]", out);
}

static void write_notes(inspect_state *st, FILE *out)
{
    fputs(",\"errors\":[", out);
    int first_error = 1;
    for (size_t i = 0; i < st->errors.n; i++) {
        input_error *e = &st->errors.v[i];
        if (e->line > 0 && !e->fatal)
            continue; /* on its file's line, as on stderr */
        char *s = e->line ? xasprintf("%s:%ld: %s", e->file, e->line, e->reason)
                          : xasprintf("%s: %s", e->file, e->reason);
        if (!first_error)
            putc(',', out);
        first_error = 0;
        js(out, s);
        free(s);
    }
    fputs("],\"libraries\":[", out);
    int first = 1;
    library_rec *l, *ltmp;
    HASH_ITER(hh, st->libs, l, ltmp) {
        char *s = xasprintf("slot %lld: %s (version %lld.%lld.%lld, %d process%s)", l->slot, l->path,
                            l->version / 10000, (l->version / 100) % 100, l->version % 100, l->nproc,
                            l->nproc == 1 ? "" : "es");
        if (!first)
            putc(',', out);
        first = 0;
        js(out, s);
        free(s);
    }
    /* no time of their own (the record says how long the listener waited, not when it gave up) */
    fputs("],\"expired\":[", out);
    for (size_t i = 0; i < st->expired.n; i++) {
        expired_rec *x = &st->expired.v[i];
        char *s = xasprintf("rendezvous %s:%lld %s%s%s expired: no rank came within %lld ms "
                            "(NCCLSHIM_RENDEZVOUS_IDLE_MS), %lld connection%s rejected", x->host, x->pid, x->listen,
                            x->id_hash ? " for ID " : "", x->id_hash ? x->id_hash : "", x->idle_ms, x->rejected,
                            x->rejected == 1 ? "" : "s");
        if (i)
            putc(',', out);
        js(out, s);
        free(s);
    }
    fputs("]", out);
}

void inspect_print_html(inspect_state *st, FILE *out)
{
    size_t np = HASH_COUNT(st->procs), i = 0;
    process **procs = xmalloc((np ? np : 1) * sizeof *procs);
    process *p, *ptmp;
    HASH_ITER(hh, st->procs, p, ptmp)
        procs[i++] = p;
    if (np)
        qsort(procs, np, sizeof *procs, proc_cmp);
    for (i = 0; i < np; i++)
        procs[i]->mark = (int)i + 1;

    double t0 = earliest(st);
    fputs(report_html_head, out);
    fprintf(out, "<script type=\"application/json\" id=\"data\">{\"t0\":%.6f,\"records\":%zu,"
            "\"nccl_lines\":%zu,", t0, st->nrecords, st->nccl_lines);
    write_procs(out, procs, np);
    write_comms(st, out);
    write_ranks(st, out, t0);
    comm_idx *store, *h = index_comms(st, &store);
    write_decisions(st, out, t0, h);
    write_events(st, out, t0, h);
    HASH_CLEAR(hh, h);
    free(store);
    write_notes(st, out);
    fputs("}</script>\n", out);
    fputs(report_html_tail, out);

    for (i = 0; i < np; i++)
        procs[i]->mark = 0;
    free(procs);
}
