/*
 * Random bytes from the kernel, for whatever must be unguessable: the
 * rendezvous's tokens and decision ids, the CUDA IPC transport's shared
 * names and tokens.
 */
#ifndef NCCLSHIM_RANDOM_H
#define NCCLSHIM_RANDOM_H

#include <stddef.h>

/* Fills `buf` with `len` random bytes: 0, or -1 (errno set). */
int shim_random(void *buf, size_t len);

#endif
