/*
 * The VMM sharing's importer (the protocol: ipc_vmm.c): a neighbour's
 * messages read, its pieces imported and mapped at their offsets of a range
 * reserved the size of its own (a mirror), so that a buffer over several
 * pieces is one copy (ipc_vmm_map), and those it said to forget unmapped
 * once no copy may use them.  Apart from the exporter, since the two ends
 * share only the links and the wire format.
 */
#define _GNU_SOURCE
#include "ipc_vmm_import.h"
#include "ipc_core.h"
#include "ipc_vmm_link.h"

#include "clock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    struct ipc_vmm *v = c->vmm.st;
    if (m->n)
        return;
    c->cu->cuMemAddressFree(m->at, m->size);
    for (int k = 0; k < v->nmirrors; k++)
        if (v->mirrors[k] == m)
            v->mirrors[k] = v->mirrors[--v->nmirrors];
    free(m->p);
    free(m);
}

void vmm_unmap_piece(struct ipc_comm *c, struct piece *p)
{
    struct ipc_vmm *v = c->vmm.st;
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

/* Whether rank r's piece `w` (`key`) is mapped here already, as sent: its
 * descriptor `fd` is closed then, not needed.  The same memory at the same
 * place in another reservation is unmapped: `w` is a new one there. */
static int already_mapped(struct ipc_comm *c, const struct piece_key *key, const struct vmm_wire_piece *w, int fd)
{
    struct ipc_vmm *v = c->vmm.st;
    struct piece *p;
    HASH_FIND(hh, v->pieces, key, sizeof(*key), p);
    if (p && (p->size != w->size || p->m->range != w->range || p->m->size != w->range_size))
        vmm_unmap_piece(c, p); /* the same memory at the same place, in another reservation: a new one there */
    else if (p) { /* forgotten then sent again, before it was unmapped */
        close(fd);
        if (p->doomed) {
            p->doomed = 0;
            v->ndoomed--;
        }
        return 1;
    }
    return 0;
}

/* Rank r's mirror that piece `w` goes in, if there is one, with what was
 * mapped where `w` goes unmapped; NULL if there is none (any more: a mirror
 * goes with its last piece). */
static struct mirror *clear_place(struct ipc_comm *c, int r, const struct vmm_wire_piece *w)
{
    /* What was mapped there before was given back by its owner: replaced. */
    struct mirror *m = mirror_of(c->vmm.st, r, w->range, w->range_size);
    while (m) {
        int i = mirror_index(m, w->base);
        if (i >= m->n || m->p[i]->base >= w->base + w->size)
            break;
        int last = m->n == 1;
        vmm_unmap_piece(c, m->p[i]);
        if (last)
            m = NULL; /* freed with its last piece */
    }
    return m;
}

/* A mirror of rank r's range that piece `w` lies in, reserved here: NULL
 * with the reason if it cannot be. */
static struct mirror *new_mirror(struct ipc_comm *c, int r, const struct vmm_wire_piece *w, char *why, size_t whylen)
{
    struct ipc_vmm *v = c->vmm.st;
    if (v->nmirrors == v->capmirrors) {
        /* Kept at once: realloc has freed the old list (before, a failed calloc
         * below left v->mirrors pointing at it, and the next call grew freed memory). */
        struct mirror **grown = realloc(v->mirrors, (size_t)(v->capmirrors + 8) * sizeof(*grown));
        if (!grown) {
            snprintf(why, whylen, "out of memory");
            return NULL;
        }
        v->mirrors = grown;
        v->capmirrors += 8;
    }
    struct mirror *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    CUresult res = c->cu->cuMemAddressReserve(&m->at, w->range_size, 0, 0, 0);
    if (res != CUDA_SUCCESS) {
        char err[120];
        snprintf(why, whylen, "reserving %llu bytes of address space for rank %d's buffers: %s",
                 (unsigned long long)w->range_size, r, shim_cuda_error("cuMemAddressReserve", res, err, sizeof(err)));
        free(m);
        return NULL;
    }
    m->rank = r;
    m->range = w->range;
    m->size = w->range_size;
    v->mirrors[v->nmirrors++] = m;
    return m;
}

/* A piece for mirror `m`, with room for it in m's list; NULL if out of memory. */
static struct piece *new_piece(struct mirror *m)
{
    struct piece *p = calloc(1, sizeof(*p));
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
        return NULL;
    }
    return p;
}

/* Imports piece `w` of rank r (its descriptor `fd`, consumed) and maps it
 * at `at`: 0 and its handle in *h, or -1 with the reason (nothing held). */
static int import_piece(struct ipc_comm *c, int r, const struct vmm_wire_piece *w, int fd, CUdeviceptr at,
                        CUmemGenericAllocationHandle *h, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    const char *fn = "cuMemImportFromShareableHandle";
    CUresult res = cu->cuMemImportFromShareableHandle(h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (res == CUDA_SUCCESS) {
        fn = "cuMemMap";
        res = cu->cuMemMap(at, w->size, 0, *h, 0);
        if (res != CUDA_SUCCESS)
            cu->cuMemRelease(*h);
    }
    if (res == CUDA_SUCCESS)
        return 0;
    char err[120];
    snprintf(why, whylen, "mapping a piece of rank %d's buffer (%llu bytes): %s", r, (unsigned long long)w->size,
             shim_cuda_error(fn, res, err, sizeof(err)));
    return -1;
}

/* Piece `p`, just mapped, held: in m's list (sorted by base) and the table. */
static void add_piece(struct ipc_comm *c, struct mirror *m, struct piece *p, const struct piece_key *key,
                      const struct vmm_wire_piece *w, CUmemGenericAllocationHandle h)
{
    struct ipc_vmm *v = c->vmm.st;
    p->key = *key;
    p->m = m;
    p->base = w->base;
    p->size = w->size;
    p->h = h;
    int i = mirror_index(m, w->base);
    memmove(&m->p[i + 1], &m->p[i], (size_t)(m->n - i) * sizeof(*m->p));
    m->p[i] = p;
    m->n++;
    HASH_ADD(hh, v->pieces, key, sizeof(p->key), p);
    atomic_fetch_add_explicit(&c->vmm.mapped, 1, memory_order_relaxed);
}

/* Maps piece `w` of rank r (its descriptor `fd`, consumed), not yet
 * accessible: *added, the new piece (NULL if it was here already). */
static int map_piece(struct ipc_comm *c, int r, const struct vmm_wire_piece *w, int fd, struct piece **added, char *why,
                     size_t whylen)
{
    *added = NULL;
    struct piece_key key = { .rank = r, .at = { w->block, w->base } };
    if (already_mapped(c, &key, w, fd))
        return 0;
    /* Inside its range: vmm_msg_check. */
    struct mirror *m = clear_place(c, r, w);
    if (!m)
        m = new_mirror(c, r, w, why, whylen);
    if (!m) {
        close(fd);
        return -1;
    }
    struct piece *p = new_piece(m);
    if (!p) {
        close(fd);
        drop_if_empty(c, m);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    CUmemGenericAllocationHandle h = 0;
    if (import_piece(c, r, w, fd, m->at + (w->base - w->range), &h, why, whylen) != 0) {
        free(p);
        drop_if_empty(c, m);
        return -1;
    }
    add_piece(c, m, p, &key, w, h);
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
 * (docs/history/benchmarks-history.md, "Expandable segments shared as file
 * descriptors").  On failure they are unmapped. */
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
        vmm_unmap_piece(c, p[i]);
    return -1;
}

/* Reads one message from rank r's link, if there is one (wait_ms: how long
 * to wait for it): 1 read and done, 0 none, -1 with the reason (the link is
 * closed then: nothing more can be trusted from it), -2 the peer closed it. */
int vmm_read_msg(struct ipc_comm *c, struct link *l, int wait_ms, char *why, size_t whylen)
{
    struct vmm_msg m;
    int fds[VMM_MSG_PIECES], nfds = 0, truncated = 0;
    ssize_t k;
    uint64_t deadline = shim_mono_us() + (uint64_t)wait_ms * 1000;
    for (;;) {
        k = vmm_recv_msg(l->fd, &m, fds, &nfds, &truncated);
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
        vmm_close_fds(fds, nfds);
        snprintf(why, whylen, "rank %d's socket for sharing cuMemCreate memory: it %s", l->peer, bad);
        vmm_link_close(l);
        /* A peer that closed its socket destroyed the communicator, or died:
         * the teardown, or the monitor's to report; nothing to note. */
        return k == 0 ? -2 : -1;
    }
    l->in_seq++;
    struct ipc_vmm *v = c->vmm.st;
    struct piece *added[VMM_MSG_PIECES];
    int nadded = 0;
    ipc_trace(c, "vmm: a message of %u pieces (%s) from rank %d", m.n, m.kind == VMM_PIECES ? "map" : "forget",
              l->peer);
    for (uint32_t i = 0; i < m.n; i++) {
        if (m.kind == VMM_PIECES) {
            if (map_piece(c, l->peer, &m.p[i], fds[i], &added[nadded], why, whylen) != 0) {
                vmm_close_fds(fds + i + 1, (int)m.n - (int)i - 1);
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
    struct ipc_vmm *v = c->vmm.st;
    struct link *l = v ? in_link(v, c, r) : NULL;
    if (!l || l->fd < 0) {
        snprintf(why, whylen, "rank %d described a cuMemCreate buffer, but this rank has no socket from it%s%s", r,
                 c->vmm.note[0] ? ": " : "", c->vmm.note);
        return -1;
    }
    uint64_t want = d->vmm_seq[r == pred_of(c) ? 1 : 0];
    uint64_t deadline = shim_mono_us() + VMM_IO_MS * 1000ull;
    while (l->in_seq < want) {
        /* Sent before the descriptor was published: there already. */
        int got = vmm_read_msg(c, l, VMM_RETRY_MS, why, whylen);
        if (got < 0)
            return -1;
        if (!got && (atomic_load(&c->fail.failed) || shim_mono_us() > deadline)) {
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

