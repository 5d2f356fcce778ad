/*
 * What shim/ipc/ipc_maps.c offers: the map cache, peers' allocations mapped
 * into this process for the broadcast's copies.  Every call is under qlock.
 */
#ifndef NCCLSHIM_IPC_MAPS_H
#define NCCLSHIM_IPC_MAPS_H

#include "ipc_comm.h"

#include <stddef.h>
#include <stdint.h>

/* Peer allocations kept mapped between broadcasts (the ones used last); more
 * stay mapped while broadcasts are in flight.  A refit's worth: a model sent
 * a tensor a broadcast has hundreds (a 7B dense model 291) to tens of
 * thousands (an MoE model's experts) of them, and a mapping closed between
 * two refits is opened again in the next (~8-60 us each, H100:
 * docs/benchmarks.md, "Host time per broadcast").  A peer's freed memory is
 * not kept alive by them: the peer says which are gone ("Mappings kept",
 * ipc_proto.h). */
#define MAP_CACHE 32768
/* Mappings unused this long are given back all the same: longer than a
 * training step between two refits (seconds to minutes). */
#define MAP_IDLE_MS (10 * 60 * 1000)

/* Rank r's allocation of `d` mapped here, at *at (the data's address): 0,
 * or -1 with the reason. */
int ipc_map_peer(struct ipc_comm *c, int r, uint64_t b, const struct ipc_desc *d, size_t bytes, CUdeviceptr *at,
                 char *why, size_t whylen);
/* Gives back the mappings beyond the `keep` most recently used, if the last
 * operation is over; else none. */
void ipc_trim_maps(struct ipc_comm *c, int keep);
/* Whether a mapping of rank r's is held; ipc_maps_drop_rank closes every
 * one (the last operation over: a suspended rank's application frees its
 * buffers next). */
int ipc_maps_hold_rank(const struct ipc_comm *c, int r);

/* How many peers' allocations are mapped here (qlock held). */
int ipc_maps_count(const struct ipc_comm *c);
void ipc_maps_drop_rank(struct ipc_comm *c, int r);
/* The reaper's turn: closes the mappings of allocations the neighbours say
 * are gone, gives back the mappings beyond MAP_CACHE, and all of them once
 * none was used for MAP_IDLE_MS: the ms until it wants to run again, or -1
 * (nothing mapped). */
long ipc_maps_reap(struct ipc_comm *c);
/* At destroy, after the last operation: gives back every mapping (if it
 * cannot, what is still mapped stays so, rather than be taken from under a
 * copy, and a warning says so). */
void ipc_maps_close(struct ipc_comm *c);

#endif
