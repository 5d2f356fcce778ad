/*
 * Writing and reading the shim's marks in an ncclUniqueId (uid_mark.h): the
 * rendezvous mark, and the grow mark an ID made by ncclCommGetUniqueId from a
 * redirected communicator carries, each checked so that bytes another tool
 * put there do not pass for one; and NCCL's own bootstrap address in it.
 */
#include "uid_mark.h"

#include <netinet/in.h>
#include <string.h>

/*
 * Layout of bytes 64..127 (little-endian):
 *   64  u64 magic "ncclshmk"     72 u16 version     74 u16 port
 *   76  u32 zero (reserved)      80 token[16]       96 u64 check: FNV-1a of 64..95
 *   104 zero up to 127
 * The check makes random bytes (an ID from another tool that uses the tail)
 * unlikely to pass for a mark.
 */
#define MARK_MAGIC 0x6b6d68736c63636eULL /* "ncclshmk" */
/* The grow mark: 64 u64 magic "ncclshih", 72 u16 version, 74 u16 action,
 * 80 u64 decision id, 88 u64 check: FNV-1a of 64..87, zero up to 127. */
#define INHERIT_MAGIC 0x686968736c63636eULL /* "ncclshih" */

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int uid_mark_space_free(const ncclUniqueId *id)
{
    for (size_t i = UID_MARK_OFFSET; i < sizeof(id->internal); i++)
        if (id->internal[i])
            return 0;
    return 1;
}

void uid_mark_write(ncclUniqueId *id, const struct uid_mark *m)
{
    unsigned char *p = (unsigned char *)id->internal + UID_MARK_OFFSET;
    memset(p, 0, sizeof(id->internal) - UID_MARK_OFFSET);
    put_le(p, MARK_MAGIC, 8);
    put_le(p + 8, (uint64_t)m->version, 2);
    put_le(p + 10, m->port, 2);
    memcpy(p + 16, m->token, UID_TOKEN_LEN);
    put_le(p + 32, fnv(p, 32), 8);
}

int uid_mark_read(const ncclUniqueId *id, struct uid_mark *m)
{
    const unsigned char *p = (const unsigned char *)id->internal + UID_MARK_OFFSET;
    if (get_le(p, 8) != MARK_MAGIC || get_le(p + 32, 8) != fnv(p, 32))
        return 0;
    m->version = (int)get_le(p + 8, 2);
    if (m->version != UID_MARK_VERSION)
        return 0;
    m->port = (uint16_t)get_le(p + 10, 2);
    memcpy(m->token, p + 16, UID_TOKEN_LEN);
    return m->port != 0;
}

void uid_inherit_write(ncclUniqueId *id, int action, uint64_t decision_id)
{
    unsigned char *p = (unsigned char *)id->internal + UID_MARK_OFFSET;
    memset(p, 0, sizeof(id->internal) - UID_MARK_OFFSET);
    put_le(p, INHERIT_MAGIC, 8);
    put_le(p + 8, UID_MARK_VERSION, 2);
    put_le(p + 10, (uint64_t)action, 2);
    put_le(p + 16, decision_id, 8);
    put_le(p + 24, fnv(p, 24), 8);
}

int uid_inherit_read(const ncclUniqueId *id, int *action, uint64_t *decision_id)
{
    const unsigned char *p = (const unsigned char *)id->internal + UID_MARK_OFFSET;
    if (get_le(p, 8) != INHERIT_MAGIC || get_le(p + 24, 8) != fnv(p, 24) || get_le(p + 8, 2) != UID_MARK_VERSION)
        return 0;
    *action = (int)get_le(p + 10, 2);
    *decision_id = get_le(p + 16, 8);
    return 1;
}

socklen_t uid_nccl_addr(const ncclUniqueId *id, struct sockaddr_storage *ss)
{
    const unsigned char *p = (const unsigned char *)id->internal + 8;
    sa_family_t family;
    memcpy(&family, p, sizeof(family)); /* NCCL stores a native struct sockaddr */
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET) {
        memcpy(ss, p, sizeof(struct sockaddr_in));
        return sizeof(struct sockaddr_in);
    }
    if (family == AF_INET6) {
        memcpy(ss, p, sizeof(struct sockaddr_in6));
        return sizeof(struct sockaddr_in6);
    }
    return 0;
}
