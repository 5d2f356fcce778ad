/*
 * The check of the ipc transport's VMM messages (shim/ipc/ipc_vmm_wire.c):
 * what a neighbour sends over the Unix socket is acted on (descriptors
 * imported and mapped, mappings given up) only if it is whole, in sequence,
 * from that neighbour, with as many descriptors as pieces, and its pieces lie
 * inside their ranges without overlapping.  TAP.
 *
 *   test_vmm_wire [--corpus DIR]   (DIR: seeds for tests/fuzz/fuzz_vmm.c)
 */
#include "tap.h"
#include "ipc_vmm_wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>


#define MiB (1ull << 20)
#define RANGE 0x7f0000000000ull

/* A PIECES message of `k` pieces of 20 MiB back to back in one 1 GiB range. */
static struct vmm_msg pieces(uint32_t k)
{
    struct vmm_msg m;
    memset(&m, 0, sizeof(m));
    m.magic = VMM_MAGIC;
    m.kind = VMM_PIECES;
    m.seq = 5;
    m.rank = 1;
    m.n = k;
    for (uint32_t i = 0; i < k; i++)
        m.p[i] = (struct vmm_wire_piece){ 100 + i, RANGE + 2 * MiB + i * 20 * MiB, 20 * MiB, RANGE, 1024 * MiB };
    return m;
}

static const char *check(const struct vmm_msg *m, int nfds)
{
    return vmm_msg_check(m, vmm_msg_len(m), nfds, 1, 5);
}

static int has(const char *why, const char *what)
{
    return why && strstr(why, what);
}

/* Fuzzer seeds: [nfds][seq - 5][the message], as fuzz_vmm.c reads them. */
static void seed(const char *dir, const char *name, const struct vmm_msg *m, int nfds)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    unsigned char head[2] = { (unsigned char)nfds, 0 };
    fwrite(head, 1, 2, f);
    fwrite(m, 1, vmm_msg_len(m), f);
    fclose(f);
}

int main(int argc, char **argv)
{
    struct vmm_msg m = pieces(3);
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0) {
        seed(argv[2], "pieces3", &m, 3);
        struct vmm_msg f = pieces(2);
        f.kind = VMM_FORGET;
        seed(argv[2], "forget2", &f, 0);
        struct vmm_msg full = pieces(VMM_MSG_PIECES);
        seed(argv[2], "pieces32", &full, VMM_MSG_PIECES);
        return 0;
    }
    ok(check(&m, 3) == NULL, "3 pieces back to back with 3 descriptors: accepted");
    m = pieces(VMM_MSG_PIECES);
    ok(check(&m, VMM_MSG_PIECES) == NULL, "%d pieces (the most a message carries): accepted", VMM_MSG_PIECES);
    struct vmm_msg f = pieces(2);
    f.kind = VMM_FORGET;
    f.p[0].range = f.p[0].size = 0; /* FORGET names blocks; ranges are not its business */
    ok(check(&f, 0) == NULL, "FORGET of 2 pieces, no descriptors: accepted");

    m = pieces(3);
    ok(has(vmm_msg_check(&m, VMM_MSG_HEAD - 1, 3, 1, 5), "not one of ours"), "shorter than a header: rejected");
    m.magic ^= 1;
    ok(has(check(&m, 3), "not one of ours"), "wrong magic: rejected");
    m = pieces(3);
    ok(has(vmm_msg_check(&m, vmm_msg_len(&m) - 1, 3, 1, 5), "length"), "a byte short of its count: rejected");
    ok(has(vmm_msg_check(&m, vmm_msg_len(&m) + 40, 3, 1, 5), "length"), "a piece longer than its count: rejected");
    m.n = VMM_MSG_PIECES + 1;
    ok(has(vmm_msg_check(&m, sizeof(m), 3, 1, 5), "length"), "a count over %d: rejected", VMM_MSG_PIECES);
    m = pieces(3);
    ok(has(vmm_msg_check(&m, vmm_msg_len(&m), 3, 2, 5), "another rank"), "in another rank's name: rejected");
    ok(has(vmm_msg_check(&m, vmm_msg_len(&m), 3, 1, 6), "sequence"), "a message skipped: rejected");
    ok(has(vmm_msg_check(&m, vmm_msg_len(&m), 3, 1, 4), "sequence"), "a message again: rejected");
    m.kind = VMM_HELLO;
    ok(has(check(&m, 3), "unknown kind"), "a HELLO on an open link: rejected");
    m.kind = 77;
    ok(has(check(&m, 3), "unknown kind"), "an unknown kind: rejected");
    m = pieces(3);
    ok(has(check(&m, 2), "descriptors"), "PIECES with a descriptor missing: rejected");
    ok(has(check(&m, 4), "descriptors"), "PIECES with a descriptor too many: rejected");
    ok(has(check(&f, 1), "descriptors"), "FORGET with a descriptor: rejected");

    m = pieces(3);
    m.p[1].size = 0;
    ok(has(check(&m, 3), "outside"), "a piece of size 0: rejected");
    m = pieces(3);
    m.p[1].base = RANGE - 2 * MiB;
    ok(has(check(&m, 3), "outside"), "a piece before its range: rejected");
    m = pieces(3);
    m.p[2].size = 1024 * MiB;
    ok(has(check(&m, 3), "outside"), "a piece past its range's end: rejected");
    m = pieces(3);
    m.p[0].range_size = 0;
    ok(has(check(&m, 3), "outside"), "a range of size 0: rejected");
    m = pieces(3);
    m.p[0].range = UINT64_MAX - MiB;
    m.p[0].base = UINT64_MAX - MiB / 2;
    m.p[0].range_size = 4 * MiB;
    m.p[0].size = MiB;
    ok(has(check(&m, 3), "outside"), "a range that wraps around the address space: rejected");
    m = pieces(3);
    m.p[2].base = m.p[1].base + MiB;
    ok(has(check(&m, 3), "overlap"), "two pieces of one message that overlap: rejected");
    m = pieces(3);
    m.p[2].base = m.p[1].base + MiB;
    m.p[2].range = RANGE + 2048 * MiB; /* another range: its own mirror */
    m.p[2].base = m.p[2].range;
    ok(check(&m, 3) == NULL, "pieces of two ranges: accepted");
    m = pieces(3);
    m.p[2].block = m.p[0].block; /* one allocation mapped at two places */
    ok(has(check(&m, 3), "memory block twice"), "two pieces of one memory block in one message: rejected");

    return tap_done();
}
