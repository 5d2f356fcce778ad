/*
 * libFuzzer target for the rendezvous wire format (shim/rendezvous/rv_wire.c): bytes
 * from the network go through rv_frame_length and rv_decode, which must never
 * read or write out of bounds (ASan, UBSan) and must reject with a reason.
 * Whatever rv_decode accepts must survive a round trip: re-encoded, decoded
 * again, it is the same message field by field, and encoding that gives the
 * same bytes.  Any broken invariant abort()s.
 *
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -Ishim -Ipolicy \
 *            tests/fuzz/fuzz_wire.c shim/rendezvous/rv_wire.c   (or `make fuzz-short`)
 * Seeds: tests/fuzz/corpus/wire (`tests/bin/test_wire --corpus DIR` writes them).
 */
#include "rv_wire.h"
#include "../unit/wire_same.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_wire: invariant broken: %s\n", what);
        abort();
    }
}


static struct rv_msg m1, m2;
static uint8_t enc1[RV_MAX_FRAME], enc2[RV_MAX_FRAME];

static void one_frame(const uint8_t *buf, size_t len)
{
    char err[256];
    err[0] = '\0';
    if (rv_decode(buf, len, &m1, err, sizeof(err)) != 0) {
        check(err[0] != '\0', "a rejection has a reason");
        return;
    }
    check(rv_frame_length(buf, len, err, sizeof(err)) == (long)len, "frame length agrees with an accepted frame");
    check(m1.type >= RV_HELLO && m1.type <= RV_REDIRECT, "accepted type is known");
    check(m1.type != RV_HELLO || (m1.u.hello.rank >= 0 && m1.u.hello.rank < m1.u.hello.nranks &&
                                  m1.u.hello.nframes >= 0 && m1.u.hello.nframes <= EVIDENCE_MAX_FRAMES),
          "accepted HELLO is in range");

    size_t n1 = rv_encode(&m1, enc1, sizeof(enc1));
    check(n1 > 0, "an accepted message encodes");
    /* Encoding drops unknown tags and empty optional strings, adds nothing. */
    check(n1 <= len, "re-encoding is no longer than the input");
    check(rv_decode(enc1, n1, &m2, err, sizeof(err)) == 0, "a re-encoded message decodes");
    check(rv_msg_same(&m1, &m2), "decode(encode(decode(x))) == decode(x)");
    size_t n2 = rv_encode(&m2, enc2, sizeof(enc2));
    check(n2 == n1 && memcmp(enc1, enc2, n1) == 0, "encoding is deterministic");
    check(rv_encode(&m1, enc2, n1 - 1) == 0, "encode refuses a buffer one byte short");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    err[0] = '\0';
    long fl = rv_frame_length(data, size, err, sizeof(err));
    check(fl == -1 || fl == 0 || (fl >= RV_HEADER_LEN && fl <= RV_MAX_FRAME), "frame length in range");
    check(fl != 0 || size < RV_HEADER_LEN, "a complete header gives an answer");
    check(fl != -1 || err[0] != '\0', "an invalid header has a reason");
    uint8_t tok[RV_TOKEN_LEN];
    int tr = rv_frame_token(data, size, tok);
    check(tr >= -1 && tr <= 1, "frame token in range");
    check(fl != -1 || tr == -1, "an invalid header has no token");
    if (tr == 1 && fl > 0 && (size_t)fl <= size && rv_decode(data, (size_t)fl, &m1, err, sizeof(err)) == 0)
        check(memcmp(tok, m1.token, RV_TOKEN_LEN) == 0, "the early token is the decoded one");
    /* As a stream reader would: the frame the header announces, when all there... */
    if (fl > 0 && (size_t)fl <= size)
        one_frame(data, (size_t)fl);
    /* ... and the whole input as one frame (a frame with bytes missing or extra). */
    if (fl <= 0 || (size_t)fl != size)
        one_frame(data, size);
    return 0;
}
