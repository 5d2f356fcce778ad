/* Host identity: which ranks are on one host, decided the way NCCL decides it (host_id.c). */
#ifndef NCCLSHIM_HOST_ID_H
#define NCCLSHIM_HOST_ID_H

#include <limits.h>

#define HOST_ID_LEN 128     /* = FACTS_HOST_LEN: the identity travels in a rank's facts */
#define HOST_ID_NCCL_MAX 1024 /* NCCL's own buffer for the string it hashes */

struct host_identity {
    char id[HOST_ID_LEN];           /* what ranks compare: equal exactly when NCCL's strings are equal
                                     * (one longer than fits: its first 100 bytes and a 64-bit hash) */
    char hostname[256];             /* the whole host name (NCCLSHIM_HOSTNAME stands in for it) */
    char boot_id[64];               /* the first word of /proc/sys/kernel/random/boot_id, "" if unreadable */
    int hostid_set;                 /* NCCL_HOSTID is set: it alone is the identity */
    char hostid[HOST_ID_NCCL_MAX];  /* its value, cut where NCCL cuts it */
    char hostid_from[PATH_MAX];     /* "environment", or the NCCL config file that set it */
};

/*
 * Reads this process's host identity.  `hostname` is the whole host name
 * (gethostname, or NCCLSHIM_HOSTNAME); `boot_id_path` is normally
 * /proc/sys/kernel/random/boot_id.
 */
void host_identity_read(struct host_identity *h, const char *hostname, const char *boot_id_path);

/* The first 8 characters of the boot id that are hex digits ("nobootid" if none): for file names. */
void host_identity_boot8(const struct host_identity *h, char out[9]);

#endif
