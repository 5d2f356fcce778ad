/* --json: one document for scripts. Keys keep a fixed order and arrays are
 * sorted, so that two runs over the same input diff cleanly; each element of
 * the top-level arrays is one line. */
#include "inspect.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Strings from NCCL logs and argv were never UTF-8 validated; jansson
 * refuses those, and a missing key would be worse than a '?'. */
static json_t *jstr(const char *s)
{
    if (!s)
        return json_null();
    json_t *j = json_string(s);
    if (j)
        return j;
    char *copy = xstrdup(s);
    for (char *p = copy; *p; p++)
        if ((unsigned char)*p >= 0x80 || (unsigned char)*p < 0x20)
            *p = '?';
    j = json_string(copy);
    free(copy);
    return j ? j : json_null();
}

static json_t *jops(op_stat *ops)
{
    json_t *o = json_object();
    op_stat *op, *tmp;
    HASH_ITER(hh, ops, op, tmp) {
        json_object_set_new(o, op->name, json_pack("{s:I,s:I}", "count", (json_int_t)op->count,
                                                   "bytes", (json_int_t)op->bytes));
    }
    return o;
}

static json_t *jhopcounts(const long long *v)
{
    json_t *o = json_object();
    for (int k = 0; k < NHOPS; k++)
        json_object_set_new(o, hop_names[k], json_integer(v[k]));
    return o;
}

/* comm_end's `ipc` as the shim wrote it; null for other communicators. */
static json_t *jhops(const ipc_hops *h)
{
    if (!h->present)
        return json_null();
    json_t *o = json_pack("{s:I,s:o,s:o}", "first", (json_int_t)h->first, "in", jhopcounts(h->in), "out",
                          jhopcounts(h->out));
    if (h->has_copy)
        json_object_set_new(o, "copy", json_pack("{s:I,s:I}", "sm", (json_int_t)h->sm, "ce", (json_int_t)h->ce));
    if (h->has_vmm) {
        json_t *v = json_pack("{s:I,s:I}", "pieces_sent", (json_int_t)h->vmm_sent, "pieces_mapped",
                              (json_int_t)h->vmm_mapped);
        if (h->vmm_note)
            json_object_set_new(v, "note", json_string(h->vmm_note));
        json_object_set_new(o, "vmm", v);
    }
    return o;
}

static json_t *jlist(const strlist *l)
{
    json_t *a = json_array();
    for (size_t i = 0; i < l->n; i++)
        json_array_append_new(a, jstr(l->v[i]));
    return a;
}

static json_t *jrank(rank_rec *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "rank", json_integer(r->rank));
    json_object_set_new(o, "nranks", json_integer(r->nranks));
    json_object_set_new(o, "host", jstr(r->host));
    json_object_set_new(o, "pid", json_integer(r->pid));
    json_object_set_new(o, "tid", json_integer(r->tid));
    json_object_set_new(o, "ts", json_real(r->ts));
    json_object_set_new(o, "fn", jstr(r->fn));
    json_object_set_new(o, "comm", jstr(r->comm));
    json_object_set_new(o, "handle", jstr(r->handle));
    json_object_set_new(o, "api", jstr(r->api));
    json_object_set_new(o, "role", jstr(r->role));
    json_object_set_new(o, "role_reason", jstr(r->role_reason));
    json_object_set_new(o, "purpose", jstr(r->purpose));
    json_object_set_new(o, "purpose_reason", jstr(r->purpose_reason));
    json_object_set_new(o, "action", jstr(r->action));
    json_object_set_new(o, "action_reason", jstr(r->action_reason));
    json_object_set_new(o, "local_purpose", jstr(r->local_purpose));
    json_object_set_new(o, "local_purpose_reason", jstr(r->local_purpose_reason));
    json_object_set_new(o, "net", jstr(r->net));
    json_object_set_new(o, "net_by", jstr(r->net_by));
    json_object_set_new(o, "net_note", jstr(r->net_note));
    if (r->has_decision)
        json_object_set_new(o, "decision",
                            json_pack("{s:o,s:o,s:o,s:I,s:I,s:I,s:o}", "by", jstr(r->dec_by), "id", jstr(r->dec_id),
                                      "root", jstr(r->dec_root), "rounds", (json_int_t)r->dec_rounds, "wait_us",
                                      (json_int_t)r->dec_wait_us, "hosts", (json_int_t)r->dec_hosts, "fallback",
                                      jstr(r->dec_fallback)));
    else
        json_object_set_new(o, "decision", json_null());
    json_object_set_new(o, "duration_us", json_integer(r->duration_us));
    json_object_set_new(o, "result", json_integer(r->result));
    json_object_set_new(o, "network", jstr(r->network));
    json_object_set_new(o, "nccl_coll_channels", r->coll_channels > 0 ? json_integer(r->coll_channels) : json_null());
    json_object_set_new(o, "nccl_comm_id", jstr(r->commid));
    json_object_set_new(o, "net_failed", jstr(r->net_failed));
    json_object_set_new(o, "from_nccl_log", json_boolean(r->from_log));
    json_object_set_new(o, "python", jstr(r->python0));
    json_object_set_new(o, "end", jstr(r->end ? (r->end->how ? r->end->how : "?") : NULL));
    json_object_set_new(o, "ops", r->end ? jops(r->end->ops) : json_object());
    json_object_set_new(o, "ipc", r->end ? jhops(&r->end->ipc) : json_null());
    json_object_set_new(o, "end_action", jstr(r->end ? r->end->action : NULL));
    json_object_set_new(o, "end_decision_id", jstr(r->end ? r->end->decision_id : NULL));
    json_object_set_new(o, "file", jstr(r->file));
    json_object_set_new(o, "line", json_integer(r->line));
    return o;
}

/* "key=n,key=n" (read_records.c) back into {key: n}; {} when none. */
static json_t *jcounts(const char *s)
{
    json_t *o = json_object();
    char *copy = xstrdup(s ? s : "");
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (eq) {
            *eq = '\0';
            json_object_set_new(o, item, json_integer(strtoll(eq + 1, NULL, 10)));
        }
    }
    free(copy);
    return o;
}

static json_t *jdecision(const decision_rec *d)
{
    if (!d)
        return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "host", jstr(d->host));
    json_object_set_new(o, "pid", json_integer(d->pid));
    json_object_set_new(o, "ts", json_real(d->ts));
    json_object_set_new(o, "stage", jstr(d->stage));
    json_object_set_new(o, "listen", jstr(d->listen));
    json_object_set_new(o, "decision_id", jstr(d->decision_id));
    json_object_set_new(o, "group", jstr(d->group));
    json_object_set_new(o, "nranks", json_integer(d->nranks));
    json_object_set_new(o, "arrived", json_integer(d->arrived));
    json_object_set_new(o, "missing", jstr(d->missing));
    json_object_set_new(o, "purpose", jstr(d->purpose));
    json_object_set_new(o, "purpose_reason", jstr(d->purpose_reason));
    json_object_set_new(o, "action", jstr(d->action));
    json_object_set_new(o, "action_reason", jstr(d->action_reason));
    json_object_set_new(o, "rule", json_integer(d->rule));
    json_object_set_new(o, "hosts", json_integer(d->hosts));
    json_object_set_new(o, "training", json_integer(d->training));
    json_object_set_new(o, "inference", json_integer(d->inference));
    json_object_set_new(o, "unknown", json_integer(d->unknown));
    json_object_set_new(o, "rejected_connections", json_integer(d->rejected));
    json_object_set_new(o, "rejected_by", jcounts(d->rejected_by));
    json_object_set_new(o, "wait_us", json_integer(d->wait_us));
    json_t *a = json_array();
    for (size_t i = 0; i < d->nlisted; i++) {
        const decision_rank *k = &d->ranks[i];
        json_array_append_new(a, json_pack("{s:I,s:o,s:I,s:I,s:o,s:o,s:o}", "rank", (json_int_t)k->rank, "host",
                                           jstr(k->host), "pid", (json_int_t)k->pid, "cuda_device",
                                           (json_int_t)k->cuda_device, "role", jstr(k->role), "api", jstr(k->api),
                                           "local_purpose", jstr(k->local_purpose)));
    }
    json_object_set_new(o, "ranks", a);
    json_object_set_new(o, "file", jstr(d->file));
    json_object_set_new(o, "line", json_integer(d->line));
    return o;
}

static json_t *jexpired(const expired_rec *x)
{
    if (!x)
        return json_null();
    return json_pack("{s:o,s:I,s:o,s:o,s:I,s:I}", "host", jstr(x->host), "pid", (json_int_t)x->pid, "listen",
                     jstr(x->listen), "id_hash", jstr(x->id_hash), "idle_ms", (json_int_t)x->idle_ms,
                     "rejected_connections", (json_int_t)x->rejected);
}

static json_t *jpeer_left(const peer_left_rec *p)
{
    return json_pack("{s:o,s:I,s:f,s:o,s:o,s:I,s:o,s:b}", "host", jstr(p->host), "pid", (json_int_t)p->pid, "ts",
                     p->ts, "listen", jstr(p->listen), "decision_id", jstr(p->decision_id), "rank",
                     (json_int_t)p->rank, "group", jstr(p->group), "at_destroy", p->at_destroy);
}

static int proc_cmp(const void *a, const void *b)
{
    const process *x = *(process *const *)a, *y = *(process *const *)b;
    int c = strcmp(x->host, y->host);
    return c ? c : (x->pid > y->pid) - (x->pid < y->pid);
}

static int lib_cmp(library_rec *a, library_rec *b)
{
    return strcmp(a->key, b->key);
}

/*
 * The document is written as it is built, one array element at a time (each
 * on its own line), never held whole: on a 200 MB record file the
 * whole jansson tree took 919 MB where the table view needs 203 MB (issue 17;
 * docs/benchmarks.md, "inspect --json memory").
 */
typedef struct {
    FILE *out;
    int n; /* elements written in the open array */
} jstream;

static void js_array_open(jstream *js, const char *key, int first)
{
    fprintf(js->out, "%s  \"%s\": [", first ? "" : ",\n", key);
    js->n = 0;
}

/* Writes `v` as the next element of the open array and frees it. */
static void js_elem(jstream *js, json_t *v)
{
    fputs(js->n++ ? ",\n    " : "\n    ", js->out);
    json_dumpf(v, js->out, JSON_INDENT(0) | JSON_PRESERVE_ORDER); /* one line, ", " and ": " */
    json_decref(v);
}

static void js_array_close(jstream *js)
{
    fputs(js->n ? "\n  ]" : "]", js->out);
}

/* The processes, ordered by host and pid. */
static void print_processes(jstream *js, inspect_state *st)
{
    size_t np = HASH_COUNT(st->procs), i = 0;
    process **procs = xmalloc((np ? np : 1) * sizeof *procs);
    process *p, *ptmp;
    HASH_ITER(hh, st->procs, p, ptmp)
        procs[i++] = p;
    if (np)
        qsort(procs, np, sizeof *procs, proc_cmp);
    js_array_open(js, "processes", 1);
    for (i = 0; i < np; i++) {
        p = procs[i];
        js_elem(js, json_pack("{s:o,s:I,s:o,s:o,s:o,s:b}", "host", jstr(p->host),
                              "pid", (json_int_t)p->pid, "title", jstr(p->title),
                              "log_file", jstr(p->log_file), "shim_version",
                              jstr(p->shim_version), "exited", p->has_exit));
    }
    free(procs);
    js_array_close(js);
}

static void print_libraries(jstream *js, inspect_state *st)
{
    HASH_SORT(st->libs, lib_cmp);
    js_array_open(js, "libraries", 0);
    library_rec *l, *ltmp;
    HASH_ITER(hh, st->libs, l, ltmp) {
        js_elem(js, json_pack("{s:I,s:o,s:I,s:i}", "slot", (json_int_t)l->slot, "path",
                              jstr(l->path), "version", (json_int_t)l->version,
                              "processes", l->nproc));
    }
    js_array_close(js);
}

static void print_warnings(jstream *js, inspect_state *st)
{
    js_array_open(js, "warnings", 0);
    for (size_t i = 0; i < st->warnings.n; i++) {
        warning_rec *w = &st->warnings.v[i];
        json_t *jg = w->rank ? jstr(w->rank->group) : json_null();
        json_t *jr = w->rank ? json_integer(w->rank->rank) : json_null();
        js_elem(js, json_pack("{s:o,s:I,s:f,s:o,s:o,s:o,s:o,s:b}", "host", jstr(w->host), "pid",
                              (json_int_t)w->pid, "ts", w->ts, "what", jstr(w->what), "message",
                              jstr(w->message), "group", jg, "rank", jr, "after_end", w->after_end));
    }
    js_array_close(js);
}

/* The rendezvous' records, and the lines the tool could not read. */
static void print_rendezvous_and_errors(jstream *js, inspect_state *st)
{
    size_t i;
    js_array_open(js, "decisions", 0);
    for (decision_rec *d = st->decisions; d; d = d->next)
        js_elem(js, jdecision(d));
    js_array_close(js);
    js_array_open(js, "rendezvous_expired", 0);
    for (i = 0; i < st->expired.n; i++)
        js_elem(js, jexpired(&st->expired.v[i]));
    js_array_close(js);
    js_array_open(js, "ipc_peer_left", 0);
    for (i = 0; i < st->peer_left.n; i++)
        js_elem(js, jpeer_left(&st->peer_left.v[i]));
    js_array_close(js);

    js_array_open(js, "input_errors", 0);
    for (i = 0; i < st->errors.n; i++) {
        input_error *e = &st->errors.v[i];
        js_elem(js, json_pack("{s:o,s:I,s:o,s:b,s:I}", "file", jstr(e->file), "line",
                              (json_int_t)e->line, "reason", jstr(e->reason),
                              "fatal", e->fatal, "bad_lines", (json_int_t)e->bad_lines));
    }
    js_array_close(js);
}

void inspect_print_json(inspect_state *st, FILE *out)
{
    jstream js = {out, 0};
    size_t i;
    fputs("{\n", out);
    print_processes(&js, st);
    print_libraries(&js, st);
    js_array_open(&js, "communicators", 0);
    for (i = 0; i < st->ncomms; i++) {
        communicator *c = st->sorted[i];
        json_t *o = json_object();
        json_object_set_new(o, "group", jstr(c->group));
        json_object_set_new(o, "short", jstr(c->short_group));
        json_object_set_new(o, "purpose", jstr(c->purpose));
        json_object_set_new(o, "action", jstr(c->action));
        json_object_set_new(o, "nranks", json_integer(c->nranks));
        json_object_set_new(o, "ranks_seen", json_integer((json_int_t)c->ranks_seen));
        json_t *jr = json_array();
        for (size_t k = 0; k < c->nranks_rec; k++)
            json_array_append_new(jr, jrank(c->ranks[k]));
        json_object_set_new(o, "ranks", jr);
        json_object_set_new(o, "hosts", jlist(&c->hosts));
        json_object_set_new(o, "apis", jlist(&c->apis));
        json_object_set_new(o, "init_ms", json_real((double)c->init_us / 1000.0));
        json_object_set_new(o, "network", jstr(c->network));
        json_object_set_new(o, "ops", jops(c->ops));
        /* each hop once: counted on its sender's side */
        json_object_set_new(o, "ipc_hops", c->hops.present ? jhopcounts(c->hops.out) : json_null());
        json_object_set_new(o, "root", jstr(c->root));
        json_object_set_new(o, "decision_summary", jstr(c->decision_summary));
        json_object_set_new(o, "fell_back", json_boolean(c->fell_back));
        json_object_set_new(o, "decision", jdecision(c->decision));
        json_object_set_new(o, "expired", jexpired(c->expired));
        json_t *jl2 = json_array();
        for (size_t k = 0; k < c->peer_left.n; k++)
            json_array_append_new(jl2, jpeer_left(c->peer_left.v[k]));
        json_object_set_new(o, "ipc_peer_left", jl2);
        json_object_set_new(o, "ipc_peer_lost", json_boolean(c->ipc_lost));
        json_object_set_new(o, "problems", jlist(&c->problems));
        js_elem(&js, o);
    }
    js_array_close(&js);
    print_warnings(&js, st);
    print_rendezvous_and_errors(&js, st);
    fputs("\n}\n", out);
}
