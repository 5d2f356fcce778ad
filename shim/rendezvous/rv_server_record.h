/* What the root's rendezvous writes in its records (docs/records.md). */
#ifndef NCCLSHIM_RV_SERVER_RECORD_H
#define NCCLSHIM_RV_SERVER_RECORD_H

#include "record.h"
#include "rv_session.h"

#include <stddef.h>

/* The ranks present (want_present 1) or missing (0): "0-3,5,7-9", cut to fit. */
void rv_rank_list(const struct rv_session *s, int want_present, char *buf, size_t len);
/* The "decision" record at `stage` ("decision" or "commit"). */
void rv_record_decision(struct rv_session *s, const char *stage);
/* "rendezvous_expired": nobody came within NCCLSHIM_RENDEZVOUS_IDLE_MS. */
void rv_record_expired(const struct rv_session *s, int idle_ms);
/* "ipc_peer_left": a rank of a running ipc communicator closed its connection. */
void rv_record_peer_left(const struct rv_session *s, int rank);

#endif
