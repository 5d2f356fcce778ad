#define _GNU_SOURCE
#include "creator.h"

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

static int collect_lib(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct lib_list *l = data;
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0;
    if (l->n + 1 >= l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        const char **p = realloc(l->paths, cap * sizeof(*p));
        if (!p)
            return 1; /* decide on what we have */
        l->paths = p;
        l->cap = cap;
    }
    /* dlpi_name lives as long as the object is loaded: copy it. */
    char *dup = strdup(info->dlpi_name);
    if (!dup)
        return 1;
    l->paths[l->n++] = dup;
    l->paths[l->n] = NULL;
    return 0;
}

void evidence_caller(struct creator *c, const void *caller)
{
    Dl_info info;
    c->caller_path[0] = '\0';
    if (caller && dladdr(caller, &info) && info.dli_fname)
        snprintf(c->caller_path, sizeof(c->caller_path), "%s", info.dli_fname);
    c->api = classify_api(c->caller_path);
}

void evidence_gather(struct creator *c, const void *caller)
{
    const struct shim_config *cfg = shim_config();
    evidence_caller(c, caller);
    evidence_title(c->title, sizeof(c->title));

    struct lib_list libs = { NULL, 0, 0 };
    dl_iterate_phdr(collect_lib, &libs);
    c->role = classify_role(&cfg->patterns, c->title, libs.paths);
    for (size_t i = 0; i < libs.n; i++)
        free((void *)libs.paths[i]);
    free(libs.paths);

    c->nframes = cfg->python_callsite ? python_callsite(c->frames, EVIDENCE_MAX_FRAMES) : 0;
}
