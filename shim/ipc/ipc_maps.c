/*
 * The map cache: peers' allocations mapped into this process for the
 * broadcast's copies (cuIpcOpenMemHandle, or through ipc_vmm.c for memory of
 * cuMemCreate), kept between broadcasts and closed by the reaper once idle or
 * too many, and by suspend.  Every use is under qlock.
 */
#define _GNU_SOURCE
#include "ipc_internal.h"

#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Least recently used first. */
static int by_use(const void *x, const void *y)
{
    const struct ipc_map *a = x, *b = y;
    return (a->last_b > b->last_b) - (a->last_b < b->last_b);
}

void ipc_close_map(struct ipc_comm *c, struct ipc_map *m)
{
    c->cu->cuIpcCloseMemHandle(m->base);
    HASH_DEL(c->map, m);
    free(m);
    c->nmap--;
}

/*
 * Closing a mapping waits (inside the driver) for the work issued before it,
 * so it must not run while a copy through the mapping may still run: only
 * with qlock held (no broadcast being enqueued) and the last operation over;
 * else the cache grows until the next chance.  Sorted once (O(n log n): a
 * refit's tens of thousands of mappings), the oldest closed.
 */
void ipc_trim_maps(struct ipc_comm *c, int keep)
{
    if (c->nmap <= keep)
        return;
    ipc_trace(c, "trim to %d of %d", keep, c->nmap);
    if (!ipc_fence_passed(c))
        return;
    HASH_SRT(hh, c->map, by_use);
    struct ipc_map *m, *tmp;
    HASH_ITER(hh, c->map, m, tmp) {
        if (c->nmap <= keep)
            break;
        ipc_close_map(c, m);
    }
}

/* Opens rank r's allocation of `d` and remembers it under `key`: the
 * mapping, or NULL with the reason. */
static struct ipc_map *open_map(struct ipc_comm *c, int r, uint64_t b, const struct ipc_desc *d,
                                const struct ipc_map_key *key, char *why, size_t whylen)
{
    struct ipc_map *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    uint64_t t0 = shim_mono_us();
    CUresult res = c->cu->cuIpcOpenMemHandle(&m->base, d->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    ipc_trace(c, "b %llu: opened rank %d's buffer (%llu bytes) in %llu us", (unsigned long long)b, r,
              (unsigned long long)d->alloc_size, (unsigned long long)(shim_mono_us() - t0));
    if (res != CUDA_SUCCESS) {
        char err[160];
        snprintf(why, whylen, "opening rank %d's buffer (%llu bytes) for broadcast %llu: %s", r,
                 (unsigned long long)d->alloc_size, (unsigned long long)b,
                 shim_cuda_error("cuIpcOpenMemHandle", res, err, sizeof(err)));
        free(m);
        return NULL;
    }
    m->key = *key;
    m->handle = d->handle;
    HASH_ADD(hh, c->map, key, sizeof(m->key), m);
    c->nmap++;
    return m;
}

/* Rank r's allocation of `d`, mapped here (cached: see ipc_trim_maps). */
int ipc_map_peer(struct ipc_comm *c, int r, uint64_t b, const struct ipc_desc *d, size_t bytes,
                    CUdeviceptr *at, char *why, size_t whylen)
{
    if (d->offset > d->alloc_size || bytes > d->alloc_size - d->offset) {
        snprintf(why, whylen, "rank %d's buffer (%llu bytes at %llu) is smaller than the broadcast (%zu bytes): "
                 "the ranks disagree on its count or datatype", r, (unsigned long long)d->alloc_size,
                 (unsigned long long)d->offset, bytes);
        return -1;
    }
    if (d->vmm) {
        uint64_t t0 = ipc_trace_clock();
        if (ipc_vmm_map(c, r, d, bytes, at, why, whylen) != 0)
            return -1;
        ipc_trace(c, "b %llu: mapped rank %d's cuMemCreate buffer (%zu bytes) in %llu us", (unsigned long long)b, r,
                  bytes, (unsigned long long)(ipc_trace_clock() - t0));
        c->map_used_us = shim_mono_us();
        return 0;
    }
    struct ipc_map_key key = { r, 0, d->buffer_id };
    struct ipc_map *m = NULL;
    HASH_FIND(hh, c->map, &key, sizeof(key), m);
    if (m && memcmp(&m->handle, &d->handle, sizeof(d->handle)) != 0) {
        /* An allocation's id is never reused and its handle never changes. */
        snprintf(why, whylen, "rank %d's buffer %llu came with another IPC handle than before",
                 r, (unsigned long long)d->buffer_id);
        return -1;
    }
    if (!m && !(m = open_map(c, r, b, d, &key, why, whylen)))
        return -1;
    m->last_b = b;
    c->map_used_us = shim_mono_us();
    *at = m->base + d->offset;
    return 0;
}
