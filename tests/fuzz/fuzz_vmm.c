/*
 * libFuzzer target for the ipc transport's VMM messages
 * (shim/ipc/ipc_vmm_wire.c): bytes a neighbour sent over the Unix socket go
 * through vmm_msg_check, which must never read out of bounds (ASan, UBSan)
 * and must accept only what ipc_vmm.c may act on.  An accepted message is
 * checked again here, independently (in 128-bit arithmetic): whole, in
 * sequence, as many descriptors as pieces, each piece inside its range, no
 * two overlapping.  Any broken invariant abort()s.
 *
 * Input: [descriptors received][sequence number - 5][the message, as received].
 * Seeds: tests/fuzz/corpus/vmm (`tests/bin/test_vmm_wire --corpus DIR` writes them).
 */
#include "ipc_vmm_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_vmm: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 2)
        return 0;
    int nfds = data[0];
    uint64_t seq = 5 + data[1];
    size_t len = size - 2;
    /* recvmsg into a struct vmm_msg: a longer packet arrives truncated (MSG_TRUNC), never checked. */
    if (len > sizeof(struct vmm_msg))
        return 0;
    struct vmm_msg *m = malloc(sizeof(*m)); /* heap: ASan sees a read past what was received */
    if (!m)
        return 0;
    memset(m, 0xa5, sizeof(*m));
    memcpy(m, data + 2, len);
    const char *why = vmm_msg_check(m, len, nfds, 1, seq);
    if (why) {
        check(why[0] != '\0', "a rejection has a reason");
        free(m);
        return 0;
    }
    check(len >= VMM_MSG_HEAD && m->magic == VMM_MAGIC && m->rank == 1 && m->seq == seq, "header");
    check(m->n <= VMM_MSG_PIECES && len == VMM_MSG_HEAD + m->n * sizeof(struct vmm_wire_piece), "length");
    check(m->kind == VMM_PIECES || m->kind == VMM_FORGET, "kind");
    check(nfds == (m->kind == VMM_PIECES ? (int)m->n : 0), "descriptors");
    for (uint32_t i = 0; m->kind == VMM_PIECES && i < m->n; i++) {
        const struct vmm_wire_piece *p = &m->p[i];
        unsigned __int128 end = (unsigned __int128)p->base + p->size;
        unsigned __int128 rend = (unsigned __int128)p->range + p->range_size;
        check(p->size > 0 && p->base >= p->range && end <= rend && rend <= (unsigned __int128)UINT64_MAX + 1,
              "a piece inside its range");
        for (uint32_t j = 0; j < i; j++) {
            const struct vmm_wire_piece *q = &m->p[j];
            unsigned __int128 qend = (unsigned __int128)q->base + q->size;
            check(p->range != q->range || end <= q->base || qend <= p->base, "no two pieces overlap");
        }
    }
    free(m);
    return 0;
}
