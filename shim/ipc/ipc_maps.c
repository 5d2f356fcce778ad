/*
 * The map cache: peers' allocations mapped into this process for the
 * broadcast's copies (cuIpcOpenMemHandle, or through ipc_vmm.c for memory of
 * cuMemCreate), kept between broadcasts and closed by the reaper once idle or
 * too many, and by suspend.  Every use is under qlock.
 */
#define _GNU_SOURCE
#include "ipc_maps.h"
#include "ipc_core.h"
#include "ipc_vmm_import.h"

#include "clock.h"
#include "record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

/* A neighbour's allocation as mapped here. */
struct ipc_map_key {
    int32_t rank, pad;                  /* pad 0: the key is its bytes */
    uint64_t buffer_id;
};
struct ipc_map {
    struct ipc_map_key key;
    UT_hash_handle hh;
    CUipcMemHandle handle;
    CUdeviceptr base;
    uint64_t last_b;                    /* the last broadcast that used it */
};

/* Least recently used first. */
static int by_use(const void *x, const void *y)
{
    const struct ipc_map *a = x, *b = y;
    return (a->last_b > b->last_b) - (a->last_b < b->last_b);
}

/* Closes mapping m and forgets it (the last operation over). */
static void close_map(struct ipc_comm *c, struct ipc_map *m)
{
    c->cu->cuIpcCloseMemHandle(m->base);
    HASH_DEL(c->maps.map, m);
    free(m);
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
    if (ipc_maps_count(c) <= keep)
        return;
    ipc_trace(c, "trim to %d of %d", keep, ipc_maps_count(c));
    if (!ipc_fence_passed(c))
        return;
    if (keep) /* all go otherwise: their order does not matter */
        HASH_SRT(hh, c->maps.map, by_use);
    struct ipc_map *m, *tmp;
    HASH_ITER(hh, c->maps.map, m, tmp) {
        if (ipc_maps_count(c) <= keep)
            break;
        close_map(c, m);
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
    HASH_ADD(hh, c->maps.map, key, sizeof(m->key), m);
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
        c->maps.used_us = shim_mono_us();
        return 0;
    }
    struct ipc_map_key key = { r, 0, d->buffer_id };
    struct ipc_map *m = NULL;
    HASH_FIND(hh, c->maps.map, &key, sizeof(key), m);
    if (m && memcmp(&m->handle, &d->handle, sizeof(d->handle)) != 0) {
        /* An allocation's id is never reused and its handle never changes. */
        snprintf(why, whylen, "rank %d's buffer %llu came with another IPC handle than before",
                 r, (unsigned long long)d->buffer_id);
        return -1;
    }
    if (!m && !(m = open_map(c, r, b, d, &key, why, whylen)))
        return -1;
    m->last_b = b;
    c->maps.used_us = shim_mono_us();
    *at = m->base + d->offset;
    return 0;
}

int ipc_maps_count(const struct ipc_comm *c)
{
    return (int)HASH_COUNT(c->maps.map);
}

int ipc_maps_hold_rank(const struct ipc_comm *c, int r)
{
    for (const struct ipc_map *m = c->maps.map; m; m = m->hh.next)
        if (m->key.rank == r)
            return 1;
    return 0;
}

void ipc_maps_drop_rank(struct ipc_comm *c, int r)
{
    struct ipc_map *m, *tmp;
    HASH_ITER(hh, c->maps.map, m, tmp)
        if (m->key.rank == r)
            close_map(c, m);
}

/* How long a neighbour's freed allocations wait to be closed here while
 * this rank's last operation is not over. */
#define GONE_RETRY_MS 10

/* Closes the mappings of neighbour `side`'s (0: the successor, 1: the
 * predecessor) allocations it says are gone ("Mappings kept"): 0, or 1 if
 * they must wait for this rank's last operation. */
static int close_gone(struct ipc_comm *c, int side)
{
    int r = side ? pred_of(c) : succ_of(c);
    const struct ipc_shared *page = c->shared[r];
    uint64_t seen = c->maps.gone_seen[side], n = atomic_load_explicit(&page->gone_n, memory_order_acquire);
    if (n == seen)
        return 0;
    if (!ipc_fence_passed(c))
        return 1;
    for (uint64_t i = n - seen > GONE_RING ? n : seen; i < n; i++) {
        struct ipc_map_key key = { r, 0, atomic_load_explicit(&page->gone_ids[i % GONE_RING], memory_order_relaxed) };
        struct ipc_map *m = NULL;
        HASH_FIND(hh, c->maps.map, &key, sizeof(key), m);
        if (m)
            close_map(c, m);
    }
    /* Fallen behind, or overwritten while read: every mapping of r goes. */
    if (atomic_load_explicit(&page->gone_n, memory_order_acquire) - seen > GONE_RING)
        ipc_maps_drop_rank(c, r);
    c->maps.gone_seen[side] = n;
    return 0;
}

long ipc_maps_reap(struct ipc_comm *c)
{
    int later = close_gone(c, 0);
    if (pred_of(c) != succ_of(c))
        later |= close_gone(c, 1);
    if (ipc_maps_count(c) > MAP_CACHE)
        ipc_trim_maps(c, MAP_CACHE);
    if (!ipc_maps_count(c))
        return later ? GONE_RETRY_MS : -1;
    uint64_t now = shim_mono_us(), due = c->maps.used_us + MAP_IDLE_MS * 1000ull;
    if (now >= due) {
        ipc_trim_maps(c, 0);
        due = now + MAP_IDLE_MS * 1000ull; /* if the last operation is not over: later */
    }
    long ms = ipc_maps_count(c) ? (long)((due - now + 999) / 1000) : -1;
    return later && (ms < 0 || ms > GONE_RETRY_MS) ? GONE_RETRY_MS : ms;
}

void ipc_maps_close(struct ipc_comm *c)
{
    ipc_trim_maps(c, 0);
    if (ipc_maps_count(c))
        shim_warn("ipc", "ipc communicator %s (rank %d): %d mappings of peers' buffers stay open: its last operation "
                  "did not finish", c->group, c->rank, ipc_maps_count(c));
}
