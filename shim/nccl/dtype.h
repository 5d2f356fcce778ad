/*
 * Sizes of NCCL's datatypes: for the traffic counters of every forwarded call
 * (comm.h) and for the shim's own transports (ipc, dropped communicators).
 */
#ifndef NCCLSHIM_DTYPE_H
#define NCCLSHIM_DTYPE_H

#include "nccl_abi.h"

#include <stddef.h>

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

#endif
