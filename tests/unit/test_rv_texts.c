/*
 * The root's interned texts (shim/rendezvous/rv_texts.c): equal texts are one
 * copy whatever their buffers held after each NUL, different ones are not,
 * a copy does not change with its source, and what the wire decodes from two
 * ranks that said the same thing is interned once.
 */
#include "rv_texts.h"
#include "rv_wire.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static struct rank_text a, b;

static void job_text(struct rank_text *t, char junk)
{
    memset(t, junk, sizeof(*t)); /* what follows each NUL differs between a and b */
    snprintf(t->title, sizeof(t->title), "ray::VllmWorker");
    snprintf(t->role_reason, sizeof(t->role_reason), "process title 'ray::VllmWorker' matches inference pattern");
    snprintf(t->caller_lib, sizeof(t->caller_lib), "/x/vllm/_C.abi3.so");
    snprintf(t->local_purpose_reason, sizeof(t->local_purpose_reason), "%s", "");
    for (int k = 0; k < EVIDENCE_MAX_FRAMES; k++)
        snprintf(t->frames[k], sizeof(t->frames[k]), "/x/vllm/worker.py:%d f%d", 100 + k, k);
    t->socket_why[0] = t->frugal_why[0] = t->full_api_why[0] = '\0';
}

static void equal_and_different(void)
{
    struct rv_texts p = { 0 };
    job_text(&a, 'x');
    job_text(&b, 'y');
    const struct rank_text *ia = rv_texts_intern(&p, &a), *ib = rv_texts_intern(&p, &b);
    ok(ia && ia == ib && p.n == 1, "equal texts, different bytes after their NULs: one copy");
    ok(ia != &a && strcmp(ia->title, "ray::VllmWorker") == 0 && ia->title[16] == '\0',
       "the copy is the root's own, zero after each string");
    snprintf(a.title, sizeof(a.title), "changed");
    ok(strcmp(ia->title, "ray::VllmWorker") == 0, "a copy does not change with its source");
    snprintf(b.frames[7], sizeof(b.frames[7]), "/x/vllm/worker.py:108 other");
    const struct rank_text *ic = rv_texts_intern(&p, &b);
    ok(ic && ic != ia && p.n == 2, "a text differing in its last frame only is another copy");
    memset(b.full_api_why, 'z', sizeof(b.full_api_why)); /* unterminated: kept to its bound, as sent */
    const struct rank_text *id = rv_texts_intern(&p, &b);
    ok(id && id != ic && memcmp(id->full_api_why, b.full_api_why, sizeof(b.full_api_why)) == 0 &&
           rv_texts_intern(&p, &b) == id,
       "a string filling its whole field is kept whole, and found again");
    rv_texts_free(&p);
    ok(p.n == 0 && p.cap == 0 && !p.slot, "free empties the set");
}

/* Many distinct texts (the table grows), each found again at its copy. */
static void many(void)
{
    enum { N = 3000 };
    static const struct rank_text *first[N];
    struct rv_texts p = { 0 };
    int bad = 0;
    memset(&a, 0, sizeof(a));
    for (int i = 0; i < N; i++) {
        snprintf(a.title, sizeof(a.title), "VllmWorker-%d", i);
        first[i] = rv_texts_intern(&p, &a);
        bad += !first[i];
    }
    for (int i = 0; i < N; i++) {
        snprintf(a.title, sizeof(a.title), "VllmWorker-%d", i);
        bad += rv_texts_intern(&p, &a) != first[i] || strcmp(first[i]->title, a.title) != 0;
    }
    ok(!bad && p.n == N && p.cap >= 2 * N, "%d distinct texts: %zu copies, each found again", N, p.n);
    rv_texts_free(&p);
}

/* Two ranks' HELLOs, as the root decodes them: their texts are one copy. */
static void decoded(void)
{
    static struct rv_msg in, out1, out2;
    static uint8_t buf[RV_MAX_FRAME];
    char err[256];
    struct rv_texts p = { 0 };
    job_text(&a, 0);
    memset(&in, 0, sizeof(in));
    in.type = RV_HELLO;
    in.u.hello.nranks = 2;
    in.u.hello.cuda_device = -1;
    in.u.hello.nframes = EVIDENCE_MAX_FRAMES;
    in.u.hello.text = &a;
    size_t len = rv_encode(&in, buf, sizeof(buf));
    int rc1 = len ? rv_decode(buf, len, &out1, err, sizeof(err)) : -1;
    in.u.hello.rank = 1;
    len = rv_encode(&in, buf, sizeof(buf));
    int rc2 = len ? rv_decode(buf, len, &out2, err, sizeof(err)) : -1;
    ok(rc1 == 0 && rc2 == 0 && out1.u.hello.text == &out1.u.hello_text &&
           strcmp(out2.u.hello.text->frames[7], a.frames[7]) == 0,
       "a HELLO's text is encoded through its pointer and decoded into the message");
    const struct rank_text *t1 = rv_texts_intern(&p, out1.u.hello.text), *t2 = rv_texts_intern(&p, out2.u.hello.text);
    struct rank_facts f1 = out1.u.hello, f2 = out2.u.hello;
    f1.text = t1;
    f2.text = t2;
    ok(t1 && t1 == t2 && p.n == 1 && facts_same_frames(&f1, &f2), "two ranks that said the same: one copy at the root");
    rv_texts_free(&p);
}

int main(void)
{
    equal_and_different();
    many();
    decoded();
    return tap_done();
}
