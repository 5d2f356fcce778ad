/*
 * One broadcast of an ipc communicator (the protocol: ipc_proto.h): where
 * each rank's buffer is (the descriptors in the shared pages), which rank of
 * each hop came first and so how the hop moves the data (PUSH, PULL or
 * STAGED), and the copies and counter operations that do it, all enqueued on
 * the caller's stream.  It owns struct ipc_bcasts: the broadcasts' counts,
 * "Senders overlap", and the cache of this rank's exported allocations its
 * descriptors name (here, not in a file of its own, since every broadcast
 * looks it up: no call more on the broadcast's path).
 */
#define _GNU_SOURCE
#include "ipc_bcast.h"
#include "ipc_core.h"
#include "ipc_kernel.h"
#include "ipc_maps.h"
#include "ipc_suspend.h"
#include "ipc_vmm_export.h"
#include "ipc_stream.h"

#include "clock.h"

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

/* Allocations of this rank whose IPC handle is remembered (then forgotten all
 * at once: an id is never reused, a forgotten one costs its driver calls again). */
#define EXPORT_CACHE 32768

/* An allocation of this rank and its IPC handle (as the map cache keeps a peer's: ipc_maps.c). */
struct ipc_exported {
    uint64_t buffer_id;                 /* the key (c->bc.exported) */
    UT_hash_handle hh;
    CUdeviceptr start;
    size_t size;                        /* the range of start (cuMemCreate memory: the whole reservation) */
    CUipcMemHandle handle;
    int not_ipc;                        /* cuIpcGetMemHandle refused it (cuMemCreate memory): see ipc_vmm.c */
    int not_vmm;                        /* nor can it be shared as file descriptors */
    /* cuMemCreate memory: the mapping buffer_id names (ids are per mapping
     * and never reused, so it stays what it was), or size 0 */
    struct ipc_vmm_piece piece;
};

enum hop { HOP_NONE = IPC_HOP_NONE, HOP_PUSH = IPC_HOP_PUSH, HOP_PULL = IPC_HOP_PULL, HOP_STAGED = IPC_HOP_STAGED };

/* Whether a host wait for rank r must end (only a rank DRING broadcasts
 * ahead of a neighbour waits): the communicator failed, or r has not moved
 * for HOST_WAIT_US (it died without its connection closing, or stopped
 * calling NCCL). */
static int give_up(struct ipc_comm *c, uint64_t deadline, int r, const char *what, char *why, size_t whylen)
{
    if (ipc_failed(c, why, whylen))
        return 1;
    if (shim_mono_us() > deadline) {
        snprintf(why, whylen, "rank %d did not %s within %llu s (it died, or stopped calling NCCL)", r, what,
                 (unsigned long long)(HOST_WAIT_US / 1000000));
        return 1;
    }
    return 0;
}

/* Whether this rank's descriptor of broadcast b has a place: both
 * neighbours are done with the one DRING before it. */
static int ring_room(const struct ipc_comm *c, uint64_t b)
{
    return atomic_load(&c->shared[succ_of(c)]->read_pred_upto) + DRING >= b &&
           atomic_load(&c->shared[pred_of(c)]->read_succ_upto) + DRING >= b;
}

static int published(const struct ipc_comm *c, int r, uint64_t b)
{
    return atomic_load_explicit(&c->shared[r]->ring[b % DRING].seq, memory_order_acquire) == b;
}

/* What publish and fetch wait for, as ipc_futex_sleep asks it. */
struct awaited {
    const struct ipc_comm *c;
    int r;
    uint64_t b;
};

static int room_ready(const void *arg)
{
    const struct awaited *a = arg;
    return ring_room(a->c, a->b);
}

static int published_ready(const void *arg)
{
    const struct awaited *a = arg;
    return published(a->c, a->r, a->b);
}

/* A rank out of room sleeps until its late neighbour is this many
 * broadcasts past the room it needs (fewer than DRING: the neighbour gets
 * there without this rank, whose earlier descriptors are all published), so
 * that the neighbour wakes it once for as many broadcasts, not for each. */
#define ROOM_AHEAD (DRING / 4)

static int publish(struct ipc_comm *c, uint64_t b, const struct ipc_desc *d, char *why, size_t whylen)
{
    uint64_t deadline = shim_mono_us() + HOST_WAIT_US;
    for (;;) {
        /* Waits on one neighbour's word at a time, in 50 ms slices: the
         * successor's (this rank its predecessor: side 0) while it is short. */
        int side = atomic_load(&c->shared[succ_of(c)]->read_pred_upto) + DRING >= b;
        int late = side ? pred_of(c) : succ_of(c);
        uint32_t seen = atomic_load(&c->shared[late]->readc.word);
        if (ring_room(c, b))
            break;
        if (give_up(c, deadline, late, "finish this rank's earlier broadcasts", why, whylen))
            return -1;
        struct awaited a = { c, late, b };
        /* No room: b > DRING. */
        ipc_futex_sleep(&c->shared[late]->readc, side, b - DRING + ROOM_AHEAD, seen, 50, room_ready, &a);
    }
    struct ipc_shared *own = c->shared[c->rank];
    struct ipc_ring_slot *slot = &own->ring[b % DRING];
    slot->desc = *d;
    atomic_store_explicit(&slot->seq, b, memory_order_release);
    ipc_futex_progress(&own->pub, b);
    return 0;
}

/* Reads the descriptor of broadcast b of this rank's neighbour on `side`
 * (0: the successor, 1: the predecessor; this rank is then its predecessor or
 * successor, the side of ipc_futex_sleep): published before the neighbour
 * counted itself in on the hop, so there when this rank came second.  It
 * stays put until this rank says it is done with it (mark_done). */
static int fetch(struct ipc_comm *c, int side, uint64_t b, struct ipc_desc *d, char *why, size_t whylen)
{
    int r = side ? pred_of(c) : succ_of(c);
    struct ipc_shared *page = c->shared[r];
    const struct ipc_ring_slot *slot = &page->ring[b % DRING];
    uint64_t deadline = shim_mono_us() + HOST_WAIT_US;
    for (;;) {
        uint32_t seen = atomic_load(&page->pub.word);
        if (published(c, r, b))
            break;
        if (give_up(c, deadline, r, "enqueue the same broadcast", why, whylen))
            return -1;
        struct awaited a = { c, r, b };
        ipc_futex_sleep(&page->pub, side, b, seen, 50, published_ready, &a);
    }
    *d = slot->desc;
    return 0;
}

static void mark_done(struct ipc_comm *c, uint64_t b)
{
    struct ipc_shared *own = c->shared[c->rank];
    atomic_store(&own->read_pred_upto, b);
    atomic_store(&own->read_succ_upto, b);
    ipc_futex_progress(&own->readc, b);
}

/* Counts this rank in on the hop into rank r for broadcast b (the word is
 * in r's ring slot): 1 if it is the first of the two. */
static int claim_first(struct ipc_comm *c, int r, uint64_t b)
{
    _Atomic uint64_t *w = &c->shared[r]->ring[b % DRING].claim_in;
    uint64_t cur = atomic_load(w);
    for (;;) {
        /* Another broadcast's (DRING before, both counted in): start anew. */
        uint64_t next = cur >> 2 == b ? cur + 1 : b << 2 | 1;
        if (atomic_compare_exchange_weak(w, &cur, next))
            return (next & 3) == 1;
    }
}

/*
 * A hop is pushed when its receiver counts in first, pulled when its sender
 * does, and a push is the faster way: the copy engine writing to its peer
 * (bench/copy_probe.py: 390 against 373 GB/s at 64 MiB; the broadcast, alone
 * and under a matmul load, 2-4% faster from 16 to 256 MiB: docs/benchmarks.md).
 * So a sender that finds its successor a few broadcasts behind (it has
 * published one of the PUSH_BEHIND before b: it is calling them, a few us
 * each) gives it up to push_wait_us to count in on b: in a loop of
 * broadcasts the ranks then go in step and every hop is pushed.  Not only one
 * behind: a sender that got ahead once (the receiver late out of a host
 * synchronisation) would never wait again.  Bounded, and never needed for
 * progress: a successor that does not come in time, or is further behind,
 * is pulled from.
 */
enum { PUSH_BEHIND = 8 };
static void await_receiver(struct ipc_comm *c, uint64_t b)
{
    int r = succ_of(c);
    const _Atomic uint64_t *w = &c->shared[r]->ring[b % DRING].claim_in;
    if (!c->push_wait_us || atomic_load(w) >> 2 == b)
        return;
    int near = 0;
    for (uint64_t k = 1; k <= PUSH_BEHIND && k < b && !near; k++)
        near = published(c, r, b - k);
    if (!near)
        return;
    uint64_t t0 = shim_mono_us(), until = t0 + (uint64_t)c->push_wait_us;
    while (atomic_load(w) >> 2 != b) {
        if (atomic_load(&c->fail.failed) || shim_mono_us() > until) {
            ipc_trace(c, "b %llu: rank %d not in after %d us", (unsigned long long)b, r, c->push_wait_us);
            return;
        }
        sched_yield();
    }
    ipc_trace(c, "b %llu: rank %d in after %llu us", (unsigned long long)b, r,
              (unsigned long long)(shim_mono_us() - t0));
}

/* A new entry of the export cache for buffer id `id` (replacing one of the
 * same id), or NULL (out of memory: the buffer is staged). */
static struct ipc_exported *new_export(struct ipc_comm *c, uint64_t id)
{
    struct ipc_exported *e = NULL;
    HASH_FIND(hh, c->bc.exported, &id, sizeof(id), e);
    if (e) {
        HASH_DEL(c->bc.exported, e);
        free(e);
    }
    if (ipc_exports_count(c) >= EXPORT_CACHE)
        ipc_forget_exports(c);
    if (!(e = calloc(1, sizeof(*e))))
        return NULL;
    e->buffer_id = id;
    HASH_ADD(hh, c->bc.exported, buffer_id, sizeof(e->buffer_id), e);
    return e;
}

int ipc_exports_count(const struct ipc_comm *c)
{
    return (int)HASH_COUNT(c->bc.exported);
}

void ipc_forget_exports(struct ipc_comm *c)
{
    struct ipc_exported *e, *tmp;
    HASH_ITER(hh, c->bc.exported, e, tmp) {
        HASH_DEL(c->bc.exported, e);
        free(e);
    }
}

/* How often the reaper asks whether exported allocations still live, and
 * how many it asks about in one turn (qlock held: ~0.1 us each). */
#define LIVE_CHECK_MS 500
#define LIVE_CHECK_MAX 1024

/* Writes id into this rank's gone ring ("Mappings kept"). */
static void say_gone(struct ipc_comm *c, uint64_t id)
{
    struct ipc_shared *own = c->shared[c->rank];
    uint64_t n = atomic_load_explicit(&own->gone_n, memory_order_relaxed);
    atomic_store_explicit(&own->gone_ids[n % GONE_RING], id, memory_order_relaxed);
    atomic_store_explicit(&own->gone_n, n + 1, memory_order_release);
}

/* Whether exported allocation e was freed: its address no longer names it
 * (unmapped, or another allocation's now).  cuMemCreate memory has its own
 * check (ipc_vmm.c): never here. */
static int export_gone(const struct ipc_comm *c, const struct ipc_exported *e)
{
    unsigned long long id = 0;
    if (e->not_ipc)
        return 0;
    return c->cu->cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, e->start) != CUDA_SUCCESS ||
           id != e->buffer_id;
}

long ipc_exports_reap(struct ipc_comm *c)
{
    if (!ipc_exports_count(c))
        return -1;
    uint64_t now = shim_mono_us();
    if (now < c->bc.check_us)
        return (long)((c->bc.check_us - now) / 1000 + 1);
    struct ipc_exported *e = NULL, *next;
    if (c->bc.check_from)
        HASH_FIND(hh, c->bc.exported, &c->bc.check_from, sizeof(c->bc.check_from), e);
    if (!e)
        e = c->bc.exported;
    int asked = 0, gone = 0;
    for (; e && asked < LIVE_CHECK_MAX; e = next, asked++) {
        next = e->hh.next;
        if (export_gone(c, e)) {
            say_gone(c, e->buffer_id);
            HASH_DEL(c->bc.exported, e);
            free(e);
            gone++;
        }
    }
    c->bc.check_from = e ? e->buffer_id : 0;
    if (!e) /* round done: the next in LIVE_CHECK_MS */
        c->bc.check_us = now + LIVE_CHECK_MS * 1000ull;
    if (gone) {
        ipc_trace(c, "%d exported allocations freed: told the neighbours", gone);
        ipc_wake(c, pred_of(c));
        ipc_wake(c, succ_of(c));
    }
    return e ? 0 : LIVE_CHECK_MS;
}

/* Whether `bytes` at `buf` can be reached by a neighbour where they are: an
 * allocation cuIpcGetMemHandle exports, or memory of cuMemCreate shared as
 * file descriptors (ipc_vmm.c).  Else d->direct stays 0. */
static void describe(struct ipc_comm *c, uint64_t b, CUdeviceptr buf, size_t bytes, struct ipc_desc *d)
{
    const struct shim_cuda *cu = c->cu;
    memset(d, 0, sizeof(*d));
    CUdeviceptr start = 0;
    size_t size = 0;
    unsigned long long id = 0;
    if (!bytes || cu->cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, buf) != CUDA_SUCCESS || !id)
        return;
    /* Ids are never reused (one per allocation, or per mapping of cuMemCreate
     * memory), so an id seen before has the same range: two driver calls and
     * the handle's export saved on each broadcast of a buffer used before. */
    struct ipc_exported *e = NULL;
    uint64_t key = id;
    HASH_FIND(hh, c->bc.exported, &key, sizeof(key), e);
    if (e && !(buf >= e->start && buf - e->start < e->size))
        e = NULL; /* not possible for one id: described anew below */
    if (e) {
        start = e->start;
        size = e->size;
    } else if (cu->cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, buf) != CUDA_SUCCESS ||
               cu->cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, buf) != CUDA_SUCCESS ||
               buf < start || buf - start >= size) {
        return;
    }
    if (bytes > size - (buf - start))
        return;
    if (!e) {
        if (!(e = new_export(c, id)))
            return;
        e->start = start;
        e->size = size;
        /* Fails for memory of cuMemCreate (expandable segments), which
         * cannot be shared so whatever the buffer: remembered. */
        e->not_ipc = cu->cuIpcGetMemHandle(&e->handle, start) != CUDA_SUCCESS;
    }
    if (e->not_ipc) {
        /* Of cuMemCreate: its id is the mapping's (a piece), and the range
         * the whole reservation.  -1: never (not exportable), 0: not now. */
        if (!e->not_vmm) {
            uint64_t t0 = ipc_trace_clock();
            int r = ipc_vmm_describe(c, buf, bytes, start, size, &e->piece, d);
            ipc_trace(c, "b %llu: described a cuMemCreate buffer (%zu bytes) in %llu us: %d", (unsigned long long)b,
                      bytes, (unsigned long long)(ipc_trace_clock() - t0), r);
            e->not_vmm = r < 0;
            if (r > 0)
                return;
        }
        memset(d, 0, sizeof(*d));
        return;
    }
    d->direct = 1;
    d->buffer_id = id;
    d->offset = buf - start;
    d->alloc_size = size;
    d->handle = e->handle;
}

/* What this rank does in one broadcast. */
struct hop_plan {
    int pos, producer, consumer;        /* place in the chain; sends on; receives */
    enum hop in, out;                   /* from the predecessor; to the successor */
    CUdeviceptr mine;                   /* the data here: the root's sendbuff, else recvbuff */
    CUdeviceptr from;                   /* PULL in: the predecessor's data, mapped here */
    CUdeviceptr to;                     /* PUSH out: the successor's buffer, mapped here */
    int first_in, first_out;            /* this rank came first on the hop */
    int sm_in, sm_out;                  /* this rank's copy of the hop runs on the SMs (flushed_copy) */
};

/* Which of this rank's copies run on the SMs (the hop's two ranks on one
 * GPU, the kernel loaded, the addresses aligned: ipc_kernel_usable), and
 * counts them for the records. */
static void plan_copies(struct ipc_comm *c, const struct ipc_bcast_args *j, struct hop_plan *p)
{
    int pred = pred_of(c), succ = succ_of(c), copies = 0;
    if (p->in == HOP_PULL || p->in == HOP_STAGED) {
        CUdeviceptr src = p->in == HOP_PULL ? p->from : slot(c, pred, 0);
        p->sm_in = ipc_kernel_usable(c, pred, j->recv, src);
        copies++;
    }
    if (p->out == HOP_PUSH || p->out == HOP_STAGED) {
        CUdeviceptr dst = p->out == HOP_PUSH ? p->to : slot(c, c->rank, 0);
        p->sm_out = ipc_kernel_usable(c, succ, dst, p->mine);
        copies++;
    }
    unsigned sm = (unsigned)p->sm_in + (unsigned)p->sm_out;
    atomic_fetch_add_explicit(&c->bc.stat_sm, sm, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->bc.stat_ce, (unsigned)copies - sm, memory_order_relaxed);
}

/* Whether the other rank of hop `r` (the claim word in rank r's ring slot)
 * has counted in on broadcast b, before this one has: this one then comes
 * second on it, whatever happens next (the count only grows). */
static int other_in(const struct ipc_comm *c, int r, uint64_t b)
{
    uint64_t w = atomic_load(&c->shared[r]->ring[b % DRING].claim_in);
    return w >> 2 == b && (w & 3) >= 1;
}

/* Whether this rank will come second on each of its hops of broadcast b:
 * then nobody reads its descriptor (the first of a hop decides from its own),
 * so a root's buffer need not be described (a receiver's is: plan_hops).  That
 * is the usual case for a root in a loop of broadcasts (await_receiver), and
 * what it saves is more than the
 * driver's attribute calls: an expandable-segment buffer seen for the first
 * time would have its pieces exported (~0.1 ms each) and its neighbour would
 * import and map them (~0.15 ms each) though nobody copies through them
 * (docs/history/benchmarks-history.md, "Expandable segments"). */
static int second_on_every_hop(const struct ipc_comm *c, const struct hop_plan *p, uint64_t b)
{
    return (!p->consumer || other_in(c, c->rank, b)) && (!p->producer || other_in(c, succ_of(c), b));
}

/*
 * Settles both of this rank's hops.  Publish, then count in on each hop: the
 * first of a hop's two ranks takes the passive half its own buffer allows
 * (receiver: PUSH if it can be exported; sender: PULL if it can; else
 * STAGED); the second reads the first's descriptor and derives the same.
 */
static int plan_hops(struct ipc_comm *c, const struct ipc_bcast_args *j, struct hop_plan *p, char *why, size_t whylen)
{
    int n = c->nranks, pred = pred_of(c), succ = succ_of(c);
    memset(p, 0, sizeof(*p));
    p->pos = (c->rank - j->root + n) % n;
    p->producer = p->pos < n - 1;
    p->consumer = p->pos > 0;
    p->mine = p->pos == 0 ? j->send : j->recv;
    if (!j->bytes) {
        mark_done(c, j->b); /* nothing moves: nobody reads the descriptors */
        return 0;
    }
    /* A root waits for its receiver before it describes its buffer, so that
     * a receiver already in spares it that (below); a middle rank waits
     * after it has counted in on its own hop in, not to hold up its
     * predecessor's wait for it. */
    if (p->producer && !p->consumer)
        await_receiver(c, j->b);
    struct ipc_desc dm, other;
    /* A receiver describes its buffer all the same: its predecessor pushes
     * into it whenever the receiver comes first, and a buffer of expandable
     * segments then needs its pieces exported.  Exported the first time the
     * buffer is seen, they are imported in the first refit; exported only when
     * the receiver first comes first on it, a refit of 45 buffers still
     * exported and imported pieces in its 6th (docs/benchmarks.md,
     * "Expandable segments").  A described buffer seen before costs no driver
     * call but the walk of its pieces. */
    if (!p->consumer && second_on_every_hop(c, p, j->b))
        memset(&dm, 0, sizeof(dm));
    else
        describe(c, j->b, p->mine, j->bytes, &dm);
    if (publish(c, j->b, &dm, why, whylen) != 0)
        return -1;
    if (p->consumer) {
        p->first_in = claim_first(c, c->rank, j->b);
        if (p->first_in)
            p->in = dm.direct ? HOP_PUSH : HOP_STAGED;
        else if (fetch(c, 1, j->b, &other, why, whylen) != 0)
            return -1;
        else
            p->in = other.direct ? HOP_PULL : HOP_STAGED;
        if (p->in == HOP_PULL && ipc_map_peer(c, pred, j->b, &other, j->bytes, &p->from, why, whylen) != 0)
            return -1;
    }
    if (p->producer) {
        if (p->consumer)
            await_receiver(c, j->b);
        p->first_out = claim_first(c, succ, j->b);
        if (p->first_out)
            p->out = dm.direct ? HOP_PULL : HOP_STAGED;
        else if (fetch(c, 0, j->b, &other, why, whylen) != 0)
            return -1;
        else
            p->out = other.direct ? HOP_PUSH : HOP_STAGED;
        if (p->out == HOP_PUSH && ipc_map_peer(c, succ, j->b, &other, j->bytes, &p->to, why, whylen) != 0)
            return -1;
    }
    mark_done(c, j->b);
    return 0;
}

/* A copy on stream s after the counter operations queued in m (flushed
 * first: the stream's order is theirs, then the copy's).  A hop's copy, to
 * or from a neighbour's memory (`peer`), runs between GPUs on a copy engine
 * without the hints ipc_copy gives copies within one GPU; between processes
 * on one GPU with the copy kernel where plan_copies chose it (`sm`): a copy
 * engine moves IPC-mapped memory of its own GPU at a fifth of the SMs' rate
 * (docs/benchmarks.md, "Colocated"). */
static int flushed_copy(struct ipc_comm *c, struct memops *m, int sm, int peer, CUdeviceptr dst, CUdeviceptr src,
                        size_t len, CUstream s, char *why, size_t whylen)
{
    if (memops_flush(m, why, whylen) != 0)
        return -1;
    CUresult r = sm     ? ipc_kernel_copy(c, dst, src, len, s)
                 : peer ? c->cu->cuMemcpyDtoDAsync(dst, src, len, s)
                        : ipc_copy(c, dst, src, len, s);
    return cu_check(r, sm ? "cuLaunchKernel" : "cuMemcpyDtoDAsync", why, whylen);
}

/* A rank's copies of its own data into its staging slots, for a successor
 * that cannot be reached otherwise: chunk k once the data is here, into
 * slot k % S once the successor has taken chunk k - S out of it. */
struct staging {
    struct ipc_comm *c;
    struct memops *m;                   /* the stream's counter operations */
    int sm;                             /* the successor shares this GPU: the kernel copies (plan_copies) */
    CUdeviceptr data;
    size_t bytes;
    uint64_t base;                      /* bytes broadcast before this one */
    uint64_t next, nchunks;             /* chunks staged, and to stage */
};

static int stage_upto(struct staging *st, size_t limit, CUstream s, char *why, size_t whylen)
{
    struct ipc_comm *c = st->c;
    const uint64_t S = (uint64_t)c->nslots;
    const size_t sch = c->chunk;
    for (; st->next < st->nchunks; st->next++) {
        size_t off = (size_t)(st->next * sch), len = st->bytes - off < sch ? st->bytes - off : sch;
        if (off + len > limit)
            break;
        if (st->next >= S &&
            memops_wait(st->m, flag(c, c->rank, F_TAKEN), st->base + (st->next - S + 1) * sch, why, whylen) != 0)
            return -1;
        if (flushed_copy(c, st->m, st->sm, 0, slot(c, c->rank, st->next), st->data + off, len, s, why, whylen) != 0)
            return -1;
        if (memops_write(st->m, flag(c, succ_of(c), F_AVAIL), st->base + off + len, why, whylen) != 0)
            return -1;
    }
    return 0;
}

/*
 * The bytes a hop moves per step: staging chunks; one copy between two ranks;
 * along a chain, pipelined steps, chosen by the broadcast's size.  A middle
 * rank forwards a step only once it has it, so a broadcast of one step is
 * received, then forwarded; each step costs the copy engine microseconds
 * beyond its bytes (docs/design.md, "The broadcast's schedule": between two
 * GPUs 305 GB/s in 8 MiB copies with a counter write after each, 354 in
 * 23 MiB ones).  Measured on 4 H100s, 1+3: 16 MiB in two 8 MiB steps 0.67x
 * NCCL (one step: 0.59); from 32 MiB, 46 MiB steps.  16 or 32 MiB steps lift
 * 64 MiB from 0.64 to 0.73-0.80x NCCL on idle GPUs but, under a matmul load,
 * drop it as low as 131-138 GB/s where 46 MiB steps keep 188-200 (NCCL: 41),
 * and the loaded refit is what the copy engines are for.
 */
#define CHAIN_SMALL_STEP (8u << 20)
#define CHAIN_BIG_STEP (46u << 20)
#define CHAIN_SMALL_BYTES (32u << 20)
static size_t step_of(const struct ipc_comm *c, enum hop h, size_t bytes)
{
    if (h == HOP_STAGED)
        return c->chunk;
    if (c->nranks == 2)
        return bytes;
    if (c->step_fixed)
        return c->step_fixed;
    return bytes <= CHAIN_SMALL_BYTES ? CHAIN_SMALL_STEP : CHAIN_BIG_STEP;
}

/* Whether broadcast j may copy before the one before it is over ("Senders
 * overlap", ipc_proto.h): two ranks, this one the root pushing in place,
 * after a broadcast that did the same into memory this one does not touch.
 * Remembers this one for the next. */
static int senders_overlap(struct ipc_comm *c, const struct ipc_bcast_args *j, const struct hop_plan *p)
{
    int push_only = c->nranks == 2 && j->bytes && p->pos == 0 && p->out == HOP_PUSH && j->recv == j->send;
    /* The fence such a broadcast leaves: DONE, or on one GPU the AVAIL it wrote. */
    int after_push = (j->fence_rank == c->rank && j->fence_off == F_DONE) ||
                     (j->fence_rank == succ_of(c) && j->fence_off == F_AVAIL);
    int ok = push_only && c->bc.last_push_only && j->fence_val && after_push &&
             (p->to + j->bytes <= c->bc.push_to || c->bc.push_to + c->bc.push_len <= p->to);
    if (j->bytes) {
        c->bc.last_push_only = push_only;
        c->bc.push_to = p->to;
        c->bc.push_len = j->bytes;
    }
    return ok;
}

/* The wait that orders broadcast j after the operation before (on another
 * stream): its fence; or, for the last receiver of a pushed broadcast after
 * another, only that one's TAKEN write ("Receivers run ahead",
 * ipc_proto.h): TAKEN_MINE, or on one GPU the TAKEN itself ("One GPU"). */
static int order_wait(struct ipc_comm *c, const struct ipc_bcast_args *j, const struct hop_plan *p, struct memops *m,
                      char *why, size_t whylen)
{
    int me = c->rank, pred = pred_of(c);
    int mine = j->bytes && p->in == HOP_PUSH && !p->producer && j->fence_rank == me && j->fence_off == F_AVAIL;
    CUdeviceptr at = !mine                 ? flag(c, j->fence_rank, j->fence_off)
                     : ipc_same_gpu(c, pred) ? flag(c, pred, F_TAKEN)
                                             : flag(c, me, F_TAKEN_MINE);
    return memops_wait(m, at, mine ? j->base : j->fence_val, why, whylen);
}

/* One step of the broadcast's data, [off, off + len), on stream s: its
 * arrival here and its copy in (a consumer), its copy or staging out (a
 * producer), and the counters that say so. */
static int enqueue_step(struct ipc_comm *c, const struct ipc_bcast_args *j, const struct hop_plan *p,
                        struct staging *st, int overlap, size_t off, size_t len, CUstream s, char *why, size_t whylen)
{
    struct memops *m = st->m;
    int me = c->rank, pred = pred_of(c), succ = succ_of(c);
    const size_t bytes = j->bytes, sch = c->chunk;
    uint64_t upto = j->base + off + len;
    if (p->consumer) {
        if (memops_wait(m, flag(c, me, F_AVAIL), upto, why, whylen) != 0)
            return -1;
        if (p->in != HOP_PUSH) {
            CUdeviceptr src = p->in == HOP_PULL ? p->from + off : slot(c, pred, off / sch);
            if (flushed_copy(c, m, p->sm_in, 1, j->recv + off, src, len, s, why, whylen) != 0 ||
                memops_write(m, flag(c, pred, F_TAKEN), upto, why, whylen) != 0)
                return -1;
        }
    }
    if (p->out == HOP_PUSH) {
        if (flushed_copy(c, m, p->sm_out, 1, p->to + off, p->mine + off, len, s, why, whylen) != 0)
            return -1;
        /* AVAIL in order ("Senders overlap") */
        if (overlap && memops_wait(m, flag(c, j->fence_rank, j->fence_off), j->fence_val, why, whylen) != 0)
            return -1;
        if (memops_write(m, flag(c, succ, F_AVAIL), upto, why, whylen) != 0)
            return -1;
    } else if (p->out == HOP_PULL && (p->consumer || off + len == bytes)) {
        if (memops_write(m, flag(c, succ, F_AVAIL), upto, why, whylen) != 0)
            return -1;
    } else if (p->out == HOP_STAGED && stage_upto(st, off + len, s, why, whylen) != 0) {
        return -1;
    }
    return 0;
}

/* The broadcast's copies and counter operations, on stream s; the counter
 * operations after the last copy stay queued in m (ipc_chain_bcast adds
 * DONE and flushes). */
static int enqueue(struct ipc_comm *c, const struct ipc_bcast_args *j, const struct hop_plan *p, CUstream s,
                   struct memops *m, char *why, size_t whylen)
{
    int me = c->rank, pred = pred_of(c);
    const uint64_t base = j->base;
    const size_t bytes = j->bytes, sch = c->chunk;
    int overlap = senders_overlap(c, j, p);
    if (j->fence_val && !overlap && order_wait(c, j, p, m, why, whylen) != 0)
        return -1;
    if (!bytes)
        return 0;
    if (p->pos == 0 && j->recv != j->send) {
        if (flushed_copy(c, m, 0, 0, j->recv, j->send, bytes, s, why, whylen) != 0)
            return -1;
    }
    /* This rank's buffer may be written from now on. */
    if (p->in == HOP_PUSH) {
        if (memops_write(m, flag(c, pred, F_TAKEN), base + bytes, why, whylen) != 0)
            return -1;
        if (!p->producer && !ipc_same_gpu(c, pred) &&
            memops_write(m, flag(c, me, F_TAKEN_MINE), base + bytes, why, whylen) != 0)
            return -1;
    }
    /* The successor's may be, once it has reached this broadcast. */
    if (p->out == HOP_PUSH && memops_wait(m, flag(c, me, F_TAKEN), base + bytes, why, whylen) != 0)
        return -1;
    struct staging st = { c, m, p->sm_out, p->mine, bytes, base, 0,
                          p->out == HOP_STAGED ? (bytes + sch - 1) / sch : 0 };
    /* In the steps of the data's arrival here (the root's is all there). */
    size_t step = step_of(c, p->consumer ? p->in : p->out, bytes);
    for (size_t off = 0; off < bytes; off += step) {
        size_t len = bytes - off < step ? bytes - off : step;
        if (enqueue_step(c, j, p, &st, overlap, off, len, s, why, whylen) != 0)
            return -1;
    }
    /* The caller may reuse its buffer once the successor has read it all. */
    if ((p->out == HOP_PULL || p->out == HOP_STAGED) &&
        memops_wait(m, flag(c, me, F_TAKEN), base + bytes, why, whylen) != 0)
        return -1;
    return 0;
}

const char *const ipc_hop_names[IPC_HOPS] = { "none", "push", "pull", "staged" };

void ipc_get_stats(struct ipc_comm *c, struct ipc_stats *st)
{
    st->first = atomic_load_explicit(&c->bc.stat_first, memory_order_relaxed);
    for (int h = 0; h < IPC_HOPS; h++) {
        st->in[h] = atomic_load_explicit(&c->bc.stat_in[h], memory_order_relaxed);
        st->out[h] = atomic_load_explicit(&c->bc.stat_out[h], memory_order_relaxed);
    }
    st->sm = atomic_load_explicit(&c->bc.stat_sm, memory_order_relaxed);
    st->ce = atomic_load_explicit(&c->bc.stat_ce, memory_order_relaxed);
    st->copy_note = c->kern.note;
    st->vmm_sent = atomic_load_explicit(&c->vmm.sent, memory_order_relaxed);
    st->vmm_mapped = atomic_load_explicit(&c->vmm.mapped, memory_order_relaxed);
    st->vmm_note = c->vmm.note;
}

static void count(struct ipc_comm *c, const struct ipc_bcast_args *j, const struct hop_plan *p)
{
    ipc_trace(c, "b %llu op %llu base %llu bytes %zu root %d: in %s%s, out %s%s", (unsigned long long)j->b,
              (unsigned long long)j->op, (unsigned long long)j->base, j->bytes, j->root, ipc_hop_names[p->in],
              p->first_in ? " (first)" : "", ipc_hop_names[p->out], p->first_out ? " (first)" : "");
    if (!j->bytes)
        return;
    atomic_fetch_add_explicit(&c->bc.stat_in[p->in], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->bc.stat_out[p->out], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->bc.stat_first, (unsigned)p->first_in + (unsigned)p->first_out, memory_order_relaxed);
}

int ipc_chain_bcast(struct ipc_comm *c, const struct ipc_bcast_args *j, CUstream s, int *rank, int *off, uint64_t *val,
                    char *why, size_t whylen)
{
    struct hop_plan p;
    uint64_t t0 = ipc_trace_clock();
    ipc_trace(c, "b %llu: enter", (unsigned long long)j->b);
    if (plan_hops(c, j, &p, why, whylen) != 0)
        return -1;
    uint64_t t1 = ipc_trace_clock();
    count(c, j, &p);
    if (j->bytes)
        plan_copies(c, j, &p);
    struct memops m;
    memops_init(&m, c, s);
    if (enqueue(c, j, &p, s, &m, why, whylen) != 0)
        return -1;
    ipc_trace(c, "b %llu: planned in %llu us, enqueued in %llu us", (unsigned long long)j->b,
              (unsigned long long)(t1 - t0), (unsigned long long)(ipc_trace_clock() - t1));
    *off = -1; /* nothing moved: the fence before it stands */
    *rank = c->rank;
    if (!j->bytes)
        return memops_flush(&m, why, whylen);
    if (!p.producer && p.in == HOP_PUSH) {
        /* Its last counter says it: nothing more on the critical path. */
        *off = F_AVAIL;
        *val = j->base + j->bytes;
    } else if (!p.consumer && p.out == HOP_PUSH && ipc_same_gpu(c, succ_of(c))) {
        /* A root pushing on one GPU: the AVAIL it wrote last says it ("One GPU"). */
        *rank = succ_of(c);
        *off = F_AVAIL;
        *val = j->base + j->bytes;
    } else {
        if (memops_write(&m, flag(c, c->rank, F_DONE), j->op + 1, why, whylen) != 0)
            return -1;
        *off = F_DONE;
        *val = j->op + 1;
    }
    return memops_flush(&m, why, whylen);
}
