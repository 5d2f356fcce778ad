/*
 * The record writer (record.h): one JSON line built in the caller's buffer,
 * escaped and bounded, appended with one write(2) so that threads and
 * processes never interleave; the file opened on the first record, with its
 * first line, reopened after fork, and left alone once the process is leaving.
 */
#define _GNU_SOURCE
#include "record.h"

#include "clock.h"
#include "config.h"
#include "record_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * The record file descriptor: -1 = not opened yet, -2 = disabled (could not
 * open, or mode=off).  Opened once under g_open_lock; afterwards read with an
 * atomic load and used without a lock, because O_APPEND writes of whole lines
 * do not interleave.
 */
static atomic_int g_fd = -1;
/* The pid that opened g_fd: a vfork child sees the same memory, not the same process. */
static atomic_int g_fd_pid;
/* Set once the process is leaving (shim_record_leaving): no more opening or printing. */
static atomic_int g_leaving;
static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_path[PATH_MAX]; /* written under g_open_lock before g_fd is published */

int shim_gettid(void)
{
    return (int)syscall(SYS_gettid);
}

/* What record_file_open did instead of the plain path, recorded once the
 * file's first line is written; under g_open_lock until the file is published. */
static char g_open_note[2 * PATH_MAX + 256];

static int open_record_file(void)
{
    const struct shim_config *c = shim_config();
    if (c->mode == MODE_OFF)
        return -2;
    char path[PATH_MAX], boot8[9];
    host_identity_boot8(shim_host_identity(), boot8);
    int fd = record_file_open(c->log_dir, c->log_dir_default, c->host, boot8, (int)getpid(), path, sizeof(path),
                              g_open_note, sizeof(g_open_note));
    if (fd < 0)
        return -2;
    memcpy(g_path, path, sizeof(path));
    atomic_store_explicit(&g_fd_pid, (int)getpid(), memory_order_relaxed);
    return fd;
}

int shim_record_leaving(void)
{
    if (atomic_load_explicit(&g_fd, memory_order_acquire) < 0 ||
        atomic_load_explicit(&g_fd_pid, memory_order_relaxed) != (int)getpid())
        return 0;
    return !atomic_exchange(&g_leaving, 1);
}

/* Set once by the constructor, before any thread exists; read-only afterwards. */
static void (*g_write_first)(void);

void shim_record_set_first(void (*write_first)(void))
{
    g_write_first = write_first;
}

static void write_first(void)
{
    if (g_write_first)
        g_write_first();
}

static int record_fd(void)
{
    int fd = atomic_load_explicit(&g_fd, memory_order_acquire);
    if (fd != -1)
        return fd;
    if (atomic_load_explicit(&g_leaving, memory_order_relaxed))
        return -2;
    pthread_mutex_lock(&g_open_lock);
    fd = atomic_load_explicit(&g_fd, memory_order_acquire);
    int opened = 0;
    if (fd == -1) {
        fd = open_record_file();
        atomic_store_explicit(&g_fd, fd, memory_order_release);
        opened = fd >= 0;
    }
    pthread_mutex_unlock(&g_open_lock);
    /* The file exists only for processes that use NCCL (a shell or `timeout`
     * under the same LD_PRELOAD writes nothing); its first line says who wrote it. */
    if (opened) {
        write_first();
        if (g_open_note[0])
            shim_record_warning("record-file", g_open_note);
    }
    return fd;
}

const char *shim_record_path(void)
{
    return atomic_load_explicit(&g_fd, memory_order_acquire) >= 0 ? g_path : "";
}

int shim_record_opened(void)
{
    return atomic_load_explicit(&g_fd, memory_order_acquire) >= 0;
}

void shim_record_lock_for_fork(void)
{
    pthread_mutex_lock(&g_open_lock);
}

void shim_record_unlock_after_fork(void)
{
    pthread_mutex_unlock(&g_open_lock);
}

void shim_record_after_fork_child(void)
{
    /* The child must not append to its parent's file: it is another pid. */
    atomic_store(&g_leaving, 0);
    int fd = atomic_exchange(&g_fd, -1);
    if (fd >= 0)
        close(fd);
    pthread_mutex_init(&g_open_lock, NULL);
}

static void put(struct jw *w, const char *s, size_t n)
{
    /* Leave room for the closing "}\n" and any open brackets' closers. */
    if (w->len + n + 64 > sizeof(w->buf)) {
        w->truncated = 1;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static void putc_(struct jw *w, char c)
{
    put(w, &c, 1);
}

/* Length of a valid UTF-8 sequence starting at s, or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || (n == 2 && s[0] < 0xC2))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* Strings go in as valid JSON whatever their bytes: paths and titles are not always UTF-8. */
static void put_string(struct jw *w, const char *s)
{
    putc_(w, '"');
    const unsigned char *p = (const unsigned char *)s;
    size_t budget = 4096; /* no single string may take the whole record */
    while (*p && budget) {
        /* A run of printable ASCII that needs no escape goes in at once: most
         * of a record (every rank of a large job writes one inside its init). */
        size_t run = 0;
        while (run < budget && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\')
            run++;
        if (run && w->len + run + 64 > sizeof(w->buf))
            run = 1; /* near the end: as much as fits, byte by byte, as put() allows */
        if (run) {
            put(w, (const char *)p, run);
            p += run;
            budget -= run;
            continue;
        }
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            put(w, esc, 2);
            p++;
        } else if (*p < 0x20) {
            static const char hex[] = "0123456789abcdef";
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[*p >> 4];
            esc[5] = hex[*p & 15];
            put(w, esc, 6);
            p++;
        } else {
            size_t n = utf8_len(p);
            if (n == 0) {
                put(w, "\\ufffd", 6);
                p++;
            } else {
                put(w, (const char *)p, n);
                p += n;
            }
        }
        budget--;
    }
    if (*p)
        w->truncated = 1;
    putc_(w, '"');
}

static void key(struct jw *w, const char *k)
{
    if (w->need_comma)
        putc_(w, ',');
    if (k) {
        put_string(w, k);
        putc_(w, ':');
    }
    w->need_comma = 1;
}

void jw_str(struct jw *w, const char *k, const char *v)
{
    key(w, k);
    if (v)
        put_string(w, v);
    else
        put(w, "null", 4);
}

/*
 * Numbers are formatted by hand, not with snprintf: records are also written
 * from a fatal signal's handler and from _exit (shim_record_crash_begin),
 * where only async-signal-safe code may run.  The writer as a whole is:
 * no locks, no allocation, a caller's buffer and one write(2).
 */
static void put_u64(struct jw *w, unsigned long long v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do
        tmp[--i] = (char)('0' + v % 10);
    while ((v /= 10));
    put(w, tmp + i, sizeof(tmp) - i);
}

static void put_hex(struct jw *w, uint64_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[18];
    int n = 0;
    for (int shift = 60; shift >= 0; shift -= 4) {
        int d = (int)(v >> shift) & 15;
        if (d || n || shift < 4 * digits)
            tmp[n++] = hex[d];
    }
    put(w, "0x", 2);
    put(w, tmp, (size_t)n);
}

void jw_int(struct jw *w, const char *k, long long v)
{
    key(w, k);
    if (v < 0)
        putc_(w, '-');
    put_u64(w, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v);
}

void jw_u64(struct jw *w, const char *k, unsigned long long v)
{
    key(w, k);
    put_u64(w, v);
}

void jw_double(struct jw *w, const char *k, double v, int decimals)
{
    key(w, k);
    if (v != v) { /* NaN: not JSON; never expected (times, durations) */
        put(w, "null", 4);
        return;
    }
    if (decimals < 0)
        decimals = 0;
    if (decimals > 9)
        decimals = 9;
    unsigned long long scale = 1;
    for (int i = 0; i < decimals; i++)
        scale *= 10;
    if (v < 0) {
        putc_(w, '-');
        v = -v;
    }
    /* Rounded to the decimals asked, as %.*f does (beyond 2^63 / scale, the
     * integer part alone: no time or size of the shim comes near). */
    if (v >= 9.2e18 / (double)scale) {
        put_u64(w, v < 1.8e19 ? (unsigned long long)v : ~0ull);
        return;
    }
    unsigned long long fixed = (unsigned long long)(v * (double)scale + 0.5);
    put_u64(w, fixed / scale);
    if (decimals) {
        char frac[10];
        unsigned long long f = fixed % scale;
        for (int i = decimals - 1; i >= 0; i--, f /= 10)
            frac[i] = (char)('0' + f % 10);
        putc_(w, '.');
        put(w, frac, (size_t)decimals);
    }
}

void jw_ptr(struct jw *w, const char *k, const void *p)
{
    if (!p) {
        jw_null(w, k);
        return;
    }
    /* As "%p" prints it: 0x and the digits, no leading zeros. */
    key(w, k);
    putc_(w, '"');
    put_hex(w, (uintptr_t)p, 1);
    putc_(w, '"');
}

void jw_hex64(struct jw *w, const char *k, uint64_t v)
{
    key(w, k);
    putc_(w, '"');
    put_hex(w, v, 16);
    putc_(w, '"');
}

void jw_null(struct jw *w, const char *k)
{
    key(w, k);
    put(w, "null", 4);
}

void jw_open(struct jw *w, const char *k, char bracket)
{
    key(w, k);
    putc_(w, bracket);
    w->need_comma = 0;
}

void jw_close(struct jw *w, char bracket)
{
    /* Closers always fit: put() keeps 64 bytes spare. */
    w->buf[w->len++] = bracket;
    w->need_comma = 1;
}

void jw_begin(struct jw *w, const char *type)
{
    const struct shim_config *c = shim_config();
    w->len = 0;
    w->need_comma = 0;
    w->truncated = 0;
    w->buf[w->len++] = '{';
    jw_str(w, "type", type);
    jw_double(w, "ts", shim_now(), 6);
    jw_str(w, "host", c->host);
    jw_int(w, "pid", (long long)getpid());
    jw_int(w, "tid", shim_gettid());
}

void jw_emit(struct jw *w)
{
    if (w->truncated) {
        /* The record stays valid JSON; the reader learns that something was cut. */
        static const char t[] = ",\"truncated\":true";
        memcpy(w->buf + w->len, t, sizeof(t) - 1);
        w->len += sizeof(t) - 1;
    }
    w->buf[w->len++] = '}';
    w->buf[w->len++] = '\n';
    int fd = record_fd();
    if (fd < 0)
        return;
    ssize_t n;
    do
        n = write(fd, w->buf, w->len);
    while (n < 0 && errno == EINTR);
    if ((n < 0 || (size_t)n != w->len) && !atomic_load_explicit(&g_leaving, memory_order_relaxed)) {
        static atomic_int warned;
        if (!atomic_exchange(&warned, 1))
            fprintf(stderr, "ncclshim: writing record file %s failed: %s; later records may be lost\n",
                    g_path, n < 0 ? strerror(errno) : "short write");
    }
}

void shim_warn(const char *what, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ncclshim: warning: %s\n", msg);
    shim_record_warning(what, msg);
}

void shim_record_warning(const char *what, const char *msg)
{
    if (shim_config()->mode == MODE_OFF)
        return;
    struct jw w;
    jw_begin(&w, "warning");
    jw_str(&w, "what", what);
    jw_str(&w, "message", msg);
    jw_emit(&w);
}
