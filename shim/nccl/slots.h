/*
 * Forwarding slots (docs/design.md, "One forwarding table per library"): each
 * slot is bound to one real libnccl and holds its function pointers, looked up
 * by name so that an older NCCL simply lacks the newer entries.  Slot 0 serves
 * callers that reach the shim's exported symbols (symbol interposition); the
 * other slots serve handles from dlopen of other libnccl files, through dlsym.
 * Everything above calls the real NCCL through a slot (shim_real); binding is
 * in slots.c.
 */
#ifndef NCCLSHIM_SLOTS_H
#define NCCLSHIM_SLOTS_H

#include "nccl_api.h"

#include <limits.h>
#include <stdatomic.h>

#define SHIM_NSLOTS 4
/* The newest NCCL whose every function nccl_api.def holds: 2.32.x (the
 * table is taken from 2.32.3; a patch release adds no function). */
#define SHIM_TABLE_NEWEST 23299


struct shim_slot {
    _Atomic(void *) fn[FN_COUNT];   /* real functions; NULL until resolved or if absent */
    atomic_int state;               /* SLOT_FREE, SLOT_BOUND */
    int index;
    /* Written before state becomes SLOT_BOUND, read-only afterwards. */
    const void *base;               /* load address of the real library: its identity */
    void *handle;                   /* our reference (dlopen RTLD_NOLOAD): keeps it mapped */
    int version;                    /* ncclGetVersion, 0 if unknown */
    char path[PATH_MAX];
};
enum { SLOT_FREE = 0, SLOT_CLAIMED, SLOT_BOUND };

extern struct shim_slot g_slots[SHIM_NSLOTS];

/* Slow path of every wrapper: the real function for `fn` in `slot`, binding the
 * slot first if needed; NULL if the real library lacks it (reported once). */
void *shim_resolve(struct shim_slot *slot, enum fn_index fn, const void *caller);

/* The real function for `fn` in `slot`: the bound pointer (one atomic load),
 * else the slow path of shim_resolve.  For the shim's own out-of-line callers
 * (the wrappers inline the same two steps). */
static inline void *shim_real(struct shim_slot *slot, enum fn_index fn, const void *caller)
{
    void *f = atomic_load_explicit(&slot->fn[fn], memory_order_acquire);
    return f ? f : shim_resolve(slot, fn, caller);
}

/* The slot bound to the library loaded at `base`, binding a free one to it
 * (`path` names it) if none is; NULL if every slot is taken. */
/* fork(): the claim lock is taken before and released or reset after (shim_main.c). */
void shim_slots_lock_for_fork(void);
void shim_slots_unlock_after_fork(void);
void shim_slots_after_fork_child(void);
struct shim_slot *shim_slot_for_library(const void *base, const char *path, const char *how);

#endif
