/*
 * The rendezvous protocol's messages, as bytes (docs/design.md, "Rendezvous").
 * Pure encoding and decoding, no I/O: the parser takes bytes from the network,
 * so it is fuzzed (tests/fuzz/fuzz_wire.c) and must reject anything malformed
 * with a reason, never read or write out of bounds.
 *
 * Frame: a 12-byte header (magic "NSRV", version, type, payload length; all
 * little-endian) then the payload: TLV items (u16 tag, u16 length, bytes).
 * Unknown tags are skipped (a newer shim may add some); a repeated tag, a
 * missing required one, an over-long string or an out-of-range number
 * rejects the message.  Every message carries the rendezvous token.
 */
#ifndef NCCLSHIM_RV_WIRE_H
#define NCCLSHIM_RV_WIRE_H

#include "policy/decide.h"
#include "policy/facts.h"

#include <stddef.h>
#include <stdint.h>

#define RV_MAGIC 0x5652534eu            /* "NSRV" read as little-endian u32 */
#define RV_VERSION 1
#define RV_HEADER_LEN 12
#define RV_MAX_PAYLOAD 65536
#define RV_TOKEN_LEN 16
#define RV_REASON_LEN 768

/* ABORT: a leader or a rank that hit a limit (descriptors, memory, threads),
 * or lost a rank it speaks for, tells the root, which then falls back for all
 * at once; a host's leader also sends it to its ranks when it gives up. */
/* REDIRECT: the root (or a leader) that holds as many hosts' leaders as it
 * takes answers a new leader's first HELLO with the address of one of its
 * leaders, which that leader joins instead (the tree, rv_leader.h). */
enum rv_type { RV_HELLO = 1, RV_DECISION = 2, RV_VOTE = 3, RV_COMMIT = 4, RV_PEERS = 5, RV_ABORT = 6, RV_REDIRECT = 7 };
#define RV_ADDR_LEN 80

/* What a rank exports when it sets a transport up (ipc: its memory handle),
 * and how many ranks such a transport serves. */
#define RV_BLOB_LEN 192
#define RV_MAX_PEERS 64

/* The root's answer: DECISION (round 1) and COMMIT (round 2, final). */
struct rv_verdict {
    int action;                         /* enum action */
    int purpose;                        /* enum purpose */
    int final;                          /* DECISION only: 1 = act now, no vote round */
    uint64_t decision_id;               /* random, the same for every rank: joins records */
    int nhosts, ntraining, ninference, nunknown;
    char purpose_reason[RV_REASON_LEN];
    char action_reason[RV_REASON_LEN];
    /* 1: passthrough because the rendezvous fell back (a rank missing, a
     * limit, a veto, a path lost), not the policy's choice: every rank says
     * so on stderr (docs/troubleshooting.md). */
    int fallback;
};

/* A rank's vote in round 2: it could (ok=1) or could not set up the action. */
struct rv_vote {
    int ok;
    int rank;                           /* the voter: read by the root on a leader's connection only */
    char reason[RV_REASON_LEN];
    int bloblen;                        /* 0..RV_BLOB_LEN: what this rank exports */
    uint8_t blob[RV_BLOB_LEN];
};

/* PEERS (root -> ranks, ipc only): every rank's export, sent between the
 * vote on setting up and the vote on connecting. */
struct rv_peer {
    int rank;
    int bloblen;
    uint8_t blob[RV_BLOB_LEN];
};
struct rv_peers {
    int npeers;                         /* 0..RV_MAX_PEERS */
    struct rv_peer peer[RV_MAX_PEERS];
};

struct rv_msg {
    enum rv_type type;
    uint8_t token[RV_TOKEN_LEN];
    /* HELLO: non-zero on a host leader's connection, which carries the HELLOs
     * of several ranks: the leader's pid (the root answers it once for all). */
    uint32_t leader_pid;
    /* HELLO on a leader's connection: where it accepts other hosts' leaders
     * (TCP "ip:port"), so that whoever it joins may send new leaders to it. */
    char leader_addr[RV_ADDR_LEN];
    union {
        char reason[RV_REASON_LEN];     /* RV_ABORT */
        char to[RV_ADDR_LEN];           /* RV_REDIRECT: "ip:port" of the leader to join */
        struct {                        /* RV_HELLO: decoded, hello.text is &hello_text */
            struct rank_facts hello;
            struct rank_text hello_text;
        };
        struct rv_verdict verdict;      /* RV_DECISION and RV_COMMIT */
        struct rv_vote vote;
        struct rv_peers peers;
    } u;
};

/* Bytes needed for the largest message. */
#define RV_MAX_FRAME (RV_HEADER_LEN + RV_MAX_PAYLOAD)

/* Encodes `m` into `buf`; returns the frame's length, or 0 if it does not fit
 * `cap` or is a message rv_decode would reject (an enum out of range, rank
 * not below nranks, an unterminated string...): what is sent always decodes. */
size_t rv_encode(const struct rv_msg *m, uint8_t *buf, size_t cap);

/*
 * Looks at the first `have` bytes of a stream.  Returns the whole frame's
 * length once the header is complete (the caller then waits for that many
 * bytes), 0 if fewer than RV_HEADER_LEN bytes are there, or -1 if the header
 * is invalid (wrong magic or version, unknown type, payload over
 * RV_MAX_PAYLOAD), with the reason in `err`.
 */
long rv_frame_length(const uint8_t *buf, size_t have, char *err, size_t errlen);

/* Decodes one whole frame.  0 on success; -1 with the reason in `err`. */
int rv_decode(const uint8_t *buf, size_t len, struct rv_msg *m, char *err, size_t errlen);

/*
 * The token a frame starts with, from its first `have` bytes, before the rest
 * has come: lets the root tell a rank from a stranger within a round trip.
 * rv_encode puts the token first in every message; a frame whose first item is
 * something else can still be a valid message (items may come in any order),
 * only not recognised early.  Returns 1 with the token in `token` once the
 * header and a first item (tag 1, RV_TOKEN_LEN bytes) are there, 0 if fewer
 * bytes than that are there yet, -1 if the header is invalid or the first item
 * is not the token.
 */
int rv_frame_token(const uint8_t *buf, size_t have, uint8_t token[RV_TOKEN_LEN]);

/* The messages built in more than one place: an ABORT of the ID `token`
 * saying why (how a limit, a lost rank or a late one is told), and a
 * REDIRECT to the leader at `to` ("ip:port"). */
void rv_make_abort(struct rv_msg *m, const uint8_t token[RV_TOKEN_LEN], const char *why);
void rv_make_redirect(struct rv_msg *m, const uint8_t token[RV_TOKEN_LEN], const char *to);

/* Constant-time comparison of two tokens: 1 if equal. */
int rv_token_equal(const uint8_t a[RV_TOKEN_LEN], const uint8_t b[RV_TOKEN_LEN]);

#endif
