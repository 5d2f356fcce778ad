/*
 * auto across hosts: is the fabric ample, scarce, or beyond judging?  Weighs
 * each host's fabric facts (policy/facts.h: RDMA devices against GPUs, and
 * the user's NCCLSHIM_FABRIC_BUDGET) for the weight-update group's ranks on
 * that host.  Pure functions: no I/O, no NCCL, no CUDA.  docs/policy.md
 * ("auto across hosts") states the rules and where each number comes from.
 */
#ifndef NCCLSHIM_POLICY_FABRIC_H
#define NCCLSHIM_POLICY_FABRIC_H

#include "facts.h"
#include "rules.h"

#include <stddef.h>

/* An EFA communicator costs one aws-ofi-nccl endpoint a process (1.18+: keyed
 * by the proxy thread, whatever the channels), a data and a connection-manager
 * fi_endpoint of 2 QPs each (ofiwg/libfabric#9356). */
#define FABRIC_EFA_QPS_PER_COMM 4
/* IB/RoCE: connection ends a rank opens per channel with runtime connect off
 * (vLLM sets NCCL_CUMEM_ENABLE=0): ring 1 send + 1 receive, tree up to 2 more
 * peers both ways; one QP each (NCCL_IB_QPS_PER_CONNECTION=1). */
#define FABRIC_IB_ENDS_PER_CHANNEL 6
/* Channels per device NCCL takes by default for a network communicator (2 rings
 * a NIC, as the scenario measured: 24 connections against 12 at one channel). */
#define FABRIC_DEFAULT_CHANNELS_PER_DEVICE 2
/* Without a budget, a host is ample with this many RDMA devices a GPU or more
 * (p5: 32 for 8 GPUs; g6e.8xlarge 1 for 1 and p4d 4 for 8 are not). */
#define FABRIC_AMPLE_DEVICES_PER_GPU 2

/* QPs a device the weight-update group's `on_host` ranks (of `nranks`) take on
 * a host with `devices` devices of `kind`: at NCCL's default channels, or at
 * one channel (frugal).  An upper bound: NCCL's paths within a host (NVLink,
 * shared memory) would spare some connections. */
long fabric_estimate(int kind, int on_host, int nranks, int devices, int one_channel);

/*
 * The action auto takes for a group on several hosts: ACTION_PASSTHROUGH
 * (ample on every host), ACTION_FRUGAL (scarce somewhere, one channel fits on
 * every host, and every rank can take frugal), else ACTION_SOCKET.  `why`
 * names the evidence of the host that decided.
 */
enum action fabric_choose(const struct rank_facts *facts, int nranks, char *why, size_t whylen);

const char *fabric_kind_name(int kind);

#endif
