/*
 * The root's texts of its ranks (policy/facts.h, struct rank_text), interned:
 * one copy of each distinct text per session, which every rank that sent it
 * points at.  Thousands of ranks of one job send a few distinct texts, so the
 * root's memory for a rank is its struct rank_facts and a pointer's share of
 * a text.  Belongs to the serving thread, like its session.
 */
#ifndef NCCLSHIM_RV_TEXTS_H
#define NCCLSHIM_RV_TEXTS_H

#include "policy/facts.h"

#include <stddef.h>

struct rv_texts {
    const struct rank_text **slot;      /* open addressing; NULL: empty */
    size_t cap;                         /* 0 or a power of two */
    size_t n;                           /* distinct texts held */
};

/* The interned copy of `t` (the same pointer for equal texts: equal strings,
 * whatever follows their NULs); NULL when out of memory. */
const struct rank_text *rv_texts_intern(struct rv_texts *p, const struct rank_text *t);
/* Frees every copy: the facts that point at them must be gone too. */
void rv_texts_free(struct rv_texts *p);

#endif
