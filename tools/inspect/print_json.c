/* --json: one document for scripts. Keys keep a fixed order and arrays are
 * sorted, so that two runs over the same input diff cleanly. */
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
    json_object_set_new(o, "purpose", jstr(r->purpose));
    json_object_set_new(o, "purpose_reason", jstr(r->purpose_reason));
    json_object_set_new(o, "action", jstr(r->action));
    json_object_set_new(o, "action_reason", jstr(r->action_reason));
    json_object_set_new(o, "duration_us", json_integer(r->duration_us));
    json_object_set_new(o, "result", json_integer(r->result));
    json_object_set_new(o, "network", jstr(r->network));
    json_object_set_new(o, "python", jstr(r->python0));
    json_object_set_new(o, "end", jstr(r->end ? (r->end->how ? r->end->how : "?") : NULL));
    json_object_set_new(o, "ops", r->end ? jops(r->end->ops) : json_object());
    json_object_set_new(o, "file", jstr(r->file));
    json_object_set_new(o, "line", json_integer(r->line));
    return o;
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

void inspect_print_json(inspect_state *st, FILE *out)
{
    json_t *doc = json_object();

    size_t np = HASH_COUNT(st->procs), i = 0;
    process **procs = xmalloc((np ? np : 1) * sizeof *procs);
    process *p, *ptmp;
    HASH_ITER(hh, st->procs, p, ptmp)
        procs[i++] = p;
    if (np)
        qsort(procs, np, sizeof *procs, proc_cmp);
    json_t *jp = json_array();
    for (i = 0; i < np; i++) {
        p = procs[i];
        json_array_append_new(jp, json_pack("{s:o,s:I,s:o,s:o,s:o,s:b}", "host", jstr(p->host),
                                            "pid", (json_int_t)p->pid, "title", jstr(p->title),
                                            "log_file", jstr(p->log_file), "shim_version",
                                            jstr(p->shim_version), "exited", p->has_exit));
    }
    free(procs);
    json_object_set_new(doc, "processes", jp);

    HASH_SORT(st->libs, lib_cmp);
    json_t *jl = json_array();
    library_rec *l, *ltmp;
    HASH_ITER(hh, st->libs, l, ltmp) {
        json_array_append_new(jl, json_pack("{s:I,s:o,s:I,s:i}", "slot", (json_int_t)l->slot, "path",
                                            jstr(l->path), "version", (json_int_t)l->version,
                                            "processes", l->nproc));
    }
    json_object_set_new(doc, "libraries", jl);

    json_t *jc = json_array();
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
        json_object_set_new(o, "problems", jlist(&c->problems));
        json_array_append_new(jc, o);
    }
    json_object_set_new(doc, "communicators", jc);

    json_t *jw = json_array();
    for (i = 0; i < st->warnings.n; i++) {
        warning_rec *w = &st->warnings.v[i];
        json_array_append_new(jw, json_pack("{s:o,s:I,s:o,s:o}", "host", jstr(w->host), "pid",
                                            (json_int_t)w->pid, "what", jstr(w->what), "message",
                                            jstr(w->message)));
    }
    json_object_set_new(doc, "warnings", jw);

    json_t *je = json_array();
    for (i = 0; i < st->errors.n; i++) {
        input_error *e = &st->errors.v[i];
        json_array_append_new(je, json_pack("{s:o,s:I,s:o,s:b}", "file", jstr(e->file), "line",
                                            (json_int_t)e->line, "reason", jstr(e->reason),
                                            "fatal", e->fatal));
    }
    json_object_set_new(doc, "input_errors", je);

    json_dumpf(doc, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', out);
    json_decref(doc);
}
