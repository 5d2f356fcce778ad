/*
 * Interning of ranks' texts at the root (rv_texts.h): a hash set of copies,
 * compared string by string.
 */
#include "rv_texts.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The strings of a struct rank_text, each with its bound. */
#define TEXT_STR(m) { offsetof(struct rank_text, m), sizeof(((struct rank_text *)0)->m) }
static const struct {
    size_t off, len;
} strs[] = {
    TEXT_STR(caller_lib),   TEXT_STR(title),        TEXT_STR(role_reason), TEXT_STR(local_purpose_reason),
    TEXT_STR(frames[0]),    TEXT_STR(frames[1]),    TEXT_STR(frames[2]),   TEXT_STR(frames[3]),
    TEXT_STR(frames[4]),    TEXT_STR(frames[5]),    TEXT_STR(frames[6]),   TEXT_STR(frames[7]),
    TEXT_STR(socket_why),   TEXT_STR(frugal_why),   TEXT_STR(full_api_why),
};
_Static_assert(EVIDENCE_MAX_FRAMES == 8, "strs[] names every frame");

static const char *str_of(const struct rank_text *t, size_t i)
{
    return (const char *)t + strs[i].off;
}

/* FNV-1a over each string up to its NUL (or its bound), a 0 byte between them. */
static uint64_t hash_text(const struct rank_text *t)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        const char *s = str_of(t, i);
        size_t n = strnlen(s, strs[i].len);
        for (size_t k = 0; k < n; k++)
            h = (h ^ (unsigned char)s[k]) * 1099511628211ull;
        h = h * 1099511628211ull;
    }
    return h;
}

static int same_text(const struct rank_text *a, const struct rank_text *b)
{
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        if (strncmp(str_of(a, i), str_of(b, i), strs[i].len) != 0)
            return 0;
    return 1;
}

/* Where `t` is, or the empty slot where it would go. */
static const struct rank_text **find(const struct rv_texts *p, const struct rank_text *t, uint64_t h)
{
    size_t mask = p->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask)
        if (!p->slot[i] || same_text(p->slot[i], t))
            return &p->slot[i];
}

/* Doubles the table (at least 16 slots): 0, or -1 when out of memory. */
static int grow(struct rv_texts *p)
{
    size_t cap = p->cap ? p->cap * 2 : 16;
    const struct rank_text **slot = calloc(cap, sizeof(*slot));
    if (!slot)
        return -1;
    struct rv_texts bigger = { slot, cap, p->n };
    for (size_t i = 0; i < p->cap; i++)
        if (p->slot[i])
            *find(&bigger, p->slot[i], hash_text(p->slot[i])) = p->slot[i];
    free(p->slot);
    *p = bigger;
    return 0;
}

const struct rank_text *rv_texts_intern(struct rv_texts *p, const struct rank_text *t)
{
    /* At most half full: probes stay short, and an empty slot always ends one. */
    if ((p->n + 1) * 2 > p->cap && grow(p) != 0)
        return NULL;
    uint64_t h = hash_text(t);
    const struct rank_text **at = find(p, t, h);
    if (*at)
        return *at;
    struct rank_text *copy = malloc(sizeof(*copy));
    if (!copy)
        return NULL;
    /* Each string once, zero-filled after it: what is kept is only what was said. */
    memset(copy, 0, sizeof(*copy));
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        memcpy((char *)copy + strs[i].off, str_of(t, i), strnlen(str_of(t, i), strs[i].len));
    *at = copy;
    p->n++;
    return copy;
}

void rv_texts_free(struct rv_texts *p)
{
    for (size_t i = 0; i < p->cap; i++)
        free((void *)p->slot[i]);
    free(p->slot);
    p->slot = NULL;
    p->cap = p->n = 0;
}
