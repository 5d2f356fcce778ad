/* What several C clients need of NCCL's API the same way: a config as NCCL's
 * NCCL_CONFIG_INITIALIZER makes it (2.28's version, every field unset), and
 * a unique ID written and read as hex (the .t scripts pass IDs between
 * processes on the command line). */
#ifndef NCCLSHIM_TEST_CLIENT_UTIL_H
#define NCCLSHIM_TEST_CLIENT_UTIL_H

#include "nccl_abi.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* Entries of a /proc directory (threads in /proc/self/task, descriptors in
 * /proc/self/fd: less the one opendir holds there), -1 if it cannot be read. */
static inline int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - (strcmp(path, "/proc/self/fd") == 0);
}

static inline void client_config(ncclConfig_t *cfg, int blocking)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    cfg->magic = NCCL_CONFIG_MAGIC;
    cfg->version = 22809;
    cfg->blocking = blocking;
    cfg->cgaClusterSize = cfg->minCTAs = cfg->maxCTAs = cfg->splitShare = cfg->trafficClass = NCCL_CONFIG_UNDEF_INT;
    cfg->collnetEnable = cfg->CTAPolicy = cfg->shrinkShare = cfg->nvlsCTAs = NCCL_CONFIG_UNDEF_INT;
    cfg->nChannelsPerNetPeer = cfg->nvlinkCentricSched = NCCL_CONFIG_UNDEF_INT;
    cfg->graphUsageMode = cfg->numRmaCtx = cfg->maxP2pPeers = cfg->graphStreamOrdering = NCCL_CONFIG_UNDEF_INT;
}

/* The config an application built with release `version`'s nccl.h makes
 * with NCCL_CONFIG_INITIALIZER (and blocking=1): that header's sizeof, its
 * version, every field it has undefined, nothing beyond (the shim's field
 * table, shim/nccl/nccl_config.def, says which release added which). */
static inline void client_config_of(ncclConfig_t *cfg, unsigned version)
{
    size_t end = offsetof(ncclConfig_t, blocking);
    client_config(cfg, 1);
#define NCCL_CONFIG_FIELD(name, kind, added, honoured)                                             \
    if ((added) <= version && offsetof(ncclConfig_t, name) + sizeof(cfg->name) > end)              \
        end = offsetof(ncclConfig_t, name) + sizeof(cfg->name);
#include "nccl_config.def"
    cfg->size = (end + _Alignof(ncclConfig_t) - 1) / _Alignof(ncclConfig_t) * _Alignof(ncclConfig_t);
    cfg->version = version;
    memset((char *)cfg + cfg->size, 0xa5, sizeof(*cfg) - cfg->size); /* nobody may read past size */
}

/* "ID <hex>" on stdout. */
static inline void id_print(const ncclUniqueId *id)
{
    printf("ID ");
    for (size_t i = 0; i < sizeof(id->internal); i++)
        printf("%02x", (unsigned char)id->internal[i]);
    printf("\n");
}

/* 0, or -1 if `s` is not the hex of a whole ID. */
static inline int id_from_hex(const char *s, ncclUniqueId *id)
{
    if (strlen(s) < 2 * sizeof(id->internal))
        return -1;
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        id->internal[i] = (char)v;
    }
    return 0;
}

#endif
