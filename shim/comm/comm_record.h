/*
 * The communicator's records (docs/records.md), built in one place from the
 * state their owners hand over: `unique_id`, `comm` (a creation, from
 * lifecycle.c), `comm_init_end`, `comm_end` and the process's `exit`, which
 * counts the communicators (from comm.c's table).
 */
#ifndef NCCLSHIM_COMM_RECORD_H
#define NCCLSHIM_COMM_RECORD_H

#include "comm.h"
#include "creation.h"
#include "creator.h"
#include "nccl_decls.h"

#include <stdint.h>

struct jw;

/* The `unique_id` record of ncclGetUniqueId: the ID's hash (when `has_id`),
 * the result, the caller; `rendezvous` the root's address where the ID was
 * marked (then `why` says why it was), NULL where not (`why`: why not). */
void comm_record_unique_id(int has_id, uint64_t id_hash, ncclResult_t r, uint64_t dur_us, const struct creator *cr,
                           const char *rendezvous, const char *why);
/* The `comm` record of a creation: what was asked, what was decided and why,
 * what was made (`real`: NCCL's pointer, `handle`: what the application holds). */
void comm_record_creation(const struct creation *c, ncclResult_t r, uint64_t dur_us, ncclComm_t real,
                          ncclComm_t handle, int cuda_device);
/* The `comm_init_end` record: how `h`'s non-blocking init ended, as
 * ncclCommGetAsyncError revealed it (`result`). */
void comm_record_init_end(ncclComm_t comm, const struct shim_comm *h, ncclResult_t result);
/* Writes a comm_end record for `h`. */
void shim_comm_record_end(struct shim_comm *h, const char *how, int result);
/* When the process leaves: comm_end records for every live communicator, then
 * the exit record, built in `w`.  `by`: "exit" (exit() or main's return: under
 * the table's lock), "_exit" or "signal" (`signo`): lock-free and
 * async-signal-safe. */
void shim_comm_record_exit(struct jw *w, const char *by, int signo);

#endif
