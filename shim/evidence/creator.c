/*
 * The evidence about a communicator's creator, gathered in the shim because
 * only the process can see it: the caller's library (by its return address),
 * the process's title, the libraries loaded, and the Python frames
 * (python_callsite.c).  policy/classify.c judges it; nothing here decides.
 */
#define _GNU_SOURCE
#include "creator.h"
#include "python_callsite.h"

#include "policy/classify.h"
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <stdatomic.h>

void evidence_title(char *buf, size_t len)
{
    buf[0] = '\0';
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n;
    do
        n = read(fd, buf, len - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return;
    /* Arguments are NUL-separated; setproctitle-style titles end in NULs or spaces. */
    while (n > 0 && (buf[n - 1] == '\0' || buf[n - 1] == ' '))
        n--;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[n] = '\0';
}

struct lib_list { const char **paths; size_t n, cap; };

/* Adds a copy of `path` (len bytes) unless it is the last one added (a library
 * is several consecutive mappings).  Returns -1 when out of memory. */
static int add_lib(struct lib_list *l, const char *path, size_t len)
{
    if (l->n && strlen(l->paths[l->n - 1]) == len && memcmp(l->paths[l->n - 1], path, len) == 0)
        return 0;
    if (l->n + 1 >= l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        const char **p = realloc(l->paths, cap * sizeof(*p));
        if (!p)
            return -1; /* decide on what we have */
        l->paths = p;
        l->cap = cap;
    }
    char *dup = strndup(path, len);
    if (!dup)
        return -1;
    l->paths[l->n++] = dup;
    l->paths[l->n] = NULL;
    return 0;
}

/*
 * One line of /proc/self/maps ("start-end perms offset dev inode path"): an
 * executable mapping of a file is a loaded object's code.  The main program
 * is left out (dl_iterate_phdr, used before, did not name it either).
 */
static int maps_line(struct lib_list *l, const char *line, size_t len, const char *exe)
{
    const char *end = line + len, *p = line;
    int field = 0;
    const char *perms = NULL;
    while (p < end && field < 5) {
        while (p < end && *p != ' ')
            p++;
        while (p < end && *p == ' ')
            p++;
        if (++field == 1)
            perms = p;
    }
    if (!perms || perms + 3 >= end || perms[2] != 'x' || p >= end || *p != '/')
        return 0;
    size_t n = (size_t)(end - p);
    static const char deleted[] = " (deleted)";
    if (n > sizeof(deleted) - 1 && memcmp(end - (sizeof(deleted) - 1), deleted, sizeof(deleted) - 1) == 0)
        n -= sizeof(deleted) - 1;
    if (exe[0] && strlen(exe) == n && memcmp(exe, p, n) == 0)
        return 0;
    return add_lib(l, p, n);
}

/*
 * The loaded objects, from /proc/self/maps, in a fork child.  Not
 * dl_iterate_phdr there: it takes glibc's dl_load_write_lock, which fork()
 * does not reset (glibc 2.36), so a child forked while another thread was
 * inside it (any C++ exception unwinds through it, as did our own evidence
 * gathering) hung forever in its first communicator creation (issue 17: 4-6
 * children of 10).  Reading a file takes no lock of the process.  -1 if
 * /proc is not there.
 */
static int libs_from_maps(struct lib_list *l)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char exe[PATH_MAX];
    ssize_t en = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[en > 0 ? en : 0] = '\0';
    char buf[16384];
    size_t have = 0;
    for (;;) {
        ssize_t r = read(fd, buf + have, sizeof(buf) - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        have += (size_t)r;
        char *start = buf, *nl;
        while ((nl = memchr(start, '\n', have - (size_t)(start - buf)))) {
            if (maps_line(l, start, (size_t)(nl - start), exe) < 0)
                goto out;
            start = nl + 1;
        }
        have -= (size_t)(start - buf);
        memmove(buf, start, have);
        if (have == sizeof(buf)) /* a line longer than the buffer: not a path we can use */
            have = 0;
    }
out:
    close(fd);
    return 0;
}

/* Set in every fork child (evidence_after_fork_child): from then on the
 * loader's dl_iterate_phdr lock may be held by a thread that is not here. */
static atomic_int g_forked;

void evidence_after_fork_child(void)
{
    atomic_store_explicit(&g_forked, 1, memory_order_relaxed);
}

static int collect_lib(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0;
    return add_lib(data, info->dlpi_name, strlen(info->dlpi_name)) < 0;
}

void evidence_caller(struct creator *c, const void *caller)
{
    Dl_info info;
    c->caller_path[0] = '\0';
    if (caller && dladdr(caller, &info) && info.dli_fname)
        snprintf(c->caller_path, sizeof(c->caller_path), "%s", info.dli_fname);
    c->api = classify_api(c->caller_path);
}

/* The loaded objects: the loader's list where its lock is sound (it is
 * cheaper: reading the maps slowed creations enough to change the timing of
 * 64-rank tests); in a fork child the maps, or, without /proc, the loader's
 * list after all (no worse than before). */
static void loaded_libs(struct lib_list *libs)
{
    if (!atomic_load_explicit(&g_forked, memory_order_relaxed) || libs_from_maps(libs) < 0)
        dl_iterate_phdr(collect_lib, libs);
}

static void free_libs(struct lib_list *libs)
{
    for (size_t i = 0; i < libs->n; i++)
        free((void *)libs->paths[i]);
    free(libs->paths);
}

void evidence_gather(struct creator *c, const void *caller)
{
    const struct shim_config *cfg = shim_config();
    evidence_caller(c, caller);
    evidence_title(c->title, sizeof(c->title));
    struct lib_list libs = { NULL, 0, 0 };
    loaded_libs(&libs);
    c->nframes = cfg->python_callsite ? python_callsite(c->frames, EVIDENCE_MAX_FRAMES) : 0;
    c->role = classify_rank_role(&cfg->patterns, classify_role(&cfg->patterns, c->title, libs.paths), c->nframes,
                                 c->frames);
    c->full_api = classify_full_api(&cfg->patterns, c->nframes, c->frames, libs.paths);
    c->engine = classify_engine(&cfg->patterns, c->title, c->nframes, c->frames, libs.paths, c->role);
    free_libs(&libs);
}

int evidence_engine_now(const char *title, int nframes, const char (*frames)[EVIDENCE_FRAME_LEN])
{
    const struct shim_config *cfg = shim_config();
    struct lib_list libs = { NULL, 0, 0 };
    loaded_libs(&libs);
    struct verdict role = classify_role(&cfg->patterns, title, libs.paths);
    struct engine_verdict e = classify_engine(&cfg->patterns, title, nframes, frames, libs.paths, role);
    free_libs(&libs);
    return e.bits;
}
