/* Turns PATH arguments into lines for the two feed functions: files,
 * directories of shim output, and NCCL logs. Reads with read(2) into a
 * bounded buffer so that a hostile file (no newlines, NUL bytes, gigabytes)
 * costs at most INSPECT_MAX_LINE of memory. */
#define _GNU_SOURCE
#include "inspect.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct reader {
    int fd;
    char buf[64 * 1024];
    size_t pos, end;
    int eof;
    char *line;
    size_t len, cap;
    size_t dropped;     /* bytes of the current line beyond the cap */
} reader;

/* Returns 1 with a line (possibly over-long: r->dropped > 0), 0 at end of
 * file, -1 on a read error (errno set). *newline says whether the line was
 * terminated. */
static int next_line(reader *r, int *newline)
{
    r->len = 0;
    r->dropped = 0;
    *newline = 0;
    int got = 0;
    for (;;) {
        if (r->pos == r->end) {
            if (r->eof)
                return got;
            ssize_t n;
            do
                n = read(r->fd, r->buf, sizeof r->buf);
            while (n < 0 && errno == EINTR);
            if (n < 0)
                return -1;
            if (n == 0) {
                r->eof = 1;
                return got;
            }
            r->pos = 0;
            r->end = (size_t)n;
        }
        got = 1;
        char *nl = memchr(r->buf + r->pos, '\n', r->end - r->pos);
        size_t take = nl ? (size_t)(nl - (r->buf + r->pos)) : r->end - r->pos;
        /* once over the cap, the rest of the line is only counted */
        size_t room = r->dropped ? 0 : INSPECT_MAX_LINE - r->len;
        size_t keep = take < room ? take : room;
        if (keep) {
            if (r->len + keep > r->cap) {
                r->cap = r->len + keep > r->cap * 2 ? r->len + keep : r->cap * 2;
                r->line = xrealloc(r->line, r->cap);
            }
            memcpy(r->line + r->len, r->buf + r->pos, keep);
            r->len += keep;
        }
        r->dropped += take - keep;
        r->pos += take;
        if (nl) {
            r->pos++;
            *newline = 1;
            return 1;
        }
    }
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* A file already read, by device and inode: one named twice (directly and
 * through its directory) must not give duplicate ranks. */
typedef struct seen_file {
    unsigned long long id[2];   /* st_dev, st_ino */
    UT_hash_handle hh;
} seen_file;

static int already_read(inspect_state *st, const struct stat *sb)
{
    unsigned long long id[2] = { (unsigned long long)sb->st_dev, (unsigned long long)sb->st_ino };
    seen_file *f;
    HASH_FIND(hh, st->seen_files, id, sizeof id, f);
    if (f)
        return 1;
    f = xmalloc(sizeof *f);
    memset(f, 0, sizeof *f);
    memcpy(f->id, id, sizeof id);
    HASH_ADD(hh, st->seen_files, id, sizeof f->id, f);
    return 0;
}

void inspect_close(inspect_state *st)
{
    seen_file *f, *tmp;
    HASH_ITER(hh, st->seen_files, f, tmp) {
        HASH_DEL(st->seen_files, f);
        free(f);
    }
    inspect_records_free(st);
    inspect_free(st);
}

static void read_file(inspect_state *st, const char *path, enum input_kind kind)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        inspect_error(st, path, 0, 1, "cannot open: %s", strerror(errno));
        return;
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && already_read(st, &sb)) {
        close(fd);
        return;
    }
    reader *r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->fd = fd;
    long lineno = 0, nonblank = 0;
    size_t nccl_before = st->nccl_lines;
    int newline, rc;
    while ((rc = next_line(r, &newline)) == 1) {
        lineno++;
        if (is_blank(r->line, r->len) && r->dropped == 0)
            continue;
        nonblank++;
        if (kind == INPUT_AUTO)
            kind = (r->len > 0 && r->line[strspn(r->line, " \t")] == '{') ? INPUT_RECORDS : INPUT_NCCL_LOG;
        if (r->dropped) {
            inspect_error(st, path, lineno, 0, "line longer than %d bytes (%zu), skipped",
                          INSPECT_MAX_LINE, r->len + r->dropped);
            continue;
        }
        if (kind == INPUT_RECORDS)
            inspect_feed_record_line_ex(st, r->line, r->len, path, lineno, !newline);
        else
            inspect_feed_nccl_line(st, r->line, r->len);
    }
    inspect_errors_flush(st);
    if (rc < 0)
        inspect_error(st, path, lineno + 1, 1, "read error: %s", strerror(errno));
    else if (nonblank == 0)
        inspect_error(st, path, 0, 0, "empty file, nothing to read");
    else if (kind == INPUT_NCCL_LOG && st->nccl_lines == nccl_before)
        inspect_error(st, path, 0, 0, "no NCCL log lines found (is it NCCL_DEBUG=INFO output?)");
    free(r->line);
    free(r);
    close(fd);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void read_dir(inspect_state *st, const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        inspect_error(st, path, 0, 1, "cannot open directory: %s", strerror(errno));
        return;
    }
    strlist names = {0};
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (fnmatch("ncclshim.*.jsonl", de->d_name, 0) == 0 || fnmatch("*.log", de->d_name, 0) == 0 ||
            fnmatch("nccl*.txt", de->d_name, 0) == 0)
            strlist_add(&names, xstrdup(de->d_name));
    }
    closedir(d);
    /* sorted, so that output and error order do not depend on the filesystem */
    if (names.n)
        qsort(names.v, names.n, sizeof *names.v, cmp_str);
    size_t used = 0;
    for (size_t i = 0; i < names.n; i++) {
        size_t pl = strlen(path);
        char *full = xasprintf("%s%s%s", path, pl && path[pl - 1] == '/' ? "" : "/", names.v[i]);
        struct stat sb;
        /* subdirectories named *.log etc. are not ours to descend into */
        if (stat(full, &sb) == 0 && !S_ISREG(sb.st_mode)) {
            free(full);
            continue;
        }
        used++;
        read_file(st, full, fnmatch("ncclshim.*.jsonl", names.v[i], 0) == 0 ? INPUT_RECORDS : INPUT_NCCL_LOG);
        free(full);
    }
    if (used == 0)
        inspect_error(st, path, 0, 0, "no ncclshim.*.jsonl, *.log or nccl*.txt files in directory");
    strlist_free(&names);
}

void inspect_read_path(inspect_state *st, const char *path, enum input_kind kind)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        inspect_error(st, path, 0, 1, "cannot read: %s", strerror(errno));
        return;
    }
    if (S_ISDIR(sb.st_mode) && kind == INPUT_AUTO)
        read_dir(st, path);
    else
        read_file(st, path, kind);
}
