/*
 * The check of ipc_vmm.c's messages (see ipc_vmm_wire.h): what a neighbour
 * sends is input, checked whole before anything acts on it; a file of its
 * own, with no driver call, so that tests/unit/test_vmm_wire.c (t/31) can
 * feed it hostile messages alone.
 */
#include "ipc_vmm_wire.h"

/* Inside its range, without overflow: base - range < range_size and
 * size <= range_size - (base - range). */
static int inside(const struct vmm_wire_piece *p)
{
    return p->size && p->range_size && p->range_size <= UINT64_MAX - p->range && p->base >= p->range &&
           p->base - p->range < p->range_size && p->size <= p->range_size - (p->base - p->range);
}

const char *vmm_msg_check(const struct vmm_msg *m, size_t len, int nfds, int32_t peer, uint64_t seq)
{
    if (len < VMM_MSG_HEAD || m->magic != VMM_MAGIC)
        return "sent a message that is not one of ours";
    if (m->n > VMM_MSG_PIECES || len != vmm_msg_len(m))
        return "sent a message whose length does not match its count";
    if (m->rank != peer)
        return "sent a message in another rank's name";
    if (m->kind != VMM_PIECES && m->kind != VMM_FORGET)
        return "sent a message of an unknown kind";
    if (m->seq != seq)
        return "sent a message out of sequence";
    if (nfds != (m->kind == VMM_PIECES ? (int)m->n : 0))
        return "sent a message with the wrong number of descriptors";
    if (m->kind == VMM_FORGET)
        return NULL;
    for (uint32_t i = 0; i < m->n; i++)
        if (!inside(&m->p[i]))
            return "sent a piece outside its range";
    /* Inside their ranges, base + size cannot overflow. */
    for (uint32_t i = 0; i < m->n; i++)
        for (uint32_t j = i + 1; j < m->n; j++)
            if (m->p[i].range == m->p[j].range && m->p[i].base < m->p[j].base + m->p[j].size &&
                m->p[j].base < m->p[i].base + m->p[i].size)
                return "sent pieces that overlap";
    /* A block held at one place: map_piece would move the first piece of
     * the pair (unmap it) for the second while read_msg still holds it (a
     * double free).  ipc_vmm_describe never sends such a message. */
    for (uint32_t i = 0; i < m->n; i++)
        for (uint32_t j = i + 1; j < m->n; j++)
            if (m->p[i].block == m->p[j].block)
                return "sent one memory block twice in a message";
    return NULL;
}
