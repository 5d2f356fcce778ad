/*
 * Where a rank finds its host's leader (rv_leader.h): the abstract Unix
 * socket's name for (ID, host, slot), the admit byte, and the slot a rank
 * turned away tries next.  Apart from rv_leader.c so that a program that
 * stands in for ranks (bench/rv_synth_ranks.c) reaches a real leader by the
 * shim's own rule, not by a copy of it that could drift.
 */
#ifndef NCCLSHIM_RV_LEADER_NAME_H
#define NCCLSHIM_RV_LEADER_NAME_H

#include "rv_wire.h"

#include <sys/socket.h>
#include <sys/un.h>

/* The byte a leader writes to each connection it accepts. */
#define RV_LEADER_ADMIT 'A' /* admitted: speak the rendezvous protocol now */
#define RV_LEADER_FULL 'F'  /* full: try the next slot */
/* Names per (ID, host): enough for FACTS_MAX_RANKS ranks on one host at the smallest group. */
#define RV_LEADER_SLOTS (2 + FACTS_MAX_RANKS / 4 + 64)

/* "\0ncclshim-rv-<hash of token and host>-<slot>": only ranks of this ID on this host compute it. */
socklen_t rv_leader_name(struct sockaddr_un *sun, const uint8_t token[RV_TOKEN_LEN], const char *host_id, int slot);

/* The slot that rank `rank`, turned away (FULL) at `slot`, tries next. */
int rv_leader_next_slot(int slot, int rank);

#endif
