/* Owner of everything the feed pass stores; one free path for all of it so
 * that valgrind stays clean on every input. */
#include "inspect.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

inspect_state *inspect_new(void)
{
    inspect_state *st = xmalloc(sizeof *st);
    memset(st, 0, sizeof *st);
    st->ranks_tail = &st->ranks;
    st->decisions_tail = &st->decisions;
    return st;
}

static void net_free(net_entry **h)
{
    net_entry *e, *tmp;
    HASH_ITER(hh, *h, e, tmp) {
        HASH_DEL(*h, e);
        free(e->key);
        free(e->network);
        free(e->comm_norm);
        free(e->failed);
        free(e->host);
        free(e->comm);
        free(e->fn);
        free(e->commid);
        free(e->parent);
        free(e);
    }
}

void rank_free(rank_rec *r)
{
    char **fields[] = {&r->host, &r->fn, &r->comm, &r->comm_norm, &r->handle, &r->group,
                       &r->id_hash, &r->result_str, &r->api, &r->caller_lib, &r->title,
                       &r->python0, &r->role, &r->role_reason, &r->purpose,
                       &r->purpose_reason, &r->action, &r->action_reason, &r->local_purpose,
                       &r->local_purpose_reason, &r->net, &r->net_by, &r->net_note, &r->unprotected, &r->unrecognized, &r->dec_by, &r->dec_id,
                       &r->dec_id_norm, &r->dec_root, &r->dec_fallback, &r->file};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        free(*fields[i]);
    free(r);
}

void comm_end_free(comm_end_rec *e)
{
    free(e->host);
    free(e->comm_norm);
    free(e->handle);
    free(e->group);
    free(e->how);
    free(e->action);
    free(e->decision_id);
    free(e->ipc.vmm_note);
    op_free(&e->ops);
    free(e);
}

void decision_free(decision_rec *d)
{
    char **fields[] = {&d->host, &d->stage, &d->listen, &d->decision_id, &d->id_norm, &d->missing,
                       &d->purpose, &d->purpose_reason, &d->action, &d->action_reason, &d->file,
                       &d->group, &d->rejected_by, &d->unrecognized};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        free(*fields[i]);
    for (size_t i = 0; i < d->nlisted; i++) {
        free(d->ranks[i].host);
        free(d->ranks[i].role);
        free(d->ranks[i].api);
        free(d->ranks[i].local_purpose);
    }
    free(d->ranks);
    free(d);
}

/* The root's and the ranks' rendezvous records: unique IDs, expiries, lost peers. */
static void free_rendezvous_records(inspect_state *st)
{
    uid_rec *u, *utmp;
    HASH_ITER(hh, st->uids, u, utmp) {
        HASH_DEL(st->uids, u);
        free(u->key);
        free(u->id_hash);
        free(u);
    }
    for (size_t i = 0; i < st->expired.n; i++) {
        free(st->expired.v[i].host);
        free(st->expired.v[i].listen);
        free(st->expired.v[i].id_hash);
    }
    free(st->expired.v);
    for (size_t i = 0; i < st->peer_left.n; i++) {
        peer_left_rec *p = &st->peer_left.v[i];
        free(p->host);
        free(p->listen);
        free(p->decision_id);
        free(p->id_norm);
        free(p->group);
    }
    free(st->peer_left.v);
}

void inspect_free(inspect_state *st)
{
    if (!st)
        return;
    process *p, *ptmp;
    HASH_ITER(hh, st->procs, p, ptmp) {
        HASH_DEL(st->procs, p);
        free(p->key);
        free(p->host);
        free(p->title);
        free(p->log_file);
        free(p->who);
        free(p->other_who);
        free(p->shim_version);
        free(p);
    }
    for (rank_rec *r = st->ranks, *n; r; r = n) {
        n = r->next;
        rank_free(r);
    }
    for (comm_end_rec *e = st->ends, *n; e; e = n) {
        n = e->next;
        comm_end_free(e);
    }
    strlist_free(&st->problems);
    HASH_CLEAR(hh, st->decision_by_id); /* the records themselves are in the list */
    for (decision_rec *d = st->decisions, *n; d; d = n) {
        n = d->next;
        decision_free(d);
    }
    free_rendezvous_records(st);
    net_free(&st->nccl_tid);
    net_free(&st->nccl_proc_net);
    net_free(&st->nccl_comm);
    nccl_proc *np, *nptmp;
    HASH_ITER(hh, st->nccl_procs, np, nptmp) {
        HASH_DEL(st->nccl_procs, np);
        free(np->key);
        strlist_free(&np->plugins);
        for (int i = 0; i < np->nwarns && i < INSPECT_MAX_NCCL_WARNS; i++)
            free(np->warns[i]);
        for (int i = 0; i < np->nattns && i < INSPECT_MAX_NCCL_WARNS; i++)
            free(np->attns[i]);
        free(np);
    }
    library_rec *l, *ltmp;
    HASH_ITER(hh, st->libs, l, ltmp) {
        HASH_DEL(st->libs, l);
        free(l->key);
        free(l->path);
        free(l);
    }
    for (size_t i = 0; i < st->warnings.n; i++) {
        free(st->warnings.v[i].host);
        free(st->warnings.v[i].what);
        free(st->warnings.v[i].message);
        free(st->warnings.v[i].fn);
    }
    free(st->warnings.v);
    for (size_t i = 0; i < st->errors.n; i++) {
        free(st->errors.v[i].file);
        free(st->errors.v[i].reason);
    }
    free(st->errors.v);
    free(st->bad.file);
    free(st->bad.shown);
    communicator *c, *ctmp;
    HASH_ITER(hh, st->comms, c, ctmp) {
        HASH_DEL(st->comms, c);
        free(c->group);
        free(c->short_group);
        free(c->hops.vmm_note);
        free(c->ranks);
        strlist_free(&c->hosts);
        strlist_free(&c->apis);
        strlist_free(&c->problems);
        op_free(&c->ops);
        free(c->ipc_warns.v);
        free(c->peer_left.v);
        free(c->decision_summary);
        free(c);
    }
    free(st->sorted);
    free(st);
}

/* A reason's longest length (escaped): a line of garbage must not make a
 * screenful, and the first few are enough to see what the file is. */
#define REASON_MAX 120

/* Bytes from the input (jansson quotes the text near a JSON error) as text
 * that cannot disturb a terminal: printable ASCII as is, the rest as \xNN;
 * cut to `max` characters, "..." marking the cut. */
static char *escape_cut(const char *s, size_t max)
{
    size_t cap = max + 8, n = 0;
    char *out = xmalloc(cap);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int plain = *p >= 0x20 && *p < 0x7f && *p != '\\';
        if (n + (plain ? 1 : 4) > max) {
            memcpy(out + n, "...", 4);
            return out;
        }
        if (plain)
            out[n++] = (char)*p;
        else
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", *p);
    }
    out[n] = '\0';
    return out;
}

/* Keeps an error for --json, --html and --check; takes `reason`. */
static input_error *keep_error(inspect_state *st, const char *file, long line, int fatal, char *reason)
{
    VEC_RESERVE(st->errors, 8);
    input_error *e = &st->errors.v[st->errors.n++];
    memset(e, 0, sizeof *e);
    e->file = xstrdup(file);
    e->line = line;
    e->reason = reason;
    e->fatal = fatal;
    return e;
}

/* One more bad line of `file`: counted; the first few kept with their reason. */
static void tally_bad_line(inspect_state *st, const char *file, long line, char *reason)
{
    bad_lines *b = &st->bad;
    if (b->file && strcmp(b->file, file) != 0)
        inspect_errors_flush(st);
    if (!b->file) {
        b->file = xstrdup(file);
        b->first = line;
    }
    b->count++;
    if (strncmp(reason, "truncated last line", 19) == 0)
        b->cut = 1;
    if (b->nshown >= INSPECT_BAD_LINES_SHOWN) {
        free(reason);
        return;
    }
    char *shown = xasprintf("%s%sline %ld: %s", b->shown ? b->shown : "", b->shown ? "; " : "", line, reason);
    free(b->shown);
    b->shown = shown;
    b->nshown++;
    keep_error(st, file, line, 0, reason);
}

void inspect_errors_flush(inspect_state *st)
{
    bad_lines *b = &st->bad;
    if (!b->file)
        return;
    long more = b->count - b->nshown;
    char *more_s = more > 0 ? xasprintf("; and %ld more", more) : xstrdup("");
    input_error *e = keep_error(st, b->file, 0, 0, xasprintf("%ld bad line%s skipped: %s%s", b->count,
                                                             b->count == 1 ? "" : "s", b->shown, more_s));
    free(more_s);
    e->bad_lines = b->count;
    e->first_bad = b->first;
    e->cut_only = b->count == 1 && b->cut;
    char *file = escape_cut(b->file, 4 * REASON_MAX);
    fprintf(stderr, "%s: %s\n", file, e->reason);
    free(file);
    free(b->file);
    free(b->shown);
    memset(b, 0, sizeof *b);
}

/* A bad line is counted, and reported with the others of its file once the
 * file is read (inspect_errors_flush): one line a file, however many; any
 * other error on stderr as it happens (operators watch long runs).  All are
 * kept for --json. */
void inspect_error(inspect_state *st, const char *file, long line, int fatal, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *raw = xmalloc(n > 0 ? (size_t)n + 1 : 1);
    raw[0] = '\0';
    if (n > 0) {
        va_start(ap, fmt);
        vsnprintf(raw, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    char *reason = escape_cut(raw, REASON_MAX);
    free(raw);
    if (line > 0 && !fatal) {
        tally_bad_line(st, file, line, reason);
        return;
    }
    inspect_errors_flush(st);
    char *f = escape_cut(file, 4 * REASON_MAX);
    if (line > 0)
        fprintf(stderr, "%s:%ld: %s\n", f, line, reason);
    else
        fprintf(stderr, "%s: %s\n", f, reason);
    free(f);
    keep_error(st, file, line, fatal, reason);
}

process *inspect_process(inspect_state *st, const char *host, long long pid)
{
    char *key = xasprintf("%s:%lld", host, pid);
    process *p;
    HASH_FIND_STR(st->procs, key, p);
    if (p) {
        free(key);
        return p;
    }
    p = xmalloc(sizeof *p);
    memset(p, 0, sizeof *p);
    p->key = key;
    p->host = xstrdup(host);
    p->pid = pid;
    HASH_ADD_KEYPTR(hh, st->procs, p->key, strlen(p->key), p);
    return p;
}

/* The root's causes of rejection (shim/rv_server.c, enum rej), explained. */
static const char *rejected_why(const char *cause)
{
    static const char *const why[][2] = {
        { "no_hello", "no token within 1 s of connecting" },
        { "evicted", "the oldest stranger, when more than 64 without a token were connected" },
        { "malformed", "bytes that are not this protocol's frames" },
        { "wrong_token", "another ID's token (an earlier run's, or a stranger's)" },
        { "closed", "closed by the peer before its HELLO, or a rank that left" },
        { "protocol", "a duplicate rank, an nranks that disagrees, a message out of place" },
        { "late", "strangers still connected when every rank had arrived" },
        { "other", "out of memory, or a send that failed" },
    };
    for (size_t i = 0; i < sizeof why / sizeof why[0]; i++)
        if (strcmp(cause, why[i][0]) == 0)
            return why[i][1];
    return NULL;
}

char *inspect_rejected_text(const decision_rec *d, int verbose)
{
    if (!d->rejected_by || !d->rejected_by[0])
        return NULL;
    char *out = NULL;
    char *copy = xstrdup(d->rejected_by);
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *why = verbose ? rejected_why(item) : NULL;
        char *o = xasprintf("%s%s%s %s%s%s%s", out ? out : "", out ? ", " : "", eq + 1, item, why ? " (" : "",
                            why ? why : "", why ? ")" : "");
        free(out);
        out = o;
    }
    free(copy);
    return out;
}
