/*
 * The default answer of a shim-only communicator (action drop) to every NCCL
 * function that takes one: refused with ncclInvalidUsage and a record naming
 * the function.  Weak, generated from nccl_api.def so that a function added to
 * the table can never reach NCCL with a shim-only handle; shim/registry/vcomm.c
 * overrides the ones that have a meaningful answer.
 */
#include "vcomm.h"

/* The refusal does not look at the arguments. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define NCCL_COMM(ret, name, params, args)                                                         \
    __attribute__((weak)) ret vcomm_##name params                                                  \
    {                                                                                              \
        return _Generic((ret)0, const char *: "ncclshim: not supported on a dropped communicator", \
                        default: vcomm_unsupported((struct shim_comm *)comm, #name));              \
    }
/* (each has its answer in vcomm.c: no error can be returned for them) */
#define NCCL_COMM_VALUE(ret, name, params, args, failed)
#define NCCL_DATA(name, op, params, args, count, dtype)                                            \
    __attribute__((weak)) ncclResult_t vcomm_##name params                                         \
    {                                                                                              \
        return vcomm_data((struct shim_comm *)comm, op, count, dtype, #name);                      \
    }
#include "nccl_api.def"
