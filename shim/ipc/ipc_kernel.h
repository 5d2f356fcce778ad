/*
 * What shim/ipc/ipc_kernel.c offers: the copy kernel, for hops between two
 * processes on one GPU, where a copy on the SMs beats the copy engines.
 */
#ifndef NCCLSHIM_IPC_KERNEL_H
#define NCCLSHIM_IPC_KERNEL_H

#include "ipc_comm.h"

#include <stddef.h>

/* ipc_kernel_load: 0, or -1 with the reason, also kept for the records
 * (ipc_get_stats' copy_note: copies then stay on copy engines);
 * ipc_kernel_usable: whether a copy between this rank and rank r at dst and
 * src goes to the kernel (same device, kernel loaded, both 16-byte
 * aligned); ipc_kernel_copy enqueues it on s. */
int ipc_kernel_load(struct ipc_comm *c, char *why, size_t whylen);
void ipc_kernel_unload(struct ipc_comm *c);
int ipc_kernel_usable(const struct ipc_comm *c, int r, CUdeviceptr dst, CUdeviceptr src);
CUresult ipc_kernel_copy(const struct ipc_comm *c, CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream s);

#endif
