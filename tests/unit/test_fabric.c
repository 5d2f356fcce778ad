/*
 * auto across hosts (policy/fabric.c) on every kind of fabric evidence, and
 * the shim's reading of it (shim/evidence/fabric_probe.c) from fake sysfs trees,
 * well-formed and not.  The decisions go through decide(), so the reasons are
 * checked whole, as records show them.
 */
#define _GNU_SOURCE
#include "policy/decide.h"
#include "policy/fabric.h"
#include "fabric_probe.h"
#include "config.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* fabric_probe.c's probe_once reads the budget from the settings; the tests
 * call fabric_probe_read with their own. */
const struct shim_config *shim_config(void)
{
    static struct shim_config c;
    return &c;
}

/* 8192 ranks: FACTS_MAX_RANKS (65536) of them would take 390 MB here; bench/decide_scale.c times those. */
#define TEST_RANKS 8192
static struct rank_facts F[TEST_RANKS];
static struct rank_text T[TEST_RANKS]; /* F[i]'s text, written here */
static struct policy P;
static struct decision D;
static const struct policy_patterns PP = { 0 };

static int has(const char *s, const char *sub)
{
    if (strstr(s, sub))
        return 1;
    printf("# '%s' not in '%s'\n", sub, s);
    return 0;
}

/* Ranks 0..ntrain-1 training, the rest inference; host(i) names rank i's host;
 * every rank says `fab` and is ready for frugal. */
static void group(int n, int ntrain, const char *(*host)(int), struct fabric_facts fab)
{
    for (int i = 0; i < n; i++) {
        struct rank_facts *f = &F[i];
        memset(f, 0, sizeof(*f));
        memset(&T[i], 0, sizeof(T[i]));
        f->text = &T[i];
        f->rank = i;
        f->nranks = n;
        f->role = i < ntrain ? ROLE_TRAINING : ROLE_INFERENCE;
        f->api = API_CTYPES;
        snprintf(f->host, sizeof(f->host), "%s", host(i));
        snprintf(f->host_id, sizeof(f->host_id), "%s", host(i));
        f->frugal_ready = 1;
        f->fabric = fab;
    }
}

static const char *two_hosts(int r) { return r < 2 ? "node-a" : "node-b"; }
static const char *many_hosts(int r)
{
    static char h[TEST_RANKS][16];
    snprintf(h[r], sizeof(h[r]), "h%d", r / 128);
    return h[r];
}

static void run(int n)
{
    policy_parse(&P, NULL, NULL, NULL);
    decide(&P, &PP, F, n, &D);
}

static struct fabric_facts fab(int kind, int devices, int gpus, int budget)
{
    struct fabric_facts f = { FABRIC_READ, kind, devices, gpus, budget, "" };
    return f;
}

static void expect(enum action a, const char *reason, const char *what)
{
    int good = D.action == a && has(D.action_reason, reason) && strlen(D.action_reason) < sizeof(D.action_reason);
    ok(good, "%s -> %s", what, action_name(a));
    if (!good)
        printf("#   got %s: %s\n", action_name(D.action), D.action_reason);
}

/* The usual case: 4 ranks, 2 trainers, on two hosts, every rank with the same facts. */
static void plain(struct fabric_facts f, enum action a, const char *reason, const char *what)
{
    group(4, 2, two_hosts, f);
    run(4);
    expect(a, reason, what);
}

static void test_estimates(void)
{
    ok(fabric_estimate(FABRIC_IB, 2, 4, 1, 1) == 12 && fabric_estimate(FABRIC_IB, 2, 4, 1, 0) == 24,
       "IB, 2 ranks of 4 on a host, 1 device: about 12 QPs at one channel, 24 at the default 2 a device");
    ok(fabric_estimate(FABRIC_IB, 1, 3, 1, 1) == 10 && fabric_estimate(FABRIC_IB, 1, 3, 1, 0) == 20,
       "IB, a host's only rank of 3: PAT's rank +- 2^k adds 2 log2(3) = 4 ends a channel");
    ok(fabric_estimate(FABRIC_IB, 2, 4, 4, 0) == 24,
       "IB with 4 devices: the default's channels spread over them, the same per device");
    ok(fabric_estimate(FABRIC_EFA, 2, 4, 1, 0) == 8 && fabric_estimate(FABRIC_EFA, 2, 4, 1, 1) == 8,
       "EFA, 2 processes on a host: an endpoint (4 QPs) each, whatever the channels");
    ok(fabric_estimate(FABRIC_EFA, 3, 4, 2, 0) == 8 && fabric_estimate(FABRIC_EFA, 2, 4, 16, 0) == 4,
       "EFA: processes spread over the devices, each endpoint whole on one (3 over 2: 8 a device; 2 over 16: 4)");
    ok(fabric_estimate(FABRIC_IB, 0, 4, 1, 0) == 0 && fabric_estimate(FABRIC_IB, 2, 4, 0, 0) == 0,
       "no ranks or no devices: nothing estimated");
}

static void test_unjudged(void)
{
    group(4, 2, two_hosts, (struct fabric_facts){ 0 });
    run(4);
    expect(ACTION_SOCKET, "2 inference ranks (ranks 2-3), ranks on 2 hosts, fabric not judged (rank 0 (host 'node-a') "
           "sent no fabric facts (its shim predates them)): socket", "no rank said anything (shims from before)");
    group(4, 2, two_hosts, fab(FABRIC_EFA, 8, 2, 0));
    F[3].fabric.state = FABRIC_NOT_SAID;
    run(4);
    expect(ACTION_SOCKET, "fabric not judged (rank 3 (host 'node-b') sent no fabric facts", "one older shim (rank 3) "
           "in an ample group");
    group(4, 2, two_hosts, fab(FABRIC_EFA, 8, 2, 0));
    F[2].fabric = (struct fabric_facts){ FABRIC_UNREADABLE, 0, 0, 0, 0, "cannot list /sys/class/infiniband: EACCES" };
    run(4);
    expect(ACTION_SOCKET, "fabric not judged (rank 2 (host 'node-b') could not read its fabric: cannot list "
           "/sys/class/infiniband: EACCES): socket", "a rank that could not read its fabric");
    plain(fab(FABRIC_NONE, 0, 2, 0), ACTION_SOCKET, "fabric not judged (host 'node-a' has no RDMA device: not a fabric auto can weigh): socket",
           "no RDMA device (another network plugin, or none)");
    plain(fab(FABRIC_MIXED, 2, 2, 0), ACTION_SOCKET, "host 'node-a' has EFA and InfiniBand/RoCE: not a fabric auto can weigh",
           "EFA and InfiniBand on one host");
    group(4, 2, two_hosts, fab(FABRIC_IB, 4, 2, 0));
    F[3].fabric = fab(FABRIC_EFA, 4, 2, 0);
    run(4);
    expect(ACTION_SOCKET, "host 'node-b' has ranks that see different fabrics", "two ranks of one host disagree");
    plain(fab(FABRIC_IB, 4, 0, 0), ACTION_SOCKET, "host 'node-a' has 4 InfiniBand/RoCE devices, no GPU seen on its PCI bus, no "
           "NCCLSHIM_FABRIC_BUDGET): socket", "no GPU seen and no budget");
}

static void test_by_devices(void)
{
    plain(fab(FABRIC_EFA, 8, 2, 0), ACTION_PASSTHROUGH, "ranks on 2 hosts, fabric ample (every host; host 'node-a' has 8 EFA devices for 2 GPUs "
           "(at least 2 a GPU)): passthrough", "8 EFA devices for 2 GPUs on each host (a p5's ratio)");
    group(4, 2, two_hosts, fab(FABRIC_EFA, 8, 2, 0));
    F[2].fabric.devices = F[3].fabric.devices = 1;
    F[2].fabric.gpus = F[3].fabric.gpus = 1;
    run(4);
    expect(ACTION_SOCKET, "fabric scarce (host 'node-b' has 1 EFA device for 1 GPU (fewer than 2 a GPU) and no "
           "NCCLSHIM_FABRIC_BUDGET to say whether one channel fits): socket",
           "one host with 1 EFA device for 1 GPU (a g6e.8xlarge), the other ample: the scarce one decides");
    plain(fab(FABRIC_IB, 4, 8, 0), ACTION_SOCKET, "host 'node-a' has 4 InfiniBand/RoCE devices for 8 GPUs (fewer than 2 a GPU)",
           "4 devices for 8 GPUs (a p4d's ratio), no budget");
}

static void test_by_budget(void)
{
    plain(fab(FABRIC_IB, 1, 2, 18), ACTION_FRUGAL, "ranks on 2 hosts, fabric scarce, one channel fits (host 'node-a': InfiniBand/RoCE, "
           "NCCLSHIM_FABRIC_BUDGET 18 QPs a device; this group's 2 ranks there take about 24 at NCCL's default "
           "channels, 12 at one): frugal", "IB, budget 18: 24 do not fit, 12 do");
    plain(fab(FABRIC_IB, 1, 2, 24), ACTION_PASSTHROUGH, "fabric ample (every host; host 'node-a': InfiniBand/RoCE, NCCLSHIM_FABRIC_BUDGET 24",
           "IB, budget 24: the default's 24 fit");
    plain(fab(FABRIC_IB, 1, 2, 11), ACTION_SOCKET, "fabric scarce (host 'node-a': InfiniBand/RoCE, NCCLSHIM_FABRIC_BUDGET 11 QPs a device",
           "IB, budget 11: not even one channel's 12 fit");
    plain(fab(FABRIC_EFA, 1, 2, 8), ACTION_PASSTHROUGH, "host 'node-a': EFA, NCCLSHIM_FABRIC_BUDGET 8 QPs a device; this group's 2 ranks there "
           "take about 8 (an endpoint a communicator a process, whatever the channels)", "EFA, budget 8: fits");
    plain(fab(FABRIC_EFA, 1, 2, 7), ACTION_SOCKET, "fabric scarce (host 'node-a': EFA", "EFA, budget 7: one channel saves no QPs there");
    /* The worst host decides, and the reason names it. */
    group(4, 2, two_hosts, fab(FABRIC_IB, 1, 2, 100));
    F[2].fabric.budget = F[3].fabric.budget = 12;
    run(4);
    expect(ACTION_FRUGAL, "fabric scarce, one channel fits (host 'node-b'", "node-a ample, node-b fits one channel");
    /* A host's smallest stated budget counts. */
    group(4, 2, two_hosts, fab(FABRIC_IB, 1, 2, 100));
    F[1].fabric.budget = 8;
    run(4);
    expect(ACTION_SOCKET, "host 'node-a': InfiniBand/RoCE, NCCLSHIM_FABRIC_BUDGET 8", "ranks of one host state 100 "
           "and 8: 8 counts");
    /* A budget beats the device count: 8 devices a GPU but a budget of 1. */
    plain(fab(FABRIC_EFA, 16, 2, 1), ACTION_SOCKET, "NCCLSHIM_FABRIC_BUDGET 1 QPs a device", "a stated budget wins over an ample device count");
}

static void test_frugal_refused(void)
{
    group(4, 2, two_hosts, fab(FABRIC_IB, 1, 2, 18));
    F[3].frugal_ready = 2;
    snprintf(T[3].frugal_why, sizeof(T[3].frugal_why), "NCCL 21605 has no ncclConfig_t.minCTAs/maxCTAs (2.17 or later "
             "needed)");
    run(4);
    expect(ACTION_SOCKET, "12 at one), but rank 3 cannot take frugal (NCCL 21605 has no ncclConfig_t.minCTAs/maxCTAs "
           "(2.17 or later needed)): socket", "frugal fits but rank 3's NCCL is too old: socket for all, not a veto");
    F[3].frugal_ready = 0;
    run(4);
    expect(ACTION_SOCKET, "but rank 3 cannot take frugal (it did not say it could)", "a rank that did not say");
    /* Through a rule's auto, the same. */
    group(4, 2, two_hosts, fab(FABRIC_IB, 1, 2, 18));
    policy_parse(&P, NULL, "hosts>1:auto", NULL);
    decide(&P, &PP, F, 4, &D);
    expect(ACTION_FRUGAL, "matches (purpose weight-update): auto: 2 inference ranks (ranks 2-3), ranks on 2 hosts, "
           "fabric scarce, one channel fits", "a rule's auto weighs the fabric too");
    /* One host: ipc, whatever the fabric. */
    group(4, 2, two_hosts, fab(FABRIC_IB, 1, 2, 1));
    for (int i = 0; i < 4; i++)
        snprintf(F[i].host_id, sizeof(F[i].host_id), "one");
    run(4);
    expect(ACTION_IPC, "all 4 ranks on one host: ipc", "one host: the fabric is not consulted");
    /* Ranks without a host identity are hosts of their own. */
    group(3, 1, two_hosts, fab(FABRIC_EFA, 4, 1, 0));
    F[0].host_id[0] = F[1].host_id[0] = '\0';
    run(3);
    expect(ACTION_PASSTHROUGH, "ranks on 3 hosts, fabric ample (every host; host 'node-a' has 4 EFA devices for 1 GPU",
           "ranks with no host identity, each ample on its own");
}

static void test_scale(void)
{
    int n = TEST_RANKS;
    group(n, n / 2, many_hosts, fab(FABRIC_EFA, 32, 8, 0));
    run(n);
    expect(ACTION_PASSTHROUGH, "ranks on 64 hosts, fabric ample (every host; host 'h0' has 32 EFA devices for 8 GPUs",
           "8192 ranks on 64 hosts, 32 EFA devices for 8 GPUs each");
    F[n - 1].fabric.budget = 4;
    run(n);
    expect(ACTION_SOCKET, "fabric scarce (host 'h63': EFA, NCCLSHIM_FABRIC_BUDGET 4 QPs a device; this group's 128 "
           "ranks there take about 16", "the last host's budget decides for 8192 ranks");
}

/* ---- the probe, on fake sysfs trees ---- */

static char root[256];

static void put(const char *rel, const char *content)
{
    char path[600], cmd[700];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
    if (system(cmd) != 0)
        exit(1);
    FILE *f = fopen(path, "w");
    if (!f)
        exit(1);
    fputs(content, f);
    fclose(f);
}

static void fresh(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", root, root);
    if (system(cmd) != 0)
        exit(1);
}

static void gpu(const char *bdf, const char *cls)
{
    char p[128];
    snprintf(p, sizeof(p), "bus/pci/devices/%s/vendor", bdf);
    put(p, "0x10de\n");
    snprintf(p, sizeof(p), "bus/pci/devices/%s/class", bdf);
    put(p, cls);
}

static void rdma(const char *name, const char *vendor, const char *link_layer, const char *state)
{
    char p[128];
    if (vendor) {
        snprintf(p, sizeof(p), "class/infiniband/%s/device/vendor", name);
        put(p, vendor);
    }
    if (link_layer) {
        snprintf(p, sizeof(p), "class/infiniband/%s/ports/1/link_layer", name);
        put(p, link_layer);
        snprintf(p, sizeof(p), "class/infiniband/%s/ports/1/state", name);
        put(p, state);
    }
}

static struct fabric_facts probe(int budget)
{
    struct fabric_facts f;
    fabric_probe_read(root, budget, &f);
    return f;
}

static int is_read(struct fabric_facts f, int kind, int devices, int gpus)
{
    if (f.state == FABRIC_READ && f.kind == kind && f.devices == devices && f.gpus == gpus)
        return 1;
    printf("#   state %d kind %d devices %d gpus %d why '%s'\n", f.state, f.kind, f.devices, f.gpus, f.why);
    return 0;
}

static int unread(struct fabric_facts f, const char *want)
{
    return f.state == FABRIC_UNREADABLE && f.kind == 0 && f.devices == 0 && has(f.why, want);
}

static void test_probe(void)
{
    snprintf(root, sizeof(root), "/tmp/ncclshim-fabric-test.%d", (int)getpid());
    fresh();
    ok(is_read(probe(0), FABRIC_NONE, 0, 0), "an empty tree: no RDMA device, no GPU (read, not unknown)");
    gpu("0000:01:00.0", "0x030200\n");
    gpu("0000:02:00.0", "0x030000\n");
    gpu("0000:01:00.1", "0x040300\n"); /* the GPU's audio function */
    put("bus/pci/devices/0000:00:1f.0/vendor", "0x8086\n");
    put("bus/pci/devices/0000:00:1f.0/class", "0x030000\n");
    put("bus/pci/devices/0000:03:00.0/vendor", "nvidia\n");
    ok(is_read(probe(0), FABRIC_NONE, 0, 2), "2 NVIDIA GPUs counted (3D and VGA class), not their audio function, "
       "another vendor's display, or a garbled vendor");
    rdma("efa_0", "0x1d0f\n", "Unknown\n", "4: ACTIVE\n");
    rdma("rdmap115s0", "0x1d0f\n", NULL, NULL);
    ok(is_read(probe(0), FABRIC_EFA, 2, 2), "EFA by vendor 0x1d0f, whatever the name (efa_0, rdmap115s0)");
    struct fabric_facts f = probe(256);
    ok(f.budget == 256 && f.state == FABRIC_READ, "the budget given is carried");
    rdma("mlx5_0", "0x15b3\n", "InfiniBand\n", "4: ACTIVE\n");
    ok(is_read(probe(0), FABRIC_MIXED, 3, 2), "EFA and an active InfiniBand port on one host: mixed");
    fresh();
    gpu("0000:01:00.0", "0x030200\n");
    rdma("mlx5_0", "0x15b3\n", "InfiniBand\n", "4: ACTIVE\n");
    rdma("mlx5_1", "0x15b3\n", "Ethernet\n", "4: ACTIVE\n");
    rdma("mlx5_2", "0x15b3\n", "InfiniBand\n", "1: DOWN\n");
    rdma("mlx5_3", NULL, "InfiniBand\n", "4: ACTIVE\n");
    rdma("odd_0", "0x1234\n", "Unknown\n", "4: ACTIVE\n");
    rdma("bare_0", NULL, NULL, NULL);
    ok(is_read(probe(0), FABRIC_IB, 3, 1), "IB and RoCE with an ACTIVE port count (with or without a vendor file); a "
       "DOWN port, an Unknown link of another vendor and an empty entry do not");
    /* Content that is not what the kernel writes: unjudged, with the file named. */
    rdma("bad_0", "zz\n", NULL, NULL);
    ok(unread(probe(0), "class/infiniband/bad_0/device/vendor is 'zz', not a PCI vendor id"), "a garbled vendor");
    fresh();
    rdma("bad_1", "0x15b3\n", "Banana\n", "4: ACTIVE\n");
    ok(unread(probe(0), "ports/1/link_layer is 'Banana', not InfiniBand, Ethernet or Unknown"), "a garbled link_layer");
    fresh();
    rdma("bad_2", "0x15b3\n", "InfiniBand\n", "ACTIVE\n");
    ok(unread(probe(0), "ports/1/state is 'ACTIVE', not '<number>: <STATE>'"), "a garbled port state");
    fresh();
    rdma("bad_3", "0x15b3\n", "InfiniBand\n", "4: ACTIVE\n");
    put("class/infiniband/bad_3/ports/2/state", "4: ACTIVE\n");
    ok(unread(probe(0), "ports/2/link_layer"), "a port without link_layer");
    fresh();
    char big[200];
    memset(big, '0', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    rdma("bad_4", big, NULL, NULL);
    ok(unread(probe(0), "not a PCI vendor id"), "a vendor file longer than an attribute");
    fresh();
    put("class/infiniband", "not a directory\n");
    ok(unread(probe(0), "cannot list"), "class/infiniband that is not a directory: unjudged, with the error");
    fresh();
    ok(unread(probe(-1), "NCCLSHIM_FABRIC_BUDGET="), "a malformed budget: unjudged, naming the setting");
    struct fabric_facts g;
    fabric_probe_read("relative/sys", 0, &g);
    ok(unread(g, "NCCLSHIM_SYSFS_ROOT='relative/sys' is not an absolute path"), "a relative NCCLSHIM_SYSFS_ROOT");
    fabric_probe_read(NULL, 0, &g);
    ok(unread(g, "not an absolute path"), "no root at all");
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", root);
}

int main(void)
{
    test_estimates();
    test_unjudged();
    test_by_devices();
    test_by_budget();
    test_frugal_refused();
    test_scale();
    test_probe();
    return tap_done();
}
