/*
 * ncclConfig_t read and written by its field table (nccl_config.def), the way
 * NCCL's parseCommConfig reads it: a field counts when the config's `size`
 * holds it and its `version` is one NCCL honours it at.  What the socket and
 * frugal actions hand NCCL is made here, and so is what the records say of a
 * config, so that the record and NCCL never part.
 */
#ifndef NCCLSHIM_NCCL_CONFIG_H
#define NCCLSHIM_NCCL_CONFIG_H

#include "nccl_abi.h"

#include <stddef.h>
#include <stdint.h>

enum nccl_config_kind { NCCL_CONFIG_KIND_INT, NCCL_CONFIG_KIND_STR };

enum nccl_config_index {
#define NCCL_CONFIG_FIELD(name, kind, added, honoured) CFG_##name,
#include "nccl_config.def"
    CFG_COUNT
};
_Static_assert(CFG_COUNT <= 32, "a config field mask is 32 bits");

struct nccl_config_field {
    const char *name;
    size_t offset;
    enum nccl_config_kind kind;
    int added;                          /* the release whose nccl.h has it first */
    int honoured;                       /* the config version NCCL reads it from (0: any) */
};
extern const struct nccl_config_field nccl_config_fields[CFG_COUNT];

/* A config NCCL accepts: its magic, and a size that holds `version`. */
int nccl_config_valid(const ncclConfig_t *c);

/* Whether the config's size holds field f. */
int nccl_config_holds(const ncclConfig_t *c, enum nccl_config_index f);

/* Whether field f is set: held, and not NCCL's "undefined" (INT_MIN, NULL). */
int nccl_config_is_set(const ncclConfig_t *c, enum nccl_config_index f);

/* Field f's value (the caller checked nccl_config_holds). */
int nccl_config_int(const ncclConfig_t *c, enum nccl_config_index f);
const char *nccl_config_str(const ncclConfig_t *c, enum nccl_config_index f);

/* Whether an NCCL of `nccl_version` (0: unknown, taken as the newest) knows
 * field f at all: its struct has it and its parser can honour it. */
int nccl_config_known(enum nccl_config_index f, int nccl_version);

/* Whether that NCCL reads field f of config c, or resets it to its default
 * (a config of an older version, or a field it does not know). */
int nccl_config_read(const ncclConfig_t *c, enum nccl_config_index f, int nccl_version);

/* One field the shim sets. */
struct nccl_config_change {
    enum nccl_config_index field;
    int ival;
    const char *sval;
};

/* What was done to the application's config (the record says it). */
struct nccl_config_told {
    uint32_t changed;                   /* bit f: the shim set field f */
    uint32_t reset;                     /* bit f: reset to NCCL's default, as NCCL would
                                           have at the application's version */
    unsigned int from_version;          /* the application's version (0: no config) */
};

/*
 * A copy of the application's config (NULL: NCCL's defaults), every field
 * and byte kept, with `changes` made and a `version` NCCL honours them at:
 * raised where the application's is older, and every field NCCL would have
 * reset at the application's version but reads at the new one set back to
 * NCCL's default, so that NCCL reads nothing else differently.  NULL with
 * the reason when NCCL `nccl_version` cannot read a change (no version it
 * supports carries the field: the action is vetoed), the application's
 * config is not one NCCL accepts, or memory runs out.  free() it.
 */
ncclConfig_t *nccl_config_redirect(const ncclConfig_t *user, const struct nccl_config_change *changes, int n,
                                   int nccl_version, struct nccl_config_told *told, char *why, size_t whylen);

/* "2.17" for 21700: the release a version code names. */
void nccl_version_str(int code, char *buf, size_t len);

#endif
