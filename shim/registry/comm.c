/*
 * What the shim knows of each communicator: allocation (recycled structs for
 * NCCL's communicators, the arena for shim-only ones) and the lock-free table
 * that finds them from the application's pointer.  Their records are built
 * in comm_record.c.
 */
#define _GNU_SOURCE
#include "comm.h"

#include "clock.h"
#include "slots.h"
#include "ipc.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const char *const op_kind_names[OP_COUNT] = {
    [OP_ALLREDUCE] = "AllReduce", [OP_BROADCAST] = "Broadcast", [OP_BCAST] = "Bcast",
    [OP_REDUCE] = "Reduce", [OP_REDUCESCATTER] = "ReduceScatter", [OP_ALLGATHER] = "AllGather",
    [OP_ALLTOALL] = "AlltoAll", [OP_GATHER] = "Gather", [OP_SCATTER] = "Scatter",
    [OP_SEND] = "Send", [OP_RECV] = "Recv", [OP_PUTSIGNAL] = "PutSignal",
};

/* The shim-only handles (comm.h).  A slot is taken while its magic is set;
 * taking and giving back happen under g_lock. */
struct shim_comm g_vcomms[SHIM_MAX_VCOMMS];

/* The table readers scan (comm.h); replaced, under g_lock, by a larger or
 * cleaner copy. */
_Atomic(struct comm_table *) g_comm_table;

/* comm.h, "The last communicator this thread moved data on". */
__thread __attribute__((tls_model("initial-exec"))) struct comm_last t_comm_last;
_Atomic uint64_t g_comm_gen = 1;
struct shim_comm g_comm_unknown;

struct shim_comm *shim_comm_lookup(const void *comm)
{
    /* The generation before the probe (acquire: the probe reads the table as
     * of this generation or later): a change during the probe leaves an
     * entry that never matches. */
    uint64_t gen = atomic_load_explicit(&g_comm_gen, memory_order_acquire);
    struct shim_comm *h = shim_comm_find(comm);
    if (!h)
        h = &g_comm_unknown;
    t_comm_last = (struct comm_last){ (uintptr_t)comm, gen, h };
    return h;
}

void shim_comm_count_devcomm(const void *comm)
{
    struct shim_comm *h = shim_comm_find(comm);
    if (h)
        atomic_fetch_add_explicit(&h->devcomms, 1, memory_order_relaxed);
}

/* After every change of the table, under g_lock (release: a thread that sees
 * the new generation sees the change). */
static void table_changed_locked(void)
{
    atomic_store_explicit(&g_comm_gen, atomic_load_explicit(&g_comm_gen, memory_order_relaxed) + 1,
                          memory_order_release);
}

/*
 * g_lock serialises every writer of the table, the arena and the recycled
 * list, and the counters below.  Held only around memory operations, never
 * around a call into NCCL or CUDA.
 */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t g_used, g_live;            /* entries not EMPTY; entries holding a communicator */
static unsigned long g_created;          /* communicators registered since the process began */
static struct shim_comm *g_free;         /* recycled structs (never given back to malloc) */
/* Replaced tables, kept so that a reader still in one reads valid memory. */
struct retired { struct retired *next; };
static struct retired *g_retired;

static size_t slots_of(const struct comm_table *t)
{
    return t ? t->mask + 1 : 0;
}

/* A table of `slots` (a power of two) holding every live entry of `old`. */
static struct comm_table *table_rebuilt(const struct comm_table *old, size_t slots)
{
    struct comm_table *t = calloc(1, sizeof(*t) + slots * sizeof(t->e[0]));
    if (!t)
        return NULL;
    t->mask = slots - 1;
    for (size_t i = 0; old && i <= old->mask; i++) {
        uintptr_t k = atomic_load_explicit(&old->e[i].key, memory_order_relaxed);
        if (k == COMM_KEY_EMPTY || k == COMM_KEY_GONE)
            continue;
        size_t j = comm_slot_of(k, t->mask);
        while (atomic_load_explicit(&t->e[j].key, memory_order_relaxed) != COMM_KEY_EMPTY)
            j = (j + 1) & t->mask;
        atomic_store_explicit(&t->e[j].val, atomic_load_explicit(&old->e[i].val, memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(&t->e[j].key, k, memory_order_relaxed);
    }
    return t;
}

/* Keeps a replaced table (its own memory holds the link). */
static void retire_locked(struct comm_table *t)
{
    if (!t)
        return;
    struct retired *r = (struct retired *)t;
    r->next = g_retired;
    g_retired = r;
}

/* Room for one more entry, at most half full (so that a probe always meets
 * an EMPTY slot); under g_lock.  -1 on out of memory. */
static int table_reserve_locked(void)
{
    struct comm_table *t = atomic_load_explicit(&g_comm_table, memory_order_relaxed);
    if (t && 2 * (g_used + 1) <= slots_of(t))
        return 0;
    size_t slots = 64;
    while (slots < 4 * (g_live + 1) && slots < ((size_t)1 << 24))
        slots *= 2;
    if (2 * (g_live + 1) > slots)
        return -1; /* 8 million communicators: never */
    struct comm_table *n = table_rebuilt(t, slots);
    if (!n)
        return -1;
    /* The new table is complete before readers can see it (release). */
    atomic_store_explicit(&g_comm_table, n, memory_order_release);
    g_used = g_live;
    retire_locked(t);
    return 0;
}

static void *comm_key(const struct shim_comm *h)
{
    return h->real ? (void *)h->real : (void *)h;
}

struct shim_comm *shim_comm_new(ncclComm_t real, struct shim_slot *slot)
{
    struct shim_comm *h = NULL;
    pthread_mutex_lock(&g_lock);
    if (real) {
        h = g_free;
        if (h)
            g_free = h->next_free;
    } else {
        for (size_t i = 0; i < SHIM_MAX_VCOMMS && !h; i++)
            if (!atomic_load_explicit(&g_vcomms[i].magic, memory_order_relaxed))
                h = &g_vcomms[i];
        if (h) /* taken now; alive (findable by the wrappers) only once published */
            atomic_store_explicit(&h->magic, SHIM_VCOMM_MAGIC, memory_order_relaxed);
    }
    pthread_mutex_unlock(&g_lock);
    if (real && !h)
        h = malloc(sizeof(*h));
    if (!h)
        return NULL;
    /* Everything but the magic: a shim-only slot must stay taken (its magic
     * set) while it is cleared, or another creation could take it too. */
    _Static_assert(offsetof(struct shim_comm, magic) == 0, "the magic comes first");
    memset((char *)h + sizeof(h->magic), 0, sizeof(*h) - sizeof(h->magic));
    if (real)
        atomic_store_explicit(&h->magic, 0, memory_order_relaxed);
    h->real = real;
    h->slot = slot;
    h->rank = h->nranks = h->cuda_device = -1;
    h->created_ts = shim_now();
    return h;
}

int shim_comm_register(struct shim_comm *h)
{
    uintptr_t k = (uintptr_t)comm_key(h);
    pthread_mutex_lock(&g_lock);
    if (table_reserve_locked() != 0) {
        pthread_mutex_unlock(&g_lock);
        return -1;
    }
    struct comm_table *t = atomic_load_explicit(&g_comm_table, memory_order_relaxed);
    size_t i = comm_slot_of(k, t->mask), gone = SIZE_MAX;
    for (;; i = (i + 1) & t->mask) {
        uintptr_t key = atomic_load_explicit(&t->e[i].key, memory_order_relaxed);
        if (key == k) { /* NCCL reused the address of a communicator whose destroy has not unregistered yet */
            atomic_store_explicit(&t->e[i].val, h, memory_order_release);
            break;
        }
        if (key == COMM_KEY_GONE && gone == SIZE_MAX)
            gone = i;
        if (key == COMM_KEY_EMPTY) {
            if (gone != SIZE_MAX)
                i = gone;
            else
                g_used++;
            /* The value first: a reader that sees the key (acquire) sees it. */
            atomic_store_explicit(&t->e[i].val, h, memory_order_relaxed);
            atomic_store_explicit(&t->e[i].key, k, memory_order_release);
            g_live++;
            break;
        }
    }
    g_created++;
    table_changed_locked();
    pthread_mutex_unlock(&g_lock);
    return 0;
}

int shim_comm_unregister(struct shim_comm *h)
{
    uintptr_t k = (uintptr_t)comm_key(h);
    int removed = 0;
    pthread_mutex_lock(&g_lock);
    struct comm_table *t = atomic_load_explicit(&g_comm_table, memory_order_relaxed);
    if (t) {
        size_t i = comm_slot_of(k, t->mask);
        for (;; i = (i + 1) & t->mask) {
            uintptr_t key = atomic_load_explicit(&t->e[i].key, memory_order_relaxed);
            if (key == COMM_KEY_EMPTY)
                break;
            if (key == k) {
                if (atomic_load_explicit(&t->e[i].val, memory_order_relaxed) == h) {
                    /* The key first: a reader that still sees it finds the value, or NULL. */
                    atomic_store_explicit(&t->e[i].key, COMM_KEY_GONE, memory_order_release);
                    atomic_store_explicit(&t->e[i].val, NULL, memory_order_relaxed);
                    g_live--;
                    removed = 1;
                    table_changed_locked();
                }
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_lock);
    return removed;
}

void shim_comm_free(struct shim_comm *h)
{
    free(h->net_config);
    h->net_config = NULL;
    ipc_free(h->ipc);
    h->ipc = NULL;
    pthread_mutex_lock(&g_lock);
    if (h->real) {
        /* Recycled, not freed: a call that races with its communicator's
         * destroy (the application's error) then at worst miscounts. */
        h->next_free = g_free;
        g_free = h;
    } else {
        atomic_store_explicit(&h->magic, 0, memory_order_release); /* a stale handle is refused from now on */
    }
    pthread_mutex_unlock(&g_lock);
}

unsigned long shim_comm_each_live(int locked, void (*each)(struct shim_comm *h, void *arg), void *arg)
{
    if (locked)
        pthread_mutex_lock(&g_lock);
    struct comm_table *t = atomic_load_explicit(&g_comm_table, memory_order_acquire);
    for (size_t i = 0; t && i <= t->mask; i++) {
        if (atomic_load_explicit(&t->e[i].key, memory_order_acquire) <= COMM_KEY_GONE)
            continue;
        struct shim_comm *h = atomic_load_explicit(&t->e[i].val, memory_order_acquire); /* see shim_comm_find */
        if (h)
            each(h, arg);
    }
    unsigned long created = g_created;
    if (locked)
        pthread_mutex_unlock(&g_lock);
    return created;
}

void shim_comm_lock_for_fork(void)
{
    pthread_mutex_lock(&g_lock);
}

void shim_comm_unlock_after_fork(void)
{
    pthread_mutex_unlock(&g_lock);
}

void shim_comm_after_fork_child(void)
{
    /* NCCL communicators do not survive fork: the child starts with none.  The
     * parent's structs stay allocated (the child may still hold pointers); a
     * shim-only handle the child still holds is refused as destroyed. */
    retire_locked(atomic_load_explicit(&g_comm_table, memory_order_relaxed));
    atomic_store_explicit(&g_comm_table, NULL, memory_order_relaxed);
    g_used = g_live = 0;
    g_created = 0;
    table_changed_locked();
    for (size_t i = 0; i < SHIM_MAX_VCOMMS; i++)
        atomic_store_explicit(&g_vcomms[i].magic, 0, memory_order_relaxed);
    pthread_mutex_init(&g_lock, NULL);
}
