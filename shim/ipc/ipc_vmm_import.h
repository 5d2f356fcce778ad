/*
 * What shim/ipc/ipc_vmm_import.c offers: a neighbour's cuMemCreate pieces
 * mapped here, into a range mirroring its own, so that a buffer over several
 * pieces is one copy.
 */
#ifndef NCCLSHIM_IPC_VMM_IMPORT_H
#define NCCLSHIM_IPC_VMM_IMPORT_H

#include "ipc_vmm_state.h"

#include <stddef.h>

/* Under qlock: maps rank r's described memory here, at *at: 0, or -1 with
 * the reason. */
int ipc_vmm_map(struct ipc_comm *c, int r, const struct ipc_desc *d, size_t bytes, CUdeviceptr *at, char *why,
                size_t whylen);
/* The reaper's turn and destroy's: reads a neighbour's messages on link l
 * (waiting up to wait_ms), and unmaps a piece. */
int vmm_read_msg(struct ipc_comm *c, struct link *l, int wait_ms, char *why, size_t whylen);
void vmm_unmap_piece(struct ipc_comm *c, struct piece *p);

#endif
