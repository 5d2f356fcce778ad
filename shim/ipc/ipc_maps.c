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

/*
 * Closing a mapping waits (inside the driver) for the work issued before it,
 * so it must not run while a copy through the mapping may still run: only
 * with qlock held (no broadcast being enqueued) and the last operation over;
 * else the cache grows until the next chance.
 */
void ipc_trim_maps(struct ipc_comm *c, int keep)
{
    if (c->nmap <= keep)
        return;
    ipc_trace(c, "trim to %d of %d", keep, c->nmap);
    if (!ipc_fence_passed(c))
        return;
    while (c->nmap > keep) {
        int lru = 0;
        for (int i = 1; i < c->nmap; i++)
            if (c->map[i].last_b < c->map[lru].last_b)
                lru = i;
        c->cu->cuIpcCloseMemHandle(c->map[lru].base);
        c->map[lru] = c->map[--c->nmap];
    }
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
    struct ipc_map *m = NULL;
    for (int i = 0; i < c->nmap && !m; i++)
        if (c->map[i].rank == r && c->map[i].buffer_id == d->buffer_id &&
            memcmp(&c->map[i].handle, &d->handle, sizeof(d->handle)) == 0)
            m = &c->map[i];
    if (!m) {
        if (c->nmap == c->capmap) {
            int cap = c->capmap ? 2 * c->capmap : MAP_CACHE;
            struct ipc_map *grown = realloc(c->map, (size_t)cap * sizeof(*grown));
            if (!grown) {
                snprintf(why, whylen, "out of memory");
                return -1;
            }
            c->map = grown;
            c->capmap = cap;
        }
        CUdeviceptr p = 0;
        uint64_t t0 = shim_mono_us();
        CUresult res = c->cu->cuIpcOpenMemHandle(&p, d->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        ipc_trace(c, "b %llu: opened rank %d's buffer (%llu bytes) in %llu us", (unsigned long long)b, r,
                  (unsigned long long)d->alloc_size, (unsigned long long)(shim_mono_us() - t0));
        if (res != CUDA_SUCCESS) {
            char err[160];
            snprintf(why, whylen, "opening rank %d's buffer (%llu bytes) for broadcast %llu: %s", r,
                     (unsigned long long)d->alloc_size, (unsigned long long)b,
                     shim_cuda_error("cuIpcOpenMemHandle", res, err, sizeof(err)));
            return -1;
        }
        m = &c->map[c->nmap++];
        m->rank = r;
        m->buffer_id = d->buffer_id;
        m->handle = d->handle;
        m->base = p;
    }
    m->last_b = b;
    c->map_used_us = shim_mono_us();
    *at = m->base + d->offset;
    return 0;
}
