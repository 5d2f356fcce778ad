/*
 * The names of nccl_api.def's functions, and the lookup of a name: a constant
 * table, usable from any thread before anything is initialised.
 */
#include "nccl_api.h"

#include <string.h>

#define NCCL_PLAIN(ret, name, params, args) [FN_##name] = #name,
#define NCCL_COMM(ret, name, params, args) [FN_##name] = #name,
#define NCCL_DATA(name, op, params, args, count, dtype) [FN_##name] = #name,
#define NCCL_LIFE(ret, name, params, args) [FN_##name] = #name,
#define NCCL_VOID(name, params, args) [FN_##name] = #name,
const char *const shim_fn_names[FN_COUNT] = {
#include "nccl_api.def"
};

/* A linear scan: dlsym of an NCCL name is rare (once per name per client),
 * and a constant table needs no initialisation, whoever calls first. */
int shim_fn_lookup(const char *name)
{
    if (name[0] == 'p')
        name++;
    if (strncmp(name, "nccl", 4) != 0)
        return -1;
    for (int i = 0; i < FN_COUNT; i++)
        if (strcmp(name + 4, shim_fn_names[i] + 4) == 0)
            return i;
    return -1;
}
