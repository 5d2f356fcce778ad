/* Parses one JSON-lines record (docs/records.md) and stores the facts the
 * later passes need. Anything malformed is reported as file:line and the line
 * is dropped whole: a half-stored record would produce confusing joins. */
#include "inspect.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct ctx {
    inspect_state *st;
    const char *file;
    long line;
    int bad;
    const char *prefix;     /* "decision." while parsing a nested object: names the field in errors */
} ctx;

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static void bad_field(ctx *c, const char *key, const json_t *v, const char *want)
{
    if (c->bad)
        return;
    c->bad = 1;
    const char *pre = c->prefix ? c->prefix : "";
    if (v)
        inspect_error(c->st, c->file, c->line, 0, "field '%s%s' is %s, expected %s", pre, key,
                      json_type_name(v), want);
    else
        inspect_error(c->st, c->file, c->line, 0, "missing field '%s%s' (%s)", pre, key, want);
}

/* null counts as absent: the shim writes null for "not known". */
static char *get_str(ctx *c, json_t *o, const char *key, int required)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required)
            bad_field(c, key, NULL, "a string");
        return NULL;
    }
    if (!json_is_string(v)) {
        bad_field(c, key, v, "a string");
        return NULL;
    }
    return xstrdup(json_string_value(v));
}

/*
 * Which process a load record is (newer shims: host identity and start
 * time).  The tool joins records by host and pid; two containers of one host
 * name in different PID namespaces can share both, and their records would
 * mix: the second identity is kept, for a problem (check.c).  An exec keeps
 * identity and start: one process, rightly joined.
 */
static void note_who(json_t *o, process *p)
{
    json_t *hi = json_object_get(o, "host_identity"), *id = hi ? json_object_get(hi, "id") : NULL;
    json_t *st = json_object_get(o, "start_ticks");
    if (!json_is_string(id) || !json_is_integer(st))
        return;
    char *who = xasprintf("%s, started at tick %lld", json_string_value(id), (long long)json_integer_value(st));
    if (!p->who)
        p->who = who;
    else if (strcmp(p->who, who) != 0 && !p->other_who)
        p->other_who = who;
    else
        free(who);
}

/* An optional object of non-negative counts, as "key=n,key=n" (NULL if absent or empty). */
static char *get_counts(ctx *c, json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_object(v)) {
        bad_field(c, key, v, "an object of counts");
        return NULL;
    }
    char *out = NULL;
    const char *k;
    json_t *n;
    json_object_foreach(v, k, n) {
        if (!json_is_integer(n) || json_integer_value(n) < 0 || strchr(k, '=') || strchr(k, ',')) {
            bad_field(c, key, v, "an object of counts (name: non-negative integer)");
            free(out);
            return NULL;
        }
        char *o2 = xasprintf("%s%s%s=%lld", out ? out : "", out ? "," : "", k, (long long)json_integer_value(n));
        free(out);
        out = o2;
    }
    return out;
}

static long long get_int(ctx *c, json_t *o, const char *key, int required, long long dflt, int *present)
{
    json_t *v = json_object_get(o, key);
    if (present)
        *present = 0;
    if (!v || json_is_null(v)) {
        if (required)
            bad_field(c, key, NULL, "an integer");
        return dflt;
    }
    if (!json_is_integer(v)) {
        bad_field(c, key, v, "an integer");
        return dflt;
    }
    if (present)
        *present = 1;
    return (long long)json_integer_value(v);
}

static double get_num(ctx *c, json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0.0;
    if (!json_is_number(v)) {
        bad_field(c, key, v, "a number");
        return 0.0;
    }
    return json_number_value(v);
}

static json_t *get_obj(ctx *c, json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_object(v)) {
        bad_field(c, key, v, "an object");
        return NULL;
    }
    return v;
}

/* Object `key` of o, whose fields are reported under `prefix` from now on;
 * NULL (the prefix unchanged) when it is absent, not an object, or the
 * record is already bad. */
static json_t *enter_obj(ctx *c, json_t *o, const char *key, const char *prefix)
{
    json_t *v = c->bad ? NULL : get_obj(c, o, key);
    if (v)
        c->prefix = prefix;
    return v;
}

/* ops: {"AllReduce":{"count":N,"bytes":N},...}; op names are kept as given so
 * that kinds added to the shim later still show up. */
static int parse_ops(ctx *c, json_t *ops, op_stat **out)
{
    const char *name;
    json_t *v;
    json_object_foreach(ops, name, v) {
        if (!json_is_object(v)) {
            bad_field(c, "ops", v, "an object of {count,bytes} objects");
            return -1;
        }
        json_t *cnt = json_object_get(v, "count"), *bytes = json_object_get(v, "bytes");
        if ((cnt && !json_is_integer(cnt)) || (bytes && !json_is_integer(bytes))) {
            bad_field(c, "ops.count/bytes", cnt && !json_is_integer(cnt) ? cnt : bytes,
                      "an integer");
            return -1;
        }
        json_int_t nc = cnt ? json_integer_value(cnt) : 0, nb = bytes ? json_integer_value(bytes) : 0;
        op_add(out, name, nc > 0 ? (unsigned long long)nc : 0, nb > 0 ? (unsigned long long)nb : 0);
    }
    return 0;
}

const char *const hop_names[NHOPS] = {"push", "pull", "staged"};

/* ipc: {"first":N,"in":{"push":N,"pull":N,"staged":N},"out":{...}}; kinds
 * the shim may add later are ignored, counts must be integers >= 0. */
static void parse_ipc(ctx *c, json_t *o, ipc_hops *h)
{
    c->prefix = "ipc.";
    h->first = get_int(c, o, "first", 0, 0, NULL);
    for (int way = 0; way < 2 && !c->bad; way++) {
        json_t *w = get_obj(c, o, way ? "out" : "in");
        c->prefix = way ? "ipc.out." : "ipc.in.";
        for (int k = 0; w && k < NHOPS && !c->bad; k++)
            (way ? h->out : h->in)[k] = get_int(c, w, hop_names[k], 0, 0, NULL);
        c->prefix = "ipc.";
    }
    json_t *cp = enter_obj(c, o, "copy", "ipc.copy.");
    if ((h->has_copy = cp != NULL)) {
        h->sm = get_int(c, cp, "sm", 0, 0, NULL);
        h->ce = get_int(c, cp, "ce", 0, 0, NULL);
        c->prefix = "ipc.";
    }
    json_t *vm = enter_obj(c, o, "vmm", "ipc.vmm.");
    if ((h->has_vmm = vm != NULL)) {
        h->vmm_sent = get_int(c, vm, "pieces_sent", 0, 0, NULL);
        h->vmm_mapped = get_int(c, vm, "pieces_mapped", 0, 0, NULL);
        h->vmm_note = get_str(c, vm, "note", 0);
    }
    c->prefix = NULL;
    int neg = h->first < 0 || h->sm < 0 || h->ce < 0 || h->vmm_sent < 0 || h->vmm_mapped < 0;
    for (int k = 0; k < NHOPS; k++)
        neg |= h->in[k] < 0 || h->out[k] < 0;
    if (!c->bad && neg) {
        c->bad = 1;
        inspect_error(c->st, c->file, c->line, 0, "field 'ipc' has a negative count");
    }
    h->present = !c->bad;
}

/* A decision id as a join key: the numeric value (norm_comm_ptr), NULL for
 * none or 0 (a rank that fell back before it heard the root). */
static char *norm_id(const char *s)
{
    if (!s)
        return NULL;
    char *n = norm_comm_ptr(s);
    if (strcmp(n, "0") == 0) {
        free(n);
        return NULL;
    }
    return n;
}

/* The comm record's `decision` object (records.md): how the action was decided. */
static void parse_comm_decision(ctx *c, json_t *d, rank_rec *r)
{
    r->has_decision = 1;
    c->prefix = "decision.";
    r->dec_by = get_str(c, d, "by", 0);
    r->dec_id = get_str(c, d, "id", 0);
    r->dec_root = get_str(c, d, "root", 0);
    r->dec_fallback = get_str(c, d, "fallback", 0);
    r->dec_fallback_kind = get_str(c, d, "fallback_kind", 0);
    r->dec_rounds = get_int(c, d, "rounds", 0, 0, NULL);
    r->dec_wait_us = get_int(c, d, "wait_us", 0, 0, NULL);
    r->dec_hosts = get_int(c, d, "hosts", 0, 0, NULL);
    c->prefix = NULL;
    r->dec_via_root = r->dec_by && strcmp(r->dec_by, "root") == 0;
    r->dec_id_norm = norm_id(r->dec_id);
}

/*
 * Non-blocking inits still in progress (result ncclInProgress, 7), by
 * process and comm pointer, the latest last: a comm_init_end finishes the
 * latest (NCCL reuses addresses), in constant time however many the process
 * made before.
 */
typedef struct pending_init {
    char *key;              /* "host:pid:comm" */
    struct { rank_rec **v; size_t n, cap; } ranks;
    UT_hash_handle hh;
} pending_init;

static char *pending_key(const char *host, long long pid, const char *comm_norm)
{
    return xasprintf("%s:%lld:%s", host, pid, comm_norm);
}

static void pending_push(inspect_state *st, rank_rec *r)
{
    char *key = pending_key(r->host, r->pid, r->comm_norm);
    pending_init *p;
    HASH_FIND_STR(st->pending_inits, key, p);
    if (p) {
        free(key);
    } else {
        p = xmalloc(sizeof *p);
        memset(p, 0, sizeof *p);
        p->key = key;
        HASH_ADD_KEYPTR(hh, st->pending_inits, p->key, strlen(p->key), p);
    }
    VEC_RESERVE(p->ranks, 2);
    p->ranks.v[p->ranks.n++] = r;
}

/* The latest pending init of that process and comm pointer, or NULL. */
static rank_rec *pending_latest(inspect_state *st, const char *host, long long pid, const char *comm_norm)
{
    char *key = pending_key(host, pid, comm_norm);
    pending_init *p;
    HASH_FIND_STR(st->pending_inits, key, p);
    free(key);
    return p && p->ranks.n ? p->ranks.v[p->ranks.n - 1] : NULL;
}

/* r, the latest pending of its key, is no longer in progress. */
static void pending_pop(inspect_state *st, const rank_rec *r)
{
    char *key = pending_key(r->host, r->pid, r->comm_norm);
    pending_init *p;
    HASH_FIND_STR(st->pending_inits, key, p);
    free(key);
    if (p && p->ranks.n && p->ranks.v[p->ranks.n - 1] == r)
        p->ranks.n--;
}

void inspect_records_free(inspect_state *st)
{
    pending_init *p, *tmp;
    HASH_ITER(hh, st->pending_inits, p, tmp) {
        HASH_DEL(st->pending_inits, p);
        free(p->key);
        free(p->ranks.v);
        free(p);
    }
}

static void feed_comm(ctx *c, json_t *o, const char *host, long long pid, long long tid, double ts)
{
    rank_rec *r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->group = get_str(c, o, "group", 1);
    r->rank = get_int(c, o, "rank", 1, -1, NULL);
    r->nranks = get_int(c, o, "nranks", 1, 0, NULL);
    r->fn = get_str(c, o, "fn", 0);
    r->comm = get_str(c, o, "comm", 0);
    r->handle = get_str(c, o, "handle", 0);
    r->id_hash = get_str(c, o, "id_hash", 0);
    r->cuda_device = get_int(c, o, "cuda_device", 0, -1, NULL);
    r->result = get_int(c, o, "result", 0, 0, NULL);
    r->result_str = get_str(c, o, "result_str", 0);
    r->duration_us = get_int(c, o, "duration_us", 0, 0, NULL);
    r->title = get_str(c, o, "title", 0);
    r->role = get_str(c, o, "role", 0);
    r->role_reason = get_str(c, o, "role_reason", 0);
    r->purpose = get_str(c, o, "purpose", 0);
    r->purpose_reason = get_str(c, o, "purpose_reason", 0);
    r->action = get_str(c, o, "action", 0);
    r->action_reason = get_str(c, o, "action_reason", 0);
    r->local_purpose = get_str(c, o, "local_purpose", 0);
    r->local_purpose_reason = get_str(c, o, "local_purpose_reason", 0);
    r->net = get_str(c, o, "net", 0);
    r->net_note = get_str(c, o, "net_note", 0);
    r->net_by = get_str(c, o, "net_by", 0);
    r->unprotected = get_str(c, o, "unprotected", 0);
    r->unrecognized = get_str(c, o, "unrecognized", 0);
    r->gin_type = r->railed_gin_type = -1;
    json_t *props = get_obj(c, o, "nccl_properties");
    if (props) {
        c->prefix = "nccl_properties.";
        r->gin_type = get_int(c, props, "ginType", 0, -1, NULL);
        r->railed_gin_type = get_int(c, props, "railedGinType", 0, -1, NULL);
        c->prefix = NULL;
    }
    json_t *dec = get_obj(c, o, "decision");
    if (dec)
        parse_comm_decision(c, dec, r);
    json_t *caller = get_obj(c, o, "caller");
    if (caller) {
        c->prefix = "caller.";
        r->api = get_str(c, caller, "api", 0);
        r->caller_lib = get_str(c, caller, "lib", 0);
        c->prefix = NULL;
    }
    json_t *py = json_object_get(o, "python");
    if (py && !json_is_null(py)) {
        if (!json_is_array(py))
            bad_field(c, "python", py, "an array of strings");
        else if (json_array_size(py) > 0) {
            json_t *f = json_array_get(py, 0);
            if (!json_is_string(f))
                bad_field(c, "python[0]", f, "a string");
            else
                r->python0 = xstrdup(json_string_value(f));
        }
    }
    if (!c->bad && r->rank < 0) {
        c->bad = 1;
        inspect_error(c->st, c->file, c->line, 0, "field 'rank' is negative (%lld)", r->rank);
    }
    r->host = xstrdup(host);
    r->pid = pid;
    r->tid = tid;
    r->ts = ts;
    r->file = xstrdup(c->file);
    r->line = c->line;
    if (c->bad) {
        rank_free(r);
        return;
    }
    r->comm_norm = r->comm ? norm_comm_ptr(r->comm) : NULL;
    process *p = inspect_process(c->st, host, pid);
    if (!p->title && r->title)
        p->title = xstrdup(r->title);
    *c->st->ranks_tail = r;
    c->st->ranks_tail = &r->next;
    c->st->nrecords++;
    if (r->result == 7 && r->comm_norm)
        pending_push(c->st, r);
}

/* How a non-blocking init ended (result ncclInProgress in its comm record):
 * the rank's result becomes the final one, so that an init that failed
 * there is reported as any failed init.  The comm record comes first in the
 * same process's file; one not found is skipped. */
static void feed_comm_init_end(ctx *c, json_t *o, const char *host, long long pid)
{
    char *comm = get_str(c, o, "comm", 1);
    long long result = get_int(c, o, "result", 1, 0, NULL);
    char *result_str = get_str(c, o, "result_str", 0);
    long long dev = get_int(c, o, "cuda_device", 0, -1, NULL);
    char *norm = (!c->bad && comm) ? norm_comm_ptr(comm) : NULL;
    rank_rec *hit = norm ? pending_latest(c->st, host, pid, norm) : NULL; /* the latest: an address NCCL reused */
    if (hit) {
        if (result != 7)
            pending_pop(c->st, hit);
        hit->result = result;
        free(hit->result_str);
        hit->result_str = result_str;
        result_str = NULL;
        if (hit->cuda_device < 0)
            hit->cuda_device = dev;
        c->st->nrecords++;
    }
    free(norm);
    free(comm);
    free(result_str);
}

static void feed_comm_end(ctx *c, json_t *o, const char *host, long long pid, double ts)
{
    comm_end_rec *e = xmalloc(sizeof *e);
    memset(e, 0, sizeof *e);
    char *comm = get_str(c, o, "comm", 0);
    e->handle = get_str(c, o, "handle", 0);
    e->group = get_str(c, o, "group", 0);
    e->how = get_str(c, o, "how", 0);
    e->action = get_str(c, o, "action", 0);
    e->decision_id = get_str(c, o, "decision_id", 0);
    e->rank = get_int(c, o, "rank", 0, -1, &e->has_rank);
    e->result = get_int(c, o, "result", 0, 0, NULL);
    e->devcomms = get_int(c, o, "devcomms", 0, 0, NULL);
    json_t *ops = get_obj(c, o, "ops");
    if (ops && !c->bad)
        parse_ops(c, ops, &e->ops);
    json_t *ipc = c->bad ? NULL : get_obj(c, o, "ipc");
    if (ipc && !c->bad)
        parse_ipc(c, ipc, &e->ipc);
    if (!c->bad && !comm && !e->handle && !(e->group && e->has_rank)) {
        c->bad = 1;
        inspect_error(c->st, c->file, c->line, 0,
                      "comm_end names no communicator (no comm, handle, or group+rank)");
    }
    e->comm_norm = comm ? norm_comm_ptr(comm) : NULL;
    free(comm);
    if (c->bad) {
        comm_end_free(e); /* host is not set yet: free(NULL) */
        return;
    }
    e->host = xstrdup(host);
    e->pid = pid;
    e->ts = ts;
    e->next = c->st->ends;
    c->st->ends = e;
    c->st->nrecords++;
}

static void feed_library(ctx *c, json_t *o)
{
    long long slot = get_int(c, o, "slot", 0, -1, NULL);
    long long version = get_int(c, o, "version", 0, 0, NULL);
    char *path = get_str(c, o, "path", 1);
    if (c->bad) {
        free(path);
        return;
    }
    /* One library reached by two paths is listed once (norm_path). */
    char *plain = norm_path(path);
    free(path);
    path = plain;
    char *key = xasprintf("%lld|%s|%lld", slot, path, version);
    library_rec *l;
    HASH_FIND_STR(c->st->libs, key, l);
    if (l) {
        l->nproc++;
        free(key);
        free(path);
    } else {
        l = xmalloc(sizeof *l);
        l->key = key;
        l->slot = slot;
        l->version = version;
        l->path = path;
        l->nproc = 1;
        HASH_ADD_KEYPTR(hh, c->st->libs, l->key, strlen(l->key), l);
    }
    c->st->nrecords++;
}

static void feed_warning(ctx *c, json_t *o, const char *host, long long pid, double ts)
{
    char *what = get_str(c, o, "what", 0), *msg = get_str(c, o, "message", 0);
    if (c->bad) {
        free(what);
        free(msg);
        return;
    }
    inspect_state *st = c->st;
    VEC_RESERVE(st->warnings, 4);
    warning_rec *w = &st->warnings.v[st->warnings.n++];
    memset(w, 0, sizeof *w);
    w->host = xstrdup(host);
    w->pid = pid;
    w->ts = ts;
    w->result = -1;
    w->what = what ? what : xstrdup("?");
    w->message = msg ? msg : xstrdup("");
    st->nrecords++;
}

/* ranks: [{rank,host,pid,cuda_device,role,api,local_purpose}], the first 32. */
static void parse_decision_ranks(ctx *c, json_t *a, decision_rec *d)
{
    size_t n = json_array_size(a);
    if (n > 4096)
        n = 4096; /* the shim writes 32; a hostile file gets a bound */
    d->ranks = xmalloc((n ? n : 1) * sizeof *d->ranks);
    for (size_t i = 0; i < n && !c->bad; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_object(e)) {
            bad_field(c, "ranks[]", e, "an object");
            break;
        }
        c->prefix = "ranks[].";
        decision_rank *k = &d->ranks[d->nlisted++];
        memset(k, 0, sizeof *k);
        k->rank = get_int(c, e, "rank", 0, -1, NULL);
        k->pid = get_int(c, e, "pid", 0, 0, NULL);
        k->cuda_device = get_int(c, e, "cuda_device", 0, -1, NULL);
        k->host = get_str(c, e, "host", 0);
        k->role = get_str(c, e, "role", 0);
        k->api = get_str(c, e, "api", 0);
        k->local_purpose = get_str(c, e, "local_purpose", 0);
        c->prefix = NULL;
    }
}

static void feed_decision(ctx *c, json_t *o, const char *host, long long pid, long long tid, double ts)
{
    decision_rec *d = xmalloc(sizeof *d);
    memset(d, 0, sizeof *d);
    d->decision_id = get_str(c, o, "decision_id", 1);
    d->stage = get_str(c, o, "stage", 0);
    d->listen = get_str(c, o, "listen", 0);
    d->missing = get_str(c, o, "missing", 0);
    d->purpose = get_str(c, o, "purpose", 0);
    d->purpose_reason = get_str(c, o, "purpose_reason", 0);
    d->action = get_str(c, o, "action", 0);
    d->action_reason = get_str(c, o, "action_reason", 0);
    d->nranks = get_int(c, o, "nranks", 0, 0, NULL);
    d->arrived = get_int(c, o, "arrived", 0, 0, NULL);
    d->rule = get_int(c, o, "rule", 0, -1, NULL);
    d->hosts = get_int(c, o, "hosts", 0, 0, NULL);
    d->training = get_int(c, o, "training", 0, 0, NULL);
    d->inference = get_int(c, o, "inference", 0, 0, NULL);
    d->unknown = get_int(c, o, "unknown", 0, 0, NULL);
    d->rejected = get_int(c, o, "rejected_connections", 0, 0, NULL);
    d->rejected_by = get_counts(c, o, "rejected_by");
    d->unrecognized = get_str(c, o, "unrecognized", 0);
    d->wait_us = get_int(c, o, "wait_us", 0, 0, NULL);
    json_t *ranks = json_object_get(o, "ranks");
    if (ranks && !json_is_null(ranks) && !c->bad) {
        if (!json_is_array(ranks))
            bad_field(c, "ranks", ranks, "an array of objects");
        else
            parse_decision_ranks(c, ranks, d);
    }
    d->host = xstrdup(host);
    d->pid = pid;
    d->tid = tid;
    d->ts = ts;
    d->file = xstrdup(c->file);
    d->line = c->line;
    d->id_norm = norm_id(d->decision_id);
    if (c->bad) {
        decision_free(d);
        return;
    }
    *c->st->decisions_tail = d;
    c->st->decisions_tail = &d->next;
    if (d->id_norm) {
        decision_rec *first;
        HASH_FIND_STR(c->st->decision_by_id, d->id_norm, first);
        if (!first) /* the same record collected twice: the first one joins */
            HASH_ADD_KEYPTR(hh, c->st->decision_by_id, d->id_norm, strlen(d->id_norm), d);
    }
    c->st->nrecords++;
}

static void feed_unique_id(ctx *c, json_t *o, const char *host, long long pid)
{
    char *id_hash = get_str(c, o, "id_hash", 0), *listen = get_str(c, o, "rendezvous", 0);
    /* `unmarked` is a reason for people; nothing joins on it */
    if (!c->bad && id_hash && listen) {
        char *key = xasprintf("%s:%lld:%s", host, pid, listen);
        uid_rec *u;
        HASH_FIND_STR(c->st->uids, key, u);
        if (u) {
            free(key);
        } else {
            u = xmalloc(sizeof *u);
            u->key = key;
            u->id_hash = id_hash;
            id_hash = NULL;
            HASH_ADD_KEYPTR(hh, c->st->uids, u->key, strlen(u->key), u);
        }
    }
    free(id_hash);
    free(listen);
    if (!c->bad)
        c->st->nrecords++;
}

static void feed_expired(ctx *c, json_t *o, const char *host, long long pid)
{
    char *listen = get_str(c, o, "listen", 1);
    long long idle = get_int(c, o, "idle_ms", 0, 0, NULL);
    long long rejected = get_int(c, o, "rejected_connections", 0, 0, NULL);
    if (c->bad) {
        free(listen);
        return;
    }
    inspect_state *st = c->st;
    VEC_RESERVE(st->expired, 4);
    expired_rec *x = &st->expired.v[st->expired.n++];
    memset(x, 0, sizeof *x);
    x->host = xstrdup(host);
    x->pid = pid;
    x->listen = listen;
    x->idle_ms = idle;
    x->rejected = rejected;
    st->nrecords++;
}

/* ipc_peer_left: {listen, decision_id, rank}, written by the root's process. */
static void feed_peer_left(ctx *c, json_t *o, const char *host, long long pid, double ts)
{
    char *id = get_str(c, o, "decision_id", 1);
    long long rank = get_int(c, o, "rank", 1, -1, NULL);
    char *listen = get_str(c, o, "listen", 0);
    if (!c->bad && rank < 0) {
        c->bad = 1;
        inspect_error(c->st, c->file, c->line, 0, "field 'rank' is negative (%lld)", rank);
    }
    if (c->bad) {
        free(id);
        free(listen);
        return;
    }
    inspect_state *st = c->st;
    VEC_RESERVE(st->peer_left, 4);
    peer_left_rec *p = &st->peer_left.v[st->peer_left.n++];
    memset(p, 0, sizeof *p);
    p->host = xstrdup(host);
    p->pid = pid;
    p->ts = ts;
    p->listen = listen;
    p->decision_id = id;
    p->id_norm = norm_id(id);
    p->rank = rank;
    st->nrecords++;
}

static void feed_object(ctx *c, json_t *o)
{
    json_t *t = json_object_get(o, "type");
    if (!t) {
        inspect_error(c->st, c->file, c->line, 0, "record has no 'type'");
        return;
    }
    if (!json_is_string(t)) {
        bad_field(c, "type", t, "a string");
        return;
    }
    const char *type = json_string_value(t);
    static const char *known[] = {"load", "library", "unique_id", "comm", "comm_end", "exit", "warning",
                                  "decision", "rendezvous_expired", "ipc_peer_left", "comm_init_end"};
    int is_known = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(type, known[i]) == 0)
            is_known = 1;
    if (!is_known)
        return; /* newer shim: skip quietly, keep the rest */

    char *host = get_str(c, o, "host", 1);
    long long pid = get_int(c, o, "pid", 1, 0, NULL);
    long long tid = get_int(c, o, "tid", 0, 0, NULL);
    double ts = get_num(c, o, "ts");
    if (c->bad) {
        free(host);
        return;
    }
    if (strcmp(type, "load") == 0) {
        char *title = get_str(c, o, "title", 0), *log_file = get_str(c, o, "log_file", 0),
             *ver = get_str(c, o, "shim_version", 0);
        if (!c->bad) {
            process *p = inspect_process(c->st, host, pid);
            p->has_load = 1;
            /* load's title is the authoritative one; comm records only fill gaps */
            if (title) {
                free(p->title);
                p->title = title;
                title = NULL;
            }
            if (log_file && !p->log_file) {
                p->log_file = log_file;
                log_file = NULL;
            }
            if (ver && !p->shim_version) {
                p->shim_version = ver;
                ver = NULL;
            }
            note_who(o, p);
            c->st->nrecords++;
        }
        free(title);
        free(log_file);
        free(ver);
    } else if (strcmp(type, "library") == 0) {
        feed_library(c, o);
        if (!c->bad)
            inspect_process(c->st, host, pid);
    } else if (strcmp(type, "unique_id") == 0) {
        feed_unique_id(c, o, host, pid);
        if (!c->bad)
            inspect_process(c->st, host, pid);
    } else if (strcmp(type, "decision") == 0) {
        feed_decision(c, o, host, pid, tid, ts);
        if (!c->bad)
            inspect_process(c->st, host, pid);
    } else if (strcmp(type, "rendezvous_expired") == 0) {
        feed_expired(c, o, host, pid);
        if (!c->bad)
            inspect_process(c->st, host, pid);
    } else if (strcmp(type, "ipc_peer_left") == 0) {
        feed_peer_left(c, o, host, pid, ts);
        if (!c->bad)
            inspect_process(c->st, host, pid);
    } else if (strcmp(type, "comm") == 0) {
        feed_comm(c, o, host, pid, tid, ts);
    } else if (strcmp(type, "comm_init_end") == 0) {
        feed_comm_init_end(c, o, host, pid);
    } else if (strcmp(type, "comm_end") == 0) {
        feed_comm_end(c, o, host, pid, ts);
        if (!c->bad)
            inspect_process(c->st, host, pid);
    } else if (strcmp(type, "exit") == 0) {
        inspect_process(c->st, host, pid)->has_exit = 1;
        c->st->nrecords++;
    } else if (strcmp(type, "warning") == 0) {
        feed_warning(c, o, host, pid, ts);
        if (!c->bad)
            inspect_process(c->st, host, pid);
    }
    free(host);
}

void inspect_feed_record_line(inspect_state *st, const char *buf, size_t len, const char *file, long lineno)
{
    inspect_feed_record_line_ex(st, buf, len, file, lineno, 0);
}

void inspect_feed_record_line_ex(inspect_state *st, const char *buf, size_t len, const char *file,
                                 long lineno, int unterminated)
{
    ctx c = {st, file, lineno, 0, NULL};
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r'))
        i++;
    if (i == len)
        return; /* blank lines carry nothing */
    json_error_t err;
    /* JSON_REJECT_DUPLICATES: two values for one key means a corrupt or
     * hand-merged line; better flagged than silently resolved. */
    json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
    if (!o) {
        inspect_error(st, file, lineno, 0, "%sinvalid JSON: %s (column %d)",
                      unterminated ? "truncated last line (no newline): " : "", err.text, err.column);
        return;
    }
    if (!json_is_object(o))
        inspect_error(st, file, lineno, 0, "record is %s, not a JSON object", json_type_name(o));
    else
        feed_object(&c, o);
    json_decref(o);
}
