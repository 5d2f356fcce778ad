/*
 * Where communicators are created, named, recorded and torn down: the
 * wrappers of the NCCL_LIFE functions of nccl_api.def.  Each takes the slot
 * its caller reached and the caller's return address (the evidence of who
 * called), then the NCCL arguments.
 */
#ifndef NCCLSHIM_LIFECYCLE_H
#define NCCLSHIM_LIFECYCLE_H

#include "slots.h"
#include "nccl_decls.h"

#define SHIM_UNPACK(...) __VA_ARGS__
#define NCCL_LIFE(ret, name, params, args) \
    ret life_##name(struct shim_slot *slot, const void *caller, SHIM_UNPACK params);
#include "nccl_api.def"

#endif
