/* Ranks grouped by host_id with a hash table (policy/hosts.h). */
#include "hosts.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_host(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < FACTS_HOST_LEN && s[i]; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

int hosts_group(const struct rank_facts *facts, int nranks, int *host_of)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)(nranks > 0 ? nranks : 1))
        cap *= 2;
    /* Each slot: the lowest rank of a host seen, +1 (0: empty). */
    int *slot = calloc(cap, sizeof(*slot));
    if (!slot)
        return -1;
    int hosts = 0;
    for (int i = 0; i < nranks; i++) {
        const char *id = facts[i].host_id;
        if (!id[0]) {
            host_of[i] = hosts++;
            continue;
        }
        size_t k = (size_t)hash_host(id) & (cap - 1);
        while (slot[k] && strncmp(facts[slot[k] - 1].host_id, id, FACTS_HOST_LEN) != 0)
            k = (k + 1) & (cap - 1);
        if (!slot[k]) {
            slot[k] = i + 1;
            host_of[i] = hosts++;
        } else {
            host_of[i] = host_of[slot[k] - 1];
        }
    }
    free(slot);
    return hosts;
}
