/*
 * Where the socket action holds against NCCL_NET (docs/design.md, "NCCL_NET
 * cannot undo a redirect").
 *
 * NCCL reads NCCL_NET at every init, with getenv, on the thread that calls
 * the init (init.cc: parseCommConfig -> envConfigOverride, before any
 * asynchronous job; the same in every release from 2.18 to 2.30), and lets
 * it replace config.netName.  The shim interposes getenv: on a thread inside
 * a socket-redirected init, and only there, NCCL_NET reads as unset, so that
 * the config's "Socket" stands; every other thread, and every other init,
 * sees the environment as it is.
 */
#ifndef NCCLSHIM_NET_ENV_H
#define NCCLSHIM_NET_ENV_H

#include "nccl_abi.h"

#include <stddef.h>

/* The releases whose reading of NCCL_NET was checked (source of each tag). */
#define NET_ENV_CHECKED_FROM 21800
#define NET_ENV_CHECKED_UPTO 23099

/* Around the real init call of a socket-redirected communicator. */
void net_env_hide(void);
void net_env_show(void);

/* Whether hiding NCCL_NET is sure to work for the NCCL `version` loaded in
 * this process: 1, or 0 with the reason (an NCCL newer than the ones
 * checked, or an env plugin that may read NCCL_NET without getenv), which
 * only matters when NCCL_NET is set. */
int net_env_can_hide(int version, char *why, size_t whylen);

/* This process's NCCL_NET (the environment's), or NULL when unset or empty. */
const char *net_env_value(void);

/* For the records: the network NCCL is told to use for an init (NULL: NCCL
 * picks) and, in `by`, what tells it so. */
const char *net_env_told(int socket, const ncclConfig_t *config, char *by, size_t bylen);

/* Nesting depth of socket-redirected inits on this thread (net_env_hide,
 * net_env_show), read by the getenv interposer (shim/interpose/getenv.c) at
 * every getenv of the process.  Thread-local, so no lock.  initial-exec: the
 * shim is preloaded, and a general-dynamic access would cost every getenv a
 * call. */
extern __thread int net_env_hiding __attribute__((tls_model("initial-exec")));

#endif
