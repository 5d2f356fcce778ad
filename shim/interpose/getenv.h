/* The getenv interposer (getenv.c): NCCL_NET hidden from socket-redirected inits. */
#ifndef NCCLSHIM_GETENV_H
#define NCCLSHIM_GETENV_H

/* Resolves glibc's getenv; called while the process is single-threaded. */
void shim_getenv_init(void);

#endif
