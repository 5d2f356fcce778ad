/*
 * The shim's communicator handle: what the application holds instead of the
 * real ncclComm_t, so that every call on a communicator reaches the shim with
 * its counters at hand, without a table lookup on the hot path.
 */
#ifndef NCCLSHIM_COMM_H
#define NCCLSHIM_COMM_H

#include "nccl_abi.h"

#include <stdatomic.h>
#include <stdint.h>
#include <uthash.h>

/* A 64-bit value NCCL's own struct ncclComm never starts with (its startMagic differs). */
#define SHIM_COMM_MAGIC 0x6e63636c7368696dULL /* "ncclshim" */
/* A communicator that exists only in the shim (action drop): no NCCL behind
 * it.  A different magic, so that the wrappers' fast path (one compare against
 * SHIM_COMM_MAGIC) stays as it is and shim-only handles take the cold branch. */
#define SHIM_VCOMM_MAGIC 0x6e63636c76636f6dULL /* "ncclvcom" */

enum op_kind {
    OP_ALLREDUCE, OP_BROADCAST, OP_BCAST, OP_REDUCE, OP_REDUCESCATTER, OP_ALLGATHER,
    OP_ALLTOALL, OP_GATHER, OP_SCATTER, OP_SEND, OP_RECV, OP_COUNT
};
extern const char *const op_kind_names[OP_COUNT];

struct shim_slot;

struct shim_comm {
    uint64_t magic;                     /* SHIM_COMM_MAGIC or SHIM_VCOMM_MAGIC while alive, 0 once freed */
    ncclComm_t real;                    /* NCCL's communicator; NULL for a shim-only one */
    struct shim_slot *slot;             /* the library it was created in */
    /* Traffic, updated on the hot path (see shim_count). */
    struct { atomic_uint_fast64_t count, bytes; } ops[OP_COUNT];
    /* Identity, written once before the handle is published. */
    int rank, nranks, cuda_device;
    uint64_t id_hash;
    double created_ts;
    char group[160];
    int action;                         /* enum action carried out (policy/decide.h) */
    uint64_t decision_id;               /* the root's decision, 0 if none */
    void *net_config;                   /* action socket: the config NCCL was given, freed with the handle */
    struct ipc_comm *ipc;               /* action ipc: the transport (shim-only handle), freed with it */
    atomic_uint splits, shrinks;        /* to name children: <group>/split<N> */
    struct shim_comm *key;              /* == this handle: the registry key */
    UT_hash_handle hh;                  /* registry, under g_registry_lock */
};

/* The real communicator behind a handle the application passed (or the value
 * itself when it is not a shim handle: mode=off, or a comm made before the shim). */
static inline struct shim_comm *shim_comm_of(ncclComm_t comm)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    return (h && __builtin_expect(h->magic == SHIM_COMM_MAGIC, 1)) ? h : NULL;
}

/* A shim-only communicator (see SHIM_VCOMM_MAGIC), or NULL. */
static inline struct shim_comm *shim_vcomm_of(ncclComm_t comm)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    return (h && h->magic == SHIM_VCOMM_MAGIC) ? h : NULL;
}

/* Either kind of handle, or NULL. */
static inline struct shim_comm *shim_handle_of(ncclComm_t comm)
{
    struct shim_comm *h = (struct shim_comm *)comm;
    return (h && (h->magic == SHIM_COMM_MAGIC || h->magic == SHIM_VCOMM_MAGIC)) ? h : NULL;
}

static inline ncclComm_t shim_unwrap(ncclComm_t comm)
{
    struct shim_comm *h = shim_comm_of(comm);
    return h ? h->real : comm;
}

/* Size in bytes of an NCCL datatype; 0 for values NCCL does not define up to 15
 * (masked, not range-checked: the hot path stays branch-free, and NCCL itself
 * rejects a bad datatype). */
static inline size_t shim_dtype_size(ncclDataType_t t)
{
    static const unsigned char sizes[16] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };
    return sizes[(unsigned)t & 15];
}

/* The size of an NCCL datatype, 0 for anything that is not one (checked:
 * for the shim's own transports, which have no NCCL to reject it). */
static inline size_t shim_dtype_size_checked(ncclDataType_t t)
{
    return (unsigned)t < ncclNumTypes ? shim_dtype_size(t) : 0;
}

/*
 * Relaxed load + store, not a locked read-modify-write: NCCL does not allow one
 * communicator to be used by several threads at once, so its counters have
 * one writer at a time, and a lock prefix would cost ~10 ns per call (measured:
 * docs/benchmarks.md).  An application that breaks NCCL's rule may lose a
 * count, never corrupt one; readers (destroy, exit) see whole values.
 */
static inline void shim_count(struct shim_comm *h, enum op_kind op, size_t count, ncclDataType_t t)
{
    uint64_t n = atomic_load_explicit(&h->ops[op].count, memory_order_relaxed);
    uint64_t b = atomic_load_explicit(&h->ops[op].bytes, memory_order_relaxed);
    atomic_store_explicit(&h->ops[op].count, n + 1, memory_order_relaxed);
    atomic_store_explicit(&h->ops[op].bytes, b + count * shim_dtype_size(t), memory_order_relaxed);
}

/* Registry of live handles (for exit records).  All take g_registry_lock briefly. */
/* A handle for NCCL's `real`, or a shim-only one when `real` is NULL. */
struct shim_comm *shim_comm_new(ncclComm_t real, struct shim_slot *slot);
void shim_comm_register(struct shim_comm *h);
/* Removes from the registry; returns 0 if it was not there (a double destroy). */
int shim_comm_unregister(struct shim_comm *h);
void shim_comm_free(struct shim_comm *h);
/* Writes a comm_end record for `h`. */
void shim_comm_record_end(struct shim_comm *h, const char *how, int result);
/* At exit: comm_end records for every live handle, then the exit record. */
void shim_comm_record_exit(void);
void shim_comm_after_fork_child(void);
void shim_comm_lock_for_fork(void);
void shim_comm_unlock_after_fork(void);

#endif
