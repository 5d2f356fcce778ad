/*
 * The state of the VMM sharing (cuMemCreate memory passed to the ring
 * neighbours as file descriptors: the protocol at the top of ipc_vmm.c),
 * which its four files share and nothing else includes: the links, the
 * pieces sent and mapped, the mirrors.  Definitions only, no .c of its own
 * (what each file offers is in its own header): the files call down
 * ipc_vmm.c -> ipc_vmm_export.c, ipc_vmm_import.c -> ipc_vmm_link.c, never
 * back.
 */
#ifndef NCCLSHIM_IPC_VMM_STATE_H
#define NCCLSHIM_IPC_VMM_STATE_H

#include "ipc_comm.h"
#include "ipc_vmm_wire.h"

#include <stdint.h>
#include <sys/types.h>
#include <uthash.h>

#define VMM_MAX_PIECES 8192             /* of one buffer: 160 GiB of 20 MiB pieces */
#define VMM_MAX_SENT 8192               /* pieces a neighbour holds from this rank; beyond: the oldest forgotten */
#define VMM_CHECK_MS 1000               /* how often the exporter looks whether what it sent is still mapped */
#define VMM_ACCEPT_MS 30000             /* how long the reaper accepts the predecessor's connection */
#define VMM_SETUP_MS 2000               /* how long connect and the first describe wait for the sockets */
#define VMM_IO_MS 10000                 /* a message already sent, or a send the peer's reaper drains */
#define VMM_RETRY_MS 10
#define VMM_PROBE_MAX (64ull << 20)     /* a probe piece larger than this is not one of ours */


/* A piece the peer at the other end of a link was sent (and not told to forget). */
/* A piece is a memory block at an address: one block may be mapped at two
 * (CUDA allows it; two live buffers then share memory), and each place is
 * a piece of its own, held and forgotten apart, so that neither unmaps the
 * other's under a queued copy. */
struct place {
    uint64_t block;
    uint64_t base;
};
struct sent {
    struct place key;
    UT_hash_handle hh;
};

struct link {
    int fd;                             /* -1: none */
    int peer;
    uint64_t out_seq, in_seq;           /* messages sent, read */
    struct sent *sent;                  /* by place; oldest first (uthash keeps insertion order) */
    unsigned nsent;
};

struct mirror;
struct piece_key {
    int32_t rank;
    uint32_t pad;
    struct place at;
};
/* A neighbour's piece, mapped here. */
struct piece {
    struct piece_key key;
    UT_hash_handle hh;
    struct mirror *m;
    uint64_t base, size;                /* in the exporter's addresses */
    CUmemGenericAllocationHandle h;
    int doomed;                         /* the exporter said FORGET: unmapped once the fence passed */
};
/* A neighbour's reserved range, reserved here too; its mapped pieces sorted by base. */
struct mirror {
    int rank;
    uint64_t range, size;
    CUdeviceptr at;
    struct piece **p;
    int n, cap;
};

struct ipc_vmm {
    int listen_fd;
    char path[108];
    uint64_t listen_until_us;
    int setup_waited;                   /* the first describe waited for the sockets */
    /* The piece this rank's HELLO lends its successor to try the whole path
     * on (export, import, map, access) before any broadcast counts on it;
     * held until the successor accepted, or destroy. */
    CUmemGenericAllocationHandle probe;
    int has_probe;
    struct link link[2];                /* [0]: to the successor (connected), [1]: from the predecessor (accepted) */
    struct piece *pieces;
    struct mirror **mirrors;
    int nmirrors, capmirrors;
    int ndoomed;
    uint64_t next_check_us;
    struct vmm_wire_piece *scratch;     /* one buffer's pieces (describe) */
    uint64_t *blocks;                   /* their memory block ids, sorted (repeats_block) */
    int capscratch;
};

/* Where this rank sends to (reads from) neighbour r: two ranks have a socket each way. */
static inline struct link *out_link(struct ipc_vmm *v, const struct ipc_comm *c, int r)
{
    return r == succ_of(c) ? &v->link[0] : &v->link[1];
}

static inline struct link *in_link(struct ipc_vmm *v, const struct ipc_comm *c, int r)
{
    return r == pred_of(c) ? &v->link[1] : &v->link[0];
}

#endif
