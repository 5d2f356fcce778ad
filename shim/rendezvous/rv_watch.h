/*
 * The event core of the rendezvous's two loops, the root's serving thread
 * (rv_server.c) and a host's leader (rv_leader.c): descriptors to wait on,
 * each tagged with what it stands for, and the nearest deadline; one poll()
 * until either.  Each loop, every turn: acts on its deadlines passed, lists
 * what to watch (rv_watch_begin, rv_watch_add, rv_watch_until), waits
 * (rv_watch_wait), then handles each entry ready, by its tag.
 */
#ifndef NCCLSHIM_RV_WATCH_H
#define NCCLSHIM_RV_WATCH_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

/* What an entry stands for: the loop's own meaning (the root: a session and
 * one of its connections, or its listener; a leader: a member, or one of its
 * own descriptors). */
struct rv_tag {
    void *owner;
    int what;
};

struct rv_watch {
    struct pollfd *pfd;
    struct rv_tag *tag;
    size_t n, cap;
    uint64_t deadline;                  /* the nearest (monotonic us); UINT64_MAX: none */
};

/* A new turn: no entries, no deadline, room for `need` entries if memory
 * allows (else the room it had: rv_watch_add then drops what does not fit). */
void rv_watch_begin(struct rv_watch *w, size_t need);
/* Watches `fd` for input (a negative fd is skipped by poll()). */
void rv_watch_add(struct rv_watch *w, int fd, void *owner, int what);
/* The wait ends by `deadline_us` at the latest. */
void rv_watch_until(struct rv_watch *w, uint64_t deadline_us);
/* poll() until an entry is ready or the deadline (at most max_ms): what
 * poll() returns (-1 with errno; EINTR is the caller's to retry). */
int rv_watch_wait(struct rv_watch *w, int max_ms);
void rv_watch_free(struct rv_watch *w);

#endif
