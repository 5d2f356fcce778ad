/*
 * The VMM sharing's sockets (the protocol: ipc_vmm.c): a link's messages
 * sent and received whole with their descriptors (SCM_RIGHTS), the
 * predecessor's connection accepted once its probe piece maps here, and the
 * note of why sharing is off.  A file of its own since the set-up, the
 * exporter and the importer all talk through these, and they call none of
 * those back.
 */
#define _GNU_SOURCE
#include "ipc_vmm_link.h"
#include "ipc_core.h"

#include "clock.h"
#include "record.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The first reason VMM memory is staged (or sharing is off), for the
 * records; and once on stderr, since a user can usually fix it. */
void vmm_note(struct ipc_comm *c, int warn, const char *fmt, ...)
{
    if (c->vmm.note[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->vmm.note, sizeof(c->vmm.note), fmt, ap);
    va_end(ap);
    if (warn)
        shim_warn("ipc-vmm", "ipc communicator %s (rank %d of %d): %s", c->group, c->rank, c->nranks, c->vmm.note);
}

void vmm_link_close(struct link *l)
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

void vmm_close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Sends one message (with n descriptors for PIECES): 0, or -1 with errno.
 * SOCK_SEQPACKET: a message goes whole or not at all. */
int vmm_send_msg(int fd, const struct vmm_msg *m, const int *fds, int nfds)
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
ssize_t vmm_recv_msg(int fd, struct vmm_msg *m, int *fds, int *nfds, int *truncated)
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

void vmm_stop_listening(struct ipc_vmm *v)
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

/* The predecessor's connection, if it came: its HELLO names it and says its
 * token (anyone of this user could connect to the path). */
void vmm_try_accept(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm.st;
    while (v->listen_fd >= 0 && v->link[1].fd < 0) {
        int fd = accept4(v->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                vmm_note(c, 1, "accepting rank %d's socket: %s; cuMemCreate buffers are staged", pred_of(c),
                         strerror(errno));
                vmm_stop_listening(v);
            }
            return;
        }
        /* The predecessor sends its HELLO right after connecting: a short
         * wait (qlock may be held, by the application's thread too). */
        struct vmm_msg m;
        struct pollfd p = { fd, POLLIN, 0 };
        int fds[VMM_MSG_PIECES], nfds = 0, truncated = 0;
        ssize_t k = poll(&p, 1, 100) == 1 ? vmm_recv_msg(fd, &m, fds, &nfds, &truncated) : -1;
        uint64_t token = atomic_load(&c->shared[pred_of(c)]->vmm_token);
        if (k != (ssize_t)(VMM_MSG_HEAD + sizeof(struct vmm_wire_piece)) || truncated ||
            m.magic != VMM_MAGIC || m.kind != VMM_HELLO || m.rank != pred_of(c) || m.n != 1 || m.seq != token ||
            nfds != 1 || !m.p[0].size || m.p[0].size > VMM_PROBE_MAX) {
            vmm_close_fds(fds, nfds);
            close(fd); /* a stranger, or garbage: keep listening until the deadline */
            continue;
        }
        char why[200];
        if (try_probe(c, fds[0], m.p[0].size, why, sizeof(why)) != 0) {
            vmm_note(c, 1, "sharing a piece of rank %d's cuMemCreate memory on device %d failed (%s): such buffers are "
                     "staged", pred_of(c), c->device, why);
            close(fd);
            vmm_stop_listening(v);
            /* The neighbours stop waiting for this rank's sockets. */
            atomic_fetch_and(&c->shared[c->rank]->vmm_links, ~VMM_ON);
            return;
        }
        v->link[1].fd = fd;
        v->link[1].peer = pred_of(c);
        vmm_stop_listening(v);
        atomic_fetch_or(&c->shared[c->rank]->vmm_links, VMM_FROM_PRED);
    }
}
