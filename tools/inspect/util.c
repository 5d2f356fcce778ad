/* Small helpers shared by every pass: allocation that cannot return NULL,
 * string lists, and the normalisations that make joins work. */
#include "inspect.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* An inspection tool has nothing useful to do after an allocation failure;
 * dying loudly beats producing a silently partial report. */
static void oom(void)
{
    fputs("ncclshim-inspect: out of memory\n", stderr);
    exit(2);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom();
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        oom();
    return p;
}

char *xstrdup(const char *s)
{
    char *p = strdup(s ? s : "");
    if (!p)
        oom();
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return xstrdup("?");
    char *p = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void strlist_add(strlist *l, char *owned)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = owned;
}

void strlist_add_unique(strlist *l, const char *s)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], s) == 0)
            return;
    strlist_add(l, xstrdup(s));
}

void strlist_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* The shim prints pointers with %p, NCCL too, but libcs differ (glibc "0x1a",
 * others zero-pad) and people hand-edit; compare the numeric value only. */
char *norm_comm_ptr(const char *s)
{
    if (!s)
        return NULL;
    while (isspace((unsigned char)*s))
        s++;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    while (*s == '0')
        s++;
    size_t n = 0;
    while (isxdigit((unsigned char)s[n]))
        n++;
    char *out = xmalloc(n + 2);
    if (n == 0) {
        strcpy(out, "0");
        return out;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)s[i]);
    out[n] = '\0';
    return out;
}

/* A file's path without "." and "dir/.." components ("/x/tests/bin/../fake/a/libnccl.so.2"
 * is "/x/tests/fake/a/libnccl.so.2"): one library reached by two paths (an rpath of
 * $ORIGIN/.., a dlopen by its plain path) is one.  Lexical, as the records may come
 * from another host: a symbolic link's ".." is taken as its parent's. */
char *norm_path(const char *path)
{
    size_t n = strlen(path);
    char *out = xmalloc(n + 1);
    size_t o = 0;
    int absolute = path[0] == '/';
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0)
            break;
        if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.' && absolute && o == 0)) {
            /* nothing ("/.." is "/") */
        } else if (len == 2 && p[0] == '.' && p[1] == '.' && o > 0 &&
                   !(o >= 2 && out[o - 1] == '.' && out[o - 2] == '.' && (o == 2 || out[o - 3] == '/'))) {
            while (o > 0 && out[o - 1] != '/')
                o--;            /* the last component goes */
            if (o > 0)
                o--;            /* and its '/' */
        } else {
            if (o > 0 || absolute)
                out[o++] = '/';
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
    }
    if (o == 0 && absolute)
        out[o++] = '/';
    out[o] = '\0';
    return out;
}

/* NCCL prints gethostname() cut at the first '.', the shim prints it whole. */
char *short_host(const char *host)
{
    const char *dot = strchr(host, '.');
    size_t n = dot ? (size_t)(dot - host) : strlen(host);
    char *out = xmalloc(n + 1);
    memcpy(out, host, n);
    out[n] = '\0';
    return out;
}

/* Full 64-bit hashes make the table too wide; 32 bits are enough to tell a
 * handful of communicators apart, and --json keeps the full name. */
char *short_group(const char *group)
{
    size_t n = strlen(group);
    char *out = xmalloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (group[i] == '0' && group[i + 1] == 'x' && (i == 0 || !isxdigit((unsigned char)group[i - 1]))) {
            size_t j = i + 2, digits = 0;
            while (isxdigit((unsigned char)group[j])) {
                j++;
                digits++;
            }
            size_t keep = digits > 8 ? 8 : digits;
            memcpy(out + o, group + i, 2 + keep);
            o += 2 + keep;
            i = j;
        } else {
            out[o++] = group[i++];
        }
    }
    out[o] = '\0';
    return out;
}

void humanize_bytes(unsigned long long b, char *out, size_t outlen)
{
    static const char units[] = "KMGTPE";
    if (b < 1024) {
        snprintf(out, outlen, "%lluB", b);
        return;
    }
    double v = (double)b;
    int u = -1;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(out, outlen, v < 10.0 ? "%.1f%ci" : "%.0f%ci", v, units[u]);
}

void op_add(op_stat **ops, const char *name, unsigned long long count, unsigned long long bytes)
{
    op_stat *o;
    HASH_FIND_STR(*ops, name, o);
    if (!o) {
        o = xmalloc(sizeof *o);
        memset(o, 0, sizeof *o);
        o->name = xstrdup(name);
        HASH_ADD_KEYPTR(hh, *ops, o->name, strlen(o->name), o);
    }
    /* Saturate: counts come from untrusted input. */
    o->count = (o->count + count < o->count) ? ~0ULL : o->count + count;
    o->bytes = (o->bytes + bytes < o->bytes) ? ~0ULL : o->bytes + bytes;
}

void op_free(op_stat **ops)
{
    op_stat *o, *tmp;
    HASH_ITER(hh, *ops, o, tmp) {
        HASH_DEL(*ops, o);
        free(o->name);
        free(o);
    }
}

int op_cmp(op_stat *a, op_stat *b)
{
    return strcmp(a->name, b->name);
}

void lb_add(list_buf *b, const char *item)
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

void lb_add_ll(list_buf *b, long long v)
{
    if (b->has_last && b->last == v)
        return; /* ranks come sorted: two records of one rank are one item */
    b->has_last = 1;
    b->last = v;
    char item[24];
    snprintf(item, sizeof item, "%lld", v);
    lb_add(b, item);
}

/* s, or its first `max` bytes and "...": reasons quoted inside a problem line. */
char *str_cut(const char *s, size_t max)
{
    return strlen(s) <= max ? xstrdup(s) : xasprintf("%.*s...", (int)max, s);
}
