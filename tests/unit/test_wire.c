/*
 * Unit tests of shim/rendezvous/rv_wire.c: round trips of every message type, and every
 * class of malformed frame rejected with its reason.  TAP output.
 *
 * `test_wire --corpus DIR` instead writes valid frames of every type into DIR
 * (the seeds of tests/fuzz/corpus/wire).
 */
#include "tap.h"
#include "rv_wire.h"
#include "wire_same.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ok() on a rejection: the call failed and `err` contains `want`. */
static void rejects(int rc, const char *err, const char *want, const char *what)
{
    int good = rc < 0 && strstr(err, want) != NULL;
    ok(good, "%s", what);
    if (!good)
        printf("#   rc %d, err '%s', want '%s'\n", rc, err, want);
}

/* Fills a string field with n bytes of a recognizable pattern. */
static void fill(char *dst, size_t n, char seed)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (char)('a' + (seed + i) % 26);
    dst[n] = '\0';
}

#define FILL_MAX(field, seed) fill(field, sizeof(field) - 1, seed)

static void hello_max(struct rv_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = RV_HELLO;
    for (int i = 0; i < RV_TOKEN_LEN; i++)
        m->token[i] = (uint8_t)(0xf0 + i);
    struct rank_facts *h = &m->u.hello;
    h->text = &m->u.hello_text;
    h->rank = FACTS_MAX_RANKS - 1;
    h->nranks = FACTS_MAX_RANKS;
    h->pid = 0xfffffffeu;
    FILL_MAX(h->host, 1);
    FILL_MAX(h->host_id, 2);
    h->cuda_device = 2147483647;
    FILL_MAX(h->fn, 3);
    h->nccl_version = -2147483647 - 1;
    FILL_MAX(h->shim_version, 4);
    h->api = API_CUPY;
    FILL_MAX(m->u.hello_text.caller_lib, 5);
    FILL_MAX(m->u.hello_text.title, 6);
    h->role = ROLE_INFERENCE;
    FILL_MAX(m->u.hello_text.role_reason, 7);
    h->local_purpose = PURPOSE_INFERENCE;
    FILL_MAX(m->u.hello_text.local_purpose_reason, 8);
    h->nframes = EVIDENCE_MAX_FRAMES;
    for (int i = 0; i < EVIDENCE_MAX_FRAMES; i++)
        FILL_MAX(m->u.hello_text.frames[i], (char)(9 + i));
    h->strict_error = 1;
    h->socket_ready = 2;
    FILL_MAX(m->u.hello_text.socket_why, 17);
    h->frugal_ready = 2;
    FILL_MAX(m->u.hello_text.frugal_why, 18);
    h->fabric.state = FABRIC_UNREADABLE; /* every field at its maximum: not a READ, whose kind must fit devices */
    h->fabric.kind = FABRIC_MIXED;
    h->fabric.devices = FABRIC_MAX_COUNT;
    h->fabric.gpus = FABRIC_MAX_COUNT;
    h->fabric.budget = FABRIC_MAX_BUDGET;
    FILL_MAX(h->fabric.why, 19);
    h->full_api = 1;
    FILL_MAX(m->u.hello_text.full_api_why, 20);
    h->engine = ENGINE_ALL_BITS;
    h->engine_frame = EVIDENCE_MAX_FRAMES - 1;
    m->leader_pid = 0xfffffffdu;
    FILL_MAX(m->leader_addr, 21);
}

/* Required fields only, every one at its smallest. */
static void hello_min(struct rv_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = RV_HELLO;
    m->u.hello.text = &m->u.hello_text;
    m->u.hello.nranks = 1;
    m->u.hello.cuda_device = -1;
}

static void verdict_max(struct rv_msg *m, enum rv_type type)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    memset(m->token, 0xa5, RV_TOKEN_LEN);
    struct rv_verdict *v = &m->u.verdict;
    v->action = ACTION_COUNT - 1;
    v->purpose = PURPOSE_INFERENCE;
    v->final = 1;
    v->decision_id = 0xfedcba9876543210ull;
    v->nhosts = v->ntraining = v->ninference = v->nunknown = FACTS_MAX_RANKS;
    FILL_MAX(v->purpose_reason, 1);
    FILL_MAX(v->action_reason, 2);
}

static void verdict_min(struct rv_msg *m, enum rv_type type)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->u.verdict.final = type == RV_COMMIT;
}

static void vote_max(struct rv_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = RV_VOTE;
    memset(m->token, 0xff, RV_TOKEN_LEN);
    m->u.vote.ok = 1;
    m->u.vote.rank = FACTS_MAX_RANKS - 1;
    FILL_MAX(m->u.vote.reason, 3);
}

/* ABORT: a leader's or a rank's reason for giving up, at its longest. */
static void abort_max(struct rv_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = RV_ABORT;
    memset(m->token, 0xa5, RV_TOKEN_LEN);
    FILL_MAX(m->u.reason, 5);
}

static void vote_min(struct rv_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = RV_VOTE;
}


/* ---- Frames as lists of TLVs, to build malformed ones. ---- */

#define MAX_ITEMS 64
struct item {
    unsigned tag;
    size_t len;
    uint8_t v[2048];
};
struct frame {
    unsigned type;
    int n;
    struct item it[MAX_ITEMS];
};

static unsigned get16(const uint8_t *p) { return (unsigned)(p[0] | p[1] << 8); }
static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A well-formed frame (from rv_encode) into a list. */
static void split(const uint8_t *buf, size_t len, struct frame *f)
{
    f->type = get16(buf + 6);
    f->n = 0;
    for (size_t pos = RV_HEADER_LEN; pos + 4 <= len && f->n < MAX_ITEMS; f->n++) {
        struct item *it = &f->it[f->n];
        it->tag = get16(buf + pos);
        it->len = get16(buf + pos + 2);
        memcpy(it->v, buf + pos + 4, it->len);
        pos += 4 + it->len;
    }
}

/* The list back into a frame; returns its length. */
static size_t join(const struct frame *f, uint8_t *buf)
{
    size_t pos = RV_HEADER_LEN;
    for (int i = 0; i < f->n; i++) {
        put16(buf + pos, f->it[i].tag);
        put16(buf + pos + 2, (unsigned)f->it[i].len);
        memcpy(buf + pos + 4, f->it[i].v, f->it[i].len);
        pos += 4 + f->it[i].len;
    }
    put32(buf, RV_MAGIC);
    put16(buf + 4, RV_VERSION);
    put16(buf + 6, f->type);
    put32(buf + 8, (uint32_t)(pos - RV_HEADER_LEN));
    return pos;
}

static struct item *find(struct frame *f, unsigned tag)
{
    for (int i = 0; i < f->n; i++)
        if (f->it[i].tag == tag)
            return &f->it[i];
    return NULL;
}

/* find() where the tag must be there. */
static struct item *must_find(struct frame *f, unsigned tag)
{
    struct item *it = find(f, tag);
    if (!it) {
        printf("Bail out! tag %u is not in the frame\n", tag);
        exit(1);
    }
    return it;
}

static void drop(struct frame *f, unsigned tag)
{
    for (int i = 0; i < f->n; i++)
        if (f->it[i].tag == tag) {
            memmove(&f->it[i], &f->it[i + 1], (size_t)(f->n - i - 1) * sizeof(f->it[0]));
            f->n--;
            return;
        }
}

static void append(struct frame *f, unsigned tag, const void *v, size_t len)
{
    if (f->n == MAX_ITEMS || len > sizeof(f->it[0].v)) {
        printf("Bail out! the test frame is full\n");
        exit(1);
    }
    struct item *it = &f->it[f->n++];
    it->tag = tag;
    it->len = len;
    memcpy(it->v, v, len);
}

static void set_i32(struct frame *f, unsigned tag, int32_t x)
{
    struct item *it = must_find(f, tag);
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    put32(it->v, u);
    it->len = 4;
}

static void set_bytes(struct frame *f, unsigned tag, const void *v, size_t len)
{
    struct item *it = find(f, tag);
    if (!it)
        it = &f->it[f->n++], it->tag = tag;
    memcpy(it->v, v, len);
    it->len = len;
}

static uint8_t buf[RV_MAX_FRAME + 64], buf2[RV_MAX_FRAME + 64];
static struct frame fr;
static struct rv_msg in, out;
static char err[512];

/* Encodes `m` and splits it into fr. */
static void start(const struct rv_msg *m)
{
    size_t len = rv_encode(m, buf, sizeof(buf));
    if (!len) {
        printf("Bail out! rv_encode failed on a valid message\n");
        exit(1);
    }
    split(buf, len, &fr);
}

static int decode_fr(void)
{
    size_t len = join(&fr, buf);
    err[0] = '\0';
    return rv_decode(buf, len, &out, err, sizeof(err));
}

static void round_trip(const struct rv_msg *m, const char *what)
{
    char desc[160];
    size_t len = rv_encode(m, buf, sizeof(buf));
    err[0] = '\0';
    int rc = len ? rv_decode(buf, len, &out, err, sizeof(err)) : -1;
    int good = len > 0 && rc == 0 && rv_msg_same(m, &out);
    /* The same frame again, from the decoded message. */
    size_t len2 = good ? rv_encode(&out, buf2, sizeof(buf2)) : 0;
    good = good && len2 == len && memcmp(buf, buf2, len) == 0;
    /* rv_frame_length agrees, and every shorter prefix is not a whole frame. */
    good = good && rv_frame_length(buf, len, NULL, 0) == (long)len;
    good = good && rv_encode(m, buf2, len - 1) == 0 && rv_encode(m, buf2, len) == len;
    snprintf(desc, sizeof(desc), "round trip: %s (%zu bytes)", what, len);
    ok(good, "%s", desc);
    if (!good)
        printf("#   len %zu, rc %d, err '%s'\n", len, rc, err);
}

static int write_corpus(const char *dir)
{
    struct { const char *name; void (*make)(struct rv_msg *); } seeds[] = {
        { "hello_max", hello_max }, { "hello_min", hello_min }, { "vote_max", vote_max }, { "vote_min", vote_min },
    };
    struct rv_msg m;
    char path[4096];
    for (int k = 0; k < (int)(sizeof(seeds) / sizeof(seeds[0])) + 4; k++) {
        const char *name;
        if (k < 4) {
            seeds[k].make(&m);
            name = seeds[k].name;
        } else {
            enum rv_type t = k < 6 ? RV_DECISION : RV_COMMIT;
            if (k % 2)
                verdict_min(&m, t);
            else
                verdict_max(&m, t);
            const char *names[] = { "decision_max", "decision_min", "commit_max", "commit_min" };
            name = names[k - 4];
        }
        size_t len = rv_encode(&m, buf, sizeof(buf));
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "wb");
        if (!len || !f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "test_wire: cannot write %s\n", path);
            return 1;
        }
    }
    /* A mid-sized HELLO with two frames and an unknown tag. */
    hello_min(&m);
    strcpy(m.u.hello.host, "node-1");
    strcpy(m.u.hello.host_id, "3f1c2a9e-boot");
    strcpy(m.u.hello.fn, "ncclCommInitRank");
    m.u.hello.nranks = 4;
    m.u.hello.rank = 2;
    m.u.hello.nframes = 2;
    strcpy(m.u.hello_text.frames[0], "/x/vllm/distributed/pynccl.py:99 __init__");
    strcpy(m.u.hello_text.frames[1], "/x/nemo_rl/vllm_backend.py:120 init_collective");
    size_t len = rv_encode(&m, buf, sizeof(buf));
    split(buf, len, &fr);
    append(&fr, 4000, "future", 6);
    len = join(&fr, buf);
    snprintf(path, sizeof(path), "%s/hello_frames_unknown_tag", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "test_wire: cannot write %s\n", path);
        return 1;
    }
    abort_max(&m);
    len = rv_encode(&m, buf, sizeof(buf));
    snprintf(path, sizeof(path), "%s/abort_max", dir);
    f = fopen(path, "wb");
    if (!len || !f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "test_wire: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* Independently of rv_wire.c: the largest HELLO payload, every string at its limit. */
static size_t hello_max_payload(void)
{
    struct rank_facts h;
    struct rank_text x;
    size_t t = 4; /* a TLV's header */
    return (t + RV_TOKEN_LEN) + 20 * (t + 4) + (t + sizeof(x.socket_why) - 1) + (t + sizeof(x.frugal_why) - 1) +
           (t + sizeof(h.fabric.why) - 1) + (t + sizeof(x.full_api_why) - 1) + (t + sizeof(h.host) - 1) +
           (t + sizeof(h.host_id) - 1) +
           (t + sizeof(h.fn) - 1) + (t + sizeof(h.shim_version) - 1) + (t + sizeof(x.caller_lib) - 1) +
           (t + sizeof(x.title) - 1) + (t + sizeof(x.role_reason) - 1) + (t + sizeof(x.local_purpose_reason) - 1) +
           EVIDENCE_MAX_FRAMES * (t + sizeof(x.frames[0]) - 1) + (t + RV_ADDR_LEN - 1);
}

/* Tags 23-30 (issue 25): frugal readiness and the host's fabric. */
static void test_fabric_fields(void)
{
    size_t len;
    hello_min(&in);
    in.u.hello.frugal_ready = 1;
    in.u.hello.fabric = (struct fabric_facts){ FABRIC_READ, FABRIC_IB, 2, 8, 24, "" };
    round_trip(&in, "HELLO, frugal ready, an InfiniBand fabric of 2 devices, 8 GPUs, budget 24");
    in.u.hello.fabric = (struct fabric_facts){ FABRIC_READ, FABRIC_NONE, 0, 4, 0, "" };
    round_trip(&in, "HELLO, a host without RDMA devices (kind none, 0 devices)");
    in.u.hello.fabric = (struct fabric_facts){ FABRIC_UNREADABLE, 0, 0, 0, 0, "cannot list /sys/class/infiniband" };
    in.u.hello.frugal_ready = 2;
    strcpy(in.u.hello_text.frugal_why, "NCCL 21605 has no ncclConfig_t.minCTAs/maxCTAs (2.17 or later needed)");
    round_trip(&in, "HELLO, fabric unreadable with its reason, frugal not ready with its reason");
    /* Tags 34-35 (issue 43): the engine evidence, round trip and absent. */
    hello_min(&in);
    in.u.hello.engine = ENGINE_TITLE | ENGINE_FRAMES | ENGINE_LIB;
    in.u.hello.engine_frame = 3;
    round_trip(&in, "HELLO, an engine worker by its title and frame 3, its library loaded");
    in.u.hello.engine = ENGINE_LIB | ENGINE_ROLE_BY_LIB;
    in.u.hello.engine_frame = -1;
    round_trip(&in, "HELLO, only an engine library, no frame");
    /* A HELLO of a shim from before: none of the tags, and it decodes as "not said". */
    hello_min(&in);
    len = rv_encode(&in, buf, sizeof(buf));
    ok(len && rv_decode(buf, len, &out, err, sizeof(err)) == 0 && out.u.hello.fabric.state == FABRIC_NOT_SAID &&
           out.u.hello.frugal_ready == 0 && out.u.hello.engine == 0,
       "a HELLO without tags 23-30 (an older shim's) decodes with fabric and frugal not said");
    /* Encode refuses what decode would: kind none with devices, a kind with none. */
    in.u.hello.fabric = (struct fabric_facts){ FABRIC_READ, FABRIC_NONE, 3, 0, 0, "" };
    ok(rv_encode(&in, buf, sizeof(buf)) == 0, "encode refuses a READ fabric of kind none with 3 devices");
    in.u.hello.fabric = (struct fabric_facts){ FABRIC_READ, FABRIC_EFA, 0, 0, 0, "" };
    ok(rv_encode(&in, buf, sizeof(buf)) == 0, "encode refuses a READ EFA fabric with 0 devices");
    /* Decode rejects each out-of-range value, naming the tag. */
    struct { unsigned tag; int32_t v; const char *want; } bad[] = {
        { 23, 3, "tag 23 (frugal_ready) is 3, outside 0..2" },
        { 31, 2, "tag 31 (full_api) is 2, outside 0..1" },
        { 34, 16, "tag 34 (engine) is 16, outside 0..15" },
        { 35, EVIDENCE_MAX_FRAMES, "tag 35 (engine_frame) is 8, outside -1..7" },
        { 35, -2, "tag 35 (engine_frame) is -2, outside -1..7" },
        { 25, 3, "tag 25 (fabric_state) is 3, outside 0..2" },
        { 25, -1, "tag 25 (fabric_state) is -1, outside 0..2" },
        { 26, 4, "tag 26 (fabric_kind) is 4, outside 0..3" },
        { 27, FABRIC_MAX_COUNT + 1, "tag 27 (fabric_devices) is 65537, outside 0..65536" },
        { 28, -5, "tag 28 (fabric_gpus) is -5, outside 0..65536" },
        { 29, FABRIC_MAX_BUDGET + 1, "tag 29 (fabric_budget) is 16777217, outside 0..16777216" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hello_min(&in);
        in.u.hello.frugal_ready = 1;
        in.u.hello.full_api = 1;
        in.u.hello.engine = ENGINE_FRAMES;
        in.u.hello.engine_frame = 1;
        in.u.hello.fabric = (struct fabric_facts){ FABRIC_READ, FABRIC_IB, 1, 1, 1, "" };
        start(&in);
        set_i32(&fr, bad[i].tag, bad[i].v);
        char what[160];
        snprintf(what, sizeof(what), "decode rejects tag %u = %d", bad[i].tag, (int)bad[i].v);
        rejects(decode_fr(), err, bad[i].want, what);
    }
    hello_min(&in);
    in.u.hello.fabric = (struct fabric_facts){ FABRIC_READ, FABRIC_EFA, 2, 1, 0, "" };
    start(&in);
    set_i32(&fr, 26, FABRIC_NONE);
    rejects(decode_fr(), err, "fabric_kind 0 with 2 fabric_devices", "decode rejects kind none with 2 devices");
    hello_min(&in);
    in.u.hello.fabric = (struct fabric_facts){ FABRIC_UNREADABLE, 0, 0, 0, 0, "x" };
    start(&in);
    set_bytes(&fr, 30, "a\0b", 3);
    rejects(decode_fr(), err, "tag 30 (fabric_why) has a NUL byte at offset 1", "decode rejects a NUL in fabric_why");
    char longwhy[FABRIC_WHY_LEN];
    memset(longwhy, 'w', sizeof(longwhy));
    set_bytes(&fr, 30, longwhy, sizeof(longwhy));
    rejects(decode_fr(), err, "tag 30 (fabric_why) is 256 bytes, the limit is 255", "decode rejects a fabric_why too long");
    start(&in);
    append(&fr, 25, "\1\0\0\0", 4);
    rejects(decode_fr(), err, "tag 25 (fabric_state) appears twice", "decode rejects fabric_state twice");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0)
        return write_corpus(argv[2]);

    char what[256];
    long fl;
    int rc;
    size_t len;

    /* ---- Round trips ---- */
    hello_max(&in);
    round_trip(&in, "HELLO, every field at its maximum, 8 frames");
    len = rv_encode(&in, buf, sizeof(buf));
    snprintf(what, sizeof(what), "a maximal HELLO's payload is %zu bytes, within RV_MAX_PAYLOAD (%d)",
             hello_max_payload(), RV_MAX_PAYLOAD);
    ok(len == RV_HEADER_LEN + hello_max_payload() && hello_max_payload() <= RV_MAX_PAYLOAD, "%s", what);
    hello_min(&in);
    round_trip(&in, "HELLO, required fields only, empty strings, no frames");
    abort_max(&in);
    round_trip(&in, "ABORT, the longest reason");
    in.u.reason[0] = '\0';
    round_trip(&in, "ABORT without a reason");
    memset(&in, 0, sizeof(in));
    in.type = RV_REDIRECT;
    memset(in.token, 0x5a, RV_TOKEN_LEN);
    FILL_MAX(in.u.to, 22);
    round_trip(&in, "REDIRECT, the longest address");
    hello_min(&in);
    in.u.hello.nframes = 3;
    strcpy(in.u.hello_text.frames[0], "a.py:1 f");
    strcpy(in.u.hello_text.frames[2], "c.py:3 h"); /* an empty frame in the middle survives */
    round_trip(&in, "HELLO, 3 frames, one empty, order kept");
    hello_min(&in);
    in.u.hello.socket_ready = 1;
    round_trip(&in, "HELLO, ready for socket");
    len = rv_encode(&in, buf, sizeof(buf));
    hello_min(&in);
    ok(len == rv_encode(&in, buf, sizeof(buf)) + 8, "socket_ready = 1 adds one 8-byte item; 0 (not said) adds none");
    in.u.hello.socket_ready = 2;
    strcpy(in.u.hello_text.socket_why, "NCCL 21304 has no ncclConfig_t.netName (2.14 or later needed)");
    round_trip(&in, "HELLO, not ready for socket, with the reason");
    test_fabric_fields();
    verdict_max(&in, RV_DECISION);
    round_trip(&in, "DECISION, maximal");
    verdict_min(&in, RV_DECISION);
    round_trip(&in, "DECISION, minimal (final 0)");
    verdict_max(&in, RV_COMMIT);
    round_trip(&in, "COMMIT, maximal");
    verdict_min(&in, RV_COMMIT);
    round_trip(&in, "COMMIT, minimal");
    vote_max(&in);
    round_trip(&in, "VOTE, maximal");
    vote_min(&in);
    round_trip(&in, "VOTE, minimal (ok 0)");
    vote_max(&in);
    in.u.vote.bloblen = RV_BLOB_LEN;
    memset(in.u.vote.blob, 0, RV_BLOB_LEN); /* a blob is bytes: NULs included */
    in.u.vote.blob[7] = 0xab;
    round_trip(&in, "VOTE with a maximal blob of binary bytes");
    memset(&in, 0, sizeof(in));
    in.type = RV_PEERS;
    round_trip(&in, "PEERS, empty");
    in.u.peers.npeers = RV_MAX_PEERS;
    for (int k = 0; k < RV_MAX_PEERS; k++) {
        in.u.peers.peer[k].rank = RV_MAX_PEERS - 1 - k;
        in.u.peers.peer[k].bloblen = RV_BLOB_LEN;
        memset(in.u.peers.peer[k].blob, k, RV_BLOB_LEN);
    }
    round_trip(&in, "PEERS, 64 peers with maximal blobs");
    in.u.peers.npeers = RV_MAX_PEERS + 1;
    ok(rv_encode(&in, buf, sizeof(buf)) == 0, "encode refuses more than RV_MAX_PEERS peers");
    in.u.peers.npeers = 1;
    in.u.peers.peer[0].bloblen = RV_BLOB_LEN + 1;
    ok(rv_encode(&in, buf, sizeof(buf)) == 0, "encode refuses an over-long blob");

    /* Minimal frames carry no optional tag. */
    hello_min(&in);
    start(&in);
    ok(fr.n == 13 && !find(&fr, 10) && !find(&fr, 15) && !find(&fr, 19), "a minimal HELLO carries the 13 required tags only");
    verdict_min(&in, RV_COMMIT);
    in.u.verdict.final = 0;
    start(&in);
    rc = decode_fr();
    ok(!find(&fr, 4) && rc == 0 && out.u.verdict.final == 1, "COMMIT carries no final tag and decodes as final");
    verdict_min(&in, RV_DECISION);
    start(&in);
    ok(find(&fr, 4) != NULL, "DECISION carries final");

    /* ---- rv_encode ---- */
    hello_max(&in);
    len = rv_encode(&in, buf, sizeof(buf));
    ok(rv_encode(&in, buf, len - 1) == 0 && rv_encode(&in, buf, 0) == 0 && rv_encode(&in, buf, 11) == 0 &&
           rv_encode(&in, buf, 12) == 0,
       "encode: 0 when the buffer is too small");
    const char *bad_enc[] = { "api out of range", "rank >= nranks", "unterminated host",  "9 frames",
                              "negative nframes", "unknown type",   "unterminated frame", "action out of range",
                              "vote ok 2" };
    for (int k = 0; k < (int)(sizeof(bad_enc) / sizeof(bad_enc[0])); k++) {
        hello_min(&in);
        switch (k) {
        case 0: in.u.hello.api = (enum api_family)5; break;
        case 1: in.u.hello.rank = 1; break;
        case 2: memset(in.u.hello.host, 'x', sizeof(in.u.hello.host)); break;
        case 3: in.u.hello.nframes = EVIDENCE_MAX_FRAMES + 1; break;
        case 4: in.u.hello.nframes = -1; break;
        case 5: in.type = (enum rv_type)8; break;
        case 6: in.u.hello.nframes = 1; memset(in.u.hello_text.frames[0], 'x', EVIDENCE_FRAME_LEN); break;
        case 7: verdict_min(&in, RV_DECISION); in.u.verdict.action = ACTION_COUNT; break;
        case 8: vote_min(&in); in.u.vote.ok = 2; break;
        }
        snprintf(what, sizeof(what), "encode refuses an invalid message: %s", bad_enc[k]);
        ok(rv_encode(&in, buf, sizeof(buf)) == 0, "%s", what);
    }

    /* ---- rv_frame_length ---- */
    vote_max(&in);
    len = rv_encode(&in, buf, sizeof(buf));
    ok(rv_frame_length(buf, 0, err, sizeof(err)) == 0, "frame length: 0 bytes -> 0 (wait)");
    ok(rv_frame_length(NULL, 0, err, sizeof(err)) == 0, "frame length: NULL, 0 bytes -> 0");
    ok(rv_frame_length(buf, 11, err, sizeof(err)) == 0, "frame length: 11 bytes -> 0 (wait)");
    ok(rv_frame_length(buf, 12, err, sizeof(err)) == (long)len, "frame length: the header alone gives the length");
    ok(rv_frame_length(buf, len + 5, err, sizeof(err)) == (long)len, "frame length: more bytes than a frame");

    /* ---- rv_frame_token: the token, early, from the first 32 bytes ---- */
    {
        uint8_t tok[RV_TOKEN_LEN];
        int every = 1;
        for (int t = RV_HELLO; t <= RV_PEERS; t++) {
            if (t == RV_HELLO)
                hello_max(&in);
            else if (t == RV_VOTE)
                vote_max(&in);
            else if (t == RV_PEERS) {
                memset(&in, 0, sizeof(in));
                in.type = RV_PEERS;
                memset(in.token, 0x3c, RV_TOKEN_LEN);
            } else
                verdict_max(&in, (enum rv_type)t);
            size_t n = rv_encode(&in, buf, sizeof(buf));
            memset(tok, 0, sizeof(tok));
            every = every && n && rv_frame_token(buf, RV_HEADER_LEN + 4 + RV_TOKEN_LEN, tok) == 1 &&
                    memcmp(tok, in.token, RV_TOKEN_LEN) == 0 &&
                    rv_frame_token(buf, RV_HEADER_LEN + 4 + RV_TOKEN_LEN - 1, tok) == 0;
        }
        ok(every, "frame token: every message type sends its token first, readable from 32 bytes (and not from 31)");
        hello_max(&in);
        len = rv_encode(&in, buf, sizeof(buf));
        ok(rv_frame_token(buf, 0, tok) == 0 && rv_frame_token(buf, 11, tok) == 0, "frame token: no header yet -> 0");
        memcpy(buf2, buf, len);
        buf2[0] ^= 1;
        ok(rv_frame_token(buf2, 12, tok) == -1, "frame token: bad magic -> -1 at once");
        memcpy(buf2, buf, len);
        put16(buf2 + RV_HEADER_LEN, 2); /* first item: rank, not the token */
        ok(rv_frame_token(buf2, len, tok) == -1, "frame token: a first item that is not the token -> -1");
        memcpy(buf2, buf, len);
        put16(buf2 + RV_HEADER_LEN + 2, RV_TOKEN_LEN - 1);
        ok(rv_frame_token(buf2, len, tok) == -1, "frame token: a token item of the wrong length -> -1");
        memcpy(buf2, buf, len);
        put32(buf2 + 8, 4 + RV_TOKEN_LEN - 1);
        ok(rv_frame_token(buf2, 12, tok) == -1, "frame token: a payload too short to hold a token -> -1");
        vote_max(&in); /* what the header tests below start from */
        len = rv_encode(&in, buf, sizeof(buf));
    }

    /* ---- Header ---- */
    memcpy(buf2, buf, len);
    buf2[0] ^= 1;
    fl = rv_frame_length(buf2, 12, err, sizeof(err));
    rejects((int)fl, err, "bad magic", "frame length: bad magic");
    rc = rv_decode(buf2, len, &out, err, sizeof(err));
    rejects(rc, err, "bad magic 0x5652534f", "decode: bad magic");
    memcpy(buf2, buf, len);
    put16(buf2 + 4, RV_VERSION + 1);
    rejects((int)rv_frame_length(buf2, len, err, sizeof(err)), err, "protocol version 2", "frame length: bad version");
    rejects(rv_decode(buf2, len, &out, err, sizeof(err)), err, "protocol version 2, this shim speaks 1",
            "decode: bad version");
    for (unsigned t = 0; t < 9; t += 8) { /* 0 and 8 */
        memcpy(buf2, buf, len);
        put16(buf2 + 6, t);
        char want[64];
        snprintf(want, sizeof(want), "unknown message type %u", t);
        snprintf(what, sizeof(what), "frame length: %s", want);
        rejects((int)rv_frame_length(buf2, len, err, sizeof(err)), err, want, what);
        snprintf(what, sizeof(what), "decode: %s", want);
        rejects(rv_decode(buf2, len, &out, err, sizeof(err)), err, want, what);
    }
    memcpy(buf2, buf, len);
    put16(buf2 + 6, 0x0103); /* a valid type in the low byte only */
    rejects(rv_decode(buf2, len, &out, err, sizeof(err)), err, "unknown message type 259",
            "decode: type is a u16, not a byte");
    memcpy(buf2, buf, len);
    put32(buf2 + 8, RV_MAX_PAYLOAD + 1);
    rejects((int)rv_frame_length(buf2, 12, err, sizeof(err)), err, "payload length 65537 is over the limit 65536",
            "frame length: payload over RV_MAX_PAYLOAD");
    rejects(rv_decode(buf2, len, &out, err, sizeof(err)), err, "over the limit", "decode: payload over RV_MAX_PAYLOAD");
    memcpy(buf2, buf, len);
    put32(buf2 + 8, 0xffffffffu);
    rejects((int)rv_frame_length(buf2, 12, err, sizeof(err)), err, "over the limit", "frame length: payload 2^32-1");
    rejects(rv_decode(buf, 11, &out, err, sizeof(err)), err, "truncated header: 11 bytes",
            "decode: truncated header");
    rejects(rv_decode(buf, 0, &out, err, sizeof(err)), err, "truncated header: 0 bytes", "decode: no bytes");
    rejects(rv_decode(buf, len - 1, &out, err, sizeof(err)), err, "VOTE: the frame is", "decode: truncated payload");
    rejects(rv_decode(buf, 12, &out, err, sizeof(err)), err, "VOTE: the frame is 12 bytes",
            "decode: header without its payload");
    memcpy(buf2, buf, len);
    buf2[len] = 0;
    rejects(rv_decode(buf2, len + 1, &out, err, sizeof(err)), err, "the frame is", "decode: a byte past the frame");

    /* ---- TLV structure ---- */
    vote_max(&in);
    start(&in);
    append(&fr, 99, "", 0);
    len = join(&fr, buf);
    put16(buf + len - 2, 10); /* the last TLV claims 10 bytes; none follow */
    rejects(rv_decode(buf, len, &out, err, sizeof(err)), err, "tag 99 at payload offset", "decode: TLV past the end");
    ok(strstr(err, "past the payload's end (0 left)") != NULL, "  ... and the reason says how much is left");
    start(&in);
    len = join(&fr, buf);
    memcpy(buf + len, "\x02\x00\x04", 3);
    put32(buf + 8, (uint32_t)(len + 3 - RV_HEADER_LEN));
    rejects(rv_decode(buf, len + 3, &out, err, sizeof(err)), err, "VOTE: 3 trailing bytes at payload offset",
            "decode: trailing bytes shorter than a TLV header");
    /* The largest TLV length, in the largest payload. */
    start(&in);
    len = join(&fr, buf);
    put16(buf + RV_HEADER_LEN + 2, 0xffff);
    rejects(rv_decode(buf, len, &out, err, sizeof(err)), err, "past the payload's end",
            "decode: TLV length 65535 in a short payload");

    /* ---- Strings ---- */
    char big[2048];
    memset(big, 'h', sizeof(big));
    hello_min(&in);
    start(&in);
    set_bytes(&fr, 7, big, 300);
    rc = decode_fr();
    rejects(rc, err, "HELLO: tag 7 (host) is 300 bytes, the limit is 127", "HELLO: over-long host");
    ok(strcmp(err, "HELLO: tag 7 (host) is 300 bytes, the limit is 127") == 0, "  ... the exact reason");
    start(&in);
    set_bytes(&fr, 8, big, FACTS_HOST_LEN);
    rejects(decode_fr(), err, "tag 8 (host_id) is 128 bytes, the limit is 127", "HELLO: host_id one byte too long");
    start(&in);
    set_bytes(&fr, 8, big, FACTS_HOST_LEN - 1);
    ok(decode_fr() == 0 && strlen(out.u.hello.host_id) == FACTS_HOST_LEN - 1, "HELLO: host_id at its limit");
    struct { unsigned tag; size_t lim; const char *name; } strs[] = {
        { 9, FACTS_NAME_LEN - 1, "fn" }, { 10, 15, "shim_version" }, { 15, FACTS_PATH_LEN - 1, "caller_lib" },
        { 16, FACTS_TITLE_LEN - 1, "title" }, { 17, EVIDENCE_REASON_LEN - 1, "role_reason" },
        { 18, EVIDENCE_REASON_LEN - 1, "local_purpose_reason" }, { 19, EVIDENCE_FRAME_LEN - 1, "frame" },
    };
    for (size_t k = 0; k < sizeof(strs) / sizeof(strs[0]); k++) {
        start(&in);
        set_bytes(&fr, strs[k].tag, big, strs[k].lim + 1);
        char want[160];
        snprintf(want, sizeof(want), "HELLO: tag %u (%s) is %zu bytes, the limit is %zu", strs[k].tag, strs[k].name,
                 strs[k].lim + 1, strs[k].lim);
        snprintf(what, sizeof(what), "HELLO: %s one byte too long", strs[k].name);
        rejects(decode_fr(), err, want, what);
    }
    start(&in);
    set_bytes(&fr, 7, "ab\0cd", 5);
    rejects(decode_fr(), err, "HELLO: tag 7 (host) has a NUL byte at offset 2", "HELLO: NUL inside a string");
    start(&in);
    set_bytes(&fr, 9, "fn\0", 3);
    rejects(decode_fr(), err, "tag 9 (fn) has a NUL byte at offset 2", "HELLO: trailing NUL in a string");
    start(&in);
    set_bytes(&fr, 19, "\0", 1);
    rejects(decode_fr(), err, "tag 19 (frame) has a NUL byte", "HELLO: NUL in a frame");
    verdict_min(&in, RV_DECISION);
    start(&in);
    set_bytes(&fr, 11, big, RV_REASON_LEN);
    rejects(decode_fr(), err, "DECISION: tag 11 (action_reason) is 768 bytes, the limit is 767",
            "DECISION: over-long action_reason");
    vote_min(&in);
    start(&in);
    set_bytes(&fr, 3, "x\0", 2);
    rejects(decode_fr(), err, "VOTE: tag 3 (reason) has a NUL byte", "VOTE: NUL in reason");

    /* ---- Numbers out of range ---- */
    struct { enum rv_type type; unsigned tag; int32_t v; const char *want; } ranges[] = {
        { RV_HELLO, 11, API_CUPY + 1, "HELLO: tag 11 (api) is 5, outside 0..4" },
        { RV_HELLO, 11, -1, "tag 11 (api) is -1" },
        { RV_HELLO, 12, ROLE_INFERENCE + 1, "tag 12 (role) is 3, outside 0..2" },
        { RV_HELLO, 13, PURPOSE_INFERENCE + 1, "tag 13 (local_purpose) is 4, outside 0..3" },
        { RV_HELLO, 14, 2, "tag 14 (strict_error) is 2, outside 0..1" },
        { RV_HELLO, 21, 3, "tag 21 (socket_ready) is 3, outside 0..2" },
        { RV_HELLO, 21, -1, "tag 21 (socket_ready) is -1" },
        { RV_HELLO, 5, -2, "tag 5 (cuda_device) is -2" },
        { RV_HELLO, 3, 0, "tag 3 (nranks) is 0, outside 1..65536" },
        { RV_HELLO, 3, FACTS_MAX_RANKS + 1, "tag 3 (nranks) is 65537" },
        { RV_HELLO, 3, -2147483647 - 1, "tag 3 (nranks) is -2147483648" },
        { RV_HELLO, 2, -1, "tag 2 (rank) is -1" },
        { RV_HELLO, 2, 1, "HELLO: rank 1 is outside 0..0 (nranks 1)" },
        { RV_DECISION, 2, ACTION_COUNT, "DECISION: tag 2 (action) is 6, outside 0..5" },
        { RV_DECISION, 2, -1, "tag 2 (action) is -1" },
        { RV_COMMIT, 3, PURPOSE_INFERENCE + 1, "COMMIT: tag 3 (purpose) is 4" },
        { RV_DECISION, 4, 2, "tag 4 (final) is 2, outside 0..1" },
        { RV_DECISION, 6, FACTS_MAX_RANKS + 1, "tag 6 (nhosts) is 65537" },
        { RV_DECISION, 7, -1, "tag 7 (ntraining) is -1" },
        { RV_COMMIT, 8, FACTS_MAX_RANKS + 1, "tag 8 (ninference) is 65537" },
        { RV_COMMIT, 9, -5, "tag 9 (nunknown) is -5" },
        { RV_VOTE, 2, 2, "VOTE: tag 2 (ok) is 2, outside 0..1" },
        { RV_VOTE, 2, -1, "VOTE: tag 2 (ok) is -1" },
    };
    for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++) {
        if (ranges[k].type == RV_HELLO) {
            hello_min(&in);
            in.u.hello.socket_ready = 1; /* optional: present only when said */
        }
        else if (ranges[k].type == RV_VOTE)
            vote_min(&in);
        else
            verdict_min(&in, ranges[k].type);
        start(&in);
        set_i32(&fr, ranges[k].tag, ranges[k].v);
        snprintf(what, sizeof(what), "out of range rejected: %s", ranges[k].want);
        rejects(decode_fr(), err, ranges[k].want, what);
    }
    vote_min(&in);
    in.u.vote.rank = 1;
    start(&in);
    set_i32(&fr, 5, FACTS_MAX_RANKS);
    rejects(decode_fr(), err, "VOTE: tag 5 (rank) is 65536, outside 0..65535", "out of range rejected: a vote's rank");
    hello_min(&in);
    start(&in);
    set_i32(&fr, 3, FACTS_MAX_RANKS);
    set_i32(&fr, 2, FACTS_MAX_RANKS - 1);
    ok(decode_fr() == 0 && out.u.hello.rank == FACTS_MAX_RANKS - 1, "HELLO: the last rank of the largest communicator");

    /* ---- Repeated and missing tags ---- */
    hello_min(&in);
    start(&in);
    append(&fr, 2, must_find(&fr, 2)->v, 4);
    rejects(decode_fr(), err, "HELLO: tag 2 (rank) appears twice", "HELLO: repeated rank");
    start(&in);
    append(&fr, 1, must_find(&fr, 1)->v, RV_TOKEN_LEN);
    rejects(decode_fr(), err, "HELLO: tag 1 (token) appears twice", "HELLO: repeated token");
    vote_min(&in);
    start(&in);
    append(&fr, 3, "a", 1);
    append(&fr, 3, "b", 1);
    rejects(decode_fr(), err, "VOTE: tag 3 (reason) appears twice", "VOTE: repeated optional reason");
    hello_min(&in);
    start(&in);
    for (int k = 0; k < EVIDENCE_MAX_FRAMES + 1; k++)
        append(&fr, 19, "f.py:1 g", 8);
    rejects(decode_fr(), err, "HELLO: tag 19 (frame) appears more than 8 times", "HELLO: 9 frames");
    fr.n--;
    ok(decode_fr() == 0 && out.u.hello.nframes == EVIDENCE_MAX_FRAMES, "HELLO: 8 frames, nframes from the count");

    const char *hello_req[] = { "token", "rank", "nranks", "pid", "cuda_device", "nccl_version", "host", "host_id",
                                "fn", NULL, "api", "role", "local_purpose", "strict_error" };
    int all = 1;
    for (unsigned tag = 1; tag <= 14; tag++) {
        if (!hello_req[tag - 1])
            continue;
        hello_min(&in);
        start(&in);
        drop(&fr, tag);
        char want[96];
        snprintf(want, sizeof(want), "HELLO: missing tag %s", hello_req[tag - 1]);
        rc = decode_fr();
        if (rc == 0 || strcmp(err, want) != 0) {
            printf("#   dropping tag %u: rc %d, err '%s'\n", tag, rc, err);
            all = 0;
        }
    }
    ok(all, "HELLO: every required tag missing in turn is named");
    hello_max(&in);
    start(&in);
    for (unsigned tag = 15; tag <= 19; tag++)
        while (find(&fr, tag))
            drop(&fr, tag);
    drop(&fr, 10);
    ok(decode_fr() == 0 && out.u.hello.nframes == 0 && out.u.hello_text.title[0] == '\0',
       "HELLO: optional tags may all be missing");

    const char *verdict_req[] = { "token", "action", "purpose", "final", "decision_id",
                                  "nhosts", "ntraining", "ninference", "nunknown" };
    for (int t = RV_DECISION; t <= RV_COMMIT; t += RV_COMMIT - RV_DECISION) {
        all = 1;
        for (unsigned tag = 1; tag <= 9; tag++) {
            if (t == RV_COMMIT && tag == 4)
                continue;
            verdict_min(&in, (enum rv_type)t);
            start(&in);
            drop(&fr, tag);
            char want[96];
            snprintf(want, sizeof(want), "%s: missing tag %s", t == RV_DECISION ? "DECISION" : "COMMIT",
                     verdict_req[tag - 1]);
            rc = decode_fr();
            if (rc == 0 || strcmp(err, want) != 0) {
                printf("#   dropping tag %u: rc %d, err '%s'\n", tag, rc, err);
                all = 0;
            }
        }
        ok(all, t == RV_DECISION ? "DECISION: every required tag missing in turn is named"
                                 : "COMMIT: every required tag missing in turn is named");
    }
    verdict_min(&in, RV_DECISION);
    start(&in);
    drop(&fr, 2);
    decode_fr();
    ok(strcmp(err, "DECISION: missing tag action") == 0, "DECISION: missing tag action (exact reason)");
    vote_min(&in);
    start(&in);
    drop(&fr, 2);
    rejects(decode_fr(), err, "VOTE: missing tag ok", "VOTE: missing ok");
    start(&in);
    drop(&fr, 1);
    rejects(decode_fr(), err, "VOTE: missing tag token", "VOTE: missing token");

    /* ---- Integer widths ---- */
    struct { enum rv_type type; unsigned tag; size_t len; const char *want; } widths[] = {
        { RV_HELLO, 2, 8, "HELLO: tag 2 (rank) is 8 bytes, it must be 4" },
        { RV_HELLO, 4, 2, "HELLO: tag 4 (pid) is 2 bytes, it must be 4" },
        { RV_HELLO, 11, 0, "HELLO: tag 11 (api) is 0 bytes, it must be 4" },
        { RV_HELLO, 1, 15, "HELLO: tag 1 (token) is 15 bytes, it must be 16" },
        { RV_HELLO, 1, 17, "HELLO: tag 1 (token) is 17 bytes, it must be 16" },
        { RV_DECISION, 5, 4, "DECISION: tag 5 (decision_id) is 4 bytes, it must be 8" },
        { RV_COMMIT, 6, 5, "COMMIT: tag 6 (nhosts) is 5 bytes, it must be 4" },
        { RV_VOTE, 2, 1, "VOTE: tag 2 (ok) is 1 bytes, it must be 4" },
    };
    for (size_t k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
        if (widths[k].type == RV_HELLO)
            hello_min(&in);
        else if (widths[k].type == RV_VOTE)
            vote_min(&in);
        else
            verdict_min(&in, widths[k].type);
        start(&in);
        must_find(&fr, widths[k].tag)->len = widths[k].len;
        snprintf(what, sizeof(what), "wrong integer width: %s", widths[k].want);
        rejects(decode_fr(), err, widths[k].want, what);
    }

    /* ---- Unknown tags ---- */
    hello_max(&in);
    start(&in);
    /* at the front, in the middle, at the end; one repeated, one empty */
    memmove(&fr.it[1], &fr.it[0], (size_t)fr.n * sizeof(fr.it[0]));
    fr.n++;
    fr.it[0].tag = 0;
    fr.it[0].len = 3;
    memcpy(fr.it[0].v, "abc", 3);
    append(&fr, 777, big, 2000);
    append(&fr, 777, big, 2000);
    append(&fr, 0xffff, "", 0);
    rc = decode_fr();
    ok(rc == 0 && rv_msg_same(&in, &out), "HELLO: unknown tags (0, 777 twice, 65535) are skipped");
    verdict_max(&in, RV_COMMIT);
    start(&in);
    append(&fr, 4, "\x00\x00\x00\x00", 4);
    rc = decode_fr();
    ok(rc == 0 && out.u.verdict.final == 1 && rv_msg_same(&in, &out), "COMMIT: a final tag is unknown there, skipped");
    vote_max(&in);
    start(&in);
    append(&fr, 9, big, 9);
    ok(decode_fr() == 0 && rv_msg_same(&in, &out), "VOTE: unknown tag skipped");

    /* ---- No stale data ---- */
    hello_max(&in);
    len = rv_encode(&in, buf, sizeof(buf));
    rv_decode(buf, len, &out, err, sizeof(err));
    vote_min(&in);
    len = rv_encode(&in, buf, sizeof(buf));
    rc = rv_decode(buf, len, &out, err, sizeof(err));
    static const struct rank_facts zero;
    static const struct rank_text zero_text;
    struct rank_facts was = out.u.hello;
    was.text = NULL; /* set by every decode, pointing at the message's own text */
    ok(rc == 0 && memcmp(&was.host, &zero.host, sizeof(zero) - offsetof(struct rank_facts, host)) == 0 &&
           memcmp(&out.u.hello_text, &zero_text, sizeof(zero_text)) == 0,
       "decode clears what the previous message left (its text too)");
    hello_max(&in);
    len = rv_encode(&in, buf, sizeof(buf));
    rv_decode(buf, len, &out, err, sizeof(err));
    buf[0] = 0;
    rc = rv_decode(buf, len, &out, err, sizeof(err));
    ok(rc < 0 && out.u.hello.host[0] == '\0' && out.u.hello.nframes == 0, "a failed decode leaves no old data either");

    /* ---- Error buffers ---- */
    ok(rv_decode(buf, len, &out, NULL, 0) < 0 && rv_frame_length(buf, len, NULL, 0) < 0, "NULL err is accepted");
    char tiny[8];
    ok(rv_decode(buf, len, &out, tiny, sizeof(tiny)) < 0 && strlen(tiny) == sizeof(tiny) - 1,
       "a short err buffer gets a truncated reason");

    /* ---- rv_token_equal ---- */
    uint8_t a[RV_TOKEN_LEN], b[RV_TOKEN_LEN];
    for (int i = 0; i < RV_TOKEN_LEN; i++)
        a[i] = b[i] = (uint8_t)(i * 37);
    ok(rv_token_equal(a, b) == 1, "token_equal: equal tokens");
    b[0] ^= 0x80;
    ok(rv_token_equal(a, b) == 0, "token_equal: first byte differs");
    b[0] ^= 0x80;
    b[RV_TOKEN_LEN - 1] ^= 1;
    ok(rv_token_equal(a, b) == 0, "token_equal: last byte differs");
    memset(b, 0xff, sizeof(b));
    ok(rv_token_equal(a, b) == 0, "token_equal: every byte differs");
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    ok(rv_token_equal(a, b) == 1, "token_equal: zero tokens");

    return tap_done();
}
