/*
 * The VMM sharing's exporter (the protocol: ipc_vmm.c): a buffer's pieces
 * walked (ipc_vmm_describe), those a neighbour was not sent sent as file
 * descriptors before the descriptor is published, and, in the reaper, those
 * no longer mapped where they were forgotten.  Apart from the importer,
 * since the two ends share only the links and the wire format.
 */
#define _GNU_SOURCE
#include "ipc_vmm_export.h"
#include "ipc_core.h"
#include "ipc_vmm_link.h"
#include "ipc_vmm_state.h"

#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    const struct ipc_vmm *v = c->vmm.st;
    return (atomic_load(&c->shared[succ_of(c)]->vmm_links) & VMM_ON) &&
           (atomic_load(&c->shared[pred_of(c)]->vmm_links) & VMM_ON) && v->link[0].fd >= 0 &&
           (v->link[1].fd >= 0 || v->listen_fd >= 0);
}

/* Tells the peer of `l` to forget `n` pieces (blocks) and forgets them here. */
static int send_forget(struct ipc_comm *c, struct link *l, struct sent **list, int n)
{
    struct vmm_msg m = { .magic = VMM_MAGIC, .kind = VMM_FORGET, .rank = c->rank };
    for (int i = 0; i < n;) {
        m.n = 0;
        for (; i < n && m.n < VMM_MSG_PIECES; i++)
            m.p[m.n++] = (struct vmm_wire_piece){ .block = list[i]->key.block, .base = list[i]->key.base };
        m.seq = l->out_seq + 1;
        if (vmm_send_msg(l->fd, &m, NULL, 0) != 0)
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

/* Fills m with the next pieces of p (from *i on) that l's peer was not
 * sent, each exported as a file descriptor into fds (a piece it holds
 * becomes its newest).  0; 1 if a piece cannot be exported (noted, nothing
 * left open). */
static int fill_pieces(struct ipc_comm *c, struct link *l, const struct vmm_wire_piece *p, int n, int *i,
                       struct vmm_msg *m, int *fds)
{
    const struct shim_cuda *cu = c->cu;
    m->n = 0;
    for (; *i < n && m->n < VMM_MSG_PIECES; (*i)++) {
        struct sent *s;
        struct place at = { p[*i].block, p[*i].base };
        HASH_FIND(hh, l->sent, &at, sizeof(at), s);
        if (s) {
            /* Still mapped where it was: the peer holds it (re-inserted: newest). */
            HASH_DEL(l->sent, s);
            HASH_ADD(hh, l->sent, key, sizeof(s->key), s);
            continue;
        }
        CUmemGenericAllocationHandle h = 0;
        int fd = -1;
        CUresult r = cu->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)p[*i].base);
        if (r == CUDA_SUCCESS) {
            r = cu->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            cu->cuMemRelease(h);
        }
        if (r != CUDA_SUCCESS) {
            vmm_close_fds(fds, (int)m->n);
            char err[120];
            vmm_note(c, 1, "a buffer at %#llx is cuMemCreate memory that cannot be exported (%s; made without "
                     "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, as vLLM's sleep-mode allocator does): its "
                     "broadcasts are staged, at a fraction of the copy rate; PyTorch's allocator (expandable "
                     "segments too) can be shared", (unsigned long long)p[*i].base,
                     shim_cuda_error("cuMemExportToShareableHandle", r, err, sizeof(err)));
            return 1;
        }
        fds[m->n] = fd;
        m->p[m->n++] = p[*i];
    }
    return 0;
}

/* Sends m and its descriptors fds to l's peer (first making it forget its
 * oldest pieces where it would hold more than VMM_MAX_SENT), closes them
 * here (the message in flight holds them) and remembers the pieces as
 * sent: 0, or -1 with errno (the descriptors still open). */
static int send_filled(struct ipc_comm *c, struct link *l, struct vmm_msg *m, const int *fds)
{
    if (l->nsent + m->n > VMM_MAX_SENT) {
        struct sent *old[VMM_MSG_PIECES], *s, *tmp;
        int k = 0;
        HASH_ITER(hh, l->sent, s, tmp) {
            if (k == (int)m->n)
                break;
            old[k++] = s;
        }
        if (send_forget(c, l, old, k) != 0)
            return -1;
    }
    m->seq = l->out_seq + 1;
    if (vmm_send_msg(l->fd, m, fds, (int)m->n) != 0)
        return -1;
    vmm_close_fds(fds, (int)m->n);
    l->out_seq++;
    atomic_fetch_add_explicit(&c->vmm.sent, m->n, memory_order_relaxed);
    for (uint32_t k = 0; k < m->n; k++) {
        struct sent *s = malloc(sizeof(*s));
        if (!s) /* the peer holds it; forgetting it here only sends it again */
            continue;
        s->key = (struct place){ m->p[k].block, m->p[k].base };
        HASH_ADD(hh, l->sent, key, sizeof(s->key), s);
        l->nsent++;
    }
    return 0;
}

/* Sends the peer of `l` the pieces of `p` it was not sent: 0, and *sent
 * set if there were any; 1 if a piece cannot be exported (made without a
 * shareable handle type); -1 if the sending failed. */
static int send_pieces(struct ipc_comm *c, struct link *l, const struct vmm_wire_piece *p, int n, int *sent)
{
    struct vmm_msg m = { .magic = VMM_MAGIC, .kind = VMM_PIECES, .rank = c->rank };
    int fds[VMM_MSG_PIECES];
    for (int i = 0; i < n;) {
        if (fill_pieces(c, l, p, n, &i, &m, fds) != 0)
            return 1;
        if (!m.n)
            continue;
        if (send_filled(c, l, &m, fds) != 0) {
            vmm_close_fds(fds, (int)m.n);
            vmm_note(c, 1, "sending rank %d the pieces of a cuMemCreate buffer: %s; that buffer is staged", l->peer,
                     strerror(errno));
            return -1;
        }
        *sent = 1;
    }
    return 0;
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

/* Whether the sockets are up for this broadcast to count on them. */
static int links_ready(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm.st;
    if (links_up(c))
        return 1;
    /* Once: the neighbours may still be in their connect (the sockets
     * come up within it); past that the broadcast goes staged, until
     * the reaper has accepted. */
    if (v->setup_waited)
        return 0;
    uint64_t until = shim_mono_us() + VMM_SETUP_MS * 1000ull;
    v->setup_waited = 1;
    for (;;) {
        vmm_try_accept(c);
        if (links_up(c))
            return 1;
        if (!links_coming(c) || shim_mono_us() >= until || atomic_load(&c->fail.failed)) {
            char who[48];
            if (pred_of(c) == succ_of(c))
                snprintf(who, sizeof(who), "rank %d", succ_of(c));
            else
                snprintf(who, sizeof(who), "ranks %d and %d", pred_of(c), succ_of(c));
            vmm_note(c, 1, "the sockets for sharing cuMemCreate memory with %s did not come up (see their notes): "
                     "such buffers are staged", who);
            return 0;
        }
        struct timespec ts = { 0, 50000 };
        nanosleep(&ts, NULL);
    }
}

/* The piece at `at` of the buffer at `buf` into `w` (its range already
 * there): 0, or -1 if `at` is not cuMemCreate memory inside that range, or
 * the driver does not say. */
static int piece_at(const struct shim_cuda *cu, CUdeviceptr at, CUdeviceptr buf, struct ipc_vmm_piece *first,
                    struct vmm_wire_piece *w)
{
    CUdeviceptr start = w->range;
    size_t size = w->range_size;
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
        return -1;
    else if (at == buf)
        *first = (struct ipc_vmm_piece){ block, base, psize };
    w->block = block;
    w->base = base;
    w->size = psize;
    return 0;
}

/* Room for twice as many pieces in v->scratch, and their blocks: 0, or -1
 * if out of memory. */
static int grow_scratch(struct ipc_vmm *v)
{
    int cap = v->capscratch ? 2 * v->capscratch : 64;
    uint64_t *blocks = realloc(v->blocks, (size_t)cap * sizeof(*blocks));
    if (blocks)
        v->blocks = blocks;
    struct vmm_wire_piece *grown = blocks ? realloc(v->scratch, (size_t)cap * sizeof(*grown)) : NULL;
    if (!grown)
        return -1;
    v->scratch = grown;
    v->capscratch = cap;
    return 0;
}

/* Walks the pieces of the buffer at `buf` into v->scratch: 1, and *count
 * of them; else what ipc_vmm_describe returns (-1: never shared, 0: not
 * this time). */
static int walk_pieces(struct ipc_comm *c, CUdeviceptr buf, size_t bytes, CUdeviceptr start, size_t size,
                       struct ipc_vmm_piece *first, int *count)
{
    struct ipc_vmm *v = c->vmm.st;
    int n = 0;
    for (CUdeviceptr at = buf; at < buf + bytes;) {
        struct vmm_wire_piece w = { .range = start, .range_size = size };
        if (piece_at(c->cu, at, buf, first, &w) != 0)
            return n ? 0 : -1; /* not such memory (or the driver does not say): never; a hole: not now */
        if (n == VMM_MAX_PIECES) {
            vmm_note(c, 1, "a buffer at %#llx spans more than %d pieces of cuMemCreate memory: it is staged",
                     (unsigned long long)buf, VMM_MAX_PIECES);
            return -1;
        }
        if (n == v->capscratch && grow_scratch(v) != 0)
            return 0;
        v->scratch[n++] = w;
        at = w.base + w.size;
    }
    *count = n;
    return 1;
}

int ipc_vmm_describe(struct ipc_comm *c, CUdeviceptr buf, size_t bytes, CUdeviceptr start, size_t size,
                     struct ipc_vmm_piece *first, struct ipc_desc *d)
{
    struct ipc_vmm *v = c->vmm.st;
    if (!v || !links_ready(c))
        return 0;
    int n = 0;
    uint64_t t0 = ipc_trace_clock();
    int walked = walk_pieces(c, buf, bytes, start, size, first, &n);
    if (walked <= 0)
        return walked;
    ipc_trace(c, "vmm: walked %d pieces of %#llx in %llu us", n, (unsigned long long)buf,
              (unsigned long long)(ipc_trace_clock() - t0));
    if (n > 1 && repeats_block(v, n)) {
        vmm_note(c, 1, "a buffer at %#llx maps one piece of cuMemCreate memory at two addresses, which cannot be "
                 "shared piece by piece (a neighbour maps each piece once): it is staged", (unsigned long long)buf);
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
void vmm_check_sent(struct ipc_comm *c)
{
    struct ipc_vmm *v = c->vmm.st;
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
