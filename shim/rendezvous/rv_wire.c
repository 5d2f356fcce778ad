/*
 * The rendezvous wire format (shim/rendezvous/rv_wire.h): encoding and decoding only.
 *
 * Frame:   u32 magic RV_MAGIC | u16 version RV_VERSION | u16 type | u32 payload length
 *          (12 bytes, little-endian), then the payload.
 * Payload: TLV items: u16 tag | u16 length | length bytes.  Integers are
 *          fixed-size little-endian; strings are raw bytes, no NUL (not even a
 *          trailing one), strictly shorter than the field they are decoded into.
 *
 * Tags, per message type ("req": a message without it is rejected; every
 * tag may appear at most once except HELLO's frame).
 *
 *   HELLO (struct rank_facts, its strings in struct rank_text)
 *     tag  field                 encoding   req  accepted values
 *      1   token                 16 bytes   yes
 *      2   rank                  i32        yes  0..nranks-1
 *      3   nranks                i32        yes  1..FACTS_MAX_RANKS
 *      4   pid                   u32        yes
 *      5   cuda_device           i32        yes  >= -1
 *      6   nccl_version          i32        yes
 *      7   host                  string     yes  < FACTS_HOST_LEN bytes
 *      8   host_id               string     yes  < FACTS_HOST_LEN bytes
 *      9   fn                    string     yes  < FACTS_NAME_LEN bytes
 *     10   shim_version          string     no   < 16 bytes
 *     11   api                   i32        yes  0..API_CUPY
 *     12   role                  i32        yes  0..ROLE_INFERENCE
 *     13   local_purpose         i32        yes  0..PURPOSE_INFERENCE
 *     14   strict_error          i32        yes  0..1
 *     15   caller_lib            string     no   < FACTS_PATH_LEN bytes
 *     16   title                 string     no   < FACTS_TITLE_LEN bytes
 *     17   role_reason           string     no   < EVIDENCE_REASON_LEN bytes
 *     18   local_purpose_reason  string     no   < EVIDENCE_REASON_LEN bytes
 *     19   frame                 string     no   < EVIDENCE_FRAME_LEN bytes; repeated, once
 *                                                per frame, innermost first, at most
 *                                                EVIDENCE_MAX_FRAMES times (nframes = count)
 *     20   leader_pid            u32        no   0 (or absent): the sender's own HELLO;
 *                                                else a host leader's connection (its pid)
 *     21   socket_ready          i32        no   0..2: 0 (or absent) not said, 1 ready for
 *                                                socket, 2 not ready (a root may then commit
 *                                                without the vote round: design.md)
 *     22   socket_why            string     no   < FACTS_SOCKET_WHY_LEN bytes
 *     23   frugal_ready          i32        no   0..2, as socket_ready, for frugal (auto
 *                                                chooses socket over a frugal a rank would veto)
 *     24   frugal_why            string     no   < FACTS_SOCKET_WHY_LEN bytes
 *     25   fabric_state          i32        no   0..2: 0 (or absent) not said, 1 read,
 *                                                2 could not be read (fabric_why says why)
 *     26   fabric_kind           i32        no   0..FABRIC_MIXED; with fabric_state 1, 0 (none)
 *                                                exactly when fabric_devices is 0
 *     27   fabric_devices        i32        no   0..FABRIC_MAX_COUNT
 *     28   fabric_gpus           i32        no   0..FABRIC_MAX_COUNT
 *     29   fabric_budget         i32        no   0..FABRIC_MAX_BUDGET (0: NCCLSHIM_FABRIC_BUDGET unset)
 *     30   fabric_why            string     no   < FABRIC_WHY_LEN bytes
 *     31   full_api              i32        no   0..1: 1, this rank's creator needs NCCL's whole
 *                                                API on the communicator (it never gets ipc)
 *     32   full_api_why          string     no   < FACTS_SOCKET_WHY_LEN bytes
 *     33   leader_addr           string     no   < RV_ADDR_LEN bytes: on a leader's connection, where it
 *                                                accepts other hosts' leaders (issue 34)
 *     34   engine                i32        no   0..15: enum engine_evidence bits (policy/evidence.h):
 *                                                whether this rank is an engine's worker, by title,
 *                                                frames or (weak) library; 0 (or absent) none
 *     35   engine_frame          i32        no   -1..EVIDENCE_MAX_FRAMES-1: the frame that matched
 *                                                the engine's frames (read only with the frames
 *                                                bit: absent decodes as 0)
 *     Tags 23-30 came with auto across hosts (issue 25), 31-32 with issue 32, 34-35 with issue 43
 *     (a root from before skips them and decides by names, as it did).  The frame version stays 1:
 *     a root from before skips them and decides as it did (socket), a rank from before
 *     sends none and counts as a host whose fabric cannot be judged (socket); a new
 *     version number would instead make each refuse the other's frames.
 *
 *   DECISION and COMMIT (struct rv_verdict)
 *      1   token                 16 bytes   yes
 *      2   action                i32        yes  0..ACTION_COUNT-1
 *      3   purpose               i32        yes  0..PURPOSE_INFERENCE
 *      4   final                 i32        yes  0..1; DECISION only: COMMIT does not
 *                                                carry it (an unknown tag there) and
 *                                                decodes as final = 1
 *      5   decision_id           u64        yes
 *      6   nhosts                i32        yes  0..FACTS_MAX_RANKS
 *      7   ntraining             i32        yes  0..FACTS_MAX_RANKS
 *      8   ninference            i32        yes  0..FACTS_MAX_RANKS
 *      9   nunknown              i32        yes  0..FACTS_MAX_RANKS
 *     10   purpose_reason        string     no   < RV_REASON_LEN bytes
 *     11   action_reason         string     no   < RV_REASON_LEN bytes
 *     12   fallback              i32        no   0..1: the rendezvous fell back, not the policy
 *                                                (issue 34; a rank from before skips it)
 *
 *   VOTE (struct rv_vote)
 *      1   token                 16 bytes   yes
 *      2   ok                    i32        yes  0..1
 *      3   reason                string     no   < RV_REASON_LEN bytes
 *      4   blob                  bytes      no   <= RV_BLOB_LEN bytes (bloblen = its length)
 *      5   rank                  i32        no   0..FACTS_MAX_RANKS-1: the voter, on a leader's
 *                                                connection (others' is their HELLO's rank)
 *
 *   PEERS (struct rv_peers)
 *      1   token                 16 bytes   yes
 *      2   peer                  i32 rank + bytes   no   rank 0..FACTS_MAX_RANKS-1, then
 *                                                <= RV_BLOB_LEN bytes; repeated, at most
 *                                                RV_MAX_PEERS times (npeers = count)
 *
 *   ABORT
 *      1   token                 16 bytes   yes
 *      2   reason                string     no   < RV_REASON_LEN bytes
 *
 *   REDIRECT (type 7, issue 34: a root from before never sends it)
 *      1   token                 16 bytes   yes
 *      2   to                    string     yes  < RV_ADDR_LEN bytes: "ip:port" of the leader to join
 *
 * Unknown tags are skipped.  rv_encode omits optional strings that are empty
 * and optional numbers that are 0, and rejects (returns 0) a message rv_decode would reject, so that whatever
 * it produces decodes to the same message.
 */
#include "rv_wire.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Integer fields are read and written as 4 bytes, enums included. */
_Static_assert(sizeof(int) == 4, "int is 32 bits");
_Static_assert(sizeof(enum api_family) == 4 && sizeof(enum role) == 4 && sizeof(enum purpose) == 4,
               "the enums of struct rank_facts are 32 bits");
_Static_assert(sizeof(enum rv_type) == 4, "enum rv_type is 32 bits");

#define TLV_HDR 4
#define MSIZE(member) sizeof(((struct rv_msg *)0)->member)
#define SLIM(member) (MSIZE(member) - 1) /* longest string a field takes */

/* Every string must fit a u16 TLV length. */
_Static_assert(EVIDENCE_REASON_LEN <= 65536 && FACTS_PATH_LEN <= 65536 && RV_REASON_LEN <= 65536 &&
                   EVIDENCE_FRAME_LEN <= 65536,
               "strings fit a TLV");

/* The largest HELLO payload: every field, every string at its limit, all frames. */
#define RV_HELLO_MAX_PAYLOAD                                                                              \
    (TLV_HDR + RV_TOKEN_LEN + 10 * (TLV_HDR + 4) + 2 * (TLV_HDR + SLIM(u.hello.host)) +                   \
     (TLV_HDR + SLIM(u.hello.fn)) + (TLV_HDR + SLIM(u.hello.shim_version)) +                              \
     (TLV_HDR + SLIM(u.hello_text.caller_lib)) + (TLV_HDR + SLIM(u.hello_text.title)) +                   \
     (TLV_HDR + SLIM(u.hello_text.role_reason)) + (TLV_HDR + SLIM(u.hello_text.local_purpose_reason)) +   \
     (TLV_HDR + 4) + (TLV_HDR + SLIM(u.hello_text.socket_why)) +                                          \
     (TLV_HDR + 4) + (TLV_HDR + SLIM(u.hello_text.frugal_why)) + 5 * (TLV_HDR + 4) +                      \
     (TLV_HDR + SLIM(u.hello.fabric.why)) + (TLV_HDR + 4) + (TLV_HDR + SLIM(u.hello_text.full_api_why)) + \
     2 * (TLV_HDR + 4) +                                                                                  \
     EVIDENCE_MAX_FRAMES * (TLV_HDR + EVIDENCE_FRAME_LEN - 1))
_Static_assert(RV_HELLO_MAX_PAYLOAD <= RV_MAX_PAYLOAD, "a maximal HELLO fits a frame");
#define RV_VERDICT_MAX_PAYLOAD                                                                           \
    (TLV_HDR + RV_TOKEN_LEN + 7 * (TLV_HDR + 4) + (TLV_HDR + 8) + 2 * (TLV_HDR + RV_REASON_LEN - 1))
_Static_assert(RV_VERDICT_MAX_PAYLOAD <= RV_MAX_PAYLOAD, "a maximal DECISION fits a frame");

enum kind { K_TOKEN, K_I32, K_U32, K_U64, K_STR, K_TXT, K_FRAME, K_BLOB, K_PEER };

#define REQ 1u           /* required */
#define DECISION_ONLY 2u /* not part of COMMIT */

struct field {
    uint16_t tag;
    uint8_t kind;
    uint8_t flags;
    const char *name;
    size_t off;          /* offsetof(struct rv_msg, ...); K_TXT, K_FRAME: offsetof(struct rank_text, ...) */
    size_t size;         /* strings: the destination's size (the limit is size - 1) */
    int64_t min, max;    /* K_I32 */
};

#define F_TOKEN { 1, K_TOKEN, REQ, "token", offsetof(struct rv_msg, token), RV_TOKEN_LEN, 0, 0 }
#define F_I32(tag, m, flags, lo, hi) { tag, K_I32, flags, #m, offsetof(struct rv_msg, m), 4, lo, hi }
#define F_U32(tag, m, flags) { tag, K_U32, flags, #m, offsetof(struct rv_msg, m), 4, 0, 0 }
#define F_U64(tag, m, flags) { tag, K_U64, flags, #m, offsetof(struct rv_msg, m), 8, 0, 0 }
/* An optional number of a nested struct, named as on the wire. */
#define F_I32N(tag, m, name, lo, hi) { tag, K_I32, 0, name, offsetof(struct rv_msg, m), 4, lo, hi }
#define F_STR(tag, m, flags) { tag, K_STR, flags, #m, offsetof(struct rv_msg, m), MSIZE(m), 0, 0 }
/* An optional string of a HELLO's text (struct rank_text), read through hello.text. */
#define F_TXT(tag, m) { tag, K_TXT, 0, #m, offsetof(struct rank_text, m), sizeof(((struct rank_text *)0)->m), 0, 0 }

/* #m gives "u.hello.rank": names are printed from after the last '.'. */
/* Every table starts with the token: rv_encode then sends it first, which
 * rv_frame_token (the root's early check of a stranger) relies on. */
static const struct field hello_fields[] = {
    F_TOKEN,
    F_I32(2, u.hello.rank, REQ, 0, FACTS_MAX_RANKS - 1),
    F_I32(3, u.hello.nranks, REQ, 1, FACTS_MAX_RANKS),
    F_U32(4, u.hello.pid, REQ),
    F_I32(5, u.hello.cuda_device, REQ, -1, INT32_MAX),
    F_I32(6, u.hello.nccl_version, REQ, INT32_MIN, INT32_MAX),
    F_STR(7, u.hello.host, REQ),
    F_STR(8, u.hello.host_id, REQ),
    F_STR(9, u.hello.fn, REQ),
    F_STR(10, u.hello.shim_version, 0),
    F_I32(11, u.hello.api, REQ, 0, API_CUPY),
    F_I32(12, u.hello.role, REQ, 0, ROLE_INFERENCE),
    F_I32(13, u.hello.local_purpose, REQ, 0, PURPOSE_INFERENCE),
    F_I32(14, u.hello.strict_error, REQ, 0, 1),
    F_TXT(15, caller_lib),
    F_TXT(16, title),
    F_TXT(17, role_reason),
    F_TXT(18, local_purpose_reason),
    { 19, K_FRAME, 0, "frame", offsetof(struct rank_text, frames), EVIDENCE_FRAME_LEN, 0, 0 },
    F_U32(20, leader_pid, 0),
    F_I32(21, u.hello.socket_ready, 0, 0, 2),
    F_TXT(22, socket_why),
    F_I32(23, u.hello.frugal_ready, 0, 0, 2),
    F_TXT(24, frugal_why),
    F_I32N(25, u.hello.fabric.state, "fabric_state", 0, FABRIC_UNREADABLE),
    F_I32N(26, u.hello.fabric.kind, "fabric_kind", 0, FABRIC_MIXED),
    F_I32N(27, u.hello.fabric.devices, "fabric_devices", 0, FABRIC_MAX_COUNT),
    F_I32N(28, u.hello.fabric.gpus, "fabric_gpus", 0, FABRIC_MAX_COUNT),
    F_I32N(29, u.hello.fabric.budget, "fabric_budget", 0, FABRIC_MAX_BUDGET),
    { 30, K_STR, 0, "fabric_why", offsetof(struct rv_msg, u.hello.fabric.why), MSIZE(u.hello.fabric.why), 0, 0 },
    F_I32(31, u.hello.full_api, 0, 0, 1),
    F_TXT(32, full_api_why),
    F_STR(33, leader_addr, 0),
    F_I32(34, u.hello.engine, 0, 0, ENGINE_ALL_BITS),
    F_I32(35, u.hello.engine_frame, 0, -1, EVIDENCE_MAX_FRAMES - 1),
};

static const struct field verdict_fields[] = {
    F_TOKEN,
    F_I32(2, u.verdict.action, REQ, 0, ACTION_COUNT - 1),
    F_I32(3, u.verdict.purpose, REQ, 0, PURPOSE_INFERENCE),
    F_I32(4, u.verdict.final, REQ | DECISION_ONLY, 0, 1),
    F_U64(5, u.verdict.decision_id, REQ),
    F_I32(6, u.verdict.nhosts, REQ, 0, FACTS_MAX_RANKS),
    F_I32(7, u.verdict.ntraining, REQ, 0, FACTS_MAX_RANKS),
    F_I32(8, u.verdict.ninference, REQ, 0, FACTS_MAX_RANKS),
    F_I32(9, u.verdict.nunknown, REQ, 0, FACTS_MAX_RANKS),
    F_STR(10, u.verdict.purpose_reason, 0),
    F_STR(11, u.verdict.action_reason, 0),
    F_I32(12, u.verdict.fallback, 0, 0, 1),
};

static const struct field vote_fields[] = {
    F_TOKEN,
    F_I32(2, u.vote.ok, REQ, 0, 1),
    F_STR(3, u.vote.reason, 0),
    { 4, K_BLOB, 0, "blob", offsetof(struct rv_msg, u.vote.blob), RV_BLOB_LEN, 0, 0 },
    F_I32(5, u.vote.rank, 0, 0, FACTS_MAX_RANKS - 1),
};

static const struct field redirect_fields[] = {
    F_TOKEN,
    F_STR(2, u.to, REQ),
};

static const struct field abort_fields[] = {
    F_TOKEN,
    F_STR(2, u.reason, 0),
};

static const struct field peers_fields[] = {
    F_TOKEN,
    { 2, K_PEER, 0, "peer", offsetof(struct rv_msg, u.peers.peer), 4 + RV_BLOB_LEN, 0, 0 },
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* Tags seen are tracked in a 64-bit mask, by index in the table. */
_Static_assert(COUNT(hello_fields) <= 64 && COUNT(verdict_fields) <= 64 && COUNT(vote_fields) <= 64 &&
                   COUNT(peers_fields) <= 64 && COUNT(abort_fields) <= 64 && COUNT(redirect_fields) <= 64,
               "field tables fit a 64-bit mask");

struct msg_desc {
    const char *name;
    const struct field *fields;
    size_t nfields;
};

static const struct msg_desc *desc_of(unsigned type)
{
    static const struct msg_desc descs[] = {
        [RV_HELLO] = { "HELLO", hello_fields, COUNT(hello_fields) },
        [RV_DECISION] = { "DECISION", verdict_fields, COUNT(verdict_fields) },
        [RV_VOTE] = { "VOTE", vote_fields, COUNT(vote_fields) },
        [RV_COMMIT] = { "COMMIT", verdict_fields, COUNT(verdict_fields) },
        [RV_PEERS] = { "PEERS", peers_fields, COUNT(peers_fields) },
        [RV_ABORT] = { "ABORT", abort_fields, COUNT(abort_fields) },
        [RV_REDIRECT] = { "REDIRECT", redirect_fields, COUNT(redirect_fields) },
    };
    if (type >= COUNT(descs) || !descs[type].name)
        return NULL;
    return &descs[type];
}

/* Whether field `f` belongs to messages of `type`. */
static int in_type(const struct field *f, unsigned type)
{
    return !((f->flags & DECISION_ONLY) && type != RV_DECISION);
}

static const char *short_name(const struct field *f)
{
    const char *dot = strrchr(f->name, '.');
    return dot ? dot + 1 : f->name;
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Checks the header at `buf` (RV_HEADER_LEN bytes); sets *type and *plen. */
static int check_header(const uint8_t *buf, unsigned *type, uint32_t *plen, char *err, size_t errlen)
{
    uint32_t magic = get32(buf);
    unsigned version = get16(buf + 4);
    *type = get16(buf + 6);
    *plen = get32(buf + 8);
    if (magic != RV_MAGIC)
        return fail(err, errlen, "bad magic 0x%08x, want 0x%08x (\"NSRV\")", (unsigned)magic, RV_MAGIC);
    if (version != RV_VERSION)
        return fail(err, errlen, "protocol version %u, this shim speaks %u", version, (unsigned)RV_VERSION);
    if (!desc_of(*type))
        return fail(err, errlen, "unknown message type %u", *type);
    if (*plen > RV_MAX_PAYLOAD)
        return fail(err, errlen, "%s: payload length %u is over the limit %u", desc_of(*type)->name,
                    (unsigned)*plen, (unsigned)RV_MAX_PAYLOAD);
    return 0;
}

long rv_frame_length(const uint8_t *buf, size_t have, char *err, size_t errlen)
{
    unsigned type;
    uint32_t plen;
    if (have < RV_HEADER_LEN)
        return 0;
    if (check_header(buf, &type, &plen, err, errlen) < 0)
        return -1;
    return (long)RV_HEADER_LEN + (long)plen;
}

int rv_frame_token(const uint8_t *buf, size_t have, uint8_t token[RV_TOKEN_LEN])
{
    if (have < RV_HEADER_LEN)
        return 0;
    if (rv_frame_length(buf, have, NULL, 0) < 0)
        return -1;
    uint32_t plen = get32(buf + 8);
    if (plen < TLV_HDR + RV_TOKEN_LEN)
        return -1;
    if (have < RV_HEADER_LEN + TLV_HDR + RV_TOKEN_LEN)
        return 0;
    const uint8_t *p = buf + RV_HEADER_LEN;
    if (get16(p) != 1 || get16(p + 2) != RV_TOKEN_LEN)
        return -1;
    memcpy(token, p + TLV_HDR, RV_TOKEN_LEN);
    return 1;
}

static int32_t get_i32(const uint8_t *base, size_t off)
{
    int32_t v;
    memcpy(&v, base + off, sizeof(v));
    return v;
}

/* Cross-field checks, after every field is known. */
static int check_message(const struct rv_msg *m, const char *name, char *err, size_t errlen)
{
    if (m->type == RV_HELLO && m->u.hello.rank >= m->u.hello.nranks)
        return fail(err, errlen, "%s: rank %d is outside 0..%d (nranks %d)", name, m->u.hello.rank,
                    m->u.hello.nranks - 1, m->u.hello.nranks);
    if (m->type == RV_HELLO && m->u.hello.fabric.state == FABRIC_READ &&
        (m->u.hello.fabric.kind == FABRIC_NONE) != (m->u.hello.fabric.devices == 0))
        return fail(err, errlen, "%s: fabric_kind %d with %d fabric_devices (kind 0, none, goes with 0 devices only)",
                    name, m->u.hello.fabric.kind, m->u.hello.fabric.devices);
    return 0;
}

/* A field's value has the length its kind allows (strings: no NUL inside). */
static int check_value(const struct msg_desc *d, const struct field *f, unsigned tag, unsigned tl, const uint8_t *v,
                       char *err, size_t errlen)
{
    const char *fname = short_name(f);
    switch (f->kind) {
    case K_TOKEN:
    case K_I32:
    case K_U32:
    case K_U64:
        if (tl != f->size)
            return fail(err, errlen, "%s: tag %u (%s) is %u bytes, it must be %zu", d->name, tag, fname, tl,
                        f->size);
        break;
    case K_BLOB:
        if (tl > f->size)
            return fail(err, errlen, "%s: tag %u (%s) is %u bytes, the limit is %zu", d->name, tag, fname, tl,
                        f->size);
        break;
    case K_PEER:
        if (tl < 4 || tl > f->size)
            return fail(err, errlen, "%s: tag %u (%s) is %u bytes, it must be 4..%zu", d->name, tag, fname, tl,
                        f->size);
        break;
    default:
        if (tl > f->size - 1)
            return fail(err, errlen, "%s: tag %u (%s) is %u bytes, the limit is %zu", d->name, tag, fname, tl,
                        f->size - 1);
        const uint8_t *nul = memchr(v, 0, tl);
        if (nul)
            return fail(err, errlen, "%s: tag %u (%s) has a NUL byte at offset %zu", d->name, tag, fname,
                        (size_t)(nul - v));
        break;
    }
    return 0;
}

/* Stores a checked value into its place in `m`; numbers are range-checked here. */
static int store_value(struct rv_msg *m, const struct msg_desc *d, const struct field *f, unsigned tag, unsigned tl,
                       const uint8_t *v, char *err, size_t errlen)
{
    uint8_t *base = (uint8_t *)m;
    const char *fname = short_name(f);
    switch (f->kind) {
    case K_TOKEN:
        memcpy(base + f->off, v, RV_TOKEN_LEN);
        break;
    case K_I32: {
        uint32_t u = get32(v);
        int32_t x;
        memcpy(&x, &u, sizeof(x));
        if (x < f->min || x > f->max)
            return fail(err, errlen, "%s: tag %u (%s) is %d, outside %lld..%lld", d->name, tag, fname, (int)x,
                        (long long)f->min, (long long)f->max);
        memcpy(base + f->off, &x, sizeof(x));
        break;
    }
    case K_U32: {
        uint32_t u = get32(v);
        memcpy(base + f->off, &u, sizeof(u));
        break;
    }
    case K_U64: {
        uint64_t u = get64(v);
        memcpy(base + f->off, &u, sizeof(u));
        break;
    }
    case K_STR:
        memcpy(base + f->off, v, tl);
        break;
    case K_TXT:
        memcpy((uint8_t *)&m->u.hello_text + f->off, v, tl);
        break;
    case K_BLOB:
        memcpy(m->u.vote.blob, v, tl);
        m->u.vote.bloblen = (int)tl;
        break;
    case K_PEER: {
        if (m->u.peers.npeers >= RV_MAX_PEERS)
            return fail(err, errlen, "%s: tag %u (%s) appears more than %d times", d->name, tag, fname,
                        RV_MAX_PEERS);
        uint32_t u = get32(v);
        if (u >= FACTS_MAX_RANKS)
            return fail(err, errlen, "%s: tag %u (%s) names rank %u, outside 0..%d", d->name, tag, fname,
                        (unsigned)u, FACTS_MAX_RANKS - 1);
        struct rv_peer *pe = &m->u.peers.peer[m->u.peers.npeers++];
        pe->rank = (int)u;
        pe->bloblen = (int)tl - 4;
        memcpy(pe->blob, v + 4, tl - 4);
        break;
    }
    case K_FRAME:
        if (m->u.hello.nframes >= EVIDENCE_MAX_FRAMES)
            return fail(err, errlen, "%s: tag %u (%s) appears more than %d times", d->name, tag, fname,
                        EVIDENCE_MAX_FRAMES);
        memcpy(m->u.hello_text.frames[m->u.hello.nframes++], v, tl);
        break;
    }
    return 0;
}

int rv_decode(const uint8_t *buf, size_t len, struct rv_msg *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    /* A HELLO's strings go into the message itself (the root interns them,
     * rv_texts.c); set first, so that even a failed decode reads as empty. */
    m->u.hello.text = &m->u.hello_text;
    if (len < RV_HEADER_LEN)
        return fail(err, errlen, "truncated header: %zu bytes, a header is %d", len, RV_HEADER_LEN);
    unsigned type;
    uint32_t plen;
    if (check_header(buf, &type, &plen, err, errlen) < 0)
        return -1;
    const struct msg_desc *d = desc_of(type);
    if (len != (size_t)RV_HEADER_LEN + plen)
        return fail(err, errlen, "%s: the frame is %zu bytes, the header says %d + %u", d->name, len,
                    RV_HEADER_LEN, (unsigned)plen);
    m->type = (enum rv_type)type;

    const uint8_t *p = buf + RV_HEADER_LEN;
    size_t pos = 0;
    uint64_t seen = 0;
    while (pos < plen) {
        if (plen - pos < TLV_HDR)
            return fail(err, errlen, "%s: %zu trailing bytes at payload offset %zu, shorter than a TLV header",
                        d->name, (size_t)plen - pos, pos);
        unsigned tag = get16(p + pos), tl = get16(p + pos + 2);
        if (tl > plen - pos - TLV_HDR)
            return fail(err, errlen, "%s: tag %u at payload offset %zu is %u bytes, past the payload's end (%zu left)",
                        d->name, tag, pos, tl, (size_t)plen - pos - TLV_HDR);
        const uint8_t *v = p + pos + TLV_HDR;
        pos += TLV_HDR + tl;

        size_t i;
        for (i = 0; i < d->nfields; i++)
            if (d->fields[i].tag == tag && in_type(&d->fields[i], type))
                break;
        if (i == d->nfields)
            continue; /* unknown: a newer peer's, skipped */
        const struct field *f = &d->fields[i];
        const char *fname = short_name(f);
        if (f->kind != K_FRAME && f->kind != K_PEER && (seen >> i & 1u))
            return fail(err, errlen, "%s: tag %u (%s) appears twice", d->name, tag, fname);
        seen |= (uint64_t)1 << i;

        if (check_value(d, f, tag, tl, v, err, errlen) < 0 || store_value(m, d, f, tag, tl, v, err, errlen) < 0)
            return -1;
    }

    for (size_t i = 0; i < d->nfields; i++) {
        const struct field *f = &d->fields[i];
        if ((f->flags & REQ) && in_type(f, type) && !(seen >> i & 1u))
            return fail(err, errlen, "%s: missing tag %s", d->name, short_name(f));
    }
    if (type == RV_COMMIT)
        m->u.verdict.final = 1;
    return check_message(m, d->name, err, errlen);
}

struct writer {
    uint8_t *buf;
    size_t cap, pos;
    int bad;
};

static void put_tlv(struct writer *w, unsigned tag, const void *data, size_t n)
{
    if (w->bad || n > UINT16_MAX || w->pos > w->cap || w->cap - w->pos < TLV_HDR + n) {
        w->bad = 1;
        return;
    }
    put16(w->buf + w->pos, (uint16_t)tag);
    put16(w->buf + w->pos + 2, (uint16_t)n);
    if (n)
        memcpy(w->buf + w->pos + TLV_HDR, data, n);
    w->pos += TLV_HDR + n;
}

/* One field that is one TLV (or none, when 0 and optional): 0, or -1 if its value is out of range. */
static int put_scalar(struct writer *w, const struct rv_msg *m, const struct field *f)
{
    const uint8_t *base = (const uint8_t *)m;
    uint8_t tmp[8];
    switch (f->kind) {
    case K_TOKEN:
        put_tlv(w, f->tag, m->token, RV_TOKEN_LEN);
        break;
    case K_I32: {
        int32_t x = get_i32(base, f->off);
        if (x < f->min || x > f->max)
            return -1;
        uint32_t u;
        memcpy(&u, &x, sizeof(u));
        put32(tmp, u);
        if (x || (f->flags & REQ))
            put_tlv(w, f->tag, tmp, 4);
        break;
    }
    case K_U32: {
        uint32_t u;
        memcpy(&u, base + f->off, sizeof(u));
        put32(tmp, u);
        if (u || (f->flags & REQ))
            put_tlv(w, f->tag, tmp, 4);
        break;
    }
    case K_U64: {
        uint64_t u;
        memcpy(&u, base + f->off, sizeof(u));
        put64(tmp, u);
        put_tlv(w, f->tag, tmp, 8);
        break;
    }
    case K_STR:
    case K_TXT: {
        const struct rank_text *t = m->u.hello.text;
        const char *s = f->kind != K_TXT ? (const char *)(base + f->off) : t ? (const char *)t + f->off : "";
        size_t n = strnlen(s, f->size);
        if (n == f->size)
            return -1; /* not terminated */
        if (n || (f->flags & REQ))
            put_tlv(w, f->tag, s, n);
        break;
    }
    case K_BLOB:
        if (m->u.vote.bloblen < 0 || m->u.vote.bloblen > RV_BLOB_LEN)
            return -1;
        if (m->u.vote.bloblen)
            put_tlv(w, f->tag, m->u.vote.blob, (size_t)m->u.vote.bloblen);
        break;
    default:
        break;
    }
    return 0;
}

/* PEERS' list: a TLV per peer (its rank, then its blob): 0, or -1 if one is out of range. */
static int put_peers(struct writer *w, const struct rv_msg *m, const struct field *f)
{
    if (m->u.peers.npeers < 0 || m->u.peers.npeers > RV_MAX_PEERS)
        return -1;
    for (int k = 0; k < m->u.peers.npeers; k++) {
        const struct rv_peer *pe = &m->u.peers.peer[k];
        uint8_t one[4 + RV_BLOB_LEN];
        if (pe->rank < 0 || pe->rank >= FACTS_MAX_RANKS || pe->bloblen < 0 || pe->bloblen > RV_BLOB_LEN)
            return -1;
        put32(one, (uint32_t)pe->rank);
        memcpy(one + 4, pe->blob, (size_t)pe->bloblen);
        put_tlv(w, f->tag, one, 4 + (size_t)pe->bloblen);
    }
    return 0;
}

/* HELLO's call stack: a TLV per frame: 0, or -1 if there are too many or one is not terminated. */
static int put_frames(struct writer *w, const struct rv_msg *m, const struct field *f)
{
    if (m->u.hello.nframes < 0 || m->u.hello.nframes > EVIDENCE_MAX_FRAMES)
        return -1;
    const struct rank_text *t = m->u.hello.nframes ? m->u.hello.text : NULL;
    if (m->u.hello.nframes && !t)
        return -1;
    for (int k = 0; k < m->u.hello.nframes; k++) {
        size_t n = strnlen(t->frames[k], EVIDENCE_FRAME_LEN);
        if (n == EVIDENCE_FRAME_LEN)
            return -1;
        put_tlv(w, f->tag, t->frames[k], n);
    }
    return 0;
}

size_t rv_encode(const struct rv_msg *m, uint8_t *buf, size_t cap)
{
    const struct msg_desc *d = desc_of((unsigned)m->type);
    if (!d || cap < RV_HEADER_LEN)
        return 0;
    if (check_message(m, d->name, NULL, 0) < 0)
        return 0;
    struct writer w = { buf, cap, RV_HEADER_LEN, 0 };
    for (size_t i = 0; i < d->nfields && !w.bad; i++) {
        const struct field *f = &d->fields[i];
        if (!in_type(f, (unsigned)m->type))
            continue;
        int rc = f->kind == K_PEER    ? put_peers(&w, m, f)
                 : f->kind == K_FRAME ? put_frames(&w, m, f)
                                      : put_scalar(&w, m, f);
        if (rc != 0)
            return 0;
    }
    if (w.bad || w.pos - RV_HEADER_LEN > RV_MAX_PAYLOAD)
        return 0;
    put32(buf, RV_MAGIC);
    put16(buf + 4, RV_VERSION);
    put16(buf + 6, (uint16_t)m->type);
    put32(buf + 8, (uint32_t)(w.pos - RV_HEADER_LEN));
    return w.pos;
}

/* A message of `type` for the ID `token` with the string `text` (its one field). */
static void make_text(struct rv_msg *m, enum rv_type type, const uint8_t token[RV_TOKEN_LEN], char *field,
                      size_t cap, const char *text)
{
    m->type = type;
    memcpy(m->token, token, RV_TOKEN_LEN);
    snprintf(field, cap, "%s", text);
}

void rv_make_abort(struct rv_msg *m, const uint8_t token[RV_TOKEN_LEN], const char *why)
{
    memset(m, 0, sizeof(*m));
    make_text(m, RV_ABORT, token, m->u.reason, sizeof(m->u.reason), why);
}

void rv_make_redirect(struct rv_msg *m, const uint8_t token[RV_TOKEN_LEN], const char *to)
{
    memset(m, 0, sizeof(*m));
    make_text(m, RV_REDIRECT, token, m->u.to, sizeof(m->u.to), to);
}

int rv_token_equal(const uint8_t a[RV_TOKEN_LEN], const uint8_t b[RV_TOKEN_LEN])
{
    /* No early exit: every byte is read whatever the differences. */
    volatile unsigned diff = 0;
    for (size_t i = 0; i < RV_TOKEN_LEN; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    /* diff is 0..255: adding 255 carries into bit 8 unless it is 0. */
    return (int)(1u ^ ((diff + 255u) >> 8));
}
