/*
 * The wrappers: every function of nccl_api.def, once per forwarding slot.
 * Slot 0's wrappers are the exported NCCL symbols (and their pnccl aliases);
 * the others are reached only through dlsym (shim/interpose/dlsym.c).
 */
#include "forward.h"

#include "comm.h"
#include "lifecycle.h"
#include "vcomm.h"
#include "group.h"

#include <stdint.h>
#include <string.h>

/* What a wrapper returns when the real library lacks the function (shim_resolve
 * has reported it): an error, never a crash. */
static inline ncclResult_t missing_result(void) { return ncclInternalError; }
static inline const char *missing_string(void)
{
    return "ncclshim: this function is not in the loaded NCCL library";
}
#define MISSING(ret) _Generic((ret)0, const char *: missing_string, default: missing_result)()
/* What a wrapper returns for a shim-only handle already destroyed (reported by
 * vcomm_stale): what NCCL returns for a communicator it does not know. */
static inline const char *stale_string(const char *fn)
{
    vcomm_stale(fn);
    return "ncclshim: invalid communicator (a shim-only communicator already destroyed)";
}
#define STALE(ret, fn) _Generic((ret)0, const char *: stale_string, default: vcomm_stale)(fn)

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#define SLOT_INDEX 0
#define SLOT_VISIBILITY __attribute__((visibility("default")))
#define WNAME(name) name
#define SLOT_TABLE slot0_table
#include "wrappers.inc"
#undef SLOT_INDEX
#undef SLOT_VISIBILITY
#undef WNAME
#undef SLOT_TABLE

#define SLOT_VISIBILITY static
#define SLOT_INDEX 1
#define WNAME(name) CAT(s1_, name)
#define SLOT_TABLE slot1_table
#include "wrappers.inc"
#undef SLOT_INDEX
#undef WNAME
#undef SLOT_TABLE

#define SLOT_INDEX 2
#define WNAME(name) CAT(s2_, name)
#define SLOT_TABLE slot2_table
#include "wrappers.inc"
#undef SLOT_INDEX
#undef WNAME
#undef SLOT_TABLE

#define SLOT_INDEX 3
#define WNAME(name) CAT(s3_, name)
#define SLOT_TABLE slot3_table
#include "wrappers.inc"
#undef SLOT_INDEX
#undef WNAME
#undef SLOT_TABLE
#undef SLOT_VISIBILITY

_Static_assert(SHIM_NSLOTS == 4, "forward.c instantiates exactly SHIM_NSLOTS slots");

static void *const *const g_wrapper_tables[SHIM_NSLOTS] = {
    slot0_table, slot1_table, slot2_table, slot3_table,
};

/* NCCL exports every function twice: nccl<Name> and the profiling alias pnccl<Name>. */
#define ALIAS(name) extern __typeof(name) p##name __attribute__((alias(#name), visibility("default")));
#define NCCL_PLAIN(ret, name, params, args) ALIAS(name)
#define NCCL_COMM(ret, name, params, args) ALIAS(name)
#define NCCL_DATA(name, op, params, args, count, dtype) ALIAS(name)
#define NCCL_LIFE(ret, name, params, args) ALIAS(name)
#define NCCL_VOID(name, params, args) ALIAS(name)
#include "nccl_api.def"

void *shim_wrapper(const struct shim_slot *slot, enum fn_index fn)
{
    return g_wrapper_tables[slot->index][fn];
}
