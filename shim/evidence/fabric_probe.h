/*
 * This host's fabric, as auto across hosts weighs it (policy/fabric.c): the
 * RDMA devices NCCL could use (/sys/class/infiniband, EFA included), the GPUs
 * on the PCI bus, and NCCLSHIM_FABRIC_BUDGET.  Read once per process: the host
 * does not change under a running job.
 */
#ifndef NCCLSHIM_FABRIC_PROBE_H
#define NCCLSHIM_FABRIC_PROBE_H

#include "policy/facts.h"

/* The facts, read on first use (thread-safe), from sysfs under
 * NCCLSHIM_SYSFS_ROOT (test-only; default /sys). */
void fabric_probe(struct fabric_facts *out);

/* Reads them now from `root` (a sysfs tree) with `budget` (0 unset, -1
 * malformed): the tests' entry point. */
void fabric_probe_read(const char *root, int budget, struct fabric_facts *out);

#endif
