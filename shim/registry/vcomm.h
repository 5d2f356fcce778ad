/*
 * Shim-only communicators (actions drop and ipc): every NCCL function that takes a
 * communicator has an answer here, so that a shim handle never reaches the
 * real NCCL.  shim/registry/vcomm.c answers the ones that have a meaningful answer,
 * shim/registry/vcomm_ops.c the data operations (one dispatch); shim/registry/vcomm_default.c
 * refuses the rest with ncclInvalidUsage and a record.
 */
#ifndef NCCLSHIM_VCOMM_H
#define NCCLSHIM_VCOMM_H

#include "comm.h"
#include "nccl_decls.h"

#define NCCL_COMM(ret, name, params, args) ret vcomm_##name params;
#define NCCL_DATA(name, op, params, args, count, dtype) ncclResult_t vcomm_##name params;
#include "nccl_api.def"
/* (a LIFE function in the table: lifecycle.c passes shim-only handles here) */
ncclResult_t vcomm_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

/* A data operation on a dropped communicator: counted with its bytes, then
 * success at once; no buffer is touched (the data does not arrive: records
 * and inspect say so).  On an ipc one, the operations shim/ipc/ipc.c has not
 * (all but Broadcast, Bcast and AllReduce) are refused. */
ncclResult_t vcomm_data(struct shim_comm *h, enum op_kind op, size_t count, ncclDataType_t dtype, const char *fn);

/* An operation on a suspended communicator (reported once per function). */
ncclResult_t vcomm_refuse_suspended(struct shim_comm *h, const char *fn);

/* The refusal of the functions vcomm.c does not answer. */
ncclResult_t vcomm_unsupported(struct shim_comm *h, const char *fn);

/* A call on a shim-only handle already destroyed: reported once per
 * function, ncclInvalidArgument (what NCCL says of a communicator it does
 * not know); never forwarded. */
ncclResult_t vcomm_stale(const char *fn);

#endif
