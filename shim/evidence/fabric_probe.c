/*
 * Reads a host's fabric from sysfs (shim/evidence/fabric_probe.h).  EFA devices
 * appear under class/infiniband like InfiniBand ones, with PCI vendor 0x1d0f
 * and port link_layer "Unknown" (rdma-core#884); NCCL's own IB transport takes
 * only ports whose link_layer is InfiniBand or Ethernet and that are ACTIVE
 * (net_ib/init.cc).  Content that is not what the kernel writes makes the
 * fabric unjudged, never a guess: auto then keeps socket.
 */
#define _GNU_SOURCE
#include "fabric_probe.h"

#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EFA_VENDOR 0x1d0f
#define NVIDIA_VENDOR 0x10de
/* More entries than any host has: a tree that big is not sysfs. */
#define MAX_RDMA_ENTRIES 4096
#define MAX_PCI_ENTRIES 65536
#define MAX_PORTS 64

static int unreadable(struct fabric_facts *f, const char *fmt, const char *a, const char *b)
    __attribute__((format(printf, 2, 0)));
static int unreadable(struct fabric_facts *f, const char *fmt, const char *a, const char *b)
{
    f->state = FABRIC_UNREADABLE;
    snprintf(f->why, sizeof(f->why), fmt, a, b);
    return -1;
}

/* A small sysfs file without its trailing newline: its length, -1 if absent
 * or unreadable, -2 if longer than a sysfs attribute of these is. */
static int read_attr(const char *path, char *buf, size_t cap)
{
    /* O_NONBLOCK: a FIFO where an attribute should be cannot stall an init. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap);
    close(fd);
    if (n < 0)
        return -1;
    if ((size_t)n >= cap)
        return -2;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\0'))
        n--;
    buf[n] = '\0';
    return (int)n;
}

/* "0x1d0f": 0x and 1..4 hex digits; -1 otherwise. */
static long parse_vendor(const char *s)
{
    if (strncmp(s, "0x", 2) != 0 || strlen(s) < 3 || strlen(s) > 6 || strspn(s + 2, "0123456789abcdefABCDEF") !=
        strlen(s + 2))
        return -1;
    return strtol(s + 2, NULL, 16);
}

static const char *path_of(char *buf, size_t cap, const char *a, const char *b, const char *c)
{
    int n = snprintf(buf, cap, "%s/%s%s%s", a, b, c ? "/" : "", c ? c : "");
    return n > 0 && (size_t)n < cap ? buf : NULL;
}

/* A port usable by NCCL's IB transport: 1; not usable: 0; malformed: -1 (f says why). */
static int port_usable(const char *portdir, struct fabric_facts *f)
{
    char path[PATH_MAX], ll[64], st[64];
    if (!path_of(path, sizeof(path), portdir, "link_layer", NULL) || read_attr(path, ll, sizeof(ll)) < 0)
        return unreadable(f, "cannot read %.150s (%s)", path, "a port without link_layer is not sysfs's");
    if (strcmp(ll, "InfiniBand") && strcmp(ll, "Ethernet") && strcmp(ll, "Unknown"))
        return unreadable(f, "%.150s is '%.40s', not InfiniBand, Ethernet or Unknown", path, ll);
    if (!path_of(path, sizeof(path), portdir, "state", NULL) || read_attr(path, st, sizeof(st)) < 0)
        return unreadable(f, "cannot read %.150s%s", path, "");
    const char *colon = strstr(st, ": ");
    if (!colon || colon == st || strspn(st, "0123456789") != (size_t)(colon - st) || !colon[2])
        return unreadable(f, "%.150s is '%.40s', not '<number>: <STATE>' as the kernel writes it", path, st);
    return strcmp(ll, "Unknown") != 0 && strcmp(colon + 2, "ACTIVE") == 0;
}

/* One device of class/infiniband: 1 EFA, 2 IB/RoCE, 0 neither, -1 malformed. */
static int classify_device(const char *devdir, const char *name, struct fabric_facts *f)
{
    char path[PATH_MAX], v[64];
    if (!path_of(path, sizeof(path), devdir, "device", "vendor"))
        return unreadable(f, "path too long under %.150s%s", devdir, "");
    int n = read_attr(path, v, sizeof(v));
    if (n >= 0 || n == -2) {
        long vendor = n >= 0 ? parse_vendor(v) : -1;
        if (vendor < 0)
            return unreadable(f, "%.150s is '%.40s', not a PCI vendor id such as 0x1d0f", path, n >= 0 ? v : "(long)");
        if (vendor == EFA_VENDOR)
            return 1;
    }
    if (!path_of(path, sizeof(path), devdir, "ports", NULL))
        return unreadable(f, "path too long under %.150s%s", devdir, "");
    DIR *d = opendir(path);
    if (!d)
        return 0; /* no ports, no vendor we know: not a device NCCL takes */
    int usable = 0, nports = 0;
    struct dirent *e;
    while (usable >= 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char portdir[PATH_MAX];
        if (++nports > MAX_PORTS || !path_of(portdir, sizeof(portdir), path, e->d_name, NULL)) {
            usable = unreadable(f, "%.60s: more ports than a device has, or a path too long (%.40s)", name, e->d_name);
            break;
        }
        int u = port_usable(portdir, f);
        usable = u < 0 ? -1 : usable || u;
    }
    closedir(d);
    return usable < 0 ? -1 : usable ? 2 : 0;
}

static void read_rdma(const char *root, struct fabric_facts *f)
{
    char dir[PATH_MAX];
    if (!path_of(dir, sizeof(dir), root, "class", "infiniband")) {
        unreadable(f, "NCCLSHIM_SYSFS_ROOT is too long (%.60s)%s", root, "");
        return;
    }
    DIR *d = opendir(dir);
    if (!d) {
        if (errno != ENOENT)
            unreadable(f, "cannot list %.150s: %s", dir, strerror(errno));
        return; /* absent: no RDMA device on this host */
    }
    int efa = 0, ib = 0, entries = 0;
    struct dirent *e;
    while (f->state == FABRIC_READ && (e = readdir(d)) != NULL) {
        char devdir[PATH_MAX];
        if (e->d_name[0] == '.')
            continue;
        if (++entries > MAX_RDMA_ENTRIES || !path_of(devdir, sizeof(devdir), dir, e->d_name, NULL)) {
            unreadable(f, "%.150s: more than 4096 entries, or a path too long (%.40s)", dir, e->d_name);
            break;
        }
        int c = classify_device(devdir, e->d_name, f);
        efa += c == 1;
        ib += c == 2;
    }
    closedir(d);
    f->devices = efa + ib;
    f->kind = efa && ib ? FABRIC_MIXED : efa ? FABRIC_EFA : ib ? FABRIC_IB : FABRIC_NONE;
}

/* NVIDIA display or 3D controllers (PCI class 0x0300xx, 0x0302xx). */
static int count_gpus(const char *root)
{
    char dir[PATH_MAX];
    if (!path_of(dir, sizeof(dir), root, "bus/pci", "devices"))
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int gpus = 0, entries = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && ++entries <= MAX_PCI_ENTRIES && gpus < FABRIC_MAX_COUNT) {
        char path[PATH_MAX], v[64], c[64];
        if (e->d_name[0] == '.' || !path_of(path, sizeof(path), dir, e->d_name, "vendor") ||
            read_attr(path, v, sizeof(v)) < 0 || parse_vendor(v) != NVIDIA_VENDOR)
            continue;
        if (path_of(path, sizeof(path), dir, e->d_name, "class") && read_attr(path, c, sizeof(c)) >= 0 &&
            (strncmp(c, "0x0300", 6) == 0 || strncmp(c, "0x0302", 6) == 0))
            gpus++;
    }
    closedir(d);
    return gpus;
}

void fabric_probe_read(const char *root, int budget, struct fabric_facts *f)
{
    memset(f, 0, sizeof(*f));
    f->state = FABRIC_READ;
    if (budget < 0) {
        unreadable(f, "NCCLSHIM_FABRIC_BUDGET='%.40s' is malformed (its bad-setting warning says why)%s",
                   getenv("NCCLSHIM_FABRIC_BUDGET") ? getenv("NCCLSHIM_FABRIC_BUDGET") : "", "");
        return;
    }
    f->budget = budget;
    if (!root || root[0] != '/') {
        unreadable(f, "NCCLSHIM_SYSFS_ROOT='%.60s' is not an absolute path (a test-only setting: unset it)%s",
                   root ? root : "", "");
        return;
    }
    read_rdma(root, f);
    if (f->state != FABRIC_READ) {
        f->kind = f->devices = 0;
        return;
    }
    f->gpus = count_gpus(root);
}

static struct fabric_facts g_facts;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void probe_once(void)
{
    const char *root = getenv("NCCLSHIM_SYSFS_ROOT");
    fabric_probe_read(root && *root ? root : "/sys", shim_config()->fabric_budget, &g_facts);
}

void fabric_probe(struct fabric_facts *out)
{
    pthread_once(&g_once, probe_once);
    *out = g_facts;
}
