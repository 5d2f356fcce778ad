/*
 * The ranks of a communicator grouped by host (host_id), in time linear in
 * the ranks: decide() counts hosts and policy/fabric.c weighs each one, at
 * up to FACTS_MAX_RANKS ranks on thousands of hosts (issue 34: a sort by
 * host name cost the root tens of ms at 32768 ranks).  Pure.
 */
#ifndef NCCLSHIM_POLICY_HOSTS_H
#define NCCLSHIM_POLICY_HOSTS_H

#include "facts.h"

/*
 * host_of[i] (nranks entries) = the host of rank i, numbered 0.. in the order
 * of each host's lowest rank; a rank with an empty host_id is a host of its
 * own.  Returns the number of hosts, or -1 when out of memory.
 */
int hosts_group(const struct rank_facts *facts, int nranks, int *host_of);

#endif
