/*
 * ncclConfig_t by its field table: see nccl_config.h.  Pure memory work, no
 * NCCL call, so that both the decision (which must know, before any rank
 * touches NCCL, whether a redirect can be carried) and the records use it.
 */
#include "nccl_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct nccl_config_field nccl_config_fields[CFG_COUNT] = {
#define NCCL_CONFIG_FIELD(name, kind, added, honoured) \
    [CFG_##name] = { #name, offsetof(ncclConfig_t, name), NCCL_CONFIG_KIND_##kind, added, honoured },
#include "nccl_config.def"
};

static size_t field_size(enum nccl_config_index f)
{
    return nccl_config_fields[f].kind == NCCL_CONFIG_KIND_INT ? sizeof(int) : sizeof(const char *);
}

int nccl_config_valid(const ncclConfig_t *c)
{
    return c && c->magic == NCCL_CONFIG_MAGIC && c->size >= offsetof(ncclConfig_t, version) + sizeof(c->version);
}

int nccl_config_holds(const ncclConfig_t *c, enum nccl_config_index f)
{
    return c->size >= nccl_config_fields[f].offset + field_size(f);
}

int nccl_config_int(const ncclConfig_t *c, enum nccl_config_index f)
{
    int v;
    memcpy(&v, (const char *)c + nccl_config_fields[f].offset, sizeof(v));
    return v;
}

const char *nccl_config_str(const ncclConfig_t *c, enum nccl_config_index f)
{
    const char *s;
    memcpy(&s, (const char *)c + nccl_config_fields[f].offset, sizeof(s));
    return s;
}

int nccl_config_is_set(const ncclConfig_t *c, enum nccl_config_index f)
{
    if (!nccl_config_holds(c, f))
        return 0;
    return nccl_config_fields[f].kind == NCCL_CONFIG_KIND_INT ? nccl_config_int(c, f) != NCCL_CONFIG_UNDEF_INT
                                                              : nccl_config_str(c, f) != NULL;
}

int nccl_config_known(enum nccl_config_index f, int nccl_version)
{
    const struct nccl_config_field *d = &nccl_config_fields[f];
    return nccl_version == 0 || (nccl_version >= d->added && nccl_version >= d->honoured);
}

int nccl_config_read(const ncclConfig_t *c, enum nccl_config_index f, int nccl_version)
{
    return nccl_config_holds(c, f) && c->version >= (unsigned)nccl_config_fields[f].honoured &&
           nccl_config_known(f, nccl_version);
}

void nccl_version_str(int code, char *buf, size_t len)
{
    snprintf(buf, len, "%d.%d", code / 10000, code / 100 % 100);
}

/* NCCL's default for a field (NCCL_CONFIG_INITIALIZER's: "undefined"). */
static void set_default(ncclConfig_t *c, enum nccl_config_index f)
{
    char *at = (char *)c + nccl_config_fields[f].offset;
    if (nccl_config_fields[f].kind == NCCL_CONFIG_KIND_INT) {
        int v = NCCL_CONFIG_UNDEF_INT;
        memcpy(at, &v, sizeof(v));
    } else {
        const char *s = NULL;
        memcpy(at, &s, sizeof(s));
    }
}

static void set_change(ncclConfig_t *c, const struct nccl_config_change *ch)
{
    char *at = (char *)c + nccl_config_fields[ch->field].offset;
    if (nccl_config_fields[ch->field].kind == NCCL_CONFIG_KIND_INT)
        memcpy(at, &ch->ival, sizeof(ch->ival));
    else
        memcpy(at, &ch->sval, sizeof(ch->sval));
}

/* 0, or -1 with the reason if NCCL `nccl_version` cannot read every change. */
static int changes_readable(const struct nccl_config_change *changes, int n, int nccl_version, char *why,
                            size_t whylen)
{
    for (int i = 0; i < n; i++) {
        const struct nccl_config_field *d = &nccl_config_fields[changes[i].field];
        if (nccl_config_known(changes[i].field, nccl_version))
            continue;
        char have[16], need[16];
        nccl_version_str(nccl_version, have, sizeof(have));
        nccl_version_str(d->added > d->honoured ? d->added : d->honoured, need, sizeof(need));
        snprintf(why, whylen, "NCCL %s (%d) does not read ncclConfig_t.%s (NCCL %s or later does)", have,
                 nccl_version, d->name, need);
        return -1;
    }
    return 0;
}

/* The caller's config, or NCCL's defaults, in a buffer that holds every field the shim knows. */
static ncclConfig_t *copy_config(const ncclConfig_t *user)
{
    size_t size = sizeof(ncclConfig_t);
    if (user && user->size > size)
        size = user->size; /* a newer NCCL's larger config: keep every byte */
    ncclConfig_t *c = calloc(1, size);
    if (!c)
        return NULL;
    c->size = sizeof(ncclConfig_t);
    c->magic = NCCL_CONFIG_MAGIC;
    c->version = 0;
    for (int f = 0; f < CFG_COUNT; f++)
        set_default(c, (enum nccl_config_index)f);
    if (user)
        memcpy(c, user, user->size);
    return c;
}

ncclConfig_t *nccl_config_redirect(const ncclConfig_t *user, const struct nccl_config_change *changes, int n,
                                   int nccl_version, struct nccl_config_told *told, char *why, size_t whylen)
{
    memset(told, 0, sizeof(*told));
    if (user && !nccl_config_valid(user)) {
        snprintf(why, whylen, "the application's config was not made with NCCL_CONFIG_INITIALIZER");
        return NULL;
    }
    if (changes_readable(changes, n, nccl_version, why, whylen) != 0)
        return NULL;
    ncclConfig_t *c = copy_config(user);
    if (!c) {
        snprintf(why, whylen, "out of memory for a config");
        return NULL;
    }
    told->from_version = user ? user->version : 0;
    unsigned int version = told->from_version;
    for (int i = 0; i < n; i++) {
        const struct nccl_config_field *d = &nccl_config_fields[changes[i].field];
        if (!nccl_config_holds(c, changes[i].field))
            c->size = sizeof(ncclConfig_t); /* an older caller's config, extended with NCCL's defaults */
        if ((unsigned)d->honoured > version)
            version = (unsigned)d->honoured;
        told->changed |= 1u << changes[i].field;
    }
    /* What NCCL ignored at the application's version, it must ignore still. */
    for (int f = 0; f < CFG_COUNT; f++) {
        unsigned int h = (unsigned)nccl_config_fields[f].honoured;
        if (h > told->from_version && h <= version && !(told->changed & (1u << f)) &&
            nccl_config_holds(c, (enum nccl_config_index)f)) {
            if (nccl_config_is_set(c, (enum nccl_config_index)f))
                told->reset |= 1u << f;
            set_default(c, (enum nccl_config_index)f);
        }
    }
    c->version = version;
    for (int i = 0; i < n; i++)
        set_change(c, &changes[i]);
    return c;
}
