/* Opening this process's record file safely (record_file.c: the rules). */
#ifndef NCCLSHIM_RECORD_FILE_H
#define NCCLSHIM_RECORD_FILE_H

#include <stddef.h>

/*
 * Creates the record file of this process, `pid`, under `log_dir`
 * (`is_default`: the shim's own /tmp/ncclshim-<uid>, which must be private to
 * this user; else the operator's NCCLSHIM_LOG_DIR), named
 * ncclshim.<host>.<pid>.<boot8>.<start ticks>.jsonl, or the next free name.
 * Returns a descriptor >= 3 (O_APPEND, blocking, close-on-exec) of a file
 * made by this call and its path, or -1 with the reason printed on stderr in
 * one line.  `note` receives what was done instead of the plain path (a
 * private directory, another name; printed too), empty if nothing.
 */
int record_file_open(const char *log_dir, int is_default, const char *host, const char *boot8, int pid, char *path,
                     size_t pathlen, char *note, size_t notelen);

/* This process's start time in clock ticks since boot (/proc/self/stat), 0 if unknown. */
unsigned long long record_file_start_ticks(void);

/* `host` as a file name component: [A-Za-z0-9._-], no leading '.', not empty. */
void record_file_host_part(const char *host, char *out, size_t len);

#endif
