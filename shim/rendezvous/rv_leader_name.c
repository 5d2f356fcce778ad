/* A host's leader's name and slots (rv_leader_name.h). */
#include "rv_leader_name.h"

#include "rv_limits.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

socklen_t rv_leader_name(struct sockaddr_un *sun, const uint8_t token[RV_TOKEN_LEN], const char *host_id, int slot)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < RV_TOKEN_LEN; i++)
        h = (h ^ token[i]) * 0x100000001b3ull;
    for (const char *p = host_id; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "ncclshim-rv-%016llx-%d", (unsigned long long)h,
                     slot);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int rv_leader_next_slot(int slot, int rank)
{
    /* Slot 0 takes a host's ranks as they come (8 GPUs: all of them); past
     * it, ranks go by blocks of their rank numbers, so that a join costs two
     * tries, not one per leader. */
    return slot == 0 ? 1 + rank / RV_LEADER_MAX_RANKS : slot + 1;
}
