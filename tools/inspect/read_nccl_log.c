/* Extracts from NCCL_DEBUG=INFO output the one thing the records cannot know:
 * which network transport each communicator ended up on, plus NCCL's WARN
 * lines and NCCL 2.32's ATTN lines ("important non-fatal conditions, such as
 * configuration fallbacks and plugin initialization failures": the silent
 * fallbacks this tool exists to show).  Lines look like
 *   vm:735:735 [1] NCCL INFO Using network Socket
 *   vm:735:735 [1] NCCL INFO ncclCommInitRankConfig comm 0x37d3beb0 rank 1 nranks 2 ... - Init START
 * NCCL prints "Using network X" on the initialising thread just before the
 * "Init START" of the communicator it belongs to, so we keep the last network
 * per thread and bind it when that thread names a comm. */
#define _GNU_SOURCE
#include "inspect.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static net_entry *net_get(net_entry **h, const char *key, int create)
{
    net_entry *e;
    HASH_FIND_STR(*h, key, e);
    if (e || !create)
        return e;
    e = xmalloc(sizeof *e);
    memset(e, 0, sizeof *e);
    e->key = xstrdup(key);
    HASH_ADD_KEYPTR(hh, *h, e->key, strlen(e->key), e);
    return e;
}

static void set_str(char **dst, const char *s, size_t n)
{
    free(*dst);
    *dst = xmalloc(n + 1);
    memcpy(*dst, s, n);
    (*dst)[n] = '\0';
}

/* Parses "host:pid:tid" ending just before `end`. Application wrappers
 * sometimes glue a prefix on ("[rank0]:vm:735:735"); everything up to the
 * last "]:" is dropped. Returns 0 on success. */
static int parse_origin(const char *line, const char *end, char **host, long long *pid, long long *tid)
{
    const char *p = end;
    while (p > line && isspace((unsigned char)p[-1]))
        p--;
    /* WARN lines carry the source location: "[dev] misc/socket.cc:752 NCCL WARN" */
    if (p > line && p[-1] != ']') {
        while (p > line && !isspace((unsigned char)p[-1]))
            p--;
        while (p > line && isspace((unsigned char)p[-1]))
            p--;
    }
    /* "[dev]" */
    if (p == line || p[-1] != ']')
        return -1;
    while (p > line && p[-1] != '[')
        p--;
    if (p == line)
        return -1;
    p--;
    while (p > line && isspace((unsigned char)p[-1]))
        p--;
    const char *tok_end = p;
    while (p > line && !isspace((unsigned char)p[-1]))
        p--;
    const char *tok = p;
    const char *c2 = NULL, *c1 = NULL;
    for (const char *q = tok_end; q > tok; q--) {
        if (q[-1] == ':') {
            if (!c2)
                c2 = q - 1;
            else {
                c1 = q - 1;
                break;
            }
        }
    }
    if (!c1 || !c2)
        return -1;
    for (const char *q = c1 + 1; q < c2; q++)
        if (!isdigit((unsigned char)*q))
            return -1;
    for (const char *q = c2 + 1; q < tok_end; q++)
        if (!isdigit((unsigned char)*q))
            return -1;
    if (c2 - c1 < 2 || tok_end - c2 < 2 || c2 - c1 > 18 || tok_end - c2 > 18)
        return -1;
    for (const char *q = c1; q > tok + 1; q--)
        if (q[-1] == ':' && q[-2] == ']') {
            tok = q;
            break;
        }
    if (c1 == tok)
        return -1;
    char *h = xmalloc((size_t)(c1 - tok) + 1);
    memcpy(h, tok, (size_t)(c1 - tok));
    h[c1 - tok] = '\0';
    *host = short_host(h);
    free(h);
    *pid = strtoll(c1 + 1, NULL, 10);
    *tid = strtoll(c2 + 1, NULL, 10);
    return 0;
}

/* The number after `key` in `msg` ("rank 1" -> 1); -1 when absent. */
static long long field_ll(const char *msg, const char *key)
{
    const char *p = strstr(msg, key);
    if (!p)
        return -1;
    p += strlen(key);
    if (*p < '0' || *p > '9')
        return -1;
    return strtoll(p, NULL, 10);
}

/* The token after `key` ("commId 0x1bec..." -> "0x1bec..."), or NULL. */
static char *field_tok(const char *msg, const char *key)
{
    const char *p = strstr(msg, key);
    if (!p)
        return NULL;
    p += strlen(key);
    size_t n = strcspn(p, " \t-");
    if (n == 0 || n > 40)
        return NULL;
    char *o = xmalloc(n + 1);
    memcpy(o, p, n);
    o[n] = '\0';
    return o;
}

/* "ncclCommInitRankConfig comm 0x37d3beb0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 70 commId 0x1bec0da7ecb75337 - Init START"
 * (splits: "... parent 0x.. splitCount 1 color 0 key 0- Init START"): the
 * communicator as NCCL saw it, so that runs without the shim still list it. */
static void note_init(inspect_state *st, net_entry *e, const char *host, long long pid, long long tid,
                      const char *msg, const char *c, const char *norm)
{
    if (e->has_init)
        return;
    e->has_init = 1;
    free(e->comm_norm);
    e->comm_norm = xstrdup(norm);
    e->seq = (long)st->nccl_lines;
    e->host = xstrdup(host);
    e->pid = pid;
    e->tid = tid;
    size_t n = strcspn(c, " \t");
    e->comm = xmalloc(n + 1);
    memcpy(e->comm, c, n);
    e->comm[n] = '\0';
    const char *sp = strchr(msg, ' ');
    if (sp && sp > msg && (size_t)(sp - msg) < 64 && strncmp(msg, "nccl", 4) == 0) {
        e->fn = xmalloc((size_t)(sp - msg) + 1);
        memcpy(e->fn, msg, (size_t)(sp - msg));
        e->fn[sp - msg] = '\0';
    }
    e->rank = field_ll(c, " rank ");
    e->nranks = field_ll(c, " nranks ");
    e->cuda_dev = field_ll(c, " cudaDev ");
    e->commid = field_tok(c, " commId ");
    e->parent = field_tok(c, " parent ");
}

static void bind_comm(inspect_state *st, const char *host, long long pid, long long tid, const char *proc_key,
                      const char *tid_key, const char *msg, int start)
{
    const char *c = strstr(msg, "comm 0x");
    if (!c)
        return;
    c += 5;
    char *norm = norm_comm_ptr(c);
    net_entry *t = net_get(&st->nccl_tid, tid_key, 1);
    free(t->comm_norm);
    t->comm_norm = xstrdup(norm);
    char *key = xasprintf("%s:%s", proc_key, norm);
    net_entry *e = net_get(&st->nccl_comm, key, 1);
    note_init(st, e, host, pid, tid, msg, c, norm);
    /* The network seen before Init START wins; Init COMPLETE only fills in
     * when the START line was missing (log cut, or a different NCCL). */
    if (!e->network) {
        const char *net = t->network;
        if (!net) {
            net_entry *pn = net_get(&st->nccl_proc_net, proc_key, 0);
            net = pn ? pn->network : NULL;
        }
        if (net)
            e->network = xstrdup(net);
    }
    /* NCCL tries its NET plugins in commAlloc, before Init START, on the
     * initialising thread: a failure seen there belongs to this comm. */
    if (start && t->failed) {
        if (!e->failed)
            e->failed = t->failed;
        else
            free(t->failed);
        t->failed = NULL;
    }
    free(key);
    free(norm);
}

/* The NCCL process `proc_key` (host:pid), created on first sight. */
static nccl_proc *proc_get(inspect_state *st, const char *proc_key)
{
    nccl_proc *np;
    HASH_FIND_STR(st->nccl_procs, proc_key, np);
    if (!np) {
        np = xmalloc(sizeof *np);
        memset(np, 0, sizeof *np);
        np->key = xstrdup(proc_key);
        HASH_ADD_KEYPTR(hh, st->nccl_procs, np->key, strlen(np->key), np);
    }
    return np;
}

static void note_plugin(inspect_state *st, const char *proc_key, const char *name, size_t n)
{
    nccl_proc *np = proc_get(st, proc_key);
    char *s = xmalloc(n + 1);
    memcpy(s, name, n);
    s[n] = '\0';
    strlist_add_unique(&np->plugins, s);
    free(s);
}

/* "Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0": a fallback for
 * NCCL versions that do not print "Using network" per communicator. */
static void bind_channel(inspect_state *st, const char *proc_key, const char *tid_key, const char *msg)
{
    const char *v = strstr(msg, " via NET/");
    if (!v)
        return;
    v += strlen(" via NET/");
    size_t n = strcspn(v, "/ \t");
    net_entry *t = net_get(&st->nccl_tid, tid_key, 0);
    if (!t || !t->comm_norm || n == 0)
        return;
    char *key = xasprintf("%s:%s", proc_key, t->comm_norm);
    net_entry *e = net_get(&st->nccl_comm, key, 1);
    if (!e->network)
        set_str(&e->network, v, n);
    e->channels++;
    free(key);
}

/* "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels,
 * 32 p2p channels per peer" (NCCL 2.19+), on the initialising thread: the
 * channels NCCL chose for the comm that thread is initialising. */
static void bind_coll_channels(inspect_state *st, const char *proc_key, const char *tid_key, const char *msg)
{
    char *end;
    long n = strtol(msg, &end, 10);
    net_entry *t = net_get(&st->nccl_tid, tid_key, 0);
    if (end == msg || n <= 0 || n > 4096 || strncmp(end, " coll channels, ", 16) != 0 || !t || !t->comm_norm)
        return;
    char *key = xasprintf("%s:%s", proc_key, t->comm_norm);
    net_get(&st->nccl_comm, key, 1)->coll_channels = (int)n;
    free(key);
}

/* One WARN or ATTN line into a process's first three (`kept`), `*n` counting all. */
static void keep_line(char **kept, int *n, const char *msg)
{
    if (*n < INSPECT_MAX_NCCL_WARNS) {
        /* abbreviated: a problem line, not a log dump */
        size_t len = strlen(msg);
        while (len > 0 && isspace((unsigned char)msg[len - 1]))
            len--;
        if (len > 100) {
            kept[*n] = xasprintf("%.97s...", msg);
        } else {
            kept[*n] = xmalloc(len + 1);
            memcpy(kept[*n], msg, len);
            kept[*n][len] = '\0';
        }
    }
    if (*n < 1000000)
        (*n)++;
}

static void add_warn(inspect_state *st, const char *proc_key, const char *msg, int attn)
{
    nccl_proc *np = proc_get(st, proc_key);
    if (attn)
        keep_line(np->attns, &np->nattns, msg);
    else
        keep_line(np->warns, &np->nwarns, msg);
}

/* "Failed to initialize NET plugin X": NCCL 2.28 logs it as INFO, 2.32 as
 * ATTN; the plugin's init refused this comm (e.g. no resources left) and NCCL
 * goes on to its next NET plugin, in the end Socket. */
static void note_failed_plugin(inspect_state *st, const char *tid_key, const char *msg)
{
    const char *name = msg + 32;
    size_t n = strcspn(name, " \t\r\n");
    /* The first refusal names the fabric: NCCL tries external plugins
     * before its own IB, which then fails too where there is no IB. */
    if (n > 0 && n < 128 && !net_get(&st->nccl_tid, tid_key, 1)->failed)
        set_str(&net_get(&st->nccl_tid, tid_key, 1)->failed, name, n);
}

int inspect_feed_nccl_line(inspect_state *st, const char *buf, size_t len)
{
    /* Work on a NUL-terminated copy cut at any embedded NUL, so the string
     * functions below cannot run past the input. */
    const char *nul = memchr(buf, '\0', len);
    if (nul)
        len = (size_t)(nul - buf);
    char *line = xmalloc(len + 1);
    memcpy(line, buf, len);
    line[len] = '\0';
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        line[--len] = '\0';

    /* ATTN's exact shape is not known (no 2.32 source was at hand): read as
     * WARN's, with or without the "file.cc:line" before the level. */
    int is_warn = 0, is_attn = 0;
    char *m = strstr(line, " NCCL INFO ");
    if (!m) {
        m = strstr(line, " NCCL WARN ");
        is_warn = 1;
    }
    if (!m) {
        m = strstr(line, " NCCL ATTN ");
        is_attn = 1;
    }
    char *host = NULL;
    long long pid, tid;
    if (!m || parse_origin(line, m, &host, &pid, &tid) != 0) {
        free(line);
        return 0;
    }
    st->nccl_lines++;
    const char *msg = m + strlen(" NCCL INFO ");
    char *proc_key = xasprintf("%s:%lld", host, pid);
    char *tid_key = xasprintf("%s:%lld", proc_key, tid);
    if (is_warn || is_attn) {
        add_warn(st, proc_key, msg, is_attn);
        if (is_attn && strncmp(msg, "Failed to initialize NET plugin ", 32) == 0)
            note_failed_plugin(st, tid_key, msg);
    } else if (strncmp(msg, "Using network ", 14) == 0) {
        const char *net = msg + 14;
        size_t n = strlen(net);
        while (n > 0 && isspace((unsigned char)net[n - 1]))
            n--;
        if (n > 0) {
            set_str(&net_get(&st->nccl_tid, tid_key, 1)->network, net, n);
            set_str(&net_get(&st->nccl_proc_net, proc_key, 1)->network, net, n);
        }
    } else if (strncmp(msg, "Failed to initialize NET plugin ", 32) == 0) {
        note_failed_plugin(st, tid_key, msg);
    } else if (strncmp(msg, "NET/Plugin: Loaded net plugin ", 30) == 0) {
        const char *name = msg + 30;
        size_t n = strcspn(name, " \t\r\n");
        if (n > 0 && n < 128)
            note_plugin(st, proc_key, name, n);
    } else if (strstr(msg, "Init START") || strstr(msg, "Init COMPLETE")) {
        bind_comm(st, host, pid, tid, proc_key, tid_key, msg, strstr(msg, "Init START") != NULL);
    } else if (strncmp(msg, "Channel ", 8) == 0) {
        bind_channel(st, proc_key, tid_key, msg);
    } else if (isdigit((unsigned char)msg[0]) && strstr(msg, " coll channels, ")) {
        bind_coll_channels(st, proc_key, tid_key, msg);
    }
    free(tid_key);
    free(proc_key);
    free(host);
    free(line);
    return 1;
}
