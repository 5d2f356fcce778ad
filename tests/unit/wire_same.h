/*
 * Whether two decoded rendezvous messages are the same, field by field: the
 * round-trip check of the wire unit test and of its fuzzer.
 */
#ifndef NCCLSHIM_TEST_WIRE_SAME_H
#define NCCLSHIM_TEST_WIRE_SAME_H

#include "rv_wire.h"

#include <string.h>

/* Field by field: 1 if `a` and `b` carry the same message. */
static int rv_msg_same(const struct rv_msg *a, const struct rv_msg *b)
{
    if (a->type != b->type || memcmp(a->token, b->token, RV_TOKEN_LEN) != 0)
        return 0;
    switch (a->type) {
    case RV_HELLO: {
        const struct rank_facts *x = &a->u.hello, *y = &b->u.hello;
        if (x->rank != y->rank || x->nranks != y->nranks || x->pid != y->pid || x->cuda_device != y->cuda_device ||
            x->nccl_version != y->nccl_version || x->api != y->api || x->role != y->role ||
            x->local_purpose != y->local_purpose || x->strict_error != y->strict_error || x->nframes != y->nframes ||
            a->leader_pid != b->leader_pid || x->socket_ready != y->socket_ready ||
            x->frugal_ready != y->frugal_ready || x->fabric.state != y->fabric.state ||
            x->fabric.kind != y->fabric.kind || x->fabric.devices != y->fabric.devices ||
            x->fabric.gpus != y->fabric.gpus || x->fabric.budget != y->fabric.budget || x->full_api != y->full_api ||
            strcmp(a->leader_addr, b->leader_addr))
            return 0;
        if (strcmp(x->text->socket_why, y->text->socket_why) || strcmp(x->text->frugal_why, y->text->frugal_why) ||
            strcmp(x->fabric.why, y->fabric.why) || strcmp(x->text->full_api_why, y->text->full_api_why))
            return 0;
        if (strcmp(x->host, y->host) || strcmp(x->host_id, y->host_id) || strcmp(x->fn, y->fn) ||
            strcmp(x->shim_version, y->shim_version) || strcmp(x->text->caller_lib, y->text->caller_lib) ||
            strcmp(x->text->title, y->text->title) || strcmp(x->text->role_reason, y->text->role_reason) ||
            strcmp(x->text->local_purpose_reason, y->text->local_purpose_reason))
            return 0;
        for (int i = 0; i < x->nframes; i++)
            if (strcmp(x->text->frames[i], y->text->frames[i]))
                return 0;
        return 1;
    }
    case RV_DECISION:
    case RV_COMMIT: {
        const struct rv_verdict *x = &a->u.verdict, *y = &b->u.verdict;
        return x->action == y->action && x->purpose == y->purpose && x->final == y->final &&
               x->decision_id == y->decision_id && x->nhosts == y->nhosts && x->ntraining == y->ntraining &&
               x->ninference == y->ninference && x->nunknown == y->nunknown &&
               !strcmp(x->purpose_reason, y->purpose_reason) && !strcmp(x->action_reason, y->action_reason);
    }
    case RV_VOTE:
        return a->u.vote.ok == b->u.vote.ok && a->u.vote.rank == b->u.vote.rank && !strcmp(a->u.vote.reason, b->u.vote.reason) &&
               a->u.vote.bloblen == b->u.vote.bloblen &&
               !memcmp(a->u.vote.blob, b->u.vote.blob, (size_t)a->u.vote.bloblen);
    case RV_PEERS:
        if (a->u.peers.npeers != b->u.peers.npeers)
            return 0;
        for (int i = 0; i < a->u.peers.npeers; i++) {
            const struct rv_peer *x = &a->u.peers.peer[i], *y = &b->u.peers.peer[i];
            if (x->rank != y->rank || x->bloblen != y->bloblen || memcmp(x->blob, y->blob, (size_t)x->bloblen))
                return 0;
        }
        return 1;
    case RV_ABORT:
        return !strcmp(a->u.reason, b->u.reason);
    case RV_REDIRECT:
        return !strcmp(a->u.to, b->u.to);
    }
    return 0;
}

#endif
