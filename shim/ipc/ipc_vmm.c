/*
 * Memory of cuMemCreate shared between ring neighbours (the protocol:
 * ipc_internal.h).
 *
 * PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments,
 * common in RL trainers) allocate with cuMemCreate and map the pieces (20 MiB
 * each, 2 MiB for small tensors) back to back into one reserved range, which
 * cuIpcGetMemHandle refuses.  Without this file such a hop is staged: both
 * processes copy, and on one GPU each hand-over between two processes that
 * ran work costs ~150 us each way (docs/benchmarks.md, "Colocated").  But
 * PyTorch asks for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR on every piece,
 * so a piece can be exported as a file descriptor, passed to a neighbour
 * over a Unix socket (SCM_RIGHTS), imported there and mapped: the hop is then
 * pushed or pulled like one of cuMemAlloc memory, one process copying.
 *
 * The exporter sends each neighbour the pieces of a broadcast's buffer it has
 * not sent it before, in the thread that describes the buffer, before the
 * descriptor is published; the descriptor says how many messages were sent,
 * and the importer reads up to there before it maps.  So no thread waits for
 * a peer's thread (an exporter may be blocked in a stream synchronisation),
 * and the application may free the buffer right after the broadcast: what is
 * in flight holds the memory.  A piece is a memory block
 * (CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, unique in the process for its life)
 * at an address: a block mapped at two places is two pieces, and a block
 * that moved is a new piece (the old place is forgotten, below).
 *
 * The importer maps each piece at the same offset of a range it reserves the
 * size of the exporter's ("mirror"), so a buffer over several pieces is one
 * contiguous range and one copy.  It keeps a piece until the exporter says
 * FORGET: the exporter's reaper looks once a second whether each piece it
 * sent is still mapped where it was, and a piece PyTorch gave back is
 * forgotten; the importer unmaps it once its own last operation is over
 * (a copy through it may be queued).  A new piece where an old one was
 * replaces it at once: the exporter could only free the old one after its
 * stream's operations, which wait for the importer's copies.
 *
 * A neighbour pair shares VMM memory only once both of its sockets are up and
 * both ranks said so in their shared pages (vmm_links), since the first rank
 * of a hop decides how the hop goes from its own descriptor alone; anything
 * failing turns the sharing off for that buffer or pair (staged, as before,
 * with the reason in the records), never the communicator.
 *
 * Two ranks have two sockets, one each way; a ring of more, one per
 * neighbour pair, both ways: this rank connects to its successor (link[0])
 * and accepts its predecessor (link[1]).  Every use is under qlock.
 */
#define _GNU_SOURCE
#include "ipc_internal.h"
#include "ipc_vmm_wire.h"

#include "config.h"
#include "record.h"
#include "rv_io.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#define VMM_MAX_PIECES 8192             /* of one buffer: 160 GiB of 20 MiB pieces */
#define VMM_MAX_SENT 8192               /* pieces a neighbour holds from this rank; beyond: the oldest forgotten */
#define VMM_CHECK_MS 1000               /* how often the exporter looks whether what it sent is still mapped */
#define VMM_ACCEPT_MS 30000             /* how long the reaper accepts the predecessor's connection */
#define VMM_SETUP_MS 2000               /* how long connect and the first describe wait for the sockets */
#define VMM_IO_MS 10000                 /* a message already sent, or a send the peer's reaper drains */
#define VMM_RETRY_MS 10
#define VMM_PROBE_MAX (64ull << 20)     /* a probe piece larger than this is not one of ours */

/* A piece the peer at the other end of a link was sent (and not told to forget). */
/* A piece is a memory block at an address: one block may be mapped at two
 * (CUDA allows it; two live buffers then share memory), and each place is
 * a piece of its own, held and forgotten apart, so that neither unmaps the
 * other's under a queued copy. */
struct place {
    uint64_t block;
    uint64_t base;
};
struct sent {
    struct place key;
    UT_hash_handle hh;
};

struct link {
    int fd;                             /* -1: none */
    int peer;
    uint64_t out_seq, in_seq;           /* messages sent, read */
    struct sent *sent;                  /* by place; oldest first (uthash keeps insertion order) */
    unsigned nsent;
};

struct mirror;
struct piece_key {
    int32_t rank;
    uint32_t pad;
    struct place at;
};
/* A neighbour's piece, mapped here. */
struct piece {
    struct piece_key key;
    UT_hash_handle hh;
    struct mirror *m;
    uint64_t base, size;                /* in the exporter's addresses */
    CUmemGenericAllocationHandle h;
    int doomed;                         /* the exporter said FORGET: unmapped once the fence passed */
};
/* A neighbour's reserved range, reserved here too; its mapped pieces sorted by base. */
struct mirror {
    int rank;
    uint64_t range, size;
    CUdeviceptr at;
    struct piece **p;
    int n, cap;
};

struct ipc_vmm {
    int listen_fd;
    char path[108];
    uint64_t listen_until_us;
    int setup_waited;                   /* the first describe waited for the sockets */
    /* The piece this rank's HELLO lends its successor to try the whole path
     * on (export, import, map, access) before any broadcast counts on it;
     * held until the successor accepted, or destroy. */
    CUmemGenericAllocationHandle probe;
    int has_probe;
    struct link link[2];                /* [0]: to the successor (connected), [1]: from the predecessor (accepted) */
    struct piece *pieces;
    struct mirror **mirrors;
    int nmirrors, capmirrors;
    int ndoomed;
    uint64_t next_check_us;
    struct vmm_wire_piece *scratch;     /* one buffer's pieces (describe) */
    uint64_t *blocks;                   /* their memory block ids, sorted (repeats_block) */
    int capscratch;
};

static int pred_of(const struct ipc_comm *c)
{
    return (c->rank - 1 + c->nranks) % c->nranks;
}

static int succ_of(const struct ipc_comm *c)
{
    return (c->rank + 1) % c->nranks;
}

/* Where this rank sends to (reads from) neighbour r: two ranks have a socket each way. */
static struct link *out_link(struct ipc_vmm *v, const struct ipc_comm *c, int r)
{
    return r == succ_of(c) ? &v->link[0] : &v->link[1];
}

static struct link *in_link(struct ipc_vmm *v, const struct ipc_comm *c, int r)
{
    return r == pred_of(c) ? &v->link[1] : &v->link[0];
}

/* The first reason VMM memory is staged (or sharing is off), for the
 * records; and once on stderr, since a user can usually fix it. */
static void note(struct ipc_comm *c, int warn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(struct ipc_comm *c, int warn, const char *fmt, ...)
{
    if (c->vmm_note[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->vmm_note, sizeof(c->vmm_note), fmt, ap);
    va_end(ap);
    if (warn)
        shim_warn("ipc-vmm", "ipc communicator %s (rank %d of %d): %s", c->group, c->rank, c->nranks, c->vmm_note);
}

static void link_close(struct link *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    struct sent *s, *tmp;
    HASH_ITER(hh, l->sent, s, tmp) {
        HASH_DEL(l->sent, s);
        free(s);
    }
    l->nsent = 0;
}

static void close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Sends one message (with n descriptors for PIECES): 0, or -1 with errno.
 * SOCK_SEQPACKET: a message goes whole or not at all. */
static int send_msg(int fd, const struct vmm_msg *m, const int *fds, int nfds)
{
    struct iovec iov = { (void *)m, VMM_MSG_HEAD + (size_t)m->n * sizeof(struct vmm_wire_piece) };
    union {
        char buf[CMSG_SPACE(sizeof(int) * VMM_MSG_PIECES)];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfds) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    uint64_t deadline = shim_mono_us() + VMM_IO_MS * 1000ull;
    for (;;) {
        ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k == (ssize_t)iov.iov_len)
            return 0;
        if (k >= 0) { /* cannot happen on SOCK_SEQPACKET */
            errno = EPROTO;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        /* The peer's queue is full: its reaper drains it. */
        uint64_t now = shim_mono_us();
        if (now >= deadline) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = { fd, POLLOUT, 0 };
        poll(&p, 1, (int)((deadline - now) / 1000 + 1));
    }
}

/* Receives one message if there is one (never waits): the bytes, as recvmsg;
 * the descriptors that came with it in fds[] (*nfds of them, at most
 * VMM_MSG_PIECES: more are closed); *truncated if the message or its
 * descriptors did not fit. */
static ssize_t recv_msg(int fd, struct vmm_msg *m, int *fds, int *nfds, int *truncated)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * VMM_MSG_PIECES)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = { m, sizeof(*m) };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    ssize_t k = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    *nfds = 0;
    *truncated = k > 0 && (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC));
    for (struct cmsghdr *cm = k > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int got;
            memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(got));
            if (*nfds < VMM_MSG_PIECES)
                fds[(*nfds)++] = got;
            else
                close(got);
        }
    }
    return k;
}

/* ---- set-up ---- */

void ipc_vmm_listen(struct ipc_comm *c)
{
    if (c->nranks < 2)
        return;
    if (!shim_config()->ipc_vmm) {
        note(c, 0, "NCCLSHIM_IPC_VMM=0: buffers of cuMemCreate (PyTorch's expandable segments) are staged");
        return;
    }
    if (!c->cu->vmm_ok) {
        note(c, 0, "the CUDA driver lacks the cuMem* functions to share cuMemCreate memory: such buffers are staged");
        return;
    }
    struct ipc_vmm *v = calloc(1, sizeof(*v));
    if (!v) {
        note(c, 0, "out of memory setting up the sharing of cuMemCreate memory: such buffers are staged");
        return;
    }
    v->link[0].fd = v->link[1].fd = -1;
    /* Beside the shared page: ranks that share /dev/shm reach it, whatever
     * their network namespaces (an abstract socket would need the same one). */
    snprintf(v->path, sizeof(v->path), "/dev/shm%s.sock", c->shm_name);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", v->path);
    v->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int bound = v->listen_fd >= 0 && bind(v->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (!bound || listen(v->listen_fd, 4) != 0) {
        note(c, 1, "a Unix socket at %s for sharing cuMemCreate memory: %s (is /dev/shm writable?); such buffers are "
             "staged", v->path, strerror(errno));
        if (v->listen_fd >= 0)
            close(v->listen_fd);
        if (bound) /* ours: a path that was there already is not */
            unlink(v->path);
        free(v);
        return;
    }
    v->listen_until_us = shim_mono_us() + VMM_ACCEPT_MS * 1000ull;
    uint64_t token = 0;
    if (rv_random(&token, sizeof(token)) != 0 || !token) /* unguessable if it can be; never 0 */
        token = (shim_mono_us() << 20) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)v ^ 1;
    atomic_store(&c->shared[c->rank]->vmm_token, token);
    c->vmm = v;
    atomic_fetch_or(&c->shared[c->rank]->vmm_links, VMM_ON);
}

static void stop_listening(struct ipc_vmm *v)
{
    if (v->listen_fd < 0)
        return;
    close(v->listen_fd);
    v->listen_fd = -1;
    unlink(v->path);
}

/* Imports, maps, makes accessible and gives back the predecessor's probe
 * piece (`fd`, consumed): 0 if this rank can map its neighbour's
 * cuMemCreate memory at all (a container without the driver's file
 * descriptor support, GPUs without peer access fail here, before any
 * broadcast counts on it), else -1 with the reason. */
static int try_probe(struct ipc_comm *c, int fd, size_t size, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr at = 0;
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, c->device }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    const char *fn = "cuMemImportFromShareableHandle";
    CUresult r = cu->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r == CUDA_SUCCESS) {
        fn = "cuMemAddressReserve";
        r = cu->cuMemAddressReserve(&at, size, 0, 0, 0);
        if (r == CUDA_SUCCESS) {
            fn = "cuMemMap";
            r = cu->cuMemMap(at, size, 0, h, 0);
            if (r == CUDA_SUCCESS) {
                fn = "cuMemSetAccess";
                r = cu->cuMemSetAccess(at, size, &acc, 1);
                cu->cuMemUnmap(at, size);
            }
            cu->cuMemAddressFree(at, size);
        }
        cu->cuMemRelease(h);
    }
    if (r == CUDA_SUCCESS)
        return 0;
    shim_cuda_error(fn, r, why, whylen);
    return -1;
}

/* A piece of cuMemCreate memory for the successor to try (v->probe): its
 * descriptor and size, or -1 with the reason. */
static int make_probe(struct ipc_comm *c, int *fd, size_t *size, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    struct ipc_vmm *v = c->vmm;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED */
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location = (CUmemLocation){ CU_MEM_LOCATION_TYPE_DEVICE, c->device };
    const char *fn = "cuMemGetAllocationGranularity";
    CUresult r = cu->cuMemGetAllocationGranularity(size, &prop, 0 /* minimum */);
    if (r == CUDA_SUCCESS && (!*size || *size > VMM_PROBE_MAX)) {
        snprintf(why, whylen, "an allocation granularity of %zu bytes", *size);
        return -1;
    }
    if (r == CUDA_SUCCESS) {
        fn = "cuMemCreate";
        r = cu->cuMemCreate(&v->probe, *size, &prop, 0);
    }
    if (r == CUDA_SUCCESS) {
        v->has_probe = 1;
        fn = "cuMemExportToShareableHandle";
        r = cu->cuMemExportToShareableHandle(fd, v->probe, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    }
    if (r == CUDA_SUCCESS)
        return 0;
    shim_cuda_error(fn, r, why, whylen);
    return -1;
}

static void drop_probe(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm;
    if (v->has_probe)
        c->cu->cuMemRelease(v->probe);
    v->has_probe = 0;
}

/* The predecessor's connection, if it came: its HELLO names it and says its
 * token (anyone of this user could connect to the path). */
static void try_accept(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm;
    while (v->listen_fd >= 0 && v->link[1].fd < 0) {
        int fd = accept4(v->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                note(c, 1, "accepting rank %d's socket: %s; cuMemCreate buffers are staged", pred_of(c),
                     strerror(errno));
                stop_listening(v);
            }
            return;
        }
        /* The predecessor sends its HELLO right after connecting: a short
         * wait (qlock may be held, by the application's thread too). */
        struct vmm_msg m;
        struct pollfd p = { fd, POLLIN, 0 };
        int fds[VMM_MSG_PIECES], nfds = 0, truncated = 0;
        ssize_t k = poll(&p, 1, 100) == 1 ? recv_msg(fd, &m, fds, &nfds, &truncated) : -1;
        uint64_t token = atomic_load(&c->shared[pred_of(c)]->vmm_token);
        if (k != (ssize_t)(VMM_MSG_HEAD + sizeof(struct vmm_wire_piece)) || truncated ||
            m.magic != VMM_MAGIC || m.kind != VMM_HELLO || m.rank != pred_of(c) || m.n != 1 || m.seq != token ||
            nfds != 1 || !m.p[0].size || m.p[0].size > VMM_PROBE_MAX) {
            close_fds(fds, nfds);
            close(fd); /* a stranger, or garbage: keep listening until the deadline */
            continue;
        }
        char why[200];
        if (try_probe(c, fds[0], m.p[0].size, why, sizeof(why)) != 0) {
            note(c, 1, "sharing a piece of rank %d's cuMemCreate memory on device %d failed (%s): such buffers are "
                 "staged", pred_of(c), c->device, why);
            close(fd);
            stop_listening(v);
            /* The neighbours stop waiting for this rank's sockets. */
            atomic_fetch_and(&c->shared[c->rank]->vmm_links, ~VMM_ON);
            return;
        }
        v->link[1].fd = fd;
        v->link[1].peer = pred_of(c);
        stop_listening(v);
        atomic_fetch_or(&c->shared[c->rank]->vmm_links, VMM_FROM_PRED);
    }
}

void ipc_vmm_connect(struct ipc_comm *c, const char *succ_shm)
{
    struct ipc_vmm *v = c->vmm;
    if (!v)
        return;
    int succ = succ_of(c), pred = pred_of(c);
    if (!(atomic_load(&c->shared[succ]->vmm_links) & VMM_ON)) {
        note(c, 1, "rank %d does not share cuMemCreate memory (NCCLSHIM_IPC_VMM=0 there, its socket failed, or an "
             "older shim): such buffers are staged", succ);
    } else {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof(sa.sun_path), "/dev/shm%s.sock", succ_shm);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        /* Its token (in its shared page, which only the communicator's ranks
         * can open) says who connects; not the process id, which differs
         * between containers that share /dev/shm but not a PID namespace. */
        struct vmm_msg hello = { .magic = VMM_MAGIC, .kind = VMM_HELLO, .rank = c->rank,
                                 .seq = atomic_load(&c->shared[c->rank]->vmm_token), .n = 1 };
        int probe_fd = -1;
        size_t probe_size = 0;
        char why[200];
        if (make_probe(c, &probe_fd, &probe_size, why, sizeof(why)) != 0) {
            note(c, 1, "a piece of cuMemCreate memory with a file descriptor handle for rank %d to try: %s; such "
                 "buffers are staged", succ, why);
            if (fd >= 0)
                close(fd);
            fd = -2;
        }
        hello.p[0] = (struct vmm_wire_piece){ .size = probe_size, .range_size = probe_size };
        /* A Unix connect completes at once, or says EAGAIN (the backlog is full: a stranger at work). */
        if (fd == -2) {
            drop_probe(c);
        } else if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
                   send_msg(fd, &hello, &probe_fd, 1) != 0) {
            note(c, 1, "connecting to rank %d's socket %s: %s; cuMemCreate buffers are staged", succ, sa.sun_path,
                 strerror(errno));
            if (fd >= 0)
                close(fd);
            drop_probe(c);
        } else {
            v->link[0].fd = fd;
            v->link[0].peer = succ;
            atomic_fetch_or(&c->shared[c->rank]->vmm_links, VMM_TO_SUCC);
            ipc_wake(c, succ); /* its reaper accepts, if it is past its own connect */
        }
        if (probe_fd >= 0)
            close(probe_fd); /* the message in flight holds it */
    }
    if (!(atomic_load(&c->shared[pred]->vmm_links) & VMM_ON)) {
        if (pred != succ)
            note(c, 1, "rank %d does not share cuMemCreate memory (NCCLSHIM_IPC_VMM=0 there, its socket failed, or "
                 "an older shim): such buffers are staged", pred);
        stop_listening(v);
        return;
    }
    /* The predecessor connects in its own connect, and the successor
     * accepts (and tries the probe) in its own, at about the same time:
     * both waited for here (bounded), so that the first broadcast finds the
     * sockets up and the probe is given back before the application counts
     * its memory; later, the reaper still accepts. */
    uint64_t until = shim_mono_us() + VMM_SETUP_MS * 1000ull;
    for (;;) {
        try_accept(c);
        int accepted = v->listen_fd < 0 || v->link[1].fd >= 0;
        int tried = v->link[0].fd < 0 || (atomic_load(&c->shared[succ]->vmm_links) & VMM_FROM_PRED);
        uint64_t now = shim_mono_us();
        if ((accepted && tried) || now >= until)
            break;
        if (accepted) {
            struct timespec ts = { 0, 50000 };
            nanosleep(&ts, NULL);
        } else {
            struct pollfd p = { v->listen_fd, POLLIN, 0 };
            poll(&p, 1, tried ? (int)((until - now) / 1000 + 1) : 1);
        }
    }
    if (atomic_load(&c->shared[succ]->vmm_links) & VMM_FROM_PRED)
        drop_probe(c);
}

/* Both neighbours' sockets are up, and both ends of each said so. */
static int links_up(const struct ipc_comm *c)
{
    uint32_t mine = atomic_load(&c->shared[c->rank]->vmm_links);
    return (mine & (VMM_TO_SUCC | VMM_FROM_PRED)) == (VMM_TO_SUCC | VMM_FROM_PRED) &&
           (atomic_load(&c->shared[succ_of(c)]->vmm_links) & VMM_FROM_PRED) &&
           (atomic_load(&c->shared[pred_of(c)]->vmm_links) & VMM_TO_SUCC);
}

/* Whether the sockets may still come up: every rank of the pair listens,
 * and this rank's own ends are not given up on. */
static int links_coming(const struct ipc_comm *c)
{
    const struct ipc_vmm *v = c->vmm;
    return (atomic_load(&c->shared[succ_of(c)]->vmm_links) & VMM_ON) &&
           (atomic_load(&c->shared[pred_of(c)]->vmm_links) & VMM_ON) && v->link[0].fd >= 0 &&
           (v->link[1].fd >= 0 || v->listen_fd >= 0);
}

/* ---- the exporter ---- */

/* Tells the peer of `l` to forget `n` pieces (blocks) and forgets them here. */
static int send_forget(struct ipc_comm *c, struct link *l, struct sent **list, int n)
{
    struct vmm_msg m = { .magic = VMM_MAGIC, .kind = VMM_FORGET, .rank = c->rank };
    for (int i = 0; i < n;) {
        m.n = 0;
        for (; i < n && m.n < VMM_MSG_PIECES; i++)
            m.p[m.n++] = (struct vmm_wire_piece){ .block = list[i]->key.block, .base = list[i]->key.base };
        m.seq = l->out_seq + 1;
        if (send_msg(l->fd, &m, NULL, 0) != 0)
            return -1;
        l->out_seq++;
    }
    for (int i = 0; i < n; i++) {
        HASH_DEL(l->sent, list[i]);
        free(list[i]);
        l->nsent--;
    }
    return 0;
}

/* Sends the peer of `l` the pieces of `p` it was not sent: 0, and *sent
 * set if there were any; 1 if a piece cannot be exported (made without a
 * shareable handle type); -1 if the sending failed. */
static int send_pieces(struct ipc_comm *c, struct link *l, const struct vmm_wire_piece *p, int n, int *sent)
{
    const struct shim_cuda *cu = c->cu;
    struct vmm_msg m = { .magic = VMM_MAGIC, .kind = VMM_PIECES, .rank = c->rank };
    int fds[VMM_MSG_PIECES];
    for (int i = 0; i < n;) {
        m.n = 0;
        for (; i < n && m.n < VMM_MSG_PIECES; i++) {
            struct sent *s;
            struct place at = { p[i].block, p[i].base };
            HASH_FIND(hh, l->sent, &at, sizeof(at), s);
            if (s) {
                /* Still mapped where it was: the peer holds it (re-inserted: newest). */
                HASH_DEL(l->sent, s);
                HASH_ADD(hh, l->sent, key, sizeof(s->key), s);
                continue;
            }
            CUmemGenericAllocationHandle h = 0;
            int fd = -1;
            CUresult r = cu->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)p[i].base);
            if (r == CUDA_SUCCESS) {
                r = cu->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
                cu->cuMemRelease(h);
            }
            if (r != CUDA_SUCCESS) {
                close_fds(fds, (int)m.n);
                char err[120];
                note(c, 1, "a buffer at %#llx is cuMemCreate memory that cannot be exported (%s; made without "
                     "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, as vLLM's sleep-mode allocator does): its broadcasts "
                     "are staged, at a fraction of the copy rate; PyTorch's allocator (expandable segments too) can "
                     "be shared", (unsigned long long)p[i].base,
                     shim_cuda_error("cuMemExportToShareableHandle", r, err, sizeof(err)));
                return 1;
            }
            fds[m.n] = fd;
            m.p[m.n++] = p[i];
        }
        if (!m.n)
            continue;
        if (l->nsent + m.n > VMM_MAX_SENT) {
            struct sent *old[VMM_MSG_PIECES], *s, *tmp;
            int k = 0;
            HASH_ITER(hh, l->sent, s, tmp) {
                if (k == (int)m.n)
                    break;
                old[k++] = s;
            }
            if (send_forget(c, l, old, k) != 0)
                goto fail;
        }
        m.seq = l->out_seq + 1;
        if (send_msg(l->fd, &m, fds, (int)m.n) != 0)
            goto fail;
        close_fds(fds, (int)m.n); /* the message in flight holds them */
        l->out_seq++;
        *sent = 1;
        atomic_fetch_add_explicit(&c->stat_vmm_sent, m.n, memory_order_relaxed);
        for (uint32_t k = 0; k < m.n; k++) {
            struct sent *s = malloc(sizeof(*s));
            if (!s) /* the peer holds it; forgetting it here only sends it again */
                continue;
            s->key = (struct place){ m.p[k].block, m.p[k].base };
            HASH_ADD(hh, l->sent, key, sizeof(s->key), s);
            l->nsent++;
        }
    }
    return 0;
fail:
    close_fds(fds, (int)m.n);
    note(c, 1, "sending rank %d the pieces of a cuMemCreate buffer: %s; that buffer is staged", l->peer,
         strerror(errno));
    return -1;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether two of a buffer's n pieces (v->scratch) are one memory block: an
 * allocation mapped twice in its span, which CUDA allows.  The importer
 * holds a block at one place (keyed by it), and refuses a message naming
 * it twice (vmm_msg_check): before, such a buffer's second mapping unmapped
 * the first there, still in the list being mapped (a double free: both
 * processes aborted in t/13's ipc-vmm-alias). */
static int repeats_block(struct ipc_vmm *v, int n)
{
    for (int i = 0; i < n; i++)
        v->blocks[i] = v->scratch[i].block;
    qsort(v->blocks, (size_t)n, sizeof(*v->blocks), by_value);
    for (int i = 1; i < n; i++)
        if (v->blocks[i] == v->blocks[i - 1])
            return 1;
    return 0;
}

int ipc_vmm_describe(struct ipc_comm *c, CUdeviceptr buf, size_t bytes, CUdeviceptr start, size_t size,
                     struct ipc_vmm_piece *first, struct ipc_desc *d)
{
    struct ipc_vmm *v = c->vmm;
    if (!v)
        return 0;
    if (!links_up(c)) {
        /* Once: the neighbours may still be in their connect (the sockets
         * come up within it); past that the broadcast goes staged, until
         * the reaper has accepted. */
        if (v->setup_waited)
            return 0;
        uint64_t until = shim_mono_us() + VMM_SETUP_MS * 1000ull;
        v->setup_waited = 1;
        for (;;) {
            try_accept(c);
            if (links_up(c))
                break;
            if (!links_coming(c) || shim_mono_us() >= until || atomic_load(&c->failed)) {
                char who[48];
                if (pred_of(c) == succ_of(c))
                    snprintf(who, sizeof(who), "rank %d", succ_of(c));
                else
                    snprintf(who, sizeof(who), "ranks %d and %d", pred_of(c), succ_of(c));
                note(c, 1, "the sockets for sharing cuMemCreate memory with %s did not come up (see their notes): "
                     "such buffers are staged", who);
                return 0;
            }
            struct timespec ts = { 0, 50000 };
            nanosleep(&ts, NULL);
        }
    }
    const struct shim_cuda *cu = c->cu;
    int n = 0;
    uint64_t t0 = shim_mono_us();
    for (CUdeviceptr at = buf; at < buf + bytes;) {
        CUdeviceptr base = 0;
        size_t psize = 0;
        unsigned long long block = 0;
        /* A small buffer in a piece described before: no driver call (3 took
         * ~6 us of host time per broadcast on H100). */
        if (at == buf && first->size && first->base <= at && at - first->base < first->size) {
            block = first->block;
            base = first->base;
            psize = first->size;
        } else if (cu->cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, at) != CUDA_SUCCESS ||
            cu->cuPointerGetAttribute(&psize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, at) != CUDA_SUCCESS ||
            cu->cuPointerGetAttribute(&block, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, at) != CUDA_SUCCESS ||
            !psize || base > at || at - base >= psize || base < start || base - start > size || psize > size - (base - start))
            return n ? 0 : -1; /* not such memory (or the driver does not say): never; a hole: not now */
        else if (at == buf)
            *first = (struct ipc_vmm_piece){ block, base, psize };
        if (n == VMM_MAX_PIECES) {
            note(c, 1, "a buffer at %#llx spans more than %d pieces of cuMemCreate memory: it is staged",
                 (unsigned long long)buf, VMM_MAX_PIECES);
            return -1;
        }
        if (n == v->capscratch) {
            int cap = v->capscratch ? 2 * v->capscratch : 64;
            uint64_t *blocks = realloc(v->blocks, (size_t)cap * sizeof(*blocks));
            if (blocks)
                v->blocks = blocks;
            struct vmm_wire_piece *grown = blocks ? realloc(v->scratch, (size_t)cap * sizeof(*grown)) : NULL;
            if (!grown)
                return 0;
            v->scratch = grown;
            v->capscratch = cap;
        }
        v->scratch[n++] = (struct vmm_wire_piece){ block, base, psize, start, size };
        at = base + psize;
    }
    ipc_trace(c, "vmm: walked %d pieces of %#llx in %llu us", n, (unsigned long long)buf,
              (unsigned long long)(shim_mono_us() - t0));
    if (n > 1 && repeats_block(v, n)) {
        note(c, 1, "a buffer at %#llx maps one piece of cuMemCreate memory at two addresses, which cannot be shared "
             "piece by piece (a neighbour maps each piece once): it is staged", (unsigned long long)buf);
        return -1;
    }
    int to_pred = pred_of(c), to_succ = succ_of(c);
    struct link *ls[2] = { out_link(v, c, to_succ), to_pred == to_succ ? NULL : out_link(v, c, to_pred) };
    for (int i = 0; i < 2; i++) {
        if (!ls[i])
            continue;
        int sent = 0, r = send_pieces(c, ls[i], v->scratch, n, &sent);
        ipc_trace(c, "vmm: %d pieces of %#llx, %d sent to rank %d (%d held there)", n, (unsigned long long)buf, sent,
                  ls[i]->peer, (int)ls[i]->nsent);
        if (r)
            return r > 0 ? -1 : 0;
        if (sent)
            ipc_wake(c, ls[i]->peer); /* a neighbour that does not map it drains its socket in its reaper */
    }
    d->direct = 1;
    d->vmm = 1;
    d->buffer_id = 0;
    d->range = start;
    d->offset = buf - start;
    d->alloc_size = size;
    d->vmm_seq[0] = out_link(v, c, to_pred)->out_seq;
    d->vmm_seq[1] = out_link(v, c, to_succ)->out_seq;
    return 1;
}

/* The reaper: pieces sent that are no longer mapped where they were (their
 * memory given back, or another piece in their place) are forgotten. */
static void check_sent(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm;
    uint64_t t0 = shim_mono_us();
    for (int i = 0; i < 2; i++) {
        struct link *l = &v->link[i];
        if (l->fd < 0)
            continue;
        struct sent *gone[VMM_MSG_PIECES], *s, *tmp;
        int k = 0;
        unsigned before = l->nsent;
        HASH_ITER(hh, l->sent, s, tmp) {
            unsigned long long block = 0;
            CUdeviceptr base = 0;
            if (c->cu->cuPointerGetAttribute(&block, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, s->key.base) == CUDA_SUCCESS &&
                c->cu->cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, s->key.base) == CUDA_SUCCESS &&
                block == s->key.block && base == s->key.base)
                continue;
            gone[k++] = s;
            if (k == VMM_MSG_PIECES) {
                if (send_forget(c, l, gone, k) != 0)
                    break;
                k = 0;
            }
        }
        int forgot = k > 0 || l->nsent < before;
        if (k)
            send_forget(c, l, gone, k);
        if (forgot)
            ipc_wake(c, l->peer);
        ipc_trace(c, "vmm: checked %u pieces sent to rank %d in %llu us, %u forgotten", before, l->peer,
                  (unsigned long long)(shim_mono_us() - t0), before - l->nsent);
    }
}

/* ---- the importer ---- */

static struct mirror *mirror_of(struct ipc_vmm *v, int r, uint64_t range, uint64_t size)
{
    for (int i = 0; i < v->nmirrors; i++)
        if (v->mirrors[i]->rank == r && v->mirrors[i]->range == range && v->mirrors[i]->size == size)
            return v->mirrors[i];
    return NULL;
}

static int mirror_index(const struct mirror *m, uint64_t addr) /* first piece ending after addr */
{
    int lo = 0, hi = m->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->p[mid]->base + m->p[mid]->size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* An emptied mirror goes, its range too: no address space kept for buffers given back. */
static void drop_if_empty(struct ipc_comm *c, struct mirror *m)
{
    struct ipc_vmm *v = c->vmm;
    if (m->n)
        return;
    c->cu->cuMemAddressFree(m->at, m->size);
    for (int k = 0; k < v->nmirrors; k++)
        if (v->mirrors[k] == m)
            v->mirrors[k] = v->mirrors[--v->nmirrors];
    free(m->p);
    free(m);
}

static void unmap_piece(struct ipc_comm *c, struct piece *p)
{
    struct ipc_vmm *v = c->vmm;
    struct mirror *m = p->m;
    c->cu->cuMemUnmap(m->at + (p->base - m->range), p->size);
    c->cu->cuMemRelease(p->h);
    int i = mirror_index(m, p->base);
    if (i < m->n && m->p[i] == p) {
        memmove(&m->p[i], &m->p[i + 1], (size_t)(m->n - i - 1) * sizeof(*m->p));
        m->n--;
    }
    if (p->doomed)
        v->ndoomed--;
    HASH_DEL(v->pieces, p);
    free(p);
    drop_if_empty(c, m);
}

/* Maps piece `w` of rank r (its descriptor `fd`, consumed), not yet
 * accessible: *added, the new piece (NULL if it was here already). */
static int map_piece(struct ipc_comm *c, int r, const struct vmm_wire_piece *w, int fd, struct piece **added, char *why,
                     size_t whylen)
{
    *added = NULL;
    struct ipc_vmm *v = c->vmm;
    const struct shim_cuda *cu = c->cu;
    struct piece_key key = { .rank = r, .at = { w->block, w->base } };
    struct piece *p;
    HASH_FIND(hh, v->pieces, &key, sizeof(key), p);
    if (p && (p->size != w->size || p->m->range != w->range || p->m->size != w->range_size))
        unmap_piece(c, p); /* the same memory at the same place, in another reservation: a new one there */
    else if (p) { /* forgotten then sent again, before it was unmapped */
        close(fd);
        if (p->doomed) {
            p->doomed = 0;
            v->ndoomed--;
        }
        return 0;
    }
    /* Inside its range: vmm_msg_check. */
    /* What was mapped there before was given back by its owner: replaced. */
    struct mirror *m = mirror_of(v, r, w->range, w->range_size);
    while (m) {
        int i = mirror_index(m, w->base);
        if (i >= m->n || m->p[i]->base >= w->base + w->size)
            break;
        int last = m->n == 1;
        unmap_piece(c, m->p[i]);
        if (last)
            m = NULL; /* freed with its last piece */
    }
    if (!m) {
        struct mirror **grown = v->nmirrors < v->capmirrors ? v->mirrors
                                : realloc(v->mirrors, (size_t)(v->capmirrors + 8) * sizeof(*grown));
        m = calloc(1, sizeof(*m));
        if (!grown || !m) {
            free(m);
            close(fd);
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        if (grown != v->mirrors) {
            v->mirrors = grown;
            v->capmirrors += 8;
        }
        CUresult res = cu->cuMemAddressReserve(&m->at, w->range_size, 0, 0, 0);
        if (res != CUDA_SUCCESS) {
            char err[120];
            snprintf(why, whylen, "reserving %llu bytes of address space for rank %d's buffers: %s",
                     (unsigned long long)w->range_size, r, shim_cuda_error("cuMemAddressReserve", res, err, sizeof(err)));
            free(m);
            close(fd);
            return -1;
        }
        m->rank = r;
        m->range = w->range;
        m->size = w->range_size;
        v->mirrors[v->nmirrors++] = m;
    }
    p = calloc(1, sizeof(*p));
    if (p && m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 16;
        struct piece **grown = realloc(m->p, (size_t)cap * sizeof(*grown));
        if (grown) {
            m->p = grown;
            m->cap = cap;
        }
    }
    if (!p || m->n == m->cap) {
        free(p);
        close(fd);
        drop_if_empty(c, m);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr at = m->at + (w->base - w->range);
    const char *fn = "cuMemImportFromShareableHandle";
    CUresult res = cu->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (res == CUDA_SUCCESS) {
        fn = "cuMemMap";
        res = cu->cuMemMap(at, w->size, 0, h, 0);
        if (res != CUDA_SUCCESS)
            cu->cuMemRelease(h);
    }
    if (res != CUDA_SUCCESS) {
        char err[120];
        snprintf(why, whylen, "mapping a piece of rank %d's buffer (%llu bytes): %s", r, (unsigned long long)w->size,
                 shim_cuda_error(fn, res, err, sizeof(err)));
        free(p);
        drop_if_empty(c, m);
        return -1;
    }
    p->key = key;
    p->m = m;
    p->base = w->base;
    p->size = w->size;
    p->h = h;
    int i = mirror_index(m, w->base);
    memmove(&m->p[i + 1], &m->p[i], (size_t)(m->n - i) * sizeof(*m->p));
    m->p[i] = p;
    m->n++;
    HASH_ADD(hh, v->pieces, key, sizeof(key), p);
    atomic_fetch_add_explicit(&c->stat_vmm_mapped, 1, memory_order_relaxed);
    *added = p;
    return 0;
}

static int by_place(const void *a, const void *b)
{
    const struct piece *x = *(struct piece *const *)a, *y = *(struct piece *const *)b;
    if (x->m != y->m)
        return (uintptr_t)x->m < (uintptr_t)y->m ? -1 : 1;
    return x->base < y->base ? -1 : x->base > y->base;
}

/* Makes the `n` pieces just mapped accessible to this rank's device, in one
 * call per run of neighbours: the driver's page table work is per call
 * (bench/vmm_probe.py).  On failure they are unmapped. */
static int grant_access(struct ipc_comm *c, struct piece **p, int n, char *why, size_t whylen)
{
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, c->device }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    qsort(p, (size_t)n, sizeof(*p), by_place);
    CUresult res = CUDA_SUCCESS;
    for (int i = 0, j; i < n && res == CUDA_SUCCESS; i = j) {
        uint64_t end = p[i]->base + p[i]->size;
        for (j = i + 1; j < n && p[j]->m == p[i]->m && p[j]->base == end; j++)
            end += p[j]->size;
        res = c->cu->cuMemSetAccess(p[i]->m->at + (p[i]->base - p[i]->m->range), end - p[i]->base, &acc, 1);
    }
    if (res == CUDA_SUCCESS)
        return 0;
    char err[120];
    snprintf(why, whylen, "making rank %d's buffer accessible on device %d: %s", p[0]->key.rank, c->device,
             shim_cuda_error("cuMemSetAccess", res, err, sizeof(err)));
    for (int i = 0; i < n; i++)
        unmap_piece(c, p[i]);
    return -1;
}

/* Reads one message from rank r's link, if there is one (wait_ms: how long
 * to wait for it): 1 read and done, 0 none, -1 with the reason (the link is
 * closed then: nothing more can be trusted from it), -2 the peer closed it. */
static int read_msg(struct ipc_comm *c, struct link *l, int wait_ms, char *why, size_t whylen)
{
    struct vmm_msg m;
    int fds[VMM_MSG_PIECES], nfds = 0, truncated = 0;
    ssize_t k;
    uint64_t deadline = shim_mono_us() + (uint64_t)wait_ms * 1000;
    for (;;) {
        k = recv_msg(l->fd, &m, fds, &nfds, &truncated);
        if (k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            break;
        uint64_t now = shim_mono_us();
        if (now >= deadline)
            return 0;
        struct pollfd p = { l->fd, POLLIN, 0 };
        poll(&p, 1, (int)((deadline - now) / 1000 + 1));
    }
    const char *bad = NULL;
    if (k == 0)
        bad = "closed its socket";
    else if (k < 0)
        bad = strerror(errno);
    else if (truncated)
        bad = "sent a message too long, or too many descriptors";
    else
        bad = vmm_msg_check(&m, (size_t)k, nfds, l->peer, l->in_seq + 1);
    if (bad) {
        close_fds(fds, nfds);
        snprintf(why, whylen, "rank %d's socket for sharing cuMemCreate memory: it %s", l->peer, bad);
        link_close(l);
        /* A peer that closed its socket destroyed the communicator, or died:
         * the teardown, or the monitor's to report; nothing to note. */
        return k == 0 ? -2 : -1;
    }
    l->in_seq++;
    struct ipc_vmm *v = c->vmm;
    struct piece *added[VMM_MSG_PIECES];
    int nadded = 0;
    ipc_trace(c, "vmm: a message of %u pieces (%s) from rank %d", m.n, m.kind == VMM_PIECES ? "map" : "forget",
              l->peer);
    for (uint32_t i = 0; i < m.n; i++) {
        if (m.kind == VMM_PIECES) {
            if (map_piece(c, l->peer, &m.p[i], fds[i], &added[nadded], why, whylen) != 0) {
                close_fds(fds + i + 1, (int)m.n - (int)i - 1);
                if (nadded)
                    grant_access(c, added, nadded, why + strlen(why), 0);
                return -1;
            }
            nadded += added[nadded] != NULL;
            continue;
        }
        struct piece_key key = { .rank = l->peer, .at = { m.p[i].block, m.p[i].base } };
        struct piece *p;
        HASH_FIND(hh, v->pieces, &key, sizeof(key), p);
        if (p && !p->doomed) {
            p->doomed = 1;
            v->ndoomed++;
        }
    }
    return nadded ? (grant_access(c, added, nadded, why, whylen) == 0 ? 1 : -1) : 1;
}

int ipc_vmm_map(struct ipc_comm *c, int r, const struct ipc_desc *d, size_t bytes, CUdeviceptr *at, char *why,
                size_t whylen)
{
    struct ipc_vmm *v = c->vmm;
    struct link *l = v ? in_link(v, c, r) : NULL;
    if (!l || l->fd < 0) {
        snprintf(why, whylen, "rank %d described a cuMemCreate buffer, but this rank has no socket from it%s%s", r,
                 c->vmm_note[0] ? ": " : "", c->vmm_note);
        return -1;
    }
    uint64_t want = d->vmm_seq[r == pred_of(c) ? 1 : 0];
    uint64_t deadline = shim_mono_us() + VMM_IO_MS * 1000ull;
    while (l->in_seq < want) {
        /* Sent before the descriptor was published: there already. */
        int got = read_msg(c, l, VMM_RETRY_MS, why, whylen);
        if (got < 0)
            return -1;
        if (!got && (atomic_load(&c->failed) || shim_mono_us() > deadline)) {
            snprintf(why, whylen, "rank %d's pieces of a cuMemCreate buffer did not arrive within %d s", r,
                     VMM_IO_MS / 1000);
            return -1;
        }
    }
    struct mirror *m = mirror_of(v, r, d->range, d->alloc_size);
    uint64_t pos = d->range + d->offset, end = pos + bytes;
    int i = m ? mirror_index(m, pos) : 0;
    for (; m && pos < end && i < m->n && m->p[i]->base <= pos && !m->p[i]->doomed; i++)
        pos = m->p[i]->base + m->p[i]->size;
    if (!m || pos < end) {
        snprintf(why, whylen, "rank %d's cuMemCreate buffer (%zu bytes at offset %llu of its range) is not all here: "
                 "a broken or foreign peer", r, bytes, (unsigned long long)d->offset);
        return -1;
    }
    *at = m->at + d->offset;
    return 0;
}

/* ---- the reaper, and destroy ---- */

long ipc_vmm_reap(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm;
    if (!v)
        return -1;
    uint64_t now = shim_mono_us();
    long wait = -1;
    if (v->has_probe && (atomic_load(&c->shared[succ_of(c)]->vmm_links) & VMM_FROM_PRED))
        drop_probe(c); /* the successor tried it */
#define SOONER(ms) (wait = wait < 0 || (long)(ms) < wait ? (long)(ms) : wait)
    if (v->listen_fd >= 0) {
        try_accept(c);
        if (v->listen_fd >= 0 && now >= v->listen_until_us) {
            note(c, 1, "rank %d never connected to this rank's socket in %d s (NCCLSHIM_IPC_VMM=0 there?): "
                 "cuMemCreate buffers are staged", pred_of(c), VMM_ACCEPT_MS / 1000);
            stop_listening(v);
        } else if (v->listen_fd >= 0) {
            SOONER((v->listen_until_us - now) / 1000 + 1);
        }
    }
    char why[256];
    for (int i = 0; i < 2; i++) {
        while (v->link[i].fd >= 0) {
            int got = read_msg(c, &v->link[i], 0, why, sizeof(why));
            if (got == -1)
                note(c, 1, "%s", why);
            if (got <= 0)
                break;
        }
    }
    if (v->link[0].nsent || v->link[1].nsent) {
        if (now >= v->next_check_us) {
            check_sent(c);
            v->next_check_us = now + VMM_CHECK_MS * 1000ull;
        }
        SOONER((v->next_check_us - now) / 1000 + 1);
    }
    if (v->ndoomed) {
        if (ipc_fence_passed(c)) {
            struct piece *p, *tmp;
            HASH_ITER(hh, v->pieces, p, tmp)
                if (p->doomed)
                    unmap_piece(c, p);
        } else {
            SOONER(VMM_RETRY_MS);
        }
    }
#undef SOONER
    return wait;
}

void ipc_vmm_close(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm;
    if (!v)
        return;
    /* As ipc_reaper_stop: what a copy may still use stays mapped. */
    if (ipc_fence_passed(c)) {
        struct piece *p, *tmp;
        HASH_ITER(hh, v->pieces, p, tmp)
            unmap_piece(c, p);
    } else if (v->pieces) {
        shim_warn("ipc", "ipc communicator %s (rank %d): %u pieces of peers' buffers stay mapped: its last operation "
                  "did not finish", c->group, c->rank, HASH_COUNT(v->pieces));
    }
    stop_listening(v);
    link_close(&v->link[0]);
    link_close(&v->link[1]);
    drop_probe(c);
    free(v->scratch);
    free(v->blocks);
    if (!v->pieces) {
        free(v->mirrors);
        free(v);
    }
    c->vmm = NULL;
}
