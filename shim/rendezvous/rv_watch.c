/* The rendezvous's event core (rv_watch.h). */
#define _GNU_SOURCE
#include "rv_watch.h"

#include "clock.h"

#include <stdlib.h>

void rv_watch_begin(struct rv_watch *w, size_t need)
{
    w->n = 0;
    w->deadline = UINT64_MAX;
    if (need <= w->cap)
        return;
    struct pollfd *p = realloc(w->pfd, need * sizeof(*p));
    if (p)
        w->pfd = p;
    struct rv_tag *t = realloc(w->tag, need * sizeof(*t));
    if (t)
        w->tag = t;
    if (p && t)
        w->cap = need;
}

void rv_watch_add(struct rv_watch *w, int fd, void *owner, int what)
{
    if (w->n >= w->cap)
        return;
    w->pfd[w->n] = (struct pollfd){ fd, POLLIN, 0 };
    w->tag[w->n++] = (struct rv_tag){ owner, what };
}

void rv_watch_until(struct rv_watch *w, uint64_t deadline_us)
{
    if (deadline_us < w->deadline)
        w->deadline = deadline_us;
}

int rv_watch_wait(struct rv_watch *w, int max_ms)
{
    int ms = max_ms;
    if (w->deadline != UINT64_MAX) {
        uint64_t now = shim_mono_us();
        uint64_t left = w->deadline > now ? (w->deadline - now + 999) / 1000 : 0;
        if (left < (uint64_t)ms)
            ms = (int)left;
    }
    return poll(w->pfd, (nfds_t)w->n, ms);
}

void rv_watch_free(struct rv_watch *w)
{
    free(w->pfd);
    free(w->tag);
    *w = (struct rv_watch){ NULL, NULL, 0, 0, UINT64_MAX };
}
