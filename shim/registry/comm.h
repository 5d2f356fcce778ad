/*
 * What the shim knows of each communicator the application holds, and how it
 * finds it from the handle the application passes (docs/design.md, "NCCL's
 * own communicator").
 *
 * A communicator NCCL made (passthrough, socket, anything made before the
 * shim or with NCCLSHIM_MODE=off) reaches the application as NCCL's own
 * ncclComm_t, unchanged: no pointer of the shim ever reaches NCCL, whatever
 * function of whatever NCCL release the application calls.  The shim finds
 * its state (struct shim_comm) in a table keyed by that pointer, read without
 * a lock (shim_comm_find).  A communicator that exists only in the shim
 * (drop, ipc) has a shim handle: the address of its struct shim_comm in a
 * static arena of this library, recognised by its address alone
 * (shim_is_vcomm), so that no byte of NCCL's memory is ever read to tell the
 * two apart.
 */
#ifndef NCCLSHIM_COMM_H
#define NCCLSHIM_COMM_H

#include "dtype.h"
#include "nccl_abi.h"

#include <stdatomic.h>
#include <stdint.h>

/* A live shim-only handle says so in its first word; 0 once destroyed. */
#define SHIM_VCOMM_MAGIC 0x6e63636c76636f6dULL /* "ncclvcom" */
/* Shim-only communicators alive at once in a process (each one is a
 * weight-update communicator: a handful).  Beyond, round 2 of the rendezvous
 * fails on this rank and every rank passes through, with the reason. */
#define SHIM_MAX_VCOMMS 512

enum op_kind {
    OP_ALLREDUCE, OP_BROADCAST, OP_BCAST, OP_REDUCE, OP_REDUCESCATTER, OP_ALLGATHER,
    OP_ALLTOALL, OP_GATHER, OP_SCATTER, OP_SEND, OP_RECV, OP_PUTSIGNAL, OP_COUNT
};
extern const char *const op_kind_names[OP_COUNT];

struct shim_slot;

struct shim_comm {
    _Atomic uint64_t magic;             /* shim-only: SHIM_VCOMM_MAGIC while alive; else 0 */
    ncclComm_t real;                    /* NCCL's communicator (the table's key); NULL for a shim-only one */
    struct shim_slot *slot;             /* the library it was created in */
    /* Traffic, updated on the hot path (see shim_count). */
    struct { atomic_uint_fast64_t count, bytes; } ops[OP_COUNT];
    /* Identity, written once before the communicator is published. */
    int rank, nranks, cuda_device;
    uint64_t id_hash;
    double created_ts;
    char group[160];
    int action;                         /* enum action carried out (policy/decide.h) */
    int purpose;                        /* enum purpose it was decided for */
    int unprotected;                    /* a weight-update communicator left to NCCL not by policy */
    uint64_t decision_id;               /* the root's decision, 0 if none */
    void *net_config;                   /* action socket or frugal: the config NCCL was given, freed with it */
    struct ipc_comm *ipc;               /* action ipc: the transport (shim-only), freed with it */
    atomic_uint splits, shrinks, grows; /* to name children: <group>/split<N> */
    atomic_int suspended;               /* shim-only: between ncclCommSuspend and ncclCommResume */
    atomic_int init_pending;            /* a non-blocking init returned ncclInProgress; its end not yet seen */
    atomic_uint devcomms;               /* ncclDevCommCreate calls on it (the device API: comm_end says it) */
    struct shim_comm *next_free;        /* recycled structs (comm.c), under its lock */
};

/* The arena of shim-only handles: an application's handle of one is an
 * address inside it.  Hidden, so that the check is one address computation
 * relative to this library, no load. */
extern __attribute__((visibility("hidden"))) struct shim_comm g_vcomms[SHIM_MAX_VCOMMS];

static inline int shim_is_vcomm(const void *comm)
{
    return (uintptr_t)comm - (uintptr_t)g_vcomms < sizeof(g_vcomms);
}

/* A live shim-only communicator for `comm`, or NULL (not one, or destroyed). */
static inline struct shim_comm *shim_vcomm_of(const void *comm)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    return shim_is_vcomm(comm) && atomic_load_explicit(&h->magic, memory_order_acquire) ==
                                      SHIM_VCOMM_MAGIC ? h : NULL;
}

/*
 * The table of the communicators NCCL made, keyed by NCCL's pointer: open
 * addressing, linear probing, at most half full.  Readers take no lock: the
 * table pointer and each entry are atomics (plain loads on x86), a key is
 * published after its value, and a table replaced by a larger one is kept,
 * never freed, so that a reader still scanning it reads valid memory (a
 * retired table is 16 bytes a slot: at worst about 64 bytes per destroyed
 * communicator over a process's life; docs/design.md).  Writers (creation,
 * destroy) hold comm.c's lock.
 */
#define COMM_KEY_EMPTY 0
#define COMM_KEY_GONE 1                 /* a removed entry: probing goes on past it */
struct comm_entry {
    _Atomic uintptr_t key;
    _Atomic(struct shim_comm *) val;
};
struct comm_table {
    size_t mask;                        /* slots - 1 (slots: a power of two, at most 2^24) */
    struct comm_entry e[];
};
extern __attribute__((visibility("hidden"))) _Atomic(struct comm_table *) g_comm_table;

/* Where a key's probe starts: Fibonacci hashing, the product's high bits by a
 * constant shift (a variable one would take %cl, the wrappers' 4th argument,
 * and cost them a saved register), then masked. */
static inline size_t comm_slot_of(uintptr_t k, size_t mask)
{
    return (size_t)((k * 0x9e3779b97f4a7c15ull) >> 40) & mask;
}

/* The state of a communicator NCCL made, from NCCL's pointer; NULL if the shim
 * did not see it made.  Lock-free: the hot path of every data operation. */
static inline struct shim_comm *shim_comm_find(const void *comm)
{
    struct comm_table *t = atomic_load_explicit(&g_comm_table, memory_order_acquire);
    if (!t)
        return NULL;
    uintptr_t k = (uintptr_t)comm;
    size_t i = comm_slot_of(k, t->mask);
    for (;;) {
        uintptr_t key = atomic_load_explicit(&t->e[i].key, memory_order_acquire);
        /* Acquire on the value too: a key NCCL reused gets a new value under the
         * same key (shim_comm_register), and the key's acquire does not order that
         * value's struct.  A plain load on x86; without it an aarch64 reader may
         * see the new pointer and the struct's old contents. */
        if (key == k)
            return atomic_load_explicit(&t->e[i].val, memory_order_acquire);
        if (key == COMM_KEY_EMPTY)
            return NULL;
        i = (i + 1) & t->mask;
    }
}

/*
 * The last communicator this thread moved data on, so that a loop of calls on
 * one communicator (the common case: a training step's all-reduces, a refit's
 * broadcasts) skips the probe and the shim-only handle test (measured:
 * docs/benchmarks.md, "Cost of a forwarded call").  Valid only while the table
 * has not changed since it was looked up: every change of the table (an
 * insert, a removal, a stale entry replaced, the fork child's reset) bumps
 * g_comm_gen after it, under the table's lock, before the creation or destroy
 * returns.  So a call that comes after a destroy (and NCCL handing the same
 * address to a new communicator: the ABA case) sees the new generation and
 * looks again; only a call racing with its own communicator's destroy (the
 * application's error) can count into the old struct, which is recycled,
 * never freed, as for the table itself.  A shim-only handle is never stored:
 * a hit proves the handle is NCCL's.  A pointer the table does not hold (a
 * communicator made before the shim) is stored too, as g_comm_unknown, whose
 * counters nobody reads.  Initial-exec TLS: two instructions to reach it
 * (the shim is preloaded, so its TLS is static).
 */
struct comm_last {
    uintptr_t key;                      /* the application's pointer */
    uint64_t gen;                       /* g_comm_gen when it was looked up */
    struct shim_comm *h;                /* what the table held then (never NULL once set) */
};
extern __thread __attribute__((tls_model("initial-exec"), visibility("hidden"))) struct comm_last t_comm_last;
/* Starts at 1: a thread's zeroed t_comm_last never matches. */
extern __attribute__((visibility("hidden"))) _Atomic uint64_t g_comm_gen;
extern __attribute__((visibility("hidden"))) struct shim_comm g_comm_unknown;

/* Whether `comm` is this thread's last communicator and the table has not
 * changed since: then t_comm_last.h is its state (g_comm_unknown if the table
 * had none); else shim_comm_lookup.  Relaxed: a generation bumped before the
 * handle reached this thread is seen (coherence), and one bumped concurrently
 * is the race above.  (A test, not the pointer or NULL: the wrappers would
 * test that pointer once more.) */
static inline int shim_comm_is_last(const void *comm)
{
    return t_comm_last.key == (uintptr_t)comm &&
           t_comm_last.gen == atomic_load_explicit(&g_comm_gen, memory_order_relaxed);
}

/* The state of `comm`, a pointer that is not a shim-only handle, from the
 * table, remembered as this thread's last: never NULL (g_comm_unknown). */
struct shim_comm *shim_comm_lookup(const void *comm);

/*
 * Relaxed load + store, not a locked read-modify-write: NCCL does not allow one
 * communicator to be used by several threads at once, so its counters have
 * one writer at a time, and a lock prefix would cost ~10 ns per call (measured:
 * docs/benchmarks.md).  An application that breaks NCCL's rule may lose a
 * count, never corrupt one; readers (destroy, exit) see whole values.
 */
static inline void shim_counter_add(atomic_uint_fast64_t *c, uint64_t n)
{
#if defined(__x86_64__)
    /* The same as the load + store below, in one unlocked instruction: an
     * aligned 8-byte store is whole to any reader on x86-64.  The compiler
     * makes a relaxed load + store of two registers, and the wrappers had to
     * save two of theirs for it (measured: docs/benchmarks.md). */
    __asm__("addq %1, %0" : "+m"(*(uint64_t *)c) : "er"(n));
#else
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
#endif
}

static inline void shim_count(struct shim_comm *h, enum op_kind op, size_t count, ncclDataType_t t)
{
    shim_counter_add(&h->ops[op].count, 1);
    shim_counter_add(&h->ops[op].bytes, count * shim_dtype_size(t));
}

/* State for NCCL's `real`, or a shim-only communicator when `real` is NULL
 * (NULL when memory or the arena is exhausted).  Not yet findable. */
struct shim_comm *shim_comm_new(ncclComm_t real, struct shim_slot *slot);
/* Makes `h` findable by the pointer the application holds (NCCL's, or the
 * shim-only handle).  A stale entry for the same NCCL pointer (NCCL reused a
 * freed address) is replaced.  -1 if the table cannot grow (memory): `h` is
 * then not findable, and its traffic not counted. */
int shim_comm_register(struct shim_comm *h);
/* Removes `h` if it is still what its key finds; 0 if it was not (a double
 * destroy, or the key already names a newer communicator). */
int shim_comm_unregister(struct shim_comm *h);
/* Gives `h` back (to the arena, or to the recycled list). */
void shim_comm_free(struct shim_comm *h);
/* The pointer the application holds for `h`. */
static inline ncclComm_t shim_comm_handle(struct shim_comm *h)
{
    return h->real ? h->real : (ncclComm_t)h;
}
/* The application creates an NCCL device communicator on `comm` (NCCL's):
 * counted, so that the records show a redirected communicator whose data the
 * device API may move outside the redirect (docs/records.md, "devcomms"). */
void shim_comm_count_devcomm(const void *comm);
/* Calls `each` on every communicator the table holds; returns how many were
 * created in this process.  `locked`: under the table's lock (exit(): none
 * is freed meanwhile).  Else lock-free and async-signal-safe, for _exit and a
 * fatal signal, where no lock may be waited for (the thread that holds it may
 * be the one interrupted): the table is read as the wrappers read it, and its
 * structs are never freed. */
unsigned long shim_comm_each_live(int locked, void (*each)(struct shim_comm *h, void *arg), void *arg);
void shim_comm_after_fork_child(void);
void shim_comm_lock_for_fork(void);
void shim_comm_unlock_after_fork(void);

#endif
