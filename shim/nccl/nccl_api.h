/*
 * The NCCL API table (nccl_api.def) as an index and names: what every layer
 * of the shim names a function by.  Defined in shim/nccl/nccl_api.c.
 */
#ifndef NCCLSHIM_NCCL_API_H
#define NCCLSHIM_NCCL_API_H

#include "nccl_abi.h"

enum fn_index {
#define NCCL_PLAIN(ret, name, params, args) FN_##name,
#define NCCL_COMM(ret, name, params, args) FN_##name,
#define NCCL_DATA(name, op, params, args, count, dtype) FN_##name,
#define NCCL_LIFE(ret, name, params, args) FN_##name,
#define NCCL_VOID(name, params, args) FN_##name,
#include "nccl_api.def"
    FN_COUNT
};

extern const char *const shim_fn_names[FN_COUNT];

/* The table index of an NCCL function name ("nccl..." or "pnccl..."), or -1. */
__attribute__((no_sanitize("address", "undefined"))) int shim_fn_lookup(const char *name);

#endif
