/*
 * Prints one rendezvous frame as hex, made with the shim's own encoder, for
 * the tests that talk to a root's listener directly (wrong tokens, duplicate
 * ranks, a stranger's protocol).
 *
 *   rv_frame hello <token-hex-32> RANK NRANKS
 *   rv_frame vote <token-hex-32> OK
 *   rv_frame abort <token-hex-32> REASON   (what a leader or rank at a limit sends)
 *   rv_frame token <id-hex-256>     the token in a marked ID (or "none")
 */
#include "rv_wire.h"
#include "uid_mark.h"
#include "unhex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    static struct rv_msg m;
    static uint8_t buf[RV_MAX_FRAME];
    if (argc == 3 && strcmp(argv[1], "token") == 0) {
        ncclUniqueId id;
        struct uid_mark mark;
        if (unhex(argv[2], (uint8_t *)id.internal, sizeof(id.internal)) != 0)
            return 2;
        if (!uid_mark_read(&id, &mark)) {
            printf("none\n");
            return 0;
        }
        for (int i = 0; i < UID_TOKEN_LEN; i++)
            printf("%02x", mark.token[i]);
        printf(" %u\n", mark.port);
        return 0;
    }
    if (argc < 4 || unhex(argv[2], m.token, RV_TOKEN_LEN) != 0)
        return 2;
    if (strcmp(argv[1], "hello") == 0 && argc == 5) {
        m.type = RV_HELLO;
        struct rank_facts *f = &m.u.hello;
        f->rank = atoi(argv[3]);
        f->nranks = atoi(argv[4]);
        f->pid = 1;
        snprintf(f->host, sizeof(f->host), "intruder");
        snprintf(f->host_id, sizeof(f->host_id), "intruder");
        f->cuda_device = 0;
        snprintf(f->fn, sizeof(f->fn), "ncclCommInitRank");
        f->nccl_version = 22809;
    } else if (strcmp(argv[1], "vote") == 0) {
        m.type = RV_VOTE;
        m.u.vote.ok = atoi(argv[3]);
    } else if (strcmp(argv[1], "abort") == 0) {
        m.type = RV_ABORT;
        snprintf(m.u.reason, sizeof(m.u.reason), "%s", argv[3]);
    } else {
        return 2;
    }
    size_t n = rv_encode(&m, buf, sizeof(buf));
    if (!n)
        return 1;
    for (size_t i = 0; i < n; i++)
        printf("%02x", buf[i]);
    printf("\n");
    return 0;
}
