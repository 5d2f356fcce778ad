/*
 * The messages of shim/ipc/ipc_vmm.c's Unix sockets (SOCK_SEQPACKET: one
 * message a packet), and their check: what a neighbour sends is input like
 * any network message, and is acted on (descriptors imported and mapped,
 * mappings given up) only once it is whole, in sequence and consistent.
 * Same host, same build: plain structs in host byte order.
 */
#ifndef NCCLSHIM_IPC_VMM_WIRE_H
#define NCCLSHIM_IPC_VMM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define VMM_MAGIC 0x766d6d73u           /* "smmv" */
#define VMM_MSG_PIECES 32               /* pieces (and descriptors) per message: far under SCM_MAX_FD */

enum vmm_kind {
    VMM_HELLO = 1,                      /* the connecting rank names itself; nothing else */
    VMM_PIECES = 2,                     /* n pieces, one descriptor each (SCM_RIGHTS), in order */
    VMM_FORGET = 3,                     /* n pieces (block and base only) the sender no longer maps */
};

struct vmm_wire_piece {
    uint64_t block, base, size;         /* in the exporter's process */
    uint64_t range, range_size;         /* the reserved range the piece is mapped in */
};

struct vmm_msg {
    uint32_t magic, kind;
    uint64_t seq;                       /* messages on this socket this way, from 1 (HELLO: 0) */
    int32_t rank;
    uint32_t n;
    struct vmm_wire_piece p[VMM_MSG_PIECES];
};
#define VMM_MSG_HEAD offsetof(struct vmm_msg, p)

/* The message's length on the wire. */
static inline size_t vmm_msg_len(const struct vmm_msg *m)
{
    return VMM_MSG_HEAD + (size_t)m->n * sizeof(struct vmm_wire_piece);
}

/*
 * NULL if `m`, received whole as `len` bytes with `nfds` descriptors, is a
 * PIECES or FORGET message that rank `peer` may send as its message `seq`;
 * else what is wrong with it.  A PIECES message's pieces lie inside their
 * ranges, do not overlap each other (a piece replaces what is mapped where
 * it goes: never one of its own message) and are of different memory blocks
 * (a block mapped elsewhere is moved: never one of its own message).
 */
const char *vmm_msg_check(const struct vmm_msg *m, size_t len, int nfds, int32_t peer, uint64_t seq);

#endif
