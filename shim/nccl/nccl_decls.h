/* Prototypes of the NCCL functions of nccl_api.def (the shim defines them in forward.c). */
#ifndef NCCLSHIM_NCCL_DECLS_H
#define NCCLSHIM_NCCL_DECLS_H

#include "nccl_abi.h"

#define NCCL_PLAIN(ret, name, params, args) ret name params;
#define NCCL_COMM(ret, name, params, args) ret name params;
#define NCCL_DATA(name, op, params, args, count, dtype) ncclResult_t name params;
#define NCCL_LIFE(ret, name, params, args) ret name params;
#define NCCL_VOID(name, params, args) void name params;
#include "nccl_api.def"

#endif
