/*
 * Memory of cuMemCreate shared between ring neighbours (the protocol:
 * ipc_proto.h).
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
 *
 * Files: this one sets the sharing up (the socket, the probe piece lent to
 * the successor, the connections), gives the reaper its turn and closes;
 * ipc_vmm_link.c holds the sockets (messages with their descriptors, the
 * predecessor's connection accepted); ipc_vmm_export.c the exporter
 * (ipc_vmm_describe, the pieces sent and forgotten); ipc_vmm_import.c the
 * importer (the mirrors, ipc_vmm_map); ipc_vmm_state.h the state they
 * share (each file's own header says what it offers); ipc_vmm_wire.c the
 * messages' check.  The calls go one way (this file ->
 * the exporter and the importer -> the sockets), so that each can be read
 * and changed without the ones that call it.
 */
#define _GNU_SOURCE
#include "ipc_vmm.h"
#include "ipc_core.h"
#include "ipc_vmm_export.h"
#include "ipc_vmm_import.h"
#include "ipc_vmm_link.h"
#include "ipc_vmm_state.h"

#include "clock.h"
#include "config.h"
#include "random.h"
#include "record.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- set-up ---- */

void ipc_vmm_listen(struct ipc_comm *c)
{
    if (c->nranks < 2)
        return;
    if (!shim_config()->ipc_vmm) {
        vmm_note(c, 0, "NCCLSHIM_IPC_VMM=0: buffers of cuMemCreate (PyTorch's expandable segments) are staged");
        return;
    }
    if (!c->cu->vmm_ok) {
        vmm_note(c, 0, "the CUDA driver lacks the cuMem* functions to share cuMemCreate memory: such buffers are "
                 "staged");
        return;
    }
    struct ipc_vmm *v = calloc(1, sizeof(*v));
    if (!v) {
        vmm_note(c, 0, "out of memory setting up the sharing of cuMemCreate memory: such buffers are staged");
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
        vmm_note(c, 1, "a Unix socket at %s for sharing cuMemCreate memory: %s (is /dev/shm writable?); such buffers "
                 "are staged", v->path, strerror(errno));
        if (v->listen_fd >= 0)
            close(v->listen_fd);
        if (bound) /* ours: a path that was there already is not */
            unlink(v->path);
        free(v);
        return;
    }
    v->listen_until_us = shim_mono_us() + VMM_ACCEPT_MS * 1000ull;
    uint64_t token = 0;
    if (shim_random(&token, sizeof(token)) != 0 || !token) /* unguessable if it can be; never 0 */
        token = (shim_mono_us() << 20) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)v ^ 1;
    atomic_store(&c->shared[c->rank]->vmm_token, token);
    c->vmm.st = v;
    atomic_fetch_or(&c->shared[c->rank]->vmm_links, VMM_ON);
}

/* A piece of cuMemCreate memory for the successor to try (v->probe): its
 * descriptor and size, or -1 with the reason. */
static int make_probe(struct ipc_comm *c, int *fd, size_t *size, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    struct ipc_vmm *v = c->vmm.st;
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
    struct ipc_vmm *v = c->vmm.st;
    if (v->has_probe)
        c->cu->cuMemRelease(v->probe);
    v->has_probe = 0;
}

/* Connects to the successor's socket and says HELLO, lending it the probe
 * piece to try; failing only notes why cuMemCreate buffers are staged. */
static void connect_succ(struct ipc_comm *c, struct ipc_vmm *v, int succ, const char *succ_shm)
{
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
        vmm_note(c, 1, "a piece of cuMemCreate memory with a file descriptor handle for rank %d to try: %s; such "
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
               vmm_send_msg(fd, &hello, &probe_fd, 1) != 0) {
        vmm_note(c, 1, "connecting to rank %d's socket %s: %s; cuMemCreate buffers are staged", succ, sa.sun_path,
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

/* The predecessor connects in its own connect, and the successor
 * accepts (and tries the probe) in its own, at about the same time: both
 * waited for here (bounded), so that the first broadcast finds the sockets
 * up and the probe is given back before the application counts its memory;
 * later, the reaper still accepts. */
static void await_links(struct ipc_comm *c, struct ipc_vmm *v, int succ)
{
    uint64_t until = shim_mono_us() + VMM_SETUP_MS * 1000ull;
    for (;;) {
        vmm_try_accept(c);
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

void ipc_vmm_connect(struct ipc_comm *c, const char *succ_shm)
{
    struct ipc_vmm *v = c->vmm.st;
    if (!v)
        return;
    int succ = succ_of(c), pred = pred_of(c);
    if (!(atomic_load(&c->shared[succ]->vmm_links) & VMM_ON))
        vmm_note(c, 1, "rank %d does not share cuMemCreate memory (NCCLSHIM_IPC_VMM=0 there, its socket failed, or an "
                 "older shim): such buffers are staged", succ);
    else
        connect_succ(c, v, succ, succ_shm);
    if (!(atomic_load(&c->shared[pred]->vmm_links) & VMM_ON)) {
        if (pred != succ)
            vmm_note(c, 1, "rank %d does not share cuMemCreate memory (NCCLSHIM_IPC_VMM=0 there, its socket failed, or "
                     "an older shim): such buffers are staged", pred);
        vmm_stop_listening(v);
        return;
    }
    await_links(c, v, succ);
}

/* ---- the reaper, and destroy ---- */

long ipc_vmm_reap(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm.st;
    if (!v)
        return -1;
    uint64_t now = shim_mono_us();
    long wait = -1;
    if (v->has_probe && (atomic_load(&c->shared[succ_of(c)]->vmm_links) & VMM_FROM_PRED))
        drop_probe(c); /* the successor tried it */
#define SOONER(ms) (wait = wait < 0 || (long)(ms) < wait ? (long)(ms) : wait)
    if (v->listen_fd >= 0) {
        vmm_try_accept(c);
        if (v->listen_fd >= 0 && now >= v->listen_until_us) {
            vmm_note(c, 1, "rank %d never connected to this rank's socket in %d s (NCCLSHIM_IPC_VMM=0 there?): "
                     "cuMemCreate buffers are staged", pred_of(c), VMM_ACCEPT_MS / 1000);
            vmm_stop_listening(v);
        } else if (v->listen_fd >= 0) {
            SOONER((v->listen_until_us - now) / 1000 + 1);
        }
    }
    char why[256];
    for (int i = 0; i < 2; i++) {
        while (v->link[i].fd >= 0) {
            int got = vmm_read_msg(c, &v->link[i], 0, why, sizeof(why));
            if (got == -1)
                vmm_note(c, 1, "%s", why);
            if (got <= 0)
                break;
        }
    }
    if (v->link[0].nsent || v->link[1].nsent) {
        if (now >= v->next_check_us) {
            vmm_check_sent(c);
            v->next_check_us = now + VMM_CHECK_MS * 1000ull;
        }
        SOONER((v->next_check_us - now) / 1000 + 1);
    }
    if (v->ndoomed) {
        if (ipc_fence_passed(c)) {
            struct piece *p, *tmp;
            HASH_ITER(hh, v->pieces, p, tmp)
                if (p->doomed)
                    vmm_unmap_piece(c, p);
        } else {
            SOONER(VMM_RETRY_MS);
        }
    }
#undef SOONER
    return wait;
}

void ipc_vmm_close(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm.st;
    if (!v)
        return;
    /* As ipc_reaper_stop: what a copy may still use stays mapped. */
    if (ipc_fence_passed(c)) {
        struct piece *p, *tmp;
        HASH_ITER(hh, v->pieces, p, tmp)
            vmm_unmap_piece(c, p);
    } else if (v->pieces) {
        shim_warn("ipc", "ipc communicator %s (rank %d): %u pieces of peers' buffers stay mapped: its last operation "
                  "did not finish", c->group, c->rank, HASH_COUNT(v->pieces));
    }
    vmm_stop_listening(v);
    vmm_link_close(&v->link[0]);
    vmm_link_close(&v->link[1]);
    drop_probe(c);
    free(v->scratch);
    free(v->blocks);
    if (!v->pieces) {
        free(v->mirrors);
        free(v);
    }
    c->vmm.st = NULL;
}
