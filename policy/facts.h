/*
 * What one rank tells the root about itself when a marked communicator is
 * created (shim/rendezvous/rv_wire.c carries it, policy/decide.c reads it).  Plain data:
 * no NCCL or CUDA types, fixed sizes so that a message can be bounded.
 */
#ifndef NCCLSHIM_POLICY_FACTS_H
#define NCCLSHIM_POLICY_FACTS_H

#include "evidence.h"

#include <stdint.h>
#include <string.h>

#define FACTS_HOST_LEN 128
#define FACTS_PATH_LEN 512
#define FACTS_TITLE_LEN 256
#define FACTS_NAME_LEN 48
/* Largest communicator that takes part in a rendezvous; larger ones pass
 * through (every rank sees the same nranks, so they all skip it). */
#define FACTS_MAX_RANKS 65536
/* Why a rank could not carry out socket, said before the decision. */
#define FACTS_SOCKET_WHY_LEN 320
/* Why a rank could not judge its host's fabric. */
#define FABRIC_WHY_LEN 256
/* Bounds of the fabric's counts and of NCCLSHIM_FABRIC_BUDGET (what a HELLO may carry). */
#define FABRIC_MAX_COUNT 65536
#define FABRIC_MAX_BUDGET 16777216

/* The RDMA devices NCCL could use on a host (docs/policy.md, "Across hosts"):
 * EFA (vendor 0x1d0f) or InfiniBand/RoCE (a port with link_layer InfiniBand
 * or Ethernet, ACTIVE); both on one host is MIXED. */
enum fabric_kind { FABRIC_NONE = 0, FABRIC_EFA, FABRIC_IB, FABRIC_MIXED };
enum fabric_state { FABRIC_NOT_SAID = 0, FABRIC_READ, FABRIC_UNREADABLE };

/* What a rank knows of its host's fabric: read by the shim (shim/evidence/fabric_probe.c,
 * from sysfs and NCCLSHIM_FABRIC_BUDGET), weighed by policy/fabric.c. */
struct fabric_facts {
    int state;                          /* enum fabric_state: NOT_SAID from a shim before issue 25 */
    int kind;                           /* enum fabric_kind (READ only) */
    int devices;                        /* usable RDMA devices on the host */
    int gpus;                           /* NVIDIA GPUs on the host's PCI bus (0: none seen) */
    int budget;                         /* NCCLSHIM_FABRIC_BUDGET: QPs a device the weight-update
                                         * communicator may take on this host; 0: not set */
    char why[FABRIC_WHY_LEN];           /* UNREADABLE: why */
};

/*
 * The heavy strings of a rank's facts: its evidence as text.  Out of line
 * because thousands of ranks of one job say the same things: the root keeps
 * one copy of each distinct text (shim/rendezvous/rv_texts.c) and every rank
 * that said it points at that copy, so its memory grows with the job's
 * distinct texts, not with its ranks.  A rank's own facts point at its own
 * text; a decoded HELLO at the message's.
 */
struct rank_text {
    char caller_lib[FACTS_PATH_LEN];
    char title[FACTS_TITLE_LEN];
    char role_reason[EVIDENCE_REASON_LEN];
    char local_purpose_reason[EVIDENCE_REASON_LEN];
    char frames[EVIDENCE_MAX_FRAMES][EVIDENCE_FRAME_LEN];
    char socket_why[FACTS_SOCKET_WHY_LEN];
    char frugal_why[FACTS_SOCKET_WHY_LEN];
    char full_api_why[FACTS_SOCKET_WHY_LEN];
};

struct rank_facts {
    int rank, nranks;
    uint32_t pid;
    char host[FACTS_HOST_LEN];          /* display name: NCCLSHIM_HOSTNAME or gethostname */
    char host_id[FACTS_HOST_LEN];       /* identity, NCCL's: NCCL_HOSTID, else host name + boot_id */
    int cuda_device;                    /* -1 if not known */
    char fn[FACTS_NAME_LEN];            /* the init function the application called */
    int nccl_version;                   /* of the library this rank's call reached */
    char shim_version[16];
    enum api_family api;
    /* caller_lib, title, role_reason, local_purpose_reason, frames, and the
     * why of socket_ready, frugal_ready and full_api: never NULL (an empty
     * text is facts_no_text). */
    const struct rank_text *text;
    enum role role;
    enum purpose local_purpose;         /* classify_purpose on this rank's evidence alone */
    int nframes;                        /* 0..EVIDENCE_MAX_FRAMES: text->frames used */
    int strict_error;                   /* NCCLSHIM_STRICT=1 and a malformed policy on this rank */
    /* Whether this rank can carry out socket, checked before its HELLO (all
     * the checks are local): lets the root commit socket in one round.
     * 0: not said (a shim before this, or NCCLSHIM_RENDEZVOUS_ONE_ROUND=0):
     * the vote round decides; 1: ready; 2: not ready, text->socket_why says why. */
    int socket_ready;
    /* The same for frugal (its checks are local too: the NCCL release, the
     * NCCL_MIN_CTAS family): lets auto choose socket instead of a frugal
     * that a rank would veto into passthrough.  0: not said; 1: ready; 2: not. */
    int frugal_ready;
    /* Whether this rank's creator needs NCCL's whole API on the communicator
     * (windows, the device API, split: NeMo-RL's nccl_reshard, vLLM's m2n),
     * from its frames and loaded libraries (NCCLSHIM_FULL_API): then it never
     * gets ipc.  0: no (or not said); 1: yes, text->full_api_why says what matched. */
    int full_api;
    struct fabric_facts fabric;
    /* Whether this rank is an inference engine's worker (enum engine_evidence
     * bits: its title, its frames, or only its library), and the index of
     * the frame that matched (-1: none).  0 from a shim before issue 43. */
    int engine;
    int engine_frame;
};

/* The text of a rank that said nothing: every string empty. */
extern const struct rank_text facts_no_text;

/*
 * 1 if ranks a and b have the same Python frames (and as many): a rank's
 * frames are matched against patterns once per distinct set, not once per
 * rank (thousands of ranks of one job share a few sets).
 */
static inline int facts_same_frames(const struct rank_facts *a, const struct rank_facts *b)
{
    if (a->nframes != b->nframes)
        return 0;
    if (a->text == b->text)
        return 1; /* at the root, the same text is one copy */
    int n = a->nframes < 0 ? 0 : a->nframes > EVIDENCE_MAX_FRAMES ? EVIDENCE_MAX_FRAMES : a->nframes;
    for (int k = 0; k < n; k++)
        if (strncmp(a->text->frames[k], b->text->frames[k], EVIDENCE_FRAME_LEN) != 0)
            return 0;
    return 1;
}

#endif
