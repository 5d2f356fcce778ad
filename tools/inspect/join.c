/* Joins the stored facts into communicators: comm records grouped by their
 * `group`, each rank matched to its comm_end (traffic) and to the network
 * NCCL's log reported for it. */
#include "inspect.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int rank_ts_cmp(const void *a, const void *b)
{
    const rank_rec *x = *(rank_rec *const *)a, *y = *(rank_rec *const *)b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/*
 * Matching each rank to its comm_end.  A rank and an end of one process
 * match on the handle when both have one, else on the comm pointer when both
 * have one, else on group and rank; an end cannot precede its init (ts 0:
 * not recorded).  Handles and comm pointers are reused after a destroy, so
 * each rank (in time order) takes the earliest unused end that matches.
 *
 * Ends are indexed by the value they would be compared on, one list per
 * (kind of comparison, the fields the end has, process, value): a rank looks
 * in at most four lists (those whose ends it would compare that way), each
 * sorted by time, each with a cursor past the ends no later rank can take.
 * Linear in records however many communicators a process makes and destroys
 * (a list per comm pointer is long when NCCL reuses a few addresses).
 */
typedef struct end_ref {
    comm_end_rec *e;
    size_t seq;             /* position in st->ends: ties of ts go to the first there */
} end_ref;

typedef struct end_list {
    char *key;
    end_ref *v;             /* by ts, then seq */
    size_t n, cap;
    size_t next;            /* those before it are used, or older than every rank still to come */
    UT_hash_handle hh;
} end_list;

enum { KEY_HANDLE, KEY_COMM, KEY_GROUP };

/* "<kind><has handle><has comm>|host:pid|value": the list an end is in, or a rank looks in. */
static char *end_key(int kind, int has_handle, int has_comm, const char *host, long long pid, const char *value,
                     long long rank)
{
    char *k = kind == KEY_GROUP ? xasprintf("g%d%d|%s:%lld|%lld|%s", has_handle, has_comm, host, pid, rank, value)
                                : xasprintf("%c%d%d|%s:%lld|%s", kind == KEY_HANDLE ? 'h' : 'c', has_handle,
                                            has_comm, host, pid, value);
    if (kind == KEY_HANDLE) /* compared case-insensitively */
        for (char *p = k + strlen(k) - strlen(value); *p; p++)
            *p = (char)tolower((unsigned char)*p);
    return k;
}

static void list_add(end_list **lists, char *key, comm_end_rec *e, size_t seq)
{
    end_list *l;
    HASH_FIND_STR(*lists, key, l);
    if (!l) {
        l = xmalloc(sizeof *l);
        memset(l, 0, sizeof *l);
        l->key = key;
        HASH_ADD_KEYPTR(hh, *lists, l->key, strlen(l->key), l);
    } else {
        free(key);
    }
    VEC_RESERVE(*l, 2);
    l->v[l->n++] = (end_ref){ e, seq };
}

static int ref_cmp(const void *a, const void *b)
{
    const end_ref *x = a, *y = b;
    if (x->e->ts != y->e->ts)
        return x->e->ts < y->e->ts ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Handle ends are compared on the handle with any rank that has one; the
 * others, on the comm pointer or on group and rank, by what the rank has. */
static end_list *index_ends(inspect_state *st)
{
    end_list *lists = NULL;
    size_t seq = 0;
    for (comm_end_rec *e = st->ends; e; e = e->next, seq++) {
        int h = e->handle != NULL, c = e->comm_norm != NULL;
        if (h)
            list_add(&lists, end_key(KEY_HANDLE, 1, c, e->host, e->pid, e->handle, 0), e, seq);
        if (c)
            list_add(&lists, end_key(KEY_COMM, h, 1, e->host, e->pid, e->comm_norm, 0), e, seq);
        if (e->group && e->has_rank)
            list_add(&lists, end_key(KEY_GROUP, h, c, e->host, e->pid, e->group, e->rank), e, seq);
    }
    end_list *l, *tmp;
    HASH_ITER(hh, lists, l, tmp)
        qsort(l->v, l->n, sizeof *l->v, ref_cmp);
    return lists;
}

static int end_too_old(const comm_end_rec *e, const rank_rec *r)
{
    return e->ts && r->ts && e->ts < r->ts;
}

/* The earliest end of the list `key` that r may take, or NULL. */
static end_ref *first_open(end_list *lists, char *key, const rank_rec *r)
{
    end_list *l;
    HASH_FIND_STR(lists, key, l);
    free(key);
    if (!l)
        return NULL;
    /* Ranks come in time order: once one has a time (> 0), every later one
     * does, no earlier, so an older end is out for good, as a used one is. */
    while (l->next < l->n && (l->v[l->next].e->used || (r->ts > 0 && end_too_old(l->v[l->next].e, r))))
        l->next++;
    for (size_t i = l->next; i < l->n; i++)
        if (!l->v[i].e->used && !end_too_old(l->v[i].e, r))
            return &l->v[i];
    return NULL;
}

/* Keeps in *best the earlier of it and the end the list `key` offers r. */
static void consider(end_ref **best, end_list *lists, char *key, const rank_rec *r)
{
    end_ref *f = first_open(lists, key, r);
    if (f && (!*best || ref_cmp(f, *best) < 0))
        *best = f;
}

/* The end r takes: the earliest open one among the lists of ends r would be
 * compared with on the handle, on the comm pointer, or on group and rank. */
static end_ref *end_for(end_list *lists, const rank_rec *r)
{
    end_ref *best = NULL;
    int h = r->handle != NULL, c = r->comm_norm != NULL;
    for (int ec = 0; h && ec <= 1; ec++) /* ends with a handle, a comm pointer or not */
        consider(&best, lists, end_key(KEY_HANDLE, 1, ec, r->host, r->pid, r->handle, 0), r);
    for (int eh = 0; c && eh <= !h; eh++) /* ends with a comm pointer (and a handle, if r has none) */
        consider(&best, lists, end_key(KEY_COMM, eh, 1, r->host, r->pid, r->comm_norm, 0), r);
    for (int eh = 0; r->group && eh <= !h; eh++) /* ends with neither field r could be compared on */
        for (int ec = 0; ec <= !c; ec++)
            consider(&best, lists, end_key(KEY_GROUP, eh, ec, r->host, r->pid, r->group, r->rank), r);
    return best;
}

static void match_ends(inspect_state *st, rank_rec **byts, size_t n)
{
    end_list *lists = index_ends(st);
    for (size_t i = 0; i < n; i++) {
        end_ref *best = end_for(lists, byts[i]);
        if (best) {
            best->e->used = 1;
            byts[i]->end = best->e;
        }
    }
    end_list *l, *tmp;
    HASH_ITER(hh, lists, l, tmp) {
        HASH_DEL(lists, l);
        free(l->key);
        free(l->v);
        free(l);
    }
}

static void take_net(rank_rec *r, net_entry *e)
{
    if (e->network)
        r->network = e->network;
    r->net_channels = e->channels;
    r->coll_channels = e->coll_channels;
    r->commid = e->commid;
    r->net_failed = e->failed;
    e->joined = 1;
}

/* NCCL's Init lines by pid and comm pointer, whatever the host name. */
typedef struct pid_comm {
    char *key;              /* "pid:comm" */
    struct { net_entry **v; size_t n, cap; } entries;
    UT_hash_handle hh;
} pid_comm;

static pid_comm *index_pid_comm(inspect_state *st)
{
    pid_comm *idx = NULL, *pc;
    net_entry *e, *tmp;
    HASH_ITER(hh, st->nccl_comm, e, tmp) {
        if (!e->has_init || !e->comm_norm)
            continue;
        char *key = xasprintf("%lld:%s", e->pid, e->comm_norm);
        HASH_FIND_STR(idx, key, pc);
        if (pc) {
            free(key);
        } else {
            pc = xmalloc(sizeof *pc);
            memset(pc, 0, sizeof *pc);
            pc->key = key;
            HASH_ADD_KEYPTR(hh, idx, pc->key, strlen(pc->key), pc);
        }
        VEC_RESERVE(pc->entries, 2);
        pc->entries.v[pc->entries.n++] = e;
    }
    return idx;
}

static void pid_comm_free(pid_comm **idx)
{
    pid_comm *pc, *tmp;
    HASH_ITER(hh, *idx, pc, tmp) {
        HASH_DEL(*idx, pc);
        free(pc->key);
        free(pc->entries.v);
        free(pc);
    }
}

static void join_network(inspect_state *st, pid_comm *bypid, rank_rec *r)
{
    if (!r->comm_norm)
        return;
    char *h = short_host(r->host);
    char *key = xasprintf("%s:%lld:%s", h, r->pid, r->comm_norm);
    net_entry *e;
    HASH_FIND_STR(st->nccl_comm, key, e);
    free(key);
    free(h);
    if (e) {
        take_net(r, e);
        return;
    }
    /* NCCLSHIM_HOSTNAME (a test-only host identity) names the process
     * differently from NCCL's log, which prints the kernel's host name: the
     * same pid and comm pointer under one other host name, not yet joined,
     * is the same comm, when there is one only. */
    pid_comm *pc;
    key = xasprintf("%lld:%s", r->pid, r->comm_norm);
    HASH_FIND_STR(bypid, key, pc);
    free(key);
    net_entry *found = NULL;
    int n = 0;
    for (size_t i = 0; pc && i < pc->entries.n; i++)
        if (!pc->entries.v[i]->joined) {
            found = pc->entries.v[i];
            n++;
        }
    if (n == 1)
        take_net(r, found);
}

typedef struct commid_group {
    char *commid;
    char *group;            /* borrowed from a rank record */
    UT_hash_handle hh;
} commid_group;

/* Runs without the shim (or processes without it) leave only NCCL's log:
 * every Init line that no record joined becomes a rank of its own,
 * grouped by NCCL's commId, or into the shim's group when a joined rank
 * of the same commId names it (a rank without the shim in a shim run). */
static void add_log_only_ranks(inspect_state *st)
{
    commid_group *map = NULL, *m, *mtmp;
    for (rank_rec *r = st->ranks; r; r = r->next) {
        if (!r->commid)
            continue;
        HASH_FIND_STR(map, r->commid, m);
        if (m)
            continue;
        m = xmalloc(sizeof *m);
        m->commid = xstrdup(r->commid);
        m->group = r->group;
        HASH_ADD_KEYPTR(hh, map, m->commid, strlen(m->commid), m);
    }
    net_entry *e, *tmp;
    HASH_ITER(hh, st->nccl_comm, e, tmp) {
        if (!e->has_init || e->joined)
            continue;
        rank_rec *r = xmalloc(sizeof *r);
        memset(r, 0, sizeof *r);
        r->host = xstrdup(e->host);
        r->pid = e->pid;
        r->tid = e->tid;
        r->comm = xstrdup(e->comm);
        r->comm_norm = e->comm_norm ? xstrdup(e->comm_norm) : norm_comm_ptr(e->comm);
        r->fn = e->fn ? xstrdup(e->fn) : NULL;
        r->rank = e->rank;
        r->nranks = e->nranks;
        r->cuda_device = e->cuda_dev;
        r->network = e->network;
        r->net_channels = e->channels;
        r->coll_channels = e->coll_channels;
        r->commid = e->commid;
        r->net_failed = e->failed;
        r->from_log = 1;
        r->seq = e->seq;
        m = NULL;
        if (e->commid)
            HASH_FIND_STR(map, e->commid, m);
        if (m)
            r->group = xstrdup(m->group);
        else if (e->commid)
            r->group = xasprintf("nccl:%s", e->commid);
        else /* a split: NCCL logs no commId for it; one group per rank */
            r->group = xasprintf("nccl:%s:%lld:%s", e->host, e->pid, r->comm_norm);
        e->joined = 1;
        *st->ranks_tail = r;
        st->ranks_tail = &r->next;
    }
    HASH_ITER(hh, map, m, mtmp) {
        HASH_DEL(map, m);
        free(m->commid);
        free(m);
    }
}

static int rank_cmp(const void *a, const void *b)
{
    const rank_rec *x = *(rank_rec *const *)a, *y = *(rank_rec *const *)b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return rank_ts_cmp(a, b);
}

static int comm_cmp(const void *a, const void *b)
{
    const communicator *x = *(communicator *const *)a, *y = *(communicator *const *)b;
    if (x->first_ts != y->first_ts)
        return x->first_ts < y->first_ts ? -1 : 1;
    if (x->first_seq != y->first_seq)
        return x->first_seq < y->first_seq ? -1 : 1;
    return strcmp(x->group, y->group);
}

/* One value when all ranks agree, "mixed" otherwise. */
static const char *agree(communicator *c, const char *(*get)(const rank_rec *), const char *none)
{
    const char *v = NULL;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        const char *s = get(c->ranks[i]);
        if (!s)
            continue;
        if (!v)
            v = s;
        else if (strcmp(v, s) != 0)
            return "mixed";
    }
    return v ? v : none;
}

/* A rank known from NCCL's log alone has no purpose or action: it is left
 * out, and a communicator of such ranks only shows "-". */
static const char *get_purpose(const rank_rec *r) { return r->from_log ? NULL : r->purpose ? r->purpose : "unknown"; }
static const char *get_action(const rank_rec *r) { return r->from_log ? NULL : r->action ? r->action : "unknown"; }
static const char *get_network(const rank_rec *r) { return r->network; }

static int ll_cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* The most common nranks (ties: the larger); one odd rank should not redefine
 * the communicator's size, it gets its own "nranks disagree" problem. */
static long long mode_nranks(communicator *c)
{
    long long *v = xmalloc(c->nranks_rec * sizeof *v);
    for (size_t i = 0; i < c->nranks_rec; i++)
        v[i] = c->ranks[i]->nranks;
    qsort(v, c->nranks_rec, sizeof *v, ll_cmp);
    long long best = v[0];
    size_t best_n = 0;
    for (size_t i = 0, j; i < c->nranks_rec; i = j) {
        for (j = i; j < c->nranks_rec && v[j] == v[i]; j++)
            ;
        if (j - i >= best_n) {
            best_n = j - i;
            best = v[i];
        }
    }
    free(v);
    return best;
}

static void summarize(communicator *c)
{
    qsort(c->ranks, c->nranks_rec, sizeof *c->ranks, rank_cmp);
    c->first_ts = c->ranks[0]->ts;
    c->first_seq = c->ranks[0]->seq;
    c->from_log = 1;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (r->ts < c->first_ts)
            c->first_ts = r->ts;
        if (r->seq < c->first_seq)
            c->first_seq = r->seq;
        if (!r->from_log)
            c->from_log = 0;
        if (i == 0 || r->rank != c->ranks[i - 1]->rank)
            c->ranks_seen++;
        strlist_add_unique(&c->hosts, r->host);
        strlist_add_unique(&c->apis, r->api ? r->api : r->from_log ? "-" : "?");
        if (r->duration_us > c->init_us)
            c->init_us = r->duration_us;
        if (r->end) {
            op_stat *o, *tmp;
            HASH_ITER(hh, r->end->ops, o, tmp)
                op_add(&c->ops, o->name, o->count, o->bytes);
            if (r->end->ipc.present) {
                c->hops.present = 1;
                c->hops.first += r->end->ipc.first;
                c->hops.has_copy |= r->end->ipc.has_copy;
                c->hops.sm += r->end->ipc.sm;
                c->hops.ce += r->end->ipc.ce;
                c->hops.has_vmm |= r->end->ipc.has_vmm;
                c->hops.vmm_sent += r->end->ipc.vmm_sent;
                c->hops.vmm_mapped += r->end->ipc.vmm_mapped;
                if (!c->hops.vmm_note && r->end->ipc.vmm_note) /* the first rank's reason; each rank's is in -v */
                    c->hops.vmm_note = xstrdup(r->end->ipc.vmm_note);
                for (int k = 0; k < NHOPS; k++) {
                    c->hops.in[k] += r->end->ipc.in[k];
                    c->hops.out[k] += r->end->ipc.out[k];
                }
            }
        }
    }
    HASH_SORT(c->ops, op_cmp);
    c->nranks = mode_nranks(c);
    c->purpose = agree(c, get_purpose, "-");
    c->action = agree(c, get_action, "-");
    c->network = agree(c, get_network, "-");
}

/* The group a root-side record (decision, rendezvous_expired) belongs to:
 * the same process's unique_id record with that rendezvous address. */
static communicator *comm_of_listen(inspect_state *st, const char *host, long long pid, const char *listen,
                                    const char **id_hash)
{
    if (!listen)
        return NULL;
    char *key = xasprintf("%s:%lld:%s", host, pid, listen);
    uid_rec *u;
    HASH_FIND_STR(st->uids, key, u);
    free(key);
    if (!u)
        return NULL;
    if (id_hash)
        *id_hash = u->id_hash;
    char *group = xasprintf("id:%s", u->id_hash);
    communicator *c;
    HASH_FIND_STR(st->comms, group, c);
    free(group);
    return c;
}

static void attach_decision(communicator *c, decision_rec *d)
{
    if (c->decision || d->group)
        return;
    c->decision = d;
    d->group = xstrdup(c->group);
}

/* Rendezvous facts per communicator: the root's decision record (joined on
 * decision_id, or through the root's unique_id record when no rank heard the
 * root), its expiry, and whether the decision fell back. */
static void join_decisions(inspect_state *st)
{
    communicator *c, *tmp;
    HASH_ITER(hh, st->comms, c, tmp) {
        for (size_t i = 0; i < c->nranks_rec; i++) {
            rank_rec *r = c->ranks[i];
            if (r->has_decision)
                c->marked = 1;
            if (!c->root && r->dec_root)
                c->root = r->dec_root;
            if (r->dec_id_norm) {
                HASH_FIND_STR(st->decision_by_id, r->dec_id_norm, r->decision);
                if (r->decision)
                    attach_decision(c, r->decision);
            }
        }
    }
    for (decision_rec *d = st->decisions; d; d = d->next) {
        if (d->group)
            continue;
        c = comm_of_listen(st, d->host, d->pid, d->listen, NULL);
        if (c)
            attach_decision(c, d);
    }
    for (size_t i = 0; i < st->expired.n; i++) {
        expired_rec *x = &st->expired.v[i];
        const char *id_hash = NULL;
        c = comm_of_listen(st, x->host, x->pid, x->listen, &id_hash);
        if (id_hash && !x->id_hash)
            x->id_hash = xstrdup(id_hash);
        if (c && !c->expired)
            c->expired = x;
    }
    HASH_ITER(hh, st->comms, c, tmp) {
        if (c->decision && !c->root)
            c->root = c->decision->listen;
        c->fell_back = inspect_root_gave_up(c) || inspect_vote_undone(c);
        for (size_t i = 0; i < c->nranks_rec; i++)
            if (c->ranks[i]->dec_fallback || c->ranks[i]->dec_fallback_kind)
                c->fell_back = 1;
    }
}

int inspect_root_gave_up(const communicator *c)
{
    const decision_rec *d = c->decision;
    if (d)
        return (d->missing && d->missing[0]) || (d->nranks > 0 && d->arrived < d->nranks);
    /* without the root's record: it answers hosts 0 only when it decided nothing */
    for (size_t i = 0; i < c->nranks_rec; i++)
        if (c->ranks[i]->dec_via_root && c->ranks[i]->dec_hosts == 0)
            return 1;
    return 0;
}

int inspect_vote_undone(const communicator *c)
{
    /* a passthrough is final at the decision stage: one at the commit stage
     * means the vote round undid what the root had decided */
    const decision_rec *d = c->decision;
    return d && d->stage && strcmp(d->stage, "commit") == 0 && d->action && strcmp(d->action, "passthrough") == 0;
}


int inspect_ended_normally(const rank_rec *r)
{
    return r->end && r->end->how && (strcmp(r->end->how, "destroy") == 0 || strcmp(r->end->how, "abort") == 0);
}

static int is_ipc_rank(const rank_rec *r)
{
    return (r->action && strcmp(r->action, "ipc") == 0) ||
           (r->end && r->end->action && strcmp(r->end->action, "ipc") == 0);
}

static int is_ipc_warning(const warning_rec *w)
{
    return strcmp(w->what, "ipc") == 0 || strcmp(w->what, "ipc-peer-lost") == 0 ||
           strcmp(w->what, "ipc-comm-call") == 0;
}

static char *dup_n(const char *s, size_t n)
{
    char *o = xmalloc(n + 1);
    memcpy(o, s, n);
    o[n] = '\0';
    return o;
}

/*
 * The shim's ipc warnings name their communicator in the message:
 *   ipc-peer-lost  "ipc communicator (rank R of N): why; ..."            (no group)
 *   ipc            "FN on ipc communicator GROUP (rank R of N) returns N: why"
 *                  "destroying an ipc communicator (rank R of N): why; freeing its memory anyway"
 *   ipc-comm-call  "FN on communicator GROUP (rank R of N), which this shim runs over CUDA IPC ..."
 * Fills w->fn, w->result, w->why; *group (owned, or NULL), rank and nranks.
 * Returns 0 when the message does not have that shape.
 */
static int parse_ipc_message(warning_rec *w, char **group, long long *rank, long long *nranks)
{
    const char *m = w->message, *cm = strstr(m, "communicator ");
    *group = NULL;
    if (!cm)
        return 0;
    const char *p = cm + strlen("communicator ");
    if (*p != '(') {
        const char *sp = strchr(p, ' ');
        if (!sp)
            return 0;
        *group = dup_n(p, (size_t)(sp - p));
        p = sp + 1;
    }
    char *end;
    if (strncmp(p, "(rank ", 6) != 0)
        goto bad;
    *rank = strtoll(p + 6, &end, 10);
    if (end == p + 6 || strncmp(end, " of ", 4) != 0)
        goto bad;
    p = end + 4;
    *nranks = strtoll(p, &end, 10);
    if (end == p || *end != ')')
        goto bad;
    const char *close = end;
    const char *on = strstr(m, " on ");
    if (on && on < cm && on > m)
        w->fn = dup_n(m, (size_t)(on - m)); /* "ncclSend", "ncclGroupEnd (Send/Recv)" */
    if (strncmp(close, ") returns ", 10) == 0) {
        w->result = strtoll(close + 10, &end, 10);
        if (strncmp(end, ": ", 2) == 0)
            w->why = end + 2;
    } else if (strncmp(close, "): ", 3) == 0) {
        w->why = close + 3;
    }
    return 1;
bad:
    free(*group);
    *group = NULL;
    return 0;
}

static communicator *comm_of(inspect_state *st, const rank_rec *r)
{
    communicator *c;
    HASH_FIND_STR(st->comms, r->group, c);
    return c;
}

/* The latest ipc_peer_left of c at most 1 s before ts (the root closes the
 * other ranks' connections at once; their shims warn within milliseconds). */
static double recent_peer_left(const communicator *c, double ts)
{
    double best = 0;
    for (size_t i = 0; i < c->peer_left.n; i++) {
        double t = c->peer_left.v[i]->ts;
        if (t > 0 && ts > 0 && t <= ts && ts - t <= 1.0 && t > best)
            best = t;
    }
    return best;
}

typedef struct proc_ranks {
    char *key;              /* "host:pid", or "host:pid group" */
    rank_rec **v;
    size_t n, cap;
    UT_hash_handle hh;
} proc_ranks;

static void proc_ranks_add(proc_ranks **byproc, char *key, rank_rec *r)
{
    proc_ranks *pr;
    HASH_FIND_STR(*byproc, key, pr);
    if (!pr) {
        pr = xmalloc(sizeof *pr);
        memset(pr, 0, sizeof *pr);
        pr->key = key;
        HASH_ADD_KEYPTR(hh, *byproc, pr->key, strlen(pr->key), pr);
    } else {
        free(key);
    }
    VEC_RESERVE(*pr, 4);
    pr->v[pr->n++] = r;
}

static void proc_ranks_free(proc_ranks **byproc)
{
    proc_ranks *pr, *ptmp;
    HASH_ITER(hh, *byproc, pr, ptmp) {
        HASH_DEL(*byproc, pr);
        free(pr->key);
        free(pr->v);
        free(pr);
    }
}

/*
 * Picks the rank record an ipc warning belongs to: same process, an ipc rank,
 * the group, rank and nranks the message names, created before the warning.
 * ipc-peer-lost names no group, and a process may hold several ipc
 * communicators with the same rank numbers; then, in order: one that has no
 * peer-lost warning yet (the shim writes one per communicator), one whose
 * root saw a rank leave just before, one still alive at the warning (the
 * latest created), else the one that ended last (its destroy's teardown).
 */
static void join_ipc_warning(inspect_state *st, proc_ranks *byproc, warning_rec *w)
{
    char *group;
    long long rank = -1, nranks = -1;
    if (!parse_ipc_message(w, &group, &rank, &nranks))
        return;
    /* Today's shims name the group: its ranks in the process, not all of them
     * (a process that makes one per refit has thousands). */
    char *key = group ? xasprintf("%s:%lld %s", w->host, w->pid, group) : xasprintf("%s:%lld", w->host, w->pid);
    proc_ranks *pr;
    HASH_FIND_STR(byproc, key, pr);
    free(key);
    int lost = strcmp(w->what, "ipc-peer-lost") == 0;
    rank_rec *best = NULL;
    int best_free = 0, best_live = 0;
    double best_pl = 0, best_t = 0;
    for (size_t i = 0; pr && i < pr->n; i++) {
        rank_rec *r = pr->v[i];
        if (!is_ipc_rank(r) || r->rank != rank || r->nranks != nranks || (group && strcmp(r->group, group) != 0))
            continue;
        if (w->ts > 0 && r->ts > 0 && r->ts > w->ts)
            continue;
        communicator *c = comm_of(st, r);
        int is_free = !(lost && r->ipc_lost_warned);
        double pl = c ? recent_peer_left(c, w->ts) : 0;
        int live = !r->end || !r->end->ts || !w->ts || r->end->ts >= w->ts;
        double t = live ? r->ts : r->end->ts;
        int better = !best || is_free > best_free ||
                     (is_free == best_free && (pl > best_pl ||
                      (pl == best_pl && (live > best_live || (live == best_live && t > best_t)))));
        if (better) {
            best = r;
            best_free = is_free;
            best_pl = pl;
            best_live = live;
            best_t = t;
        }
    }
    free(group);
    if (!best)
        return;
    communicator *c = comm_of(st, best);
    if (!c)
        return;
    w->rank = best;
    w->after_end = best->end && best->end->ts > 0 && w->ts > 0 && w->ts > best->end->ts;
    if (lost)
        best->ipc_lost_warned = 1;
    VEC_RESERVE(c->ipc_warns, 4);
    c->ipc_warns.v[c->ipc_warns.n++] = w;
}

/* The first rank (in input order) that carried out each decision id. */
typedef struct id_rank {
    const char *id;         /* the rank's dec_id_norm */
    rank_rec *r;
    UT_hash_handle hh;
} id_rank;

/* The communicator a root's ipc_peer_left belongs to: the one its decision
 * record joined, else the one whose ranks carried that decision out, else
 * the one of the root's unique ID for that rendezvous address. */
static communicator *peer_left_comm(inspect_state *st, id_rank *byid, const peer_left_rec *p)
{
    communicator *c = NULL;
    if (p->id_norm) {
        decision_rec *d;
        HASH_FIND_STR(st->decision_by_id, p->id_norm, d);
        if (d && d->group)
            HASH_FIND_STR(st->comms, d->group, c);
        id_rank *ir;
        HASH_FIND_STR(byid, p->id_norm, ir);
        if (!c && ir)
            c = comm_of(st, ir->r);
    }
    return c ? c : comm_of_listen(st, p->host, p->pid, p->listen, NULL);
}

static void join_peer_left(inspect_state *st)
{
    id_rank *byid = NULL, *ir, *itmp;
    for (rank_rec *r = st->ranks; r && st->peer_left.n; r = r->next) {
        if (!r->dec_id_norm)
            continue;
        HASH_FIND_STR(byid, r->dec_id_norm, ir);
        if (ir)
            continue;
        ir = xmalloc(sizeof *ir);
        ir->id = r->dec_id_norm;
        ir->r = r;
        HASH_ADD_KEYPTR(hh, byid, ir->id, strlen(ir->id), ir);
    }
    for (size_t i = 0; i < st->peer_left.n; i++) {
        peer_left_rec *p = &st->peer_left.v[i];
        communicator *c = peer_left_comm(st, byid, p);
        if (!c)
            continue;
        p->group = xstrdup(c->group);
        VEC_RESERVE(c->peer_left, 2);
        c->peer_left.v[c->peer_left.n++] = p;
        for (size_t k = 0; k < c->nranks_rec; k++) {
            rank_rec *r = c->ranks[k];
            if (r->rank != p->rank)
                continue;
            p->at_destroy = inspect_ended_normally(r) && (!r->end->ts || !p->ts || r->end->ts <= p->ts);
            break;
        }
    }
    HASH_ITER(hh, byid, ir, itmp) {
        HASH_DEL(byid, ir);
        free(ir);
    }
}

/* ipc communicators: the root's ipc_peer_left records (on the decision id)
 * and the ranks' ipc warnings, then whether a peer was lost while it ran. */
static void join_ipc(inspect_state *st)
{
    communicator *c, *tmp;
    HASH_ITER(hh, st->comms, c, tmp) {
        for (size_t i = 0; i < c->nranks_rec; i++)
            if (is_ipc_rank(c->ranks[i]))
                c->ipc = 1;
        if (c->ipc && strcmp(c->network, "-") == 0)
            c->network = "ipc";
    }
    join_peer_left(st);

    proc_ranks *byproc = NULL;
    for (rank_rec *r = st->ranks; r; r = r->next) {
        if (!is_ipc_rank(r))
            continue;
        proc_ranks_add(&byproc, xasprintf("%s:%lld", r->host, r->pid), r);
        proc_ranks_add(&byproc, xasprintf("%s:%lld %s", r->host, r->pid, r->group), r);
    }
    if (byproc)
        for (size_t i = 0; i < st->warnings.n; i++)
            if (is_ipc_warning(&st->warnings.v[i]))
                join_ipc_warning(st, byproc, &st->warnings.v[i]);
    proc_ranks_free(&byproc);

    /* A peer was lost while the communicator ran: a rank lost it before its
     * own end, or some rank did not end it (died, exited without destroy).
     * At a normal destroy every rank closes its connection, so the root may
     * write ipc_peer_left and the ranks still tearing down ipc-peer-lost:
     * after their own comm_end, that is no loss. */
    HASH_ITER(hh, st->comms, c, tmp) {
        if (!c->ipc)
            continue;
        int evidence = c->peer_left.n > 0, during = 0, abnormal = 0;
        for (size_t i = 0; i < c->ipc_warns.n; i++) {
            const warning_rec *w = c->ipc_warns.v[i];
            if (strcmp(w->what, "ipc-peer-lost") == 0) {
                evidence = 1;
                if (!w->after_end)
                    during = 1;
            }
        }
        for (size_t i = 0; i < c->peer_left.n; i++)
            if (!c->peer_left.v[i]->at_destroy)
                abnormal = 1;
        for (size_t i = 0; i < c->nranks_rec; i++) {
            rank_rec *r = c->ranks[i];
            if (is_ipc_rank(r) && (r->result == 0 || r->result == 7) && !inspect_ended_normally(r))
                abnormal = 1;
        }
        c->ipc_lost = evidence && (during || abnormal);
    }
}

/* "decided by root 127.0.0.1:37149 (0x4f9fb520), 2 rounds: socket" or
 * "fell back on rank 1: <reason>", for the table's decisions section. */
static void summarize_decision(communicator *c)
{
    if (!c->marked && !c->decision)
        return;
    const decision_rec *d = c->decision;
    const char *id = d ? d->decision_id : NULL;
    long long rounds = 0;
    size_t via = 0;
    list_buf fb = {0};
    const char *fb_reason = NULL;
    for (size_t i = 0; i < c->nranks_rec; i++) {
        rank_rec *r = c->ranks[i];
        if (r->dec_via_root) {
            via++;
            if (!id && r->dec_id_norm)
                id = r->dec_id;
            if (r->dec_rounds > rounds)
                rounds = r->dec_rounds;
        }
        if (r->dec_fallback) {
            lb_add_ll(&fb, r->rank);
            if (!fb_reason)
                fb_reason = r->dec_fallback;
        }
    }
    char *out;
    if (d || via) {
        char *sid = id ? short_group(id) : xstrdup("?");
        if (!rounds)
            rounds = !(d && d->stage && strcmp(d->stage, "commit") == 0) ? 1
                     : d->action && strcmp(d->action, "ipc") == 0 ? 3 : 2;
        out = xasprintf("decided by root %s (%s), %lld round%s: %s", c->root ? c->root : "?", sid, rounds,
                        rounds == 1 ? "" : "s", d && d->action ? d->action : c->action);
        free(sid);
        char *more = NULL;
        if (d && inspect_root_gave_up(c) && d->action_reason && !strstr(d->action_reason, "timed out after")) {
            /* Not the timeout: a limit, or a host's leader that lost a rank (newer shims). */
            char *why = str_cut(d->action_reason, 160);
            more = xasprintf(", gave up at once with %lld of %lld ranks arrived: %s", d->arrived, d->nranks, why);
            free(why);
        } else if (d && inspect_root_gave_up(c))
            more = xasprintf(", timed out with %lld of %lld ranks (missing %s)", d->arrived, d->nranks,
                             d->missing && d->missing[0] ? d->missing : "?");
        else if (inspect_root_gave_up(c))
            more = xstrdup(", timed out before every rank arrived");
        else if (inspect_vote_undone(c))
            /* one round: socket, and a rank said in its HELLO that it could not set it up (shims from 2026-11-25) */
            more = xstrdup(rounds == 1 ? ", undone by a rank's HELLO (it could not set the action up)"
                                       : ", undone in the vote round");
        if (more) {
            char *o = xasprintf("%s%s", out, more);
            free(out);
            free(more);
            out = o;
        }
        if (d && d->rejected > 0) {
            char *by = inspect_rejected_text(d, 0);
            char *o = xasprintf("%s, %lld connection%s rejected%s%s%s", out, d->rejected, d->rejected == 1 ? "" : "s",
                                by ? " (" : "", by ? by : "", by ? ")" : "");
            free(by);
            free(out);
            out = o;
        }
        if (fb.items) {
            char *why = str_cut(fb_reason, 100);
            char *o = xasprintf("%s; rank%s %s fell back: %s", out, fb.items > 1 ? "s" : "", fb.s, why);
            free(why);
            free(out);
            out = o;
        }
    } else if (fb.items) {
        char *why = str_cut(fb_reason, 120);
        out = xasprintf("fell back on rank%s %s: %s", fb.items > 1 ? "s" : "", fb.s, why);
        free(why);
    } else {
        out = xstrdup("rendezvous outcome unknown");
    }
    /* the root's ipc_peer_left records: at a destroy (normal), or while it ran */
    list_buf at = {0}, ran = {0};
    for (size_t i = 0; i < c->peer_left.n; i++)
        lb_add_ll(c->peer_left.v[i]->at_destroy ? &at : &ran, c->peer_left.v[i]->rank);
    if (ran.items) {
        char *o = xasprintf("%s; the root saw rank%s %s leave while it ran (ipc_peer_left)", out,
                            ran.items > 1 ? "s" : "", ran.s);
        free(out);
        out = o;
    }
    if (at.items) {
        char *o = xasprintf("%s; the root saw rank%s %s leave at %s destroy (ipc_peer_left)", out,
                            at.items > 1 ? "s" : "", at.s, at.items > 1 ? "their" : "its");
        free(out);
        out = o;
    }
    c->decision_summary = out;
}

void inspect_group(inspect_state *st)
{
    inspect_errors_flush(st); /* the last file's bad lines, when a caller fed lines itself */
    size_t n = 0;
    for (rank_rec *r = st->ranks; r; r = r->next)
        n++;
    rank_rec **byts = xmalloc(n * sizeof *byts);
    n = 0;
    for (rank_rec *r = st->ranks; r; r = r->next)
        byts[n++] = r;
    qsort(byts, n, sizeof *byts, rank_ts_cmp);
    match_ends(st, byts, n);
    free(byts);

    pid_comm *bypid = index_pid_comm(st);
    for (rank_rec *r = st->ranks; r; r = r->next)
        join_network(st, bypid, r);
    pid_comm_free(&bypid);
    add_log_only_ranks(st);
    for (rank_rec *r = st->ranks; r; r = r->next) {
        r->proc = inspect_process(st, r->host, r->pid);
        communicator *c;
        HASH_FIND_STR(st->comms, r->group, c);
        if (!c) {
            c = xmalloc(sizeof *c);
            memset(c, 0, sizeof *c);
            c->group = xstrdup(r->group);
            c->short_group = short_group(r->group);
            HASH_ADD_KEYPTR(hh, st->comms, c->group, strlen(c->group), c);
            st->ncomms++;
        }
        if (c->nranks_rec == c->cap) {
            c->cap = c->cap ? c->cap * 2 : 4;
            c->ranks = xrealloc(c->ranks, c->cap * sizeof *c->ranks);
        }
        c->ranks[c->nranks_rec++] = r;
    }
    st->sorted = xmalloc((st->ncomms ? st->ncomms : 1) * sizeof *st->sorted);
    size_t i = 0;
    communicator *c, *tmp;
    HASH_ITER(hh, st->comms, c, tmp) {
        summarize(c);
        st->sorted[i++] = c;
    }
    join_decisions(st);
    join_ipc(st);
    HASH_ITER(hh, st->comms, c, tmp)
        summarize_decision(c);
    if (st->ncomms)
        qsort(st->sorted, st->ncomms, sizeof *st->sorted, comm_cmp);
}
