/*
 * ncclConfig_t by its field table (shim/nccl/nccl_config.c): what NCCL reads
 * of a config, and the redirected configs the socket and frugal actions hand
 * it (tests/t/36-config.t).  The multi-process side, against a fake NCCL that
 * parses configs as NCCL does, is in tests/t/13-rendezvous.t ("3c").
 */
#include "nccl_config.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

/* As release `version`'s NCCL_CONFIG_INITIALIZER: its size, its version, its fields undefined. */
static void initializer(ncclConfig_t *c, unsigned version, size_t size)
{
    memset(c, 0x5a, sizeof(*c));
    c->size = size;
    c->magic = NCCL_CONFIG_MAGIC;
    c->version = version;
    for (int f = 0; f < CFG_COUNT; f++) {
        char *at = (char *)c + nccl_config_fields[f].offset;
        if (nccl_config_fields[f].kind == NCCL_CONFIG_KIND_INT) {
            int v = NCCL_CONFIG_UNDEF_INT;
            memcpy(at, &v, sizeof(v));
        } else {
            memset(at, 0, sizeof(const char *));
        }
    }
}

#define SIZE_2_16 (offsetof(ncclConfig_t, blocking) + 2 * sizeof(int))  /* 24: blocking, padded */
#define SIZE_2_27 (offsetof(ncclConfig_t, nvlsCTAs) + 2 * sizeof(int))

static void test_table(void)
{
    ok(CFG_COUNT == 23, "2.32.3's config has 23 fields after version (%d)", CFG_COUNT);
    ok(sizeof(ncclConfig_t) == 120 || sizeof(void *) != 8, "and is 120 bytes on LP64, as the facts file says (%zu)",
       sizeof(ncclConfig_t));
    ok(nccl_config_fields[CFG_launchOrderImplicit].added == 23100 && nccl_config_fields[CFG_hostCftMode].added == 23100 &&
           nccl_config_fields[CFG_nvlsHostMode].added == 23200 && nccl_config_fields[CFG_nvlsHostMode].honoured == 23200,
       "2.31's four fields and 2.32's nvlsHostMode, each honoured from its own release");
    ncclConfig_t c231;
    initializer(&c231, 23102, offsetof(ncclConfig_t, nvlsHostMode));
    c231.numRmaSig = 4;
    ok(nccl_config_read(&c231, CFG_numRmaSig, 23203) && !nccl_config_holds(&c231, CFG_nvlsHostMode) &&
           !nccl_config_read(&c231, CFG_numRmaSig, 23007),
       "a 2.31 config: NCCL 2.32 reads numRmaSig, 2.30 does not, and it holds no nvlsHostMode");
    ok(nccl_config_fields[CFG_netName].added == 21700 && nccl_config_fields[CFG_netName].honoured == 21700,
       "netName: 2.17's config, not 2.14's");
    ok(nccl_config_fields[CFG_splitShare].honoured == 0 && nccl_config_fields[CFG_commName].honoured == 0,
       "splitShare and commName: read whatever the version (NCCL has no gate for them)");
    ok(nccl_config_fields[CFG_trafficClass].honoured == 22500 && nccl_config_fields[CFG_trafficClass].added == 22600,
       "trafficClass: honoured from 2.25, declared from 2.26");
    int sorted = 1;
    for (int f = 1; f < CFG_COUNT; f++)
        sorted &= nccl_config_fields[f].offset > nccl_config_fields[f - 1].offset;
    ok(sorted, "the table is in the struct's order");
}

static void test_read(void)
{
    ncclConfig_t c;
    initializer(&c, 22703, SIZE_2_27);
    c.minCTAs = 2;
    ok(nccl_config_read(&c, CFG_minCTAs, 22809), "a 2.27 config: NCCL 2.28 reads minCTAs");
    ok(!nccl_config_read(&c, CFG_nChannelsPerNetPeer, 22809), "a 2.27 config: nor nChannelsPerNetPeer (not held)");
    initializer(&c, 22703, sizeof(c));
    c.nChannelsPerNetPeer = 4;
    ok(nccl_config_is_set(&c, CFG_nChannelsPerNetPeer) && !nccl_config_read(&c, CFG_nChannelsPerNetPeer, 22809),
       "a config that holds nChannelsPerNetPeer but says 2.27: NCCL 2.28 resets it (version, not size)");
    initializer(&c, 23007, sizeof(c));
    ok(!nccl_config_read(&c, CFG_nChannelsPerNetPeer, 22703), "NCCL 2.27 reads no nChannelsPerNetPeer at all");
    ok(nccl_config_read(&c, CFG_maxP2pPeers, 0), "an NCCL of unknown version is taken as the newest");
    initializer(&c, 21605, SIZE_2_16);
    ok(nccl_config_valid(&c) && !nccl_config_holds(&c, CFG_netName), "a 2.16 config is valid and holds no netName");
    c.magic = 0;
    ok(!nccl_config_valid(&c), "a config without NCCL's magic is not one NCCL accepts");
}

/* Redirect `user` with `n` of `ch`; checks version, the fields, size. */
static ncclConfig_t *redirect(const ncclConfig_t *user, const struct nccl_config_change *ch, int n, int nccl,
                              struct nccl_config_told *t, char *why)
{
    return nccl_config_redirect(user, ch, n, nccl, t, why, 256);
}

static const struct nccl_config_change SOCKET[] = { { CFG_netName, 0, "Socket" } };
static const struct nccl_config_change FRUGAL[] = { { CFG_minCTAs, 1, NULL }, { CFG_maxCTAs, 1, NULL },
                                                    { CFG_nChannelsPerNetPeer, 1, NULL } };

static void test_socket(void)
{
    char why[256] = "";
    struct nccl_config_told t;
    ncclConfig_t user;
    initializer(&user, 21605, SIZE_2_16);
    user.blocking = 0;
    ncclConfig_t *c = redirect(&user, SOCKET, 1, 22809, &t, why);
    ok(c && c->version == 21700 && nccl_config_read(c, CFG_netName, 22809) && !strcmp(c->netName, "Socket"),
       "socket, a 2.16 config: version raised to 2.17, NCCL reads netName Socket");
    ok(c && c->blocking == 0 && c->size == sizeof(ncclConfig_t) && c->minCTAs == NCCL_CONFIG_UNDEF_INT &&
           c->cgaClusterSize == NCCL_CONFIG_UNDEF_INT,
       "the application's blocking=0 kept; the fields 2.16 lacked are NCCL's defaults");
    ok(t.changed == 1u << CFG_netName && t.reset == 0 && t.from_version == 21605, "told: netName changed, nothing reset");
    free(c);
    c = redirect(NULL, SOCKET, 1, 22809, &t, why);
    ok(c && c->version == 21700 && c->blocking == NCCL_CONFIG_UNDEF_INT && c->magic == NCCL_CONFIG_MAGIC,
       "socket, no config (ncclCommInitRank): NCCL's defaults at version 2.17");
    free(c);
    initializer(&user, 23007, sizeof(user));
    user.commName = "app";
    c = redirect(&user, SOCKET, 1, 23007, &t, why);
    ok(c && c->version == 23007 && !strcmp(c->commName, "app"), "socket, a 2.30 config: version and commName kept");
    free(c);
    ok(!redirect(&user, SOCKET, 1, 21605, &t, why) && strstr(why, "ncclConfig_t.netName (NCCL 2.17 or later"),
       "socket on NCCL 2.16: vetoed, the reason names netName and 2.17 (%s)", why);
}

static void test_frugal(void)
{
    char why[256] = "";
    struct nccl_config_told t;
    ncclConfig_t user;
    initializer(&user, 22703, SIZE_2_27);
    ncclConfig_t *c = redirect(&user, FRUGAL, 3, 22809, &t, why);
    ok(c && c->version == 22800 && c->minCTAs == 1 && c->maxCTAs == 1 && c->nChannelsPerNetPeer == 1 &&
           nccl_config_read(c, CFG_nChannelsPerNetPeer, 22809),
       "frugal, a 2.27 config on NCCL 2.28: version 2.28, NCCL reads all three");
    free(c);
    /* An application whose config holds a 2.28 field but says 2.27: NCCL ignored that
     * field; at 2.28 it would read it, so the shim sets it back to the default. */
    initializer(&user, 22703, sizeof(user));
    user.nvlinkCentricSched = 1;
    user.collnetEnable = 1;
    c = redirect(&user, FRUGAL, 3, 22809, &t, why);
    ok(c && c->nvlinkCentricSched == NCCL_CONFIG_UNDEF_INT && c->collnetEnable == 1 &&
           t.reset == 1u << CFG_nvlinkCentricSched,
       "a field NCCL ignored at the application's version is reset when the version is raised, and said so");
    free(c);
    initializer(&user, 21605, SIZE_2_16);
    c = redirect(&user, FRUGAL, 2, 21806, &t, why);
    ok(c && c->version == 21700 && c->minCTAs == 1 && c->maxCTAs == 1, "frugal, a 2.16 config on NCCL 2.18: 2.17");
    free(c);
    ok(!redirect(&user, FRUGAL, 2, 21605, &t, why) && strstr(why, "minCTAs") && strstr(why, "2.17"),
       "frugal on NCCL 2.16: vetoed (%s)", why);
    ok(!redirect(&user, FRUGAL, 3, 22703, &t, why) && strstr(why, "nChannelsPerNetPeer"),
       "nChannelsPerNetPeer asked of NCCL 2.27: vetoed (the caller sets only what NCCL has)");
}

static void test_bad_and_big(void)
{
    char why[256] = "";
    struct nccl_config_told t;
    ncclConfig_t user;
    initializer(&user, 23007, sizeof(user));
    user.magic = 1;
    ok(!redirect(&user, SOCKET, 1, 22809, &t, why) && strstr(why, "NCCL_CONFIG_INITIALIZER"),
       "a config not made with NCCL_CONFIG_INITIALIZER: refused, said so");
    /* A newer NCCL's larger config: every byte past ours is kept. */
    size_t big = sizeof(ncclConfig_t) + 16;
    ncclConfig_t *u = calloc(1, big);
    initializer(u, 23105, sizeof(ncclConfig_t));
    u->size = big;
    memset((char *)u + sizeof(ncclConfig_t), 0x77, 16);
    ncclConfig_t *c = redirect(u, SOCKET, 1, 23105, &t, why);
    int kept = c != NULL;
    for (size_t i = sizeof(ncclConfig_t); kept && i < big; i++)
        kept = ((unsigned char *)c)[i] == 0x77;
    ok(kept && c->size == big && c->version == 23105, "a 2.31 config: its size, version and unknown fields kept");
    free(c);
    free(u);
}

int main(void)
{
    test_table();
    test_read();
    test_socket();
    test_frugal();
    test_bad_and_big();
    return tap_done();
}
