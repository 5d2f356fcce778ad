/*
 * fabric_choose(): auto across hosts weighs the fabric of every host of a
 * weight-update group (docs/policy.md, "auto across hosts").  Each host gets a
 * verdict from its ranks' facts; the worst decides for the group, so that one
 * scarce host keeps everyone off its fabric, and a host beyond judging keeps
 * socket, as before the fabric was weighed.
 */
#define _GNU_SOURCE
#include "fabric.h"
#include "hosts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ordered from best to worst: the group takes the worst of its hosts. */
enum verdict_kind { V_AMPLE = 0, V_FRUGAL, V_SCARCE, V_UNKNOWN };

/* One host's merged facts. */
struct host {
    int first;                          /* lowest rank on it: names it in reasons */
    int ranks;                          /* of this group */
    int unjudged;                       /* a rank that said nothing or could not read, or -1 */
    int kind, devices, gpus, budget;    /* kind -1: ranks disagree */
};

const char *fabric_kind_name(int kind)
{
    switch (kind) {
    case FABRIC_NONE: return "no RDMA device";
    case FABRIC_EFA: return "EFA";
    case FABRIC_IB: return "InfiniBand/RoCE";
    default: return "EFA and InfiniBand/RoCE";
    }
}

static long ceil_log2(long n)
{
    long k = 0;
    while ((1L << k) < n && k < 62)
        k++;
    return k;
}

long fabric_estimate(int kind, int on_host, int nranks, int devices, int one_channel)
{
    if (on_host < 1 || devices < 1)
        return 0;
    if (kind == FABRIC_EFA) /* whatever the channels; processes spread over the NICs, an endpoint on one */
        return ((long)on_host + devices - 1) / devices * FABRIC_EFA_QPS_PER_COMM;
    /* PAT (NCCL 2.23+) connects rank +- 2^k too where a host has one rank. */
    long ends = FABRIC_IB_ENDS_PER_CHANNEL + (on_host == 1 ? 2 * ceil_log2(nranks) : 0);
    /* One channel sits on one device; the default's channels spread over all. */
    return (long)on_host * ends * (one_channel ? 1 : FABRIC_DEFAULT_CHANNELS_PER_DEVICE);
}

static void merge_rank(struct host *h, const struct rank_facts *f, int rank)
{
    const struct fabric_facts *ff = &f->fabric;
    if (h->ranks++ == 0) {
        h->first = rank;
        h->unjudged = -1;
        h->kind = ff->kind;
        h->devices = ff->devices;
        h->gpus = ff->gpus;
        h->budget = ff->budget;
    }
    if (ff->state != FABRIC_READ) {
        if (h->unjudged < 0)
            h->unjudged = rank;
        return;
    }
    if (ff->kind != h->kind)
        h->kind = -1;
    h->devices = ff->devices < h->devices ? ff->devices : h->devices;
    h->gpus = ff->gpus > h->gpus ? ff->gpus : h->gpus;
    /* The smallest budget any rank of the host states. */
    if (ff->budget > 0 && (h->budget == 0 || ff->budget < h->budget))
        h->budget = ff->budget;
}

/* A host's verdict and its evidence (why: "host 'x': ..."). */
static enum verdict_kind host_verdict(const struct host *h, const struct rank_facts *facts, int nranks, char *why,
                                      size_t len)
{
    const char *name = facts[h->first].host;
    if (h->unjudged >= 0) {
        const struct fabric_facts *ff = &facts[h->unjudged].fabric;
        if (ff->state == FABRIC_NOT_SAID)
            snprintf(why, len, "rank %d (host '%.40s') sent no fabric facts (its shim predates them)",
                     h->unjudged, name);
        else
            snprintf(why, len, "rank %d (host '%.40s') could not read its fabric: %.200s", h->unjudged, name,
                     memchr(ff->why, 0, sizeof(ff->why)) ? ff->why : "(no reason given)");
        return V_UNKNOWN;
    }
    if (h->kind < 0 || h->kind == FABRIC_MIXED || h->kind == FABRIC_NONE || h->devices < 1) {
        snprintf(why, len, "host '%.40s' has %s: not a fabric auto can weigh", name,
                 h->kind < 0 ? "ranks that see different fabrics"
                             : h->devices < 1 ? fabric_kind_name(FABRIC_NONE) : fabric_kind_name(h->kind));
        return V_UNKNOWN;
    }
    const char *kind = fabric_kind_name(h->kind);
    if (h->budget <= 0) {
        if (h->gpus < 1) {
            snprintf(why, len, "host '%.40s' has %d %s device%s, no GPU seen on its PCI bus, no NCCLSHIM_FABRIC_BUDGET",
                     name, h->devices, kind, h->devices > 1 ? "s" : "");
            return V_UNKNOWN;
        }
        int ample = h->devices >= FABRIC_AMPLE_DEVICES_PER_GPU * h->gpus;
        snprintf(why, len, "host '%.40s' has %d %s device%s for %d GPU%s (%s %d a GPU)%s", name, h->devices, kind,
                 h->devices > 1 ? "s" : "", h->gpus, h->gpus > 1 ? "s" : "", ample ? "at least" : "fewer than",
                 FABRIC_AMPLE_DEVICES_PER_GPU, ample ? "" : " and no NCCLSHIM_FABRIC_BUDGET to say whether one "
                 "channel fits");
        return ample ? V_AMPLE : V_SCARCE;
    }
    long full = fabric_estimate(h->kind, h->ranks, nranks, h->devices, 0);
    long one = fabric_estimate(h->kind, h->ranks, nranks, h->devices, 1);
    int n = snprintf(why, len, "host '%.40s': %s, NCCLSHIM_FABRIC_BUDGET %d QPs a device; this group's %d rank%s "
                     "there take about %ld", name, kind, h->budget, h->ranks, h->ranks > 1 ? "s" : "", full);
    if (n > 0 && (size_t)n < len)
        snprintf(why + n, len - (size_t)n, h->kind == FABRIC_EFA ? " (an endpoint a communicator a process, "
                 "whatever the channels)" : " at NCCL's default channels, %ld at one", one);
    return full <= h->budget ? V_AMPLE : one <= h->budget && h->kind == FABRIC_IB ? V_FRUGAL : V_SCARCE;
}

/* The lowest rank that cannot take frugal, or -1. */
static int frugal_refuser(const struct rank_facts *facts, int nranks)
{
    for (int i = 0; i < nranks; i++)
        if (facts[i].frugal_ready != 1)
            return i;
    return -1;
}

static const char *const verdict_words[] = {
    "fabric ample", "fabric scarce, one channel fits", "fabric scarce", "fabric not judged",
};

enum action fabric_choose(const struct rank_facts *facts, int nranks, char *why, size_t whylen)
{
    /* Hosts grouped in linear time (policy/hosts.c); each host's ranks merged
     * in rank order, its first rank naming it, as a sort by host would. */
    int *host_of = facts && nranks > 0 ? malloc(sizeof(int) * (size_t)nranks) : NULL;
    int nhosts = host_of ? hosts_group(facts, nranks, host_of) : -1;
    struct host *hosts = nhosts > 0 ? calloc((size_t)nhosts, sizeof(*hosts)) : NULL;
    if (!facts || nranks < 1 || !hosts) {
        snprintf(why, whylen, "fabric not judged (%s)", !facts || nranks < 1 ? "no ranks' facts" : "no memory to weigh it");
        free(host_of);
        return ACTION_SOCKET;
    }
    for (int i = 0; i < nranks; i++)
        merge_rank(&hosts[host_of[i]], &facts[i], i);
    enum verdict_kind worst = V_AMPLE;
    int worst_first = -1;
    char best[400] = "", cur[400];
    for (int k = 0; k < nhosts; k++) {
        const struct host *h = &hosts[k];
        enum verdict_kind v = host_verdict(h, facts, nranks, cur, sizeof(cur));
        if (worst_first < 0 || v > worst || (v == worst && h->first < worst_first)) {
            worst = v;
            worst_first = h->first;
            memcpy(best, cur, sizeof(best));
        }
    }
    free(hosts);
    free(host_of);
    enum action a = worst == V_AMPLE ? ACTION_PASSTHROUGH : worst == V_FRUGAL ? ACTION_FRUGAL : ACTION_SOCKET;
    int n = snprintf(why, whylen, "%s (%s%s)", verdict_words[worst], worst == V_AMPLE && nhosts > 1 ? "every host; "
                     : "", best);
    int r = a == ACTION_FRUGAL ? frugal_refuser(facts, nranks) : -1;
    if (r >= 0 && n > 0 && (size_t)n < whylen) {
        const char *fw = facts[r].text->frugal_why;
        const char *rw = facts[r].frugal_ready == 2 && memchr(fw, 0, FACTS_SOCKET_WHY_LEN) ? fw
                                                                                            : "it did not say it could";
        snprintf(why + n, whylen - (size_t)n, ", but rank %d cannot take frugal (%.200s)", r, rw);
        a = ACTION_SOCKET;
    }
    return a;
}
