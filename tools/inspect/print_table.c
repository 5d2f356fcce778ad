/* Human output: a summary header, one aligned row per communicator, then the
 * problems spelled out (the PROBLEMS column only counts them, to keep rows
 * within a terminal's width). */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>

enum { COL_GROUP, COL_PURPOSE, COL_ACTION, COL_RANKS, COL_HOSTS, COL_APIS, COL_INIT, COL_NET,
       COL_PROBLEMS, COL_TRAFFIC, NCOLS };
static const char *const headers[NCOLS] = {"GROUP", "PURPOSE", "ACTION", "RANKS", "HOSTS",
                                           "API", "INIT_MS", "NET", "PROBLEMS", "TRAFFIC"};

static char *join(const strlist *l, const char *sep)
{
    size_t n = 1;
    for (size_t i = 0; i < l->n; i++)
        n += strlen(l->v[i]) + strlen(sep);
    char *out = xmalloc(n);
    out[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            strcat(out, sep);
        strcat(out, l->v[i]);
    }
    return out;
}

char *inspect_traffic_string(op_stat *ops)
{
    strlist parts = {0};
    op_stat *o, *tmp;
    HASH_ITER(hh, ops, o, tmp) {
        char hb[32];
        humanize_bytes(o->bytes, hb, sizeof hb);
        strlist_add(&parts, xasprintf("%s:%llu/%s", o->name, o->count, hb));
    }
    char *s = parts.n ? join(&parts, " ") : xstrdup("-");
    strlist_free(&parts);
    return s;
}

static void row_cells(communicator *c, char *cell[NCOLS])
{
    cell[COL_GROUP] = xstrdup(c->short_group);
    cell[COL_PURPOSE] = xstrdup(c->purpose);
    cell[COL_ACTION] = xstrdup(c->action);
    cell[COL_RANKS] = xasprintf("%zu/%lld", c->ranks_seen, c->nranks);
    char *hosts = join(&c->hosts, ",");
    /* a long host list would push everything else off screen; -v lists them */
    if (strlen(hosts) > 24) {
        free(hosts);
        hosts = xasprintf("%zu hosts", c->hosts.n);
    }
    cell[COL_HOSTS] = hosts;
    cell[COL_APIS] = join(&c->apis, ",");
    cell[COL_INIT] = xasprintf("%lld", (c->init_us + 500) / 1000);
    cell[COL_NET] = xstrdup(c->network);
    cell[COL_PROBLEMS] = c->problems.n ? xasprintf("%zu", c->problems.n) : xstrdup("-");
    cell[COL_TRAFFIC] = inspect_traffic_string(c->ops);
}

static void print_header(inspect_state *st, FILE *out)
{
    strlist hosts = {0};
    size_t nproc = 0;
    process *p, *tmp;
    HASH_ITER(hh, st->procs, p, tmp) {
        nproc++;
        strlist_add_unique(&hosts, p->host);
    }
    fprintf(out, "%zu process%s on %zu host%s, %zu communicator%s\n", nproc, nproc == 1 ? "" : "es",
            hosts.n, hosts.n == 1 ? "" : "s", st->ncomms, st->ncomms == 1 ? "" : "s");
    strlist_free(&hosts);
    library_rec *l, *ltmp;
    HASH_ITER(hh, st->libs, l, ltmp) {
        fprintf(out, "library slot %lld: %s (version %lld.%lld.%lld, %d process%s)\n", l->slot,
                l->path, l->version / 10000, (l->version / 100) % 100, l->version % 100, l->nproc,
                l->nproc == 1 ? "" : "es");
    }
    for (size_t i = 0; i < st->warnings.n; i++) {
        warning_rec *w = &st->warnings.v[i];
        if (w->rank) {
            /* an ipc warning joined to its communicator: which one, and whether it came after the rank's end */
            char *sg = short_group(w->rank->group);
            fprintf(out, "warning %s:%lld %s (%s rank %lld%s): %s\n", w->host, w->pid, w->what, sg, w->rank->rank,
                    w->after_end ? ", after its end" : "", w->message);
            free(sg);
            continue;
        }
        fprintf(out, "warning %s:%lld %s: %s\n", w->host, w->pid, w->what, w->message);
    }
    for (size_t i = 0; i < st->expired.n; i++) {
        expired_rec *x = &st->expired.v[i];
        fprintf(out, "rendezvous %s:%lld %s%s%s expired: no rank came within %lld ms (NCCLSHIM_RENDEZVOUS_IDLE_MS), "
                "%lld connection%s rejected\n", x->host, x->pid, x->listen, x->id_hash ? " for ID " : "",
                x->id_hash ? x->id_hash : "", x->idle_ms, x->rejected, x->rejected == 1 ? "" : "s");
    }
    /* the root's verdicts whose ranks' records were not given */
    for (decision_rec *d = st->decisions; d; d = d->next) {
        if (d->group)
            continue;
        char *sid = short_group(d->decision_id);
        fprintf(out, "decision %s:%lld %s (%s): %s for %lld of %lld ranks; no rank of it in the inputs\n", d->host,
                d->pid, d->listen ? d->listen : "?", sid, d->action ? d->action : "?", d->arrived, d->nranks);
        free(sid);
    }
    for (size_t i = 0; i < st->peer_left.n; i++) {
        const peer_left_rec *p = &st->peer_left.v[i];
        if (p->group)
            continue;
        char *sid = short_group(p->decision_id);
        fprintf(out, "ipc_peer_left %s:%lld %s (%s): rank %lld left; no rank of it in the inputs\n", p->host, p->pid,
                p->listen ? p->listen : "?", sid, p->rank);
        free(sid);
    }
}

static void print_ranks(communicator *c, FILE *out)
{
    fprintf(out, "\nranks of %s:\n", c->group);
    const decision_rec *d = c->decision;
    if (d) {
        char *by = inspect_rejected_text(d, 1);
        fprintf(out, "  rendezvous: root %s (%s pid %lld), %s, %lld of %lld ranks arrived, %lld connection%s rejected%s%s\n",
                d->listen ? d->listen : "?", d->host ? d->host : "?", d->pid, d->stage ? d->stage : "?", d->arrived,
                d->nranks, d->rejected, d->rejected == 1 ? "" : "s", by ? ": " : "", by ? by : "");
        free(by);
    }
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        /* no NCCL communicator (drop, ipc, fail): the shim's handle says which one it was */
        char *comm = r->comm ? xstrdup(r->comm) : r->handle ? xasprintf("- handle %s", r->handle) : xstrdup("-");
        if (r->from_log) {
            fprintf(out, "  rank %lld: %s pid %lld tid %lld comm %s (NCCL log only: no shim record) %s net %s%s%s\n",
                    r->rank, r->host, r->pid, r->tid, comm, r->fn ? r->fn : "?", r->network ? r->network : "-",
                    r->net_failed ? ", after NCCL failed to initialize NET plugin " : "",
                    r->net_failed ? r->net_failed : "");
            free(comm);
            continue;
        }
        fprintf(out, "  rank %lld: %s pid %lld tid %lld comm %s api %s role %s purpose %s (%s) net %s\n",
                r->rank, r->host, r->pid, r->tid, comm, r->api ? r->api : "?",
                r->role ? r->role : "?", r->purpose ? r->purpose : "?",
                r->purpose_reason ? r->purpose_reason : "no reason recorded",
                r->network ? r->network : "-");
        free(comm);
        /* why the process was taken for training or inference: where a typo
         * in a setting or a title that matches no pattern shows */
        if (r->role_reason)
            fprintf(out, "          role: %s (%s)\n", r->role ? r->role : "?", r->role_reason);
        if (r->python0)
            fprintf(out, "          python: %s\n", r->python0);
        if (r->action)
            fprintf(out, "          action: %s (%s)\n", r->action,
                    r->action_reason ? r->action_reason : "no reason recorded");
        if (r->local_purpose && (!r->purpose || strcmp(r->local_purpose, r->purpose) != 0))
            fprintf(out, "          local purpose: %s (%s)\n", r->local_purpose,
                    r->local_purpose_reason ? r->local_purpose_reason : "no reason recorded");
        if (r->has_decision && r->dec_via_root) {
            char *sid = r->dec_id_norm ? short_group(r->dec_id) : xstrdup("-");
            fprintf(out, "          decision: by root %s (%s), %lld round%s, waited %.1f ms%s%s\n",
                    r->dec_root ? r->dec_root : "?", sid, r->dec_rounds, r->dec_rounds == 1 ? "" : "s",
                    (double)r->dec_wait_us / 1000.0, r->dec_fallback ? ": " : "",
                    r->dec_fallback ? r->dec_fallback : "");
            free(sid);
        } else if (r->has_decision) {
            fprintf(out, "          decision: fell back on this rank after %.1f ms (root %s): %s\n",
                    (double)r->dec_wait_us / 1000.0,
                    r->dec_root ? r->dec_root : "?", r->dec_fallback ? r->dec_fallback : "no reason recorded");
        }
        if (r->net_note)
            fprintf(out, "          net: %s (%s)\n", r->net ? r->net : "?", r->net_note);
        else if (r->net_by)
            fprintf(out, "          net told: %s (%s)\n", r->net ? r->net : "NCCL's choice", r->net_by);
        if (r->end && r->end->ipc.present) {
            const ipc_hops *h = &r->end->ipc;
            fprintf(out, "          ipc: in push %lld, pull %lld, staged %lld; out push %lld, pull %lld, staged %lld; "
                    "came first on %lld\n", h->in[HOP_PUSH], h->in[HOP_PULL], h->in[HOP_STAGED], h->out[HOP_PUSH],
                    h->out[HOP_PULL], h->out[HOP_STAGED], h->first);
            if (h->has_copy)
                fprintf(out, "          ipc copies: %lld by copy engines, %lld by the SMs (same GPU, NCCLSHIM_IPC_COPY=sm)\n",
                        h->ce, h->sm);
            if (h->has_vmm)
                fprintf(out, "          ipc cuMemCreate memory: %lld pieces sent, %lld mapped%s%s\n", h->vmm_sent,
                        h->vmm_mapped, h->vmm_note ? "; staged: " : "", h->vmm_note ? h->vmm_note : "");
        }
        for (size_t k = 0; k < c->ipc_warns.n; k++) {
            const warning_rec *w = c->ipc_warns.v[k];
            if (w->rank != r)
                continue;
            char *m = str_cut(w->message, 200);
            fprintf(out, "          warning %s%s: %s\n", w->what,
                    w->after_end ? " (after this rank's comm_end: its destroy's teardown)" : "", m);
            free(m);
        }
    }
}

void inspect_print_table(inspect_state *st, FILE *out, int verbose)
{
    print_header(st, out);
    if (st->ncomms == 0)
        return;
    char *(*cells)[NCOLS] = xmalloc(st->ncomms * sizeof *cells);
    size_t width[NCOLS];
    for (int k = 0; k < NCOLS; k++)
        width[k] = strlen(headers[k]);
    for (size_t i = 0; i < st->ncomms; i++) {
        row_cells(st->sorted[i], cells[i]);
        for (int k = 0; k < NCOLS; k++)
            if (strlen(cells[i][k]) > width[k])
                width[k] = strlen(cells[i][k]);
    }
    fputc('\n', out);
    for (int k = 0; k < NCOLS - 1; k++)
        fprintf(out, "%-*s  ", (int)width[k], headers[k]);
    fprintf(out, "%s\n", headers[NCOLS - 1]);
    for (size_t i = 0; i < st->ncomms; i++) {
        for (int k = 0; k < NCOLS; k++) {
            /* last column unpadded: no trailing blanks */
            if (k == NCOLS - 1)
                fprintf(out, "%s\n", cells[i][k]);
            else
                fprintf(out, "%-*s  ", (int)width[k], cells[i][k]);
            free(cells[i][k]);
        }
    }
    free(cells);
    int any = 0;
    for (size_t i = 0; i < st->ncomms; i++) {
        communicator *c = st->sorted[i];
        if (!c->decision_summary)
            continue;
        if (!any++)
            fputs("\ndecisions:\n", out);
        fprintf(out, "  %s: %s\n", c->short_group, c->decision_summary);
    }
    any = 0;
    for (size_t i = 0; i < st->ncomms; i++) {
        const communicator *c = st->sorted[i];
        const ipc_hops *h = &c->hops;
        if (!h->present)
            continue;
        if (!any++)
            fputs("\nipc broadcasts (hops, each once):\n", out);
        long long n = h->out[HOP_PUSH] + h->out[HOP_PULL] + h->out[HOP_STAGED];
        fprintf(out, "  %s: %lld hop%s: %lld pushed, %lld pulled, %lld staged%s\n", c->short_group, n,
                n == 1 ? "" : "s", h->out[HOP_PUSH], h->out[HOP_PULL], h->out[HOP_STAGED],
                h->out[HOP_STAGED] ? " (a buffer that could not be exported, e.g. cuMemCreate memory without a file "
                                     "descriptor handle: slower, far slower while kernels fill the GPU; docs/records.md)"
                                   : "");
        if (h->has_copy)
            fprintf(out, "    copies: %lld by copy engines, %lld by the SMs (the copy kernel, ranks on one GPU)\n", h->ce,
                    h->sm);
        if (h->has_vmm)
            fprintf(out, "    cuMemCreate memory (expandable segments) shared as file descriptors: %lld pieces sent, %lld "
                    "mapped%s%s\n", h->vmm_sent, h->vmm_mapped, h->vmm_note ? "; staged: " : "",
                    h->vmm_note ? h->vmm_note : "");
    }
    any = 0;
    for (size_t i = 0; i < st->ncomms; i++) {
        communicator *c = st->sorted[i];
        for (size_t k = 0; k < c->problems.n; k++) {
            if (!any++)
                fputs("\nproblems:\n", out);
            fprintf(out, "  %s: %s\n", c->short_group, c->problems.v[k]);
        }
    }
    if (verbose)
        for (size_t i = 0; i < st->ncomms; i++)
            print_ranks(st->sorted[i], out);
}
